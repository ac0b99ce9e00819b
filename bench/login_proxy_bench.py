"""The login proxy against the backend it fronts and against Dovecot's
proxy in front of the same backend, in one run (driven by
bench/login-proxy.sh; docs/performance.md, "Login proxy").

    login_proxy_bench.py BUILD_DIR WORK_DIR

Starts the fleet of tests/e2e/fleet.py from BUILD_DIR (release) with
SHA512-CRYPT passwords made by petrelctl and the auth caches on (the
default), the proxies talking to their auth service directly (no test gate
in the way), and Dovecot 2.3 as an IMAP proxy in front of the same backend
(bench/dovecot_proxy.py: passdb passwd-file with the same hashes,
`proxy=y`, auth cache on, imap-login in high-performance mode). Targets:

  direct   backend a
  petrel   Petrel's login proxy a, routing through the directors to a
  dovecot  Dovecot's proxy, its passdb naming backend a

For each CPU placement of BENCH_PLACEMENT (bench/cpu_placement.py; all
three by default, "both" for the first two):

  shared   every process on every CPU: the proxy's CPU is taken from the
           client and the backend
  split    the proxies (Petrel's and Dovecot's whole process tree) pinned to
           CPU 1, everything else (this driver and the load generator,
           backends, directors, auth, monitor) to CPU 0, for the direct and
           the proxied runs alike: client and backend have the same one CPU
           in every run, and a proxied run adds only a proxy on a CPU of its
           own, as a proxy on its own host does
  backend  the servers (backends, directors, auth, monitor) pinned to CPU 0,
           the clients' side (this driver and the load generator, the
           proxies) to CPU 1: the backend has a CPU of its own in every run,
           as a mail backend has its own host, and a proxied run adds the
           proxy to the clients' side; what the proxy costs the backend
           per command shows directly

it measures:

  throughput  bench/imap-bench `load` (BENCH_CLIENTS connections, one
              command in flight each) for BENCH_DURATION seconds per run, in
              the order direct, petrel, dovecot, dovecot, petrel, direct
              (BENCH_ROUNDS=2 rounds, each the reverse of the one before), the
              ratio of the means; twice: the read mix BENCH_MIX, then
              BENCH_BULK_MIX (whole messages, FETCH BODY[] only). CPU time
              of the proxy (Dovecot: its whole process tree), of the backend
              and of the load generator per command, read from /proc at
              imap-bench's start and stop hooks (the measured window only);
              the backend's wake-ups per command (its voluntary context
              switches: each is a sleep waiting for input); the p50 latency; the CPU time the rest of the machine used in
              the window (/proc/stat less the bench's processes: a shared
              machine's other work takes CPU from a run, most of all from a
              proxy pinned to one CPU); and the rate the measured CPU per
              command allows on the placement's CPUs ("CPU bound": shared,
              2 CPUs / (proxy + backend + load generator); split, the lesser
              of 1 CPU / (backend + load generator) and 1 CPU / proxy), an
              estimate that the machine's other work skews less. Each run
              waits up to BENCH_QUIET_WAIT s for that other work to fall
              below BENCH_QUIET_OTHER % of a CPU first.
  logins      bench/imap-bench `logins`: BENCH_LOGIN_CONCURRENCY
              connections at a time, each connect, greeting, LOGIN, LOGOUT,
              wait for the server to close, again, for BENCH_LOGIN_SECONDS
              (one C process, about 90 us of CPU per login, mostly the
              kernel's connect and close, where a Python client took
              150 us of the CPU the servers share); direct,
              through Petrel's proxy, through Dovecot's (the same
              SHA512-CRYPT hashes) and through a second Dovecot whose
              passwd-file holds {PLAIN} passwords (its proxy path without
              the hash). Every user has logged in once before at each
              (the auth caches hold them all).

and once, in the shared placement:

  memory      bench/imap-bench `idle` through Petrel's proxy:
              BENCH_IDLE_SESSIONS sessions LOGIN + SELECT and stay; the
              proxy's VmRSS growth per session.

Prints every number, a summary table per placement and the ratios against
the targets of issue 26 (throughput >= 90 % of direct, >= 2,000 logins/s,
<= 16 KiB per idle proxied session); targets are reported, not enforced.
Exit 1 when a run had errors. BENCH_DOVECOT=0 leaves Dovecot out."""

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cpu_placement  # noqa: E402
from dovecot_proxy import DovecotProxy, available as dovecot_available  # noqa: E402


