"""IMAP on messages: APPEND (with flags, dates, MULTIAPPEND-style
sequences), SELECT/EXAMINE, FETCH of flags, sizes, dates, ENVELOPE,
BODYSTRUCTURE and body sections, STORE (incl. UNCHANGEDSINCE), COPY/MOVE
with COPYUID, EXPUNGE and UID EXPUNGE, and two sessions seeing each other's
changes, IDLE waking on another session's APPEND. Client: imaplib."""

import imaplib
import os
import re
import socket
import ssl
import threading
import time

import pytest

from test_imap_session import imap_overrides, login, addr, raw

MSG = (b"From: Alice Example <alice@example.org>\r\n"
       b"To: bob@example.org, \"Carol C.\" <carol@example.net>\r\n"
       b"Subject: Hello there\r\n"
       b"Date: Sat, 21 Nov 2026 10:00:00 +0000\r\n"
       b"Message-ID: <m1@example.org>\r\n"
       b"MIME-Version: 1.0\r\n"
       b"Content-Type: multipart/mixed; boundary=\"b1\"\r\n"
       b"\r\n"
       b"preamble\r\n"
       b"--b1\r\n"
       b"Content-Type: text/plain; charset=utf-8\r\n"
       b"\r\n"
       b"Body text line one.\r\n"
       b"Line two.\r\n"
       b"--b1\r\n"
       b"Content-Type: application/octet-stream\r\n"
       b"Content-Transfer-Encoding: base64\r\n"
       b"\r\n"
       b"aGVsbG8gd29ybGQ=\r\n"
       b"--b1--\r\n")

LF_MSG = b"From: x@example.org\nSubject: lf only\n\nline1\nline2\n"


@pytest.fixture
def imapd(petreld, tmp_path):
    return petreld(imap_overrides(tmp_path))


def selected(d, box="INBOX", user="alice", password="wonderland"):
    m = login(d, user, password)
    typ, data = m.select(box)
    assert typ == "OK", data
    return m


def append(m, msg=MSG, box="INBOX", flags=None, date=None):
    typ, data = m.append(box, flags, date, msg)
    assert typ == "OK", data
    match = re.search(rb"APPENDUID (\d+) (\d+)", data[0])
    assert match, data
    return int(match.group(2))


def test_append_select_fetch_basics(imapd):
    m = login(imapd)
    uid1 = append(m, flags=r"(\Flagged $Work)", date='"21-Nov-2026 11:22:33 +0000"')
    uid2 = append(m, LF_MSG)
    assert uid2 == uid1 + 1
    typ, data = m.select("INBOX")
    assert typ == "OK" and data == [b"2"]
    typ, data = m.fetch("1:*", "(UID FLAGS RFC822.SIZE INTERNALDATE)")
    first = data[0].decode()
    assert f"UID {uid1}" in first and "\\Flagged" in first and "$Work" in first
    assert f"RFC822.SIZE {len(MSG)}" in first
    assert 'INTERNALDATE "21-Nov-2026 11:22:33 +0000"' in first
    # The LF-only message is presented with CRLF: size counts the CRs.
    crlf_size = len(LF_MSG.replace(b"\n", b"\r\n"))
    assert f"RFC822.SIZE {crlf_size}" in data[1].decode()
    m.logout()


def test_fetch_body_sections_and_structure(imapd):
    m = login(imapd)
    append(m)
    append(m, LF_MSG)
    m.select("INBOX")
    typ, data = m.fetch("1", "(BODY.PEEK[])")
    assert data[0][1] == MSG
    typ, data = m.fetch("2", "(BODY.PEEK[])")
    assert data[0][1] == LF_MSG.replace(b"\n", b"\r\n")
    typ, data = m.fetch("1", "(BODY.PEEK[HEADER.FIELDS (Subject)])")
    assert data[0][1] == b"Subject: Hello there\r\n\r\n"
    typ, data = m.fetch("1", "(BODY.PEEK[1])")
    assert data[0][1] == b"Body text line one.\r\nLine two."
    typ, data = m.fetch("1", "(BODY.PEEK[TEXT]<0.8>)")
    assert data[0][1] == b"preamble"
    typ, data = m.fetch("1", "(BINARY.PEEK[2])")
    assert data[0][1] == b"hello world"
    typ, data = m.fetch("1", "(ENVELOPE)")
    env = data[0].decode()
    assert '"Hello there"' in env and '"alice" "example.org"' in env
    assert '"<m1@example.org>"' in env
    typ, data = m.fetch("1", "(BODYSTRUCTURE)")
    bs = data[0].decode()
    assert '"mixed"' in bs.lower() and '"plain"' in bs.lower()
    # Flags untouched by PEEK; a plain BODY[] sets \Seen and reports it.
    assert "\\Seen" not in m.fetch("1", "(FLAGS)")[1][0].decode()
    typ, data = m.fetch("1", "(BODY[1])")
    assert "\\Seen" in data[0][0].decode() or "\\Seen" in str(data)
    assert "\\Seen" in m.fetch("1", "(FLAGS)")[1][0].decode()
    m.logout()


