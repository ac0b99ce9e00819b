"""What a session is told, and when, while other sessions change the
folder it has selected (RFC 3501 7.2.6, 7.4.1, 5.5): a keyword is
announced in FLAGS and PERMANENTFLAGS before any response uses it, and no
EXPUNGE arrives while a FETCH, STORE or SEARCH is answered, even when the
STORE creates a keyword. Raw sockets, so the order of lines is what is
checked."""

import re
import threading
import socket

import pytest

from test_imap_session import addr, imap_overrides
from test_imap_messages import MSG, append, login


@pytest.fixture
def imapd(petreld, tmp_path):
    return petreld(imap_overrides(tmp_path))


class Session:
    """One raw IMAP connection: run() sends a command and returns the
    untagged lines that came before its tagged completion."""

    def __init__(self, d, user="alice", password="wonderland"):
        self.sock = socket.create_connection(addr(d), timeout=10)
        self.f = self.sock.makefile("rb")
        assert self.f.readline().startswith(b"* OK")
        self.n = 0
        self.run(f"LOGIN {user} {password}")

    def run(self, command, expect=b"OK"):
        self.n += 1
        tag = b"t%d" % self.n
        data = command if isinstance(command, bytes) else command.encode()
        self.sock.sendall(tag + b" " + data + b"\r\n")
        lines = []
        while True:
            line = self.f.readline()
            assert line, "connection closed"
            if line.startswith(tag + b" "):
                assert line.startswith(tag + b" " + expect), (command, line, lines)
                return lines
            lines.append(line.rstrip(b"\r\n"))

    def close(self):
        self.sock.close()


def flags_announced(lines, keyword):
    """Index of the FLAGS line naming `keyword` and whether PERMANENTFLAGS
    names it too; -1 when none does."""
    for i, line in enumerate(lines):
        if line.startswith(b"* FLAGS (") and keyword in line[9:].rstrip(b")").split():
            perm = any(b"PERMANENTFLAGS" in ln and keyword in ln for ln in lines[i:])
            return i, perm
    return -1, False


def first_use(lines, keyword):
    for i, line in enumerate(lines):
        if line.startswith(b"* ") and b" FETCH " in line and re.search(
                rb"FLAGS \([^)]*" + re.escape(keyword) + rb"[ )]", line):
            return i
    return None


def watched_inbox(d, messages, expunge=()):
    """`messages` in INBOX, a raw Session with it selected, and an imaplib
    session `m` (also selected) that then expunges the given sequence
    numbers behind the raw session's back."""
    m = login(d)
    for _ in range(messages):
        append(m)
    s = Session(d)
    s.run("SELECT INBOX")
    m.select("INBOX")
    for seq in expunge:
        m.store(str(seq), "+FLAGS", "(\\Deleted)")
    if expunge:
        m.expunge()
    return m, s


def test_own_store_announces_a_new_keyword_first(imapd):
    m = login(imapd)
    append(m)
    s = Session(imapd)
    s.run("SELECT INBOX")
    lines = s.run("STORE 1 +FLAGS ($Fresh)")
    at, perm = flags_announced(lines, b"$Fresh")
    use = first_use(lines, b"$Fresh")
    assert use is not None and 0 <= at < use and perm, lines
    s.close()
    m.logout()


def test_another_sessions_keyword_is_announced_before_it_is_shown(imapd):
    m, s = watched_inbox(imapd, 2)
    m.store("1", "+FLAGS", "($ByOther)")
    lines = s.run("NOOP")
    at, perm = flags_announced(lines, b"$ByOther")
    use = first_use(lines, b"$ByOther")
    assert use is not None and 0 <= at < use and perm, lines
    # A FETCH that sets \Seen takes in names others created meanwhile: it
    # announces them before any later response could show them.
    m.store("2", "+FLAGS", "($Second)")
    lines = s.run("FETCH 1 (BODY[TEXT])")
    lines += s.run("NOOP")
    at, perm = flags_announced(lines, b"$Second")
    use = first_use(lines, b"$Second")
    assert use is not None and 0 <= at < use and perm, lines
    # Another session's keyword on the message a FETCH marks \Seen: the
    # FETCH takes in the message's flags before the session knows the
    # keyword's name, so its FLAGS leave the keyword out; the next sync
    # announces the name and must then send the message's FLAGS again
    # (nothing else would: the view already holds the keyword's bit).
    assert m.append("INBOX", None, None, MSG)[0] == "OK"
    m.noop()
    s.run("NOOP")
    assert m.store("3", "+FLAGS", "($OnFetched)")[0] == "OK"
    lines = s.run("FETCH 3 (BODY[TEXT])")
    lines += s.run("NOOP")
    at, perm = flags_announced(lines, b"$OnFetched")
    use = first_use(lines, b"$OnFetched")
    assert use is not None and 0 <= at < use and perm, lines
    assert re.search(rb"^\* 3 FETCH \(.*FLAGS \([^)]*\$OnFetched", lines[use]), lines
    s.close()
    m.logout()


