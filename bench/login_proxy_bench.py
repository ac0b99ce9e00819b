"""The login proxy against the backend it fronts, in one run (driven by
bench/login-proxy.sh; docs/performance.md, "Login proxy").

    login_proxy_bench.py BUILD_DIR WORK_DIR

Starts the fleet of tests/e2e/fleet.py from BUILD_DIR (release) with
SHA512-CRYPT passwords made by petrelctl and the auth caches on (the
default), the proxies talking to their auth service directly (no test gate
in the way), and measures, each time directly against backend a and through
proxy a to the same backend with the same users:

  throughput  bench/imap-bench `load` (BENCH_CLIENTS connections, one
              command in flight each) for BENCH_DURATION seconds, in the
              order direct, proxy, proxy, direct, the ratio of the means;
              twice: the read mix BENCH_MIX, then BENCH_BULK_MIX (whole
              messages, FETCH BODY[] only: bytes/s). Also the proxy's CPU
              time per relayed command and the backend's per command served
              directly: client, backend and proxy share the machine's CPUs,
              so where they are busy the relay's CPU is taken from the
              backend, and the ratio says more about the machine than about
              the relay.
  logins      BENCH_LOGIN_PROCS processes with BENCH_LOGIN_CONCURRENCY
              connections each: connect, greeting, LOGIN, LOGOUT, wait for
              the server to close, again, for BENCH_LOGIN_SECONDS. Every user
              has logged in once before (the auth caches hold them all).
  memory      bench/imap-bench `idle` through the proxy: BENCH_IDLE_SESSIONS
              sessions LOGIN + SELECT and stay; the proxy's VmRSS growth per
              session.

Prints every number and the ratios against the targets of issue 26
(throughput >= 90 % of direct, >= 2,000 logins/s, <= 16 KiB per idle
proxied session); targets are reported, not enforced. Exit 1 when a run
had errors."""

import multiprocessing
import os
import re
import selectors
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def env_int(name, default):
    return int(os.environ.get(name, default))


DURATION = env_int("BENCH_DURATION", 10)
CLIENTS = env_int("BENCH_CLIENTS", 20)
MESSAGES = env_int("BENCH_MESSAGES", 50)
USERS = env_int("BENCH_USERS", 200)
LOGIN_SECONDS = env_int("BENCH_LOGIN_SECONDS", 5)
LOGIN_CONCURRENCY = env_int("BENCH_LOGIN_CONCURRENCY", 32)
LOGIN_PROCS = env_int("BENCH_LOGIN_PROCS", 2)
IDLE_SESSIONS = env_int("BENCH_IDLE_SESSIONS", 2000)
MIX = os.environ.get("BENCH_MIX", "noop=16,headers=14,body=14,flags=8,select=4")
BULK_MIX = os.environ.get("BENCH_BULK_MIX", "body=1")


# ---------- the login-rate client ----------

class LoginConn:
    """One connection's login cycle, non-blocking."""

    def __init__(self, addr, cred):
        self.addr = addr
        self.user, self.password = cred
        self.buf = b""
        self.state = "greeting"
        self.sock = socket.socket()
        self.sock.setblocking(False)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self.sock.connect(addr)
        except BlockingIOError:
            pass

    def feed(self, data):
        """Returns "done", "error: ..." or None (go on)."""
        if not data:
            return "done" if self.state == "closing" else f"error: closed in {self.state}"
        self.buf += data
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            if self.state == "greeting":
                if not line.startswith(b"* OK"):
                    return f"error: greeting {line[:80]!r}"
                self.sock.send(f'a LOGIN "{self.user}" "{self.password}"\r\n'.encode())
                self.state = "login"
            elif self.state == "login":
                if line.startswith(b"a OK"):
                    self.sock.send(b"b LOGOUT\r\n")
                    self.state = "logout"
                elif line.startswith(b"a "):
                    return f"error: login {line[:120]!r}"
            elif self.state == "logout":
                if line.startswith(b"b OK"):
                    self.state = "closing"  # the server closes first: no TIME_WAIT here
                elif line.startswith(b"b "):
                    return f"error: logout {line[:120]!r}"
        return None


