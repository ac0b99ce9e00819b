#!/usr/bin/env python3
"""LIST of a per-owner shared namespace (docs/performance.md, "LIST of a
shared namespace"; docs/acl.md "Shared and public namespaces").

    bench/acl-list.py [--owners 1000] [--folders 20] [--visible-owners 200]
                      [--rounds 50] [--build build-release] [--strace]

Builds nothing (give a built tree with --build). Lays out `--owners` users
on disk, each with `--folders` folders that all have an ACL: the first
`--visible-owners` owners give the reader (bob) `lr` on one folder each and
someone else (carol) `lr` on the others; the remaining owners share only
with carol. Then the operator API reseeds each owner's ACL list index and
registry rows (acl/rebuild all, acl/registry/rebuild), and bob runs
`LIST "" "shared/*"` `--rounds` times over one connection. Prints the
folders listed (must be the visible ones), the wall-clock time per LIST
(median, 95th percentile, max) and petreld's CPU per LIST. With --strace,
one more LIST runs with strace attached to petreld and the file system
calls that name a folder bob may not see are counted (must be 0)."""

import argparse
import http.client
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchproc import cpu_seconds, free_port, start_petreld, stop

ROOT = Path(__file__).resolve().parents[1]


def imap(sock, buf, tag, line):
    sock.sendall(tag + b" " + line + b"\r\n")
    lines = []
    while True:
        while b"\r\n" not in buf[0]:
            chunk = sock.recv(1 << 20)
            if not chunk:
                sys.exit("connection closed by petreld")
            buf[0] += chunk
        got, buf[0] = buf[0].split(b"\r\n", 1)
        if got.startswith(tag + b" "):
            if not got[len(tag) + 1:].startswith(b"OK"):
                sys.exit(f"{line!r}: {got!r}")
            return lines
        lines.append(got)


def api(port, path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", "/api/backend/acl/" + path, body=json.dumps(body),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status != 200:
        sys.exit(f"{path} {body}: {r.status} {data!r}")
    return json.loads(data)


def lay_out(mail, owners, folders, visible_owners):
    for o in range(owners):
        root = mail / f"o{o:04d}" / "Maildir"
        for d in ("cur", "new", "tmp"):
            (root / d).mkdir(parents=True, exist_ok=True)
        for f in range(folders):
            fd = root / f".F{f:02d}"
            for d in ("cur", "new", "tmp"):
                (fd / d).mkdir(parents=True, exist_ok=True)
            (fd / "maildirfolder").touch()
            who = "bob" if o < visible_owners and f == 0 else "carol"
            (fd / "dovecot-acl").write_text(f"user={who} lr\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--owners", type=int, default=1000)
    ap.add_argument("--folders", type=int, default=20)
    ap.add_argument("--visible-owners", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--build", default="build-release")
    ap.add_argument("--strace", action="store_true")
    a = ap.parse_args()
    petreld = ROOT / a.build / "petreld"
    work = Path(tempfile.mkdtemp(prefix="acl-list-bench-"))
    mail = work / "mail"
    t0 = time.monotonic()
    lay_out(mail, a.owners, a.folders, a.visible_owners)
    (work / "passwd").write_text("bob:{PLAIN}bench:1001:1001\n")
    imap_port, auth_port, api_port = free_port(), free_port(), free_port()
    cfg = {
        "components": ["auth", "imap", "backend-api"],
        "allow_root": True,
        "log_level": "warn",
        "backend_api": {"listen": f"127.0.0.1:{api_port}"},
        "dicts": {"reg": {"driver": "file", "path": str(work / "registry.db")}},
        "mail": {"home": str(mail / "%u"), "fsync": "never",
                 "acl": {"enabled": True, "sharing_map": "reg"},
                 "namespaces": [
                     {"name": "inbox", "type": "personal", "prefix": "", "separator": "/",
                      "location": "maildir:%h/Maildir"},
                     {"name": "shared", "type": "shared", "prefix": "shared/%u/",
                      "separator": "/", "location": "maildir:%h/Maildir"}]},
        "auth": {"listen": [f"127.0.0.1:{auth_port}"],
                 "passdb": {"driver": "passwd-file", "path": str(work / "passwd")}},
        "imap": {"listen": [f"127.0.0.1:{imap_port}"], "auth_addr": f"127.0.0.1:{auth_port}"},
    }
    config = work / "petreld.yaml"
    config.write_text(json.dumps(cfg))  # YAML is a superset of JSON
    proc = start_petreld(petreld, config, work, imap_port)
    try:
        for o in range(a.owners):
            api(api_port, "rebuild", {"user": f"o{o:04d}", "namespace": "personal", "all": True})
            api(api_port, "registry/rebuild", {"owner": f"o{o:04d}", "namespace": "personal"})
        setup = time.monotonic() - t0
        sock = socket.create_connection(("127.0.0.1", imap_port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = [b""]
        while b"\r\n" not in buf[0]:
            buf[0] += sock.recv(4096)
        buf[0] = buf[0].split(b"\r\n", 1)[1]
        imap(sock, buf, b"l", b"LOGIN bob bench")
        times = []
        listed = []
        cpu0 = cpu_seconds(proc.pid)
        for i in range(a.rounds):
            start = time.perf_counter()
            lines = imap(sock, buf, b"t%d" % i, b'LIST "" "shared/*"')
            times.append(time.perf_counter() - start)
            listed = lines
        cpu = (cpu_seconds(proc.pid) - cpu0) / a.rounds
        folders = [l for l in listed if b"\\Noselect" not in l]
        want = min(a.visible_owners, a.owners)
        if len(folders) != want or any(not l.endswith(b'/F00"') for l in folders):
            sys.exit(f"listed {len(folders)} folders, wanted {want}: {folders[:3]!r}")
        times.sort()
        print(f"owners {a.owners} x {a.folders} folders, visible {want} "
              f"(setup {setup:.1f} s)")
        print(f"LIST \"\" \"shared/*\": {len(listed)} lines ({len(folders)} folders), "
              f"median {statistics.median(times) * 1000:.2f} ms, "
              f"p95 {times[int(len(times) * 0.95) - 1] * 1000:.2f} ms, "
              f"max {times[-1] * 1000:.2f} ms, petreld CPU {cpu * 1000:.2f} ms per LIST")
        if a.strace:
            out = work / "strace.out"
            st = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=%file", "-o", str(out),
                                   "-p", str(proc.pid)])
            time.sleep(1.0)  # attached to every thread
            imap(sock, buf, b"s", b'LIST "" "shared/*"')
            time.sleep(0.5)
            st.terminate()
            st.wait()
            text = out.read_text()
            invisible = [l for l in text.splitlines()
                         if re.search(r"/\.F(0[1-9]|1\d)\b", l)
                         or re.search(r"/o0(2\d\d|[3-9]\d\d)/", l)]
            visible = [l for l in text.splitlines() if re.search(r"/\.F00\b", l)]
            print(f"strace: {len(text.splitlines())} file calls, {len(visible)} on visible "
                  f"folders, {len(invisible)} on folders or owners bob may not see")
        imap(sock, buf, b"z", b"LOGOUT")
    finally:
        stop(proc)


if __name__ == "__main__":
    main()
