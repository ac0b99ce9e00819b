"""IMAP session loops (imap.workers): the single-loop mode (workers: 1)
still serves and coordinates sessions; with several workers, connections
spread over them while the per-user limit, the session gauges and the
shutdown BYE stay process-wide, and sessions on different workers writing
one folder at once lose nothing. Every daemon is stopped by the harness,
which fails on a sanitizer report (the suite builds with ASan/UBSan)."""

import imaplib
import re
import threading
import time

import pytest

from test_imap_session import imap_overrides, login, connect, raw

MSG = (b"From: a@example.org\r\nTo: b@example.org\r\nSubject: w\r\n"
       b"Message-ID: <w@example.org>\r\n\r\nbody\r\n")


def selected(d, box="INBOX"):
    m = login(d)
    typ, data = m.select(box)
    assert typ == "OK", data
    return m


def idling(d):
    """A raw connection that logged in, selected INBOX and is in IDLE."""
    s, f = raw(d)
    s.sendall(b"a LOGIN alice wonderland\r\nb SELECT INBOX\r\n")
    while not f.readline().startswith(b"b OK"):
        pass
    s.sendall(b"c IDLE\r\n")
    assert f.readline().startswith(b"+ ")
    return s, f


def sessions_gauge(d, state):
    text = d.get("telemetry", "/metrics").body.decode()
    match = re.search(r'^petrel_imap_sessions\{state="%s"\} (\S+)$' % state, text, re.M)
    return float(match.group(1)) if match else 0.0


def test_single_loop_sessions_see_each_other_and_idle_wakes(petreld, tmp_path):
    d = petreld(imap_overrides(tmp_path, extra={"workers": 1}))
    assert "workers=1" in d.stderr()
    a, b = selected(d), selected(d)
    a.append("INBOX", None, None, MSG)
    b.untagged_responses.clear()
    b.noop()
    assert b.untagged_responses.get("EXISTS") == [b"1"], b.untagged_responses
    b.store("1", "+FLAGS", r"(\Deleted)")
    b.expunge()
    a.untagged_responses.clear()
    a.noop()
    assert a.untagged_responses.get("EXPUNGE") == [b"1"], a.untagged_responses
    s, f = idling(d)
    t0 = time.monotonic()
    a.append("INBOX", None, None, MSG)
    assert f.readline() == b"* 1 EXISTS\r\n"
    assert time.monotonic() - t0 < 1.0
    d.stop()
    assert f.readline().startswith(b"* BYE")
    s.close()


def test_limits_and_gauges_hold_across_workers(petreld, tmp_path):
    d = petreld(imap_overrides(tmp_path, extra={"workers": 3,
                                                "max_connections_per_user": 4}))
    assert "workers=3" in d.stderr()
    # Turns: four logins land on three different workers.
    sessions = [login(d) for _ in range(4)]
    assert sessions_gauge(d, "authenticated") == 4
    extra = connect(d)
    with pytest.raises(imaplib.IMAP4.error, match="UNAVAILABLE"):
        extra.login("alice", "wonderland")
    sessions.pop().logout()
    extra.login("alice", "wonderland")
    sessions.append(extra)
    for m in sessions:
        m.logout()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (sessions_gauge(d, "authenticated") != 0 or
                                           sessions_gauge(d, "not_authenticated") != 0):
        time.sleep(0.05)
    assert sessions_gauge(d, "authenticated") == 0
    assert sessions_gauge(d, "not_authenticated") == 0


