#!/usr/bin/env python3
"""Hostile soak: normal IMAP traffic next to hostile clients (docs/performance.md,
"Hostile soak"; issue 19, items 1, 5, 6 and 7).

One release petreld (auth, imap, lmtp, backend-api) on loopback. First the normal clients
alone (bench/imap-bench.c `load`: --normal connections, the command mix of bench/imap.sh)
for --baseline seconds; then, for --seconds, the same normal load while hostile sessions
hold on, --sessions in all (normal ones included):

  fetch      item 1: logs in, SELECTs a folder of 20 x 1 MB messages, pipelines
             --fetch-pipeline `FETCH 1:* BODY.PEEK[]` with a small SO_RCVBUF, never reads
  prelogin   item 5: IMAP connections that never log in (nor read the greeting)
  halfhttp   item 5: HTTP requests to the backend-plane API and telemetry cut off in the
             middle of the headers
  append     item 6: APPEND with a --upload-mb literal, half sent, then silence
  lmtpdata   item 6: LMTP DATA with half of a --upload-mb message, then silence
  pipehttp   item 7: --http-pipeline `POST /api/backend/index/dump` requests (a folder of
             --dump-messages messages) pipelined on one connection, replies never read

Sessions the server closes (timeouts, limits) are opened again, except the never-reading
ones; how many connections were refused or closed is counted per kind. Hostile clients
connect from --hostile-source (default 127.0.0.2, another loopback address than the
normal clients' 127.0.0.1, so that limits per client address can tell them apart).
petreld's VmRSS and descriptors are sampled every second; the hostile phase stops early
when RSS passes --rss-abort-mb (the machine is shared). /healthz of telemetry is probed
every second (a probe slower than 2 s or failing counts as failed).

Prints the normal clients' commands/s without and with the hostile ones and their ratio
(target >= 0.8), petreld's peak RSS in each phase and after the hostile clients left, and
the per-kind counts. Exit status 0 when the run completed (targets are reported, not
enforced); 1 on a setup failure or when the normal load itself failed.

  bench/hostile-soak.py [--seconds 300] [--sessions 2000] [--build build] ...
"""

import argparse
import errno
import json
import os
import resource
import selectors
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
from process_stop import stop_process  # noqa: E402  (the interop tests' own)

TOKEN = "hostile-soak-token-0123456789abcdef"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 1 << 20
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return want


