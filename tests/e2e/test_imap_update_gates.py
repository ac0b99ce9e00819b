"""Review tests for the IMAP fast paths (the per-command shortcuts in
imap-session.c, imap-cmd-select.c and maildir-recent.c): each command
whose name shares a first letter with FETCH/STORE/SEARCH/SORT/THREAD is
gated exactly as RFC 3501 7.4.1 / 5.5 and RFC 5256 say, the cached
keyword-name mask follows a re-SELECT of another folder, and the \\Recent
mark record is read no more leniently than it is written. Raw sockets,
real petreld."""

import re

import pytest

from test_imap_messages import append, login
from test_imap_untagged_order import (Session, first_use, flags_announced, imapd,  # noqa: F401
                                      recent_of, watched_inbox)


@pytest.mark.parametrize("command", [
    "UID FETCH 1:* (FLAGS)", "UID SEARCH ALL", "SORT (ARRIVAL) UTF-8 ALL",
    "UID SORT (ARRIVAL) UTF-8 ALL", "THREAD REFERENCES UTF-8 ALL",
    "UID THREAD ORDEREDSUBJECT UTF-8 ALL", "SEARCH RETURN (ALL) ALL",
])
def test_no_expunge_while_uid_sort_thread_forms_are_answered(imapd, command):
    """RFC 3501 7.4.1 (UID forms included) and RFC 5256 BASE.6.4.SORT /
    THREAD: no EXPUNGE during these; the next NOOP carries it."""
    m, s = watched_inbox(imapd, 3, expunge=[3])
    lines = s.run(command)
    assert not [ln for ln in lines if ln.endswith(b" EXPUNGE")], (command, lines)
    assert b"* 3 EXPUNGE" in s.run("NOOP")
    s.close()
    m.logout()


@pytest.mark.parametrize("command", [
    "CHECK", "STATUS INBOX (MESSAGES)", "SUBSCRIBE INBOX", "UID EXPUNGE 1000", "NOOP",
])
def test_commands_sharing_a_first_letter_still_carry_the_expunge(imapd, command):
    """Commands outside the quiet set that begin with C, S or U (the letters
    the shortcut looks at) send the pending EXPUNGE before their tagged OK,
    as Dovecot does."""
    m, s = watched_inbox(imapd, 3, expunge=[3])
    lines = s.run(command)
    assert b"* 3 EXPUNGE" in lines, (command, lines)
    s.close()
    m.logout()


@pytest.mark.parametrize("select", ["SELECT INBOX", "SELECT INBOX (CONDSTORE)"])
def test_keyword_named_after_reselect_of_another_folder_is_shown(imapd, select):
    """The session's mask of named keyword slots belongs to the selected
    folder: after a folder whose slot 0 is named, INBOX's own slot 0 (named
    later, by another session, on a message this session's FETCH marked
    \\Seen before it knew the name) must still get its FLAGS announced and
    the message's FETCH sent again with the keyword."""
    m = login(imapd)
    m.create("Other")
    append(m, box="Other")
    m.select("Other")
    assert m.store("1", "+FLAGS", "($InOther)")[0] == "OK"
    append(m)
    s = Session(imapd)
    s.run("SELECT Other")
    s.run(select)
    m.select("INBOX")
    assert m.store("1", "+FLAGS", "($LaterInInbox)")[0] == "OK"
    lines = s.run("FETCH 1 (BODY[TEXT])")
    lines += s.run("NOOP")
    at, perm = flags_announced(lines, b"$LaterInInbox")
    use = first_use(lines, b"$LaterInInbox")
    assert use is not None and 0 <= at < use and perm, lines
    assert re.search(rb"^\* 1 FETCH \(.*FLAGS \([^)]*\$LaterInInbox", lines[use]), lines
    if "CONDSTORE" in select:
        assert b"MODSEQ (" in lines[use], lines
    s.close()
    m.logout()


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_recent_mark_record_is_read_strictly(imapd, tmp_path):
    """Only "%010u %08x\\n" (or the older "<digits>\\n") is a record: a
    20-byte text with nine digits whose checksum covers its first ten bytes,
    a mark past 2^32-1 with a right checksum, or a sign, is damaged, and
    damaged means every message recent once more (RECENT 3), not a mark."""
    m = login(imapd)
    for _ in range(3):
        append(m)
    s = Session(imapd)
    assert recent_of(s.run("SELECT INBOX")) == 3
    s.close()
    mark = next((tmp_path / "mail").rglob("petrel-recent"))
    good = mark.read_bytes()
    # The checksum is CRC-32C of the ten digits, as the writer formats it.
    assert good == b"0000000004 %08x\n" % crc32c(good[:10]), good

    def status_recent():
        return int(re.search(rb"RECENT (\d+)", m.status("INBOX", "(RECENT)")[1][0]).group(1))

    assert status_recent() == 0
    nine = b"000000004 "
    for bad in (nine + b" %08x\n" % crc32c(nine),           # nine digits
                b"9999999999 %08x\n" % crc32c(b"9999999999"),  # above 2^32-1
                b"+000000004 %08x\n" % crc32c(b"+000000004"),  # a sign
                b"+4\n", b" 4\n", b"4 \n", b"0\n"):
        mark.write_bytes(bad)
        assert status_recent() == 3, bad
    for older, recent in ((b"4\n", 0), (b"3\n", 1), (b"00000000000000001\n", 3)):
        mark.write_bytes(older)
        assert status_recent() == recent, older
    m.logout()


@pytest.mark.parametrize("enable", [None, "CONDSTORE", "QRESYNC"])
def test_keywords_from_append_and_after_expunge_are_announced(imapd, enable):
    """A keyword another session creates by APPEND is in FLAGS and
    PERMANENTFLAGS before this session's FETCH shows it; after the last
    message carrying a keyword is expunged, that keyword on another message
    and a keyword new after it are shown only once announced (the names
    this session was told stay valid; a new one comes with a FLAGS)."""
    m = login(imapd)
    append(m)
    s = Session(imapd)
    if enable:
        s.run(f"ENABLE {enable}")
    s.run("SELECT INBOX")
    append(m, flags="($ViaAppend)")
    lines = s.run("NOOP")
    lines += s.run("FETCH 2 (FLAGS)")
    at, perm = flags_announced(lines, b"$ViaAppend")
    use = first_use(lines, b"$ViaAppend")
    assert use is not None and 0 <= at < use and perm, lines
    # Expunge the only message carrying it, then use it again, and a new one.
    m.select("INBOX")
    m.store("2", "+FLAGS", "(\\Deleted)")
    m.expunge()
    lines = s.run("NOOP")
    gone = b"* VANISHED 2" if enable == "QRESYNC" else b"* 2 EXPUNGE"
    assert gone in lines, lines
    m.store("1", "+FLAGS", "($ViaAppend $AfterExpunge)")
    lines = s.run("NOOP")
    at, perm = flags_announced(lines, b"$AfterExpunge")
    use = first_use(lines, b"$AfterExpunge")
    assert use is not None and 0 <= at < use and perm, lines
    assert re.search(rb"^\* 1 FETCH \(.*FLAGS \([^)]*\$ViaAppend", lines[use]), lines
    if enable:
        assert b"MODSEQ (" in lines[use], lines
    s.close()
    m.logout()
