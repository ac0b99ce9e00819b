"""Changes to cur/ under mail.fsync: always are durable where the file
system needs it. Flag changes: on a file system whose journal does not carry a rename with the
index commit (ext4 made without one, as on this project's machines), STORE
fsyncs cur/ after renaming the message files, before the index commit;
a power loss could otherwise keep the index's new flags and lose the rename,
and the next scan would take the old flags back from the file name.

Watched with strace (-y names each descriptor's file): whether the imap
petreld fsyncs the folder's cur/ directory during a STORE, compared with
what the mail directory's file system needs (the same test the server
makes: XFS, or ext3/ext4 with a jbd2 journal running, carries the rename;
anything else does not). `optimized` never flushes flag-only changes."""

import imaplib
import os
import re
import shutil
import subprocess
import time

import pytest

from test_imap_session import imap_overrides, addr

MSG = b"From: a@example.org\r\nSubject: durable flags\r\n\r\nbody\r\n"


def mount_of(path):
    """(fs type, major:minor, mount point) of the mount holding `path`."""
    path = os.path.realpath(path)
    best = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            mnt = fields[4]
            sep = fields.index("-")
            fstype = fields[sep + 1]
            if path == mnt or path.startswith(mnt.rstrip("/") + "/"):
                if best is None or len(mnt) >= len(best[2]):
                    best = (fstype, fields[2], mnt)
    return best


def metadata_journaled(path):
    fstype, devno, _ = mount_of(path)
    if fstype == "xfs":
        return True
    if fstype not in ("ext3", "ext4"):
        return False
    try:
        with open(f"/sys/dev/block/{devno}/uevent") as f:
            name = next(line.split("=", 1)[1].strip() for line in f
                        if line.startswith("DEVNAME="))
    except (OSError, StopIteration):
        return False
    return any(entry.startswith(name + "-") for entry in os.listdir("/proc/fs/jbd2"))


def cur_fsyncs_during(d, command, folder="cur", prepare=None):
    """fsync calls on the cur/ directory of INBOX (or on `folder`, a path
    ending in the directory's name) while command(imap) runs on a selected
    INBOX holding two messages; prepare(imap) runs before the tracing."""
    strace = shutil.which("strace")
    if strace is None:
        pytest.fail("strace is not installed (scripts/setup.sh installs it)")
    m = imaplib.IMAP4(*addr(d))
    m.login("alice", "wonderland")
    m.create("Archive")
    m.append("INBOX", None, None, MSG)
    m.append("INBOX", None, None, MSG)
    m.select("INBOX")
    if prepare is not None:
        prepare(m)
    out = subprocess.Popen([strace, "-f", "-qq", "-y", "-e", "trace=fsync,fdatasync",
                            "-p", str(d.pid)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)  # attached to every thread
        command(m)
        time.sleep(0.3)
    finally:
        out.terminate()
        _, err = out.communicate(timeout=10)
    m.logout()
    pattern = re.compile(r"fsync\(\d+</[^>]*/" + re.escape(folder) + r">\)")
    return [line for line in err.splitlines() if pattern.search(line)]


def cur_fsyncs_during_store(d, store_args):
    def store(m):
        typ, _ = m.store("1", *store_args)
        assert typ == "OK"
    return cur_fsyncs_during(d, store)


@pytest.fixture
def always_imapd(petreld, tmp_path, pki):
    cfg = imap_overrides(tmp_path, pki)
    cfg["mail"]["fsync"] = "always"
    return petreld(cfg)


@pytest.fixture
def optimized_imapd(petreld, tmp_path, pki):
    cfg = imap_overrides(tmp_path, pki)
    cfg["mail"]["fsync"] = "optimized"
    return petreld(cfg)


def test_store_fsyncs_cur_where_the_file_system_needs_it(always_imapd, tmp_path):
    (tmp_path / "mail").mkdir(exist_ok=True)
    need = not metadata_journaled(tmp_path / "mail")
    calls = cur_fsyncs_during_store(always_imapd, ("+FLAGS", "(\\Flagged)"))
    if need:
        assert calls, "no fsync of cur/ after a flag rename on a file system without a journal"
    else:
        assert not calls, f"cur/ fsynced on a journaling file system: {calls}"


def test_store_under_optimized_does_not_flush(optimized_imapd):
    assert cur_fsyncs_during_store(optimized_imapd, ("+FLAGS", "(\\Seen)")) == []


def test_expunge_and_copy_fsync_cur_only_where_the_journal_does_not(always_imapd, tmp_path):
    """Unlinks (EXPUNGE) and links (COPY) in cur/: their own directory fsync
    where the file system has no metadata journal, none where the index
    commit's fsync commits them with the journal."""
    (tmp_path / "mail").mkdir(exist_ok=True)
    need = not metadata_journaled(tmp_path / "mail")

    def delete(m):
        assert m.store("1", "+FLAGS", "(\\Deleted)")[0] == "OK"

    def expunge(m):
        assert m.expunge()[0] == "OK"

    def copy(m):
        assert m.copy("1", "Archive")[0] == "OK"

    expunged = cur_fsyncs_during(always_imapd, expunge, prepare=delete)
    copied = cur_fsyncs_during(always_imapd, copy, folder=".Archive/cur")
    if need:
        assert expunged, "no fsync of cur/ after EXPUNGE on a file system without a journal"
        assert copied, "no fsync of the target's cur/ after COPY without a journal"
    else:
        assert not expunged, expunged
        assert not copied, copied
