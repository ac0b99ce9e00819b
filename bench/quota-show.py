#!/usr/bin/env python3
"""quota/show benchmark (docs/performance.md, "Quota usage"): the
backend-plane API's GET /api/backend/quota/show for one user with
`--folders` folders x `--messages` messages, end to end (HTTP, the userdb
lookup through the auth service, the sum of the folder aggregates).

    bench/quota-show.py [--folders 100] [--messages 10000] [--runs 50] [--fold 0|1]

The mail store is written directly through the storage and index API in C
by bench/quota-usage-bench (seconds, instead of a million IMAP APPENDs),
then petreld (release build, components auth and backend-api) is started on
it and the endpoint is timed over one keep-alive connection: the first call
(nothing cached), then `--runs` calls (best and median). (quota/recalc is
not timed: the bench's index records have no message files, so its sync
of the folders would drop them.) Target: < 10 ms. Prints the load average with each number."""

import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchproc import cpu_seconds as proc_cpu_seconds
from benchproc import free_port, start_petreld, stop, vm_rss_kb

ROOT = Path(__file__).resolve().parents[1]


def load():
    return f"load average {os.getloadavg()[0]:.1f}"


def oncpu_ns(pid):
    """Time petreld's threads spent on a CPU, in ns (schedstat: exact, unlike
    /proc/PID/stat's clock ticks, which cannot time one call)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that just ended
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--folders", type=int, default=100)
    ap.add_argument("--messages", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--fold", type=int, default=0)
    ap.add_argument("--build", default=os.environ.get("BENCH_BUILD_DIR", "build-release"))
    a = ap.parse_args()
    build = ROOT / a.build
    if not os.environ.get("BENCH_NO_BUILD"):
        if not (build / "build.ninja").exists():
            subprocess.run(["meson", "setup", str(build), "--buildtype=release"], cwd=ROOT,
                           check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["ninja", "-C", str(build), "petreld", "bench/quota-usage-bench"],
                       check=True, stdout=subprocess.DEVNULL)
    work = Path(tempfile.mkdtemp(prefix="petrel-quota-show-"))
    proc = None
    try:
        t0 = time.monotonic()
        out = subprocess.run([str(build / "bench" / "quota-usage-bench"), "--dir",
                              str(work / "mail"), "--folders", str(a.folders), "--messages",
                              str(a.messages), "--runs", "3", "--fold", str(a.fold)],
                             check=True, capture_output=True, text=True)
        print(out.stdout.splitlines()[0])
        print(f"  data written in {time.monotonic() - t0:.1f} s")
        (work / "passwd").write_text(
            "bench:{PLAIN}p:2000:2000::::userdb_quota_rule=*:storage=100G\n")
        auth, api, tel = free_port(), free_port(), free_port()
        (work / "petrel.yaml").write_text(f"""
components: [auth, backend-api]
allow_root: true
log_level: warn
telemetry: {{listen: "127.0.0.1:{tel}"}}
mail: {{home: "{work}/mail/%u", fsync: never}}
auth:
  listen: ["127.0.0.1:{auth}"]
  passdb: {{driver: passwd-file, path: "{work}/passwd"}}
backend_api:
  listen: "127.0.0.1:{api}"
  auth_master_addr: "127.0.0.1:{auth}"
quota:
  enabled: true
""")
        env = dict(os.environ, BACKEND_API_TOKEN="")
        proc = start_petreld(build / "petreld", work / "petrel.yaml", work, api, env=env)
        conn = http.client.HTTPConnection("127.0.0.1", api, timeout=60)

        def call(method, path, body=None):
            t = time.perf_counter()
            conn.request(method, path, body=body,
                         headers={"Content-Type": "application/json"} if body else {})
            r = conn.getresponse()
            data = r.read()
            dt = time.perf_counter() - t
            if r.status != 200:
                sys.exit(f"{path}: {r.status} {data!r}")
            return dt, json.loads(data)

        # The auth service's first lookup of the user is not what is measured.
        call("GET", "/api/backend/version")
        ns0 = oncpu_ns(proc.pid)
        first, reply = call("GET", "/api/backend/quota/show?user=bench")
        first_cpu = (oncpu_ns(proc.pid) - ns0) / 1e6
        print(f"quota/show, first call (no folder cached): {first * 1e3:.2f} ms, petreld CPU "
              f"{first_cpu:.2f} ms ({load()})")
        def cpu_seconds():
            return proc_cpu_seconds(proc.pid)

        cpu0 = cpu_seconds()
        times = [call("GET", "/api/backend/quota/show?user=bench")[0] for _ in range(a.runs)]
        cpu = cpu_seconds() - cpu0
        print(f"quota/show x {a.runs}: best {min(times) * 1e3:.2f} ms, median "
              f"{statistics.median(times) * 1e3:.2f} ms, worst {max(times) * 1e3:.2f} ms "
              f"({load()})")
        print(f"  petreld CPU per call {cpu * 1e3 / a.runs:.2f} ms (the cost on a core of its own)")
        print(f"  reply: {json.dumps(reply)}")
        rss = vm_rss_kb(proc.pid)
        print(f"  petreld VmRSS {rss} kB (auth and backend-api, {a.folders} folders cached)")
        conn.close()
    finally:
        stop(proc)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