@pytest.mark.parametrize("command", ["STORE 1 +FLAGS ($Brand)", "STORE 1 +FLAGS (\\Seen)",
                                     "FETCH 1:* (FLAGS)", "SEARCH ALL", "UID STORE 1 +FLAGS ($x)"])
def test_no_expunge_while_a_fetch_store_or_search_is_answered(imapd, command):
    m, s = watched_inbox(imapd, 3, expunge=[3])
    lines = s.run(command)
    assert not [ln for ln in lines if ln.endswith(b" EXPUNGE")], lines
    # The next command that may carry it does.
    lines = s.run("NOOP")
    assert b"* 3 EXPUNGE" in lines, lines
    s.close()
    m.logout()


def test_pipelined_store_gets_no_expunge_before_its_tagged_reply(imapd):
    """RFC 3501 5.5: commands sent without waiting; the expunge by another
    session must not come before the STORE's tagged OK, whichever command
    carries it afterwards."""
    m, s = watched_inbox(imapd, 3, expunge=[2])
    s.sock.sendall(b"p1 STORE 1 +FLAGS ($Piped)\r\np2 FETCH 1 (FLAGS)\r\np3 NOOP\r\n")
    seen = []
    while True:
        line = s.f.readline()
        assert line
        seen.append(line.rstrip(b"\r\n"))
        if line.startswith(b"p3 "):
            break
    tags = {ln.split()[0]: i for i, ln in enumerate(seen) if ln.startswith(b"p")}
    expunges = [i for i, ln in enumerate(seen) if ln.endswith(b" EXPUNGE")]
    assert expunges and all(i > tags[b"p2"] for i in expunges), seen
    s.close()
    m.logout()


def test_nothing_but_the_tagged_ok_follows_bye(imapd):
    """RFC 3501 7.1.5: at LOGOUT, other sessions' expunges and flag changes
    are not reported after * BYE."""
    m, s = watched_inbox(imapd, 3)
    m.store("1", "+FLAGS", "(\\Flagged)")
    m.store("3", "+FLAGS", "(\\Deleted)")
    m.expunge()
    lines = s.run("LOGOUT")
    assert lines and lines[0].startswith(b"* BYE"), lines
    assert lines == lines[:1], lines
    s.close()
    m.logout()


def test_fetch_of_a_message_expunged_elsewhere_answers_nil_and_ok(imapd):
    """RFC 2180 4.1.3, as Dovecot answers: a message another session
    expunged is still in this session's view until it is told; a FETCH of
    its contents gets NIL for them and the command completes with
    OK [EXPUNGEISSUED], the other messages answered in full."""
    m, s = watched_inbox(imapd, 3, expunge=[2])
    lines = s.run("FETCH 2 (UID FLAGS)")
    assert len(lines) == 1 and lines[0].startswith(b"* 2 FETCH (UID 2 FLAGS ("), lines
    s.n += 1
    tag = b"t%d" % s.n
    s.sock.sendall(tag + b" FETCH 1:3 (UID BODY.PEEK[HEADER.FIELDS (SUBJECT)] BODY.PEEK[] "
                         b"ENVELOPE BINARY.SIZE[1])\r\n")
    got = []
    while True:
        line = s.f.readline()
        m_lit = re.search(rb"\{(\d+)\}\r\n$", line)
        while m_lit:
            line += s.f.read(int(m_lit.group(1)))
            nxt = s.f.readline()
            line += nxt
            m_lit = re.search(rb"\{(\d+)\}\r\n$", nxt)
        got.append(line)
        if line.startswith(tag):
            break
    assert got[-1].startswith(tag + b" OK [EXPUNGEISSUED]"), got[-1]
    fetches = got[:-1]
    assert [f.split()[1] for f in fetches] == [b"1", b"2", b"3"], fetches
    # The items in the order the answer for a present message has them.
    assert fetches[1] == (b"* 2 FETCH (UID 2 ENVELOPE NIL BODY[HEADER.FIELDS (SUBJECT)] NIL "
                          b"BODY[] NIL BINARY.SIZE[1] 0)\r\n"), fetches[1]
    for f in (fetches[0], fetches[2]):
        assert b"Subject:" in f and b"BODY[] {" in f and b"ENVELOPE (" in f, f
    # The expunge itself arrives with the next command that may carry it.
    assert b"* 2 EXPUNGE" in s.run("NOOP")
    s.close()
    m.logout()


