"""CATENATE (RFC 4469): APPEND of a message built from text literals and
IMAP URLs of messages and sections in the user's own folders, as in the
RFC's example (section 5: a draft rebuilt from the parts of an older one),
and BADURL for what cannot be fetched."""

import re
import socket

import pytest

from test_imap_messages import login
from test_imap_session import addr, imap_overrides

DRAFT = (b"From: a@example.org\r\nSubject: draft\r\nMIME-Version: 1.0\r\n"
         b"Content-Type: multipart/mixed; boundary=\"B\"\r\n\r\n"
         b"--B\r\nContent-Type: text/plain\r\n\r\nfirst part\r\n"
         b"--B\r\nContent-Type: application/octet-stream\r\n\r\nsecond\r\n--B--\r\n")


@pytest.fixture
def imapd(petreld, tmp_path):
    return petreld(imap_overrides(tmp_path))


class Raw:
    def __init__(self, d):
        self.sock = socket.create_connection(addr(d), timeout=10)
        self.f = self.sock.makefile("rb")
        self.f.readline()
        self.n = 0

    def run(self, data):
        self.n += 1
        tag = b"c%d" % self.n
        self.sock.sendall(tag + b" " + data + b"\r\n")
        out = []
        while True:
            line = self.f.readline()
            m = re.search(rb"\{(\d+)\}\r\n$", line)
            if m:
                line += self.f.read(int(m.group(1))) + self.f.readline()
            out.append(line)
            if line.startswith(tag + b" "):
                return out


def section(m, uid, spec):
    typ, data = m.uid("FETCH", str(uid), f"(BODY.PEEK[{spec}])")
    return data[0][1]


def test_catenate_rebuilds_a_draft_from_urls_and_text(imapd):
    m = login(imapd)
    m.create("Drafts")
    typ, data = m.append("Drafts", None, None, DRAFT)
    uidv, uid = map(int, re.search(rb"APPENDUID (\d+) (\d+)", data[0]).groups())
    m.select("Drafts")
    header, mime1, part1 = section(m, uid, "HEADER"), section(m, uid, "1.MIME"), section(m, uid, "1")
    r = Raw(imapd)
    r.run(b"LOGIN alice wonderland")
    assert b" CATENATE" in r.run(b"CAPABILITY")[0]
    text1, text2 = b"--B\r\n", b"\r\n--B\r\nContent-Type: text/plain\r\n\r\nnew\r\n--B--\r\n"
    base = f"/Drafts;UIDVALIDITY={uidv}/;UID={uid}".encode()
    out = r.run(b"APPEND Drafts (\\Seen \\Draft) CATENATE (URL \"" + base + b"/;section=HEADER\" "
                b"TEXT {%d+}\r\n" % len(text1) + text1 +
                b" URL \"" + base + b"/;SECTION=1.MIME\" URL \"imap://alice@localhost" + base +
                b"/;SECTION=1\" TEXT {%d+}\r\n" % len(text2) + text2 + b")")
    assert out[-1].startswith(b"c%d OK [APPENDUID" % r.n), out
    new_uid = int(re.search(rb"APPENDUID \d+ (\d+)", out[-1]).group(1))
    m.noop()  # the other session's APPEND comes into this view
    typ, data = m.uid("FETCH", str(new_uid), "(FLAGS BODY.PEEK[])")
    assert data[0][1] == header + text1 + mime1 + part1 + text2
    assert b"\\Seen" in data[0][0] and b"\\Draft" in data[0][0]
    # A partial of a section, and a whole message.
    out = r.run(b"APPEND Drafts CATENATE (URL \"" + base + b"/;SECTION=1/;PARTIAL=0.5\" "
                b"URL \"" + base + b"\")")
    new_uid = int(re.search(rb"APPENDUID \d+ (\d+)", out[-1]).group(1))
    m.noop()
    typ, data = m.uid("FETCH", str(new_uid), "(BODY.PEEK[])")
    assert data[0][1] == part1[:5] + DRAFT
    # What cannot be fetched is BADURL, and nothing is appended.
    before = m.select("Drafts")[1][0]
    for url in (f"/Drafts;UIDVALIDITY={uidv + 1}/;UID={uid}", f"/Drafts/;UID={uid + 99}",
                "/Nowhere/;UID=1", f"imap://bob@localhost/Drafts/;UID={uid}", "/Drafts",
                f"/Drafts/;UID={uid}/;SECTION=9"):
        out = r.run(b"APPEND Drafts CATENATE (TEXT {1+}\r\nx URL \"" + url.encode() + b"\")")
        assert out[-1].startswith(b"c%d NO [BADURL " % r.n), (url, out)
    assert m.select("Drafts")[1][0] == before
    # NUL only in a literal8; bad syntax is BAD.
    out = r.run(b"APPEND Drafts CATENATE (TEXT {3+}\r\na\x00b)")
    assert out[-1].startswith(b"c%d NO" % r.n), out
    out = r.run(b"APPEND Drafts CATENATE (TEXT ~{3+}\r\na\x00b)")
    assert out[-1].startswith(b"c%d OK" % r.n), out
    out = r.run(b"APPEND Drafts CATENATE (TEXT)")
    assert out[-1].startswith(b"c%d BAD" % r.n), out
    m.logout()


