"""NUL bytes and bare CRs delivered by LMTP (issue 19, item 11): the
stored bytes stay as delivered, BINARY[] (a literal8) carries them as they
are, and no NUL ever goes out in a non-binary literal: BODY[], RFC822,
BODY[TEXT] and literal strings carry 0x80 in its place (as Dovecot does),
one byte for one, so RFC822.SIZE and the announced lengths still match what
is sent. Small messages (read into memory) and large ones (streamed from
the file) alike. Clients: raw LMTP over a socket, raw IMAP."""

import re
import socket

import pytest

from test_lmtp import lmtp_overrides, addr


def lmtp_deliver(d, rcpt, msg):
    """Raw LMTP (smtplib would rewrite bare CRs): one recipient, DATA."""
    s = socket.create_connection(addr(d), timeout=30)
    f = s.makefile("rb")

    def reply():
        while True:
            line = f.readline()
            assert line, "LMTP connection closed"
            if line[3:4] != b"-":
                return line

    assert reply().startswith(b"220")
    for cmd in (b"LHLO client.test.example", b"MAIL FROM:<sender@example.org>",
                b"RCPT TO:<%s>" % rcpt.encode()):
        s.sendall(cmd + b"\r\n")
        assert reply().startswith(b"250"), cmd
    s.sendall(b"DATA\r\n")
    assert reply().startswith(b"354")
    assert not re.search(rb"(^|\r\n)\.", msg)  # nothing to dot-stuff
    s.sendall(msg + b".\r\n")
    line = reply()
    assert line.startswith(b"250"), line
    s.sendall(b"QUIT\r\n")
    s.close()


def imap_fetch_raw(d, items):
    """LOGIN, SELECT, FETCH 1:* items: the whole response as bytes."""
    host, port = d.config["imap"]["listen"][0].rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=30)
    f = s.makefile("rb")
    assert f.readline().startswith(b"* OK")

    def until(tag):
        out = b""
        while True:
            line = f.readline()
            assert line, out[-500:]
            out += line
            m = re.search(rb"\{(\d+)\}\r\n$", line)
            if m:
                out += f.read(int(m.group(1)))
                continue
            if line.startswith(tag + b" "):
                assert line.startswith(tag + b" OK"), line
                return out

    s.sendall(b"a LOGIN alice wonderland\r\n")
    until(b"a")
    s.sendall(b"b SELECT INBOX\r\n")
    until(b"b")
    s.sendall(b"c FETCH 1:* " + items + b"\r\n")
    out = until(b"c")
    s.sendall(b"d LOGOUT\r\n")
    s.close()
    return out


def item(resp, name, seq):
    """The literal of `name` in the FETCH response of message `seq`."""
    start = resp.index(b"* %d FETCH (" % seq)
    m = re.compile(re.escape(name) + rb" ~?\{(\d+)\}\r\n").search(resp, start)
    assert m, (name, resp[start:start + 300])
    n = int(m.group(1))
    return resp[m.end():m.end() + n]


def rfc822_size(resp, seq):
    start = resp.index(b"* %d FETCH (" % seq)
    return int(re.compile(rb"RFC822\.SIZE (\d+)").search(resp, start).group(1))


def strip_literals(resp):
    """The response without its BINARY literal8 contents."""
    out, pos = b"", 0
    for m in re.finditer(rb"BINARY\[\] ~\{(\d+)\}\r\n", resp):
        if m.start() < pos:
            continue
        out += resp[pos:m.end()]
        pos = m.end() + int(m.group(1))
    return out + resp[pos:]


@pytest.fixture
def lmtpd(petreld, tmp_path):
    return petreld(lmtp_overrides(tmp_path, pop3=False))


def test_nul_and_bare_cr_from_lmtp(lmtpd):
    head = (b"From: sender@example.org\r\nTo: alice@example.org\r\n"
            b"Subject: nul\x00inside\r\nMessage-ID: <nul@example.org>\r\n\r\n")
    small = head + b"a NUL \x00 here\r\nbare CR \r in the middle\r\nend\r\n"
    pad = b"x" * 70 + b"\r\n"
    large = head + pad * 2000 + b"late NUL \x00\x00 and CR \r\r\n" + pad * 10
    assert len(large) > 128 * 1024
    lmtp_deliver(lmtpd, "alice", small)
    lmtp_deliver(lmtpd, "alice", large)

    # Twice: the second time the large one's NUL is known from the cache.
    for _ in range(2):
        resp = imap_fetch_raw(
            lmtpd, b"(RFC822.SIZE BODY.PEEK[] BINARY.PEEK[] BODY.PEEK[TEXT] ENVELOPE)")
        assert b"\x00" not in strip_literals(resp)
        for seq, msg in ((1, small), (2, large)):
            body = item(resp, b"BODY[]", seq)
            stored = item(resp, b"BINARY[]", seq)  # literal8: the bytes as stored
            # LMTP puts its trace headers in front and keeps the rest as is.
            assert stored.endswith(msg) and stored.count(b"\x00") == msg.count(b"\x00")
            assert body == stored.replace(b"\x00", b"\x80")
            assert len(body) == rfc822_size(resp, seq)
            assert item(resp, b"BODY[TEXT]", seq) == \
                msg[len(head):].replace(b"\x00", b"\x80")
            assert b"bare CR \r in" in body or seq == 2
            assert b"and CR \r\r\n" in body or seq == 1
        assert b"Subject: nul\x80inside" in resp  # the header inside BODY[]
        resp = imap_fetch_raw(lmtpd, b"(RFC822)")
        assert b"\x00" not in resp
        assert item(resp, b"RFC822", 2).endswith(large.replace(b"\x00", b"\x80"))
        # Header sections alone are read from the header block, not the
        # parsed message: the same rule there.
        resp = imap_fetch_raw(lmtpd, b"(BODY.PEEK[HEADER] BODY.PEEK[HEADER.FIELDS (SUBJECT)])")
        assert b"\x00" not in resp
        assert item(resp, b"BODY[HEADER.FIELDS (SUBJECT)]", 2) == b"Subject: nul\x80inside\r\n\r\n"