# ---------- \Recent (RFC 3501 2.3.2, 6.3.1, 7.3.2) ----------

def recent_of(lines):
    found = [int(ln.split()[1]) for ln in lines if ln.endswith(b" RECENT")]
    return found[-1] if found else None


def flags_by_seq(lines):
    out = {}
    for ln in lines:
        m = re.match(rb"\* (\d+) FETCH \(.*FLAGS \(([^)]*)\)", ln)
        if m:
            out[int(m.group(1))] = m.group(2).split()
    return out


def test_each_new_message_is_recent_for_exactly_one_session(imapd):
    """Dovecot 2.3 gives the same counts and flags for this sequence."""
    m = login(imapd)
    m.create("Copies")
    append(m, box="Copies")
    m.logout()
    m = login(imapd)
    append(m)
    append(m)
    a, b, c = Session(imapd), Session(imapd), Session(imapd)
    # STATUS counts what no session has been told of; EXAMINE shows the
    # recent messages without taking them.
    assert b'RECENT 2' in c.run("STATUS INBOX (RECENT)")[0]
    assert recent_of(c.run("EXAMINE INBOX")) == 2
    assert flags_by_seq(c.run("FETCH 1:2 (FLAGS)")) == {1: [b"\\Recent"], 2: [b"\\Recent"]}
    # The first read-write session takes them; the next sees none.
    assert recent_of(a.run("SELECT INBOX")) == 2
    assert recent_of(b.run("SELECT INBOX")) == 0
    assert m.status("INBOX", "(RECENT)")[1][0].endswith(b" (RECENT 0)")
    assert flags_by_seq(a.run("FETCH 1:2 (FLAGS)")) == {1: [b"\\Recent"], 2: [b"\\Recent"]}
    assert flags_by_seq(b.run("FETCH 1:2 (FLAGS)")) == {1: [], 2: []}
    # A message arriving while both are selected goes to whichever syncs
    # first, and only to it.
    append(m)
    first, second = a.run("NOOP"), b.run("NOOP")
    assert b"* 3 EXISTS" in first and b"* 3 EXISTS" in second
    assert recent_of(first) == 3 and recent_of(second) is None
    assert a.run("SEARCH RECENT") == [b"* SEARCH 1 2 3"]
    assert b.run("SEARCH RECENT") == [b"* SEARCH"]
    assert b.run("SEARCH OLD") == [b"* SEARCH 1 2 3"]
    a.run("STORE 2 +FLAGS.SILENT (\\Seen)")
    assert a.run("SEARCH NEW") == [b"* SEARCH 1 3"]
    # An expunge lowers the count; \Recent cannot be stored.
    a.run("STORE 1 +FLAGS.SILENT (\\Deleted)")
    lines = a.run("EXPUNGE")
    assert b"* 1 EXPUNGE" in lines and recent_of(lines) == 2, lines
    a.run("STORE 1 +FLAGS (\\Recent)", expect=b"BAD")
    # A re-SELECT starts over: what this session was told of is old now.
    assert recent_of(a.run("SELECT INBOX")) == 0
    # COPY: the copies are recent for the next session to select the
    # destination.
    a.run("COPY 1:2 Copies")
    assert recent_of(b.run("SELECT Copies")) == 3
    assert recent_of(a.run("SELECT Copies")) == 0
    for s in (a, b, c):
        s.close()
    m.logout()


# ---------- UTF8=ACCEPT mailbox names (RFC 6855 3) ----------

