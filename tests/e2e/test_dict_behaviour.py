"""The dict layer through its HTTP endpoints (spec document 1, "Health and
dict", OpSettings, CommitResult, Iterate flags, Errors, Limits): one
behavioural suite run against every driver -- memory, file, sql with
SQLite, sql with PostgreSQL, kvstore (Redis) -- so that they all answer
alike. Redis and PostgreSQL are throwaway servers on loopback (servers.py).

Every test gets its own petreld and its own storage: a fresh file, a fresh
SQLite database, a fresh PostgreSQL database, a fresh Redis key prefix.
"""

import base64
import http.client
import itertools
import json
import os
import signal
import socket
import sqlite3
import threading
import time

import pytest

from conftest import (PETRELD, Daemon, default_config, free_port, http_request, read_response,
                      wait_for)
from servers import pgsql_server, redis_server  # noqa: F401  (fixtures)
from servers import start_redis, stop_redis

RECURSE, SORT_BY_KEY, SORT_BY_VALUE, NO_VALUE, EXACT_KEY = 1, 2, 4, 8, 16

ALL_DRIVERS = ["fail", "file", "kvstore", "memory", "sql"]
VARIANTS = ["memory", "file", "sql-sqlite", "sql-pgsql", "kvstore"]
# Variants whose sets honour op.expire_secs (the others accept and ignore it).
TTL_VARIANTS = {"memory", "file", "sql-sqlite", "sql-pgsql", "kvstore"}
# Variants that keep their contents across a restart.
PERSISTENT_VARIANTS = {"file", "sql-sqlite", "sql-pgsql", "kvstore"}
# Set PETREL_DICT_REQUIRE_ALL=1 to fail (not skip) when a driver is not built in.
REQUIRE_ALL = os.environ.get("PETREL_DICT_REQUIRE_ALL") == "1"

_counter = itertools.count()


def b64(data):
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode()


def unb64(text):
    return base64.b64decode(text, validate=True)


# ---------- which drivers this petreld has ----------

@pytest.fixture(scope="session")
def registered_drivers(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("drivers"), default_config(), name="drivers")
    d.start()
    try:
        r = d.get("backend", "/api/backend/dict/drivers")
        assert r.status == 200, r
        return r.json()["drivers"]
    finally:
        d.stop()


def _driver_of(variant):
    return variant.split("-", 1)[0]


# ---------- per-variant storage ----------

def variant_config(variant, request, tmp_path):
    """The `dicts:` entry for `variant`, with storage private to this test."""
    n = next(_counter)
    if variant == "memory":
        return {"driver": "memory"}
    if variant == "file":
        return {"driver": "file", "path": str(tmp_path / f"dict{n}.db")}
    if variant == "sql-sqlite":
        return {"driver": "sql", "backend": "sqlite", "path": str(tmp_path / f"dict{n}.sqlite")}
    if variant == "sql-pgsql":
        pg = request.getfixturevalue("pgsql_server")
        db = f"petrel_t{os.getpid()}_{n}"
        pg.psql(f"CREATE DATABASE {db}")
        request.addfinalizer(lambda: pg.psql(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)",
                                             check=False))
        return {"driver": "sql", "backend": "pgsql",
                "connect": f"host=127.0.0.1 port={pg.port} user=postgres dbname={db}"}
    if variant == "kvstore":
        rs = request.getfixturevalue("redis_server")
        return {"driver": "kvstore", "address": rs.address, "prefix": f"t{os.getpid()}-{n}:"}
    raise AssertionError(variant)


class DictClient:
    """The dict endpoints of one dict on one petreld."""

    def __init__(self, daemon, name="d", variant=None):
        self.daemon = daemon
        self.name = name
        self.variant = variant

    def path(self, op):
        return f"/api/backend/dict/{self.name}/{op}"

    def post(self, op, body, **kw):
        return self.daemon.post("backend", self.path(op), body=body, **kw)

    @staticmethod
    def _with_op(body, op):
        if op is not None:
            body["op"] = op
        return body

    def lookup(self, key, op=None):
        return self.post("lookup", self._with_op({"key": key}, op))

    def get(self, key, op=None):
        """The single value of `key` (bytes) or None; asserts a well-formed answer."""
        r = self.lookup(key, op)
        assert r.status == 200, r
        body = r.json()
        if not body["found"]:
            assert body.get("values", []) == [], body
            return None
        assert len(body["values"]) == 1, body
        return unb64(body["values"][0])

    def set(self, key, value, op=None, expect=200):
        r = self.post("set", self._with_op({"key": key, "value": b64(value)}, op))
        if expect is not None:
            assert r.status == expect, r
            if expect == 200:
                assert r.json() == {"result": 1, "status": "ok"}, r
        return r

    def unset(self, key, op=None):
        return self.post("unset", self._with_op({"key": key}, op))

    def inc(self, key, delta, op=None):
        return self.post("atomic-inc", self._with_op({"key": key, "delta": delta}, op))

    def batch(self, ops, op=None):
        return self.post("commit-batch", self._with_op({"ops": ops}, op))

    def expire_scan(self):
        return self.post("expire-scan", {})

    def iterate_raw(self, path, flags=0, op=None, timeout=60):
        return self.post("iterate", self._with_op({"path": path, "flags": flags}, op),
                         timeout=timeout)

    def iterate(self, path, flags=0, op=None):
        """[(key, [bytes, ...]), ...] in stream order; asserts NDJSON framing."""
        r = self.iterate_raw(path, flags, op)
        assert r.status == 200, r
        assert r.headers.get("content-type", "").startswith("application/x-ndjson"), r.headers
        rows = []
        text = r.body.decode("utf-8")
        assert text == "" or text.endswith("\n"), text[-200:]
        for line in text.splitlines():
            obj = json.loads(line)
            assert "error" not in obj, obj
            assert isinstance(obj["key"], str), obj
            values = obj.get("values", [])
            assert isinstance(values, list), obj
            rows.append((obj["key"], [unb64(v) for v in values]))
        return rows

    def keys(self, path, flags=0, op=None):
        return [k for k, _ in self.iterate(path, flags, op)]


@pytest.fixture(params=VARIANTS)
def variant(request, registered_drivers):
    driver = _driver_of(request.param)
    if driver not in registered_drivers:
        msg = f"driver {driver} is not registered in this petreld ({registered_drivers})"
        if REQUIRE_ALL:
            pytest.fail(msg)
        pytest.skip(msg)
    return request.param


@pytest.fixture
def dicts(variant, request, petreld, tmp_path):
    """(client of dict `d` on `variant`, the daemon); dict `f` is a fail dict."""
    cfg = variant_config(variant, request, tmp_path)
    daemon = petreld({"dicts": {"d": cfg, "f": {"driver": "fail"}}})
    return DictClient(daemon, "d", variant), daemon


@pytest.fixture
def dct(dicts):
    return dicts[0]


def assert_error(resp, status):
    assert resp.status == status, resp
    assert resp.headers.get("content-type", "").startswith("application/json"), resp.headers
    body = resp.json()
    assert isinstance(body.get("error"), str) and body["error"], body
    return body


# ======================= registry endpoints =======================

def test_drivers_lists_every_driver(petreld):
    d = petreld()
    r = d.get("backend", "/api/backend/dict/drivers")
    assert r.status == 200, r
    assert r.headers["content-type"].startswith("application/json")
    drivers = r.json()["drivers"]
    assert drivers == sorted(drivers), drivers
    assert drivers == ALL_DRIVERS, drivers


