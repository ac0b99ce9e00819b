"""End-to-end harness: real petreld processes on loopback, real clients.

Every test gets a `petreld` factory. Each call picks free loopback ports,
writes a YAML configuration into the test's tmp dir, starts
`$PETREL_BUILD/petreld -c <file>` (default build dir `build-asan`, falling
back to `build`), captures stderr to a file and waits until /healthz answers.
At teardown every daemon still running gets SIGTERM and must exit 0 with no
sanitizer report on stderr.

Only the standard library is used (http.client, ssl, socket, subprocess).
"""

import copy
import http.client
import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SANITIZER_MARKERS = ("AddressSanitizer", "runtime error:", "LeakSanitizer")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long-running test (still part of the default run)")


def build_dir():
    env = os.environ.get("PETREL_BUILD")
    if env:
        path = Path(env)
        return path if path.is_absolute() else ROOT / path
    for name in ("build-asan", "build"):
        if (ROOT / name / "petreld").exists():
            return ROOT / name
    return ROOT / "build-asan"


BUILD = build_dir()
PETRELD = BUILD / "petreld"
PETRELCTL = BUILD / "petrelctl"


def is_root():
    return os.geteuid() == 0


_HANDED_OUT_PORTS = set()


def free_port():
    """A loopback TCP port that nothing listens on right now and that this
    test process has not handed out before: two ports picked for one daemon
    (say IMAP and POP3) must differ even though each probe socket is closed
    before the next is bound, and the kernel may give the same port twice."""
    for _ in range(1000):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT_PORTS:
            _HANDED_OUT_PORTS.add(port)
            return port
    raise AssertionError("no unused loopback port left")


def base_env(extra=None):
    """The environment for processes under test: no stray Petrel settings,
    sanitizer options that make any report fatal."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("BACKEND_API_TOKEN", "LOG_LEVEL", "PETREL_COMPONENT", "PETREL_CONFIG",
                        "PETREL_BACKEND_URL", "PETREL_ADMIN_URL", "PETREL_ADMIN_TOKEN",
                        "DIRECTOR_API_TOKEN")}
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=1")
    env.setdefault("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1")
    if extra:
        env.update(extra)
    return env


def sanitizer_findings(text):
    return [m for m in SANITIZER_MARKERS if m in text]


# ---------- YAML writing (block mappings; lists in flow style) ----------

def _scalar(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if v is None:
        return "~"
    return json.dumps(str(v))


def to_yaml(obj, indent=0):
    pad = "  " * indent
    lines = []
    for key, value in obj.items():
        if isinstance(value, dict) and value:
            lines.append(f"{pad}{key}:")
            lines.append(to_yaml(value, indent + 1))
        elif isinstance(value, (dict, list)):
            lines.append(f"{pad}{key}: {json.dumps(value)}")
        else:
            lines.append(f"{pad}{key}: {_scalar(value)}")
    return "\n".join(lines)


def merge(base, extra):
    out = copy.deepcopy(base)
    for key, value in (extra or {}).items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# ---------- HTTP helpers ----------

class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers  # dict with lower-case names
        self.body = body

    def json(self):
        return json.loads(self.body.decode("utf-8"))

    def __repr__(self):
        return f"<Response {self.status} {self.body[:200]!r}>"


def http_request(addr, method, path, body=None, headers=None, token=None, timeout=10,
                 context=None):
    """One request on a fresh connection; `addr` is "127.0.0.1:PORT"."""
    host, port = addr.rsplit(":", 1)
    if context is not None:
        conn = http.client.HTTPSConnection(host, int(port), timeout=timeout, context=context)
    else:
        conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    hdrs = dict(headers or {})
    if token is not None:
        hdrs["Authorization"] = f"Bearer {token}"
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
        hdrs.setdefault("Content-Type", "application/json")
    try:
        conn.request(method, path, body=body, headers=hdrs)
        resp = conn.getresponse()
        data = resp.read()
        return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
    finally:
        conn.close()


def read_response(f):
    """Reads one HTTP/1.1 response from a buffered binary file (for
    pipelining and raw-socket tests)."""
    line = f.readline()
    if not line:
        raise ConnectionError("connection closed before a response")
    parts = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
    status = int(parts[1])
    headers = {}
    while True:
        line = f.readline()
        if not line:
            raise ConnectionError("connection closed inside the response head")
        if line in (b"\r\n", b"\n"):
            break
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        body = f.read(int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while True:
            size = int(f.readline().split(b";")[0], 16)
            if size == 0:
                f.readline()
                break
            body += f.read(size)
            f.readline()
    else:
        body = f.read()
    return Response(status, headers, body)


def wait_for(predicate, timeout=10.0, interval=0.05, what="condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except (OSError, http.client.HTTPException) as e:
            last = e
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def wait_steady(read, repeats, timeout, what, interval=0.1):
    """Waits until read() has given the same value `repeats` more times in a
    row (polled every `interval`), and returns that value."""
    last = [None, 0]

    def steady():
        now = read()
        last[1] = last[1] + 1 if now == last[0] else 0
        last[0] = now
        return last[1] >= repeats
    wait_for(steady, timeout=timeout, interval=interval, what=what)
    return last[0]


class SilentServer:
    """Accepts TCP connections and never says a word (a TLS handshake to it
    never completes)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.addr = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self.conns = []
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        self.sock.settimeout(0.1)
        while not self.stop:
            try:
                c, _ = self.sock.accept()
                self.conns.append(c)
            except OSError:
                pass

    def close(self):
        self.stop = True
        self.thread.join()
        for c in self.conns:
            c.close()
        self.sock.close()


@pytest.fixture
def silent_server():
    """A TCP port that accepts and then never says a word."""
    s = SilentServer()
    yield s
    s.close()


# ---------- the daemon ----------