def test_bodystructure_comes_from_cache_second_time(imapd, tmp_path):
    m = login(imapd)
    append(m)
    m.select("INBOX")
    first = m.fetch("1", "(BODYSTRUCTURE ENVELOPE)")[1][0]
    hdr_first = m.fetch("1", "(BODY.PEEK[HEADER.FIELDS (Subject From)])")[1][0]
    # Make the message file unreadable for a moment: the cached answer still comes.
    cur = list((tmp_path / "mail" / "alice" / "Maildir" / "cur").iterdir())
    assert len(cur) == 1
    data = cur[0].read_bytes()
    cur[0].write_bytes(b"X" * len(data))
    try:
        second = m.fetch("1", "(BODYSTRUCTURE ENVELOPE)")[1][0]
        hdr_second = m.fetch("1", "(BODY.PEEK[HEADER.FIELDS (Subject From)])")[1][0]
    finally:
        cur[0].write_bytes(data)
    assert first == second
    assert hdr_first == hdr_second and b"Subject: Hello there" in hdr_second[1]
    m.logout()


def test_store_flags_and_unchangedsince(imapd):
    m = login(imapd)
    for _ in range(3):
        append(m)
    m.select("INBOX")
    typ, data = m.store("1:2", "+FLAGS", r"(\Seen $Label1)")
    assert typ == "OK" and len(data) == 2 and "$Label1" in data[0].decode()
    typ, data = m.store("2", "-FLAGS", r"(\Seen)")
    assert "\\Seen" not in data[0].decode()
    typ, data = m.store("3", "FLAGS.SILENT", r"(\Answered)")
    assert typ == "OK" and data == [None]
    typ, data = m.fetch("1:3", "(FLAGS MODSEQ)")
    modseqs = [int(re.search(r"MODSEQ \((\d+)\)", d.decode()).group(1)) for d in data]
    typ, data = m._simple_command("STORE", "1,3", f"(UNCHANGEDSINCE {modseqs[0]})",
                                  "+FLAGS", r"(\Flagged)")
    assert typ == "OK"
    # RFC 7162 3.1.3: message 1's mod-sequence equals UNCHANGEDSINCE, so it
    # is stored; message 3's is greater, so it is left alone and named in
    # MODIFIED, and nothing else is.
    text = m.response("MODIFIED")
    assert text[1] == [b"3"], text
    m.untagged_responses.clear()
    typ, data = m.fetch("1:3", "(FLAGS)")
    flags = [re.search(r"FLAGS \(([^)]*)\)", d.decode()).group(1).split() for d in data]
    assert "\\Flagged" in flags[0] and "\\Flagged" not in flags[2], flags
    assert "\\Flagged" not in flags[1], flags
    # -FLAGS removes a keyword, and the keyword alone.
    typ, data = m.store("1", "-FLAGS", r"($Label1)")
    assert typ == "OK"
    m.untagged_responses.clear()
    typ, data = m.fetch("1", "(FLAGS)")
    assert "$Label1" not in data[0].decode() and "\\Seen" in data[0].decode(), data
    m.logout()


def flags_of(fetch_line):
    """The FLAGS of a FETCH line, without \\Recent (whether a message is
    recent depends on which session saw it first, not on the STORE)."""
    flags = re.search(r"FLAGS \(([^)]*)\)", fetch_line.decode()).group(1).split()
    return [f for f in flags if f != "\\Recent"]