def test_exists_true_and_false(petreld):
    d = petreld({"dicts": {"d": {"driver": "memory"}, "f": {"driver": "fail"}}})
    for name, exists in (("d", True), ("f", True), ("nope", False), ("D", False)):
        r = d.get("backend", f"/api/backend/dict/{name}/exists")
        assert r.status == 200, r
        assert r.json() == {"name": name, "exists": exists}


@pytest.mark.parametrize("op, body", [
    ("lookup", {"key": "shared/a"}),
    ("iterate", {"path": "shared/", "flags": 0}),
    ("set", {"key": "shared/a", "value": b64("x")}),
    ("unset", {"key": "shared/a"}),
    ("atomic-inc", {"key": "shared/a", "delta": 1}),
    ("expire-scan", {}),
    ("commit-batch", {"ops": []}),
])
def test_unconfigured_dict_is_404(petreld, op, body):
    d = petreld({"dicts": {"d": {"driver": "memory"}}})
    assert_error(d.post("backend", f"/api/backend/dict/nope/{op}", body=body), 404)
    # Even a malformed body: the dict is resolved first.
    assert_error(d.post("backend", f"/api/backend/dict/nope/{op}", body="{"), 404)


def test_no_dicts_configured(petreld):
    d = petreld()
    assert d.get("backend", "/api/backend/dict/d/exists").json() == {"name": "d",
                                                                     "exists": False}
    assert_error(d.post("backend", "/api/backend/dict/d/lookup", body={"key": "shared/a"}), 404)


# ======================= the fail driver =======================

def test_fail_driver_answers(petreld):
    d = petreld({"dicts": {"f": {"driver": "fail"}}})
    f = DictClient(d, "f")
    assert_error(f.lookup("shared/a"), 500)
    assert_error(f.iterate_raw("shared/", 0), 500)
    assert_error(f.iterate_raw("shared/", RECURSE | SORT_BY_KEY), 500)
    for r in (f.set("shared/a", "x", expect=None), f.unset("shared/a"), f.inc("shared/a", 1),
              f.batch([{"kind": "set", "key": "shared/a", "value": b64("x")}])):
        body = assert_error(r, 500)
        assert body["result"] == -1, body
        assert body["status"] == "failed", body
    assert_error(f.expire_scan(), 500)
    # Validation still comes first: a bad request is 400, not 500.
    assert_error(f.lookup("nowhere/a"), 400)
    assert_error(f.set("priv/a", "x", expect=None), 400)


# ======================= lookup / set / unset =======================

def test_lookup_found_and_not_found(dct):
    r = dct.lookup("shared/missing")
    assert r.status == 200, r
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert body["found"] is False, body
    assert body.get("values", []) == [], body

    dct.set("shared/k", "hello")
    r = dct.lookup("shared/k")
    assert r.status == 200, r
    assert r.json() == {"found": True, "values": [b64("hello")]}


def test_set_overwrites(dct):
    dct.set("shared/k", "one")
    dct.set("shared/k", "two")
    assert dct.get("shared/k") == b"two"
    assert dct.keys("shared/") == ["shared/k"]


def test_values_are_bytes(dct):
    values = {
        "shared/bin": bytes(range(256)),
        "shared/nul": b"a\x00b\x00",
        "shared/utf8": "grüße ✓".encode(),
        "shared/empty": b"",
        "shared/big": os.urandom(200_000),
        "shared/newline": b"line1\nline2\r\n",
    }
    for k, v in values.items():
        dct.set(k, v)
    for k, v in values.items():
        assert dct.get(k) == v, k
    rows = dict(dct.iterate("shared/"))
    assert rows == {k: [v] for k, v in values.items()}


def test_odd_keys_round_trip(dct):
    keys = ["shared/with space", "shared/ünïcödé/ключ", "shared/quote\"back\\slash",
            "shared/%_*?[]{}", "shared/" + "x" * 1000, "shared/a/b/c/d/e"]
    for i, k in enumerate(keys):
        dct.set(k, str(i))
    for i, k in enumerate(keys):
        assert dct.get(k) == str(i).encode(), k
    assert sorted(dct.keys("shared/", RECURSE)) == sorted(keys)


def test_unset(dct):
    dct.set("shared/k", "v")
    r = dct.unset("shared/k")
    assert r.status == 200, r
    assert r.json() == {"result": 1, "status": "ok"}
    assert dct.get("shared/k") is None
    # Unsetting a missing key is not an error.
    r = dct.unset("shared/k")
    assert r.status == 200, r
    assert r.json() == {"result": 1, "status": "ok"}
    r = dct.unset("shared/never-there")
    assert r.json() == {"result": 1, "status": "ok"}


def test_persistence_across_restart(dicts, variant, petreld):
    client, daemon = dicts
    client.set("shared/k", "kept")
    client.set("priv/k", "mine", op={"username": "alice"})
    daemon.stop()
    again = petreld({"dicts": daemon.config["dicts"]})
    c2 = DictClient(again, "d")
    if variant in PERSISTENT_VARIANTS:
        assert c2.get("shared/k") == b"kept"
        assert c2.get("priv/k", op={"username": "alice"}) == b"mine"
    else:
        assert c2.get("shared/k") is None


# ======================= private keys =======================

def test_priv_keys_belong_to_their_user(dct):
    alice, bob = {"username": "alice"}, {"username": "bob"}
    dct.set("priv/k", "a-value", op=alice)
    assert dct.get("priv/k", op=alice) == b"a-value"
    assert dct.get("priv/k", op=bob) is None
    dct.set("priv/k", "b-value", op=bob)
    assert dct.get("priv/k", op=alice) == b"a-value"
    assert dct.get("priv/k", op=bob) == b"b-value"
    # priv/k and shared/k are different keys.
    assert dct.get("shared/k") is None
    dct.set("shared/k", "s")
    assert dct.get("priv/k", op=alice) == b"a-value"
    # Unset is per user too.
    assert dct.unset("priv/k", op=bob).json()["status"] == "ok"
    assert dct.get("priv/k", op=bob) is None
    assert dct.get("priv/k", op=alice) == b"a-value"


def test_priv_iterate_sees_only_own_keys(dct):
    # Usernames that are prefixes / patterns of one another.
    users = ["al", "alice", "a_ice", "a%ice", "a*ice", "al?ce", "al[i]ce"]
    for u in users:
        op = {"username": u}
        dct.set("priv/one", f"{u}-1", op=op)
        dct.set("priv/dir/two", f"{u}-2", op=op)
    dct.set("shared/one", "s")
    for u in users:
        op = {"username": u}
        assert dct.iterate("priv/", 0, op=op) == [("priv/one", [f"{u}-1".encode()])], u
        rows = sorted(dct.iterate("priv/", RECURSE, op=op))
        assert rows == [("priv/dir/two", [f"{u}-2".encode()]),
                        ("priv/one", [f"{u}-1".encode()])], u
        assert dct.keys("priv/dir/", RECURSE | SORT_BY_KEY, op=op) == ["priv/dir/two"], u
        assert dct.keys("priv/one", EXACT_KEY, op=op) == ["priv/one"], u
    # shared/ iteration never shows private keys, even with a username.
    assert dct.keys("shared/", RECURSE, op={"username": "alice"}) == ["shared/one"]


@pytest.mark.parametrize("op", [None, {}, {"username": ""}, {"home_dir": "/home/x"}])
def test_priv_without_username_is_400(dct, op):
    for r in (dct.lookup("priv/k", op=op),
              dct.set("priv/k", "v", op=op, expect=None),
              dct.unset("priv/k", op=op),
              dct.inc("priv/k", 1, op=op),
              dct.iterate_raw("priv/", 0, op=op),
              dct.batch([{"kind": "set", "key": "priv/k", "value": b64("v")}], op=op)):
        assert_error(r, 400)


