"""Throwaway backing servers for end-to-end tests: redis-server and a
PostgreSQL 15 cluster, each on a free loopback port, started once per test
session and stopped (data removed) afterwards.

    from servers import redis_server, pgsql_server   # fixtures

Both fixtures skip the tests that use them when the server binaries are
missing. Recipes as in /work/shared/design/STACK-NOTES.md: Redis without
persistence; PostgreSQL initialised and run as `nobody` (initdb refuses
root), trust authentication, fsync off, listening on 127.0.0.1 only.
"""

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import free_port

PG_BIN = Path(os.environ.get("PETREL_PG_BIN", "/usr/lib/postgresql/15/bin"))
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"


def _wait_port(port, timeout, what, proc_alive=lambda: True):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if not proc_alive():
                break
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} in {timeout}s")


# ---------- Redis ----------

class RedisServer:
    def __init__(self, port, workdir):
        self.port = port
        self.dir = Path(workdir)
        self.address = f"127.0.0.1:{port}"

    def cli(self, *args, check=True, input=None):
        """redis-cli against this server; returns stdout (str)."""
        proc = subprocess.run([REDIS_CLI, "-h", "127.0.0.1", "-p", str(self.port), *args],
                              capture_output=True, text=True, timeout=60, input=input)
        if check and proc.returncode != 0:
            raise RuntimeError(f"redis-cli {args}: {proc.stderr}")
        return proc.stdout

    def pipe(self, commands):
        """Sends raw RESP (bytes) through `redis-cli --pipe` (bulk loading)."""
        proc = subprocess.run([REDIS_CLI, "-h", "127.0.0.1", "-p", str(self.port), "--pipe"],
                              input=commands, capture_output=True, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"redis-cli --pipe: {proc.stdout!r} {proc.stderr!r}")
        return proc.stdout

    def flushall(self):
        self.cli("FLUSHALL")


def start_redis(workdir, port=None):
    port = port or free_port()
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    subprocess.run([REDIS_SERVER, "--bind", "127.0.0.1", "--port", str(port), "--dir",
                    str(workdir), "--save", "", "--appendonly", "no", "--daemonize", "yes",
                    "--pidfile", str(workdir / "redis.pid"), "--logfile",
                    str(workdir / "redis.log")],
                   check=True, capture_output=True, timeout=30)
    _wait_port(port, 15, "redis-server")
    server = RedisServer(port, workdir)
    # The pidfile is written just after the port opens.
    deadline = time.monotonic() + 5
    while not (workdir / "redis.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return server


def stop_redis(server):
    subprocess.run([REDIS_CLI, "-h", "127.0.0.1", "-p", str(server.port), "shutdown", "nosave"],
                   capture_output=True, timeout=30)
    pidfile = server.dir / "redis.pid"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            pid = int(pidfile.read_text().strip())
            os.kill(pid, 0)
        except (FileNotFoundError, ValueError, ProcessLookupError):
            return
        time.sleep(0.05)
    try:  # still there: end the server this fixture started
        os.kill(int(pidfile.read_text().strip()), 9)
    except (FileNotFoundError, ValueError, ProcessLookupError):
        pass


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    if not os.path.exists(REDIS_SERVER):
        pytest.skip("redis-server is not installed")
    server = start_redis(tmp_path_factory.mktemp("redis"))
    yield server
    stop_redis(server)


# ---------- PostgreSQL ----------

class PgServer:
    def __init__(self, port, datadir, sockdir):
        self.port = port
        self.datadir = Path(datadir)
        self.sockdir = Path(sockdir)
        self.connect = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"

    def connect_for(self, db):
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={db}"

    def psql(self, sql, check=True, db="postgres"):
        """Runs SQL with psql over TCP; returns stdout (unaligned, tuples only)."""
        proc = subprocess.run([str(PG_BIN / "psql") if (PG_BIN / "psql").exists() else "psql",
                               "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h",
                               "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d",
                               db, "-c", sql],
                              capture_output=True, text=True, timeout=120)
        if check and proc.returncode != 0:
            raise RuntimeError(f"psql {sql!r}: {proc.stderr}")
        return proc.stdout


def _as_nobody(args, **kw):
    return subprocess.run([shutil.which("runuser") or "/usr/sbin/runuser", "-u", "nobody", "--", *args], **kw)


def start_pgsql():
    """initdb + pg_ctl start as nobody in a fresh /tmp directory (the pytest
    tmp tree is root-only, so nobody could not enter it). Returns (server,
    base directory); stop_pgsql removes the directory."""
    base = Path(tempfile.mkdtemp(prefix="petrel-pg-"))
    try:
        return _start_pgsql_in(base)
    except BaseException:
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
        if (base / "data" / "postmaster.pid").exists():
            _as_nobody([str(PG_BIN / "pg_ctl"), "-D", str(base / "data"), "-w", "-m",
                        "immediate", "stop"], capture_output=True, timeout=60, env=env,
                       cwd=str(base))
        shutil.rmtree(base, ignore_errors=True)
        raise


def _start_pgsql_in(base):
    os.chmod(base, 0o755)
    datadir = base / "data"
    sockdir = base / "sock"
    for d in (datadir, sockdir):
        d.mkdir()
        os.chown(d, 65534, 65534)  # nobody:nogroup
        os.chmod(d, 0o700)
    logfile = base / "postgres.log"
    logfile.touch()
    os.chown(logfile, 65534, 65534)
    port = free_port()
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    _as_nobody([str(PG_BIN / "initdb"), "-D", str(datadir), "-U", "postgres", "-A", "trust",
                "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"],
               check=True, capture_output=True, timeout=120, env=env, cwd=str(base))
    proc = _as_nobody([str(PG_BIN / "pg_ctl"), "-D", str(datadir), "-w", "-t", "60", "-l",
                       str(logfile), "-o",
                       f"-p {port} -k {sockdir} -c listen_addresses=127.0.0.1 -c fsync=off "
                       f"-c synchronous_commit=off -c full_page_writes=off", "start"],
                      capture_output=True, text=True, timeout=120, env=env, cwd=str(base))
    if proc.returncode != 0:
        raise RuntimeError(f"pg_ctl start failed: {proc.stdout}{proc.stderr}\n"
                           + logfile.read_text(errors="replace"))
    _wait_port(port, 30, "postgres")
    return PgServer(port, datadir, sockdir), base


def stop_pgsql(server, base):
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
    _as_nobody([str(PG_BIN / "pg_ctl"), "-D", str(server.datadir), "-w", "-t", "30", "-m",
                "fast", "stop"], capture_output=True, timeout=60, env=env, cwd=str(base))
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def pgsql_server():
    if not (PG_BIN / "initdb").exists():
        pytest.skip(f"PostgreSQL binaries not found in {PG_BIN}")
    server, base = start_pgsql()
    yield server
    stop_pgsql(server, base)
