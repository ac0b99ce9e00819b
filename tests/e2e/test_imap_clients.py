"""IMAP interoperability with real clients, scripted: mbsync (isync) syncing
a 500-message maildir up to Petrel and back down into an empty one, then an
incremental two-way run after flag changes on both sides; mutt driven through
a pseudo-terminal (list, read, pipe, flag, copy, delete); curl's IMAP URLs
(fetch, list, search, append, STARTTLS, implicit TLS); and a Thunderbird-like
start-up session through imaplib's IMAP4_SSL (ID, LIST, LSUB, SELECT
(CONDSTORE), UID FETCH of flags and header fields, chunked partial bodies,
body parts, IDLE woken by another session, CHANGEDSINCE resync); a server-side
search as Thunderbird sends it (CHARSET UTF-8 literal; xfail, see
SEARCH_MIME_BUG).

Client binaries that are missing make their tests skip; scripts/setup.sh
installs isync, mutt and curl, so CI runs them all."""

import base64
import fcntl
import imaplib
import os
import pty
import random
import re
import select
import shutil
import socket
import ssl
import struct
import subprocess
import termios
import time
from pathlib import Path

import pytest

from test_imap_session import imap_overrides, addr

USER, PASSWORD = "alice", "wonderland"


def need(binary):
    path = shutil.which(binary)
    if path is None:
        pytest.skip(f"{binary} is not installed (scripts/setup.sh installs it)")
    return path


@pytest.fixture
def imapd(petreld, tmp_path, pki):
    cfg = imap_overrides(tmp_path, pki)
    cfg["mail"]["fsync"] = "never"  # speed: durability is not what these tests are about
    return petreld(cfg)


def tls_context(pki):
    return ssl.create_default_context(cafile=str(pki / "ca.pem"))


def login(d, user=USER, password=PASSWORD):
    m = imaplib.IMAP4(*addr(d))
    m.login(user, password)
    return m


# ---------- realistic messages ----------

WORDS = ("the quick brown fox jumps over lazy dog mail server petrel storage index "
         "message folder client sync header body attachment release meeting agenda "
         "invoice report draft review patch build test coverage latency budget").split()
UTF8_WORDS = ["Grüße", "naïve", "café", "Ærø", "Straße", "日本語", "Привет", "ĉiuĵaŭde",
              "😀"]
PEOPLE = [("Alice Example", "alice@example.org"), ("Bob Builder", "bob@example.net"),
          ("Carol Q. Public", "carol@example.com"), ("Dave", "dave@lists.example.org"),
          ("Émile Zola", "emile@example.fr")]


def _text(rng, nbytes, words=WORDS, width=72):
    lines, line, size = [], [], 0
    while size < nbytes:
        w = rng.choice(words)
        if line and sum(len(x) + 1 for x in line) + len(w) > width:
            lines.append(" ".join(line))
            size += len(lines[-1]) + 1
            line = []
        line.append(w)
    lines.append(" ".join(line))
    return "\n".join(lines)


def _addr(person):
    name, mail = person
    return f'"{name}" <{mail}>' if "." in name else f"{name} <{mail}>"


def make_message(rng, i, box):
    """One realistic message, LF line ends, as (bytes, kind, unix time)."""
    kind = rng.choices(["plain", "long", "attach", "alt", "utf8", "latin1", "tiny"],
                       weights=[30, 6, 15, 12, 12, 5, 8])[0]
    frm, to = rng.sample(PEOPLE, 2)
    ts = 1_700_000_000 + i * 3607 + rng.randrange(3600)
    date = time.strftime("%a, %d %b %Y %H:%M:%S +0000", time.gmtime(ts))
    subject = f"[{box}] {kind} message {i}: " + " ".join(rng.sample(WORDS, 4))
    if kind == "utf8":
        subject += " " + " ".join(rng.sample(UTF8_WORDS, 3))
    head = [f"Return-Path: <{frm[1]}>",
            f"Received: from mx.example.org (mx.example.org [192.0.2.{i % 250 + 1}])\n"
            f"\tby mail.example.org with ESMTPS id {i:08x}\n\tfor <{to[1]}>; {date}",
            f"From: {_addr(frm)}", f"To: {_addr(to)}"]
    if rng.random() < 0.3:
        head.append(f"Cc: {_addr(rng.choice(PEOPLE))}, {_addr(rng.choice(PEOPLE))}")
    head += [f"Subject: {subject}", f"Date: {date}", f"Message-ID: <{box}.{i}@example.org>"]
    if i > 2 and rng.random() < 0.3:
        head.append(f"In-Reply-To: <{box}.{i - 1}@example.org>")
        head.append(f"References: <{box}.{i - 2}@example.org>\n <{box}.{i - 1}@example.org>")
    if rng.random() < 0.1:
        head.append("X-Priority: 1 (Highest)")
    charset = "utf-8"
    if kind in ("plain", "long", "tiny"):
        n = {"plain": rng.randrange(200, 6000), "long": rng.randrange(40_000, 200_000),
             "tiny": rng.randrange(1, 60)}[kind]
        head += ["MIME-Version: 1.0", "Content-Type: text/plain; charset=us-ascii",
                 "Content-Transfer-Encoding: 7bit"]
        body = _text(rng, n) + "\n"
        if kind == "tiny" and rng.random() < 0.5:
            body = body.rstrip("\n")  # no final newline at all
    elif kind == "utf8":
        head += ["MIME-Version: 1.0", "Content-Type: text/plain; charset=utf-8",
                 "Content-Transfer-Encoding: 8bit"]
        body = _text(rng, rng.randrange(300, 8000), WORDS + UTF8_WORDS) + "\n"
    elif kind == "latin1":
        head += ["MIME-Version: 1.0", "Content-Type: text/plain; charset=iso-8859-1",
                 "Content-Transfer-Encoding: 8bit"]
        body = _text(rng, rng.randrange(300, 3000), WORDS + ["façade", "über", "señor"]) + "\n"
        charset = "latin-1"
    elif kind == "alt":
        b = f"=_alt_{i}_{rng.randrange(1 << 30):x}"
        text = _text(rng, rng.randrange(200, 3000))
        html = "<html><body><p>" + text.replace("\n", "</p>\n<p>") + "</p></body></html>"
        head += ["MIME-Version: 1.0", f'Content-Type: multipart/alternative; boundary="{b}"']
        body = (f"This is a multi-part message in MIME format.\n\n--{b}\n"
                "Content-Type: text/plain; charset=us-ascii\n\n" + text +
                f"\n\n--{b}\nContent-Type: text/html; charset=us-ascii\n"
                "Content-Transfer-Encoding: quoted-printable\n\n" + html +
                f"\n\n--{b}--\n")
    else:  # attach: nested alternative, a base64 attachment, a forwarded message
        b = f"----=_Part_{i}_{rng.randrange(1 << 30)}"
        blob = rng.randbytes(rng.choice([300, 2000, 20_000, 100_000, rng.randrange(1, 300_000)]))
        name = rng.choice(["report.pdf", "photo.jpg", "data.bin", "Ünïcode naïve.zip"])
        inner = f"=_inner_{i}"
        head += ["MIME-Version: 1.0", f'Content-Type: multipart/mixed; boundary="{b}"']
        body = (f"--{b}\n"
                f'Content-Type: multipart/alternative; boundary="{inner}"\n\n'
                f"--{inner}\nContent-Type: text/plain; charset=us-ascii\n\n"
                + _text(rng, rng.randrange(100, 1500)) +
                f"\n--{inner}\nContent-Type: text/html; charset=us-ascii\n\n<p>see attached</p>\n"
                f"--{inner}--\n\n--{b}\n"
                f'Content-Type: application/octet-stream; name="{name}"\n'
                "Content-Transfer-Encoding: base64\n"
                f'Content-Disposition: attachment; filename="{name}"\n\n'
                + base64.encodebytes(blob).decode() +
                f"\n--{b}\nContent-Type: message/rfc822\n\n"
                f"From: {_addr(to)}\nSubject: forwarded {i}\n\nforwarded body\n"
                f"\n--{b}--\n")
    return ("\n".join(head) + "\n\n" + body).encode(charset), kind, ts