def test_catenate_url_mailbox_is_utf8_and_relative_urls_use_the_selected_one(imapd):
    """RFC 5092: the mailbox of an IMAP URL is percent-encoded UTF-8, not
    modified UTF-7 (Dovecot 2.3 finds "/Entw%C3%BCrfe/;UID=1" and answers
    BADURL for "/Entw&APw-rfe/;UID=1"); a relative ";UID=n" URL names a
    message of the selected mailbox (Dovecot resolves it so; BADURL with
    none selected)."""
    m = login(imapd)
    m.create("Entw&APw-rfe")  # "Entwürfe"
    m.append("Entw&APw-rfe", None, None, DRAFT)
    m.append("INBOX", None, None, b"Subject: inbox one\r\n\r\nbody\r\n")
    r = Raw(imapd)
    r.run(b"LOGIN alice wonderland")

    def appended(url):
        out = r.run(b"APPEND INBOX CATENATE (URL \"" + url + b"\")")
        assert out[-1].startswith(b"c%d OK [APPENDUID" % r.n), (url, out)
        uid = int(re.search(rb"APPENDUID \d+ (\d+)", out[-1]).group(1))
        m.noop()
        typ, data = m.uid("FETCH", str(uid), "(BODY.PEEK[])")
        return data[0][1]

    m.select("INBOX")
    assert appended(b"/Entw%C3%BCrfe/;UID=1") == DRAFT
    assert appended(b"/Entw%c3%bcrfe/;UID=1/;SECTION=1") == b"first part"
    out = r.run(b"APPEND INBOX CATENATE (URL \"/Entw&APw-rfe/;UID=1\")")
    assert out[-1].startswith(b"c%d NO [BADURL /Entw&APw-rfe/;UID=1]" % r.n), out
    out = r.run(b"APPEND INBOX CATENATE (URL \"/Entw%FF/;UID=1\")")  # not UTF-8
    assert out[-1].startswith(b"c%d NO [BADURL " % r.n), out
    # After UTF8=ACCEPT the same URL names the same folder.
    r.run(b"ENABLE UTF8=ACCEPT")
    assert appended(b"/Entw%C3%BCrfe/;UID=1") == DRAFT
    # Relative to the selected mailbox; nothing selected: BADURL.
    out = r.run(b"APPEND INBOX CATENATE (URL \";UID=1\")")
    assert out[-1].startswith(b"c%d NO [BADURL ;UID=1]" % r.n), out
    r.run("SELECT \"Entwürfe\"".encode())
    assert appended(b";UID=1/;SECTION=HEADER") == DRAFT.split(b"\r\n\r\n")[0] + b"\r\n\r\n"
    assert appended(b";uid=1/;SECTION=1/;PARTIAL=0.5") == b"first"
    m.logout()


