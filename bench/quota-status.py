#!/usr/bin/env python3
"""quota-status benchmark (docs/performance.md, "quota-status").

    bench/quota-status.py [--duration 10] [--window 256] [--users 100] [--folders 3]
                          [--client py|c]

Builds a release build (build-release/, unless BENCH_NO_BUILD=1), starts
petreld with the auth, lmtp and quota-status components on free loopback
ports (pinned to CPU 0 with taskset when there is more than one CPU),
delivers one message into each of `--folders` folders of every user over
LMTP (so every answer sums real index aggregates), then sends Postfix
policy requests (the attributes Postfix sends at RCPT, with size=) over ONE
connection, keeping `--window` requests in flight, for `--duration`
seconds. Recipients cycle over the users; half the users are over quota,
so both answers are exercised. Prints requests/s and the answer mix.
The client is this script (`py`) or bench/quota-status-client (`c`, the
default): on a busy machine the Python client needs as much CPU per request
as the service and sets the pace itself.
Target: >= 10,000 requests/s on one pipelined connection."""

import argparse
import os
import shutil
import smtplib
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchproc import cpu_seconds as proc_cpu_seconds
from benchproc import free_port, start_petreld, stop, vm_rss_kb

ROOT = Path(__file__).resolve().parents[1]


def request(rcpt, size):
    return (f"request=smtpd_access_policy\nprotocol_state=RCPT\nprotocol_name=ESMTP\n"
            f"helo_name=client.example\nqueue_id=\nsender=sender@example.net\n"
            f"recipient={rcpt}\nrecipient_count=0\nclient_address=192.0.2.10\n"
            f"client_name=client.example\nreverse_client_name=client.example\n"
            f"instance=1a2b.3c4d.5e6f.0\nsize={size}\n\n").encode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--users", type=int, default=100)
    ap.add_argument("--folders", type=int, default=3)
    ap.add_argument("--build", default=os.environ.get("BENCH_BUILD_DIR", "build-release"))
    ap.add_argument("--client", choices=("py", "c"), default="c")
    a = ap.parse_args()
    build = ROOT / a.build
    if not os.environ.get("BENCH_NO_BUILD"):
        if not (build / "build.ninja").exists():
            subprocess.run(["meson", "setup", str(build), "--buildtype=release"], cwd=ROOT,
                           check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["ninja", "-C", str(build), "petreld", "bench/quota-status-client"],
                       check=True,
                       stdout=subprocess.DEVNULL)
    work = Path(tempfile.mkdtemp(prefix="petrel-qs-bench-"))
    proc = None
    try:
        lines = []
        for i in range(a.users):
            # even users: 1 GiB (under), odd users: 1 KiB (over after one message)
            rule = "*:storage=1G" if i % 2 == 0 else "*:storage=1K"
            lines.append(f"u{i}:{{PLAIN}}p:2000:2000::::userdb_quota_rule={rule}\n")
        (work / "passwd").write_text("".join(lines))
        auth, lmtp, qs, tel = free_port(), free_port(), free_port(), free_port()
        (work / "petrel.yaml").write_text(f"""
components: [auth, lmtp, quota-status]
allow_root: true
log_level: warn
telemetry: {{listen: "127.0.0.1:{tel}"}}
mail: {{home: "{work}/mail/%u", fsync: never}}
auth:
  listen: ["127.0.0.1:{auth}"]
  passdb: {{driver: passwd-file, path: "{work}/passwd"}}
lmtp:
  listen: ["127.0.0.1:{lmtp}"]
  auth_addr: "127.0.0.1:{auth}"
  username_format: "%n"
quota:
  quota_storage_grace: 0
  quota_status:
    listen: ["127.0.0.1:{qs}"]
    auth_addr: "127.0.0.1:{auth}"
    username_format: "%n"
    max_pipelined: {max(a.window * 2, 1024)}
""")
        proc = start_petreld(build / "petreld", work / "petrel.yaml", work, qs,
                             pin_cpu0=True)
        # Folders: INBOX plus Maildir++ subfolders made as a maildir tool would,
        # each with one message delivered over LMTP (+detail).
        for i in range(a.users):
            root = work / "mail" / f"u{i}" / "Maildir"
            for f in range(1, a.folders):
                for sub in ("cur", "new", "tmp"):
                    (root / f".F{f}" / sub).mkdir(parents=True, exist_ok=True)
                (root / f".F{f}" / "maildirfolder").write_text("")
        with smtplib.LMTP("127.0.0.1", lmtp, timeout=60) as c:
            c.ehlo("bench")
            for i in range(a.users):
                for f in range(a.folders):
                    c.mail("s@example.net")
                    c.rcpt(f"u{i}+F{f}@example.org" if f else f"u{i}@example.org")
                    c.data(b"Subject: bench\r\n\r\n" + b"x" * 2000 + b"\r\n")
        def cpu_seconds():
            return proc_cpu_seconds(proc.pid)

        reqs = [request(f"u{i}@example.org", 1000) for i in range(a.users)]
        cpu0 = cpu_seconds()
        if a.client == "c":
            out = subprocess.run([str(build / "bench" / "quota-status-client"), str(qs),
                                  str(a.duration), str(a.window), str(a.users)],
                                 check=True, capture_output=True, text=True).stdout
            r = dict(kv.split("=") for kv in out.split())
            done, elapsed = int(r["requests"]), float(r["seconds"])
            cpu = cpu_seconds() - cpu0
            print(f"quota-status: {done} requests in {elapsed:.2f}s over 1 connection, window "
                  f"{a.window}, {a.users} users x {a.folders} folders, C client: "
                  f"{done / elapsed:,.0f} req/s (load average {os.getloadavg()[0]:.1f})")
            print(f"  petreld CPU {cpu:.2f}s: {cpu * 1e6 / max(done, 1):.1f} us per request, "
                  f"{done / max(cpu, 1e-9):,.0f} requests per CPU-second; client CPU "
                  f"{float(r['client_cpu']):.2f}s")
            print(f"  answers: {r['dunno']} DUNNO, {r['other']} other")
            return
        s = socket.create_connection(("127.0.0.1", qs))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sent = done = 0
        buf = b""
        answers = {}
        start = time.monotonic()
        end = start + a.duration
        while True:
            now = time.monotonic()
            if now < end and sent - done < a.window:
                n = a.window - (sent - done)
                s.sendall(b"".join(reqs[(sent + k) % a.users] for k in range(n)))
                sent += n
            if done == sent and now >= end:
                break
            chunk = s.recv(1 << 20)
            if not chunk:
                sys.exit("connection closed by quota-status")
            buf += chunk
            parts = buf.split(b"\n\n")
            buf = parts.pop()
            for p in parts:
                answers[p] = answers.get(p, 0) + 1
            done += len(parts)
        elapsed = time.monotonic() - start
        cpu = cpu_seconds() - cpu0
        s.close()
        print(f"quota-status: {done} requests in {elapsed:.2f}s over 1 connection, window "
              f"{a.window}, {a.users} users x {a.folders} folders: {done / elapsed:,.0f} req/s")
        print(f"  petreld CPU {cpu:.2f}s: {cpu * 1e6 / max(done, 1):.1f} us per request, "
              f"{done / max(cpu, 1e-9):,.0f} requests per CPU-second "
              f"(the rate on a core of its own; the machine's load average was "
              f"{os.getloadavg()[0]:.1f})")
        for k, v in sorted(answers.items(), key=lambda kv: -kv[1]):
            print(f"  {v:8d}  {k.decode()}")
        print(f"  petreld VmRSS {vm_rss_kb(proc.pid)} kB")
    finally:
        stop(proc)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