@pytest.mark.parametrize("username", ["a/b", "bad\nname", "x" * 300])
def test_invalid_username_is_400(dct, username):
    assert_error(dct.lookup("priv/k", op={"username": username}), 400)
    assert_error(dct.set("priv/k", "v", op={"username": username}, expect=None), 400)


def test_username_does_not_affect_shared_keys(dct):
    dct.set("shared/k", "v", op={"username": "alice"})
    assert dct.get("shared/k") == b"v"
    assert dct.get("shared/k", op={"username": "bob"}) == b"v"


# ======================= iterate =======================

TREE = {
    "shared/dir/b": "2",
    "shared/dir/a": "3",
    "shared/dir/C": "1",
    "shared/dir/sub/x": "5",
    "shared/dir/sub/deeper/y": "4",
    "shared/dirx": "6",
    "shared/other/z": "7",
}


def fill_tree(dct):
    dct.batch([{"kind": "set", "key": k, "value": b64(v)} for k, v in TREE.items()])


def under(prefix, recurse):
    out = {}
    for k, v in TREE.items():
        if not k.startswith(prefix):
            continue
        if not recurse and "/" in k[len(prefix):]:
            continue
        out[k] = v.encode()
    return out


def test_iterate_direct_children(dct):
    fill_tree(dct)
    rows = dct.iterate("shared/dir/", 0)
    assert dict((k, v) for k, v in rows) == {k: [v] for k, v in under("shared/dir/", False).items()}
    assert len(rows) == 3
    assert sorted(dct.keys("shared/", 0)) == ["shared/dirx"]


def test_iterate_recurse(dct):
    fill_tree(dct)
    rows = dct.iterate("shared/dir/", RECURSE)
    assert dict(rows) == {k: [v] for k, v in under("shared/dir/", True).items()}
    assert len(rows) == 5
    assert sorted(dct.keys("shared/", RECURSE)) == sorted(TREE)
    # The path is a key prefix: without the slash, shared/dirx matches too.
    assert sorted(dct.keys("shared/dir", RECURSE)) == sorted(
        k for k in TREE if k.startswith("shared/dir"))


def test_iterate_sort_by_key(dct):
    fill_tree(dct)
    assert dct.keys("shared/dir/", SORT_BY_KEY) == sorted(under("shared/dir/", False))
    assert dct.keys("shared/dir/", SORT_BY_KEY) == ["shared/dir/C", "shared/dir/a",
                                                    "shared/dir/b"]
    assert dct.keys("shared/", RECURSE | SORT_BY_KEY) == sorted(TREE)


def test_iterate_sort_by_value(dct):
    fill_tree(dct)
    rows = dct.iterate("shared/dir/", SORT_BY_VALUE)
    assert rows == [("shared/dir/C", [b"1"]), ("shared/dir/b", [b"2"]), ("shared/dir/a", [b"3"])]
    rows = dct.iterate("shared/", RECURSE | SORT_BY_VALUE)
    assert [v[0] for _, v in rows] == [b"1", b"2", b"3", b"4", b"5", b"6", b"7"]


def test_iterate_no_value(dct):
    fill_tree(dct)
    r = dct.iterate_raw("shared/dir/", NO_VALUE)
    assert r.status == 200, r
    lines = [json.loads(x) for x in r.body.decode().splitlines()]
    assert sorted(x["key"] for x in lines) == sorted(under("shared/dir/", False))
    for x in lines:
        assert x.get("values", []) == [], x


def test_iterate_exact_key(dct):
    fill_tree(dct)
    assert dct.iterate("shared/dir/a", EXACT_KEY) == [("shared/dir/a", [b"3"])]
    # Exact: neither children nor keys it is a prefix of.
    assert dct.iterate("shared/dir", EXACT_KEY) == []
    assert dct.iterate("shared/dir/", EXACT_KEY) == []
    assert dct.iterate("shared/dir/sub/x", EXACT_KEY) == [("shared/dir/sub/x", [b"5"])]
    assert dct.iterate("shared/nothing", EXACT_KEY) == []


@pytest.mark.parametrize("flags", [
    RECURSE | SORT_BY_KEY | NO_VALUE,
    RECURSE | SORT_BY_VALUE | NO_VALUE,
    SORT_BY_KEY | NO_VALUE,
    SORT_BY_VALUE | NO_VALUE,
    RECURSE | NO_VALUE,
    RECURSE | SORT_BY_KEY,
    RECURSE | SORT_BY_VALUE,
    EXACT_KEY | NO_VALUE,
    EXACT_KEY | SORT_BY_KEY,
    EXACT_KEY | SORT_BY_VALUE,
    EXACT_KEY | SORT_BY_KEY | NO_VALUE,
])
def test_iterate_flag_combinations(dct, flags):
    fill_tree(dct)
    path = "shared/dir/"
    if flags & EXACT_KEY:
        path = "shared/dir/b"
        expected = {"shared/dir/b": b"2"}
    else:
        expected = under(path, bool(flags & RECURSE))
    rows = dct.iterate(path, flags)
    keys = [k for k, _ in rows]
    assert sorted(keys) == sorted(expected), (flags, keys)
    for k, values in rows:
        if flags & NO_VALUE:
            assert values == [], (flags, k)
        else:
            assert values == [expected[k]], (flags, k)
    if flags & SORT_BY_KEY:
        assert keys == sorted(expected), flags
    if flags & SORT_BY_VALUE:
        assert keys == sorted(expected, key=lambda k: expected[k]), flags


@pytest.mark.parametrize("flags", [SORT_BY_KEY | SORT_BY_VALUE, EXACT_KEY | RECURSE])
def test_iterate_conflicting_flags_are_400(dct, flags):
    assert_error(dct.iterate_raw("shared/", flags), 400)


def test_iterate_empty_and_missing_prefix(dct):
    fill_tree(dct)
    for flags in (0, RECURSE, SORT_BY_KEY, RECURSE | SORT_BY_VALUE, NO_VALUE):
        r = dct.iterate_raw("shared/none/", flags)
        assert r.status == 200, r
        assert r.headers["content-type"].startswith("application/x-ndjson")
        assert r.body == b"", r


def test_iterate_prefix_with_pattern_characters(dct):
    """SQL LIKE and Redis glob characters in a path match only themselves."""
    keys = ["shared/p_1/a", "shared/px1/b", "shared/p%1/c", "shared/p%xx1/d", "shared/p*/e",
            "shared/pzz/f", "shared/p?/g", "shared/pq/h", "shared/p[ab]/i", "shared/pa/j",
            "shared/p\\/k", "shared/p\\x/l"]
    dct.batch([{"kind": "set", "key": k, "value": b64(k)} for k in keys])
    for k in keys:
        prefix = k.rsplit("/", 1)[0] + "/"
        assert dct.keys(prefix, RECURSE) == [k], prefix
        assert dct.keys(prefix, 0) == [k], prefix
        assert dct.keys(k, EXACT_KEY) == [k], k


