"""The sql dict on PostgreSQL, through the HTTP API: what is specific to the
pgsql backend (the behaviour common to every driver is in
test_dict_behaviour.py).

User stories:
- an operator points a dict at PostgreSQL; the default table appears with
  binary-safe values, counters as decimal text and a TTL column;
- a table map exposes rows that another system writes (multi-value lookups)
  and refuses writes to them;
- keys full of SQL syntax are stored verbatim and hurt nothing;
- 100,000 rows stream out of a cursor while lookups keep being answered;
- the database drops the connection mid-iterate: the stream ends with an
  error line, petreld carries on;
- the database is stopped: operations fail with 500 and a clear message,
  petreld stays up, and recovers by itself when the database is back.

This module runs its own PostgreSQL cluster (servers.start_pgsql), since it
stops and restarts it; each test gets a fresh database.
"""

import base64
import http.client
import itertools
import json
import os
import threading
import time

import pytest

from conftest import http_request, wait_for
from servers import PG_BIN, _as_nobody, start_pgsql, stop_pgsql

RECURSE, SORT_BY_KEY, SORT_BY_VALUE, NO_VALUE, EXACT_KEY = 1, 2, 4, 8, 16
_counter = itertools.count()


def b64(data):
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode()


def unb64(text):
    return base64.b64decode(text, validate=True)


# ---------- the cluster ----------