def env_int(name, default):
    return int(os.environ.get(name, default))


DURATION = env_int("BENCH_DURATION", 8)
CLIENTS = env_int("BENCH_CLIENTS", 20)
MESSAGES = env_int("BENCH_MESSAGES", 50)
USERS = env_int("BENCH_USERS", 200)
LOGIN_SECONDS = env_int("BENCH_LOGIN_SECONDS", 4)
LOGIN_CONCURRENCY = env_int("BENCH_LOGIN_CONCURRENCY", 64)
IDLE_SESSIONS = env_int("BENCH_IDLE_SESSIONS", 2000)
MIX = os.environ.get("BENCH_MIX", "noop=16,headers=14,body=14,flags=8,select=4")
BULK_MIX = os.environ.get("BENCH_BULK_MIX", "body=1")
ROUNDS = env_int("BENCH_ROUNDS", 2)
# Opt-in: every bench process (fleet, Dovecot, driver, load generator) at
# this nice value, in every placement alike, so that other work on a shared
# machine skews the runs less (and gets less CPU meanwhile).
NICE = int(os.environ["BENCH_NICE"]) if os.environ.get("BENCH_NICE") else None
PLACEMENT = os.environ.get("BENCH_PLACEMENT", "all")
WITH_DOVECOT = os.environ.get("BENCH_DOVECOT", "1") != "0"
DOVECOT_LOGIN_PROCS = env_int("BENCH_DOVECOT_LOGIN_PROCS", 1)
QUIET_WAIT = float(os.environ.get("BENCH_QUIET_WAIT", 5))
QUIET_OTHER = float(os.environ.get("BENCH_QUIET_OTHER", 25))
DOVECOT_IP, DOVECOT_PLAIN_IP = "127.0.0.33", "127.0.0.34"

LABEL = {"direct": "direct", "petrel": "petrel proxy", "dovecot": "dovecot proxy",
         "dovecot-plain": "dovecot proxy, {PLAIN} passdb"}


# ---------- the warm-up login ----------

class LoginConn:
    """One connection's login cycle (the auth caches' warm-up)."""

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


# ---------- helpers ----------

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


def read_stats(path):
    """{pid: stat text} from the concatenated /proc/PID/stat the hook wrote,
    and {"cpuN": [ticks...]} from the /proc/stat before them."""
    out = {}
    for line in Path(path).read_text().splitlines():
        head = line.split(None, 1)[0] if line.strip() else ""
        if "uptime" not in out and re.fullmatch(r"[0-9]+\.[0-9]+", head):
            out["uptime"] = float(head)  # /proc/uptime: the wall clock of the snapshot
        elif head.isdigit():
            out[int(head)] = line
        elif re.fullmatch(r"cpu\d+", head):
            out[head] = [int(x) for x in line.split()[1:]]
        elif head == "voluntary_ctxt_switches:":
            # the backend's threads' /proc/PID/task/TID/status
            out["sleeps"] = out.get("sleeps", 0) + int(line.split()[1])
    return out


def cpu_busy(stats, cpu):
    """Seconds CPU `cpu` ran something (user, nice, system, irq, softirq;
    not idle, iowait or steal) per a read_stats()."""
    t = stats.get(f"cpu{cpu}")
    if t is None:
        return 0.0
    return (t[0] + t[1] + t[2] + t[5] + t[6]) / os.sysconf("SC_CLK_TCK")


def group_cpu(before, after, pids):
    """CPU seconds the processes `pids` used between two snapshots (each
    with the children it reaped meanwhile)."""
    return sum(cpu_placement.stat_cpu(after[p], True) - cpu_placement.stat_cpu(before[p], True)
               for p in pids if p in before and p in after)