def login_worker(addr, creds, seconds, concurrency, offset, out):
    sel = selectors.DefaultSelector()
    n = offset
    done = errors = 0
    first_error = ""
    cpu0 = time.process_time()
    t_end = time.monotonic() + seconds

    def start():
        nonlocal n
        c = LoginConn(addr, creds[n % len(creds)])
        n += 1
        sel.register(c.sock, selectors.EVENT_READ, c)

    for _ in range(concurrency):
        start()
    while sel.get_map():
        for key, _ in sel.select(timeout=1.0):
            c = key.data
            try:
                data = c.sock.recv(65536)
            except BlockingIOError:
                continue
            except OSError as e:
                data, verdict = None, f"error: {e}"
            else:
                verdict = c.feed(data)
            if verdict is None:
                continue
            sel.unregister(c.sock)
            c.sock.close()
            if verdict == "done":
                done += 1
            else:
                errors += 1
                first_error = first_error or verdict
            if time.monotonic() < t_end:
                start()
    out.put((done, errors, first_error, time.process_time() - cpu0))


def login_rate(addr, creds, seconds):
    q = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=login_worker,
                                     args=(addr, creds, seconds, LOGIN_CONCURRENCY,
                                           i * 7919, q))
             for i in range(LOGIN_PROCS)]
    t0 = time.monotonic()
    for p in procs:
        p.start()
    results = [q.get() for _ in procs]
    elapsed = time.monotonic() - t0
    for p in procs:
        p.join()
    done = sum(r[0] for r in results)
    errors = sum(r[1] for r in results)
    first = next((r[2] for r in results if r[2]), "")
    client_cpu = sum(r[3] for r in results)
    return done / elapsed, done, errors, first, client_cpu / elapsed


# ---------- helpers ----------

def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(cmd, env=None, timeout=900):
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stdout}\n"
                 f"{proc.stderr}")
    return proc.stdout


def field(text, name):
    m = re.search(rf"\b{name}=([0-9.]+)", text)
    if not m:
        sys.exit(f"no {name}= in:\n{text}")
    return float(m.group(1))