class Cluster:
    def __init__(self, server, base):
        self.server = server
        self.base = base
        self.port = server.port

    def _pg_ctl(self, *args):
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
        return _as_nobody([str(PG_BIN / "pg_ctl"), "-D", str(self.server.datadir), "-w", "-t",
                           "60", *args], capture_output=True, text=True, timeout=120, env=env,
                          cwd=str(self.base))

    def stop(self):
        proc = self._pg_ctl("-m", "fast", "stop")
        assert proc.returncode == 0, proc.stdout + proc.stderr

    def start(self):
        proc = self._pg_ctl("-l", str(self.base / "postgres.log"), "-o",
                            f"-p {self.port} -k {self.server.sockdir} "
                            "-c listen_addresses=127.0.0.1 -c fsync=off", "start")
        assert proc.returncode == 0, proc.stdout + proc.stderr

    def psql(self, sql, db="postgres"):
        import subprocess
        proc = subprocess.run(["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h",
                               "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", db,
                               "-c", sql], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"psql {sql!r}: {proc.stderr}"
        return proc.stdout.strip()


@pytest.fixture(scope="module")
def cluster():
    if not (PG_BIN / "initdb").exists():
        pytest.skip(f"PostgreSQL binaries not found in {PG_BIN}")
    server, base = start_pgsql()
    c = Cluster(server, base)
    yield c
    stop_pgsql(server, base)


class PgDict:
    """Dict `d` (sql, pgsql) on a petreld, with its own database."""

    def __init__(self, daemon, cluster, db):
        self.daemon = daemon
        self.cluster = cluster
        self.db = db

    def sql(self, text):
        return self.cluster.psql(text, db=self.db)

    def post(self, op, body, **kw):
        return self.daemon.post("backend", f"/api/backend/dict/d/{op}", body=body, **kw)

    def lookup(self, key, op=None):
        body = {"key": key}
        if op:
            body["op"] = op
        return self.post("lookup", body)

    def values(self, key, op=None):
        r = self.lookup(key, op)
        assert r.status == 200, r
        body = r.json()
        return [unb64(v) for v in body["values"]] if body["found"] else None

    def set(self, key, value, op=None, expect=200):
        body = {"key": key, "value": b64(value)}
        if op:
            body["op"] = op
        r = self.post("set", body)
        assert expect is None or r.status == expect, r
        return r

    def batch(self, ops, op=None):
        body = {"ops": ops}
        if op:
            body["op"] = op
        return self.post("commit-batch", body)

    def iterate(self, path, flags=0, op=None, timeout=120):
        body = {"path": path, "flags": flags}
        if op:
            body["op"] = op
        r = self.post("iterate", body, timeout=timeout)
        assert r.status == 200, r
        rows = []
        for line in r.body.decode().splitlines():
            obj = json.loads(line)
            assert "error" not in obj, obj
            rows.append((obj["key"], [unb64(v) for v in obj["values"]]))
        return rows


def new_db(cluster):
    db = f"petrel_sql_{os.getpid()}_{next(_counter)}"
    cluster.psql(f"CREATE DATABASE {db}")
    return db


@pytest.fixture
def pgdict(cluster, petreld, request):
    def make(extra=None, pool_size=None, host="127.0.0.1"):
        db = new_db(cluster)
        cfg = {"driver": "sql", "backend": "pgsql",
               "connect": f"host={host} port={cluster.port} user=postgres dbname={db}",
               "connect_timeout": "2s", "query_timeout": "20s"}
        if pool_size:
            cfg["pool_size"] = pool_size
        cfg.update(extra or {})
        daemon = petreld({"dicts": {"d": cfg}})
        pd = PgDict(daemon, cluster, db)
        assert pd.values("shared/-") is None  # the first connection creates the table
        return pd
    return make


def stream(daemon, body, path="/api/backend/dict/d/iterate"):
    """Starts an iterate and returns (connection, response) without reading."""
    host, port = daemon.backend.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()[:300]
    return conn, resp


def fill(pd, prefix, n, value_len=8):
    """n rows straight into the default table: <prefix>000001 ..."""
    pd.sql(f"INSERT INTO dict (key, value) SELECT '{prefix}' || lpad(i::text, 6, '0'), "
           f"convert_to(repeat('v', {value_len}), 'UTF8') FROM generate_series(1, {n}) i")


# ---------- storage ----------

def test_default_table_schema_and_storage(pgdict):
    pd = pgdict()
    pd.set("shared/bin", b"\x00\xff\x80binary\x00")
    cols = pd.sql("SELECT column_name || ':' || data_type FROM information_schema.columns "
                  "WHERE table_name = 'dict' ORDER BY ordinal_position")
    assert cols.split("\n") == ["key:text", "value:bytea", "expires_at:bigint"]
    assert pd.sql("SELECT collation_name FROM information_schema.columns WHERE "
                  "table_name = 'dict' AND column_name = 'key'") == "C"
    assert pd.sql("SELECT encode(value, 'hex') FROM dict WHERE key = 'shared/bin'") == \
        "00ff8062696e61727900"
    assert pd.values("shared/bin") == [b"\x00\xff\x80binary\x00"]
    # counters are decimal text bytes
    pd.set("shared/n", "41")
    r = pd.post("atomic-inc", {"key": "shared/n", "delta": 1})
    assert r.status == 200 and r.json()["status"] == "ok", r
    assert pd.sql("SELECT convert_from(value, 'UTF8') FROM dict WHERE key = 'shared/n'") == "42"
    # priv keys carry their user
    pd.set("priv/x", "1", op={"username": "alice"})
    assert pd.sql("SELECT count(*) FROM dict WHERE key = 'priv/alice/x'") == "1"


def test_batch_failure_rolls_back_everything(pgdict):
    pd = pgdict()
    pd.set("shared/keep", "old")
    pd.set("shared/text", "abc")
    r = pd.batch([{"kind": "set", "key": "shared/a", "value": b64("1")},
                  {"kind": "set", "key": "shared/keep", "value": b64("new")},
                  {"kind": "unset", "key": "shared/text"},
                  {"kind": "set", "key": "shared/text", "value": b64("x1")},
                  {"kind": "atomic-inc", "key": "shared/text", "delta": 1},
                  {"kind": "set", "key": "shared/b", "value": b64("2")}])
    assert r.status == 500, r
    body = r.json()
    assert body["status"] == "failed" and body["result"] == -1, body
    assert "atomic-inc shared/text" in body["error"] and "bigint" in body["error"], body
    assert pd.sql("SELECT string_agg(key || '=' || convert_from(value, 'UTF8'), ',' ORDER BY "
                  "key) FROM dict") == "shared/keep=old,shared/text=abc"
    # the connection is usable afterwards (the ROLLBACK happened)
    r = pd.batch([{"kind": "atomic-inc", "key": "shared/missing", "delta": 1},
                  {"kind": "set", "key": "shared/a", "value": b64("1")}])
    assert r.status == 200 and r.json() == {"result": 0, "status": "not-found"}, r
    assert pd.values("shared/a") == [b"1"]


def test_ttl_column_and_expire_scan(pgdict):
    pd = pgdict()
    now = int(time.time())
    pd.set("shared/t", "1", op={"expire_secs": 300})
    exp = int(pd.sql("SELECT expires_at FROM dict WHERE key = 'shared/t'"))
    assert now + 299 <= exp <= now + 302
    pd.set("shared/forever", "2")
    pd.sql("INSERT INTO dict VALUES ('shared/old', 'x', extract(epoch from now())::bigint - 5)")
    assert pd.values("shared/old") is None
    assert [k for k, _ in pd.iterate("shared/", SORT_BY_KEY)] == ["shared/forever", "shared/t"]
    r = pd.post("atomic-inc", {"key": "shared/old", "delta": 1})
    assert r.json()["status"] == "not-found", r
    r = pd.post("expire-scan", {})
    assert r.status == 200, r
    assert pd.sql("SELECT string_agg(key, ',' ORDER BY key) FROM dict") == "shared/forever,shared/t"


def test_sort_orders_are_bytewise(pgdict):
    pd = pgdict()
    keys = ["shared/B", "shared/a", "shared/\u00e9", "shared/Z", "shared/_", "shared/0"]
    for i, k in enumerate(keys):
        pd.set(k, bytes([200 - i * 30]))
    got = [k for k, _ in pd.iterate("shared/", SORT_BY_KEY)]
    assert got == sorted(keys, key=lambda k: k.encode())
    by_value = [v[0] for _, v in pd.iterate("shared/", SORT_BY_VALUE)]
    assert by_value == sorted(by_value)


def test_table_map_multi_value_lookups_and_writes(pgdict, cluster):
    maps = [
        {"pattern": "priv/quota/storage", "table": "quota", "username_field": "username",
         "value_fields": ["bytes", "messages"]},
        {"pattern": "shared/counters/$user/$kind", "table": "counters",
         "fields": {"user": "owner", "kind": "kind"}, "value_field": "amount",
         "expire_field": "expires"},
    ]
    pd = pgdict({"maps": maps})
    pd.sql("CREATE TABLE quota (username TEXT PRIMARY KEY, bytes BIGINT, messages INTEGER)")
    pd.sql("CREATE TABLE counters (owner TEXT, kind TEXT, amount BIGINT, expires BIGINT, "
           "UNIQUE (owner, kind))")
    pd.sql("INSERT INTO quota VALUES ('alice', 1024, 3), ('bob', 2048, NULL)")

    assert pd.values("priv/quota/storage", op={"username": "alice"}) == [b"1024", b"3"]
    assert pd.values("priv/quota/storage", op={"username": "bob"}) == [b"2048", b""]
    assert pd.values("priv/quota/storage", op={"username": "carol"}) is None
    assert pd.iterate("priv/", RECURSE, op={"username": "alice"}) == \
        [("priv/quota/storage", [b"1024", b"3"])]
    r = pd.set("priv/quota/storage", "1", op={"username": "alice"}, expect=500)
    assert "read-only" in r.json()["error"], r

    pd.set("shared/counters/alice/bytes", "10")
    pd.set("shared/counters/alice/bytes", "11")
    assert pd.sql("SELECT owner || '/' || kind || '=' || amount FROM counters") == "alice/bytes=11"
    r = pd.post("atomic-inc", {"key": "shared/counters/alice/bytes", "delta": 5})
    assert r.json()["status"] == "ok", r
    r = pd.post("atomic-inc", {"key": "shared/counters/bob/bytes", "delta": 5})
    assert r.json()["status"] == "not-found", r
    pd.set("shared/counters/bob/messages", "7", op={"expire_secs": 60})
    assert int(pd.sql("SELECT expires FROM counters WHERE owner = 'bob'")) > time.time()
    assert pd.iterate("shared/counters/", RECURSE | SORT_BY_KEY) == [
        ("shared/counters/alice/bytes", [b"16"]), ("shared/counters/bob/messages", [b"7"])]
    assert pd.iterate("shared/counters/b", RECURSE) == [("shared/counters/bob/messages", [b"7"])]
    assert pd.sql("SELECT count(*) FROM dict") == "0"
    r = pd.post("unset", {"key": "shared/counters/alice/bytes"})
    assert r.status == 200, r
    assert pd.sql("SELECT count(*) FROM counters") == "1"


def test_sql_injection_in_keys_is_harmless(pgdict):
    maps = [{"pattern": "shared/m/$id", "table": "m", "fields": {"id": "id"},
             "value_field": "v"}]
    pd = pgdict({"maps": maps})
    pd.sql("CREATE TABLE m (id TEXT, v TEXT)")
    evil = ["shared/x'; DROP TABLE dict; --", "shared/\" OR 1=1 --", "shared/a' OR 'a'='a",
            "shared/$1", "shared/); DELETE FROM dict; SELECT ('", "shared/\\'; --"]
    for k in evil:
        pd.set(k, k)
    for k in evil:
        assert pd.values(k) == [k.encode()]
    assert pd.values("shared/a") is None
    pd.set("shared/m/1' OR '1'='1", "x")
    assert pd.sql("SELECT id FROM m") == "1' OR '1'='1"
    assert pd.values("shared/m/1") is None
    assert pd.values("priv/quota", op={"username": "x' OR '1'='1"}) is None
    keys = [k for k, _ in pd.iterate("shared/", RECURSE | SORT_BY_KEY)]
    assert sorted(keys) == sorted(evil + ["shared/m/1' OR '1'='1"])
    r = pd.post("unset", {"key": "shared/' OR ''='"})
    assert r.status == 200
    assert pd.sql("SELECT count(*) FROM dict") == str(len(evil))


# ---------- streaming and the pool ----------

def test_iterate_100k_rows_streams(pgdict):
    pd = pgdict()
    fill(pd, "shared/many/", 100_000)
    pd.set("shared/many/zzz/deeper", "x")
    t0 = time.monotonic()
    conn, resp = stream(pd.daemon, {"path": "shared/many/", "flags": SORT_BY_KEY})
    count = 0
    last = ""
    while True:
        line = resp.readline()
        if not line:
            break
        obj = json.loads(line)
        assert "error" not in obj, obj
        assert obj["key"] > last
        last = obj["key"]
        count += 1
    conn.close()
    assert count == 100_000, count  # the deeper key is filtered (not recursive)
    assert last == "shared/many/100000"
    elapsed = time.monotonic() - t0
    assert elapsed < 120, elapsed
    # exact key and no-value on the same data
    assert pd.iterate("shared/many/000042", EXACT_KEY) == [("shared/many/000042", [b"v" * 8])]
    rows = pd.iterate("shared/many/09999", NO_VALUE | RECURSE)
    assert len(rows) == 10 and all(v == [] for _, v in rows)


def test_lookups_answer_while_iterations_hold_connections(pgdict):
    pd = pgdict(pool_size=4)
    fill(pd, "shared/big/", 100_000, value_len=200)
    pd.set("shared/probe", "p")
    # three stalled iterations: each holds a connection with an open cursor
    streams = [stream(pd.daemon, {"path": "shared/big/", "flags": 0}) for _ in range(3)]
    for _, resp in streams:
        assert json.loads(resp.readline())["key"].startswith("shared/big/")
    # A backend still sending its first batch shows as 'active' for a moment
    # after the client has the first row: wait for all three to settle.
    deadline = time.monotonic() + 10
    while True:
        held = int(pd.sql(f"SELECT count(*) FROM pg_stat_activity WHERE datname = '{pd.db}' AND "
                          "application_name = 'petrel' AND state = 'idle in transaction'"))
        if held == 3 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert held == 3, held
    t0 = time.monotonic()
    for _ in range(20):
        assert pd.values("shared/probe") == [b"p"]
    r = pd.batch([{"kind": "set", "key": "shared/w", "value": b64("1")}])
    assert r.status == 200, r
    assert time.monotonic() - t0 < 10
    # a fourth iteration waits for a held connection rather than take the last one
    results = {}

    def fourth():
        results["rows"] = len(pd.iterate("shared/probe", EXACT_KEY, timeout=60))
    th = threading.Thread(target=fourth)
    th.start()
    time.sleep(0.5)
    assert pd.values("shared/probe") == [b"p"]
    assert "rows" not in results
    conn, resp = streams.pop()
    resp.read()  # drain one iteration to the end: its connection is released
    conn.close()
    th.join(60)
    assert results.get("rows") == 1
    for conn, _ in streams:
        conn.close()  # abandoned mid-way: petreld rolls the cursors back
    wait_for(lambda: pd.sql(f"SELECT count(*) FROM pg_stat_activity WHERE datname = '{pd.db}' "
                            "AND state = 'idle in transaction'") == "0",
             timeout=20, what="abandoned iterations to end their transactions")
    assert pd.values("shared/probe") == [b"p"]


def test_connection_dropped_mid_iterate_ends_with_error_line(pgdict):
    pd = pgdict()
    fill(pd, "shared/big/", 100_000, value_len=200)
    conn, resp = stream(pd.daemon, {"path": "shared/big/", "flags": RECURSE})
    assert "key" in json.loads(resp.readline())
    time.sleep(0.3)  # the output buffer fills; the iteration pauses on its cursor
    killed = pd.sql(f"SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
                    f"datname = '{pd.db}' AND application_name = 'petrel'")
    assert int(killed) >= 1
    lines = resp.read().decode().splitlines()
    conn.close()
    assert lines, "stream ended without any line"
    last = json.loads(lines[-1])
    assert "error" in last, lines[-1][:300]
    assert "connection lost during iterate" in last["error"], last
    assert len(lines) < 100_000
    # petreld reconnects for the next operation
    wait_for(lambda: pd.lookup("shared/big/000001").status == 200, timeout=15,
             what="lookup after the connection was killed")
    assert pd.values("shared/big/000001") == [b"v" * 200]


def test_concurrent_requests_share_the_pool(pgdict):
    pd = pgdict(pool_size=3)
    errors = []

    def worker(n):
        try:
            for i in range(15):
                key = f"shared/c/{n}/{i}"
                r = pd.set(key, str(i), expect=None)
                if r.status != 200:
                    errors.append(r)
                if pd.values(key) != [str(i).encode()]:
                    errors.append(key)
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:3]
    assert pd.sql("SELECT count(*) FROM dict") == str(8 * 15)
    assert int(pd.sql(f"SELECT count(*) FROM pg_stat_activity WHERE datname = '{pd.db}' AND "
                      "application_name = 'petrel'")) <= 3