class Daemon:
    def __init__(self, workdir, config, env=None, name="petreld", args=()):
        self.workdir = Path(workdir)
        self.name = name
        self.config = config
        self.env = base_env(env)
        self.args = list(args)
        self.config_path = self.workdir / f"{name}.yaml"
        self.stderr_path = self.workdir / f"{name}.stderr"
        self.proc = None
        self.returncode = None
        self.preexec = None  # e.g. a resource limit for the child (set before start)
        self.write_config()

    # addresses
    @property
    def telemetry(self):
        return self.config["telemetry"]["listen"]

    @property
    def backend(self):
        return self.config["backend_api"]["listen"]

    def write_config(self, config=None):
        if config is not None:
            self.config = config
        self.config_path.write_text(to_yaml(self.config) + "\n")

    def start(self, wait=True, timeout=20.0):
        # A daemon started again after stop() is running again: the fixture
        # must stop it (and check its exit) at teardown.
        self.returncode = None
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            [str(PETRELD), "-c", str(self.config_path)] + self.args,
            stdin=subprocess.DEVNULL, stdout=self._stderr, stderr=self._stderr,
            env=self.env, cwd=self.workdir, preexec_fn=self.preexec)
        if wait:
            self.wait_healthy(timeout)
        return self

    def wait_healthy(self, timeout=20.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"petreld exited with {self.proc.returncode} before answering /healthz:\n"
                    + self.stderr())
            try:
                if http_request(self.telemetry, "GET", "/healthz", timeout=1).status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError("petreld did not answer /healthz in time:\n" + self.stderr())

    @property
    def pid(self):
        return self.proc.pid

    def stderr(self):
        try:
            return self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait(self, timeout=20.0):
        try:
            self.returncode = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.returncode = self.proc.wait()
            raise AssertionError(f"petreld did not exit within {timeout}s:\n" + self.stderr())
        finally:
            if not self._stderr.closed:
                self._stderr.close()
        return self.returncode

    def stop(self, timeout=20.0):
        """SIGTERM, then the exit code must be 0 and stderr sanitizer-clean."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        rc = self.wait(timeout)
        self.assert_clean()
        assert rc == 0, f"petreld exited with {rc}:\n{self.stderr()}"
        return rc

    def assert_clean(self):
        text = self.stderr()
        found = sanitizer_findings(text)
        assert not found, f"sanitizer report ({', '.join(found)}) in petreld stderr:\n{text}"

    # convenience requests
    def get(self, server, path, **kw):
        return http_request(self._addr(server), "GET", path, **kw)

    def post(self, server, path, body=None, **kw):
        return http_request(self._addr(server), "POST", path, body=body, **kw)

    def _addr(self, server):
        return {"telemetry": self.telemetry, "backend": self.backend}.get(server, server)


def default_config():
    return {
        "allow_root": True,
        "log_level": "info",
        "shutdown_timeout": "5s",
        "telemetry": {"listen": f"127.0.0.1:{free_port()}"},
        "backend_api": {"listen": f"127.0.0.1:{free_port()}"},
    }


@pytest.fixture
def petreld(tmp_path):
    """Factory: petreld(config_overrides, env=..., wait=True) -> running Daemon."""
    started = []

    def start(overrides=None, env=None, wait=True, args=(), start_now=True):
        for attempt in range(3):
            cfg = merge(default_config(), overrides)
            d = Daemon(tmp_path, cfg, env=env, name=f"petreld{len(started)}", args=args)
            started.append(d)
            if not start_now:
                return d
            try:
                d.start(wait=wait)
                return d
            except AssertionError:
                # A port picked by free_port() may have been taken by another
                # process meanwhile: pick again (only for ports picked here).
                if (attempt == 2 or "cannot listen on" not in d.stderr()
                        or d.proc.poll() is None):
                    raise
                d.returncode = d.wait()
                d.assert_clean()
                started.remove(d)
        raise AssertionError("unreachable")

    yield start
    problems = []
    for d in started:
        if d.proc is None:
            continue
        try:
            if d.returncode is None:
                d.stop()
            else:
                d.assert_clean()
        except AssertionError as e:
            problems.append(str(e))
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


def run_petreld(args, env=None, cwd=None, timeout=30):
    """Runs petreld to completion (config checks, refused starts)."""
    proc = subprocess.run([str(PETRELD)] + list(args), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, env=base_env(env), cwd=cwd,
                          timeout=timeout)
    found = sanitizer_findings(proc.stderr)
    assert not found, f"sanitizer report in petreld stderr:\n{proc.stderr}"
    return proc


def run_petrelctl(args, env=None, timeout=30):
    proc = subprocess.run([str(PETRELCTL)] + list(args), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, env=base_env(env), timeout=timeout)
    found = sanitizer_findings(proc.stderr)
    assert not found, f"sanitizer report in petrelctl stderr:\n{proc.stderr}"
    return proc


@pytest.fixture(scope="session", autouse=True)
def _binaries_exist():
    missing = [str(p) for p in (PETRELD, PETRELCTL) if not p.exists()]
    if missing:
        pytest.exit(f"missing binaries {missing}: build first (PETREL_BUILD={BUILD})", 2)


# ---------- TLS material ----------

def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="session")
def pki(tmp_path_factory):
    """A throwaway CA, a server certificate for IP:127.0.0.1 and a client
    certificate, made with the openssl CLI."""
    d = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.pem", "-days", "2", "-subj", "/CN=petrel test CA", cwd=d)
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth"),
                      ("client", "extendedKeyUsage=clientAuth")):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
                 f"{name}.csr", "-subj", f"/CN=petrel test {name}", cwd=d)
        (d / f"{name}.ext").write_text(ext + "\n")
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile",
                 f"{name}.ext", cwd=d)
    return d