def message_set(seed, box, count, crlf_share=0.75):
    """[(message-id, bytes, unix time)]; most messages CRLF (as received over
    SMTP), the rest LF-only."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        raw, _, ts = make_message(rng, i, box)
        if rng.random() < crlf_share:
            raw = raw.replace(b"\n", b"\r\n")
        out.append((f"<{box}.{i}@example.org>", raw, ts))
    return out


def crlf(raw):
    return raw.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")


def message_id(raw):
    m = re.search(rb"^Message-ID: *(<[^>\r\n]+>)", raw, re.M | re.I)
    assert m, raw[:300]
    return m.group(1).decode()


def strip_tuid(raw):
    """Drops the X-TUID header mbsync adds to the messages it uploads."""
    m = re.search(rb"\r?\n\r?\n", raw)
    end = m.end() if m else len(raw)
    return re.sub(rb"(?mi)^X-TUID: [^\r\n]*\r?\n", b"", raw[:end]) + raw[end:]


def normalize(raw):
    """mbsync stores LF in maildirs and CRLF on IMAP: compare with LF only."""
    return strip_tuid(raw).replace(b"\r\n", b"\n")


# ---------- mbsync ----------

# maildir info letter <-> IMAP flag (isync 1.4)
MAILDIR_FLAGS = {"D": "\\Draft", "F": "\\Flagged", "P": "$Forwarded", "R": "\\Answered",
                 "S": "\\Seen", "T": "\\Deleted"}
IMAP_TO_LETTER = {v.lower(): k for k, v in MAILDIR_FLAGS.items()}


def write_maildir(root, box, msgs, rng):
    """Writes msgs [(mid, raw, ts)] into root/box, with random flags;
    returns {mid: (raw, flags-letters, mtime)}."""
    d = root / box
    for sub in ("cur", "new", "tmp"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    out = {}
    for n, (mid, raw, ts) in enumerate(msgs):
        flags = "".join(sorted(f for f, p in (("S", 0.6), ("F", 0.08), ("R", 0.15), ("D", 0.02),
                                              ("P", 0.03)) if rng.random() < p))
        sub = "cur" if flags or rng.random() < 0.7 else "new"
        name = f"{ts}.M{n}P4242.testhost" + (f":2,{flags}" if sub == "cur" else "")
        path = d / sub / name
        path.write_bytes(raw)
        os.utime(path, (ts, ts))
        out[mid] = (raw, flags, ts)
    return out


def read_maildir(root):
    """{box: {mid: (raw, flags, mtime, path)}} for every maildir under root."""
    out = {}
    root = Path(root)
    for d in sorted(p.parent for p in root.rglob("cur") if p.is_dir()):
        box = {}
        for sub in ("cur", "new"):
            for f in (d / sub).iterdir():
                raw = f.read_bytes()
                flags = f.name.split(":2,", 1)[1] if ":2," in f.name else ""
                mid = message_id(raw)
                assert mid not in box, f"duplicate {mid} in {d}"
                box[mid] = (raw, flags, int(f.stat().st_mtime), f)
        out[str(d.relative_to(root))] = box
    return out


def set_maildir_flags(path, flags):
    head = path.name.split(":2,", 1)[0]
    new = path.parent.parent / "cur" / f"{head}:2,{''.join(sorted(flags))}"
    path.rename(new)
    return new


def imap_letters(flag_text):
    """'\\Seen \\Flagged' -> 'FS' (only the flags a maildir can hold)."""
    return "".join(sorted(IMAP_TO_LETTER[f.lower()] for f in flag_text.split()
                          if f.lower() in IMAP_TO_LETTER))


def mbsync_version():
    out = subprocess.run(["mbsync", "--version"], capture_output=True, text=True).stdout
    m = re.search(r"(\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else (1, 4)


def write_mbsyncrc(tmp_path, d, pki, src, dst):
    # isync 1.5 renamed SSLType to TLSType. isync checks host names against
    # DNS names only, so the server certificate itself goes in as a trusted
    # "host" certificate next to the CA.
    tls_key = "TLSType" if mbsync_version() >= (1, 5) else "SSLType"
    certs = tmp_path / "mbsync-certs.pem"
    certs.write_bytes((pki / "server.pem").read_bytes() + (pki / "ca.pem").read_bytes())
    state = tmp_path / "mbsync-state"
    state.mkdir(exist_ok=True)
    host, port = addr(d)
    rc = tmp_path / "mbsyncrc"
    rc.write_text(f"""\
