"""The \\Recent mark file (petrel-recent) changed behind petreld's back
while sessions have the folder selected: emptied, cut short, grown,
replaced by rename, made a symlink or a FIFO. petreld must keep running
(a SIGBUS from a mapped page past the end of the file is a crash of every
session), keep answering, and never write through a link it did not make."""

import os
import re

from test_imap_messages import append, login
from test_imap_untagged_order import Session, imapd, recent_of  # noqa: F401 - fixture


def mark_path(tmp_path):
    return tmp_path / "mail" / "alice" / "Maildir" / "petrel-recent"


def selected_with_mapped_mark(d, tmp_path):
    """`m` (imaplib) and a raw session `a` that has INBOX selected and has
    read and written the mark once it was one record long (so the handle
    holds whatever it keeps of the file: descriptor, mapping)."""
    m = login(d)
    append(m)
    a = Session(d)
    assert recent_of(a.run("SELECT INBOX")) == 1
    append(m)
    assert recent_of(a.run("NOOP")) == 2  # a claim on the one-record file
    assert len(mark_path(tmp_path).read_bytes()) == 20
    return m, a


def alive(d):
    assert d.proc.poll() is None, f"petreld died ({d.proc.returncode}):\n{d.stderr()[-3000:]}"


def test_mark_emptied_while_selected_does_not_crash(imapd, tmp_path):
    """truncate -s 0 petrel-recent (a full disk cleaner, a restore, an admin)
    while a session has the folder selected: the next claim must not touch
    a page past the end of the file."""
    m, a = selected_with_mapped_mark(imapd, tmp_path)
    os.truncate(mark_path(tmp_path), 0)
    append(m)
    lines = a.run("NOOP")  # claims UID 3: reads the mark
    alive(imapd)
    # An empty file is no mark: every message is recent once more.
    assert b"* 3 EXISTS" in lines and recent_of(lines) == 3, lines
    assert mark_path(tmp_path).read_bytes().startswith(b"0000000004 ")
    # The same through a peek (EXAMINE by another session) and STATUS.
    os.truncate(mark_path(tmp_path), 0)
    b = Session(imapd)
    assert recent_of(b.run("EXAMINE INBOX")) == 3
    assert re.search(rb"RECENT 3", a.run("STATUS INBOX (RECENT)")[0])
    alive(imapd)
    a.close()
    b.close()
    m.logout()


def test_mark_cut_short_or_grown_while_selected(imapd, tmp_path):
    m, a = selected_with_mapped_mark(imapd, tmp_path)
    good = mark_path(tmp_path).read_bytes()
    # Cut to ten bytes (the digits only): damaged, every message recent
    # once more, and the file a record again after the claim.
    os.truncate(mark_path(tmp_path), 10)
    append(m)
    lines = a.run("NOOP")
    alive(imapd)
    assert recent_of(lines) == 3, lines
    assert mark_path(tmp_path).read_bytes().startswith(b"0000000004 ")
    # Grown past the record (garbage after it): damaged for every reader,
    # whether it mapped the file or not; all see the same mark.
    with open(mark_path(tmp_path), "ab") as f:
        f.write(b"garbage\n")
    b = Session(imapd)
    peek_b = recent_of(b.run("EXAMINE INBOX"))
    status_a = int(re.search(rb"RECENT (\d+)", a.run("STATUS INBOX (RECENT)")[0]).group(1))
    assert peek_b == status_a, (peek_b, status_a, good)
    alive(imapd)
    a.close()
    b.close()
    m.logout()


def test_mark_replaced_by_rename_is_followed(imapd, tmp_path):
    """A mark file replaced by rename (a restore, `sed -i`, a copy tool):
    a session that had the folder selected must not keep claiming into the
    old inode while new sessions read the new file, or a message is shown
    \\Recent to two sessions (RFC 3501 2.3.2)."""
    m, a = selected_with_mapped_mark(imapd, tmp_path)
    p = mark_path(tmp_path)
    tmp = p.with_name("petrel-recent.tmp")
    tmp.write_bytes(p.read_bytes())
    os.rename(tmp, p)
    append(m)
    lines = a.run("NOOP")
    assert b"* 3 EXISTS" in lines and recent_of(lines) == 3, lines
    b = Session(imapd)
    lines = b.run("SELECT INBOX")
    assert recent_of(lines) == 0, ("UID 3 recent in two sessions", lines)
    a.close()
    b.close()
    m.logout()


