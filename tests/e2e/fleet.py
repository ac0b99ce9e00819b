"""A director fleet on one machine, for the login-proxy tests
(tests/e2e/test_login_fleet.py) and bench/login-proxy.sh.

Every part is its own real petreld process, on its own loopback address
(Linux routes all of 127/8 to lo, so each address is a "host"):

    127.0.0.11  backend a   backend-api, auth, warden, imap, pop3, lmtp; mail root a/
    127.0.0.12  backend b   the same, mail root b/
    127.0.0.21  director a  director (ring peer of b)
    127.0.0.22  director b  director (ring peer of a)
    (no port)   monitor     monitor, probing both backends' IMAP, POP3 and LMTP,
                            reporting to director b
    127.0.0.41  auth node   auth + warden + backend-api: the proxies' auth
                            service and the warden their sessions register with
    127.0.0.42  auth gate   a TCP forwarder to the auth node that a test can
                            cut (AuthGate): the network between the proxies and
                            their auth service, the one fault no process kill
                            can time to the millisecond
    127.0.0.31  proxy a     login: IMAP and POP3 fronts (plain with STARTTLS/STLS
                            when a PKI is given, and implicit TLS on ports of
                            their own), the LMTP front; both directors
    127.0.0.32  proxy b     the same
    127.0.0.51  clients     the tests' clients connect from here

Every service of one kind uses the same port on every address, as a real
fleet does (the monitor probes `imap_port` on each backend's IP; the
directors register the backends with their IMAP port). Telemetry and the
backend-plane API of each process stay on 127.0.0.1 (ports of their own).

A note on addresses: on lo the kernel picks 127.0.0.1 as the source of a
connection to any 127.x address, so the backends see the proxies (and the
monitor) as 127.0.0.1. The backends therefore trust 127.0.0.1 and the
proxies' addresses (`login_trusted_networks`), and the tests' clients
connect from 127.0.0.51, outside that list: a backend that shows a session
from 127.0.0.51 learned it from the proxy's forwarding, and a client that
talks to a backend directly cannot forge its address.

Users: `USERS` users fleet000@example.com ... in one passwd-file (with
{PLAIN} passwords, or SHA512-CRYPT made by `petrelctl auth hash` with
`hashed=True`) shared by every auth service, as a fleet shares its LDAP;
`probe` for the monitor; DRIFT_USER, whose password on the proxies' auth
node differs from the backends' (a userdb out of step).

The bench uses the same fleet with `gate=False` (the proxies reach their
auth service directly) and overrides for the limits (`backend_extra`,
`login_extra`, merged into the `imap:`/`login:` sections).

    fleet = Fleet(workdir).start()     # or the module fixture `fleet`
    fleet.map("fleet007@example.com")  # -> "127.0.0.12" (GET .../map?user=)
    m = fleet.imap(fleet.proxies[0]); m.login(user, fleet.password(user))
    fleet.who(fleet.backends[1])       # sessions on backend b
    fleet.stop()
"""

import base64
import imaplib
import poplib
import re
import signal
import smtplib
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import (PETRELCTL, Daemon, base_env, free_port, http_request, merge,
                      run_petrelctl, wait_for)

TOKEN = "fleet-director-token"
RING_SECRET = "fleet-ring-secret-5b1e0c93a7d2"
CLIENT_IP = "127.0.0.51"
USERS = 200
PROBE_USER, PROBE_PASSWORD = "probe", "probe-pw"
DRIFT_USER, DRIFT_PASSWORD = "drift@example.com", "proxy-side"

IP = {
    "backend-a": "127.0.0.11",
    "backend-b": "127.0.0.12",
    "director-a": "127.0.0.21",
    "director-b": "127.0.0.22",
    "proxy-a": "127.0.0.31",
    "proxy-b": "127.0.0.32",
    "auth": "127.0.0.41",
    "gate": "127.0.0.42",
}

# The monitor's timing: a normal poll every 300 ms; 2 failed polls start 3
# rapid probes 50 ms apart, all 3 failing flushes: a dead backend is flushed
# about a second after it died.
MONITOR = {
    "interval": "300ms",
    "timeout": "1s",
    "rapid_interval": "50ms",
    "retry_count": 2,
    "rapid_rounds": 3,
    "rapid_fails_needed": 3,
    "reconnect_min": "50ms",
    "reconnect_max": "200ms",
}