def test_iterate_ndjson_framing(dct):
    n = 3000
    dct.batch([{"kind": "set", "key": f"shared/n/{i:05d}", "value": b64(f"v{i}")}
               for i in range(n)])
    # A raw HTTP/1.1 exchange: chunked transfer, every line a JSON object.
    r = dct.iterate_raw("shared/n/", SORT_BY_KEY)
    assert r.status == 200, r
    assert r.headers["content-type"] == "application/x-ndjson" or \
        r.headers["content-type"].startswith("application/x-ndjson;"), r.headers
    lines = r.body.split(b"\n")
    assert lines[-1] == b""
    lines = lines[:-1]
    assert len(lines) == n
    for i, line in enumerate(lines):
        obj = json.loads(line)
        assert obj == {"key": f"shared/n/{i:05d}", "values": [b64(f"v{i}")]}, obj


def test_iterate_over_http_1_0(dct):
    dct.set("shared/a", "1")
    host, port = dct.daemon.backend.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        body = json.dumps({"path": "shared/", "flags": 0}).encode()
        s.sendall(b"POST " + dct.path("iterate").encode() + b" HTTP/1.0\r\n"
                  b"Content-Type: application/json\r\nContent-Length: "
                  + str(len(body)).encode() + b"\r\n\r\n" + body)
        resp = read_response(s.makefile("rb"))
    assert resp.status == 200, resp
    assert "chunked" not in resp.headers.get("transfer-encoding", "")
    assert [json.loads(x) for x in resp.body.splitlines()] == [{"key": "shared/a",
                                                                "values": [b64("1")]}]


# ======================= atomic-inc and commit-batch =======================

def test_atomic_inc_missing_key_is_not_found(dct):
    r = dct.inc("shared/counter", 5)
    assert r.status == 200, r
    assert r.json() == {"result": 0, "status": "not-found"}
    assert dct.get("shared/counter") is None  # not created


def test_atomic_inc_existing_key(dct):
    dct.set("shared/counter", "10")
    r = dct.inc("shared/counter", 5)
    assert r.status == 200, r
    assert r.json() == {"result": 1, "status": "ok"}
    assert dct.get("shared/counter") == b"15"
    assert dct.inc("shared/counter", -20).json() == {"result": 1, "status": "ok"}
    assert dct.get("shared/counter") == b"-5"
    assert dct.inc("shared/counter", 0).json()["result"] == 1
    assert dct.get("shared/counter") == b"-5"
    big = 2**62
    dct.set("shared/big", str(big))
    assert dct.inc("shared/big", 1).json()["result"] == 1
    assert dct.get("shared/big") == str(big + 1).encode()


def test_atomic_inc_priv(dct):
    alice, bob = {"username": "alice"}, {"username": "bob"}
    dct.set("priv/c", "1", op=alice)
    assert dct.inc("priv/c", 1, op=alice).json()["result"] == 1
    assert dct.inc("priv/c", 1, op=bob).json() == {"result": 0, "status": "not-found"}
    assert dct.get("priv/c", op=alice) == b"2"
    assert dct.get("priv/c", op=bob) is None


def test_atomic_inc_non_integer_fails(dct):
    dct.set("shared/text", "abc")
    r = dct.inc("shared/text", 1)
    body = assert_error(r, 500)
    assert body["result"] == -1, body
    assert dct.get("shared/text") == b"abc"


def overflow_error(text):
    return "overflow" in text or "out of range" in text


def test_atomic_inc_overflow_fails_and_changes_nothing(dct):
    # every driver refuses an increment past the signed 64-bit range (the
    # memory driver once wrapped 2**63-1 + 1 to a negative number); PostgreSQL
    # words it "bigint out of range"
    dct.set("shared/big", str(2**63 - 2))
    assert dct.inc("shared/big", 1).json() == {"result": 1, "status": "ok"}
    assert dct.get("shared/big") == str(2**63 - 1).encode()
    body = assert_error(dct.inc("shared/big", 1), 500)
    assert body["result"] == -1 and overflow_error(body["error"]), body
    assert dct.get("shared/big") == str(2**63 - 1).encode()
    dct.set("shared/small", str(-(2**63)))
    body = assert_error(dct.inc("shared/small", -1), 500)
    assert body["result"] == -1 and overflow_error(body["error"]), body
    assert dct.get("shared/small") == str(-(2**63)).encode()
    # an overflow reached only through the batch's own earlier inc fails it all
    dct.set("shared/m", str(2**63 - 10))
    r = dct.batch([
        {"kind": "atomic-inc", "key": "shared/m", "delta": 5},
        {"kind": "set", "key": "shared/z", "value": b64("z")},
        {"kind": "atomic-inc", "key": "shared/m", "delta": 5},
    ])
    body = assert_error(r, 500)
    assert body["result"] == -1 and overflow_error(body["error"]), body
    assert dct.get("shared/m") == str(2**63 - 10).encode()
    assert dct.get("shared/z") is None


def test_commit_batch_applies_everything(dct):
    dct.set("shared/old", "x")
    dct.set("shared/n", "41")
    r = dct.batch([
        {"kind": "set", "key": "shared/a", "value": b64("1")},
        {"kind": "set", "key": "shared/b", "value": b64("2")},
        {"kind": "unset", "key": "shared/old"},
        {"kind": "atomic-inc", "key": "shared/n", "delta": 1},
        {"kind": "set", "key": "priv/p", "value": b64("mine")},
    ], op={"username": "alice"})
    assert r.status == 200, r
    assert r.json() == {"result": 1, "status": "ok"}
    assert dct.get("shared/a") == b"1"
    assert dct.get("shared/b") == b"2"
    assert dct.get("shared/old") is None
    assert dct.get("shared/n") == b"42"
    assert dct.get("priv/p", op={"username": "alice"}) == b"mine"


def test_commit_batch_order_within_batch(dct):
    r = dct.batch([
        {"kind": "set", "key": "shared/k", "value": b64("1")},
        {"kind": "atomic-inc", "key": "shared/k", "delta": 4},
        {"kind": "set", "key": "shared/gone", "value": b64("x")},
        {"kind": "unset", "key": "shared/gone"},
        {"kind": "unset", "key": "shared/back"},
        {"kind": "set", "key": "shared/back", "value": b64("y")},
    ])
    assert r.json() == {"result": 1, "status": "ok"}, r
    assert dct.get("shared/k") == b"5"
    assert dct.get("shared/gone") is None
    assert dct.get("shared/back") == b"y"


def test_commit_batch_is_atomic(dct):
    dct.set("shared/keep", "kept")
    dct.set("shared/text", "not a number")
    dct.set("shared/n", "1")
    r = dct.batch([
        {"kind": "set", "key": "shared/new", "value": b64("new")},
        {"kind": "unset", "key": "shared/keep"},
        {"kind": "atomic-inc", "key": "shared/n", "delta": 1},
        {"kind": "atomic-inc", "key": "shared/text", "delta": 1},
        {"kind": "set", "key": "shared/after", "value": b64("after")},
    ])
    body = assert_error(r, 500)
    assert body["result"] == -1, body
    # Nothing of the batch was applied.
    assert dct.get("shared/new") is None
    assert dct.get("shared/after") is None
    assert dct.get("shared/keep") == b"kept"
    assert dct.get("shared/n") == b"1"
    assert dct.get("shared/text") == b"not a number"
    assert sorted(dct.keys("shared/")) == ["shared/keep", "shared/n", "shared/text"]


def test_commit_batch_inc_of_value_set_in_same_batch(dct):
    r = dct.batch([
        {"kind": "set", "key": "shared/t", "value": b64("word")},
        {"kind": "atomic-inc", "key": "shared/t", "delta": 1},
        {"kind": "set", "key": "shared/u", "value": b64("1")},
    ])
    assert_error(r, 500)
    assert dct.get("shared/t") is None
    assert dct.get("shared/u") is None


