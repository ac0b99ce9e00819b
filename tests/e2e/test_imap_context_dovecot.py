"""RFC 5267 behaviour compared with Dovecot 2.3 (which advertises
CONTEXT=SEARCH) on the same messages: the interop file's Dovecot on a
loopback port and petreld each get the same two-session script (PARTIAL
windows and their errors, live SEARCH contexts that another session's
STORE, EXPUNGE and APPEND change, the session's own STORE, CANCELUPDATE,
the context limit), and the ESEARCH lines, NOUPDATE refusals and tagged
results must be the same. Where Dovecot's reply text carries timings or
other wording, only the status word is compared."""

import imaplib
import os
import re
import socket
import time

import pytest

from test_storage_dovecot_interop import (DOVECOT, PASSWORD, USER, _nobody, dovecot,  # noqa: F401
                                          listen_addr, petrel_mail_config, workroot)

pytestmark = pytest.mark.skipif(not os.path.exists(DOVECOT), reason="dovecot not installed")


def message(i):
    return (f"From: u{i}@example.org\r\nTo: x@example.org\r\nSubject: s{9 - i}\r\n"
            f"Date: Mon, 0{i} Jan 2026 10:00:00 +0000\r\n\r\nbody {i}\r\n").encode()


class Session:
    def __init__(self, host, port):
        self.s = socket.create_connection((host, port), timeout=10)
        self.f = self.s.makefile("rb")
        self.f.readline()
        self.n = 0

    def cmd(self, text, tag=None):
        self.n += 1
        tag = tag or f"t{self.n}"
        self.s.sendall(f"{tag} {text}\r\n".encode())
        lines = []
        while True:
            line = self.f.readline().decode().rstrip("\r\n")
            assert line, text
            lines.append(line)
            if line.startswith(tag + " "):
                return lines


def kept(lines):
    """What is compared: ESEARCH lines, NOUPDATE refusals (code only),
    and the tagged status word."""
    out = []
    for line in lines:
        if line.startswith("* ESEARCH"):
            out.append(line)
        elif line.startswith("* NO [NOUPDATE"):
            out.append(line[:line.index("]") + 1])
        elif not line.startswith("*"):
            out.append(line.split()[1])
    return out


def until_esearch(a, n=1, timeout=5):
    """NOOPs until `n` ESEARCH lines came (another session's change
    reaches petreld's session when the folder's watch fires; Dovecot's at
    once), then one more NOOP for anything left."""
    got = []
    deadline = time.monotonic() + timeout
    while len([x for x in got if x.startswith("* ESEARCH")]) < n and time.monotonic() < deadline:
        got += [x for x in a.cmd("NOOP") if x.startswith("*")]
    got += [x for x in a.cmd("NOOP") if x.startswith("*")]
    return [x for x in got if x.startswith("* ESEARCH")]


def script(host, port):
    m = imaplib.IMAP4(host, port, timeout=30)
    m.login(USER, PASSWORD)
    for i in range(1, 9):
        assert m.append("INBOX", r"(\Seen)" if i % 2 else None, None, message(i))[0] == "OK"
    m.logout()
    a, b = Session(host, port), Session(host, port)
    for s in (a, b):
        s.cmd(f"LOGIN {USER} {PASSWORD}")
        assert s.cmd("SELECT INBOX")[-1].split()[1] == "OK"
    out = []
    for text in ["SEARCH RETURN (PARTIAL 1:3) ALL", "SEARCH RETURN (PARTIAL 3:1) ALL",
                 "SEARCH RETURN (PARTIAL 5:100) ALL", "SEARCH RETURN (PARTIAL 50:100) ALL",
                 "SEARCH RETURN (MIN PARTIAL 2:3 COUNT) ALL", "UID SEARCH RETURN (PARTIAL 2:3) ALL",
                 "UID SEARCH RETURN (PARTIAL 1:2) UNSEEN", "SORT RETURN (PARTIAL 2:3) (SUBJECT) UTF-8 ALL",
                 "SEARCH RETURN (PARTIAL 1:2 ALL) ALL", "SEARCH RETURN (PARTIAL 1:2 PARTIAL 3:4) ALL",
                 "SEARCH RETURN (PARTIAL 0:2) ALL", "SEARCH RETURN (PARTIAL 1:*) ALL",
                 "SEARCH RETURN (PARTIAL) ALL", "SEARCH RETURN (UPDATE UPDATE) ALL",
                 "SEARCH RETURN (CONTEXT COUNT) UNSEEN"]:
        out.append((text, kept(a.cmd(text, "P"))))
    for tag, text in [("B01", "UID SEARCH RETURN (UPDATE COUNT) UNSEEN"),
                      ("B02", "SEARCH RETURN (UPDATE) SEEN"),
                      ("B03", "SEARCH RETURN (UPDATE ALL) 1:3"),
                      ("B01", "UID SEARCH RETURN (UPDATE) UNSEEN")]:
        out.append((text, kept(a.cmd(text, tag))))
    b.cmd("STORE 2 +FLAGS (\\Seen)")
    out.append(("B stores 2 +Seen", until_esearch(a, 2)))
    b.cmd("STORE 3 +FLAGS (\\Deleted)")
    b.cmd("EXPUNGE")
    out.append(("B expunges 3", until_esearch(a, 2)))
    out.append(("own STORE", kept(a.cmd("STORE 1 -FLAGS (\\Seen)"))))
    m = imaplib.IMAP4(host, port, timeout=30)
    m.login(USER, PASSWORD)
    m.append("INBOX", None, None, message(9))
    m.logout()
    out.append(("B appends", until_esearch(a, 1)))
    for text in ['CANCELUPDATE "B01"', 'CANCELUPDATE "B01"', 'CANCELUPDATE "nosuch"',
                 "CANCELUPDATE B02", "CANCELUPDATE"]:
        out.append((text, kept(a.cmd(text))))
    for i in range(10):
        out.append((f"L{i}", kept(a.cmd("UID SEARCH RETURN (UPDATE) ALL", f"L{i}"))))
    a.cmd("LOGOUT")
    b.cmd("LOGOUT")
    return out


def test_context_answers_match_dovecot(petreld, dovecot, workroot, tmp_path):  # noqa: F811
    home_root = workroot / "home"
    uid_, gid_ = _nobody()
    os.chown(home_root, uid_, gid_)
    dv = dovecot().start()
    try:
        expected = script("127.0.0.1", dv.port)
    finally:
        dv.stop()
    assert not dv.errors(), "\n".join(dv.errors())
    # Dovecot really kept contexts: the updates are there.
    assert dict(expected)["B stores 2 +Seen"], expected
    d = petreld(petrel_mail_config(tmp_path / "petrel-home", tmp_path))
    got = script(*listen_addr(d, "imap"))
    differing = [(e[0], {"dovecot": e[1], "petrel": g[1]}) for e, g in zip(expected, got)
                 if e != g]
    assert not differing, differing
    assert len(got) == len(expected)
    assert [k for k, v in got if any(x.startswith("* NO [NOUPDATE") for x in v)] == \
        [f"L{i}" for i in range(8, 10)], got  # B02, B03 and L0-L7 make 10
    assert re.search(r"REMOVEFROM", str(dict(got)["B expunges 3"]))