# ---------- the server goes away ----------

def test_server_stopped_operations_fail_then_recover(pgdict, cluster):
    pd = pgdict()
    pd.set("shared/a", "1")
    cluster.stop()
    try:
        t0 = time.monotonic()
        r = pd.lookup("shared/a")
        assert r.status == 500, r
        assert "postgresql" in r.json()["error"], r
        r = pd.set("shared/b", "2", expect=500)
        body = r.json()
        assert body["status"] == "failed" and "postgresql" in body["error"], body
        r = pd.post("iterate", {"path": "shared/", "flags": RECURSE})
        assert r.status == 500 and "postgresql" in r.json()["error"], r
        r = pd.post("expire-scan", {})
        assert r.status == 500, r
        assert time.monotonic() - t0 < 10  # failures are prompt, nothing hangs
        # petreld itself is fine
        assert pd.daemon.get("telemetry", "/healthz").status == 200
        assert pd.daemon.get("backend", "/api/backend/health").status == 200
        assert pd.daemon.proc.poll() is None
    finally:
        cluster.start()
    # back by itself after the backoff (at most 10 s)
    wait_for(lambda: pd.lookup("shared/a").status == 200, timeout=30,
             what="lookups to succeed once PostgreSQL is back")
    assert pd.values("shared/a") == [b"1"]
    pd.set("shared/b", "2")
    assert pd.values("shared/b") == [b"2"]
    assert "postgresql unavailable" in pd.daemon.stderr()
    assert "postgresql reachable again" in pd.daemon.stderr()