def test_mark_symlink_is_not_followed(imapd, tmp_path):
    """petrel-recent made a symlink to a file outside the folder: petreld
    neither reads it as the mark nor writes to (or truncates) the target."""
    m = login(imapd)
    append(m)
    a = Session(imapd)
    a.run("SELECT INBOX")
    a.close()
    p = mark_path(tmp_path)
    victim = tmp_path / "victim.txt"
    content = b"precious data that is longer than one record\n"
    victim.write_bytes(content)
    p.unlink()
    p.symlink_to(victim)
    append(m)
    b = Session(imapd)
    b.run("SELECT INBOX")
    alive(imapd)
    b.close()
    m.logout()
    assert victim.read_bytes() == content


def test_mark_fifo_does_not_hang(imapd, tmp_path):
    m = login(imapd)
    append(m)
    p = mark_path(tmp_path)
    os.mkfifo(p, 0o600)
    a = Session(imapd)
    lines = a.run("SELECT INBOX")
    assert b"* 1 EXISTS" in lines
    a.run("NOOP")
    a.run("EXAMINE INBOX")
    a.run("STATUS INBOX (RECENT)")
    alive(imapd)
    a.close()
    m.logout()


def blocked_on(path):
    """Whether some process waits for a lock on `path` (/proc/locks lists
    a waiter as "N: -> FLOCK ... <maj>:<min>:<inode> ...")."""
    ino = os.stat(path).st_ino
    with open("/proc/locks") as f:
        return any(" -> " in ln and ln.split()[6].endswith(f":{ino}") for ln in f)


def test_claim_waits_for_the_mark_files_lock_and_reads_it_under_it(imapd, tmp_path):
    """Claims are ordered by the mark file's flock (another petreld on the
    same maildir takes it too): a session whose claim finds the file locked
    waits, and then reads the mark again: what the lock holder claimed
    meanwhile is not recent for it (RFC 3501 2.3.2: one session only)."""
    import fcntl
    import select
    from test_imap_update_gates import crc32c
    from conftest import wait_for
    m = login(imapd)
    append(m)
    a = Session(imapd)
    assert recent_of(a.run("SELECT INBOX")) == 1
    p = mark_path(tmp_path)
    fd = os.open(p, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        append(m)  # UID 2, not yet claimed: the mark says 2
        a.n += 1
        a.sock.sendall(b"t%d NOOP\r\n" % a.n)
        wait_for(lambda: blocked_on(p), timeout=10, what="the claim waiting for the lock")
        # Another claimer took UID 2 while holding the lock.
        os.pwrite(fd, b"0000000003 %08x\n" % crc32c(b"0000000003"), 0)
        assert not select.select([a.sock], [], [], 0)[0]
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    lines = []
    while True:
        line = a.f.readline()
        assert line, "connection closed"
        if line.startswith(b"t%d " % a.n):
            break
        lines.append(line.rstrip(b"\r\n"))
    assert b"* 2 EXISTS" in lines and recent_of(lines) in (None, 1), lines
    assert a.run("SEARCH RECENT") == [b"* SEARCH 1"]
    a.close()
    m.logout()


def recent_fds(pid):
    out = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").endswith("/petrel-recent"):
                out += 1
        except OSError:
            pass
    return out


def test_mark_file_held_once_per_open_folder_and_let_go(imapd, tmp_path):
    """Eight sessions with eight folders selected hold one descriptor of
    petrel-recent each (no mapping); a session that selects folder after
    folder, or asks STATUS of each, keeps none of the folders it left, and
    every one is let go at logout."""
    from conftest import wait_for
    m = login(imapd)
    names = [f"F{i}" for i in range(8)]  # (the per-user session limit is 10)
    for n in names:
        assert m.create(n)[0] == "OK"
        append(m, box=n)
    sessions = []
    for n in names:
        s = Session(imapd)
        assert recent_of(s.run(f"SELECT {n}")) == 1
        sessions.append(s)
    assert recent_fds(imapd.pid) == 8
    with open(f"/proc/{imapd.pid}/maps") as f:
        assert not [ln for ln in f if ln.rstrip().endswith("/petrel-recent")]
    for s in sessions:
        s.run("LOGOUT")
        s.close()
    wait_for(lambda: recent_fds(imapd.pid) == 0, what="descriptors let go at logout")
    w = Session(imapd)
    for n in names:
        w.run(f"SELECT {n}")
        w.run(f"STATUS {names[0]} (RECENT)")
    assert recent_fds(imapd.pid) <= 2
    w.run("LOGOUT")
    w.close()
    m.logout()
    wait_for(lambda: recent_fds(imapd.pid) == 0, what="descriptors let go at logout")