def port_free(ip, want):
    """`want` if nothing listens on ip:want, else a free port on ip."""
    for port in (want, 0):
        with socket.socket() as s:
            try:
                s.bind((ip, port))
                return s.getsockname()[1]
            except OSError:
                continue
    raise RuntimeError(f"no port on {ip}")


def mean_runs(rs):
    """The mean of each number (and of each CPU's busy share) over runs."""
    out = {}
    for key, v in rs[0].items():
        if v is None:
            out[key] = None
        elif isinstance(v, dict):
            out[key] = {c: sum(r[key][c] for r in rs) / len(rs) for c in v}
        else:
            out[key] = sum(r[key] for r in rs) / len(rs)
    return out


def cpu_bound(placement, r, ncpus):
    """Commands/s that the CPU per command of a run allows: shared, the
    proxy, backend and load generator share every CPU; split, the backend
    and load generator have one CPU and the proxy another; backend, the
    backend has one CPU and the load generator and proxy the other."""
    backend, client = r["backend_us"], r["client_us"] or 0
    proxy = r["proxy_us"] or 0
    if placement == "shared":
        return ncpus * 1e6 / (backend + client + proxy)
    if placement == "backend":
        return min(1e6 / backend, 1e6 / (client + proxy))
    return min(1e6 / (backend + client), 1e6 / proxy if proxy else float("inf"))


def fmt_us(x):
    return "-" if x is None else f"{x:.1f}"


def fmt_ms(x):
    return "-" if x is None else f"{x:.2f} ms"


