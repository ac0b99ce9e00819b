#!/usr/bin/env python3
"""Long conformance run: N IMAP sessions of one user on one folder for S
seconds, every untagged response checked against each session's model of
its mailbox (tests/e2e/imap_model.py, tests/e2e/imap_load.py). Starts its
own petreld (release build by default) on loopback ports with a throwaway
home, prints the command count, the rate and the violations by kind, and
exits 1 if there is any.

  bench/imap-conformance.py [--sessions 50] [--seconds 300] [--build build]
                            [--workers 0] [--seed 1] [--contexts]

--contexts: each session also keeps three live RFC 5267 contexts (UID
SEARCH, SEARCH, UID SORT with RETURN (UPDATE ALL)) whose ADDTO/REMOVEFROM
the model checks, and compares them with fresh answers at the end.
"""
import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from imap_load import run_sessions  # noqa: E402
from imap_model import recent_seen_twice  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--build", default="build")
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--contexts", action="store_true")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="petrel-conformance-"))
    try:
        (work / "passwd").write_text("alice:{PLAIN}wonderland::::::\n")
        auth, imap = free_port(), free_port()
        (work / "petrel.yaml").write_text(f"""\
components: [auth, imap]
{"allow_root: true" if os.geteuid() == 0 else ""}
telemetry: {{listen: "127.0.0.1:{free_port()}"}}
mail: {{home: "{work}/mail/%u", fsync: never}}
auth:
  listen: ["127.0.0.1:{auth}"]
  passdb: {{driver: passwd-file, path: "{work}/passwd"}}
imap:
  listen: ["127.0.0.1:{imap}"]
  auth_addr: "127.0.0.1:{auth}"
  workers: {a.workers}
  max_connections_per_user: {a.sessions + 10}
""")
        proc = subprocess.Popen([str(ROOT / a.build / "petreld"), "-c", str(work / "petrel.yaml")],
                                stdout=open(work / "petreld.log", "wb"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", imap), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    sys.exit("petreld did not start:\n" + (work / "petreld.log").read_text())
                time.sleep(0.1)
        import imaplib
        m = imaplib.IMAP4("127.0.0.1", imap)
        m.login("alice", "wonderland")
        m.create("Other")
        m.logout()
        started = time.monotonic()
        models, commands, errors = run_sessions(("127.0.0.1", imap), "alice", "wonderland",
                                                a.sessions, a.seconds, seed=a.seed,
                                                contexts=a.contexts)
        took = time.monotonic() - started
        proc.terminate()
        proc.wait(30)
        kinds = Counter(v.kind for mo in models for v in mo.violations)
        twice = recent_seen_twice(models)
        if twice:
            kinds["recent-twice"] = len(twice)
            print("  recent twice (uid, session, session):", twice[:5])
        print(f"sessions={a.sessions} seconds={took:.0f} commands={commands} "
              f"rate={commands / took:.0f}/s violations={sum(kinds.values())} "
              f"{dict(kinds)} client_errors={len(errors)}")
        for e in errors[:5]:
            print("  error:", e)
        for mo in models:
            for v in mo.violations[:3]:
                print(f"  {mo.name} {v.kind}: {v.line[:160]!r} {v.detail}")
        return 1 if kinds or errors else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
