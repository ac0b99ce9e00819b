#!/usr/bin/env python3
"""What quota enforcement costs (docs/performance.md, "Quota enforcement").

    bench/quota-enforce.py [--pairs 4] [--lmtp 2000] [--append 2000] [--size 4096]

Uses build-release/petreld (PETREL_BUILD to change). Starts two petreld
processes from one passwd-file whose users carry `quota_rule=*:storage=10G`:
one with `quota.enabled: true` (and three warning rules, so the saved hook
works out crossings too), one with it off; both with imap.workers 1 and
lmtp.delivery_threads 1, mail.fsync never (so the disk does not hide the
CPU; BENCH_FSYNC=always for the default). Then, in pairs alternating which goes first (the machine is shared:
what drifts over time falls on both sides alike):

  LMTP    one smtplib.LMTP connection delivers --lmtp messages of --size
          bytes, each to one of 20 users;
  APPEND  one imaplib connection (one user per pair) appends --append.

For each run: messages/s and petreld's CPU time (utime+stime from
/proc/PID/stat) per message. Prints every pair and the medians of the
on/off ratios. CPU per message is the figure that matters on a busy
machine; rates are printed too.

With --callgrind both daemons run under valgrind's callgrind, the counters
zeroed before each workload and dumped after it (callgrind_control -z,
-d): instructions per message are exact and do not depend on what
else the machine runs (the rates under valgrind mean nothing).
"""

import argparse
import imaplib
import os
import smtplib
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("PETREL_BUILD", ROOT / "build-release"))
USERS = 20
FSYNC = os.environ.get("BENCH_FSYNC", "never")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def yaml(cfg, indent=0):
    out = []
    for k, v in cfg.items():
        pad = "  " * indent
        if isinstance(v, dict):
            out.append(f"{pad}{k}:")
            out.append(yaml(v, indent + 1))
        elif isinstance(v, list):
            out.append(f"{pad}{k}: [{', '.join(str(x) if not isinstance(x, str) else repr(x) for x in v)}]")
        elif isinstance(v, bool):
            out.append(f"{pad}{k}: {'true' if v else 'false'}")
        else:
            out.append(f"{pad}{k}: {v!r}" if isinstance(v, str) else f"{pad}{k}: {v}")
    return "\n".join(out)


WARNINGS = """
  quota_warnings:
    - {quota_warning_name: s80, quota_warning_resource: storage, quota_warning_percentage: 80}
    - {quota_warning_name: s95, quota_warning_resource: storage, quota_warning_percentage: 95}
    - {quota_warning_name: m90, quota_warning_resource: message, quota_warning_percentage: 90}
"""


