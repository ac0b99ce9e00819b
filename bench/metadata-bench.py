#!/usr/bin/env python3
"""METADATA benchmark (docs/performance.md, "METADATA").

    bench/metadata-bench.py [--duration 10] [--window 16] [--entries 100]
                            [--fsync always|never] [--dict file|sqlite]

Builds a release build (build-release/, unless BENCH_NO_BUILD=1), starts
petreld with auth and imap (one worker thread, pinned to CPU 0 with taskset
when there is more than one CPU) and mail.attribute_dict on a file dict
(`--fsync`) or an SQLite dict, logs in over ONE connection, sets
`--entries` private entries on INBOX, then for `--duration` seconds each:
  1. GETMETADATA "INBOX" (DEPTH infinity) /private  -- every entry back
  2. SETMETADATA INBOX (/private/bench/kN "value N")  -- N cycling over the
     entries, so the count stays the same
with `--window` commands pipelined. Prints commands/s, petreld's CPU per
command and the load average (the machine is shared)."""

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchproc import cpu_seconds as proc_cpu_seconds
from benchproc import free_port, start_petreld, stop, vm_rss_kb

ROOT = Path(__file__).resolve().parents[1]


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.line()  # greeting

    def line(self):
        while b"\r\n" not in self.buf:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                sys.exit("connection closed by petreld")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        m = re.search(rb"\{(\d+)\}$", line)
        if m:  # a literal: take its bytes and the rest of the line
            n = int(m.group(1))
            while len(self.buf) < n:
                self.buf += self.s.recv(1 << 20)
            lit, self.buf = self.buf[:n], self.buf[n:]
            return line + lit + self.line()
        return line

    def run(self, cmds, window, duration):
        """Pipelines cmds (callable i -> bytes) for `duration`; returns (done, bad)."""
        sent = done = bad = 0
        start = time.monotonic()
        end = start + duration
        while True:
            now = time.monotonic()
            if now < end and sent - done < window:
                out = b""
                while sent - done < window:
                    out += b"b%d " % sent + cmds(sent) + b"\r\n"
                    sent += 1
                self.s.sendall(out)
            if done == sent and now >= end:
                return done, bad, time.monotonic() - start
            line = self.line()
            if line.startswith(b"b"):
                done += 1
                if b" OK " not in line:
                    bad += 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--entries", type=int, default=100)
    ap.add_argument("--fsync", default="always", choices=["always", "never"])
    ap.add_argument("--dict", default="file", choices=["file", "sqlite"])
    ap.add_argument("--build", default=os.environ.get("BENCH_BUILD_DIR", "build-release"))
    a = ap.parse_args()
    build = ROOT / a.build
    if not os.environ.get("BENCH_NO_BUILD"):
        if not (build / "build.ninja").exists():
            subprocess.run(["meson", "setup", str(build), "--buildtype=release"], cwd=ROOT,
                           check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["ninja", "-C", str(build), "petreld"], check=True,
                       stdout=subprocess.DEVNULL)
    work = Path(tempfile.mkdtemp(prefix="petrel-md-bench-"))
    proc = None
    try:
        (work / "passwd").write_text("bench:{PLAIN}p:2000:2000::::\n")
        auth, imap, tel = free_port(), free_port(), free_port()
        if a.dict == "file":
            d = f'{{driver: file, path: "{work}/meta.db", fsync: {a.fsync}}}'
        else:
            d = f'{{driver: sql, backend: sqlite, path: "{work}/meta.sqlite"}}'
        (work / "petrel.yaml").write_text(f"""
components: [auth, imap]
allow_root: true
log_level: warn
telemetry: {{listen: "127.0.0.1:{tel}"}}
dicts:
  meta: {d}
mail: {{home: "{work}/mail/%u", fsync: never, attribute_dict: meta}}
auth:
  listen: ["127.0.0.1:{auth}"]
  passdb: {{driver: passwd-file, path: "{work}/passwd"}}
imap:
  listen: ["127.0.0.1:{imap}"]
  auth_addr: "127.0.0.1:{auth}"
  workers: 1
""")
        proc = start_petreld(build / "petreld", work / "petrel.yaml", work, imap,
                             pin_cpu0=True)

        def cpu_seconds():
            return proc_cpu_seconds(proc.pid)

        c = Conn(imap)
        c.s.sendall(b"l LOGIN bench p\r\n")
        while not c.line().startswith(b"l OK"):
            pass
        pairs = b" ".join(b'/private/bench/k%d "value %d"' % (i, i) for i in range(a.entries))
        c.s.sendall(b"s SETMETADATA INBOX (" + pairs + b")\r\n")
        if not c.line().startswith(b"s OK"):
            sys.exit("setup failed")
        c.s.sendall(b'g GETMETADATA "INBOX" (DEPTH infinity) /private\r\n')
        first = c.line()
        assert first.count(b"/private/bench/k") == a.entries, first[:200]
        assert c.line().startswith(b"g OK")
        print(f"metadata bench: {a.entries} entries, dict {a.dict}"
              f"{' fsync ' + a.fsync if a.dict == 'file' else ''}, window {a.window}, "
              f"1 connection, 1 IMAP worker")
        for name, fn in [
                ("GETMETADATA (DEPTH infinity) of all entries",
                 lambda i: b'GETMETADATA "INBOX" (DEPTH infinity) /private'),
                ("SETMETADATA of one entry",
                 lambda i: b'SETMETADATA INBOX (/private/bench/k%d "value %d")'
                 % (i % a.entries, i))]:
            cpu0 = cpu_seconds()
            done, bad, elapsed = c.run(fn, a.window, a.duration)
            cpu = cpu_seconds() - cpu0
            print(f"  {name}: {done} in {elapsed:.2f}s = {done / elapsed:,.0f}/s, "
                  f"{bad} not OK; petreld CPU {cpu * 1e6 / max(done, 1):.0f} us per command "
                  f"({done / max(cpu, 1e-9):,.0f} per CPU-second); load average "
                  f"{os.getloadavg()[0]:.1f}")
        print(f"  petreld VmRSS {vm_rss_kb(proc.pid)} kB")
    finally:
        stop(proc)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
