"""QRESYNC (RFC 7162 section 3.2): ENABLE QRESYNC, SELECT with the QRESYNC
parameter (VANISHED (EARLIER) and the flag changes since the client's
mod-sequence), VANISHED instead of EXPUNGE once enabled, and UID FETCH's
VANISHED modifier. The shapes are the RFC's examples (3.2.5.2, 3.2.6,
3.2.10) on messages made here."""

import re

import pytest

from test_imap_messages import append, login
from test_imap_session import imap_overrides
from test_imap_untagged_order import Session


@pytest.fixture
def imapd(petreld, tmp_path):
    return petreld(imap_overrides(tmp_path))


def status(m):
    typ, data = m.status("INBOX", "(UIDVALIDITY HIGHESTMODSEQ)")
    text = data[0].decode()
    return (int(re.search(r"UIDVALIDITY (\d+)", text).group(1)),
            int(re.search(r"HIGHESTMODSEQ (\d+)", text).group(1)))


def changed_since(m, uidv, modseq):
    """Expunges UIDs 2 and 4 and flags UID 5 after (uidv, modseq) was taken."""
    m.select("INBOX")
    m.uid("STORE", "2,4", "+FLAGS.SILENT", "(\\Deleted)")
    m.expunge()
    m.uid("STORE", "5", "+FLAGS.SILENT", "(\\Flagged)")
    m.close()


def six_messages_then_changes(d):
    """Six messages, the folder's (UIDVALIDITY, HIGHESTMODSEQ) taken, then
    the changes of changed_since(); returns the session and that state."""
    m = login(d)
    for _ in range(6):
        append(m)
    uidv, modseq = status(m)
    changed_since(m, uidv, modseq)
    return m, uidv, modseq


def test_enable_and_select_with_qresync(imapd):
    m, uidv, modseq = six_messages_then_changes(imapd)
    s = Session(imapd)
    assert b" QRESYNC" in s.run("CAPABILITY")[0]
    # The parameter needs ENABLE QRESYNC first (RFC 7162 3.2.5).
    s.run(f"SELECT INBOX (QRESYNC ({uidv} {modseq}))", expect=b"BAD")
    assert s.run("ENABLE QRESYNC") == [b"* ENABLED QRESYNC"]
    lines = s.run(f"SELECT INBOX (QRESYNC ({uidv} {modseq} 1:6))")
    vanished = [ln for ln in lines if ln.startswith(b"* VANISHED")]
    fetches = [ln for ln in lines if b" FETCH " in ln]
    assert vanished == [b"* VANISHED (EARLIER) 2,4"], lines
    assert len(fetches) == 1 and re.match(
        rb"\* 3 FETCH \(UID 5 FLAGS \([^)]*\\Flagged[^)]*\) MODSEQ \(\d+\)\)$", fetches[0]), lines
    # After the SELECT's own responses: the VANISHED and FETCH come last.
    assert lines.index(vanished[0]) > max(i for i, ln in enumerate(lines) if b"UIDNEXT" in ln)
    # The seq-match data is taken (and checked), known-uids narrows VANISHED.
    lines = s.run(f"SELECT INBOX (QRESYNC ({uidv} {modseq} 3:6 (1:4 1:4)))")
    assert [ln for ln in lines if ln.startswith(b"* VANISHED")] == [b"* VANISHED (EARLIER) 4"]
    s.run(f"SELECT INBOX (QRESYNC ({uidv} {modseq} 3:6 (1:4 1:3)))", expect=b"BAD")
    # Another UIDVALIDITY: the client's state is void, nothing is replayed.
    lines = s.run(f"SELECT INBOX (QRESYNC ({uidv + 1} {modseq}))")
    assert not [ln for ln in lines if b"VANISHED" in ln or b" FETCH " in ln], lines
    # CONDSTORE and QRESYNC together, and a bad parameter.
    s.run(f"EXAMINE INBOX (CONDSTORE QRESYNC ({uidv} {modseq}))")
    s.run("SELECT INBOX (QRESYNC (0 1))", expect=b"BAD")
    s.run("SELECT INBOX (NOSUCH)", expect=b"BAD")
    s.close()
    m.logout()


def test_vanished_replaces_expunge_once_enabled(imapd):
    m = login(imapd)
    for _ in range(4):
        append(m)
    s = Session(imapd)
    s.run("ENABLE QRESYNC")
    s.run("SELECT INBOX")
    m.select("INBOX")
    m.uid("STORE", "2:3", "+FLAGS.SILENT", "(\\Deleted)")
    m.expunge()
    lines = s.run("NOOP")
    assert b"* VANISHED 2:3" in lines and not [ln for ln in lines if b"EXPUNGE" in ln], lines
    # The session's own EXPUNGE is reported the same way.
    s.run("UID STORE 4 +FLAGS.SILENT (\\Deleted)")
    lines = s.run("EXPUNGE")
    assert lines[0] == b"* VANISHED 4" and not [ln for ln in lines if b"EXPUNGE" in ln], lines
    s.close()
    m.logout()


