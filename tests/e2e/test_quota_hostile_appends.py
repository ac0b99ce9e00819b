"""Quota enforcement against hostile and unusual clients (review of issue 22):
a LITERAL+ literal over quota whose bytes keep coming (read and dropped, not
spooled, memory bounded), a refused literal in the middle of a MULTIAPPEND
whose later literal carries command text (never run as a command), a
literal over quota_mail_size that is also over the IMAP literal limit (the
size cap's reply, as the Errors table says), and the kept folder list when
the Maildir root's modification time is put back to what it was (rsync -t,
a restore) after a folder was made."""

import os
import socket
import threading

import pytest

import test_quota_enforcement as qe
from test_quota_enforcement import qd  # noqa: F401 (the fixture)
from test_connection_limits import small_quarantine, status_kb

EXCEEDED = qe.EXCEEDED


def fds_to_deleted(pid):
    """Descriptors of petreld open on an unlinked file (a spool)."""
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.endswith("(deleted)") or "/tmp/" in target and "Maildir" in target:
            out.append(target)
    return out


def test_literal_plus_over_quota_is_dropped_not_spooled(petreld, tmp_path):
    """alice (3,000 bytes) announces a 48 MB LITERAL+ literal and sends it:
    the bytes are read and dropped (no spool file is opened, VmRSS grows by
    far less than the literal), then the NO [OVERQUOTA], and the connection
    goes on. (No size cap, so the storage limit is what refuses it.)"""
    d = petreld(qe.config(tmp_path, quota={"quota_mail_size": "0"}), env=small_quarantine())
    r = qe.Raw(d, "alice")
    size = 48 * 1024 * 1024
    base = status_kb(d.pid, "VmRSS")
    peak = base
    spools = []
    r.sock.sendall(b"a1 APPEND INBOX {%d+}\r\n" % size)
    chunk = b"y" * (1024 * 1024)
    for i in range(size // len(chunk)):
        r.sock.sendall(chunk)
        if i % 8 == 0:
            peak = max(peak, status_kb(d.pid, "VmRSS"))
            spools += fds_to_deleted(d.pid)
    r.sock.sendall(b"\r\n")
    assert r.f.readline() == b"a1 NO [OVERQUOTA] " + EXCEEDED.encode() + b"\r\n"
    peak = max(peak, status_kb(d.pid, "VmRSS"))
    assert spools == []
    assert peak - base < 16 * 1024, (base, peak)
    out = r.run(b"NOOP")
    assert out[-1].startswith(b"c2 OK"), out
    r.close()


def test_refused_multiappend_literal_never_runs_its_later_literals(qd):
    """A MULTIAPPEND whose second literal is refused: the third literal's
    bytes (command text) are read and dropped with the rest of the command,
    never taken as a command."""
    d = qd
    r = qe.Raw(d, "alice")  # *:storage=3000
    small = qe.message(1, 1000)
    smuggled = b"x1 CREATE Smuggled\r\n"
    r.sock.sendall(b"a1 APPEND INBOX {%d+}\r\n" % len(small) + small +
                   b" {2500+}\r\n" + b"z" * 2500 +
                   b" {%d+}\r\n" % len(smuggled) + smuggled + b"\r\n")
    assert r.f.readline() == b"a1 NO [OVERQUOTA] " + EXCEEDED.encode() + b"\r\n"
    out = r.run(b"LIST \"\" \"*\"")
    assert not any(b"Smuggled" in line for line in out), out
    assert not any(line.startswith(b"x1 ") for line in out), out
    assert r.run(b"STATUS INBOX (MESSAGES)")[0] == b"* STATUS \"INBOX\" (MESSAGES 0)\r\n"
    r.close()


def test_literal_over_mail_size_and_over_literal_limit_gets_the_size_reply(petreld, tmp_path):
    """quota_mail_size 50K, max_literal_size 1M: a 2 MB synchronising literal
    is over both; document 3 says a message over quota_mail_size is answered
    NO [OVERQUOTA] Requested allocation size <n> exceeds max mail size <m>
    regardless of anything else (Dovecot 2.3 has no literal limit of its own
    and answers that from quota_test_alloc)."""
    d = petreld(qe.config(tmp_path, imap={"max_literal_size": 1024 * 1024}))
    r = qe.Raw(d, "dave")  # no rule: only the size cap applies
    n = 2 * 1024 * 1024
    r.sock.sendall(b"a1 APPEND INBOX {%d}\r\n" % n)
    line = r.f.readline()
    assert line == (b"a1 NO [OVERQUOTA] Requested allocation size %d exceeds max mail size 51200\r\n"
                    % n), line
    r.close()


def test_kept_folder_list_sees_a_folder_when_the_root_mtime_is_put_back(petreld, tmp_path):
    """The kept folder list is reused while a stat of the root is unchanged:
    a folder made (here by a tool beside the server, as a restore would)
    after the list was kept, with the root's mtime then set back to exactly
    what the list was kept with (rsync -t, touch -d), still counts at the
    next delivery: the root's ctime says it changed. (The folder is made on
    disk, not over IMAP: an IMAP session's writes move the root's times
    again at the next delivery and would hide a list kept too long.)"""
    cfg = qe.config(tmp_path)
    cfg["lmtp"]["delivery_threads"] = 1
    d = petreld(cfg)
    root = d.workdir / "mail" / "carol" / "Maildir"
    assert qe.lmtp(d, "carol@example.org", qe.message(1, 1000))[0] == 250
    os.utime(root, (1_000_000_000, 1_000_000_000))
    assert qe.lmtp(d, "carol@example.org", qe.message(2, 1000))[0] == 250
    big = root / ".Big"
    for sub in ("cur", "new", "tmp"):
        (big / sub).mkdir(parents=True)
    (big / "new" / "1700000000.M1P1.restored").write_bytes(qe.message(3, 15000))
    os.utime(root, (1_000_000_000, 1_000_000_000))  # as it was when kept
    assert os.stat(root).st_mtime_ns == 1_000_000_000 * 10**9
    code, text = qe.lmtp(d, "carol@example.org", qe.message(4, 4000))
    assert code == 452, text


def test_kept_folder_list_same_second_create_and_deliver(petreld, tmp_path):
    """Within one second: the root's mtime is set into the past, a delivery
    keeps the list, a folder is made and filled and the next delivery
    follows at once (no settling time): the new folder counts."""
    cfg = qe.config(tmp_path)
    cfg["lmtp"]["delivery_threads"] = 1
    d = petreld(cfg)
    root = d.workdir / "mail" / "carol" / "Maildir"
    m = qe.login(d, "carol")
    assert qe.lmtp(d, "carol@example.org", qe.message(1, 1000))[0] == 250
    for i in range(3):
        os.utime(root, (1_000_000_000 + i, 1_000_000_000 + i))
        assert qe.lmtp(d, "carol@example.org", qe.message(10 + i, 100))[0] == 250
        name = "F%d" % i
        assert m.create(name)[0] == "OK"
        assert m.delete(name)[0] == "OK"
    assert m.create("Big")[0] == "OK"
    assert qe.append(m, "Big", qe.message(3, 15000))[0] == "OK"
    # 1,300 + 15,000 used: 5,000 more is over 20K + 1,000 of grace
    code, text = qe.lmtp(d, "carol@example.org", qe.message(4, 5000))
    assert code == 452, text
    m.logout()
