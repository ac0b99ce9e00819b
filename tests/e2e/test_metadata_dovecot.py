"""METADATA interoperability with Dovecot 2.3 (mail_attribute_dict).

The same SETMETADATA commands go to Petrel and, on the very same maildir
(so the folders have the same GUIDs), to a Dovecot with
`mail_attribute_dict = file:...` and `imap_metadata = yes`. Then:
- both servers answer the same GETMETADATA commands with the same untagged
  lines (the tagged text differs: "GETMETADATA complete" as RFC 5464's
  examples have it, Dovecot's "Getmetadata completed.");
- the key/value pairs Dovecot wrote into its dict file are the ones Petrel
  wrote into its dict (read back through the dict API): same keys, same
  values. The container differs and cannot be shared: Dovecot's file dict
  is a text file of key and value lines rewritten whole on each change,
  Petrel's is its crash-safe record log (docs/dicts.md); an operator moving
  between the two copies the pairs (or uses one SQL or Redis dict)."""

import os
import re
import socket

import pytest

from conftest import free_port
from test_storage_dovecot_interop import (DOVECOT, PASSWORD, USER, Dovecot, _nobody, chown_tree,
                                          dovecot, petrel_mail_config, workroot)  # noqa: F401

pytestmark = pytest.mark.skipif(not os.path.exists(DOVECOT), reason="dovecot not installed")

SETS = [
    'SETMETADATA INBOX (/private/comment "My own comment" /shared/comment "Shared comment")',
    'SETMETADATA Work (/private/vendor/example/colour "#ff0000" /shared/Title "Team")',
    'SETMETADATA Work (/private/filters/values/small "SMALLER 5000")',
    'SETMETADATA "" (/private/note "mine")',
]
GETS = [
    'GETMETADATA "INBOX" (/shared/comment /private/comment)',
    'GETMETADATA (DEPTH infinity) "Work" /private',
    'GETMETADATA (DEPTH 1) "Work" /shared',
    'GETMETADATA (MAXSIZE 5) "Work" (/private/vendor/example/colour /shared/title)',
    'GETMETADATA "" /private/note',
]


class MetadataDovecot(Dovecot):
    def config(self):
        return super().config() + f"""
mail_attribute_dict = file:{self.home_root}/%u/dovecot-attributes
protocol imap {{
  imap_metadata = yes
}}
"""


def parse_metadata(data):
    """'* METADATA mailbox (entry value ...)' as (mailbox, [(entry, value)]),
    whatever string forms (atom, quoted, literal, literal8) carry them."""
    pos = len(b"* METADATA ")
    tokens = []
    while pos < len(data):
        c = data[pos:pos + 1]
        if c in (b" ", b"(", b")", b"\r", b"\n"):
            pos += 1
        elif c == b'"':
            m = re.match(rb'"((?:[^"\\\\]|\\\\.)*)"', data[pos:])
            tokens.append(re.sub(rb"\\\\(.)", rb"\1", m.group(1)))
            pos += m.end()
        elif c in (b"{", b"~"):
            m = re.match(rb"~?\{(\d+)\}\r\n", data[pos:])
            n = int(m.group(1))
            start = pos + m.end()
            tokens.append(data[start:start + n])
            pos = start + n
        else:
            m = re.match(rb"[^ ()\r\n]+", data[pos:])
            tokens.append(m.group(0))
            pos += m.end()
    mailbox, rest = tokens[0], tokens[1:]
    # RFC 5464 leaves the order of entries open (Dovecot's follows its dict)
    return mailbox, sorted((rest[i], rest[i + 1]) for i in range(0, len(rest), 2))


class Session:
    def __init__(self, host, port):
        self.sock = socket.create_connection((host, port), timeout=30)
        self.f = self.sock.makefile("rb")
        assert self.f.readline().startswith(b"* OK")
        self.n = 0
        assert self.cmd(f"LOGIN {USER} {PASSWORD}")[1].startswith(b"OK"), "login"

    def cmd(self, text):
        """(untagged lines, tagged result without the tag)."""
        self.n += 1
        tag = f"t{self.n}".encode()
        self.sock.sendall(tag + b" " + text.encode() + b"\r\n")
        lines = []
        while True:
            line = self.f.readline()
            assert line, "connection closed"
            if line.startswith(tag + b" "):
                return lines, line[len(tag) + 1:].rstrip(b"\r\n")
            # a response with literals continues after each one's bytes
            while re.search(rb"~?\{(\d+)\}\r\n$", line):
                n = int(re.search(rb"\{(\d+)\}\r\n$", line).group(1))
                line += self.f.read(n) + self.f.readline()
            # untagged lines that are not METADATA (capabilities, ...) are
            # each server's own business
            if line.startswith(b"* METADATA"):
                lines.append(parse_metadata(line))

    def run(self, commands):
        out = []
        for c in commands:
            lines, done = self.cmd(c)
            assert done.startswith(b"OK"), (c, done)
            out.append((c, lines, done))
        return out

    def close(self):
        self.sock.close()


def petrel_dict(d):
    """Every pair in Petrel's metadata dict: {key: value}."""
    import base64
    import json
    pairs = {}
    for path, op in (("shared/", None), ("priv/", {"username": USER})):
        body = {"path": path, "flags": 1}
        if op:
            body["op"] = op
        r = d.post("backend", "/api/backend/dict/meta/iterate", body=body)
        assert r.status == 200, r
        for line in r.body.decode().splitlines():
            row = json.loads(line)
            pairs[row["key"]] = base64.b64decode(row["values"][0]).decode()
    return pairs