def test_uid_fetch_vanished_modifier(imapd):
    m, uidv, modseq = six_messages_then_changes(imapd)
    s = Session(imapd)
    s.run("SELECT INBOX")
    s.run(f"UID FETCH 1:* (FLAGS) (CHANGEDSINCE {modseq} VANISHED)", expect=b"BAD")
    s.run("ENABLE QRESYNC")
    lines = s.run(f"UID FETCH 1:* (FLAGS) (CHANGEDSINCE {modseq} VANISHED)")
    assert lines[0] == b"* VANISHED (EARLIER) 2,4", lines
    assert len(lines) == 2 and re.match(rb"\* 3 FETCH \(UID 5 FLAGS \(", lines[1]), lines
    # Only within the set asked for; FETCH without UID, or without
    # CHANGEDSINCE, may not carry it.
    lines = s.run(f"UID FETCH 3:6 (FLAGS) (CHANGEDSINCE {modseq} VANISHED)")
    assert lines[0] == b"* VANISHED (EARLIER) 4", lines
    s.run(f"FETCH 1:* (FLAGS) (CHANGEDSINCE {modseq} VANISHED)", expect=b"BAD")
    s.run("UID FETCH 1:* (FLAGS) (VANISHED)", expect=b"BAD")
    s.close()
    m.logout()


def test_known_uids_narrow_the_flag_changes_and_refuse_star(imapd):
    """RFC 7162 3.2.5 (as RFC 5162 put it): "If the list of known UIDs was
    also provided, the server should only report flag changes and expunges
    for the specified messages"; Dovecot 2.3 answers so. known-uids is a
    sequence-set without "*", which Dovecot refuses with BAD too."""
    m, uidv, modseq = six_messages_then_changes(imapd)
    m = login(imapd)
    m.select("INBOX")
    m.uid("STORE", "1,3", "+FLAGS.SILENT", "(\\Seen)")  # UIDs 1, 3 and 5 changed now
    m.logout()
    s = Session(imapd)
    s.run("ENABLE QRESYNC")
    lines = s.run(f"EXAMINE INBOX (QRESYNC ({uidv} {modseq} 2:4))")
    assert [ln for ln in lines if ln.startswith(b"* VANISHED")] == [b"* VANISHED (EARLIER) 2,4"]
    fetches = [ln for ln in lines if b" FETCH " in ln]
    assert len(fetches) == 1 and re.match(rb"\* 2 FETCH \(UID 3 FLAGS \(\\Seen\) MODSEQ", fetches[0]), \
        lines
    # Without known-uids every changed message is reported.
    lines = s.run(f"EXAMINE INBOX (QRESYNC ({uidv} {modseq}))")
    assert [re.match(rb"\* \d+ FETCH \(UID (\d+)", ln).group(1) for ln in lines
            if b" FETCH " in ln] == [b"1", b"3", b"5"], lines
    s.run(f"SELECT INBOX (QRESYNC ({uidv} {modseq} 1:*))", expect=b"BAD")
    s.run(f"SELECT INBOX (QRESYNC ({uidv} {modseq} 1:6 (1:* 1:*)))", expect=b"BAD")
    s.close()


def test_vanished_never_names_a_uid_not_yet_given(imapd):
    """known-uids and UID FETCH sets may reach past UIDNEXT (the client
    asks about 1:10 with UIDNEXT 7): UIDs from UIDNEXT on were never
    given, so they are not "vanished" (RFC 7162 3.2.10 lists expunged UIDs
    only; Dovecot 2.3 answers 2,4 here). A mutation that cut the range at
    UIDNEXT instead of UIDNEXT-1 went unnoticed."""
    m, uidv, modseq = six_messages_then_changes(imapd)
    s = Session(imapd)
    s.run("ENABLE QRESYNC")
    for known in ("1:10", "5:4294967295", "7:9"):
        lines = s.run(f"SELECT INBOX (QRESYNC ({uidv} {modseq} {known}))")
        vanished = [ln for ln in lines if ln.startswith(b"* VANISHED")]
        expect = {"1:10": [b"* VANISHED (EARLIER) 2,4"], "5:4294967295": [], "7:9": []}[known]
        assert vanished == expect, (known, lines)
    lines = s.run(f"UID FETCH 1:100 (FLAGS) (CHANGEDSINCE {modseq} VANISHED)")
    assert lines[0] == b"* VANISHED (EARLIER) 2,4", lines
    s.close()
    m.logout()


def test_flag_change_fetches_carry_uid_once_qresync_is_on(imapd):
    """RFC 7162 3.2.4: once QRESYNC is enabled, the untagged FETCH of a
    STORE (not only UID STORE) and of a FETCH that sets \\Seen carry the UID
    and the mod-sequence, so a client can apply them without a sequence
    map (Dovecot 2.3: "* 2 FETCH (UID 2 MODSEQ (8) FLAGS (\\Seen \\Recent))")."""
    m = login(imapd)
    for _ in range(3):
        append(m)
    m.logout()
    s = Session(imapd)
    s.run("ENABLE QRESYNC")
    s.run("SELECT INBOX")
    lines = s.run("STORE 2 +FLAGS (\\Flagged)")
    assert len(lines) == 1 and re.match(rb"\* 2 FETCH \(UID 2 FLAGS \([^)]*\\Flagged[^)]*\) "
                                        rb"MODSEQ \(\d+\)\)$", lines[0]), lines
    lines = s.run("FETCH 3 (BODY[TEXT])")
    assert re.match(rb"\* 3 FETCH \(UID 3 FLAGS \([^)]*\\Seen[^)]*\) MODSEQ \(\d+\) BODY\[TEXT\]",
                    lines[0]), lines
    # Without QRESYNC a plain STORE answers as before.
    t = Session(imapd)
    t.run("SELECT INBOX")
    lines = t.run("STORE 1 +FLAGS (\\Flagged)")
    assert re.match(rb"\* 1 FETCH \(FLAGS \(", lines[0]), lines
    s.close()
    t.close()