def test_commit_batch_missing_counter_is_not_found_rest_applied(dct):
    r = dct.batch([
        {"kind": "set", "key": "shared/a", "value": b64("1")},
        {"kind": "atomic-inc", "key": "shared/missing", "delta": 1},
    ])
    assert r.status == 200, r
    assert r.json() == {"result": 0, "status": "not-found"}
    assert dct.get("shared/a") == b"1"
    assert dct.get("shared/missing") is None


def test_commit_batch_empty(dct):
    r = dct.batch([])
    assert r.status == 200, r
    assert r.json() == {"result": 1, "status": "ok"}


def test_commit_batch_of_many_ops(dct):
    n = 5000
    r = dct.batch([{"kind": "set", "key": f"shared/m/{i}", "value": b64(str(i))}
                   for i in range(n)])
    assert r.json() == {"result": 1, "status": "ok"}, r
    assert len(dct.keys("shared/m/")) == n
    r = dct.batch([{"kind": "unset", "key": f"shared/m/{i}"} for i in range(0, n, 2)])
    assert r.json() == {"result": 1, "status": "ok"}, r
    assert len(dct.keys("shared/m/", NO_VALUE)) == n // 2


def test_commit_batch_limit(dct):
    ops = [{"kind": "unset", "key": f"shared/{i}"} for i in range(10001)]
    assert_error(dct.batch(ops), 400)