def main():
    build, work = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    os.environ["PETREL_BUILD"] = str(build)
    sys.path.insert(0, str(ROOT / "tests" / "e2e"))
    from fleet import Fleet  # after PETREL_BUILD: conftest reads it at import

    bench = build / "bench" / "imap-bench"
    unlimited = {"max_connections": 1000000, "max_connections_per_user": 0}
    fleet = Fleet(work / "fleet", users=USERS, hashed=True, gate=False,
                  backend_extra={"imap": unlimited, "mail": {"fsync": "never"}},
                  login_extra={"imap": unlimited})
    t0 = time.monotonic()
    fleet.start()
    print(f"fleet up in {time.monotonic() - t0:.1f} s ({len(fleet.nodes)} petreld processes, "
          f"build {build}; {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())})", flush=True)
    failed = False
    try:
        backend, proxy = fleet.backends[0], fleet.proxies[0]
        port = fleet.port["imap"]
        direct, proxied = f"{backend.ip}:{port}", f"{proxy.ip}:{port}"
        mine = [u for u in fleet.users if fleet.map(u) == backend.ip]
        creds = [(u, fleet.password(u)) for u in mine]
        users_file = work / "users"
        users_file.write_text("".join(f"{u}\t{p}\n" for u, p in creds))
        load_file = work / "load-users"
        load_file.write_text("".join(f"{u}\t{p}\n" for u, p in creds[:CLIENTS]))
        print(f"{len(mine)} of {len(fleet.users)} users on {backend.name} ({backend.ip}); "
              f"proxy {proxy.name} ({proxy.ip})", flush=True)

        # ----- relayed command throughput -----
        run([bench, "setup", direct, load_file, str(MESSAGES), "mixed"])
        throughput = {}
        for name, mix in (("mix", MIX), ("bulk", BULK_MIX)):
            env = dict(os.environ, IMAP_BENCH_MIX=mix)
            rates = {"direct": [], "proxy": []}
            proxy_cpu = proxy_cmds = backend_cpu = direct_cmds = 0.0
            for kind in ("direct", "proxy", "proxy", "direct"):
                addr = direct if kind == "direct" else proxied
                c0, b0 = cpu_seconds(proxy.pid), cpu_seconds(backend.pid)
                out = run([bench, "load", addr, load_file, str(MESSAGES), str(DURATION),
                           str(CLIENTS)], env=env)
                rate = field(out, "rate")
                if kind == "proxy":
                    proxy_cpu += cpu_seconds(proxy.pid) - c0
                    proxy_cmds += field(out, "commands")
                else:
                    backend_cpu += cpu_seconds(backend.pid) - b0
                    direct_cmds += field(out, "commands")
                if field(out, "errors"):
                    failed = True
                rates[kind].append(rate)
                print(f"load {name} ({mix}) {kind:6} {addr}: {rate:,.0f} commands/s", flush=True)
            throughput[name] = (sum(rates["direct"]) / 2, sum(rates["proxy"]) / 2,
                                1e6 * proxy_cpu / proxy_cmds if proxy_cmds else 0,
                                1e6 * backend_cpu / direct_cmds if direct_cmds else 0)

        # ----- login rate, auth cached -----
        for addr in (direct, proxied):  # every user once: the caches hold them all
            host, prt = addr.rsplit(":", 1)
            for u, pw in creds:
                c = LoginConn((host, int(prt)), (u, pw))
                c.sock.setblocking(True)
                c.sock.settimeout(10)
                while True:
                    v = c.feed(c.sock.recv(65536))
                    if v:
                        break
                c.sock.close()
                if v != "done":
                    sys.exit(f"warm-up login of {u} at {addr}: {v}")
        logins = {}
        for kind, addr in (("direct", direct), ("proxy", proxied)):
            host, prt = addr.rsplit(":", 1)
            c0 = cpu_seconds(proxy.pid)
            rate, done, errors, first, cores = login_rate((host, int(prt)), creds,
                                                          LOGIN_SECONDS)
            logins[kind] = rate
            extra = ""
            if kind == "proxy":
                extra = f", proxy CPU {1e6 * (cpu_seconds(proxy.pid) - c0) / max(done, 1):.0f} " \
                        f"us per login"
            print(f"logins {kind:6} {addr}: {rate:,.0f}/s ({done} in {LOGIN_SECONDS} s, "
                  f"{errors} errors{extra}; the client used {cores:.2f} cores)"
                  f"{' first error: ' + first if first else ''}",
                  flush=True)
            failed = failed or errors > 0

        # ----- idle proxied session memory -----
        out = run([bench, "idle", proxied, users_file, str(IDLE_SESSIONS), str(proxy.pid)])
        for line in out.splitlines():
            if line.startswith("phase "):
                print("idle " + line)
        per = field(out, "rss_per_session_kib")
        if field(out, "errors"):
            failed = True

        print()
        for name, (d, p, us, bus) in throughput.items():
            what = "command" if name == "mix" else "FETCH BODY[] (mixed sizes, ~20 KB mean)"
            print(f"throughput {name:5} direct {d:,.0f}/s  proxy {p:,.0f}/s  ratio "
                  f"{100 * p / d:.1f} %  (target >= 90 %)  CPU per {what}: proxy "
                  f"{us:.1f} us, backend {bus:.1f} us")
        print(f"logins      direct {logins['direct']:,.0f}/s  proxy {logins['proxy']:,.0f}/s  "
              f"ratio {100 * logins['proxy'] / logins['direct']:.1f} %  (target >= 2,000/s "
              f"through the proxy)")
        print(f"idle        {per:.1f} KiB per proxied session in the proxy over {IDLE_SESSIONS} "
              f"sessions (target <= 16 KiB)")
    finally:
        fleet.stop(check=False)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