def dovecot_dict(path):
    """Dovecot's file dict: key and value lines, one after the other."""
    lines = path.read_text().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    assert len(lines) % 2 == 0, lines
    return {lines[i]: lines[i + 1] for i in range(0, len(lines), 2)}


def test_same_entries_as_dovecot(petreld, dovecot, workroot, tmp_path):  # noqa: F811
    home_root = workroot / "home"
    cfg = petrel_mail_config(home_root, tmp_path)
    cfg["dicts"] = {"meta": {"driver": "file", "path": str(tmp_path / "meta.db")}}
    cfg["mail"]["attribute_dict"] = "meta"
    d = petreld(cfg)
    host, port = d.config["imap"]["listen"][0].rsplit(":", 1)
    p = Session(host, int(port))
    assert p.cmd("CREATE Work")[1].startswith(b"OK")
    p.run(SETS)
    petrel_gets = p.run(GETS)
    p.close()
    petrel_pairs = petrel_dict(d)
    d.stop()

    uid, gid = _nobody()
    chown_tree(home_root, uid, gid)
    dv = MetadataDovecot(workroot, home_root).start()
    s = Session("127.0.0.1", dv.port)
    s.run(SETS)
    dovecot_gets = s.run(GETS)
    s.close()
    dv.stop()
    assert not dv.errors(), "\n".join(dv.errors())

    # the same answers, line for line
    for (c, plines, pdone), (_, dlines, ddone) in zip(petrel_gets, dovecot_gets):
        assert plines == dlines, (c, plines, dlines)
        # the same response code (LONGENTRIES) where there is one
        assert pdone.split(b"]")[0] == ddone.split(b"]")[0] or b"[" not in ddone, (c, pdone, ddone)
    # the same keys and values in the dicts
    dpairs = dovecot_dict(home_root / USER / "dovecot-attributes")
    assert dpairs == petrel_pairs


# RFC 5464's grammar at its edges, on both servers: (command, Petrel's
# result, Dovecot 2.3's result). Where they differ the difference is
# Petrel's documented choice (docs/metadata.md, "Interoperability").
EDGES = [
    # erratum 2785: options before the mailbox; the RFC's printed examples
    # had them after it, which Petrel also takes and Dovecot refuses
    ('GETMETADATA (MAXSIZE 1024) "INBOX" (/shared/comment)', "OK", "OK"),
    ('GETMETADATA "INBOX" (MAXSIZE 1024) (/shared/comment)', "OK", "BAD"),
    # erratum 3868: several entries only in a list
    ("GETMETADATA INBOX /private/comment /shared/comment", "BAD", "BAD"),
    # 4.2.1: a value as long as MAXSIZE is returned; one octet less is not
    ('GETMETADATA (MAXSIZE 14) "INBOX" /private/comment', "OK", "OK"),
    ('GETMETADATA (MAXSIZE 13) "INBOX" /private/comment', "OK [METADATA LONGENTRIES 14]",
     "OK [METADATA LONGENTRIES 14]"),
    # 4.2.2: DEPTH is 0, 1 or infinity
    ("GETMETADATA (DEPTH 2) INBOX /private", "BAD", "BAD"),
    # 3.2: "*", "%", "//", a trailing "/" and control characters are BAD
    ("GETMETADATA INBOX /shared/a*", "BAD", "BAD"),
    ("GETMETADATA INBOX /shared//a", "BAD", "BAD"),
    ("GETMETADATA INBOX /shared/a/", "BAD", "BAD"),
    ('GETMETADATA INBOX "/shared/a\tb"', "BAD", "BAD"),
    ("GETMETADATA INBOX /comment", "BAD", "BAD"),
    # 4.3: entry-values are pairs
    ("SETMETADATA INBOX (/shared/comment)", "BAD", "BAD"),
]


def test_grammar_edges_against_dovecot(petreld, dovecot, workroot, tmp_path):  # noqa: F811
    home_root = workroot / "home"
    cfg = petrel_mail_config(home_root, tmp_path)
    cfg["dicts"] = {"meta": {"driver": "file", "path": str(tmp_path / "meta.db")}}
    cfg["mail"]["attribute_dict"] = "meta"
    d = petreld(cfg)
    host, port = d.config["imap"]["listen"][0].rsplit(":", 1)

    def results(session):
        out = []
        for c, _, _ in EDGES:
            lines, done = session.cmd(c)
            word = done.split(b" ")[0].decode()
            code = re.match(rb"OK (\[METADATA LONGENTRIES \d+\])", done)
            out.append((c, word + (" " + code.group(1).decode() if code else ""), lines))
        return out

    p = Session(host, int(port))
    p.run(SETS[:1])
    petrel = results(p)
    p.close()
    d.stop()

    uid, gid = _nobody()
    chown_tree(home_root, uid, gid)
    dv = MetadataDovecot(workroot, home_root).start()
    s = Session("127.0.0.1", dv.port)
    s.run(SETS[:1])
    dovecot_out = results(s)
    s.close()
    dv.stop()
    assert not dv.errors(), "\n".join(dv.errors())

    for (c, want_p, want_d), (_, got_p, lines_p), (_, got_d, lines_d) in zip(EDGES, petrel,
                                                                            dovecot_out):
        assert (got_p, got_d) == (want_p, want_d), c
        if got_p == got_d == "OK":
            assert lines_p == lines_d, (c, lines_p, lines_d)