def test_concurrent_atomic_incs_are_exact(dct):
    """Parallel clients incrementing one counter (PostgreSQL runs them on
    several pooled connections): no increment is lost."""
    dct.set("shared/hits", "0")
    dct.set("priv/hits", "100", op={"username": "alice"})
    threads, per_thread = 8, 40
    errors = []

    def worker():
        host, port = dct.daemon.backend.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            for i in range(per_thread):
                if i % 2:
                    body = {"key": "shared/hits", "delta": 1}
                    path = dct.path("atomic-inc")
                else:
                    body = {"ops": [{"kind": "atomic-inc", "key": "shared/hits", "delta": 1},
                                    {"kind": "atomic-inc", "key": "priv/hits", "delta": -1}],
                            "op": {"username": "alice"}}
                    path = dct.path("commit-batch")
                conn.request("POST", path, body=json.dumps(body),
                             headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                data = r.read()
                if r.status != 200 or json.loads(data) != {"result": 1, "status": "ok"}:
                    errors.append((r.status, data))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))
        finally:
            conn.close()

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert errors == [], errors[:5]
    assert dct.get("shared/hits") == str(threads * per_thread).encode()
    assert dct.get("priv/hits", op={"username": "alice"}) == str(
        100 - threads * per_thread // 2).encode()


def test_key_length_limit(dct):
    longest = "shared/" + "k" * (4096 - len("shared/"))
    dct.set(longest, "v")
    assert dct.get(longest) == b"v"
    assert dct.keys(longest, EXACT_KEY) == [longest]
    assert_error(dct.set(longest + "k", "v", expect=None), 400)
    # priv/ keys count as the client writes them.
    longest_priv = "priv/" + "p" * (4096 - len("priv/"))
    dct.set(longest_priv, "v", op={"username": "alice"})
    assert dct.get(longest_priv, op={"username": "alice"}) == b"v"


def test_value_near_body_limit(dct):
    value = os.urandom(700_000)  # about 933 kB of base64, under the 1 MiB body limit
    dct.set("shared/huge", value)
    assert dct.get("shared/huge") == value
    assert dct.iterate("shared/huge", EXACT_KEY) == [("shared/huge", [value])]


# ======================= TTL =======================

def test_expire_secs_and_expire_scan(dct, variant):
    dct.set("shared/ttl", "short", op={"expire_secs": 2})
    dct.set("shared/ttl-batch", "short", op={"expire_secs": 2})
    r = dct.batch([{"kind": "set", "key": "shared/ttl-b2", "value": b64("x")}],
                  op={"expire_secs": 2})
    assert r.json()["result"] == 1, r
    dct.set("shared/forever", "long")
    dct.set("shared/long-ttl", "long", op={"expire_secs": 3600})
    dct.set("priv/ttl", "mine", op={"username": "alice", "expire_secs": 2})
    # Immediately: all there (2 s is at least 1 s in whole-second clocks).
    assert dct.get("shared/ttl") == b"short"
    assert dct.get("priv/ttl", op={"username": "alice"}) == b"mine"
    time.sleep(3.2)
    r = dct.expire_scan()
    assert r.status == 200, r
    assert r.json() == {"status": "ok"}
    live = sorted(dct.keys("shared/", RECURSE))
    if variant in TTL_VARIANTS:
        assert dct.get("shared/ttl") is None
        assert dct.get("shared/ttl-b2") is None
        assert dct.get("priv/ttl", op={"username": "alice"}) is None
        assert live == ["shared/forever", "shared/long-ttl"], live
        assert dct.keys("priv/", RECURSE, op={"username": "alice"}) == []
    else:
        assert dct.get("shared/ttl") == b"short"
    assert dct.get("shared/forever") == b"long"
    assert dct.get("shared/long-ttl") == b"long"


def test_expired_key_is_not_found_before_scan(dct, variant):
    if variant not in TTL_VARIANTS:
        pytest.skip("no TTL support")
    dct.set("shared/ttl", "5", op={"expire_secs": 1})
    time.sleep(2.2)
    assert dct.get("shared/ttl") is None
    assert dct.keys("shared/") == []
    # An expired counter counts as missing.
    assert dct.inc("shared/ttl", 1).json() == {"result": 0, "status": "not-found"}
    # Setting it again makes it live, without the old expiry.
    dct.set("shared/ttl", "7")
    time.sleep(0.1)
    assert dct.get("shared/ttl") == b"7"


def test_expire_scan_on_empty_dict(dct):
    r = dct.expire_scan()
    assert r.status == 200, r
    assert r.json() == {"status": "ok"}


def test_negative_expire_secs_is_400(dct):
    assert_error(dct.set("shared/k", "v", op={"expire_secs": -1}, expect=None), 400)


# ======================= OpSettings =======================

def test_empty_op_is_same_as_no_op(dct):
    dct.set("shared/k", "v", op={})
    assert dct.lookup("shared/k", op={}).json() == dct.lookup("shared/k").json()
    assert dct.iterate("shared/", 0, op={}) == dct.iterate("shared/", 0)
    assert dct.inc("shared/none", 1, op={}).json() == {"result": 0, "status": "not-found"}
    assert dct.unset("shared/k", op={}).json() == {"result": 1, "status": "ok"}
    assert dct.batch([], op={}).json() == {"result": 1, "status": "ok"}
    # An empty op sets no expiry.
    assert dct.get("shared/k", op={}) is None


# ======================= malformed requests =======================

def test_malformed_json_is_400(dct):
    for op in ("lookup", "iterate", "set", "unset", "atomic-inc", "commit-batch",
               "expire-scan"):
        for body in ("{", "not json", "[]", "\"string\"", "{\"key\": }", "null", "{}}",
                     "{\"key\": \"shared/a\", \"key\": \"shared/b\"}"):
            assert_error(dct.post(op, body, headers={"Content-Type": "application/json"}), 400)
    # An empty body reads as {}: fine for expire-scan, missing fields elsewhere.
    assert dct.post("expire-scan", "").json() == {"status": "ok"}
    for op in ("lookup", "iterate", "set", "unset", "atomic-inc", "commit-batch"):
        assert_error(dct.post(op, ""), 400)


def test_bad_base64_is_400(dct):
    for value in ("!!!", "abc", "a===", "YQ", "Y Q==", "\u00e9"):
        assert_error(dct.post("set", {"key": "shared/k", "value": value}), 400)
        assert_error(dct.batch([{"kind": "set", "key": "shared/k", "value": value}]), 400)
    assert dct.get("shared/k") is None


def test_unknown_op_kind_is_400(dct):
    for kind in ("delete", "SET", "", "inc"):
        assert_error(dct.batch([{"kind": kind, "key": "shared/k"}]), 400)
    assert_error(dct.batch([{"key": "shared/k", "value": b64("x")}]), 400)  # no kind
    assert_error(dct.batch(["set"]), 400)
    assert_error(dct.post("commit-batch", {"ops": {"kind": "set"}}), 400)
    assert_error(dct.post("commit-batch", {}), 400)
    # A bad op anywhere rejects the whole batch before anything is applied.
    r = dct.batch([{"kind": "set", "key": "shared/first", "value": b64("x")},
                   {"kind": "explode", "key": "shared/k"}])
    assert_error(r, 400)
    assert dct.get("shared/first") is None


@pytest.mark.parametrize("flags", [32, 64, 255, -1, 1 << 40, "1", 1.5, True, [1], {}])
def test_unknown_flags_are_400(dct, flags):
    assert_error(dct.post("iterate", {"path": "shared/", "flags": flags}), 400)


def test_flags_default_to_zero(dct):
    dct.set("shared/a", "1")
    dct.set("shared/b/c", "2")
    for body in ({"path": "shared/"}, {"path": "shared/", "flags": None}):
        r = dct.post("iterate", body)
        assert r.status == 200, r
        assert [json.loads(x)["key"] for x in r.body.decode().splitlines()] == ["shared/a"]


@pytest.mark.parametrize("key", ["k", "", "/shared/k", "Shared/k", "private/k", "sharedk",
                                 "shared", "priv", "shared/a\nb", "shared/\u0001",
                                 "shared/" + "x" * 5000])
def test_bad_keys_are_400(dct, key):
    op = {"username": "alice"}
    assert_error(dct.lookup(key, op=op), 400)
    assert_error(dct.set(key, "v", op=op, expect=None), 400)
    assert_error(dct.unset(key, op=op), 400)
    assert_error(dct.inc(key, 1, op=op), 400)
    assert_error(dct.batch([{"kind": "set", "key": key, "value": b64("v")}], op=op), 400)
    assert_error(dct.iterate_raw(key, 0, op=op), 400)


def test_missing_and_mistyped_fields_are_400(dct):
    for op, body in [
        ("lookup", {}), ("lookup", {"key": 5}), ("lookup", {"key": None}),
        ("set", {"key": "shared/k"}), ("set", {"value": b64("v")}),
        ("set", {"key": "shared/k", "value": 5}),
        ("unset", {}), ("atomic-inc", {"key": "shared/k"}),
        ("atomic-inc", {"key": "shared/k", "delta": "1"}),
        ("atomic-inc", {"key": "shared/k", "delta": 1.5}),
        ("iterate", {}), ("iterate", {"path": 1}),
        ("lookup", {"key": "shared/k", "op": "alice"}),
        ("lookup", {"key": "shared/k", "op": {"username": 5}}),
        ("lookup", {"key": "shared/k", "op": {"expire_secs": "10"}}),
        ("lookup", {"key": "shared/k", "op": {"colour": "blue"}}),
    ]:
        assert_error(dct.post(op, body), 400)


# ======================= sql: table maps and multi-value lookups =======================

def sql_exec(request, cfg, statements):
    """Runs SQL against the database behind an sql dict config; returns the
    rows of the last statement as lists of strings."""
    if cfg["backend"] == "sqlite":
        with sqlite3.connect(cfg["path"]) as db:
            cur = None
            for st in statements.split(";\n"):
                if st.strip():
                    cur = db.execute(st)
            rows = cur.fetchall() if cur is not None and cur.description else []
        db.close()
        return [[None if c is None else str(c) for c in row] for row in rows]
    pg = request.getfixturevalue("pgsql_server")
    db = dict(x.split("=", 1) for x in cfg["connect"].split())["dbname"]
    out = pg.psql(statements, db=db)
    return [line.split("|") for line in out.splitlines() if line]


QUOTA_DDL = """CREATE TABLE quota (username TEXT NOT NULL PRIMARY KEY, bytes BIGINT, messages BIGINT);
INSERT INTO quota VALUES ('alice', 1024, 7);
INSERT INTO quota VALUES ('bob', 5, NULL);
INSERT INTO quota VALUES ('a_ice', 99, 9);
CREATE TABLE quota_shared (username TEXT NOT NULL, kind TEXT NOT NULL, amount BIGINT,
                           PRIMARY KEY (username, kind))"""

QUOTA_MAPS = [
    {"pattern": "priv/quota/storage", "table": "quota", "username_field": "username",
     "value_fields": ["bytes", "messages"]},
    {"pattern": "shared/q/$user/$kind", "table": "quota_shared",
     "fields": {"user": "username", "kind": "kind"}, "value_field": "amount"},
]


@pytest.fixture
def sql_mapped(variant, request, petreld, tmp_path):
    cfg = variant_config(variant, request, tmp_path)
    sql_exec(request, cfg, QUOTA_DDL)
    cfg["maps"] = QUOTA_MAPS
    daemon = petreld({"dicts": {"d": cfg}})
    return DictClient(daemon, "d", variant), lambda st: sql_exec(request, cfg, st)


@pytest.mark.parametrize("variant", ["sql-sqlite", "sql-pgsql"], indirect=True)
def test_sql_multi_value_lookup(sql_mapped):
    dct, _ = sql_mapped
    alice, bob = {"username": "alice"}, {"username": "bob"}
    r = dct.lookup("priv/quota/storage", op=alice)
    assert r.status == 200, r
    assert r.json() == {"found": True, "values": [b64("1024"), b64("7")]}
    # SQL NULL reads as an empty value.
    assert dct.lookup("priv/quota/storage", op=bob).json() == {"found": True,
                                                                "values": [b64("5"), ""]}
    body = dct.lookup("priv/quota/storage", op={"username": "carol"}).json()
    assert body["found"] is False and body.get("values", []) == [], body
    # The username is a bound value, not a pattern.
    body = dct.lookup("priv/quota/storage", op={"username": "a%"}).json()
    assert body["found"] is False, body
    # Iterate returns every value too.
    for flags in (RECURSE, 0, RECURSE | SORT_BY_KEY, RECURSE | SORT_BY_VALUE):
        assert dct.iterate("priv/quota/", flags, op=alice) == [
            ("priv/quota/storage", [b"1024", b"7"])], flags
    assert dct.iterate("priv/quota/storage", EXACT_KEY, op=alice) == [
        ("priv/quota/storage", [b"1024", b"7"])]
    assert dct.iterate("priv/", RECURSE | NO_VALUE, op=alice) == [("priv/quota/storage", [])]
    assert dct.iterate("priv/quota/", RECURSE, op={"username": "carol"}) == []


@pytest.mark.parametrize("variant", ["sql-sqlite", "sql-pgsql"], indirect=True)
def test_sql_multi_value_map_is_read_only(sql_mapped):
    dct, run = sql_mapped
    alice = {"username": "alice"}
    body = assert_error(dct.set("priv/quota/storage", "1", op=alice, expect=None), 500)
    assert body["result"] == -1, body
    # The whole batch fails, the other writes included.
    r = dct.batch([{"kind": "set", "key": "shared/plain", "value": b64("x")},
                   {"kind": "atomic-inc", "key": "priv/quota/storage", "delta": 1}], op=alice)
    assert_error(r, 500)
    assert dct.get("shared/plain") is None
    assert run("SELECT bytes, messages FROM quota WHERE username = 'alice'") == [["1024", "7"]]


@pytest.mark.parametrize("variant", ["sql-sqlite", "sql-pgsql"], indirect=True)
def test_sql_read_write_map(sql_mapped):
    dct, run = sql_mapped
    dct.set("shared/q/alice/bytes", "10")
    dct.set("shared/q/alice/messages", "2")
    dct.set("shared/q/a_ice/bytes", "3")
    dct.set("shared/other", "plain")
    assert dct.get("shared/q/alice/bytes") == b"10"
    assert dct.inc("shared/q/alice/bytes", 5).json() == {"result": 1, "status": "ok"}
    assert dct.inc("shared/q/nobody/bytes", 5).json() == {"result": 0, "status": "not-found"}
    assert dct.get("shared/q/alice/bytes") == b"15"
    rows = sorted(run("SELECT username, kind, amount FROM quota_shared"))
    assert rows == [["a_ice", "bytes", "3"], ["alice", "bytes", "15"],
                    ["alice", "messages", "2"]], rows
    # Mapped keys are not in the default table; plain keys are.
    assert run("SELECT key FROM dict ORDER BY key") == [["shared/other"]]
    assert sorted(dct.keys("shared/q/", RECURSE)) == ["shared/q/a_ice/bytes",
                                                      "shared/q/alice/bytes",
                                                      "shared/q/alice/messages"]
    assert sorted(dct.keys("shared/q/alice/", 0)) == ["shared/q/alice/bytes",
                                                      "shared/q/alice/messages"]
    assert dct.keys("shared/q/a_ice/", RECURSE) == ["shared/q/a_ice/bytes"]
    assert dct.iterate("shared/q/alice/bytes", EXACT_KEY) == [("shared/q/alice/bytes", [b"15"])]
    assert sorted(dct.keys("shared/", RECURSE)) == ["shared/other", "shared/q/a_ice/bytes",
                                                    "shared/q/alice/bytes",
                                                    "shared/q/alice/messages"]
    assert dct.unset("shared/q/alice/messages").json() == {"result": 1, "status": "ok"}
    assert dct.get("shared/q/alice/messages") is None
    assert sorted(run("SELECT username, kind FROM quota_shared")) == [["a_ice", "bytes"],
                                                                      ["alice", "bytes"]]
    # A key with more segments than the pattern goes to the default table.
    dct.set("shared/q/alice/bytes/extra", "x")
    assert run("SELECT key FROM dict ORDER BY key") == [["shared/other"],
                                                       ["shared/q/alice/bytes/extra"]]


# ======================= network drivers: server down, connection lost =======================

@pytest.mark.parametrize("variant", ["kvstore", "sql-pgsql"], indirect=True)
def test_server_down_fails_operations_then_recovers(variant, petreld, tmp_path):
    """A dict whose server is down still opens; its operations fail (500,
    writes with result -1) without hanging, and work once the server is up."""
    port = free_port()
    if variant == "kvstore":
        cfg = {"driver": "kvstore", "address": f"127.0.0.1:{port}", "prefix": "down:",
               "timeout": "2s"}
    else:
        cfg = {"driver": "sql", "backend": "pgsql", "connect_timeout": "2s",
               "connect": f"host=127.0.0.1 port={port} user=postgres dbname=postgres"}
    d = petreld({"dicts": {"d": cfg}})
    dct = DictClient(d, "d")
    assert d.get("backend", "/api/backend/health").status == 200
    started = time.monotonic()
    assert_error(dct.lookup("shared/a"), 500)
    body = assert_error(dct.set("shared/a", "1", expect=None), 500)
    assert body["result"] == -1, body
    body = assert_error(dct.batch([{"kind": "unset", "key": "shared/a"}]), 500)
    assert body["result"] in (-1, -2), body
    r = dct.iterate_raw("shared/", RECURSE)
    assert r.status == 500 or b'"error"' in r.body, r
    assert time.monotonic() - started < 10

    if variant == "kvstore":
        server = start_redis(tmp_path / "late-redis", port=port)
        try:
            # Reconnects are tried lazily with a backoff of at most 5 s.
            wait_for(lambda: dct.set("shared/a", "1", expect=None).status == 200, timeout=15,
                     interval=0.2, what="kvstore to reconnect")
            assert dct.get("shared/a") == b"1"
            assert dct.keys("shared/") == ["shared/a"]
        finally:
            d.stop()
            stop_redis(server)


def test_kvstore_connection_lost_mid_iterate(petreld, tmp_path):
    """Redis goes away while rows are streaming: an `error` line ends the
    stream (clients must look at every line)."""
    server = start_redis(tmp_path / "redis")
    try:
        _fill_redis(server, "mid:", 200_000)
        d = petreld({"dicts": {"d": {"driver": "kvstore", "address": server.address,
                                     "prefix": "mid:", "timeout": "2s"}}})
        _expect_error_line_after(d, lambda: stop_redis(server))
    finally:
        stop_redis(server)


def test_pgsql_connection_lost_mid_iterate(petreld, request, tmp_path):
    pg = request.getfixturevalue("pgsql_server")
    cfg = variant_config("sql-pgsql", request, tmp_path)
    db = dict(x.split("=", 1) for x in cfg["connect"].split())["dbname"]
    _fill_pgsql(pg, db, 200_000)
    d = petreld({"dicts": {"d": cfg}})

    def kill_backends():
        pg.psql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                f"WHERE datname = '{db}' AND pid <> pg_backend_pid()")
    _expect_error_line_after(d, kill_backends)