def test_store_nil_is_a_keyword(imapd):
    """NIL is an atom, so `+FLAGS NIL` stores the keyword NIL, whatever its
    spelling; Dovecot answers the same (FLAGS, PERMANENTFLAGS, FETCH)."""
    m = login(imapd)
    append(m)
    m.select("INBOX")
    typ, data = m._simple_command("STORE", "1", "+FLAGS", "NIL")
    assert typ == "OK", data
    m.untagged_responses.clear()
    typ, data = m.fetch("1", "(FLAGS)")
    assert flags_of(data[0]) == ["NIL"], data
    typ, data = m._simple_command("STORE", "1", "+FLAGS", "(NIL nil)")
    assert typ == "OK", data
    m.untagged_responses.clear()
    typ, data = m.fetch("1", "(FLAGS)")
    assert flags_of(data[0]) == ["NIL"], data
    typ, data = m._simple_command("STORE", "1", "-FLAGS", "nil")
    assert typ == "OK", data
    m.untagged_responses.clear()
    typ, data = m.fetch("1", "(FLAGS)")
    assert flags_of(data[0]) == [], data
    m.logout()


def test_copy_move_expunge(imapd):
    m = login(imapd)
    m.create("Archive")
    for _ in range(4):
        append(m)
    m.select("INBOX")
    typ, data = m.copy("1:2", "Archive")
    assert typ == "OK" and b"COPYUID" in data[0], data
    typ, data = m._simple_command("MOVE", "3", "Archive")
    assert typ == "OK"
    # RFC 6851: the moved message's EXPUNGE comes with the MOVE.
    assert m.untagged_responses.pop("EXPUNGE", None) == [b"3"]
    typ, data = m.status("Archive", "(MESSAGES)")
    assert b"MESSAGES 3" in data[0]
    typ, data = m.copy("1", "Nowhere")
    assert typ == "NO" and b"TRYCREATE" in data[0]
    m.store("1", "+FLAGS", r"(\Deleted)")
    typ, data = m.expunge()
    assert typ == "OK" and data == [b"1"], data
    typ, data = m.fetch("1:*", "(UID)")
    assert len(data) == 2  # 4 - moved - expunged
    m.store("1:2", "+FLAGS", r"(\Deleted)")
    uids = [int(re.search(r"UID (\d+)", d.decode()).group(1)) for d in m.fetch("1:2", "(UID)")[1]]
    typ, data = m.uid("EXPUNGE", str(uids[1]))
    assert typ == "OK"
    assert m.response("EXPUNGE")[1] == [b"2"]  # only the named UID went
    m.logout()


def test_two_sessions_see_each_others_changes(imapd):
    a = selected(imapd)
    b = selected(imapd)
    append(a)
    typ, data = b.noop()
    assert b.untagged_responses.get("EXISTS") == [b"1"] or b"1" in (b.response("EXISTS")[1] or [])
    b.store("1", "+FLAGS", r"(\Flagged)")
    typ, _ = a.noop()
    fetches = a.untagged_responses.get("FETCH", [])
    assert any(b"\\Flagged" in f for f in fetches), a.untagged_responses
    a.store("1", "+FLAGS", r"(\Deleted)")
    a.expunge()
    b.noop()
    assert b.untagged_responses.get("EXPUNGE") == [b"1"], b.untagged_responses
    a.logout()
    b.logout()


def test_no_expunge_during_fetch(imapd):
    a = selected(imapd)
    b = selected(imapd)
    append(a)
    append(a)
    a.noop()
    b.noop()
    b.store("1", "+FLAGS", r"(\Deleted)")
    b.expunge()
    a.untagged_responses.clear()
    a.fetch("1:*", "(UID)")
    assert "EXPUNGE" not in a.untagged_responses
    a.noop()
    assert a.untagged_responses.get("EXPUNGE") == [b"1"]
    a.logout()
    b.logout()


def test_idle_wakes_on_other_session_append(imapd):
    s, f = raw(imapd)
    s.sendall(b"a LOGIN alice wonderland\r\n")
    assert f.readline().startswith(b"a OK")
    s.sendall(b"b SELECT INBOX\r\n")
    while not f.readline().startswith(b"b OK"):
        pass
    s.sendall(b"c IDLE\r\n")
    assert f.readline().startswith(b"+ ")
    other = login(imapd)
    t0 = time.monotonic()
    append(other)
    line = f.readline()
    assert line == b"* 1 EXISTS\r\n", line
    assert time.monotonic() - t0 < 1.0
    # The idling session is the first told of it: the message is recent
    # for it (RFC 3501 2.3.2), as Dovecot says in the same place.
    assert f.readline() == b"* 1 RECENT\r\n"
    s.sendall(b"DONE\r\n")
    assert f.readline().startswith(b"c OK")
    other.logout()
    s.close()


