"""Operator APIs are not opened to other hosts by accident: the
backend-plane API and the director's admin API listen on loopback by
default, refuse to start on another address without a token unless
`allow_unauthenticated_remote: true` says so, and telemetry's
POST /debug/loglevel needs a loopback peer, the telemetry token or that
key (its GETs stay readable)."""

import socket
import subprocess

import pytest

from conftest import (default_config, free_port, http_request, merge, run_petreld, to_yaml)

SECTIONS = {
    # surface: (config path of the section, token variable, extra config)
    "backend_api": (("backend_api",), "BACKEND_API_TOKEN", {}),
    "director.api": (("director", "api"), "DIRECTOR_API_TOKEN",
                     {"components": ["director"],
                      "director": {"ring": {"allow_unauthenticated": True}}}),
}


def non_loopback_ipv4():
    """An address of this host other than loopback, or None."""
    try:
        out = subprocess.run(["hostname", "-I"], capture_output=True, text=True,
                             timeout=5).stdout.split()
    except OSError:
        return None
    for a in out:
        if "." in a and not a.startswith("127."):
            return a
    return None


def config_with(surface, listen=None, **keys):
    path, _, extra = SECTIONS[surface]
    cfg = merge(default_config(), extra)
    if surface == "director.api":
        cfg["director"]["ring"]["listen"] = f"127.0.0.1:{free_port()}"
    section = cfg
    for p in path:
        section = section.setdefault(p, {})
    if listen is None:
        section.pop("listen", None)
    else:
        section["listen"] = listen
    section.update(keys)
    return cfg


def write(tmp_path, cfg, name="petrel.yaml"):
    p = tmp_path / name
    p.write_text(to_yaml(cfg) + "\n")
    return p


def listen_line(path, surface):
    """The line number of the section's `listen:` key in the written file."""
    lines = path.read_text().splitlines()
    want = surface.split(".")[-1] + ":"
    inside = False
    for i, line in enumerate(lines, 1):
        if line.strip() == want:
            inside = True
        elif inside and line.strip().startswith("listen:"):
            return i
    raise AssertionError(f"no listen under {surface}")


def listening_addresses(port):
    """Local IPv4/IPv6 addresses (hex, as in /proc/net/tcp*) with a
    listening socket on `port`."""
    found = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(name) as f:
            next(f)
            for row in f:
                fields = row.split()
                addr, hexport = fields[1].rsplit(":", 1)
                if int(hexport, 16) == port and fields[3] == "0A":  # LISTEN
                    found.add(addr)
    return found


def port_free_everywhere(port):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
            return True
        except OSError:
            return False


def test_default_listeners_are_loopback_only(petreld):
    # the well-known ports themselves: skip when another test run holds them
    if not (port_free_everywhere(9105) and port_free_everywhere(9103)):
        pytest.skip("port 9105 or 9103 is in use on this host")
    d = petreld({"components": ["backend-api", "director"],
                 "backend_api": {"listen": None},
                 "director": {"ring": {"listen": f"127.0.0.1:{free_port()}",
                                       "allow_unauthenticated": True}}})
    for port in (9105, 9103):
        # 127.0.0.1 only, never 0.0.0.0 (00000000) or ::
        assert listening_addresses(port) == {"0100007F"}, (port, listening_addresses(port))
    assert http_request("127.0.0.1:9105", "GET", "/api/backend/health").status == 200
    assert "addr=127.0.0.1:9105" in d.stderr()


@pytest.mark.parametrize("surface", sorted(SECTIONS))
def test_check_config_prints_loopback_default(tmp_path, surface):
    path = write(tmp_path, config_with(surface))
    proc = run_petreld(["-c", str(path), "--check-config"])
    assert proc.returncode == 0, proc.stderr
    port = "9105" if surface == "backend_api" else "9103"
    assert f"listen: \"127.0.0.1:{port}\"" in proc.stdout or \
        f"listen: 127.0.0.1:{port}" in proc.stdout, proc.stdout
    assert "allow_unauthenticated_remote: false" in proc.stdout


