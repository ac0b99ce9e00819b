#!/usr/bin/env python3
"""The login proxy's memory per idle proxied session, plain and TLS
(docs/performance.md, "Login proxy"; issue 26: <= 16 KiB per session).

    bench/login-proxy-tls-idle.py [BUILD_DIR]      (default: build-release)

Starts the fleet of tests/e2e/fleet.py from BUILD_DIR (two backends, two
directors, the monitor, the auth node, two proxies; a throwaway CA made
with the openssl CLI for the proxies' implicit-TLS and STARTTLS ports),
then, for one kind after the other, restarts proxy a (so that memory a
kind freed is not reused by the next), opens BENCH_WARMUP sessions and
closes them (the allocator's and the process's first-use pages are not
counted), and opens BENCH_SESSIONS sessions through it: connect (plain,
implicit TLS, or STARTTLS), LOGIN, SELECT INBOX, left idle. Prints the
growth of the proxy's VmRSS per session for each kind, then closes them.

Knobs: BENCH_SESSIONS=500  BENCH_WARMUP=20  BENCH_KINDS="plain tls starttls"
       BENCH_KEEP=1 (keep the work directory)
Exit 1 when a session failed; the target is reported, not enforced."""

import imaplib
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
from pathlib import Path

from benchproc import vm_rss_kb

ROOT = Path(__file__).resolve().parents[1]
SESSIONS = int(os.environ.get("BENCH_SESSIONS", "500"))
WARMUP = int(os.environ.get("BENCH_WARMUP", "20"))
KINDS = os.environ.get("BENCH_KINDS", "plain tls starttls").split()
TARGET_KIB = 16


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(d):
    """A CA and a server certificate for the proxies' addresses."""
    d.mkdir(parents=True, exist_ok=True)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
            "ca.pem", "-days", "2", "-subj", "/CN=petrel bench CA", cwd=d)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out",
            "server.csr", "-subj", "/CN=petrel bench server", cwd=d)
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.31,IP:127.0.0.32,IP:127.0.0.1\n"
                                  "extendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "server.ext",
            cwd=d)
    return d


def open_sessions(fleet, proxy, kind, n, ctx):
    """`n` sessions through `proxy`: LOGIN + SELECT INBOX over `kind`."""
    sessions = []
    for i in range(n):
        user = fleet.users[i % len(fleet.users)]
        if kind == "tls":
            m = fleet.imaps(proxy, timeout=15)
        else:
            m = fleet.imap(proxy, timeout=15)
            if kind == "starttls":
                m.starttls(ssl_context=ctx)
        m.login(user, fleet.password(user))
        m.select("INBOX")
        sessions.append(m)
    return sessions


def main():
    build = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "build-release").resolve()
    if not (build / "petreld").exists():
        sys.exit(f"no petreld in {build} (build it first: ninja -C {build})")
    os.environ["PETREL_BUILD"] = str(build)
    sys.path.insert(0, str(ROOT / "tests" / "e2e"))
    # after PETREL_BUILD: conftest reads it at import
    from fleet import Fleet, wait_accepting
    from test_login_proxy_tls_idle import close_sessions

    work = Path(tempfile.mkdtemp(prefix="petrel-login-tls-idle."))
    pki = make_pki(work / "pki")
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    unlimited = {"max_connections": 1000000, "max_connections_per_user": 0}
    fleet = Fleet(work / "fleet", pki=pki, gate=False, log_level="warn",
                  backend_extra={"imap": unlimited, "mail": {"fsync": "never"}},
                  login_extra={"imap": unlimited})
    failed = False
    fleet.start()
    try:
        proxy = fleet.proxies[0]
        print(f"fleet up (build {build}; {os.cpu_count()} CPUs, load average "
              f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}); {SESSIONS} sessions per kind "
              f"through {proxy.name} ({proxy.ip})", flush=True)
        for kind in KINDS:
            try:
                proxy.d.stop()
                proxy.restart()
                wait_accepting(proxy.ip, fleet.port["imaps"], what="the proxy's imaps")
                close_sessions(fleet, proxy, open_sessions(fleet, proxy, kind, WARMUP, ctx))
                before = vm_rss_kb(proxy.pid)
                sessions = open_sessions(fleet, proxy, kind, SESSIONS, ctx)
                after = vm_rss_kb(proxy.pid)
                close_sessions(fleet, proxy, sessions)
            except (OSError, AssertionError, imaplib.IMAP4.error) as e:
                print(f"{kind}: failed: {e}", flush=True)
                failed = True
                continue
            per = (after - before) / SESSIONS
            print(f"idle {kind:8} VmRSS {before} -> {after} KiB: {per:.1f} KiB per proxied "
                  f"session (target <= {TARGET_KIB} KiB)", flush=True)
    finally:
        fleet.stop(check=False)
        if os.environ.get("BENCH_KEEP"):
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