def test_writers_on_every_worker_lose_nothing(petreld, tmp_path):
    workers, per_worker, appends = 3, 2, 25
    d = petreld(imap_overrides(tmp_path, extra={"workers": workers}))
    clients = [selected(d) for _ in range(workers * per_worker)]
    uids, errors = [], []

    def write(m, n):
        try:
            for i in range(appends):
                typ, data = m.append("INBOX", None, None,
                                     MSG.replace(b"body", b"body %d-%d" % (n, i)))
                assert typ == "OK", data
                uids.append(int(re.search(rb"APPENDUID \d+ (\d+)", data[0]).group(1)))
                typ, data = m.uid("STORE", str(uids[-1]), "+FLAGS", r"(\Flagged)")
                assert typ == "OK", data
                m.noop()
        except Exception as e:  # reported below, with the thread's own message
            errors.append(repr(e))

    threads = [threading.Thread(target=write, args=(m, n)) for n, m in enumerate(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    total = workers * per_worker * appends
    assert sorted(uids) == list(range(1, total + 1))
    for m in clients:
        typ, data = m.noop()
        typ, data = m.uid("SEARCH", None, "FLAGGED")
        assert len(data[0].split()) == total
        typ, data = m.status("INBOX", "(MESSAGES)")
        assert b"MESSAGES %d" % total in data[0]
        m.logout()


def test_shutdown_says_bye_on_every_worker(petreld, tmp_path):
    d = petreld(imap_overrides(tmp_path, extra={"workers": 3}))
    conns = []
    for i in range(6):
        s, f = raw(d)
        if i % 2 == 0:  # some idling, some just logged in
            s.sendall(b"a LOGIN alice wonderland\r\nb SELECT INBOX\r\n")
            while not f.readline().startswith(b"b OK"):
                pass
            s.sendall(b"c IDLE\r\n")
            assert f.readline().startswith(b"+ ")
        conns.append((s, f))
    d.stop()
    for s, f in conns:
        assert f.readline().startswith(b"* BYE")
        s.close()


def test_watched_folder_sees_other_programs_changes(petreld, tmp_path):
    """A selected folder is watched (inotify) so a command syncs only after a
    change: a file another program drops into new/, a flag rename in cur/
    by another Maildir client, and the folder deleted and re-created must
    all still show up at the next NOOP."""
    d = petreld(imap_overrides(tmp_path, extra={"workers": 2}))
    m = selected(d)
    maildir = tmp_path / "mail" / "alice" / "Maildir"
    (maildir / "tmp" / "1700000000.P1Q1.ext").write_bytes(MSG)
    (maildir / "tmp" / "1700000000.P1Q1.ext").rename(maildir / "new" / "1700000000.P1Q1.ext")
    m.untagged_responses.clear()
    m.noop()
    assert m.untagged_responses.get("EXISTS") == [b"1"], m.untagged_responses
    m.noop()  # nothing new: nothing reported
    assert m.untagged_responses.get("EXISTS") == [b"1"], m.untagged_responses
    (cur,) = list((maildir / "cur").iterdir())
    base = cur.name.split(":2,")[0]
    cur.rename(maildir / "cur" / (base + ":2,F"))
    m.untagged_responses.clear()
    m.noop()
    fetches = m.untagged_responses.get("FETCH", [])
    assert any(b"\\Flagged" in f for f in fetches), m.untagged_responses
    # Another session replaces the folder: the old one's UIDs are void.
    other = login(d)
    assert other.create("Work")[0] == "OK"
    w = selected(d, "Work")
    other.delete("Work")
    other.create("Work")
    other.append("Work", None, None, MSG)
    w.untagged_responses.clear()
    typ, data = w.noop()
    assert b"CLOSED" in b" ".join(x for x in w.untagged_responses.get("OK", []) if x), \
        w.untagged_responses
    for c in (m, other, w):
        c.logout()


def test_selected_folder_renamed_by_another_session(petreld, tmp_path):
    """A session whose selected folder another session renames is told the
    mailbox is gone ([CLOSED]) at its next command; its messages are in the
    renamed folder, and a new folder that takes the old name starts empty
    (the old session never writes into it)."""
    d = petreld(imap_overrides(tmp_path, extra={"workers": 2}))
    other = login(d)
    assert other.create("Work")[0] == "OK"
    assert other.append("Work", r"(\Flagged)", None, MSG)[0] == "OK"
    w = selected(d, "Work")
    assert other.rename("Work", "Done")[0] == "OK"
    assert other.create("Work")[0] == "OK"
    w.untagged_responses.clear()
    w.noop()
    assert b"CLOSED" in b" ".join(x for x in w.untagged_responses.get("OK", []) if x), \
        w.untagged_responses
    typ, data = w.select("Work")
    assert typ == "OK" and data == [b"0"], (typ, data)
    typ, data = w.select("Done")
    assert typ == "OK" and data == [b"1"], (typ, data)
    typ, data = w.fetch("1", "(FLAGS)")
    assert b"\\Flagged" in data[0], data
    for c in (w, other):
        c.logout()


def uidvalidity(m):
    return int(m.untagged_responses["UIDVALIDITY"][-1])


def test_reselect_of_the_same_folder_sees_everything(petreld, tmp_path):
    """SELECT of the folder already selected reuses its open handle: what
    others did meanwhile (another session's append and flags, a file
    another program dropped into new/, the folder replaced) must all be in
    the new selection exactly as a fresh open would show it."""
    d = petreld(imap_overrides(tmp_path, extra={"workers": 2}))
    a, other = selected(d), login(d)
    a.append("INBOX", None, None, MSG)
    other.append("INBOX", r"(\Flagged)", None, MSG)
    maildir = tmp_path / "mail" / "alice" / "Maildir"
    (maildir / "tmp" / "1700000001.P2Q2.ext").write_bytes(MSG)
    (maildir / "tmp" / "1700000001.P2Q2.ext").rename(maildir / "new" / "1700000001.P2Q2.ext:2,S")
    first = uidvalidity(a)
    a.untagged_responses.clear()
    typ, data = a.select("INBOX")
    assert typ == "OK" and data == [b"3"], (typ, data)
    assert uidvalidity(a) == first
    typ, data = a.fetch("1:*", "(UID FLAGS)")
    assert len(data) == 3 and b"\\Flagged" in data[1] and b"\\Seen" in data[2], data
    # the watch kept across the re-SELECT still hears others
    other.append("INBOX", None, None, MSG)
    a.untagged_responses.clear()
    a.noop()
    assert a.untagged_responses.get("EXISTS") == [b"4"], a.untagged_responses
    assert other.create("Work")[0] == "OK"
    other.append("Work", None, None, MSG)
    a.select("Work")
    old = uidvalidity(a)
    other.delete("Work")
    other.create("Work")
    for _ in range(2):
        other.append("Work", None, None, MSG)
    a.untagged_responses.clear()
    typ, data = a.select("Work")
    assert typ == "OK" and data == [b"2"], (typ, data)
    assert uidvalidity(a) > old
    typ, data = a.uid("FETCH", "1:*", "(UID)")
    assert [re.search(rb"UID (\d+)", x).group(1) for x in data] == [b"1", b"2"], data
    # the replaced folder got a new watch: it hears others too
    other.append("Work", None, None, MSG)
    a.untagged_responses.clear()
    a.noop()
    assert a.untagged_responses.get("EXISTS") == [b"3"], a.untagged_responses
    # EXAMINE of the same folder: read-only from the same handle.
    typ, data = a.select("Work", readonly=True)
    assert typ == "OK" and data == [b"3"]
    typ, data = a.store("1", "+FLAGS", r"(\Seen)")
    assert typ == "NO", (typ, data)
    for c in (a, other):
        c.logout()


def fetch_flags_of(m):
    """{seq: flags text} of the untagged FETCH responses m has collected."""
    out = {}
    for item in m.untagged_responses.get("FETCH", []):
        text = item.decode() if isinstance(item, bytes) else str(item)
        match = re.match(r"(\d+) \(.*FLAGS \(([^)]*)\)", text)
        if match:
            out[int(match.group(1))] = match.group(2)
    return out


def expect_delivery_reported(m, tmp_path, name, exists):
    """Another program drops `name` into alice's new/; m's next NOOP reports it."""
    maildir = tmp_path / "mail" / "alice" / "Maildir"
    if not maildir.is_dir():
        maildir = next(p.parent for p in tmp_path.rglob("cur") if p.parent.name == "Maildir")
    (maildir / "new" / name).write_bytes(MSG)
    m.untagged_responses.clear()
    m.noop()
    assert m.untagged_responses.get("EXISTS") == [str(exists).encode()], m.untagged_responses


@pytest.mark.parametrize("workers", [1, 2])
def test_own_stores_are_quiet_but_others_changes_are_reported(petreld, tmp_path, workers):
    # A session's own flag renames are not reported back to it as changes
    # (it answered them itself), while other sessions' changes always are:
    # on the same loop (workers: 1, one inotify instance for both) and on
    # another, including a change the own STORE's locked refresh took into
    # the handle before the session's view saw it.
    d = petreld(imap_overrides(tmp_path, extra={"workers": workers}))
    a, b = selected(d), selected(d)
    for _ in range(4):
        a.append("INBOX", None, None, MSG)
    for m in (a, b):
        m.noop()
    # a's own STORE: answered once, not again at the next NOOP
    a.untagged_responses.clear()
    typ, data = a.store("1", "+FLAGS", r"(\Seen)")
    assert typ == "OK" and b"\\Seen" in data[0], data
    a.untagged_responses.clear()
    a.noop()
    assert "FETCH" not in a.untagged_responses, a.untagged_responses
    # ... but b hears of it
    b.untagged_responses.clear()
    b.noop()
    assert "\\Seen" in fetch_flags_of(b).get(1, ""), b.untagged_responses
    # b changes 2, then a changes 3 before syncing: a's STORE took b's
    # change into its index under the lock; a's next NOOP still reports it
    b.store("2", "+FLAGS", r"(\Flagged)")
    a.untagged_responses.clear()
    a.uid("STORE", "3", "+FLAGS", r"(\Answered)")
    a.untagged_responses.clear()
    a.noop()
    assert "\\Flagged" in fetch_flags_of(a).get(2, ""), a.untagged_responses
    # a file dropped into new/ by another program right after a's STORE
    a.store("4", "+FLAGS", r"(\Draft)")
    expect_delivery_reported(a, tmp_path, "1800000000.M1P1.other", 5)
    # a keyword b creates reaches a with its name (a FLAGS update first)
    b.store("1", "+FLAGS", "($Work)")
    a.untagged_responses.clear()
    a.noop()
    assert "$Work" in fetch_flags_of(a).get(1, ""), a.untagged_responses
    assert any(b"$Work" in f for f in a.untagged_responses.get("FLAGS", [])), \
        a.untagged_responses
    # IDLE of b wakes for a's STORE (b expects none of a's events)
    s, f = idling(d)
    t0 = time.monotonic()
    a.store("5", "+FLAGS", r"(\Seen)")
    line = f.readline()
    assert line.startswith(b"* 5 FETCH") and b"\\Seen" in line, line
    assert time.monotonic() - t0 < 1.0
    s.sendall(b"DONE\r\n")
    s.close()
    for m in (a, b):
        m.logout()


@pytest.mark.parametrize("workers", [1, 2])
def test_own_appends_and_expunges_are_reported_once(petreld, tmp_path, workers):
    # A session's own APPEND and EXPUNGE reach its view from its handle (the
    # watch takes their events as its own): each is reported once, in the
    # command's reply, never again at the next NOOP; other sessions' changes
    # are still reported, including one the own APPEND took in under the
    # lock and a file another program drops into new/ right after it.
    d = petreld(imap_overrides(tmp_path, extra={"workers": workers}))
    a, b = selected(d), selected(d)
    a.untagged_responses.clear()
    typ, data = a.append("INBOX", None, None, MSG)
    assert typ == "OK" and b"APPENDUID" in data[0], data
    assert a.untagged_responses.get("EXISTS") == [b"1"], a.untagged_responses
    a.untagged_responses.clear()
    a.noop()
    assert "EXISTS" not in a.untagged_responses, a.untagged_responses
    b.untagged_responses.clear()
    b.noop()
    assert b.untagged_responses.get("EXISTS") == [b"1"], b.untagged_responses
    # b appends, then a appends before syncing: a's reply counts both
    b.append("INBOX", None, None, MSG)
    a.untagged_responses.clear()
    a.append("INBOX", None, None, MSG)
    assert a.untagged_responses.get("EXISTS") == [b"3"], a.untagged_responses
    a.untagged_responses.clear()
    a.noop()
    assert "EXISTS" not in a.untagged_responses, a.untagged_responses
    # a's own EXPUNGE: answered once; b hears of it
    b.noop()
    a.store("1", "+FLAGS", r"(\Deleted)")
    a.untagged_responses.clear()
    typ, data = a.expunge()
    assert typ == "OK" and data == [b"1"], (typ, data)
    a.untagged_responses.clear()
    a.noop()
    assert not {"EXPUNGE", "EXISTS"} & set(a.untagged_responses), a.untagged_responses
    b.untagged_responses.clear()
    b.noop()
    assert b.untagged_responses.get("EXPUNGE") == [b"1"], b.untagged_responses
    # a file dropped into new/ by another program right after a's APPEND
    a.append("INBOX", None, None, MSG)
    expect_delivery_reported(a, tmp_path, "1800000000.M2P2.other", 4)
    # IDLE of b wakes for a's APPEND and EXPUNGE
    b.logout()
    s, f = idling(d)
    t0 = time.monotonic()
    a.append("INBOX", None, None, MSG)
    line = f.readline()
    assert line.startswith(b"* ") and line.rstrip().endswith(b"EXISTS"), line
    assert time.monotonic() - t0 < 1.0
    a.store("1", "+FLAGS", r"(\Deleted)")
    a.expunge()
    t0 = time.monotonic()
    while True:
        line = f.readline()
        if line.rstrip().endswith(b"EXPUNGE"):
            break
        assert line.startswith(b"* "), line
    assert time.monotonic() - t0 < 1.0
    s.sendall(b"DONE\r\n")
    s.close()
    a.logout()