def _expect_error_line_after(d, break_server):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    host, port = d.backend.rsplit(":", 1)
    s.settimeout(30)
    s.connect((host, int(port)))
    try:
        s.sendall(_post_bytes("/api/backend/dict/d/iterate",
                              json.dumps({"path": "shared/rss/", "flags": RECURSE}).encode()))
        time.sleep(0.5)  # the stream starts and stalls on the unread socket
        break_server()
        time.sleep(0.5)
        resp = read_response(s.makefile("rb"))
    finally:
        s.close()
    assert resp.status == 200, resp
    data = resp.body
    lines = data.decode().splitlines()
    assert 0 < len(lines) < 200_000, len(lines)
    for line in lines[:-1]:
        assert "error" not in json.loads(line), line
    last = json.loads(lines[-1])
    assert set(last) == {"error"} and last["error"], last
    assert d.get("backend", "/api/backend/health").status == 200


# ======================= closing: 503 =======================

def _raw(addr):
    host, port = addr.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def _post_bytes(path, body):
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def test_dict_request_while_closing_is_503(petreld):
    """SIGTERM arrives while a slow request (an iterate whose client does not
    read) keeps the daemon draining and while a keep-alive connection is
    mid-request: the request completed on that open connection finds the
    dict closed and gets 503; the slow request still completes."""
    d = petreld({"dicts": {"d": {"driver": "memory"}}, "shutdown_timeout": "20s"})
    dc = DictClient(d, "d")
    value = b64(os.urandom(200_000))
    for chunk in range(25):
        r = dc.batch([{"kind": "set", "key": f"shared/big/{chunk}-{i:05d}", "value": value}
                      for i in range(3)])
        assert r.json()["result"] == 1, r
    # ~21 MB of NDJSON: far more than the socket buffers (tcp_wmem max 4 MB here)
    # plus the stream's high-water mark.

    # The slow request: an iterate whose reader stalls.
    slow = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    host, port = d.backend.rsplit(":", 1)
    slow.settimeout(30)
    slow.connect((host, int(port)))
    slow.sendall(_post_bytes(dc.path("iterate"),
                             json.dumps({"path": "shared/big/", "flags": 0}).encode()))
    slow.recv(1024)  # the stream has started

    # A keep-alive connection: one answered request, then a second one whose
    # body is still on its way when SIGTERM arrives.
    ka = _raw(d.backend)
    f = ka.makefile("rb")
    ka.sendall(_post_bytes(dc.path("lookup"), b'{"key": "shared/big/0-00000"}'))
    first = read_response(f)
    assert first.status == 200 and first.json()["found"] is True, first
    body = json.dumps({"key": "shared/big/0-00001"}).encode()
    head = _post_bytes(dc.path("lookup"), body)[:-len(body)]
    ka.sendall(head + body[:5])
    time.sleep(0.3)  # the head is read; the request waits for its body

    d.signal(signal.SIGTERM)
    wait_for(lambda: "stopping" in d.stderr(), timeout=10, what="petreld to log stopping")
    # New connections are refused now.
    with pytest.raises(OSError):
        http_request(d.backend, "POST", dc.path("lookup"), body={"key": "shared/a"}, timeout=2)

    ka.sendall(body[5:])
    resp = read_response(f)
    assert resp.status == 503, resp
    assert "closed" in resp.json()["error"], resp  # from the dict, not the HTTP layer
    assert resp.headers.get("connection", "").lower() == "close", resp.headers
    assert f.read() == b""  # the server closed the connection after the reply
    ka.close()

    # The slow request was not cut short: it still streams to the end.
    slow.settimeout(30)
    received, tail = 0, b""
    while True:
        chunk = slow.recv(1 << 20)
        if not chunk:
            break
        received += len(chunk)
        tail = (tail + chunk)[-16:]
    slow.close()
    assert received > 10_000_000, received
    assert tail.endswith(b"0\r\n\r\n"), tail
    assert d.wait(timeout=30) == 0, d.stderr()
    d.assert_clean()