IMAPAccount petrel
Host {host}
Port {port}
User {USER}
Pass {PASSWORD}
{tls_key} STARTTLS
CertificateFile {certs}
SystemCertificates no
Timeout 30

IMAPStore petrel
Account petrel

MaildirStore src
Path {src}/
Inbox {src}/INBOX
SubFolders Verbatim

MaildirStore dst
Path {dst}/
Inbox {dst}/INBOX
SubFolders Verbatim

Channel up
Far :petrel:
Near :src:
Patterns *
Create Far
Sync All
Expunge Both
CopyArrivalDate yes
SyncState {state}/up-

Channel down
Far :petrel:
Near :dst:
Patterns *
Create Near
Sync All
Expunge Both
CopyArrivalDate yes
SyncState {state}/down-
""")
    return rc


def mbsync(rc, channel, tmp_path, timeout=60):
    """Runs one channel; on failure the same run is repeated with -D into a
    trace file, and the assertion names it."""
    proc = subprocess.run(["mbsync", "-c", str(rc), channel], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        trace = tmp_path / f"mbsync-{channel}.trace"
        with open(trace, "w") as f:
            subprocess.run(["mbsync", "-D", "-c", str(rc), channel], stdout=f, stderr=f,
                           timeout=timeout, stdin=subprocess.DEVNULL)
        pytest.fail(f"mbsync {channel} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}\n"
                    f"(rerun with -D: {trace})")
    return proc


def server_state(d, boxes, bodies=False):
    """{box: {mid: (flags letters, raw or None, internaldate, size)}} over IMAP."""
    m = login(d)
    out = {}
    for box in boxes:
        typ, data = m.select(f'"{box}"', readonly=True)
        assert typ == "OK", data
        items = "(FLAGS INTERNALDATE RFC822.SIZE BODY.PEEK[%s])" % (
            "" if bodies else "HEADER.FIELDS (MESSAGE-ID)")
        typ, data = m.uid("FETCH", "1:*", items)
        assert typ == "OK", data
        msgs = {}
        for part in data:
            if not isinstance(part, tuple):
                continue
            meta = part[0].decode()
            flags = re.search(r"FLAGS \(([^)]*)\)", meta).group(1)
            idate = re.search(r'INTERNALDATE "([^"]+)"', meta).group(1)
            size = int(re.search(r"RFC822.SIZE (\d+)", meta).group(1))
            mid = message_id(part[1])
            assert mid not in msgs, f"duplicate {mid} in {box} on the server"
            msgs[mid] = (imap_letters(flags), part[1] if bodies else None, idate, size)
        out[box] = msgs
    m.logout()
    return out


def imap_date(ts):
    return time.strftime("%d-%b-%Y %H:%M:%S +0000", time.gmtime(ts))


BOXES = {"INBOX": 400, "Archive": 100}


def edge_messages(box):
    """Unusual but legal messages: one 250 KB line, an empty body, lines of
    dots, an mbox "From " line first, a 2 MB body, an empty header field."""
    def msg(n, head, body):
        mid = f"<{box}.edge{n}@example.org>"
        return (mid, f"From: edge@example.org\nSubject: edge {n}\nMessage-ID: {mid}\n".encode()
                + head + b"\n" + body, 1_690_000_000 + n * 60)
    return [msg(0, b"Content-Type: text/html\n", b"<html>" + b"<p>x</p>" * 31250 + b"</html>\n"),
            msg(1, b"", b""),
            msg(2, b"", b".\n..\n.\n\n.\r\n"),
            msg(3, b"X-Empty:\nX-Folded:\n\tcontinued\n", b"body\n"),
            msg(4, b"Content-Type: text/plain\n", (b"y" * 76 + b"\n") * 27000),
            ("<From.line@example.org>", b"From edge@example.org Mon Jan  1 00:00:00 2024\n"
             b"From: edge@example.org\nSubject: mbox From line\nMessage-ID: <From.line@example.org>"
             b"\n\nbody\n", 1_690_001_000)]


@pytest.mark.slow
def test_mbsync_roundtrip_and_incremental(imapd, tmp_path, pki):
    need("mbsync")
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    rng = random.Random(7)
    model = {}  # box -> mid -> (normalized bytes, flags, mtime)
    originals = {}  # box -> mid -> bytes as written
    for seed, (box, count) in enumerate(BOXES.items()):
        msgs = message_set(100 + seed, box, count)
        if box == "Archive":
            msgs[-6:] = edge_messages(box)
        written = write_maildir(src, box, msgs, rng)
        model[box] = {mid: (normalize(raw), flags, ts) for mid, (raw, flags, ts) in
                      written.items()}
        originals[box] = {mid: raw for mid, (raw, _, _) in written.items()}
    assert sum(len(v) for v in model.values()) == 500
    rc = write_mbsyncrc(tmp_path, imapd, pki, src, dst)

    # 1. up: the local maildirs into Petrel (INBOX and a new folder).
    mbsync(rc, "up", tmp_path)
    server = server_state(imapd, BOXES, bodies=True)
    for box, msgs in model.items():
        assert set(server[box]) == set(msgs), box
        for mid, (_, flags, ts) in msgs.items():
            s_flags, s_raw, s_idate, s_size = server[box][mid]
            # What Petrel stores is the message mbsync sent: the original with
            # CRLF line ends plus mbsync's X-TUID header; nothing else changes.
            assert strip_tuid(s_raw) == crlf(originals[box][mid]), (box, mid)
            assert s_size == len(s_raw), (box, mid)
            assert s_flags == flags, (box, mid)
            assert s_idate == imap_date(ts), (box, mid)

    # 2. down: Petrel into an empty maildir tree; no difference to the source.
    mbsync(rc, "down", tmp_path)
    assert_maildirs_match(model, read_maildir(src), "src")
    assert_maildirs_match(model, read_maildir(dst), "dst")

    # 3. Changes on both sides, then an incremental two-way run: flags
    # changed locally and on the server, new messages on both sides, local
    # deletions (T, expunged by mbsync) and server expunges, a new nested
    # local folder.
    local = read_maildir(src)
    mids = sorted(local["INBOX"])
    rng.shuffle(mids)

    def set_flags(box, mid, flags):
        model[box][mid] = (model[box][mid][0], "".join(sorted(flags)), model[box][mid][2])

    for mid in mids[:15]:
        path, flags = local["INBOX"][mid][3], set(local["INBOX"][mid][1])
        flags ^= {rng.choice("SFR")}
        set_maildir_flags(path, flags)
        set_flags("INBOX", mid, flags)
    for mid in mids[15:18]:
        path, flags = local["INBOX"][mid][3], set(local["INBOX"][mid][1])
        set_maildir_flags(path, flags | {"T"})
        del model["INBOX"][mid]
    for n, (_, raw, ts) in enumerate(message_set(900, "INBOX", 3)):
        raw = raw.replace(b"<INBOX.", b"<INBOX.local", 1)
        p = src / "INBOX" / "new" / f"{ts}.L{n}.testhost"
        p.write_bytes(raw)
        os.utime(p, (ts, ts))
        model["INBOX"][message_id(raw)] = (normalize(raw), "", ts)
    nested = "Lists/petrel"
    written = write_maildir(src, nested, message_set(902, "Lists", 4), rng)
    model[nested] = {mid: (normalize(raw), flags, ts) for mid, (raw, flags, ts) in
                     written.items()}

    m = login(imapd)
    m.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    m.select("INBOX")

    def uid_of(mid):
        typ, data = m.uid("SEARCH", None, f'HEADER Message-ID "{mid}"')
        assert typ == "OK" and len(data[0].split()) == 1, (mid, data)
        return data[0].decode()

    for mid in mids[18:33]:
        letter = rng.choice("SFR")
        flags = set(model["INBOX"][mid][1])
        op = "-FLAGS" if letter in flags else "+FLAGS"
        typ, _ = m.uid("STORE", uid_of(mid), op, f"({MAILDIR_FLAGS[letter]})")
        assert typ == "OK"
        set_flags("INBOX", mid, flags ^ {letter})
    gone = ",".join(uid_of(mid) for mid in mids[33:35])
    assert m.uid("STORE", gone, "+FLAGS.SILENT", r"(\Deleted)")[0] == "OK"
    assert m.uid("EXPUNGE", gone)[0] == "OK"
    for mid in mids[33:35]:
        del model["INBOX"][mid]
    for _, raw, ts in message_set(901, "Archive", 2):
        raw = raw.replace(b"<Archive.", b"<Archive.remote", 1)
        typ, data = m.append("Archive", r"(\Seen \Flagged)", f'"{imap_date(ts)}"', crlf(raw))
        assert typ == "OK", data
        model["Archive"][message_id(raw)] = (normalize(raw), "FS", ts)
    m.logout()

    mbsync(rc, "up", tmp_path)
    mbsync(rc, "down", tmp_path)
    assert_maildirs_match(model, read_maildir(src), "src")
    assert_maildirs_match(model, read_maildir(dst), "dst")
    server = server_state(imapd, model)
    for box, msgs in model.items():
        assert {mid: s[0] for mid, s in server[box].items()} == \
            {mid: v[1] for mid, v in msgs.items()}, box

    # 4. A run with nothing to do changes nothing.
    def messages():
        return {p: p.stat().st_mtime_ns for p in dst.rglob("*")
                if p.is_file() and p.parent.name in ("cur", "new")}
    before = messages()
    mbsync(rc, "up", tmp_path)
    mbsync(rc, "down", tmp_path)
    assert messages() == before


def assert_maildirs_match(model, tree, label):
    # A folder only in the tree must be empty (a parent like "Lists" that
    # mbsync may create as a maildir of its own).
    assert set(model) <= set(tree), (label, set(model) - set(tree))
    assert all(not tree[box] for box in set(tree) - set(model)), label
    for box, msgs in model.items():
        got = tree[box]
        assert set(got) == set(msgs), (label, box, set(got) ^ set(msgs))
        for mid, (norm, flags, ts) in msgs.items():
            raw, g_flags, g_mtime, _ = got[mid]
            assert normalize(raw) == norm, (label, box, mid)
            assert g_flags == flags, (label, box, mid, g_flags, flags)
            assert g_mtime == ts, (label, box, mid)
# ---------- a small mailbox for the interactive clients ----------

def fill(d, count=6, box="INBOX", seed=55, extra_boxes=("Saved",)):
    """Appends `count` realistic messages (CRLF and LF-only) to box; returns
    [(uid, raw as appended)]."""
    m = login(d)
    m.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for name in extra_boxes:
        assert m.create(name)[0] == "OK"
    out = []
    for n, (_, raw, ts) in enumerate(message_set(seed, box, count, crlf_share=0.5)):
        flags = r"(\Flagged)" if n == 2 else None
        typ, data = m.append(box, flags, f'"{imap_date(ts)}"', raw)
        assert typ == "OK", data
        uid = int(re.search(rb"APPENDUID \d+ (\d+)", data[0]).group(1))
        out.append((uid, raw))
    m.logout()
    return out


def subject(raw):
    return re.search(rb"^Subject: ([^\r\n]*)", raw, re.M).group(1).decode("utf-8", "replace")


def flags_by_uid(d, box="INBOX"):
    m = login(d)
    m.select(f'"{box}"', readonly=True)
    typ, data = m.uid("FETCH", "1:*", "(FLAGS)")
    assert typ == "OK", data
    m.logout()
    out = {}
    for line in data:
        if line:
            mm = re.search(rb"UID (\d+) FLAGS \(([^)]*)\)|FLAGS \(([^)]*)\) UID (\d+)", line)
            if mm.group(1):
                out[int(mm.group(1))] = set(mm.group(2).decode().split())
            else:
                out[int(mm.group(4))] = set(mm.group(3).decode().split())
    return out


# ---------- mutt ----------

def run_in_pty(argv, cwd, env, timeout=30, typing=()):
    """Runs a full-screen program on a pseudo-terminal (mutt needs one);
    `typing` is [(bytes the screen must show first, keys to type)]. Returns
    (exit code, everything it drew)."""
    typing = list(typing)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env,
                            start_new_session=True)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the program exited and closed the pty
                    break
                if not data:
                    break
                out += data
                if typing and typing[0][0] in out:
                    os.write(master, typing.pop(0)[1])
            elif proc.poll() is not None:
                break
        else:
            proc.kill()
            proc.wait()
            pytest.fail(f"{argv[0]} did not finish in {timeout}s; screen so far:\n"
                        + out.decode("utf-8", "replace")[-3000:])
    finally:
        os.close(master)
    return proc.wait(), out


def write_muttrc(tmp_path, d, pki, tls):
    host, port = addr(d)
    rc = tmp_path / ("muttrc-tls" if tls else "muttrc")
    rc.write_text(f"""\