class Daemon:
    def __init__(self, work, name, enabled, callgrind=False):
        self.dir = work / name
        self.dir.mkdir()
        passwd = self.dir / "passwd"
        passwd.write_text("".join(
            f"u{i}:{{PLAIN}}p:1000:1000::::userdb_quota_rule=*:storage=10G\n"
            for i in range(USERS + 64)))
        auth = f"127.0.0.1:{free_port()}"
        self.imap = free_port()
        self.lmtp = free_port()
        cfg = {
            "allow_root": True, "log_level": "warn",
            "components": ["auth", "imap", "lmtp"],
            "telemetry": {"listen": f"127.0.0.1:{free_port()}"},
            "mail": {"home": str(self.dir / "mail" / "%u"), "fsync": FSYNC},
            "auth": {"listen": [auth], "passdb": {"driver": "passwd-file", "path": str(passwd)}},
            "imap": {"listen": [f"127.0.0.1:{self.imap}"], "auth_addr": auth, "workers": 1},
            "lmtp": {"listen": [f"127.0.0.1:{self.lmtp}"], "auth_addr": auth,
                     "delivery_threads": 1, "username_format": "%n"},
            "quota": {"enabled": enabled},
        }
        text = yaml(cfg) + "\n" + (WARNINGS if enabled else "")
        (self.dir / "petrel.yaml").write_text(text)
        cmd = [str(BUILD / "petreld"), "-c", str(self.dir / "petrel.yaml")]
        self.callgrind = callgrind
        self.dumps = 0
        if callgrind:
            cmd = ["valgrind", "--tool=callgrind",
                   f"--callgrind-out-file={self.dir}/cg.out"] + cmd
        self.proc = subprocess.Popen(cmd,
                                     stdout=open(self.dir / "log", "wb"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + (120 if callgrind else 20)
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.imap), timeout=1).close()
                socket.create_connection(("127.0.0.1", self.lmtp), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise SystemExit("petreld did not start:\n" + (self.dir / "log").read_text())

    def collect(self, on):
        """callgrind: zero the counters (on), or dump and return the
        instructions since (off)."""
        if on:
            subprocess.run(["callgrind_control", "-z", str(self.proc.pid)], check=True,
                           capture_output=True)
            return 0
        subprocess.run(["callgrind_control", "-d", str(self.proc.pid)], check=True,
                       capture_output=True)
        self.dumps += 1
        path = Path(f"{self.dir}/cg.out.{self.dumps}")
        for line in path.read_text().splitlines():
            if line.startswith("summary:") or line.startswith("totals:"):
                return int(line.split()[1])
        raise SystemExit(f"no totals in {path}")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(20)


def message(n, size):
    head = (f"From: b@example.org\r\nTo: x@example.org\r\nSubject: q {n}\r\n"
            f"Message-ID: <q{n}@example.org>\r\n\r\n").encode()
    return head + b"y" * (size - len(head) - 2) + b"\r\n"


def run_lmtp(d, n, size, seed):
    msgs = [message(seed * 100000 + i, size) for i in range(n)]
    c = smtplib.LMTP("127.0.0.1", d.lmtp)
    c.ehlo("bench")
    if d.callgrind:
        d.collect(True)
    cpu0, t0 = cpu_seconds(d.proc.pid), time.monotonic()
    for i, m in enumerate(msgs):
        c.sendmail("b@example.org", [f"u{i % USERS}@example.org"], m)
    t, cpu = time.monotonic() - t0, cpu_seconds(d.proc.pid) - cpu0
    if d.callgrind:
        return n / t, d.collect(False) / n
    c.quit()
    return n / t, cpu / n * 1e6


def run_append(d, n, size, user):
    msgs = [message(i, size) for i in range(n)]
    m = imaplib.IMAP4("127.0.0.1", d.imap)
    m.login(user, "p")
    if d.callgrind:
        d.collect(True)
    cpu0, t0 = cpu_seconds(d.proc.pid), time.monotonic()
    for msg in msgs:
        typ, _ = m.append("INBOX", None, None, msg)
        assert typ == "OK"
    t, cpu = time.monotonic() - t0, cpu_seconds(d.proc.pid) - cpu0
    if d.callgrind:
        return n / t, d.collect(False) / n
    m.logout()
    return n / t, cpu / n * 1e6


def settle_roots(daemons, age):
    newest = max(p.stat().st_mtime for d in daemons for p in (d.dir / "mail").glob("*/Maildir"))
    while time.time() - newest < age:
        time.sleep(0.1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--lmtp", type=int, default=2000)
    ap.add_argument("--append", type=int, default=2000)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--callgrind", action="store_true")
    a = ap.parse_args()
    unit = "instr/msg" if a.callgrind else "us CPU/msg"
    work = Path(tempfile.mkdtemp(prefix="petrel-quota-bench-", dir="/var/tmp"))
    on = Daemon(work, "on", True, a.callgrind)
    off = Daemon(work, "off", False, a.callgrind)
    ratios = {"lmtp_rate": [], "lmtp_cpu": [], "append_rate": [], "append_cpu": []}
    try:
        # warm-up: every user's INBOX and index exist
        run_lmtp(on, USERS, a.size, 99)
        run_lmtp(off, USERS, a.size, 99)
        # ...and are not brand new: a user's folder list is kept between
        # saves only once its Maildir root is older than the timestamp
        # margin (QUOTA_FOLDER_LIST_SETTLE, 2 s; docs/quota.md), as any
        # mailbox is but in the seconds after it was made.
        settle_roots([on, off], 2.1)
        for p in range(a.pairs):
            order = [(on, "on"), (off, "off")] if p % 2 == 0 else [(off, "off"), (on, "on")]
            res = {}
            for d, name in order:
                res[name + "_lmtp"] = run_lmtp(d, a.lmtp, a.size, p)
            for d, name in order:
                res[name + "_append"] = run_append(d, a.append, a.size, f"u{USERS + p}")
            for kind in ("lmtp", "append"):
                (r_on, c_on), (r_off, c_off) = res["on_" + kind], res["off_" + kind]
                ratios[kind + "_rate"].append(r_on / r_off)
                ratios[kind + "_cpu"].append(c_on / c_off)
                print(f"pair {p} {kind:6}: on {r_on:7.0f} msg/s {c_on:8.0f} {unit} | "
                      f"off {r_off:7.0f} msg/s {c_off:8.0f} {unit} | "
                      f"rate {100 * (r_on / r_off - 1):+5.1f} % CPU {100 * (c_on / c_off - 1):+5.1f} %",
                      flush=True)
        for k, v in ratios.items():
            print(f"median {k}: {100 * (statistics.median(v) - 1):+.1f} % (on vs off, {len(v)} pairs)")
    finally:
        on.stop()
        off.stop()
        if not os.environ.get("BENCH_KEEP"):
            subprocess.run(["rm", "-rf", str(work)])
        else:
            print("kept", work)


if __name__ == "__main__":
    sys.exit(main())