# ======================= memory: 1,000,000 keys over HTTP =======================

RSS_KEYS = 1_000_000
RSS_LIMIT_KB = 64 * 1024


def _is_asan(binary):
    with open(binary, "rb") as f:
        return b"__asan_init" in f.read()


def _status_kb(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"{field} not in /proc/{pid}/status")


def _fill_sqlite(path, n):
    """The default table exactly as dict-sql.c creates it, filled directly."""
    db = sqlite3.connect(path)
    db.executescript(
        'CREATE TABLE IF NOT EXISTS "dict" ("key" TEXT PRIMARY KEY NOT NULL, '
        '"value" BLOB NOT NULL, "expires_at" BIGINT NULL) WITHOUT ROWID;\n'
        'CREATE INDEX IF NOT EXISTS "dict_expires_at" ON "dict" ("expires_at") '
        'WHERE "expires_at" IS NOT NULL;')
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=OFF")
    db.executemany('INSERT INTO "dict" ("key", "value") VALUES (?, ?)',
                   ((f"shared/rss/{i:07d}", b"value-%07d" % i) for i in range(n)))
    db.commit()
    db.close()


def _fill_redis(rs, prefix, n):
    def cmd(*parts):
        out = [b"*%d\r\n" % len(parts)]
        for p in parts:
            out.append(b"$%d\r\n%s\r\n" % (len(p), p))
        return b"".join(out)
    pfx = prefix.encode()
    rs.pipe(b"".join(cmd(b"SET", pfx + b"shared/rss/%07d" % i, b"value-%07d" % i)
                     for i in range(n)))


def _fill_pgsql(pg, db, n):
    pg.psql('CREATE TABLE IF NOT EXISTS "dict" ("key" TEXT COLLATE "C" PRIMARY KEY, '
            '"value" BYTEA NOT NULL, "expires_at" BIGINT NULL);'
            f"INSERT INTO dict (key, value) SELECT 'shared/rss/' || lpad(i::text, 7, '0'), "
            f"convert_to('value-' || lpad(i::text, 7, '0'), 'UTF8') "
            f"FROM generate_series(0, {n - 1}) AS i; ANALYZE dict", db=db)


@pytest.mark.slow
@pytest.mark.parametrize("variant, flags", [
    ("sql-sqlite", RECURSE | SORT_BY_KEY),
    ("sql-pgsql", RECURSE | SORT_BY_KEY),
    ("kvstore", RECURSE),
], indirect=["variant"])
def test_iterate_million_keys_in_constant_memory(variant, flags, request, petreld, tmp_path):
    """Streams 1,000,000 rows over HTTP while petreld's peak RSS (VmHWM) stays
    under 64 MB: the dict is pulled only as fast as the client reads."""
    cfg = variant_config(variant, request, tmp_path)
    started = time.monotonic()
    if variant == "sql-sqlite":
        _fill_sqlite(cfg["path"], RSS_KEYS)
    elif variant == "sql-pgsql":
        db = dict(x.split("=", 1) for x in cfg["connect"].split())["dbname"]
        _fill_pgsql(request.getfixturevalue("pgsql_server"), db, RSS_KEYS)
    else:
        _fill_redis(request.getfixturevalue("redis_server"), cfg["prefix"], RSS_KEYS)
    filled = time.monotonic()
    env = None
    if _is_asan(PETRELD):
        # ASan keeps up to 256 MB of freed memory in quarantine, which would
        # be measured as petreld's: keep it small, the checks stay on.
        env = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1:quarantine_size_mb=4:"
                               "thread_local_quarantine_size_kb=256"}
    d = petreld({"dicts": {"d": cfg}}, env=env)
    pid = d.pid
    base_kb = _status_kb(pid, "VmHWM")

    samples = []
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            try:
                samples.append(_status_kb(pid, "VmRSS"))
            except (OSError, AssertionError):
                return
            stop.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    host, port = d.backend.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    count = 0
    distinct = set()
    last_key = ""
    try:
        conn.request("POST", "/api/backend/dict/d/iterate",
                     body=json.dumps({"path": "shared/rss/", "flags": flags}),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200, resp.read()[:500]
        assert resp.getheader("Content-Type", "").startswith("application/x-ndjson")
        for line in resp:
            obj = json.loads(line)
            assert "error" not in obj, obj
            key = obj["key"]
            count += 1
            if flags & SORT_BY_KEY:
                assert key > last_key, (last_key, key)
                last_key = key
            else:
                distinct.add(key)
            if count % 100_000 == 0:
                i = int(key.rsplit("/", 1)[1])
                assert unb64(obj["values"][0]) == b"value-%07d" % i, obj
    finally:
        conn.close()
        stop.set()
        sampler.join()
    streamed = time.monotonic()
    peak_kb = _status_kb(pid, "VmHWM")
    print(f"\n{variant} flags={flags}: {count} rows, fill {filled - started:.1f}s, "
          f"stream {streamed - filled:.1f}s, VmHWM {base_kb} kB at start, {peak_kb} kB peak, "
          f"max sampled VmRSS {max(samples, default=0)} kB")
    if flags & SORT_BY_KEY:
        assert count == RSS_KEYS, count
    else:
        # Redis SCAN may report a key twice while its table is resized.
        assert len(distinct) == RSS_KEYS and count >= RSS_KEYS, (len(distinct), count)
    assert peak_kb < RSS_LIMIT_KB, f"petreld peak RSS {peak_kb} kB >= {RSS_LIMIT_KB} kB"