class Bench:
    def __init__(self, build, work):
        self.build, self.work = build, work
        self.bench = build / "bench" / "imap-bench"
        self.failed = False
        self.all_cpus = set(cpu_placement.cpus_available())
        self.dovecots = {}

    # ----- placement -----

    def groups(self, placement):
        """(the pids on the proxies' CPU, the others), by name for the log:
        split puts the load generator with the servers, backend with the
        proxies."""
        proxies = {n.name: [n.pid] for n in self.fleet.proxies}
        for name, dv in self.dovecots.items():
            proxies[name] = dv.pids()
        rest = {n.name: [n.pid] for n in self.fleet.nodes if n not in self.fleet.proxies}
        driver = proxies if placement == "backend" else rest
        driver["driver + load generator"] = [os.getpid()]
        return proxies, rest

    def place(self, placement, verbose=False):
        proxies, rest = self.groups(placement)
        if placement == "shared":
            sets = (self.all_cpus, self.all_cpus)
        else:
            rest_cpus, proxy_cpus = cpu_placement.split_sets(self.all_cpus)
            sets = (proxy_cpus, rest_cpus)
        n_proxy = cpu_placement.pin([p for ps in proxies.values() for p in ps], sets[0], NICE)
        n_rest = cpu_placement.pin([p for ps in rest.values() for p in ps], sets[1], NICE)
        if verbose:
            cpus = lambda s: ",".join(map(str, sorted(s)))  # noqa: E731
            print(f"placement {placement}: CPU {cpus(sets[0])}: {', '.join(proxies)} "
                  f"({n_proxy} threads); CPU {cpus(sets[1])}: {', '.join(rest)} "
                  f"({n_rest} threads)"
                  f"{'' if NICE is None else f'; every bench thread at nice {NICE}'}", flush=True)

    # ----- the machine's other work -----

    def bench_pids(self):
        pids = [n.pid for n in self.fleet.nodes]
        for dv in self.dovecots.values():
            pids += dv.pids()
        return pids

    def other_load(self, seconds=0.5):
        """% of one CPU the machine spent on work not the bench's, over
        `seconds` with the bench idle."""
        def snap():
            text = Path("/proc/stat").read_text()
            for p in self.bench_pids():
                try:
                    text += Path(f"/proc/{p}/stat").read_text()
                except FileNotFoundError:
                    pass
            path = self.work / "cpu.idle"
            path.write_text(text)
            return read_stats(path)
        a = snap()
        time.sleep(seconds)
        b = snap()
        busy = sum(cpu_busy(b, c) - cpu_busy(a, c) for c in self.all_cpus)
        ours = group_cpu(a, b, [k for k in a if isinstance(k, int)])
        return 100 * max(0.0, busy - ours) / seconds

    def wait_quiet(self):
        """Before a measured run: wait up to BENCH_QUIET_WAIT s for the rest
        of the machine to use less than BENCH_QUIET_OTHER % of a CPU (the
        machine is shared); a run that starts busy anyway is reported so."""
        deadline = time.monotonic() + QUIET_WAIT
        while True:
            other = self.other_load()
            if other < QUIET_OTHER or time.monotonic() >= deadline:
                return other

    # ----- throughput -----

    def load_run(self, kind, mix, placement):
        self.wait_quiet()
        self.place(placement)
        addr = self.addr[kind]
        pids = {"backend": [self.backend.pid], "petrel": [self.proxy.pid],
                "fleet": [n.pid for n in self.fleet.nodes]}
        for name, dv in self.dovecots.items():
            pids[name] = dv.pids()
        every = sorted({p for ps in pids.values() for p in ps})
        # /proc/stat first: the per-CPU busy time of the window, to tell the
        # bench's own use of each CPU from the other work on the machine.
        # The backend's threads' status last: their voluntary context
        # switches are the times they went to sleep waiting for input (one
        # wake-up each).
        stats = ("/proc/uptime /proc/stat " + " ".join(f"/proc/{p}/stat" for p in every)
                 + f" /proc/{self.backend.pid}/task/*/status")
        t0, t1 = self.work / "cpu.start", self.work / "cpu.stop"
        env = dict(os.environ, IMAP_BENCH_MIX=mix,
                   IMAP_BENCH_HOOK_START=f"cat {stats} > {t0} 2>/dev/null || true",
                   IMAP_BENCH_HOOK_STOP=f"cat {stats} > {t1} 2>/dev/null || true")
        out = run([self.bench, "load", addr, self.load_file, str(MESSAGES), str(DURATION),
                   str(CLIENTS)], env=env)
        before, after = read_stats(t0), read_stats(t1)
        cmds = field(out, "commands")
        seconds = field(out, "seconds")
        if field(out, "errors"):
            self.failed = True
        m = re.search(r"client CPU ([0-9.]+) s .*?([0-9.]+) us per command", out)
        lat = re.search(r"^all \(mix\)\s+\d+\s+\d+\s+([0-9.]+)\s+([0-9.]+)", out, re.M)
        client_s = float(m.group(1)) if m else 0.0
        r = {"rate": field(out, "rate"), "commands": cmds,
             "backend_us": 1e6 * group_cpu(before, after, pids["backend"]) / cmds,
             "backend_wakeups": (after.get("sleeps", 0) - before.get("sleeps", 0)) / cmds,
             "client_us": float(m.group(2)) if m else None,
             "proxy_us": None,
             "p50_ms": float(lat.group(1)) if lat else None,
             "p99_ms": float(lat.group(2)) if lat else None}
        if kind in ("petrel", "dovecot"):
            r["proxy_us"] = 1e6 * group_cpu(before, after, pids[kind]) / cmds
        # Busy share of each CPU in the window, and how much of it was not
        # the bench (its petreld and dovecot processes, the load generator).
        busy = {cpu: cpu_busy(after, cpu) - cpu_busy(before, cpu)
                for cpu in sorted(self.all_cpus)}
        ours = sum(group_cpu(before, after, ps) for name, ps in pids.items()
                   if name in ("fleet",) or name in self.dovecots) + client_s
        wall = after.get("uptime", 0) - before.get("uptime", 0) or seconds
        r["busy"] = {cpu: 100 * b / wall for cpu, b in busy.items()}
        r["other"] = 100 * max(0.0, sum(busy.values()) - ours) / wall
        print(f"  load {kind:8} {addr:17} {r['rate']:9,.0f} commands/s  p50 "
              f"{fmt_ms(r['p50_ms'])} p99 {fmt_ms(r['p99_ms'])}  CPU per command: proxy "
              f"{fmt_us(r['proxy_us'])} us, backend {r['backend_us']:.1f} us "
              f"({r['backend_wakeups']:.2f} wake-ups), load generator "
              f"{fmt_us(r['client_us'])} us; busy "
              + ", ".join(f"cpu{c} {b:.0f} %" for c, b in r["busy"].items())
              + f", not the bench {r['other']:.0f} % of a CPU", flush=True)
        return r

    def throughput(self, placement):
        kinds = ["direct", "petrel"] + (["dovecot"] if "dovecot" in self.dovecots else [])
        # ABC CBA ABC ...: a drift of the machine's other load over the
        # rounds touches every target alike.
        order = [k for i in range(ROUNDS) for k in (kinds if i % 2 == 0 else kinds[::-1])]
        out = {}
        for name, mix in (("mix", MIX), ("bulk", BULK_MIX)):
            print(f" {name} ({mix}), {DURATION} s per run, {CLIENTS} clients", flush=True)
            runs = {k: [] for k in kinds}
            for kind in order:
                runs[kind].append(self.load_run(kind, mix, placement))
            out[name] = {k: mean_runs(rs) for k, rs in runs.items()}
        return out

    # ----- logins -----

    def warm(self, kind):
        host, prt = self.addr[kind].rsplit(":", 1)
        for u, pw in self.creds:
            c = LoginConn((host, int(prt)), (u, pw))
            c.sock.setblocking(True)
            c.sock.settimeout(10)
            while True:
                v = c.feed(c.sock.recv(65536))
                if v:
                    break
            c.sock.close()
            if v != "done":
                sys.exit(f"warm-up login of {u} at {self.addr[kind]}: {v}")

    def logins(self, placement):
        out = {}
        kinds = ["direct", "petrel"] + [k for k in ("dovecot", "dovecot-plain")
                                        if k in self.dovecots]
        for kind in kinds:
            other = self.wait_quiet()
            self.place(placement)
            host, prt = self.addr[kind].rsplit(":", 1)
            if kind == "petrel":
                cpu = lambda: cpu_placement.cpu_seconds(self.proxy.pid)  # noqa: E731
            elif kind in self.dovecots:
                dv = self.dovecots[kind]
                cpu = lambda: cpu_placement.tree_cpu_seconds(dv.proc.pid)  # noqa: E731
            else:
                cpu = lambda: 0.0  # noqa: E731
            c0 = cpu()
            out_text = subprocess.run(
                [self.bench, "logins", self.addr[kind], self.users_file, str(LOGIN_SECONDS),
                 str(LOGIN_CONCURRENCY)], capture_output=True, text=True, timeout=120)
            text = out_text.stdout + out_text.stderr
            done, errors = int(field(text, "logins")), int(field(text, "errors"))
            rate = field(text, "rate")
            cores = field(text, "client_cpu_s") / LOGIN_SECONDS
            first = "" if out_text.returncode == 0 else text.strip().splitlines()[-1][:200]
            us = 1e6 * (cpu() - c0) / max(done, 1) if kind != "direct" else None
            out[kind] = (rate, us)
            extra = f", proxy CPU {us:.0f} us per login" if us is not None else ""
            print(f"  logins {kind:13} {self.addr[kind]:17} {rate:7,.0f}/s ({done} in "
                  f"{LOGIN_SECONDS} s, {errors} errors{extra}; the client used {cores:.2f} "
                  f"cores; other work before: {other:.0f} % of a CPU)"
                  f"{' first error: ' + first if first else ''}", flush=True)
            self.failed = self.failed or errors > 0
        return out

    # ----- the run -----

    def start_dovecots(self):
        if not WITH_DOVECOT:
            print("dovecot: left out (BENCH_DOVECOT=0)")
            return
        if not dovecot_available():
            print("dovecot: not installed, left out")
            return
        target = (self.backend.ip, self.fleet.port["imap"])
        hashed = [line for line in self.fleet.passwd.read_text().splitlines(True)]
        plain = [f"{u}:{{PLAIN}}{pw}\n" for u, pw in self.creds]
        for name, ip, lines in (("dovecot", DOVECOT_IP, hashed),
                                ("dovecot-plain", DOVECOT_PLAIN_IP, plain)):
            dv = DovecotProxy(self.work / name, ip, port_free(ip, self.fleet.port["imap"]),
                              target, lines, login_procs=DOVECOT_LOGIN_PROCS, name=name)
            self.dovecots[name] = dv
            dv.start()
            self.addr[name] = dv.addr
        v = subprocess.run(["dovecot", "--version"], capture_output=True, text=True).stdout
        print(f"dovecot {v.split()[0] if v else '?'}: proxies on {self.addr['dovecot']} "
              f"(SHA512-CRYPT passdb) and {self.addr['dovecot-plain']} ({{PLAIN}} passdb) to "
              f"{target[0]}:{target[1]}, {DOVECOT_LOGIN_PROCS} imap-login process(es) each "
              f"(high-performance mode)", flush=True)

    def main(self):
        os.environ["PETREL_BUILD"] = str(self.build)
        sys.path.insert(0, str(ROOT / "tests" / "e2e"))
        from fleet import Fleet  # after PETREL_BUILD: conftest reads it at import

        placements = {"all": ["shared", "split", "backend"], "both": ["shared", "split"],
                      "shared": ["shared"], "split": ["split"],
                      "backend": ["backend"]}.get(PLACEMENT)
        if placements is None:
            sys.exit(f"BENCH_PLACEMENT={PLACEMENT}: want shared, split, backend, both or all")
        if cpu_placement.split_sets(self.all_cpus) is None:
            print("only one CPU available: the split and backend placements are left out")
            placements = [p for p in placements if p == "shared"]
        unlimited = {"max_connections": 1000000, "max_connections_per_user": 0}
        self.fleet = Fleet(self.work / "fleet", users=USERS, hashed=True, gate=False,
                           backend_extra={"imap": unlimited, "mail": {"fsync": "never"}},
                           login_extra={"imap": unlimited})
        t0 = time.monotonic()
        self.fleet.start()
        try:
            return self.measure(placements, t0)
        finally:
            for dv in self.dovecots.values():
                dv.stop()
            self.fleet.stop(check=False)

    def measure(self, placements, t0):
        fleet = self.fleet
        self.backend, self.proxy = fleet.backends[0], fleet.proxies[0]
        port = fleet.port["imap"]
        self.addr = {"direct": f"{self.backend.ip}:{port}", "petrel": f"{self.proxy.ip}:{port}"}
        mine = [u for u in fleet.users if fleet.map(u) == self.backend.ip]
        self.creds = [(u, fleet.password(u)) for u in mine]
        users_file = self.users_file = self.work / "users"
        users_file.write_text("".join(f"{u}\t{p}\n" for u, p in self.creds))
        self.load_file = self.work / "load-users"
        self.load_file.write_text("".join(f"{u}\t{p}\n" for u, p in self.creds[:CLIENTS]))
        self.start_dovecots()
        threads = len(cpu_placement.tasks(self.proxy.pid))
        print(f"fleet up in {time.monotonic() - t0:.1f} s ({len(fleet.nodes)} petreld "
              f"processes, build {self.build}; {os.cpu_count()} CPUs, load average "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}); {len(mine)} of "
              f"{len(fleet.users)} users on {self.backend.name} ({self.backend.ip}); Petrel "
              f"proxy {self.proxy.name} ({self.proxy.ip}, {threads} thread(s))", flush=True)

        run([self.bench, "setup", self.addr["direct"], self.load_file, str(MESSAGES), "mixed"])
        for kind in self.addr:  # every user once: the caches hold them all
            self.warm(kind)

        results = {}
        for placement in placements:
            self.place(placement, verbose=True)
            load = " ".join(f"{x:.2f}" for x in os.getloadavg())
            print(f"== placement {placement} (load average {load})", flush=True)
            results[placement] = (self.throughput(placement), self.logins(placement))

        # ----- idle proxied session memory -----
        self.place("shared")
        out = run([self.bench, "idle", self.addr["petrel"], users_file, str(IDLE_SESSIONS),
                   str(self.proxy.pid)])
        for line in out.splitlines():
            if line.startswith("phase "):
                print("idle " + line)
        per = field(out, "rss_per_session_kib")
        if field(out, "errors"):
            self.failed = True

        self.summary(results, per)
        if self.dovecots:
            errs = [e for dv in self.dovecots.values() for e in dv.errors()]
            if errs:
                print("dovecot logged errors:\n  " + "\n  ".join(errs[:10]))
                self.failed = True
        print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return 1 if self.failed else 0

    def summary(self, results, idle_kib):
        print()
        print(f"Summary. Throughput: mean of the {ROUNDS} runs of each; ratio to direct in the same "
              "placement; CPU in us per command (proxy: Petrel's process or Dovecot's whole "
              "tree); 'wake': the backend's wake-ups (sleeps waiting for input) per command; "
              "p50 latency per command; 'other': CPU time on the machine that was not the "
              "bench's, in % of one CPU (other work on a shared machine skews a run); "
              "'CPU bound': the rate the measured CPU per command allows on the placement's "
              "CPUs, and its ratio to direct's (an estimate that other work skews less).")
        hdr = (f"{'placement':9} {'load':4} {'target':13} {'commands/s':>10} {'ratio':>6} "
               f"{'proxy':>6} {'backend':>7} {'wake':>5} {'loadgen':>7} {'p50 ms':>6} {'other':>5}   "
               f"{'CPU bound':>9} {'ratio':>6}")
        print(hdr)
        print("-" * len(hdr))
        for placement, (tp, _) in results.items():
            for name, kinds in tp.items():
                d = kinds["direct"]["rate"]
                dbound = cpu_bound(placement, kinds["direct"], len(self.all_cpus))
                for kind, r in kinds.items():
                    bound = cpu_bound(placement, r, len(self.all_cpus))
                    print(f"{placement:9} {name:4} {LABEL[kind]:13} {r['rate']:10,.0f} "
                          f"{100 * r['rate'] / d:5.1f}% {fmt_us(r['proxy_us']):>6} "
                          f"{r['backend_us']:7.1f} {r['backend_wakeups']:5.2f} "
                          f"{fmt_us(r['client_us']):>7} "
                          f"{(r['p50_ms'] or 0):6.2f} {r['other']:4.0f}%"
                          f"{' *' if r['other'] > QUIET_OTHER else '  '} {bound:9,.0f} "
                          f"{100 * bound / dbound:5.1f}%")
        print(f"* other work above {QUIET_OTHER:.0f} % of a CPU during the runs: the machine "
              f"was busy, the row is skewed")
        print()
        print(f"{'placement':9} {'logins through':31} {'logins/s':>9} {'proxy CPU per login':>20}")
        for placement, (_, lg) in results.items():
            for kind, (rate, us) in lg.items():
                print(f"{placement:9} {LABEL[kind]:31} {rate:9,.0f} "
                      f"{(f'{us:.0f} us' if us is not None else '-'):>20}")
        print()
        print("targets (issue 26):")
        for placement, (tp, lg) in results.items():
            for name, kinds in tp.items():
                d = kinds["direct"]["rate"]
                line = f"  {placement:6} {name:4} petrel {100 * kinds['petrel']['rate'] / d:5.1f} %"
                if "dovecot" in kinds:
                    line += f"  (dovecot {100 * kinds['dovecot']['rate'] / d:5.1f} %)"
                print(line + " of direct  (target >= 90 %)")
            print(f"  {placement:6} logins petrel {lg['petrel'][0]:,.0f}/s  (target >= 2,000/s)")
        print(f"  idle   {idle_kib:.1f} KiB per proxied session in Petrel's proxy over "
              f"{IDLE_SESSIONS} sessions (target <= 16 KiB)")


def _terminate(signum, frame):
    raise SystemExit(128 + signum)  # so the finally clauses stop every daemon


def main():
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _terminate)
    build, work = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    return Bench(build, work).main()


if __name__ == "__main__":
    sys.exit(main())