def test_examine_is_read_only(imapd):
    m = login(imapd)
    append(m)
    typ, data = m.select("INBOX", readonly=True)
    assert typ == "OK"
    typ, data = m.store("1", "+FLAGS", r"(\Seen)")
    assert typ == "NO"
    m.fetch("1", "(BODY[])")  # no \Seen in read-only mode
    assert "\\Seen" not in m.fetch("1", "(FLAGS)")[1][0].decode()
    m.logout()


def test_big_append_50mb(imapd):
    m = login(imapd)
    body = (b"x" * 998 + b"\r\n") * (50 * 1024 * 1024 // 1000)
    msg = b"Subject: big\r\n\r\n" + body
    uid = append(m, msg)
    m.select("INBOX")
    typ, data = m.fetch("1", "(RFC822.SIZE)")
    assert f"RFC822.SIZE {len(msg)}".encode() in data[0]
    typ, data = m.uid("FETCH", str(uid), "(BODY.PEEK[])")
    assert data[0][1] == msg
    m.logout()


def test_search_date_boundaries(imapd):
    """RFC 3501 6.4.4: BEFORE is strictly before the day, ON the day itself,
    SINCE the day or later, times of day disregarded; the SENT forms the
    same on the Date header. Messages sit on the first and last second of
    the boundary day and of the days around it."""
    m = login(imapd)
    stamps = ["14-Jun-2026 23:59:59", "15-Jun-2026 00:00:00", "15-Jun-2026 12:00:00",
              "15-Jun-2026 23:59:59", "16-Jun-2026 00:00:00"]
    sent = ["Sun, 14 Jun 2026 23:59:59 +0000", "Mon, 15 Jun 2026 00:00:00 +0000",
            "Mon, 15 Jun 2026 12:00:00 +0000", "Mon, 15 Jun 2026 23:59:59 +0000",
            "Tue, 16 Jun 2026 00:00:00 +0000"]
    for stamp, date in zip(stamps, sent):
        append(m, b"From: a@example.org\r\nDate: " + date.encode() + b"\r\nSubject: d\r\n\r\nx\r\n",
               date=f'"{stamp} +0000"')
    m.select("INBOX")

    def search(*crit):
        typ, data = m.search(None, *crit)
        assert typ == "OK", data
        return data[0].split()
    for prefix in ("", "SENT"):
        assert search(prefix + "BEFORE", "15-Jun-2026") == [b"1"], prefix
        assert search(prefix + "ON", "15-Jun-2026") == [b"2", b"3", b"4"], prefix
        assert search(prefix + "SINCE", "15-Jun-2026") == [b"2", b"3", b"4", b"5"], prefix
        assert search(prefix + "SINCE", "16-Jun-2026") == [b"5"], prefix
        assert search(prefix + "BEFORE", "16-Jun-2026") == [b"1", b"2", b"3", b"4"], prefix
        assert search(prefix + "ON", "13-Jun-2026") == [], prefix
    m.logout()


def test_condstore_search_modseq_and_first_enabling_fetch(imapd):
    """RFC 7162 3.1: the first CONDSTORE-enabling command while a folder is
    selected sends OK [HIGHESTMODSEQ] before its own responses. 3.1.5 with
    RFC 4731: with RETURN (MIN) or (MAX) alone the MODSEQ is that of the
    message returned; with ALL or COUNT the highest of all matches
    (Dovecot answers the same on this sequence)."""
    m = login(imapd)
    for _ in range(3):
        append(m)
    s, f = raw(imapd)
    s.sendall(b"a1 LOGIN alice wonderland\r\na2 SELECT INBOX\r\n")
    while not f.readline().startswith(b"a2 OK"):
        pass
    s.sendall(b"a3 FETCH 1 (MODSEQ)\r\n")
    first = f.readline()
    assert first.startswith(b"* OK [HIGHESTMODSEQ "), first
    assert f.readline().startswith(b"* 1 FETCH (MODSEQ ("), first
    assert f.readline().startswith(b"a3 OK")
    s.sendall(b"a4 FETCH 1 (MODSEQ)\r\n")
    assert f.readline().startswith(b"* 1 FETCH (MODSEQ (")  # only the first time
    assert f.readline().startswith(b"a4 OK")
    s.sendall(b"a5 LOGOUT\r\n")
    s.close()

    m.select("INBOX")
    m.store("3", "+FLAGS", r"(\Seen)")
    m.store("1", "+FLAGS", r"(\Flagged)")
    m.untagged_responses.clear()
    typ, data = m.fetch("1:3", "(MODSEQ)")
    modseq = [int(re.search(r"MODSEQ \((\d+)\)", d.decode()).group(1)) for d in data]
    assert modseq[0] > modseq[2] > modseq[1], modseq

    def esearch(ret):
        typ, data = m._simple_command("SEARCH", "RETURN", ret, "MODSEQ", "1")
        assert typ == "OK", data
        return m.untagged_responses.pop("ESEARCH")[0].decode()
    assert esearch("(MIN)").endswith(f"MIN 1 MODSEQ {modseq[0]}")
    assert esearch("(MAX)").endswith(f"MAX 3 MODSEQ {modseq[2]}")
    assert esearch("(MIN MAX)").endswith(f"MIN 1 MAX 3 MODSEQ {modseq[0]}")
    assert esearch("(COUNT)").endswith(f"COUNT 3 MODSEQ {modseq[0]}")
    assert esearch("()").endswith(f"ALL 1:3 MODSEQ {modseq[0]}")
    # The message in the middle is the oldest: MAX of 1:2 is it.
    typ, data = m._simple_command("SEARCH", "RETURN", "(MAX)", "1:2", "MODSEQ", "1")
    assert m.untagged_responses.pop("ESEARCH")[0].decode().endswith(f"MAX 2 MODSEQ {modseq[1]}")
    m.logout()


def test_fetch_and_store_errors(imapd):
    m = login(imapd)
    append(m)
    m.select("INBOX")
    with pytest.raises(imaplib.IMAP4.error):
        m.fetch("5", "(FLAGS)")
    with pytest.raises(imaplib.IMAP4.error):
        m.fetch("1", "(NOSUCHITEM)")
    with pytest.raises(imaplib.IMAP4.error):
        m.store("1", "+FLAGS", r"(\Recent)")
    typ, data = m.uid("FETCH", "999", "(FLAGS)")
    assert typ == "OK" and data == [None]
    m.logout()


def test_search_keys(imapd):
    m = login(imapd)
    append(m, flags=r"(\Seen)", date='"01-Jan-2026 10:00:00 +0000"')
    append(m, LF_MSG, flags=r"(\Flagged $Work)", date='"15-Jun-2026 10:00:00 +0000"')
    append(m, b"From: Zed <zed@example.com>\r\nSubject: Other topic\r\n"
              b"Date: Mon, 2 Feb 2026 08:00:00 -0500\r\n\r\nNothing here.\r\n")
    m.select("INBOX")

    def search(*crit):
        typ, data = m.search(None, *crit)
        assert typ == "OK", data
        return data[0].split()
    assert search("ALL") == [b"1", b"2", b"3"]
    assert search("SEEN") == [b"1"]
    assert search("UNSEEN") == [b"2", b"3"]
    assert search("FLAGGED", "KEYWORD", "$Work") == [b"2"]
    assert search("SUBJECT", "hello") == [b"1"]
    assert search("FROM", "ZED@example") == [b"3"]
    assert search("BODY", '"line two"') == [b"1"]
    assert search("TEXT", '"lf only"') == [b"2"]
    assert search("HEADER", "Message-ID", "m1@") == [b"1"]
    assert search("OR", "SEEN", "FLAGGED") == [b"1", b"2"]
    assert search("NOT", "SEEN") == [b"2", b"3"]
    assert search("BEFORE", "1-Feb-2026") == [b"1"]
    assert search("SINCE", "1-Mar-2026") == [b"2", b"3"]  # 3 was appended now
    assert search("SENTON", "2-Feb-2026") == [b"3"]
    assert search("LARGER", "200") == [b"1"]
    assert search("2:3", "UNSEEN") == [b"2", b"3"]
    typ, data = m.uid("SEARCH", "SUBJECT", "topic")
    assert data[0].split() == [b"3"]
    typ, data = m._simple_command("SEARCH", "RETURN", "(MIN MAX COUNT)", "UNSEEN")
    assert typ == "OK"
    assert m.untagged_responses.get("ESEARCH"), m.untagged_responses
    esearch = m.untagged_responses.pop("ESEARCH")[0]
    assert b"MIN 2" in esearch and b"MAX 3" in esearch and b"COUNT 2" in esearch
    with pytest.raises(imaplib.IMAP4.error):
        m.search(None, "NOSUCHKEY")
    typ, data = m.search("KOI8-R", "ALL")
    assert typ == "NO" and b"BADCHARSET" in data[0]
    m.logout()


BROKEN_MIME = [
    b"",  # replaced below: APPEND refuses empty messages
    b"no header at all, just text",
    b"Subject: unterminated multipart\r\nContent-Type: multipart/mixed; boundary=x\r\n\r\n"
    b"--x\r\nContent-Type: text/plain\r\n\r\npart one without an end",
    b"Content-Type: multipart/alternative\r\n\r\nboundary parameter missing\r\n",
    b"Subject: " + b"A" * 70000 + b"\r\n\r\nhuge header line",
    b"Content-Type: multipart/mixed; boundary=a\r\n\r\n" + b"--a\r\nContent-Type: multipart/mixed; boundary=a\r\n\r\n" * 300,
    b"Subject: nul \x00 byte\r\nFrom: \x00\r\n\r\nbody \x00 here",
    b"From: broken <<<@@@>>>, \"unterminated\r\nTo: ;;;,,,\r\nCc: group: a@b, c@d;\r\n\r\nx",
    b"Content-Type: text/plain\r\nContent-Transfer-Encoding: base64\r\n\r\n!!!not base64!!!\r\n",
    b"Content-Type: message/rfc822\r\n\r\nContent-Type: message/rfc822\r\n\r\nSubject: inner\r\n",
    b"Subject: mixed line ends\nTo: a@b\r\n\nbody\r\nmore\n",
    b"\r\n\r\n\r\n",
]


def test_broken_mime_is_served_without_crashing(imapd):
    m = login(imapd)
    for msg in BROKEN_MIME:
        if b"\x00" in msg:
            # NUL bytes: refused in an ordinary literal, accepted in a literal8.
            typ, data = m.append("INBOX", None, None, msg)
            assert typ == "NO" and b"literal8" in data[0], data
            s, f = raw(imapd)
            s.sendall(b"a LOGIN alice wonderland\r\n")
            assert f.readline().startswith(b"a OK")
            s.sendall(b"b APPEND INBOX ~{%d+}\r\n" % len(msg) + msg + b"\r\n")
            line = f.readline()
            assert line.startswith(b"b OK [APPENDUID"), line
            s.close()
        else:
            append(m, msg or b"x")
    m.select("INBOX")
    n = len(BROKEN_MIME)
    typ, data = m.fetch(f"1:{n}", "(ENVELOPE BODYSTRUCTURE RFC822.SIZE)")
    assert typ == "OK" and len([d for d in data if d != b")"]) >= n
    for i in range(1, n + 1):
        typ, data = m.fetch(str(i), "(BODY.PEEK[] BODY.PEEK[1] BODY.PEEK[1.MIME] BODY.PEEK[TEXT]"
                                    " BINARY.PEEK[1] BODY.PEEK[HEADER.FIELDS (Subject From)])")
        assert typ in ("OK", "NO"), (i, data)
    typ, _ = m.search(None, "TEXT", "anything")
    assert typ == "OK"
    m.logout()


def test_multiappend_all_or_nothing(imapd):
    s, f = raw(imapd)
    s.sendall(b"a LOGIN alice wonderland\r\n")
    assert f.readline().startswith(b"a OK")
    one, two = b"Subject: one\r\n\r\n1\r\n", b"Subject: two\r\n\r\n2\r\n"
    s.sendall(b"b APPEND INBOX (\\Seen) {%d+}\r\n%s {%d+}\r\n%s\r\n"
              % (len(one), one, len(two), two))
    line = f.readline()
    m = re.match(rb"b OK \[APPENDUID \d+ (\d+),(\d+)\]", line)
    assert m and int(m.group(2)) == int(m.group(1)) + 1, line
    # The second message of this one is refused: the first must not stay.
    s.sendall(b'c APPEND INBOX {%d+}\r\n%s "not a date" {%d+}\r\n%s\r\n'
              % (len(one), one, len(two), two))
    assert f.readline().startswith(b"c BAD")
    s.sendall(b"d STATUS INBOX (MESSAGES)\r\n")
    assert f.readline() == b'* STATUS "INBOX" (MESSAGES 2)\r\n'
    s.close()


def test_append_to_selected_mailbox(imapd):
    """APPEND into the folder the session has selected (it goes through the
    selected folder's own handle): the new message shows up as EXISTS, and a
    refused MULTIAPPEND leaves nothing behind, not even as an EXPUNGE."""
    s, f = raw(imapd)
    s.sendall(b"a LOGIN alice wonderland\r\nb SELECT INBOX\r\n")
    while not f.readline().startswith(b"b OK"):
        pass
    one = b"Subject: one\r\n\r\n1\r\n"
    s.sendall(b"c APPEND INBOX (\\Flagged) {%d+}\r\n%s\r\n" % (len(one), one))
    lines = [f.readline()]
    while not lines[-1].startswith(b"c "):
        lines.append(f.readline())
    assert b"* 1 EXISTS\r\n" in lines, lines
    m = re.match(rb"c OK \[APPENDUID (\d+) 1\]", lines[-1])
    assert m, lines
    s.sendall(b'd APPEND INBOX {%d+}\r\n%s "not a date" {%d+}\r\n%s\r\n'
              % (len(one), one, len(one), one))
    lines = [f.readline()]
    while not lines[-1].startswith(b"d "):
        lines.append(f.readline())
    assert lines[-1].startswith(b"d BAD"), lines
    s.sendall(b"e FETCH 1:* (UID FLAGS)\r\nf NOOP\r\n")
    while not lines[-1].startswith(b"f "):
        lines.append(f.readline())
    untagged = [ln for ln in lines if ln.startswith(b"* ")]
    # Appended while selected: recent for this session (the first told).
    assert untagged == [b"* 1 FETCH (UID 1 FLAGS (\\Recent \\Flagged))\r\n"], lines
    s.close()


def test_many_idle_sessions_all_wake(petreld, tmp_path):
    """More IDLE sessions than the kernel's default 128 inotify instances per
    user: they share one instance, so every one of them wakes natively."""
    d = petreld(imap_overrides(tmp_path, extra={"max_connections_per_user": 0}))
    socks = []
    try:
        for i in range(140):
            s, f = raw(d)
            s.sendall(b"a LOGIN alice wonderland\r\nb SELECT INBOX\r\nc IDLE\r\n")
            while not f.readline().startswith(b"+ "):
                pass
            socks.append((s, f))
        other = login(d)
        t0 = time.monotonic()
        append(other)
        for s, f in socks:
            assert f.readline() == b"* 1 EXISTS\r\n"
        assert time.monotonic() - t0 < 1.5
        other.logout()
    finally:
        for s, f in socks:
            s.close()
    assert "polling" not in d.stderr()


def test_id_enable_check_unselect_close(imapd):
    for name in ("ID", "ENABLE", "UNSELECT"):  # imaplib does not know these
        imaplib.Commands.setdefault(name, ("NONAUTH", "AUTH", "SELECTED"))
    m = login(imapd)
    typ, data = m._simple_command("ID", '("name" "pytest" "version" "1")')
    assert typ == "OK"
    assert b'"name" "Petrel"' in m.untagged_responses.pop("ID")[0]
    typ, data = m._simple_command("ENABLE", "CONDSTORE")
    assert typ == "OK" and m.untagged_responses.pop("ENABLED") == [b"CONDSTORE"]
    for _ in range(2):
        append(m)
    m.select("INBOX")
    assert m.check()[0] == "OK"
    m.store("1", "+FLAGS", r"(\Deleted)")
    # UNSELECT leaves \Deleted messages in place ...
    assert m._simple_command("UNSELECT")[0] == "OK"
    m.state = "AUTH"
    assert m.status("INBOX", "(MESSAGES)")[1][0].endswith(b"(MESSAGES 2)")
    # ... CLOSE expunges them, silently.
    m.select("INBOX")
    m.untagged_responses.clear()
    assert m.close()[0] == "OK"
    assert "EXPUNGE" not in m.untagged_responses
    assert m.status("INBOX", "(MESSAGES)")[1][0].endswith(b"(MESSAGES 1)")
    m.logout()


def read_responses(f, until_tag):
    """Reads IMAP responses up to and including the tagged one of
    `until_tag`: a list of (line bytes with literals cut out, [literals])."""
    out = []
    while True:
        line, literals = b"", []
        while True:
            part = f.readline()
            assert part, "connection closed"
            line += part
            m = re.search(rb"\{(\d+)\}\r\n$", part)
            if not m:
                break
            literals.append(f.read(int(m.group(1))))
        out.append((line, literals))
        if line.startswith(until_tag + b" "):
            return out


@pytest.mark.parametrize("tls", [False, True])
def test_body_from_the_file_keeps_order_and_bytes(petreld, tmp_path, pki, tls):
    """BODY[] of a CRLF-stored message goes from the file (sendfile) on a
    plain connection, the in-memory path under TLS and for LF-stored
    messages: both must give the same bytes, in order with the other
    replies of pipelined commands, also when the client reads late (the
    socket fills and the rest of the file waits in the output queue)."""
    d = petreld(imap_overrides(tmp_path, pki))
    lines = [b"line %07d of a big message %s\r\n" % (i, b"x" * (i % 50)) for i in range(60000)]
    big = b"Subject: big\r\n\r\n" + b"".join(lines)
    m = login(d)
    uids = [append(m, big), append(m, LF_MSG), append(m, MSG)]
    m.logout()
    host, port = addr(d, "listen_tls" if tls else "listen")
    s = socket.create_connection((host, port), timeout=10)
    if tls:
        ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
        s = ctx.wrap_socket(s, server_hostname=host)
    f = s.makefile("rb")
    assert f.readline().startswith(b"* OK")
    s.sendall(b"l LOGIN alice wonderland\r\ns SELECT INBOX\r\n")
    read_responses(f, b"s")
    s.sendall(b"a1 FETCH 1:3 (UID BODY.PEEK[])\r\n"
              b"a2 UID FETCH %d (BODY.PEEK[]<1000.5000>)\r\n"
              b"a3 FETCH 1 (BODY.PEEK[] BODY.PEEK[HEADER.FIELDS (Subject)])\r\n"
              b"a4 FETCH 3 (BODY.PEEK[]<10.20>)\r\n"
              b"a5 NOOP\r\n" % uids[0])
    time.sleep(0.5)  # the server's socket buffer fills before we read
    got = read_responses(f, b"a5")
    tagged = [line.split(b" ")[0] for line, _ in got if not line.startswith(b"*")]
    assert tagged == [b"a1", b"a2", b"a3", b"a4", b"a5"], got
    fetches = [(line, lit) for line, lit in got if line.startswith(b"* ")]
    crlf_lf = LF_MSG.replace(b"\n", b"\r\n")
    assert [lit for _, lit in fetches] == [
        [big], [crlf_lf], [MSG], [big[1000:6000]], [big, b"Subject: big\r\n\r\n"], [MSG[10:30]]]
    assert b"UID %d BODY[] {%d}\r\n)\r\n" % (uids[0], len(big)) in fetches[0][0]
    assert b"BODY[]<1000> {5000}\r\n)\r\n" in fetches[3][0]
    for line, _ in got:
        assert not line.startswith(b"a") or b" OK " in line, line
    s.sendall(b"z LOGOUT\r\n")
    read_responses(f, b"z")
    s.close()


def open_message_files(d):
    """Message files (in some cur/) petreld holds open now."""
    names = []
    for fd in os.listdir(f"/proc/{d.pid}/fd"):
        try:
            target = os.readlink(f"/proc/{d.pid}/fd/{fd}")
        except OSError:
            continue
        if "/cur/" in target:
            names.append(target)
    return names


def test_client_gone_mid_body_closes_the_file(petreld, tmp_path, pki):
    """A body that waits in the output queue as a file segment holds the
    message file open; a client that leaves before reading it must not
    leave the descriptor behind."""
    d = petreld(imap_overrides(tmp_path, pki))
    big = b"Subject: big\r\n\r\n" + (b"y" * 998 + b"\r\n") * 20000
    m = login(d)
    append(m, big)
    m.logout()
    for _ in range(3):
        s, f = raw(d)
        s.sendall(b"l LOGIN alice wonderland\r\ns SELECT INBOX\r\n")
        read_responses(f, b"s")
        s.sendall(b"b FETCH 1 (BODY.PEEK[])\r\n")
        deadline = time.time() + 5
        while not open_message_files(d) and time.time() < deadline:
            time.sleep(0.05)
        assert open_message_files(d), "the body should still be queued from its file"
        f.close()  # the socket stays open while its file object does
        s.close()
    deadline = time.time() + 10
    while open_message_files(d) and time.time() < deadline:
        time.sleep(0.1)
    assert open_message_files(d) == []
    # The server is fine and the message intact.
    m = login(d)
    m.select("INBOX")
    assert m.fetch("1", "(BODY.PEEK[])")[1][0][1] == big
    m.logout()