def proc_status(pid, key):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def proc_fds(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


class Server:
    """petreld with auth, imap, lmtp, backend-api: limits sized for the soak."""

    def __init__(self, build, work, sessions):
        self.work = work
        self.ports = {k: free_port() for k in ("auth", "imap", "lmtp", "api", "tele")}
        self.passwd = os.path.join(work, "passwd")
        cfg = f"""components: [auth, imap, lmtp, backend-api]
allow_root: true
log_level: warn
telemetry: {{listen: "127.0.0.1:{self.ports['tele']}"}}
backend_api:
  listen: "127.0.0.1:{self.ports['api']}"
  max_connections: {sessions + 1000}
mail: {{home: "{work}/mail/%u", fsync: never}}
auth:
  listen: ["127.0.0.1:{self.ports['auth']}"]
  passdb: {{driver: passwd-file, path: "{self.passwd}"}}
imap:
  listen: ["127.0.0.1:{self.ports['imap']}"]
  auth_addr: "127.0.0.1:{self.ports['auth']}"
  max_connections: {sessions + 1000}
  max_connections_per_user: 100
lmtp:
  listen: ["127.0.0.1:{self.ports['lmtp']}"]
  auth_addr: "127.0.0.1:{self.ports['auth']}"
  username_format: "%n"
  max_connections: {sessions + 1000}
"""
        extra = os.environ.get("HOSTILE_CONFIG_EXTRA")
        if extra:
            cfg += open(extra).read()
        self.config = os.path.join(work, "petrel.yaml")
        with open(self.config, "w") as f:
            f.write(cfg)
        self.build = build
        self.proc = None

    def start(self):
        env = dict(os.environ, BACKEND_API_TOKEN=TOKEN)
        self.log = open(os.path.join(self.work, "petreld.log"), "ab")
        self.proc = subprocess.Popen([os.path.join(self.build, "petreld"), "-c", self.config],
                                     stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
                                     env=env, preexec_fn=raise_nofile)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit("petreld exited at start:\n" + self.log_text())
            try:
                socket.create_connection(("127.0.0.1", self.ports["imap"]), 0.2).close()
                socket.create_connection(("127.0.0.1", self.ports["lmtp"]), 0.2).close()
                return
            except OSError:
                time.sleep(0.1)
        raise SystemExit("petreld did not start:\n" + self.log_text())

    def log_text(self):
        with open(os.path.join(self.work, "petreld.log"), errors="replace") as f:
            return f.read()[-4000:]

    def stop(self):
        stop_process(self.proc)


# ---------- setup over real protocols ----------

def imap_cmd(sock_file, sock, tag, line, literal=None):
    if literal is None:
        sock.sendall(f"{tag} {line}\r\n".encode())
    else:
        sock.sendall(f"{tag} {line} {{{len(literal)}+}}\r\n".encode() + literal + b"\r\n")
    while True:
        resp = sock_file.readline()
        if not resp:
            raise RuntimeError(f"connection closed after {line!r}")
        if resp.startswith(f"{tag} ".encode()):
            if not resp.startswith(f"{tag} OK".encode()):
                raise RuntimeError(f"{line!r}: {resp!r}")
            return


def fill_big_folder(port, user, count=20, size=1 << 20):
    s = socket.create_connection(("127.0.0.1", port), 30)
    f = s.makefile("rb")
    f.readline()
    imap_cmd(f, s, "a", f"LOGIN {user} pw")
    line = b"x" * 998 + b"\r\n"
    body = b"From: big@example.org\r\nSubject: big\r\n\r\n" + line * (size // len(line))
    for i in range(count):
        imap_cmd(f, s, f"b{i}", "APPEND INBOX", body)
    imap_cmd(f, s, "z", "LOGOUT")
    s.close()


def lmtp_fill(port, user, messages):
    subprocess.run([sys.executable, os.path.join(ROOT, "bench", "lmtp-client.py"), "--port",
                    str(port), "--connections", "2", "--messages", str(messages), "--users", "1",
                    "--size", "512", "--run", "dumpfill"], check=True, stdout=subprocess.DEVNULL)


# ---------- hostile sessions ----------

class Hostile:
    """One hostile connection: `opener` connects and sends its opening, returns
    (socket, pending bytes to keep pushing, reads) or raises."""

    def __init__(self, kind, opener, reopen):
        self.kind = kind
        self.opener = opener
        self.reopen = reopen
        self.sock = None
        self.pending = b""
        self.reads = False


class HostileFleet:
    def __init__(self, args, server):
        self.args = args
        self.server = server
        self.sel = selectors.DefaultSelector()
        self.sessions = []
        self.counts = {}
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def count(self, kind, what, n=1):
        with self.lock:
            self.counts.setdefault(kind, {}).setdefault(what, 0)
            self.counts[kind][what] += n

    def connect(self, port, rcvbuf=None):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.bind((self.args.hostile_source, 0))
        s.settimeout(10)
        s.connect(("127.0.0.1", port))
        return s

    # openers: return (sock, pending, reads)
    def open_fetch(self, i):
        p = self.server.ports["imap"]
        s = self.connect(p, rcvbuf=4096)
        f = s.makefile("rb")
        f.readline()
        imap_cmd(f, s, "a", "LOGIN big pw")
        imap_cmd(f, s, "b", "SELECT INBOX")
        cmds = b"".join(b"f%d FETCH 1:* BODY.PEEK[]\r\n" % k
                        for k in range(self.args.fetch_pipeline))
        return s, cmds, False

    def open_prelogin(self, i):
        return self.connect(self.server.ports["imap"]), b"", True

    def open_halfhttp(self, i):
        port = self.server.ports["api"] if i % 2 == 0 else self.server.ports["tele"]
        s = self.connect(port)
        return s, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ", True

    def open_append(self, i):
        s = self.connect(self.server.ports["imap"])
        f = s.makefile("rb")
        f.readline()
        imap_cmd(f, s, "a", f"LOGIN hostile{i % 40 + 1} pw")
        size = self.args.upload_mb << 20
        head = f"c APPEND INBOX {{{size}+}}\r\n".encode()
        return s, head + b"y" * (size // 2), True

    def open_lmtpdata(self, i):
        s = self.connect(self.server.ports["lmtp"])
        f = s.makefile("rb")
        f.readline()

        def cmd(line, want):
            s.sendall(line.encode() + b"\r\n")
            while True:
                r = f.readline()
                if not r:
                    raise RuntimeError("closed")
                if r[3:4] != b"-":
                    if not r.startswith(want.encode()):
                        raise RuntimeError(f"{line}: {r!r}")
                    return
        cmd("LHLO hostile.example", "250")
        cmd("MAIL FROM:<h@example.net>", "250")
        cmd(f"RCPT TO:<hostile{i % 40 + 1}@example.org>", "250")
        cmd("DATA", "354")
        line = b"z" * 998 + b"\r\n"
        return s, line * ((self.args.upload_mb << 20) // 2 // len(line)), True

    def open_pipehttp(self, i):
        s = self.connect(self.server.ports["api"], rcvbuf=4096)
        body = json.dumps({"user": "user1", "folder": "INBOX"}).encode()
        req = (b"POST /api/backend/index/dump HTTP/1.1\r\nHost: x\r\n"
               b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
               b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
        return s, req * self.args.http_pipeline, False

    def plan(self, hostile):
        a = self.args
        kinds = [("fetch", a.fetchers, self.open_fetch, False),
                 ("append", a.appenders, self.open_append, True),
                 ("lmtpdata", a.lmtp_uploads, self.open_lmtpdata, True),
                 ("pipehttp", a.http_pipeliners, self.open_pipehttp, False)]
        fixed = sum(k[1] for k in kinds)
        rest = max(0, hostile - fixed)
        halfhttp = rest * a.halfhttp_share // 100
        kinds.append(("halfhttp", halfhttp, self.open_halfhttp, True))
        kinds.append(("prelogin", rest - halfhttp, self.open_prelogin, True))
        for kind, n, opener, reopen in kinds:
            for i in range(n):
                self.sessions.append(Hostile(kind, lambda i=i, o=opener: o(i), reopen))
        return {k[0]: k[1] for k in kinds}

    def open_one(self, h):
        try:
            sock, pending, reads = h.opener()
        except (OSError, RuntimeError) as e:
            self.count(h.kind, "refused")
            if isinstance(e, OSError) and e.errno in (errno.EMFILE, errno.ENFILE):
                raise SystemExit("client out of descriptors: raise the hard RLIMIT_NOFILE")
            return False
        sock.setblocking(False)
        h.sock, h.pending, h.reads = sock, pending, reads
        self.count(h.kind, "opened")
        self.register(h)
        return True

    def register(self, h):
        ev = (selectors.EVENT_READ if h.reads else 0) | (selectors.EVENT_WRITE if h.pending else 0)
        try:
            self.sel.unregister(h.sock)
        except (KeyError, ValueError):
            pass
        if ev:
            self.sel.register(h.sock, ev, h)

    def close(self, h):
        try:
            self.sel.unregister(h.sock)
        except (KeyError, ValueError):
            pass
        h.sock.close()
        h.sock = None

    def run(self):
        """Opens every session, then keeps pushing pending bytes and reopening closed
        sessions until stop is set."""
        for h in self.sessions:
            if self.stop.is_set():
                break
            self.open_one(h)
        while not self.stop.is_set():
            for key, ev in self.sel.select(timeout=0.2):
                h = key.data
                if ev & selectors.EVENT_WRITE and h.pending:
                    try:
                        n = h.sock.send(h.pending[:1 << 20])
                        h.pending = h.pending[n:]
                        self.count(h.kind, "bytes_sent", n)
                    except BlockingIOError:
                        pass
                    except OSError:
                        self.count(h.kind, "closed_by_server")
                        self.close(h)
                        continue
                    if not h.pending:
                        self.register(h)
                if ev & selectors.EVENT_READ and h.sock is not None:
                    try:
                        data = h.sock.recv(65536)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if not data:
                        self.count(h.kind, "closed_by_server")
                        self.close(h)
            for h in self.sessions:
                if h.sock is None and h.reopen and not self.stop.is_set():
                    self.count(h.kind, "reopened")
                    self.open_one(h)

    def shutdown(self):
        for h in self.sessions:
            if h.sock is not None:
                self.close(h)


# ---------- normal load and sampling ----------

def normal_load(args, server, users_file, seconds):
    out = subprocess.run([os.path.join(args.build, "bench", "imap-bench"), "load",
                          f"127.0.0.1:{server.ports['imap']}", users_file,
                          str(args.normal_messages), str(seconds)],
                         capture_output=True, text=True)
    rate = None
    for line in out.stdout.splitlines():
        # "clients=50 seconds=60.00 commands=123456 rate=2057 errors=0 ..."
        for tok in line.split():
            if tok.startswith("rate="):
                rate = float(tok[5:])
    return rate, out.returncode, out.stdout + out.stderr


class Sampler(threading.Thread):
    def __init__(self, server, tele_port, abort_mb):
        super().__init__(daemon=True)
        self.pid = server.proc.pid
        self.tele = tele_port
        self.abort_kb = abort_mb * 1024
        self.phase = "setup"
        self.peak = {}
        self.fds_peak = {}
        self.health = {}
        self.stop = threading.Event()
        self.over = threading.Event()

    def probe(self):
        t0 = time.monotonic()
        try:
            s = socket.create_connection(("127.0.0.1", self.tele), 2)
            s.settimeout(2)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            ok = s.recv(64).startswith(b"HTTP/1.1 200")
            s.close()
            return ok and time.monotonic() - t0 <= 2
        except OSError:
            return False

    def run(self):
        while not self.stop.is_set():
            rss = proc_status(self.pid, "VmRSS")
            fds = proc_fds(self.pid)
            p = self.phase
            self.peak[p] = max(self.peak.get(p, 0), rss)
            self.fds_peak[p] = max(self.fds_peak.get(p, 0), fds)
            if rss > self.abort_kb:
                self.over.set()
            h = self.health.setdefault(p, [0, 0])
            h[0] += 1
            h[1] += 0 if self.probe() else 1
            self.stop.wait(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=int, default=int(os.environ.get("HOSTILE_SECONDS", 300)))
    ap.add_argument("--baseline", type=int, default=60, help="seconds of normal load alone")
    ap.add_argument("--sessions", type=int, default=2000, help="normal + hostile sessions")
    ap.add_argument("--normal", type=int, default=50, help="normal IMAP clients")
    ap.add_argument("--normal-messages", type=int, default=100)
    ap.add_argument("--fetchers", type=int, default=10)
    ap.add_argument("--fetch-pipeline", type=int, default=2000)
    ap.add_argument("--appenders", type=int, default=20)
    ap.add_argument("--lmtp-uploads", type=int, default=20)
    ap.add_argument("--upload-mb", type=int, default=60)
    ap.add_argument("--http-pipeliners", type=int, default=20)
    ap.add_argument("--http-pipeline", type=int, default=150)
    ap.add_argument("--dump-messages", type=int, default=5000)
    ap.add_argument("--halfhttp-share", type=int, default=40,
                    help="percent of the remaining hostile sessions that are half-open HTTP "
                         "(the rest: pre-login IMAP)")
    ap.add_argument("--hostile-source", default="127.0.0.2")
    ap.add_argument("--rss-abort-mb", type=int, default=4096)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)

    if not args.no_build:
        if not os.path.exists(os.path.join(args.build, "build.ninja")):
            subprocess.run(["meson", "setup", args.build, ROOT, "--buildtype=release"],
                           check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["ninja", "-C", args.build, "petreld", "bench/imap-bench"], check=True,
                       stdout=subprocess.DEVNULL)
    nofile = raise_nofile()
    if nofile < args.sessions * 2 + 1000:
        raise SystemExit(f"RLIMIT_NOFILE hard limit {nofile} is too low for "
                         f"{args.sessions} sessions")

    work = tempfile.mkdtemp(prefix="petrel-hostile-", dir="/var/tmp")
    server = Server(args.build, work, args.sessions)
    with open(server.passwd, "w") as f:
        for i in range(1, args.normal + 1):
            f.write(f"bench{i}:{{PLAIN}}pw-{i}:{10000 + i}:{10000 + i}\n")
        f.write("big:{PLAIN}pw:30000:30000\nuser1:{PLAIN}pw:30001:30001\n")
        for i in range(1, 41):
            f.write(f"hostile{i}:{{PLAIN}}pw:{30100 + i}:{30100 + i}\n")
    users_file = os.path.join(work, "normal.users")
    with open(users_file, "w") as f:
        for i in range(1, args.normal + 1):
            f.write(f"bench{i}\tpw-{i}\n")

    fleet = None
    fleet_thread = None
    sampler = None
    status = 0
    try:
        server.start()
        print(f"hostile-soak: {os.cpu_count()} CPUs, {os.uname().release}, "
              f"{time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())}, petreld {args.build}, "
              f"work {work}")
        subprocess.run([os.path.join(args.build, "bench", "imap-bench"), "setup",
                        f"127.0.0.1:{server.ports['imap']}", users_file,
                        str(args.normal_messages), "mixed"], check=True,
                       stdout=subprocess.DEVNULL)
        if args.fetchers:
            fill_big_folder(server.ports["imap"], "big")
        if args.http_pipeliners:
            lmtp_fill(server.ports["lmtp"], "user1", args.dump_messages)
        sampler = Sampler(server, server.ports["tele"], args.rss_abort_mb)
        sampler.start()
        rss_start = proc_status(server.proc.pid, "VmRSS")

        sampler.phase = "baseline"
        base_rate, rc, out = normal_load(args, server, users_file, args.baseline)
        if rc != 0 or base_rate is None:
            print("hostile-soak: the normal load failed without hostile clients:\n" + out)
            return 1

        fleet = HostileFleet(args, server)
        hostile = max(0, args.sessions - args.normal)
        plan = fleet.plan(hostile)
        print(f"hostile-soak: {args.normal} normal IMAP clients; hostile sessions: "
              + ", ".join(f"{k} {v}" for k, v in plan.items())
              + f" (from {args.hostile_source})")
        sampler.phase = "hostile"
        fleet_thread = threading.Thread(target=fleet.run, daemon=True)
        fleet_thread.start()
        result = {}

        def normal():
            result["r"] = normal_load(args, server, users_file, args.seconds)
        nt = threading.Thread(target=normal, daemon=True)
        nt.start()
        aborted = False
        t_hostile = time.monotonic()
        while nt.is_alive():
            nt.join(1)
            if sampler.over.is_set() and not aborted:
                aborted = True
                print(f"hostile-soak: petreld RSS above {args.rss_abort_mb} MB after "
                      f"{time.monotonic() - t_hostile:.0f} s: hostile clients stopped early "
                      f"(the ratio below then also covers the rest of the phase without them)")
                fleet.stop.set()
            if server.proc.poll() is not None:
                print("hostile-soak: petreld died:\n" + server.log_text())
                return 1
        fleet.stop.set()
        fleet_thread.join(10)
        fleet.shutdown()
        hostile_rate, rc, out = result["r"]
        if rc != 0:
            status = 1
            print("hostile-soak: normal load errors under hostile clients:\n"
                  + "\n".join(out.splitlines()[-8:]))
        sampler.phase = "after"
        time.sleep(10)
        rss_after = proc_status(server.proc.pid, "VmRSS")
        fds_after = proc_fds(server.proc.pid)
        sampler.stop.set()
        sampler.join(5)

        ratio = (hostile_rate or 0) / base_rate if base_rate else 0
        print(f"hostile-soak: normal IMAP commands/s: alone {base_rate:.0f}, with hostile "
              f"{(hostile_rate or 0):.0f}, ratio {ratio:.2f} (target >= 0.80)")
        for p in ("baseline", "hostile", "after"):
            h = sampler.health.get(p, [0, 0])
            print(f"hostile-soak: {p:8s} peak RSS {sampler.peak.get(p, 0) / 1024:7.1f} MB, "
                  f"peak fds {sampler.fds_peak.get(p, 0)}, /healthz failed {h[1]}/{h[0]}")
        print(f"hostile-soak: RSS at start {rss_start / 1024:.1f} MB, 10 s after the hostile "
              f"clients left {rss_after / 1024:.1f} MB, fds {fds_after}")
        for kind in plan:
            c = fleet.counts.get(kind, {})
            print(f"hostile-soak:   {kind:9s} " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    finally:
        if fleet is not None:
            fleet.stop.set()
            if fleet_thread is not None:
                fleet_thread.join(10)
            fleet.shutdown()
        if sampler is not None:
            sampler.stop.set()
        server.stop()
        if args.keep:
            print(f"hostile-soak: work directory kept: {work}")
        else:
            subprocess.run(["rm", "-rf", work])
    return status


if __name__ == "__main__":
    sys.exit(main())
