"""The sql layer (src/sql) against a real PostgreSQL: runs the unit test
binary tests/unit/test-sql with PETREL_TEST_PG set, so its PostgreSQL cases
(hostile strings, NULLs, bytea, statement timeout) run instead of skipping,
and restarts the server when the binary asks (PETREL-RESTART-NOW on stdout)
to show that an idle event-loop connection notices the restart and that a
blocking one reconnects on its next statement."""
import os
import subprocess
import threading

import pytest

from conftest import BUILD
from servers import PG_BIN, _as_nobody, start_pgsql, stop_pgsql


def _pg_ctl(server, base, *args):
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    proc = _as_nobody([str(PG_BIN / "pg_ctl"), "-D", str(server.datadir), "-w", "-t", "60",
                       *args], capture_output=True, text=True, timeout=120, env=env,
                      cwd=str(base))
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def pg():
    if not (PG_BIN / "initdb").exists():
        pytest.skip(f"PostgreSQL binaries not found in {PG_BIN}")
    server, base = start_pgsql()
    yield server, base
    stop_pgsql(server, base)


def test_sql_layer_against_postgresql_with_a_restart(pg):
    server, base = pg
    binary = BUILD / "tests" / "unit" / "test-sql"
    assert binary.exists(), binary
    env = dict(os.environ, PETREL_TEST_PG=server.connect, PETREL_TEST_PG_RESTART="1")
    proc = subprocess.Popen([str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    timer = threading.Timer(120, proc.kill)
    timer.start()
    out = []
    restarted = False
    try:
        for line in proc.stdout:
            out.append(line)
            if line.strip() == "PETREL-RESTART-NOW":
                _pg_ctl(server, base, "-m", "fast", "stop")
                _pg_ctl(server, base, "-l", str(base / "postgres.log"), "-o",
                        f"-p {server.port} -k {server.sockdir} "
                        "-c listen_addresses=127.0.0.1 -c fsync=off", "start")
                restarted = True
                proc.stdin.write("go\n")
                proc.stdin.flush()
        rc = proc.wait(timeout=60)
    finally:
        timer.cancel()
    text = "".join(out)
    assert rc == 0, text
    assert restarted, text
    assert "SKIPPED" not in text, text  # every PostgreSQL case ran
    assert "[  PASSED  ] 13 test(s)." in text, text
