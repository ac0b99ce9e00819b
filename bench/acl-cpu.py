#!/usr/bin/env python3
"""CPU cost of ACL checks on a fixed IMAP session, in instructions.

    bench/acl-cpu.py [BUILD_DIR]      default: build-rel of this tree

Runs petreld (auth + imap, mail.fsync: never) under valgrind --tool=callgrind
three times: mail.acl off, on with no dovecot-acl file anywhere, and on with
a file on every folder (each check then reads one). Each run fills one user's
INBOX with the same 50 messages and 5 folders, logs in and selects INBOX,
zeroes callgrind's counters (callgrind_control -z), sends ROUNDS times the
same 14 commands (NOOP, FETCH FLAGS / headers / a body, STORE +/-FLAGS,
SEARCH, APPEND, STORE \\Deleted + EXPUNGE, LIST, STATUS, COPY, UID FETCH),
dumps the counters (callgrind_control -d) and prints instructions per
command and the change against ACLs off. The build should be a release
build with debug information (meson setup build-rel --buildtype=release
-Ddebug=true). Knobs: ACL_CPU_ROUNDS=30, ACL_CPU_KEEP=1 (keep the callgrind files)."""

import imaplib
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "build-rel"
ROUNDS = int(os.environ.get("ACL_CPU_ROUNDS", "30"))
MSG = b"From: a@example.net\r\nTo: b@example.net\r\nSubject: bench %d\r\n\r\n" + b"line\r\n" * 40


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def config(work, acl):
    auth, imap = free_port(), free_port()
    (work / "passwd").write_text("bench:{PLAIN}bench:1000:1000\n")
    lines = [
        "allow_root: true", "log_level: warn",
        f"telemetry: {{listen: \"127.0.0.1:{free_port()}\"}}",
        "components: [auth, imap]",
        f"mail: {{home: \"{work}/mail/%u\", fsync: never, acl: {{enabled: {str(acl).lower()}, cache_secs: 1}}}}",
        f"auth: {{listen: [\"127.0.0.1:{auth}\"], passdb: {{driver: passwd-file, path: \"{work}/passwd\"}}}}",
        f"imap: {{listen: [\"127.0.0.1:{imap}\"], auth_addr: \"127.0.0.1:{auth}\"}}",
    ]
    (work / "petrel.yaml").write_text("\n".join(lines) + "\n")
    return imap


def wait_port(port, proc):
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit("petreld exited")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit("petreld did not listen")


def session(m, rounds):
    for i in range(rounds):
        m.noop()
        m.fetch("1:*", "(FLAGS)")
        m.fetch("1:10", "(BODY.PEEK[HEADER])")
        m.fetch(str(1 + i % 50), "(BODY[])")
        m.store("1:5", "+FLAGS", "(\\Flagged)")
        m.store("1:5", "-FLAGS", "(\\Flagged)")
        m.search(None, "UNSEEN")
        typ, data = m.append("INBOX", None, None, MSG % (1000 + i))
        uid = re.search(rb"APPENDUID \d+ (\d+)", data[0]).group(1).decode()
        m.uid("STORE", uid, "+FLAGS.SILENT", "(\\Deleted)")
        m.expunge()
        m.list('""', '"*"')
        m.status("F1", "(MESSAGES UNSEEN)")
        m.copy("1", "F2")
        m.uid("FETCH", "1:*", "(FLAGS)")
    return rounds * 14


def run(label, acl, files):
    work = Path(tempfile.mkdtemp(prefix="petrel-acl-cpu-"))
    try:
        port = config(work, acl)
        out = work / "callgrind.out"
        proc = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}.%p",
                                 str(BUILD / "petreld"), "-c", str(work / "petrel.yaml")],
                                stdout=subprocess.DEVNULL, stderr=open(work / "stderr", "wb"))
        try:
            wait_port(port, proc)
            m = imaplib.IMAP4("127.0.0.1", port, timeout=120)
            m.login("bench", "bench")
            for f in ("F1", "F2", "F3", "F4", "F5"):
                m.create(f)
            for i in range(50):
                m.append("INBOX", None, None, MSG % i)
            if files:
                root = work / "mail" / "bench" / "Maildir"
                for d in [root] + [root / f".F{k}" for k in range(1, 6)]:
                    (d / "dovecot-acl").write_text("owner lrswipkxtea\nuser=other lr\n")
            m.select("INBOX")
            session(m, 1)  # warm caches
            subprocess.run(["callgrind_control", "-z", str(proc.pid)], check=True,
                           capture_output=True)
            commands = session(m, ROUNDS)
            subprocess.run(["callgrind_control", "-d", str(proc.pid)], check=True,
                           capture_output=True)
            m.logout()
        finally:
            proc.terminate()
            proc.wait(120)
        dumps = sorted(work.glob("callgrind.out.*.*"), key=lambda p: int(p.name.rsplit(".", 1)[1]))
        total = 0
        for line in dumps[-1].read_text().splitlines():
            if line.startswith(("summary:", "totals:")):
                total = int(line.split()[1])
                break
        return total / commands
    finally:
        if os.environ.get("ACL_CPU_KEEP"):
            print(f"kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


def main():
    rows = [("acl off", False, False), ("acl on, no files", True, False),
            ("acl on, a file per folder", True, True), ("acl off (again: noise)", False, False)]
    base = None
    print(f"{'run':28} {'instructions/command':>22} {'change':>8}")
    for label, acl, files in rows:
        per = run(label, acl, files)
        base = base or per
        print(f"{label:28} {per:22.0f} {100.0 * (per - base) / base:+7.2f}%", flush=True)


if __name__ == "__main__":
    main()