set folder="imap://{USER}@{host}:{port}/"
set spoolfile="+INBOX"
set imap_pass="{PASSWORD}"
set ssl_starttls={"yes" if tls else "no"}
set ssl_force_tls={"yes" if tls else "no"}
set ssl_ca_certificates_file="{pki / "ca.pem"}"
set certificate_file="{tmp_path / "mutt-certs"}"
set header_cache=""
set message_cachedir=""
set record=""
set postponed="+Drafts"
set move=no
set quit=yes
set delete=yes
set confirmappend=no
set confirmcreate=no
set mark_old=no
set resolve=no
set wait_key=no
set pipe_decode=no
set pipe_split=no
set pipe_sep=""
set beep=no
set sleep_time=0
set sort=mailbox-order
set timeout=10
set imap_keepalive=60
""")
    return rc


def mutt(tmp_path, rc, keys=None, folder="=INBOX", typing=(), debug=False):
    """Runs mutt on a pty: `keys` pushed into its input (done before the
    screen is drawn), `typing` typed when the screen shows something. With
    debug, mutt writes its IMAP trace to $HOME/.muttdebug0."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAIL", "MUTT"))}
    env.update(TERM="vt100", HOME=str(tmp_path), LANG="C.UTF-8", LC_ALL="C.UTF-8",
               EDITOR="/bin/true")
    argv = ["mutt", "-n", "-F", str(rc), "-f", folder] + (["-d", "2"] if debug else [])
    if keys:
        argv += ["-e", f'push "{keys}"']
    code, screen = run_in_pty(argv, tmp_path, env, typing=typing)
    assert code == 0, screen.decode("utf-8", "replace")[-3000:]
    return screen.decode("utf-8", "replace")


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "starttls"])
def test_mutt_lists_reads_flags_copies_deletes(imapd, tmp_path, pki, tls):
    need("mutt")
    msgs = fill(imapd)
    rc = write_muttrc(tmp_path, imapd, pki, tls)
    out = tmp_path / "out"
    out.mkdir()
    # The index lists every message (subjects cut to the column width); q quits.
    screen = mutt(tmp_path, rc, typing=[(b"Msgs:", b"q")])
    for _, raw in msgs:
        assert subject(raw)[:25] in screen, (subject(raw), screen[-2000:])
    assert "Msgs:6 New:6 Flag:1" in screen, screen[-2000:]
    # Message 1: piped raw; message 2: read in the pager (sets \Seen);
    # message 3: unflagged, message 4 flagged; message 5 copied to =Saved;
    # message 6 deleted and expunged; then all remaining messages piped.
    keys = ("<pipe-message>cat > out/1<enter>"
            "<next-entry><display-message><exit>"
            "<next-entry><flag-message>"
            "<next-entry><flag-message>"
            "<next-entry><copy-message>=Saved<enter>"
            "<next-entry><delete-message><sync-mailbox>"
            "<tag-pattern>~A<enter><tag-prefix><pipe-message>cat > out/all<enter>"
            "<quit>")
    screen = mutt(tmp_path, rc, keys)
    assert "Msgs:5 New:4 Flag:1" in screen, screen[-2000:]
    # Mutt keeps messages with LF line ends: the body otherwise byte-for-byte.
    assert (out / "1").read_bytes() == msgs[0][1].replace(b"\r\n", b"\n")
    piped = (out / "all").read_bytes()
    for _, raw in msgs[:5]:
        assert raw.replace(b"\r\n", b"\n") in piped
    assert message_id(msgs[5][1]).encode() not in piped
    flags = flags_by_uid(imapd)
    uids = [uid for uid, _ in msgs]
    assert set(flags) == set(uids[:5]), flags
    assert "\\Seen" in flags[uids[1]] and "\\Seen" not in flags[uids[0]]
    assert "\\Flagged" not in flags[uids[2]] and "\\Flagged" in flags[uids[3]]
    saved = login(imapd)
    saved.select("Saved", readonly=True)
    typ, data = saved.fetch("1:*", "(BODY.PEEK[])")
    assert typ == "OK" and len([p for p in data if isinstance(p, tuple)]) == 1
    assert data[0][1] == crlf(msgs[4][1])
    saved.logout()