def test_utf8_accept_names_travel_as_utf8(imapd):
    s = Session(imapd)
    s.run('CREATE "Gr&APwA3w-e"')
    # Not before SELECT is over: names already sent would be read anew.
    s.run("SELECT INBOX")
    s.run("ENABLE UTF8=ACCEPT", expect=b"BAD")
    s.run("UNSELECT")
    assert s.run("ENABLE UTF8=ACCEPT") == [b"* ENABLED UTF8=ACCEPT"]
    assert s.run("ENABLE UTF8=ACCEPT") == [b"* ENABLED"]
    lines = s.run('LIST "" "Gr*"')
    assert lines == ['* LIST (\\HasNoChildren) "/" "Grüße"'.encode()], lines
    s.run('CREATE "Straße/Übung"'.encode())
    lines = s.run('LIST "" "Stra*"'.encode())
    assert [ln.split(b'"/" ')[1] for ln in lines] == ['"Straße"'.encode(), '"Straße/Übung"'.encode()]
    assert s.run('STATUS "Grüße" (MESSAGES)'.encode()) == [
        '* STATUS "Grüße" (MESSAGES 0)'.encode()]
    # "&" is just a character now: no modified UTF-7 decoding.
    s.run('CREATE "R&D"')
    assert s.run('LIST "" "R&D"') == [b'* LIST (\\HasNoChildren) "/" "R&D"']
    s.run(b'CREATE "bad \xff name"', expect=b"BAD")
    # Truncated, overlong, a UTF-16 surrogate, above U+10FFFF: refused in
    # every command that takes a name, quoted or as a literal.
    for bad in (b"\xc3", b"x\xe2\x82", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80"):
        s.run(b'CREATE "%s"' % bad, expect=b"BAD")
        s.run(b'SELECT "%s"' % bad, expect=b"BAD")
        s.run(b'RENAME "R&D" "%s"' % bad, expect=b"BAD")
        s.run(b"CREATE {%d+}\r\n%s" % (len(bad), bad), expect=b"BAD")
    assert s.run('LIST "" "R&D"') == [b'* LIST (\\HasNoChildren) "/" "R&D"']
    s.close()
    # A client without UTF8=ACCEPT still sees modified UTF-7.
    t = Session(imapd)
    names = [ln.split(b'"/" ')[1] for ln in t.run('LIST "" "*"')]
    assert b'"Gr&APwA3w-e"' in names and b'"Stra&AN8-e/&ANw-bung"' in names, names
    assert b'"R&-D"' in names, names
    t.close()


def test_append_utf8_data_item(imapd, tmp_path):
    """RFC 6855 4: APPEND ... UTF8 (~{n}) carries a message with UTF-8
    headers, once UTF8=ACCEPT is enabled; large ones are spooled like any
    APPEND message."""
    s = Session(imapd)
    caps = s.run("CAPABILITY")[0]
    assert b" UTF8=ACCEPT" in caps, caps
    small = "Subject: Grüße\r\nFrom: jürgen@example.org\r\n\r\nhallo\r\n".encode()
    big = small + b"x" * (300 * 1024) + b"\r\n"

    def append(msg, expect):
        s.n += 1
        tag = b"t%d" % s.n
        s.sock.sendall(tag + b" APPEND INBOX UTF8 (~{%d+}\r\n" % len(msg) + msg + b")\r\n")
        line = s.f.readline()
        while line.startswith(b"* "):
            line = s.f.readline()
        assert line.startswith(tag + b" " + expect), line
    append(small, b"BAD")  # not before ENABLE UTF8=ACCEPT
    s.run("ENABLE UTF8=ACCEPT")
    append(small, b"OK")
    append(big, b"OK")
    s.run("SELECT INBOX")
    lines = s.run("FETCH 1:2 (RFC822.SIZE)")
    sizes = sorted(int(re.search(rb"RFC822.SIZE (\d+)", ln).group(1)) for ln in lines)
    assert sizes == [len(small), len(big)], lines
    cur = tmp_path / "mail" / "alice" / "Maildir" / "cur"
    assert sorted(p.read_bytes() for p in cur.iterdir()) == sorted([small, big])
    s.close()


def test_recent_mark_file_damaged_or_older_form(imapd, tmp_path):
    """The mark is a fixed-length record with a checksum, rewritten in
    place; the older "<uid>\n" form is still read, and a damaged record
    makes every message recent once more rather than none."""
    m = login(imapd)
    for _ in range(3):
        append(m)
    a = Session(imapd)
    assert recent_of(a.run("SELECT INBOX")) == 3
    a.close()
    mark = next((tmp_path / "mail").rglob("petrel-recent"))
    text = mark.read_bytes()
    assert len(text) == 20 and text.startswith(b"0000000004 "), text
    mark.write_bytes(b"3\n")  # the older form: UIDs 3.. are recent
    assert m.status("INBOX", "(RECENT)")[1][0].endswith(b" (RECENT 1)")
    mark.write_bytes(text[:11] + b"00000000\n")  # a bad checksum
    assert m.status("INBOX", "(RECENT)")[1][0].endswith(b" (RECENT 3)")
    b = Session(imapd)
    assert recent_of(b.run("SELECT INBOX")) == 3
    assert mark.read_bytes() == text
    b.close()
    # Damaged past a record's length (garbage after it): recent once more,
    # and the file is a record again, not unreadable (and every message
    # recent) at every SELECT from then on.
    mark.write_bytes(text + b"garbage\n")
    c = Session(imapd)
    assert recent_of(c.run("SELECT INBOX")) == 3
    c.close()
    assert mark.read_bytes() == text
    d = Session(imapd)
    assert recent_of(d.run("SELECT INBOX")) == 0
    d.close()


def test_recent_under_racing_selects_examines_and_appends(imapd):
    """Three sessions re-SELECT INBOX (one EXAMINEs every third time), two
    of them APPEND while it is selected, while a fourth delivers 150
    messages: no UID is ever shown \\Recent to two sessions' SELECTs (RFC
    3501 2.3.2), and after each FETCH 1:* the last RECENT count equals the
    number of messages its FLAGS show \\Recent."""
    done = threading.Event()
    seen, problems = {}, []

    def deliver():
        m = login(imapd)
        for i in range(150):
            append(m, b"Subject: r%d\r\n\r\nx\r\n" % i)
        m.logout()
        done.set()

    def racer(name, examines):
        try:
            run_racer(name, examines)
        except Exception as e:  # noqa: BLE001 - reported by the assert below
            problems.append((name, repr(e)))

    def run_racer(name, examines):
        s = Session(imapd)
        mine, n = set(), 0
        while not done.is_set() or n < 3:
            n += 1
            verb = "EXAMINE" if examines and n % 3 == 0 else "SELECT"
            lines = s.run(f"{verb} INBOX")
            if n % 2 == 0 and name != "r2":
                lines += s.run(b"APPEND INBOX {12+}\r\nSubject: o\r\n")
                lines += s.run("NOOP")
            lines += s.run("FETCH 1:* (UID FLAGS)")
            recent = {int(re.search(rb"UID (\d+)", ln).group(1)) for ln in lines
                      if b" FETCH (" in ln and b"\\Recent" in ln}
            counts = [int(ln.split()[1]) for ln in lines if ln.endswith(b" RECENT")]
            if counts and counts[-1] != len(recent):
                problems.append((name, verb, counts[-1], len(recent)))
            if verb == "SELECT":
                mine |= recent
            s.run("STATUS INBOX (RECENT MESSAGES)")
        seen[name] = mine
        s.close()

    first = login(imapd)
    append(first)  # so that FETCH 1:* has a message from the start
    first.logout()
    threads = [threading.Thread(target=deliver)] + [
        threading.Thread(target=racer, args=(f"r{i}", i == 0)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 3 and not problems, problems[:10]
    names = sorted(seen)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not seen[a] & seen[b], (a, b, sorted(seen[a] & seen[b])[:10])
    assert sum(len(v) for v in seen.values()) > 0


def test_recent_claims_survive_kill_9_and_outside_rewrites(imapd, tmp_path):
    """The mark is written through a shared mapping once the file is one
    record long: what a session was told is recent stays claimed when the
    daemon is killed with SIGKILL right after (the store is a page-cache
    write, as a pwrite is), and a handle that mapped the file reads it
    afresh when something else rewrote it in another form meanwhile."""
    m = login(imapd)
    append(m)
    a = Session(imapd)
    assert recent_of(a.run("SELECT INBOX")) == 1  # creates the file: one record
    msg = b"Subject: own\r\n\r\nx\r\n"
    for n in (2, 3):  # own APPENDs while selected: claimed through the mapping
        lines = a.run(b"APPEND INBOX {%d+}\r\n" % len(msg) + msg)
        assert b"* %d EXISTS" % n in lines and recent_of(lines) == n, lines
    mark = next((tmp_path / "mail").rglob("petrel-recent"))
    assert mark.read_bytes().startswith(b"0000000004 "), mark.read_bytes()
    # Rewritten from outside in the older form while `a` holds its mapping
    # (the page now reads "4\n" and zeros): the next claim reads the file
    # as it is, rather than taking it for damaged (every message recent).
    mark.write_bytes(b"4\n")
    append(m)
    lines = a.run("NOOP")
    assert b"* 4 EXISTS" in lines and recent_of(lines) == 4, lines
    assert mark.read_bytes().startswith(b"0000000005 "), mark.read_bytes()
    append(m)
    assert recent_of(a.run("NOOP")) == 5
    imapd.proc.kill()
    imapd.wait()
    imapd.start()
    assert mark.read_bytes().startswith(b"0000000006 "), mark.read_bytes()
    b = Session(imapd)
    assert recent_of(b.run("SELECT INBOX")) == 0
    assert flags_by_seq(b.run("FETCH 1:5 (FLAGS)")) == {i: [] for i in range(1, 6)}
    b.close()
