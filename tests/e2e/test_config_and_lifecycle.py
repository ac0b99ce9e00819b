"""petreld as an operator meets it: configuration errors with file:line,
--check-config, environment overrides, refusing to start (busy port, root),
graceful SIGTERM, SIGHUP reload and dropping root privileges."""

import signal
import socket
import threading
import time

import pytest

from conftest import (default_config, http_request, is_root, merge, read_response, run_petreld,
                      to_yaml, wait_for)

needs_root = pytest.mark.skipif(not is_root(), reason="needs root (CI runs as root)")


def write(tmp_path, text, name="petrel.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


# ---------- configuration errors ----------

def test_unknown_top_level_key_names_file_and_line(tmp_path):
    path = write(tmp_path, "allow_root: true\n"
                           "log_level: info\n"
                           "\n"
                           "# a comment\n"
                           "colour: blue\n")
    proc = run_petreld(["-c", str(path)])
    assert proc.returncode == 2, proc.stderr
    assert f"{path}:5: colour: unknown key" in proc.stderr, proc.stderr


def test_unknown_nested_key_names_file_and_line(tmp_path):
    path = write(tmp_path, "allow_root: true\n"
                           "telemetry:\n"
                           "  listen: 127.0.0.1:0\n"
                           "backend_api:\n"
                           "  listen: 127.0.0.1:0\n"
                           "  allowed_nets: [127.0.0.0/8]\n"
                           "  max_body: 10\n")
    proc = run_petreld(["-c", str(path)])
    assert proc.returncode == 2, proc.stderr
    assert f"{path}:7: backend_api.max_body: unknown key" in proc.stderr, proc.stderr


@pytest.mark.parametrize("text, line, words", [
    ("log_level: loud\n", 1, "log_level"),
    ("allow_root: true\nshutdown_timeout: forever\n", 2, "shutdown_timeout"),
    ("allow_root: true\nbackend_api:\n  allowed_nets: [300.1.2.3/8]\n", 3, "allowed_nets"),
    ("allow_root: true\ntelemetry:\n  listen: nowhere\n", 3, "listen"),
    ("components: [backend-api, imap-teleporter]\n", 1, "imap-teleporter"),
])
def test_invalid_values_are_config_errors(tmp_path, text, line, words):
    path = write(tmp_path, text)
    proc = run_petreld(["-c", str(path)])
    assert proc.returncode == 2, proc.stderr
    assert f"{path}:{line}:" in proc.stderr, proc.stderr
    assert words in proc.stderr, proc.stderr


def test_missing_config_file(tmp_path):
    missing = tmp_path / "absent.yaml"
    proc = run_petreld(["-c", str(missing)])
    assert proc.returncode == 2, proc.stderr
    assert str(missing) in proc.stderr, proc.stderr


def test_broken_yaml_is_a_config_error(tmp_path):
    path = write(tmp_path, "telemetry:\n  listen: [unclosed\n")
    proc = run_petreld(["-c", str(path)])
    assert proc.returncode == 2, proc.stderr
    assert str(path) in proc.stderr, proc.stderr


def test_usage_error_exit_2():
    proc = run_petreld(["--no-such-option"])
    assert proc.returncode == 2
    assert "usage" in proc.stderr


def test_check_config_prints_effective_config(tmp_path):
    cfg = merge(default_config(), {"backend_api": {"allowed_nets": ["10.0.0.0/8"]}})
    path = write(tmp_path, to_yaml(cfg) + "\n")
    proc = run_petreld(["-c", str(path), "--check-config"])
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "log_level: info" in out
    assert cfg["telemetry"]["listen"] in out
    assert cfg["backend_api"]["listen"] in out
    assert '"10.0.0.0/8"' in out
    # Defaults are spelled out too.
    assert "max_body_bytes: 1048576" in out
    assert "readiness_deadline: 800ms" in out
    assert "configuration is valid" in proc.stderr
    # Nothing was started: the ports are still free.
    host, port = cfg["backend_api"]["listen"].rsplit(":", 1)
    with socket.socket() as s:
        s.bind((host, int(port)))


def test_log_level_env_overrides_config(tmp_path):
    path = write(tmp_path, to_yaml(default_config()) + "\n")
    proc = run_petreld(["-c", str(path), "--check-config"], env={"LOG_LEVEL": "debug"})
    assert proc.returncode == 0, proc.stderr
    assert "log_level: debug" in proc.stdout
    bad = run_petreld(["-c", str(path), "--check-config"], env={"LOG_LEVEL": "chatty"})
    assert bad.returncode == 2
    assert "LOG_LEVEL" in bad.stderr


def test_log_level_env_applies_at_run_time(petreld):
    d = petreld(env={"LOG_LEVEL": "warn"})
    assert d.get("telemetry", "/debug/loglevel").json()["level"] == "warn"


# ---------- refusing to start ----------

def test_port_in_use_is_fatal_and_named(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        addr = "127.0.0.1:%d" % busy.getsockname()[1]
        cfg = merge(default_config(), {"backend_api": {"listen": addr}})
        path = write(tmp_path, to_yaml(cfg) + "\n")
        proc = run_petreld(["-c", str(path)])
    assert proc.returncode != 0, proc.stderr
    assert f"cannot listen on {addr}" in proc.stderr, proc.stderr


@needs_root
def test_root_without_user_or_allow_root_refuses(tmp_path):
    cfg = merge(default_config(), {"allow_root": None})
    path = write(tmp_path, to_yaml(cfg) + "\n")
    proc = run_petreld(["-c", str(path)])
    assert proc.returncode != 0, proc.stderr
    assert "refusing to run as root" in proc.stderr, proc.stderr


@needs_root
def test_root_with_user_drops_privileges(petreld):
    d = petreld({"allow_root": None, "user": "nobody"})
    status = open(f"/proc/{d.pid}/status").read()
    uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
    gid_line = next(line for line in status.splitlines() if line.startswith("Gid:"))
    # real, effective, saved, filesystem
    assert uid_line.split()[1:] == ["65534"] * 4, uid_line
    assert "0" not in gid_line.split()[1:], gid_line
    groups = next(line for line in status.splitlines() if line.startswith("Groups:"))
    assert "0" not in groups.split()[1:], groups
    assert "dropped privileges" in d.stderr()
    # And it still serves.
    assert d.get("backend", "/api/backend/health").status == 200


@needs_root
def test_unknown_user_refuses(tmp_path):
    cfg = merge(default_config(), {"allow_root": None, "user": "no-such-user-petrel"})
    path = write(tmp_path, to_yaml(cfg) + "\n")
    proc = run_petreld(["-c", str(path)])
    assert proc.returncode != 0
    assert "no-such-user-petrel" in proc.stderr


# ---------- signals ----------

def test_sigterm_exits_zero_and_closes_keep_alive(petreld):
    d = petreld()
    host, port = d.backend.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10)
    with s:
        f = s.makefile("rb")
        s.sendall(b"GET /api/backend/health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(f).status == 200
        d.signal(signal.SIGTERM)
        # The idle keep-alive connection is closed by the server.
        assert f.read() == b""
    assert d.wait() == 0
    assert "stopping" in d.stderr() and "stopped" in d.stderr()


def slow_readyz_in_background(d):
    """Starts GET /readyz in a thread; returns (thread, result dict)."""
    result = {}

    def call():
        try:
            result["resp"] = d.get("telemetry", "/readyz", timeout=10)
        except Exception as e:  # noqa: BLE001 - the test reports it
            result["error"] = e

    t = threading.Thread(target=call)
    t.start()
    return t, result


def test_sigterm_lets_an_in_flight_request_finish(petreld, silent_server):
    # /readyz with a TLS check against a port that never handshakes takes the
    # whole 800 ms deadline: SIGTERM arrives while it is in flight.
    d = petreld({"telemetry": {"readiness_checks": [
        {"name": "slow", "tcp": silent_server.addr, "tls": True}]}})
    t, result = slow_readyz_in_background(d)
    time.sleep(0.3)
    d.signal(signal.SIGTERM)
    t.join(15)
    assert d.wait() == 0, d.stderr()
    assert "error" not in result, f"in-flight request was cut off: {result.get('error')!r}"
    r = result["resp"]
    assert r.status == 503, r
    body = r.json()
    assert "error" not in body, f"answered by the shutdown, not by the handler: {body}"
    assert body["ready"] is False and body["checks"][0]["name"] == "slow", body


def test_sigterm_refuses_new_connections(petreld):
    d = petreld()
    d.signal(signal.SIGTERM)
    assert d.wait() == 0
    with pytest.raises(OSError):
        http_request(d.backend, "GET", "/api/backend/health", timeout=2)


def test_sighup_reloads_log_level(petreld):
    d = petreld()
    assert d.get("telemetry", "/debug/loglevel").json()["level"] == "info"
    d.write_config(merge(d.config, {"log_level": "error"}))
    d.signal(signal.SIGHUP)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if d.get("telemetry", "/debug/loglevel").json()["level"] == "error":
            break
        time.sleep(0.05)
    assert d.get("telemetry", "/debug/loglevel").json()["level"] == "error"
    # A broken file on SIGHUP keeps the running settings.
    d.config_path.write_text("log_level: [\n")
    d.signal(signal.SIGHUP)
    time.sleep(0.3)
    assert d.proc.poll() is None, d.stderr()
    assert d.get("telemetry", "/debug/loglevel").json()["level"] == "error"
    assert "reload failed" in d.stderr()
    d.write_config()  # restore for a clean stop


def test_sighup_cancels_pending_ttl_revert(petreld):
    d = petreld()
    assert d.post("telemetry", "/debug/loglevel", body={"level": "debug", "ttl": "1s"}).status == 200
    d.write_config(merge(d.config, {"log_level": "warn"}))
    d.signal(signal.SIGHUP)
    time.sleep(1.5)
    # The file's level wins; the old TTL does not bring back "info".
    assert d.get("telemetry", "/debug/loglevel").json()["level"] == "warn"


def test_component_selection_leaves_backend_api_off(petreld):
    d = petreld({"components": []})
    with pytest.raises(OSError):
        http_request(d.backend, "GET", "/api/backend/health", timeout=2)
    assert d.get("telemetry", "/healthz").status == 200


def test_shutdown_timeout_cuts_a_slow_request_cleanly(petreld, silent_server):
    # shutdown_timeout 0: the in-flight /readyz is abandoned at once, and
    # nothing it held (probes, timers, TLS state) leaks (LeakSanitizer).
    d = petreld({"shutdown_timeout": "0s", "telemetry": {"readiness_checks": [
        {"name": "slow", "tcp": silent_server.addr, "tls": True}]}})
    t, result = slow_readyz_in_background(d)
    time.sleep(0.3)
    d.signal(signal.SIGTERM)
    t.join(15)
    assert d.wait() == 0, d.stderr()
    d.assert_clean()
    assert "shutdown timeout reached" in d.stderr()
    if "resp" in result:
        assert result["resp"].status == 503, result["resp"]


def test_standalone_example_is_valid(tmp_path):
    """The README's run command starts from examples/standalone.yaml: it must
    load as it is (TLS files are read at start-up, not by --check-config)."""
    from conftest import ROOT
    proc = run_petreld(["-c", str(ROOT / "examples" / "standalone.yaml"), "--check-config"],
                       cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    for component in ("auth", "imap", "backend-api"):
        assert f'  - "{component}"' in proc.stdout


def test_shutdown_timeout_answers_a_backend_api_request_503(petreld, silent_server, tmp_path):
    """A backend-plane API request still waiting when shutdown_timeout
    passes is answered 503 by the component's abandon (the component
    table's abandon step), not cut off when the process exits. Its wait:
    user/info asks an auth service that never answers (each call bounded
    by 10 s, far beyond the timeout)."""
    token = "lifecycle-token"
    d = petreld({"components": ["backend-api"], "shutdown_timeout": "300ms",
                 "mail": {"home": str(tmp_path / "m" / "%u")},
                 "backend_api": {"auth_master_addr": silent_server.addr}},
                env={"BACKEND_API_TOKEN": token})
    result = {}

    def call():
        try:
            result["resp"] = d.post("backend", "/api/backend/user/info", {"user": "alice"},
                                    token=token, timeout=15)
        except Exception as e:  # noqa: BLE001 - the test reports it
            result["error"] = e

    t = threading.Thread(target=call)
    t.start()

    def asked():
        for c in list(silent_server.conns):
            try:
                if b"alice" in c.recv(4096, socket.MSG_PEEK | socket.MSG_DONTWAIT):
                    return True
            except BlockingIOError:
                pass
        return False

    wait_for(asked, timeout=10, what="the lookup sent to the silent auth service")
    d.signal(signal.SIGTERM)
    t.join(15)
    assert d.wait() == 0, d.stderr()
    d.assert_clean()
    assert "shutdown timeout reached" in d.stderr()
    assert "error" not in result, f"request cut off instead of answered: {result['error']!r}"
    assert result["resp"].status == 503, result["resp"]