def test_mutt_header_cache_resyncs_with_condstore(imapd, tmp_path, pki):
    """Second start with a header cache: mutt asks only for what changed
    (UID FETCH ... (CHANGEDSINCE modseq)) and must end up with the server's
    flags, without the expunged message and with the new one."""
    need("mutt")
    features = subprocess.run(["mutt", "-v"], capture_output=True, text=True).stdout
    if "+USE_HCACHE" not in features or "+DEBUG" not in features:
        pytest.skip("this mutt has no header cache or no -d debug trace")
    msgs = fill(imapd)
    rc = write_muttrc(tmp_path, imapd, pki, tls=False)
    with open(rc, "a") as f:
        f.write(f'set header_cache="{tmp_path / "hcache"}"\nset imap_condstore=yes\n')
    (tmp_path / "out").mkdir()
    screen = mutt(tmp_path, rc, typing=[(b"Msgs:", b"q")])
    assert "Msgs:6 New:6 Flag:1" in screen, screen[-2000:]
    m = login(imapd)
    m.select("INBOX")
    uids = [uid for uid, _ in msgs]
    assert m.uid("STORE", str(uids[0]), "+FLAGS", r"(\Answered)")[0] == "OK"
    assert m.uid("STORE", str(uids[1]), "+FLAGS", r"(\Seen)")[0] == "OK"
    assert m.uid("STORE", str(uids[4]), "+FLAGS", r"(\Deleted)")[0] == "OK"
    assert m.expunge()[0] == "OK"
    assert m.append("INBOX", None, None, b"Subject: arrived later\r\n\r\nnew\r\n")[0] == "OK"
    m.logout()
    # (piping marks a message read in mutt: the unread ones are piped first)
    keys = ("<tag-pattern>~U<enter><tag-prefix><pipe-message>cat > out/unread<enter>"
            "<untag-pattern>~A<enter><tag-pattern>~Q<enter><tag-prefix>"
            "<pipe-message>cat > out/replied<enter><quit>")
    screen = mutt(tmp_path, rc, keys, debug=True)
    assert "Msgs:6 " in screen and " Flag:1 " in screen, screen[-2000:]
    assert "arrived later" in screen and subject(msgs[4][1])[:25] not in screen
    assert (tmp_path / "out" / "replied").read_bytes() == msgs[0][1].replace(b"\r\n", b"\n")
    unread = (tmp_path / "out" / "unread").read_bytes()
    assert msgs[1][1].replace(b"\r\n", b"\n") not in unread  # \Seen meanwhile
    for _, raw in msgs[2:4] + msgs[5:]:
        assert raw.replace(b"\r\n", b"\n") in unread
    assert b"arrived later" in unread
    trace = (tmp_path / ".muttdebug0").read_text(errors="replace")
    assert "(CHANGEDSINCE " in trace, "mutt did not use its header cache"


