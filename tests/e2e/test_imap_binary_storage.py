"""RFC 3516 BINARY: a message APPENDed as a literal8 is stored byte for
byte, so a part with Content-Transfer-Encoding: binary comes back from
BINARY[] exactly as sent, bare LFs and NULs included, and BINARY.SIZE
counts those bytes."""

import re
import socket

import pytest

from test_imap_session import addr, imap_overrides

PART = b"a\nb\nc\x00d\nend"
MSG = (b"From: a@example.org\r\nSubject: bin\r\nMIME-Version: 1.0\r\n"
       b"Content-Type: multipart/mixed; boundary=XX\r\n\r\n"
       b"--XX\r\nContent-Type: application/octet-stream\r\n"
       b"Content-Transfer-Encoding: binary\r\n\r\n" + PART + b"\r\n--XX--\r\n")


@pytest.fixture
def imapd(petreld, tmp_path):
    return petreld(imap_overrides(tmp_path))


def command(s, f, line):
    s.sendall(line)
    tag = line.split(b" ", 1)[0]
    out = []
    while True:
        got = f.readline()
        m = re.search(rb"~?\{(\d+)\}\r\n$", got)
        if m:
            got += f.read(int(m.group(1)))
            got += f.readline()
        out.append(got)
        if got.startswith(tag + b" "):
            return out


def test_literal8_binary_part_comes_back_byte_for_byte(imapd, tmp_path):
    s = socket.create_connection(addr(imapd), timeout=10)
    f = s.makefile("rb")
    f.readline()
    command(s, f, b"t1 LOGIN alice wonderland\r\n")
    out = command(s, f, b"t2 APPEND INBOX ~{%d+}\r\n" % len(MSG) + MSG + b"\r\n")
    assert out[-1].startswith(b"t2 OK"), out
    command(s, f, b"t3 SELECT INBOX\r\n")
    out = command(s, f, b"t4 FETCH 1 (BINARY.SIZE[1] BINARY.PEEK[1] RFC822.SIZE)\r\n")
    fetch = b"".join(out[:-1])
    assert b"BINARY.SIZE[1] %d" % len(PART) in fetch, fetch
    assert b"BINARY[1] ~{%d}\r\n" % len(PART) + PART in fetch, fetch
    # The stored file holds the bytes as sent.
    files = list((tmp_path / "mail" / "alice" / "Maildir" / "cur").iterdir())
    assert len(files) == 1 and files[0].read_bytes() == MSG
    s.close()
