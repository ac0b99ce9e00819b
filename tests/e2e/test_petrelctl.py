"""petrelctl against a real petreld: readable and --json output, and the
exit codes scripts rely on (0 ok, 1 the server said no, 2 usage, 3 cannot
connect)."""

import json

import pytest

from conftest import free_port, run_petrelctl

TOKEN = "ctl-token"


@pytest.fixture
def api(petreld):
    return petreld(env={"BACKEND_API_TOKEN": TOKEN})


def ctl(daemon, *args, env=None):
    return run_petrelctl(["--backend-url", f"http://{daemon.backend}", *args], env=env)


def test_backend_health_readable(api):
    p = ctl(api, "backend", "health")
    assert p.returncode == 0, p.stderr
    assert p.stdout == "status: ok\n"
    assert p.stderr == ""


def test_backend_health_json(api):
    p = ctl(api, "--json", "backend", "health")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == {"status": "ok"}


def test_backend_version_needs_token_exit_1(api):
    p = ctl(api, "backend", "version")
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert p.stdout == ""
    assert "401" in p.stderr and "bearer token" in p.stderr, p.stderr


def test_wrong_token_exit_1(api):
    p = ctl(api, "--backend-token", "nope", "backend", "version")
    assert p.returncode == 1
    assert "401" in p.stderr


def test_backend_token_flag(api):
    p = ctl(api, "--backend-token", TOKEN, "backend", "version")
    assert p.returncode == 0, p.stderr
    assert "version: " in p.stdout and "api: 1" in p.stdout, p.stdout


def test_backend_token_env(api):
    p = ctl(api, "--json", "backend", "version", env={"BACKEND_API_TOKEN": TOKEN})
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["api"] == 1


def test_flag_beats_env(api):
    p = ctl(api, "--backend-token", "nope", "backend", "version",
            env={"BACKEND_API_TOKEN": TOKEN})
    assert p.returncode == 1


def test_backend_url_from_env(api):
    p = run_petrelctl(["backend", "health"], env={"PETREL_BACKEND_URL": f"http://{api.backend}"})
    assert p.returncode == 0, p.stderr


def test_outside_allowed_nets_exit_1(petreld):
    d = petreld({"backend_api": {"allowed_nets": ["10.0.0.0/8"]}},
                env={"BACKEND_API_TOKEN": TOKEN})
    p = ctl(d, "--backend-token", TOKEN, "backend", "version")
    assert p.returncode == 1
    assert "403" in p.stderr


def test_nothing_listening_exit_3():
    p = run_petrelctl(["--backend-url", f"http://127.0.0.1:{free_port()}", "backend", "health"])
    assert p.returncode == 3, (p.stdout, p.stderr)
    assert "cannot connect" in p.stderr
    assert p.stdout == ""


@pytest.mark.parametrize("args", [
    [],
    ["backend"],
    ["backend", "no-such-command"],
    ["backend", "health", "extra"],
    ["frontend", "health"],
    ["--no-such-flag", "backend", "health"],
    ["--timeout", "soon", "backend", "health"],
])
def test_usage_errors_exit_2(args):
    # No server is needed: usage errors are caught before any request.
    p = run_petrelctl(["--backend-url", f"http://127.0.0.1:{free_port()}", *args])
    assert p.returncode == 2, (args, p.stdout, p.stderr)
    assert p.stderr.strip(), "usage errors explain themselves on stderr"


def test_help_exit_0():
    p = run_petrelctl(["--help"])
    assert p.returncode == 0
    assert "exit codes" in p.stdout