# ---------- curl ----------

def curl(args, check=True):
    proc = subprocess.run(["curl", "-sS", "--max-time", "20", *args], capture_output=True,
                          timeout=30, stdin=subprocess.DEVNULL)
    if check:
        assert proc.returncode == 0, (args, proc.returncode, proc.stderr.decode())
    return proc


def test_curl_fetch_list_search_append(imapd, tmp_path, pki):
    need("curl")
    msgs = fill(imapd, count=4, extra_boxes=("Saved", "Lists/dev"))
    host, port = addr(imapd)
    base = f"imap://{host}:{port}"
    cred = ["-u", f"{USER}:{PASSWORD}"]
    for uid, raw in msgs:
        got = curl([f"{base}/INBOX;UID={uid}", *cred]).stdout
        assert got == crlf(raw), uid
    # By sequence number, one section, a partial range.
    assert curl([f"{base}/INBOX;MAILINDEX=2", *cred]).stdout == crlf(msgs[1][1])
    text = curl([f"{base}/INBOX;UID={msgs[0][0]};SECTION=TEXT", *cred]).stdout
    assert crlf(msgs[0][1]).endswith(text) and text
    got = curl([f"{base}/INBOX;UID={msgs[0][0]};SECTION=HEADER.FIELDS%20(SUBJECT)",
                *cred]).stdout
    assert got == b"Subject: " + subject(msgs[0][1]).encode() + b"\r\n\r\n"
    got = curl([f"{base}/INBOX;UID={msgs[1][0]};PARTIAL=10.20", *cred]).stdout
    assert got == crlf(msgs[1][1])[10:30]
    # UIDVALIDITY in the URL: the right one works, a wrong one is refused.
    m = login(imapd)
    uidvalidity = m.status("INBOX", "(UIDVALIDITY)")[1][0].split()[-1].rstrip(b")").decode()
    m.logout()
    assert curl([f"{base}/INBOX;UIDVALIDITY={uidvalidity};UID={msgs[0][0]}", *cred]).stdout \
        == crlf(msgs[0][1])
    assert curl([f"{base}/INBOX;UIDVALIDITY=1;UID={msgs[0][0]}", *cred],
                check=False).returncode != 0
    # Folder list.
    listing = curl([f"{base}/", *cred]).stdout.decode()
    names = re.findall(r'^\* LIST \(([^)]*)\) "/" "?([^"\r\n]+)"?\r?$', listing, re.M)
    assert {n for _, n in names} >= {"INBOX", "Saved", "Lists/dev"}, listing
    # SEARCH in the URL query.
    word = subject(msgs[2][1]).split()[-1]
    found = curl([f"{base}/INBOX?SUBJECT%20%22{word}%22", *cred]).stdout.decode()
    numbers = re.search(r"^\* SEARCH((?: \d+)*)\r?$", found, re.M)
    assert numbers and numbers.group(1).split() == ["3"], found  # sequence numbers
    # APPEND (upload) and read back.
    up = tmp_path / "up.eml"
    up.write_bytes(b"From: curl@example.org\r\nSubject: uploaded by curl\r\n\r\nhello\r\n")
    curl(["-T", str(up), f"{base}/Saved", *cred])
    assert curl([f"{base}/Saved;UID=1", *cred]).stdout == up.read_bytes()
    # A custom command (EXAMINE) prints the untagged responses.
    examine = curl([f"{base}/INBOX", "-X", "EXAMINE INBOX", *cred]).stdout.decode()
    assert f"* {len(msgs)} EXISTS" in examine, examine
    # A wrong password: curl's "login denied".
    assert curl([f"{base}/INBOX;UID=1", "-u", f"{USER}:nope"], check=False).returncode == 67


def test_curl_starttls_and_implicit_tls(imapd, pki):
    need("curl")
    msgs = fill(imapd, count=2, extra_boxes=())
    host, port = addr(imapd)
    _, tls_port = addr(imapd, "listen_tls")
    cred = ["-u", f"{USER}:{PASSWORD}", "--cacert", str(pki / "ca.pem")]
    uid, raw = msgs[1]
    proc = curl(["-v", "--ssl-reqd", f"imap://{host}:{port}/INBOX;UID={uid}", *cred])
    assert proc.stdout == crlf(raw)
    assert b"STARTTLS" in proc.stderr and b"SSL certificate verify ok" in proc.stderr
    assert curl([f"imaps://{host}:{tls_port}/INBOX;UID={uid}", *cred]).stdout == crlf(raw)
    listing = curl([f"imaps://{host}:{tls_port}/", *cred]).stdout
    assert b'"INBOX"' in listing or b" INBOX\r\n" in listing
    # Without the CA, certificate verification fails (curl exit 60).
    assert curl([f"imaps://{host}:{tls_port}/", "-u", f"{USER}:{PASSWORD}"],
                check=False).returncode == 60