def user_name(i):
    return f"fleet{i:03d}@example.com"


def password_of(user):
    return "pw-" + user.split("@")[0]


def port_free_on(ips):
    """A TCP port nothing listens on at any of these addresses."""
    for _ in range(100):
        port = free_port()
        ok = True
        for ip in ips:
            with socket.socket() as s:
                try:
                    s.bind((ip, port))
                except OSError:
                    ok = False
                    break
        if ok:
            return port
    raise AssertionError("no port free on every address")


def wait_accepting(ip, port, timeout=20.0, what="listener"):
    def up():
        with socket.create_connection((ip, port), timeout=0.5):
            return True
    wait_for(up, timeout=timeout, interval=0.02, what=f"{what} on {ip}:{port}")


def parse_metrics(text):
    """Prometheus text as {(name, frozenset(labels.items())): value}."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$', line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out[(m.group(1), frozenset(labels.items()))] = float(m.group(4))
    return out


# ---------- clients that connect from the clients' address ----------

class IMAP4From(imaplib.IMAP4):
    """imaplib.IMAP4 whose socket is bound to `source` before connecting."""

    def __init__(self, host, port, source=CLIENT_IP, timeout=10):
        self._source = source
        super().__init__(host, port, timeout=timeout)

    def _create_socket(self, timeout):
        return socket.create_connection((self.host, self.port), timeout,
                                        source_address=(self._source, 0))


class IMAP4SSLFrom(imaplib.IMAP4_SSL):
    def __init__(self, host, port, source=CLIENT_IP, **kw):
        self._source = source
        super().__init__(host, port, **kw)

    def _create_socket(self, timeout):
        sock = socket.create_connection((self.host, self.port), timeout,
                                        source_address=(self._source, 0))
        return self.ssl_context.wrap_socket(sock, server_hostname=self.host)


class POP3From(poplib.POP3):
    def __init__(self, host, port, source=CLIENT_IP, timeout=10):
        self._source = source
        super().__init__(host, port, timeout=timeout)

    def _create_socket(self, timeout):
        return socket.create_connection((self.host, self.port), timeout,
                                        source_address=(self._source, 0))


# imaplib has no ID command of its own.
imaplib.Commands.setdefault("ID", ("NONAUTH", "AUTH", "SELECTED"))


# ---------- the auth gate ----------

class AuthGate:
    """A TCP forwarder from `listen` to `upstream` that can be cut: down()
    resets every forwarded connection and closes the listener (a connect is
    refused, as to a host whose service died); up() listens again on the
    same port. Bytes are forwarded unchanged."""

    def __init__(self, listen, upstream):
        self.listen = listen
        self.upstream = upstream
        self.lock = threading.Lock()
        self.conns = set()
        self.sock = None
        self.accepted = 0
        self.refused_window = []  # (t_down, t_up) monotonic, for reports
        self._up()

    @property
    def addr(self):
        return f"{self.listen[0]}:{self.listen[1]}"

    def _up(self):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(self.listen)
        s.listen(128)
        with self.lock:
            self.sock = s
        threading.Thread(target=self._accept, args=(s,), daemon=True).start()

    def _accept(self, lsock):
        while True:
            try:
                c, _ = lsock.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(self.upstream, timeout=5)
                u.settimeout(None)
            except OSError:
                self._reset(c)
                continue
            with self.lock:
                if self.sock is not lsock:  # went down meanwhile
                    self._reset(c)
                    self._reset(u)
                    return
                self.conns.add(c)
                self.conns.add(u)
                self.accepted += 1
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    @staticmethod
    def _reset(s):
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        except OSError:
            pass
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()

    def down(self):
        with self.lock:
            s, self.sock = self.sock, None
            conns, self.conns = self.conns, set()
        if s is not None:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        for c in conns:
            self._reset(c)

    def up(self):
        with self.lock:
            if self.sock is not None:
                return
        self._up()

    def outage(self, seconds):
        """Down now, up again after `seconds` (a timer thread); returns the
        timer (join it to know the gate is up)."""
        self.down()
        t0 = time.monotonic()
        timer = threading.Timer(seconds, lambda: (self.up(),
                                                  self.refused_window.append(
                                                      (t0, time.monotonic()))))
        timer.start()
        return timer

    def close(self):
        self.down()


# ---------- nodes ----------

class Node:
    """One petreld of the fleet: its Daemon, its service address and the
    ports of its listeners."""

    def __init__(self, name, ip, daemon):
        self.name = name
        self.ip = ip
        self.d = daemon
        self.restarts = 0
        self.killed = False

    @property
    def pid(self):
        return self.d.pid

    def running(self):
        return self.d.proc is not None and self.d.proc.poll() is None

    def metrics(self):
        r = http_request(self.d.telemetry, "GET", "/metrics", timeout=10)
        assert r.status == 200, r
        return parse_metrics(r.body.decode())

    def metric(self, name, **labels):
        return self.metrics().get((name, frozenset(labels.items())), 0.0)

    def metric_sum(self, name, **labels):
        """The sum of every series of `name` whose labels include `labels`."""
        want = set(labels.items())
        return sum(v for (n, ls), v in self.metrics().items() if n == name and want <= ls)

    def stderr(self):
        return self.d.stderr()

    def kill(self, sig=signal.SIGKILL):
        """Kills the process (SIGKILL: no clean-up, as a crash or a lost host)."""
        self.d.proc.send_signal(sig)
        self.d.wait()
        self.d.assert_clean()
        self.killed = True

    def restart(self, wait=True):
        """Starts the process again with the same configuration; the earlier
        stderr is kept in its own file."""
        self.restarts += 1
        self.d.stderr_path = self.d.workdir / f"{self.d.name}.{self.restarts}.stderr"
        self.killed = False
        self.d.start(wait=wait)


class Fleet:
    """The fleet described in the module docstring. `proxies=False` starts
    everything but the login proxies (the part that runs on a tree without
    the login component)."""

    def __init__(self, workdir, users=USERS, proxies=True, hashed=False, log_level="info",
                 login_extra=None, backend_extra=None, pki=None, gate=True):
        self.workdir = Path(workdir)
        self.pki = Path(pki) if pki else None
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.users = [user_name(i) for i in range(users)]
        self.with_proxies = proxies
        self.log_level = log_level
        self.login_extra = login_extra or {}
        self.backend_extra = backend_extra or {}
        self.use_gate = gate
        self.nodes = []
        self.gate = None
        # One port per service kind, free on every address that uses it.
        every = list(IP.values())
        self.port = {k: port_free_on(every) for k in
                     ("imap", "pop3", "lmtp", "auth", "warden", "ring", "api", "imaps",
                      "pop3s")}
        self.secret_file = self.workdir / "ring.secret"
        self.secret_file.write_text(RING_SECRET + "\n")
        self.passwd = self.workdir / "passwd"
        # The proxies' auth service has a passwd-file of its own: the same
        # users, plus DRIFT_USER whose password differs from the backends'
        # (a userdb out of step: the proxy accepts, the backend says NO).
        self.proxy_passwd = self.workdir / "passwd-proxies"
        self._write_passwd(hashed)
        self.env = {"DIRECTOR_API_TOKEN": TOKEN}

    # ----- configuration -----

    def _write_passwd(self, hashed):
        lines = []
        for u in self.users + [PROBE_USER]:
            pw = PROBE_PASSWORD if u == PROBE_USER else password_of(u)
            if hashed:  # made by petrelctl, as an operator makes them
                r = subprocess.run([str(PETRELCTL), "auth", "hash", "--scheme", "SHA512-CRYPT",
                                    "--password-stdin"], input=pw + "\n", text=True,
                                   capture_output=True, env=base_env(), timeout=30)
                assert r.returncode == 0, r.stderr
                stored = r.stdout.strip()
            else:
                stored = "{PLAIN}" + pw
            lines.append(f"{u}:{stored}:1001:1001\n")
        self.passwd.write_text("".join(lines) + f"{DRIFT_USER}:{{PLAIN}}backend-side:1001:1001\n")
        self.proxy_passwd.write_text("".join(lines)
                                     + f"{DRIFT_USER}:{{PLAIN}}{DRIFT_PASSWORD}:1001:1001\n")

    def _base(self, ip):
        return {
            "allow_root": True,
            "log_level": self.log_level,
            "shutdown_timeout": "5s",
            "telemetry": {"listen": f"127.0.0.1:{free_port()}"},
            "backend_api": {"listen": f"127.0.0.1:{free_port()}"},
        }

    def trusted_networks(self):
        return ["127.0.0.1/32", IP["proxy-a"] + "/32", IP["proxy-b"] + "/32"]

    def backend_config(self, name):
        ip = IP[name]
        p = self.port
        auth, warden = f"{ip}:{p['auth']}", f"{ip}:{p['warden']}"
        login = {"auth_addr": auth, "warden_addr": warden,
                 "login_trusted_networks": self.trusted_networks()}
        cfg = self._base(ip)
        cfg.update({
            "components": ["backend-api", "auth", "warden", "imap", "pop3", "lmtp"],
            "mail": {"home": str(self.workdir / name / "mail" / "%u"), "fsync": "never"},
            "auth": {"listen": [auth], "failure_delay": "0",
                     "passdb": {"driver": "passwd-file", "path": str(self.passwd)}},
            "warden_service": {"listen": [warden]},
            "imap": {"listen": [f"{ip}:{p['imap']}"], **login},
            "pop3": {"listen": [f"{ip}:{p['pop3']}"], **login},
            "lmtp": {"listen": [f"{ip}:{p['lmtp']}"], "auth_addr": auth,
                     "hostname": f"{name}.fleet.test",
                     "login_trusted_networks": self.trusted_networks()},
        })
        return merge(cfg, self.backend_extra)

    def director_config(self, name):
        ip = IP[name]
        p = self.port
        peers = [f"{IP[o]}:{p['ring']}" for o in ("director-a", "director-b") if o != name]
        cfg = self._base(ip)
        cfg.update({
            "components": ["director"],
            "director": {
                "api": {"listen": f"{ip}:{p['api']}"},
                "ring": {"listen": f"{ip}:{p['ring']}", "secret_file": str(self.secret_file),
                         "reconnect_min": "50ms", "reconnect_max": "300ms",
                         "peer_timeout": "1s", "ping_interval": "200ms"},
                "peers": peers,
                "kill_timeout": "1s",
                "backends": [{"ip": IP[b], "port": p["imap"]} for b in ("backend-a", "backend-b")],
            },
        })
        return cfg

    def monitor_config(self):
        path = self.workdir / "monitor.yaml"
        settings = dict(MONITOR)
        settings.update({
            "director_addr": f"{IP['director-b']}:{self.port['ring']}",
            "director_secret_file": str(self.secret_file),
            "poll_imap": True, "imap_port": self.port["imap"], "imap_tls": False,
            "poll_pop3": True, "pop3_port": self.port["pop3"], "pop3_tls": False,
            "poll_lmtp": True, "lmtp_port": self.port["lmtp"],
        })
        lines = []
        for k, v in settings.items():
            if isinstance(v, bool):
                lines.append(f"{k}: {'true' if v else 'false'}")
            elif isinstance(v, int):
                lines.append(f"{k}: {v}")
            else:
                lines.append(f'{k}: "{v}"')
        lines += ["tags:", '  "":', f'    user: "{PROBE_USER}"', f'    password: "{PROBE_PASSWORD}"']
        path.write_text("\n".join(lines) + "\n")
        cfg = self._base("127.0.0.1")
        cfg.update({"components": ["monitor"], "monitor": {"config_file": str(path)}})
        return cfg

    def auth_config(self):
        ip = IP["auth"]
        cfg = self._base(ip)
        cfg.update({
            "components": ["backend-api", "auth", "warden"],
            "auth": {"listen": [f"{ip}:{self.port['auth']}"], "failure_delay": "0",
                     "passdb": {"driver": "passwd-file", "path": str(self.proxy_passwd)}},
            "warden_service": {"listen": [f"{ip}:{self.port['warden']}"]},
        })
        return cfg

    def proxy_config(self, name):
        """The login proxy, with the `login:` keys of the shared design."""
        ip = IP[name]
        p = self.port
        auth = self.gate.addr if self.gate else f"{IP['auth']}:{p['auth']}"
        warden = f"{IP['auth']}:{p['warden']}"
        cfg = self._base(ip)
        login = {
            "directors": [f"{IP[d]}:{p['ring']}" for d in ("director-a", "director-b")],
            "ring_secret_file": str(self.secret_file),
            "director_timeout": "1s",
            "transient_retries": 3,
            "backend_timeout": "5s",
            "imap": {"listen": [f"{ip}:{p['imap']}"], "auth_addr": auth, "warden_addr": warden},
            "pop3": {"listen": [f"{ip}:{p['pop3']}"], "auth_addr": auth, "warden_addr": warden,
                     "backend_port": p["pop3"]},
            "lmtp": {"listen": [f"{ip}:{p['lmtp']}"], "auth_addr": auth,
                     "backend_port": p["lmtp"]},
        }
        if self.pki:
            for front in ("imap", "pop3"):
                login[front]["tls_cert_file"] = str(self.pki / "server.pem")
                login[front]["tls_key_file"] = str(self.pki / "server.key")
                login[front]["listen_tls"] = [f"{ip}:{p[front + 's']}"]
        cfg.update({"components": ["login"], "login": merge(login, self.login_extra)})
        return cfg

    # ----- life cycle -----

    def _node(self, name, ip, cfg):
        d = self.workdir / name
        d.mkdir(exist_ok=True)
        node = Node(name, ip, Daemon(d, cfg, env=self.env, name=name))
        self.nodes.append(node)
        return node

    def start(self):
        try:
            self._start()
        except BaseException:
            self.stop(check=False)
            raise
        return self

    def _start(self):
        self.backends = [self._node(n, IP[n], self.backend_config(n))
                         for n in ("backend-a", "backend-b")]
        self.directors = [self._node(n, IP[n], self.director_config(n))
                          for n in ("director-a", "director-b")]
        self.auth = self._node("auth", IP["auth"], self.auth_config())
        first = self.backends + self.directors + [self.auth]
        for n in first:  # in parallel: each waits for /healthz below
            n.d.start(wait=False)
        for n in first:
            n.d.wait_healthy(30)
        self.monitor = self._node("monitor", "127.0.0.1", self.monitor_config())
        self.monitor.d.start(wait=False)
        if self.use_gate:
            self.gate = AuthGate((IP["gate"], self.port["auth"]),
                                 (IP["auth"], self.port["auth"]))
        self.proxies = []
        if self.with_proxies:
            self.proxies = [self._node(n, IP[n], self.proxy_config(n))
                            for n in ("proxy-a", "proxy-b")]
            for n in self.proxies:
                n.d.start(wait=False)
        self.monitor.d.wait_healthy(30)
        for n in self.proxies:
            n.d.wait_healthy(30)
        for b in self.backends:
            for kind in ("imap", "pop3", "lmtp"):
                wait_accepting(b.ip, self.port[kind], what=f"{b.name} {kind}")
        self.wait_ring()
        self.wait_backends_up()
        kinds = ("imap", "pop3", "lmtp") + (("imaps", "pop3s") if self.pki else ())
        for n in self.proxies:
            for kind in kinds:
                wait_accepting(n.ip, self.port[kind], what=f"{n.name} {kind}")

    def stop(self, check=True):
        """Stops every process still running (SIGTERM: exit 0, no sanitizer
        report) and the gate; with `check`, raises on the first problem after
        stopping them all."""
        problems = []
        for n in reversed(self.nodes):
            if n.d.proc is None:
                continue
            try:
                if n.d.proc.poll() is None:
                    n.d.stop()
                else:
                    if n.d.returncode is None:
                        n.d.wait()
                    n.d.assert_clean()
                    if not n.killed:
                        problems.append(f"{n.name} exited by itself with {n.d.returncode}:\n"
                                        + n.stderr()[-4000:])
            except AssertionError as e:
                problems.append(f"{n.name}: {e}")
        if self.gate:
            self.gate.close()
        if check and problems:
            raise AssertionError("\n\n".join(problems))

    # ----- the directors -----

    def director_api(self, director=None):
        return f"{(director or self.directors[-1]).ip}:{self.port['api']}"

    def dget(self, path, director=None):
        r = http_request(self.director_api(director), "GET", path, token=TOKEN, timeout=10)
        assert r.status == 200, (path, r)
        return r.json()

    def dpost(self, path, body=None, director=None):
        return http_request(self.director_api(director), "POST", path, body=body, token=TOKEN,
                            timeout=10)

    def map(self, user, director=None):
        """The backend ip the director names for `user` now (read-only)."""
        return self.dget(f"/api/director/map?user={user}", director)["backend"]

    def backend_states(self, director=None):
        return {b["ip"]: b["up"] for b in self.dget("/api/director/backends", director)["backends"]}

    def ring_connected(self):
        for d in self.directors:
            if not d.running():
                continue
            for m in self.dget("/api/director/ring", d)["members"]:
                if not m["self"] and m["link"] is not None and m["link"]["state"] != "connected":
                    return False
        return True

    def wait_ring(self, timeout=15):
        wait_for(self.ring_connected, timeout=timeout, what="the directors' ring connected")

    def monitor_states(self):
        out = {}
        for (name, labels), value in self.monitor.metrics().items():
            if name == "petrel_monitor_backend_state" and value == 1:
                d = dict(labels)
                out[d["ip"]] = d["state"]
        return out

    def wait_backends_up(self, timeout=20):
        want = {b.ip: "up" for b in self.backends}
        wait_for(lambda: self.monitor_states() == want, timeout=timeout,
                 what="the monitor seeing every backend up")
        for d in self.directors:
            if d.running():
                wait_for(lambda: all(self.backend_states(d).get(b.ip) for b in self.backends),
                         timeout=timeout, what=f"every backend up on {d.name}")

    def petrelctl(self, *args, director=None):
        """`petrelctl director ...` against a director's admin API."""
        return run_petrelctl(["director", *args], env={
            "PETREL_ADMIN_URL": f"http://{self.director_api(director)}",
            "PETREL_ADMIN_TOKEN": TOKEN})

    # ----- backends -----

    def backend_by_ip(self, ip):
        return next(b for b in self.backends if b.ip == ip)

    def who(self, node):
        """Sessions in a node's warden: [{user, ip, service, ...}]."""
        r = http_request(node.d.backend, "POST", "/api/backend/who", body={"group_by": "none"},
                         timeout=10)
        assert r.status == 200, r
        return r.json()["sessions"]

    def who_users(self, node, service=None):
        return sorted(s["user"] for s in self.who(node)
                      if service is None or s["service"] == service)

    def home(self, node, user):
        return self.workdir / node.name / "mail" / user

    def delivered(self, node, user):
        """Message files in a user's INBOX on a backend."""
        md = self.home(node, user) / "Maildir"
        return [f for sub in ("new", "cur") for f in (md / sub).glob("*") if f.is_file()]

    # ----- clients -----

    def password(self, user):
        return PROBE_PASSWORD if user == PROBE_USER else password_of(user)

    def imap(self, node, timeout=10):
        """An IMAP connection from the clients' address to a proxy or a
        backend (its IMAP port)."""
        return IMAP4From(node.ip, self.port["imap"], timeout=timeout)

    def imaps(self, node, timeout=10):
        """Implicit TLS to a proxy's IMAPS port (the test PKI's CA; the
        certificate names 127.0.0.1, so the name is not checked)."""
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.pem"))
        ctx.check_hostname = False
        return IMAP4SSLFrom(node.ip, self.port["imaps"], ssl_context=ctx, timeout=timeout)

    def pop3(self, node, timeout=10):
        return POP3From(node.ip, self.port["pop3"], timeout=timeout)

    def lmtp(self, node, timeout=10):
        return smtplib.LMTP(node.ip, self.port["lmtp"], timeout=timeout,
                            source_address=(CLIENT_IP, 0))

    def raw(self, node, kind="imap", timeout=10):
        return socket.create_connection((node.ip, self.port[kind]), timeout=timeout,
                                        source_address=(CLIENT_IP, 0))


def sasl_plain(user, password):
    return base64.b64encode(f"\0{user}\0{password}".encode()).decode()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, pki):  # noqa: F811 (pki is conftest's session fixture)
    """The whole fleet, started once per test module and stopped (cleanly,
    sanitizer-checked) after it. The proxies offer STARTTLS with the test
    PKI's server certificate."""
    f = Fleet(tmp_path_factory.mktemp("fleet"), pki=pki).start()
    yield f
    f.stop()