def test_dict_on_unreachable_server_still_starts(petreld, cluster):
    from conftest import free_port
    port = free_port()
    daemon = petreld({"dicts": {"d": {
        "driver": "sql", "backend": "pgsql",
        "connect": f"host=127.0.0.1 port={port} user=postgres dbname=petrel",
        "connect_timeout": "1s"}}})
    r = http_request(daemon.backend, "POST", "/api/backend/dict/d/lookup", body={"key": "shared/x"})
    assert r.status == 500, r
    assert "Connection refused" in r.json()["error"] or "unavailable" in r.json()["error"], r
    r = http_request(daemon.backend, "GET", "/api/backend/dict/d/exists")
    assert r.json() == {"name": "d", "exists": True}


# ---------- host names (docs/configuration.md, "Addresses") ----------

def test_host_name_is_looked_up_on_the_loop(pgdict):
    """host=localhost: petreld looks the name up itself (net/resolve.h, on
    the event loop) and hands libpq hostaddr=, so libpq's blocking lookup
    never runs on the loop; the dict works as with an IP address."""
    pd = pgdict(host="localhost")
    pd.set("shared/named", "yes")
    assert pd.values("shared/named") == [b"yes"]


def test_unresolvable_host_fails_operations_not_the_start(petreld, cluster):
    daemon = petreld({"dicts": {"d": {
        "driver": "sql", "backend": "pgsql",
        "connect": f"host=no-such-host.invalid port={cluster.port} user=postgres dbname=petrel",
        "connect_timeout": "2s"}}})
    r = http_request(daemon.backend, "POST", "/api/backend/dict/d/lookup", body={"key": "shared/x"})
    assert r.status == 500, r
    assert "cannot resolve 'no-such-host.invalid'" in r.json()["error"], r
    assert daemon.get("backend", "/api/backend/health").status == 200