# ---------- a Thunderbird-like session through imaplib ----------

TB_FIELDS = ("From To Cc Bcc Subject Date Message-ID Priority X-Priority References "
             "Newsgroups In-Reply-To Content-Type Reply-To").split()


def header_fields(raw, names):
    """What BODY[HEADER.FIELDS (names)] must return: the matching fields,
    continuation lines included, in message order, then the blank line."""
    head = crlf(raw).split(b"\r\n\r\n", 1)[0] + b"\r\n"
    fields = re.findall(rb"[^ \t\r\n][^\r\n]*\r\n(?:[ \t][^\r\n]*\r\n)*", head)
    want = {n.lower().encode() for n in names}
    return b"".join(f for f in fields if f.split(b":", 1)[0].strip().lower() in want) + b"\r\n"


def mime_parts(raw):
    """[(MIME header incl. blank line, body)] of the top-level parts of a
    CRLF multipart message: what BODY[n.MIME] and BODY[n] return."""
    head, body = raw.split(b"\r\n\r\n", 1)
    boundary = re.search(rb'boundary="([^"]+)"', head).group(1)
    out = []
    for chunk in (b"\r\n" + body).split(b"\r\n--" + boundary)[1:]:
        if chunk.startswith(b"--"):
            break
        chunk = chunk.split(b"\r\n", 1)[1]
        mime, _, content = chunk.partition(b"\r\n\r\n")
        out.append((mime + b"\r\n\r\n", content))
    return out


def fetch_parts(data):
    """imaplib FETCH data -> [(meta bytes, literal bytes or None)]."""
    out = []
    for part in data:
        if isinstance(part, tuple):
            out.append((part[0], part[1]))
        elif part and part != b")":
            out.append((part, None))
    return out