@pytest.mark.parametrize("surface", sorted(SECTIONS))
@pytest.mark.parametrize("listen", ["0.0.0.0:{port}", ":{port}", "[::]:{port}"])
def test_remote_listen_without_token_is_refused(tmp_path, surface, listen):
    listen = listen.format(port=free_port())
    path = write(tmp_path, config_with(surface, listen))
    for args in (["--check-config"], []):
        proc = run_petreld(["-c", str(path)] + args)
        assert proc.returncode == 2, (args, proc.stderr)
        line = listen_line(path, surface)
        assert f"{path}:{line}: {surface}.listen: {listen} is reachable from other hosts" \
            in proc.stderr, proc.stderr
        assert f"{surface}.allow_unauthenticated_remote: true" in proc.stderr
        assert SECTIONS[surface][1] in proc.stderr
    # a token makes the same address acceptable
    proc = run_petreld(["-c", str(path), "--check-config"],
                       env={SECTIONS[surface][1]: "some-token"})
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("surface", sorted(SECTIONS))
def test_explicit_key_allows_a_remote_listen(petreld, surface):
    port = free_port()
    cfg = config_with(surface, f"0.0.0.0:{port}", allow_unauthenticated_remote=True)
    d = petreld(cfg)
    assert listening_addresses(port) == {"00000000"}
    path = "/api/backend/health" if surface == "backend_api" else "/api/director/backends"
    assert http_request(f"127.0.0.1:{port}", "GET", path).status == 200
    ip = non_loopback_ipv4()
    if ip is not None and surface == "backend_api":  # reachable from elsewhere, as asked
        assert http_request(f"{ip}:{port}", "GET", path).status == 200
    assert "allow_unauthenticated_remote" in d.stderr()


# ---------- telemetry: POST /debug/loglevel ----------

@pytest.fixture
def remote_ip():
    ip = non_loopback_ipv4()
    if ip is None:
        pytest.skip("this host has no non-loopback IPv4 address to connect from")
    return ip


def telemetry_daemon(petreld, env=None, **keys):
    port = free_port()
    d = petreld({"telemetry": {"listen": f"0.0.0.0:{port}", **keys}}, env=env)
    return d, port


def set_level(addr, level, token=None):
    return http_request(addr, "POST", "/debug/loglevel", body={"level": level}, token=token)


def test_loglevel_post_from_a_remote_peer_is_refused(petreld, remote_ip):
    d, port = telemetry_daemon(petreld)
    remote = f"{remote_ip}:{port}"
    r = set_level(remote, "debug")
    assert r.status == 403, r
    assert "loopback" in r.json()["error"], r.json()
    assert http_request(remote, "GET", "/debug/loglevel").json()["level"] == "info"
    # the GETs stay readable from anywhere the allow-list admits
    assert http_request(remote, "GET", "/metrics").status == 200
    # a loopback peer may
    assert set_level(f"127.0.0.1:{port}", "warn").status == 200
    assert http_request(remote, "GET", "/debug/loglevel").json()["level"] == "warn"
    assert "log level change refused" in d.stderr()


def test_loglevel_post_with_the_telemetry_token(petreld, remote_ip):
    d, port = telemetry_daemon(petreld, env={"TELEMETRY_TOKEN": "tele-secret"})
    remote = f"{remote_ip}:{port}"
    assert set_level(remote, "debug").status == 401
    assert set_level(remote, "debug", token="wrong").status == 401
    assert set_level(remote, "debug", token="tele-secret").status == 200
    assert http_request(remote, "GET", "/debug/loglevel").json()["level"] == "debug"
    assert "tele-secret" not in d.stderr()


def test_loglevel_post_with_the_explicit_key(petreld, remote_ip):
    d, port = telemetry_daemon(petreld, allow_unauthenticated_remote=True)
    assert set_level(f"{remote_ip}:{port}", "error").status == 200