def test_catenate_of_many_urls_opens_their_folder_once(imapd):
    """1800 URL parts (what a 64 KiB command line holds) into a folder that
    is not the selected one: each part opened the folder anew, reading its
    whole index (67 MB read for a 300-message folder, 7.5 s with the
    sanitizers, the session's process busy all along); the folder is now
    opened once for the parts that name it. Measured as the bytes the
    process read (/proc/PID/io rchar), which does not depend on speed."""
    m = login(imapd)
    m.create("Big")
    for i in range(100):
        m.append("Big", None, None, b"Subject: x%d\r\n\r\nbody %d\r\n" % (i, i))
    m.logout()
    r = Raw(imapd)
    r.run(b"LOGIN alice wonderland")
    r.run(b"SELECT INBOX")

    def rchar():
        with open(f"/proc/{imapd.pid}/io") as f:
            return int(next(ln for ln in f if ln.startswith("rchar:")).split()[1])
    parts = b" ".join([b'URL "/Big/;UID=1/;SECTION=TEXT"'] * 1800)
    before = rchar()
    out = r.run(b"APPEND INBOX CATENATE (" + parts + b")")
    read = rchar() - before
    assert out[-1].startswith(b"c%d OK [APPENDUID" % r.n), out[-1]
    assert read < 3 * 1024 * 1024, read  # the command line and one index, not 1800
    typ, data = login(imapd).select("INBOX")
    assert data == [b"1"]


@pytest.fixture
def small_imapd(petreld, tmp_path):
    return petreld(imap_overrides(tmp_path, extra={"max_literal_size": 1024}))


def test_catenate_toobig_boundary_and_zero_length_partial(small_imapd):
    """[TOOBIG] when the parts together pass imap.max_literal_size, not
    when they reach it; a PARTIAL of length 0, a UIDVALIDITY or UID of 0
    make no URL (RFC 5092: nz-number). Mutations of these went
    unnoticed."""
    m = login(small_imapd)
    m.append("INBOX", None, None, b"Subject: s\r\n\r\n" + b"y" * 100 + b"\r\n")
    m.logout()
    r = Raw(small_imapd)
    r.run(b"LOGIN alice wonderland")
    a, b = b"S: x\r\n\r\n" + b"x" * 992, b"z" * 24  # 1000 + 24 = 1024
    out = r.run(b"APPEND INBOX CATENATE (TEXT {%d+}\r\n" % len(a) + a +
                b" TEXT {%d+}\r\n" % len(b) + b + b")")
    assert out[-1].startswith(b"c%d OK [APPENDUID" % r.n), out
    b += b"z"
    out = r.run(b"APPEND INBOX CATENATE (TEXT {%d+}\r\n" % len(a) + a +
                b" TEXT {%d+}\r\n" % len(b) + b + b")")
    assert out[-1].startswith(b"c%d NO [TOOBIG]" % r.n), out
    out = r.run(b"APPEND INBOX CATENATE (TEXT {%d+}\r\n" % len(a) + a +
                b" URL \"/INBOX/;UID=1/;SECTION=TEXT/;PARTIAL=0.24\")")
    assert out[-1].startswith(b"c%d OK [APPENDUID" % r.n), out
    out = r.run(b"APPEND INBOX CATENATE (TEXT {%d+}\r\n" % len(a) + a +
                b" URL \"/INBOX/;UID=1/;SECTION=TEXT/;PARTIAL=0.25\")")
    assert out[-1].startswith(b"c%d NO [TOOBIG]" % r.n), out
    for url in (b"/INBOX/;UID=1/;PARTIAL=0.0", b"/INBOX;UIDVALIDITY=0/;UID=1", b"/INBOX/;UID=0"):
        out = r.run(b"APPEND INBOX CATENATE (URL \"" + url + b"\")")
        assert out[-1].startswith(b"c%d NO [BADURL " % r.n), (url, out)