def test_thunderbird_like_session_over_tls(imapd, pki):
    msgs = fill(imapd, count=40, seed=77, extra_boxes=("Sent", "Drafts", "Archives/2024"))
    host, tls_port = addr(imapd, "listen_tls")
    for name, states in (("ID", ("NONAUTH", "AUTH", "SELECTED")),
                         ("IDLE", ("AUTH", "SELECTED"))):
        imaplib.Commands.setdefault(name, states)
    m = imaplib.IMAP4_SSL(host, tls_port, ssl_context=tls_context(pki))
    m.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    assert m.welcome.startswith(b"* OK [CAPABILITY IMAP4rev1")
    typ, data = m.capability()
    assert typ == "OK" and b"AUTH=PLAIN" in data[0] and b"STARTTLS" not in data[0]
    typ, _ = m.authenticate("PLAIN", lambda _: f"\0{USER}\0{PASSWORD}".encode())
    assert typ == "OK"
    typ, data = m.capability()
    caps = data[0].split()
    assert b"IDLE" in caps and b"UIDPLUS" in caps and b"CONDSTORE" in caps
    typ, data = m._simple_command("ID", '("name" "Thunderbird" "version" "115.5.0")')
    assert typ == "OK"
    typ, data = m._untagged_response(typ, data, "ID")
    assert b'"name" "Petrel"' in data[0], data
    typ, data = m.namespace()
    assert typ == "OK" and data[0].startswith(b'(("" "/"))'), data
    assert m.subscribe("INBOX")[0] == "OK" and m.subscribe("Sent")[0] == "OK"
    typ, data = m.lsub('""', '"*"')
    assert typ == "OK"
    assert {re.search(rb'"/" "?([^"]*)"?$', line).group(1) for line in data} == \
        {b"INBOX", b"Sent"}, data
    typ, data = m.list('""', '"*"')
    assert typ == "OK"
    listed = {re.search(rb'"/" "?([^"]*)"?$', line).group(1): line for line in data}
    assert {b"INBOX", b"Sent", b"Drafts", b"Archives/2024"} <= set(listed), data
    assert b"\\HasNoChildren" in listed[b"INBOX"]

    # SELECT "INBOX" (CONDSTORE) as Thunderbird sends it (imaplib's select()
    # takes no parameters).
    typ, data = m._simple_command("SELECT", '"INBOX" (CONDSTORE)')
    assert typ == "OK", data
    m.state = "SELECTED"
    exists = int(m.untagged_responses.pop("EXISTS")[-1])
    assert exists == 40
    ok = b" ".join(m.untagged_responses.pop("OK", []))
    assert b"UIDVALIDITY" in ok and b"UIDNEXT 41" in ok, ok
    modseq = int(re.search(rb"HIGHESTMODSEQ (\d+)", ok).group(1))
    m.untagged_responses.clear()

    typ, data = m.uid("FETCH", "1:*", "(FLAGS)")
    assert typ == "OK"
    uids = [int(re.search(rb"UID (\d+)", line).group(1)) for line in data]
    assert uids == [uid for uid, _ in msgs]
    fields = " ".join(TB_FIELDS)
    typ, data = m.uid("FETCH", "1:*",
                      f"(UID RFC822.SIZE FLAGS BODY.PEEK[HEADER.FIELDS ({fields})])")
    assert typ == "OK"
    parts = fetch_parts(data)
    assert len(parts) == 40
    for (meta, literal), (uid, raw) in zip(parts, msgs):
        assert f"UID {uid} ".encode() in meta
        assert f"RFC822.SIZE {len(crlf(raw))}".encode() in meta, meta
        assert literal == header_fields(raw, TB_FIELDS), uid

    # Open the biggest message the way Thunderbird streams it: BODY[] in
    # chunks of 64 KiB (the first one without PEEK sets \Seen).
    uid, raw = max(msgs, key=lambda x: len(x[1]))
    whole, offset, chunk = b"", 0, 65536
    while True:
        typ, data = m.uid("FETCH", str(uid), f"(UID RFC822.SIZE BODY[]<{offset}.{chunk}>)")
        assert typ == "OK"
        meta, literal = fetch_parts(data)[0] if offset == 0 else \
            [p for p in fetch_parts(data) if p[1] is not None][0]
        whole += literal
        offset += chunk
        if len(literal) < chunk:
            break
    assert whole == crlf(raw)
    typ, data = m.uid("FETCH", str(uid), "(FLAGS)")
    assert b"\\Seen" in data[0]
    big_uid = uid
    # A multipart message part by part, several sections in one command.
    uid, raw = next((u, r) for u, r in msgs if b"multipart/mixed" in r)
    typ, data = m.uid("FETCH", str(uid), "(BODYSTRUCTURE)")
    assert typ == "OK" and b'"mixed"' in data[0] and b'"alternative"' in data[0]
    parts = mime_parts(crlf(raw))
    typ, data = m.uid("FETCH", str(uid), "(UID BODY.PEEK[HEADER] BODY.PEEK[1.MIME] "
                      "BODY.PEEK[1] BODY.PEEK[2.MIME] BODY.PEEK[3])")
    assert typ == "OK"
    got = [lit for _, lit in fetch_parts(data) if lit is not None]
    assert got == [crlf(raw).split(b"\r\n\r\n", 1)[0] + b"\r\n\r\n", parts[0][0],
                   parts[0][1], parts[1][0], parts[2][1]]
    typ, data = m.uid("STORE", str(msgs[0][0]), "+FLAGS", r"(\Flagged)")
    assert typ == "OK" and b"\\Flagged" in data[0]
    typ, data = m.status('"Sent"', "(UIDNEXT MESSAGES UNSEEN RECENT)")
    assert typ == "OK" and b"MESSAGES 0" in data[0] and b"UIDNEXT 1" in data[0], data

    # IDLE, woken by another session's APPEND, flag change and expunge.
    tag = m._command("IDLE")
    assert m._get_line().startswith(b"+")
    other = login(imapd)
    other.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    typ, data = other.append("INBOX", None, None, b"Subject: while idling\r\n\r\nhi\r\n")
    assert typ == "OK"
    seen = []

    def wait_line(pattern):
        m.sock.settimeout(10)
        while True:
            line = m._get_line()
            seen.append(line)
            if re.search(pattern, line):
                return line

    wait_line(rb"^\* 41 EXISTS")
    other.select("INBOX")
    assert other.store("2", "+FLAGS", r"(\Answered)")[0] == "OK"
    wait_line(rb"^\* 2 FETCH \(.*\\Answered")
    assert other.store("3", "+FLAGS.SILENT", r"(\Deleted)")[0] == "OK"
    assert other.expunge()[0] == "OK"
    wait_line(rb"^\* 3 EXPUNGE")
    other.logout()
    m.send(b"DONE\r\n")
    typ, data = m._command_complete("IDLE", tag)
    assert typ == "OK", (data, seen)
    m.sock.settimeout(None)
    m.untagged_responses.clear()
    typ, data = m.uid("FETCH", "41:*", f"(UID FLAGS BODY.PEEK[HEADER.FIELDS ({fields})])")
    assert typ == "OK"
    assert fetch_parts(data)[0][1] == b"Subject: while idling\r\n\r\n"
    # Reopening with CONDSTORE: only what changed since the first SELECT.
    typ, data = m._simple_command("SELECT", '"INBOX" (CONDSTORE)')
    assert typ == "OK"
    m.untagged_responses.clear()
    typ, data = m.uid("FETCH", "1:*", f"(FLAGS) (CHANGEDSINCE {modseq})")
    assert typ == "OK"
    changed = {int(re.search(rb"UID (\d+)", line).group(1)) for line in data}
    assert changed == {big_uid, msgs[0][0], msgs[1][0], 41}, data
    assert all(b"MODSEQ (" in line for line in data)
    typ, data = m.logout()
    assert typ == "BYE"


def test_online_search_decodes_mime_like_thunderbird(imapd):
    """Thunderbird's search on the server sends the words as a UTF-8 literal
    with CHARSET UTF-8; most non-ASCII mail is MIME-encoded, not raw 8-bit."""
    msgs = [
        # 1: encoded-word subject, quoted-printable body
        b"From: a@example.org\r\nSubject: =?UTF-8?Q?Gr=C3=BC=C3=9Fe_aus_K=C3=B6ln?=\r\n"
        b"MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n"
        b"Content-Transfer-Encoding: quoted-printable\r\n\r\nSch=C3=B6ne Gr=C3=BC=C3=9Fe\r\n",
        # 2: base64 body
        b"From: a@example.org\r\nSubject: base64\r\nMIME-Version: 1.0\r\n"
        b"Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: base64\r\n\r\n"
        + base64.encodebytes("Schöne Grüße\n".encode()).replace(b"\n", b"\r\n"),
        # 3: raw 8-bit everywhere (the one case that already matches)
        "From: a@example.org\r\nSubject: Grüße raw\r\nMIME-Version: 1.0\r\n"
        "Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n"
        "Schöne Grüße\r\n".encode(),
        # 4: encoded-word display name
        b"From: =?UTF-8?Q?=C3=89mile_Zola?= <emile@example.fr>\r\nSubject: sender\r\n\r\nhi\r\n",
    ]
    m = login(imapd)
    m.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for raw in msgs:
        assert m.append("INBOX", None, None, raw)[0] == "OK"
    m.select("INBOX")

    def search(key, word):
        m.literal = word.encode()
        typ, data = m.uid("SEARCH", "CHARSET", "UTF-8", "UNDELETED", key)
        assert typ == "OK", data
        return {int(x) for x in data[0].split()}

    assert 3 in search("SUBJECT", "Grüße")  # raw 8-bit works today
    assert search("SUBJECT", "Grüße") == {1, 3}
    assert search("BODY", "Grüße") == {1, 2, 3}
    assert search("TEXT", "Grüße") == {1, 2, 3}
    assert search("FROM", "Émile") == {4}
    m.logout()
