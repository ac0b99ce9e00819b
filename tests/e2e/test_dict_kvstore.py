"""The kvstore dict driver (Redis protocol through hiredis) end to end: a
throwaway redis-server per test on a free loopback port, petreld with a
kvstore dict, checks over HTTP and with redis-cli.

Covers configuration, values, native TTL, atomic-inc, all-or-nothing
batches (Lua script), iterate flags and SCAN streaming, priv/ keys, a
server that is down, frozen, unresponsive or restarted, AUTH/SELECT over a
Unix socket, host names, a mid-stream iterate error and shutdown with
requests in flight.
"""

import base64
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import free_port, run_petreld, to_yaml, wait_for

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"

pytestmark = pytest.mark.skipif(not os.path.exists(REDIS_SERVER),
                                reason="redis-server is not installed")

RECURSE, SORT_BY_KEY, SORT_BY_VALUE, NO_VALUE, EXACT_KEY = 1, 2, 4, 8, 16
PREFIX = "petrel:"
DB = 1


def b64(data):
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode()


def unb64(text):
    return base64.b64decode(text, validate=True)


# ---------- a throwaway redis-server ----------

class Redis:
    def __init__(self, workdir, port=None, extra=()):
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.extra = list(extra)
        self.password = None
        if "--requirepass" in self.extra:
            self.password = self.extra[self.extra.index("--requirepass") + 1]
        self.stopped = False  # SIGSTOPped

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    @property
    def pidfile(self):
        return self.dir / "redis.pid"

    def pid(self):
        try:
            return int(self.pidfile.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def start(self):
        subprocess.run([REDIS_SERVER, "--bind", "127.0.0.1", "--port", str(self.port), "--dir",
                        str(self.dir), "--save", "", "--appendonly", "no", "--daemonize", "yes",
                        "--pidfile", str(self.pidfile), "--logfile", str(self.dir / "redis.log"),
                        *self.extra],
                       check=True, capture_output=True, timeout=30)
        wait_for(lambda: self.cli("PING", check=False).strip() == "PONG", timeout=15,
                 what="redis-server PING")
        wait_for(lambda: self.pid() is not None, timeout=5, what="redis pidfile")
        return self

    def cli(self, *args, check=True, db=None, input=None):
        cmd = [REDIS_CLI, "-h", "127.0.0.1", "-p", str(self.port)]
        if self.password:
            cmd += ["-a", self.password, "--no-auth-warning"]
        if db is not None:
            cmd += ["-n", str(db)]
        proc = subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=120,
                              input=input)
        if check and proc.returncode != 0:
            raise RuntimeError(f"redis-cli {args}: {proc.stdout}{proc.stderr}")
        return proc.stdout

    def db(self, *args):
        """redis-cli in the dict's database; stdout without the final newline."""
        return self.cli(*args, db=DB).rstrip("\n")

    def freeze(self):
        os.kill(self.pid(), signal.SIGSTOP)
        self.stopped = True

    def thaw(self):
        os.kill(self.pid(), signal.SIGCONT)
        self.stopped = False

    def stop(self):
        if self.stopped:
            self.thaw()
        pid = self.pid()
        self.cli("shutdown", "nosave", check=False)
        deadline = time.monotonic() + 10
        while pid is not None and time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            if pid is not None:
                os.kill(pid, signal.SIGKILL)  # the server this test started
        try:
            self.pidfile.unlink()
        except FileNotFoundError:
            pass


@pytest.fixture
def redis(tmp_path):
    servers = []

    def make(**kw):
        r = Redis(tmp_path / f"redis{len(servers)}", **kw).start()
        servers.append(r)
        return r

    first = make()
    first.make = make
    yield first
    for r in servers:
        if r.pid() is not None:
            r.stop()


# ---------- petreld with a kvstore dict ----------

class KV:
    """The dict endpoints of dict `name` on a petreld."""

    def __init__(self, daemon, name="kv"):
        self.daemon = daemon
        self.name = name

    def post(self, op, body, **kw):
        return self.daemon.post("backend", f"/api/backend/dict/{self.name}/{op}", body=body, **kw)

    @staticmethod
    def _op(body, op):
        if op:
            body["op"] = op
        return body

    def lookup(self, key, op=None):
        return self.post("lookup", self._op({"key": key}, op))

    def get(self, key, op=None):
        r = self.lookup(key, op)
        assert r.status == 200, r
        body = r.json()
        if not body["found"]:
            return None
        assert len(body["values"]) == 1, body
        return unb64(body["values"][0])

    def set(self, key, value, op=None):
        return self.post("set", self._op({"key": key, "value": b64(value)}, op))

    def unset(self, key, op=None):
        return self.post("unset", self._op({"key": key}, op))

    def inc(self, key, delta, op=None):
        return self.post("atomic-inc", self._op({"key": key, "delta": delta}, op))

    def batch(self, ops, op=None):
        return self.post("commit-batch", self._op({"ops": ops}, op))

    def iterate_lines(self, path, flags=0, op=None, timeout=120):
        r = self.post("iterate", self._op({"path": path, "flags": flags}, op), timeout=timeout)
        return r, [json.loads(line) for line in r.body.decode().splitlines()]

    def iterate(self, path, flags=0, op=None):
        r, lines = self.iterate_lines(path, flags, op)
        assert r.status == 200, r
        assert r.headers["content-type"].startswith("application/x-ndjson"), r.headers
        for obj in lines:
            assert "error" not in obj, obj
        return [(o["key"], [unb64(v) for v in o["values"]]) for o in lines]

    def keys(self, path, flags=0, op=None):
        return [k for k, _ in self.iterate(path, flags, op)]


def kv_config(redis, **opts):
    cfg = {"driver": "kvstore", "address": redis.address, "prefix": PREFIX, "db": DB,
           "timeout": "2s"}
    cfg.update(opts)
    return cfg


def start(petreld, redis, extra_dicts=None, **opts):
    dicts = {"kv": kv_config(redis, **opts)}
    dicts.update(extra_dicts or {})
    d = petreld({"dicts": dicts})
    return KV(d), d


def assert_500(resp, words=None):
    assert resp.status == 500, resp
    err = resp.json()["error"]
    assert isinstance(err, str) and err, resp
    if words:
        assert words in err, err
    return err


def healthy(d):
    return d.get("backend", "/api/backend/health").status == 200


# ---------- configuration ----------

def test_registered_and_alias(petreld, redis):
    kv, d = start(petreld, redis, extra_dicts={"alias": {"driver": "redis",
                                                         "address": redis.address}})
    assert "kvstore" in d.get("backend", "/api/backend/dict/drivers").json()["drivers"]
    assert kv.set("shared/x", "1").status == 200
    alias = KV(d, "alias")
    assert alias.set("shared/y", "2").status == 200
    assert redis.cli("GET", "shared/y").strip() == "2"  # db 0, no prefix by default


@pytest.mark.parametrize("entry, line_key, words", [
    ({"driver": "kvstore", "adress": "127.0.0.1:6379"}, "adress", "unknown key"),
    ({"driver": "kvstore", "address": "127.0.0.1:99999"}, "address", "port"),
    ({"driver": "kvstore", "address": "::1:6379"}, "address", "brackets"),
    ({"driver": "kvstore", "address": "unix:"}, "address", "unix socket path"),
    ({"driver": "kvstore", "address": "redis host:6379"}, "address", "expected host:port"),
    ({"driver": "kvstore", "db": -1}, "db", "db"),
    ({"driver": "kvstore", "timeout": "soon"}, "timeout", "timeout"),
    ({"driver": "kvstore", "username": "bob"}, "username", "password"),
])
def test_config_errors(tmp_path, entry, line_key, words):
    path = tmp_path / "petrel.yaml"
    path.write_text(to_yaml({"allow_root": True, "dicts": {"kv": entry}}) + "\n")
    proc = run_petreld(["-c", str(path)])
    assert proc.returncode == 2, proc.stderr
    lines = path.read_text().splitlines()
    lineno = next(i + 1 for i, l in enumerate(lines) if l.strip().startswith(line_key + ":"))
    assert f"{path}:{lineno}:" in proc.stderr, proc.stderr
    assert words in proc.stderr, proc.stderr


def test_check_config_accepts_full_entry(tmp_path):
    path = tmp_path / "petrel.yaml"
    path.write_text(to_yaml({"allow_root": True, "dicts": {"kv": {
        "driver": "kvstore", "address": "unix:/run/redis/redis.sock", "prefix": "p:",
        "db": 3, "username": "petrel", "password": "hunter2", "timeout": "250ms"}}}) + "\n")
    proc = run_petreld(["-c", str(path), "--check-config"])
    assert proc.returncode == 0, proc.stderr
    assert "hunter2" not in proc.stdout + proc.stderr


# ---------- values ----------

def test_set_lookup_unset_binary(petreld, redis):
    kv, _ = start(petreld, redis)
    value = bytes(range(256)) + b"\x00tail"
    assert kv.set("shared/bin", value).json() == {"result": 1, "status": "ok"}
    assert kv.get("shared/bin") == value
    # stored under prefix, in the configured db, byte for byte
    assert redis.db("EXISTS", PREFIX + "shared/bin") == "1"
    assert redis.db("STRLEN", PREFIX + "shared/bin") == str(len(value))
    assert redis.cli("EXISTS", PREFIX + "shared/bin").strip() == "0"  # not in db 0
    assert kv.set("shared/bin", "").status == 200
    assert kv.get("shared/bin") == b""
    r = kv.unset("shared/bin")
    assert r.status == 200 and r.json()["status"] == "ok", r
    assert kv.get("shared/bin") is None
    r = kv.unset("shared/bin")  # missing key: still ok
    assert r.status == 200 and r.json()["status"] == "ok", r
    r = kv.lookup("shared/never")
    assert r.status == 200 and r.json() == {"found": False, "values": []}, r


def test_non_string_key_is_an_error_not_a_crash(petreld, redis):
    kv, d = start(petreld, redis)
    redis.db("RPUSH", PREFIX + "shared/list", "a")
    assert_500(kv.lookup("shared/list"), "WRONGTYPE")
    r = kv.inc("shared/list", 1)
    assert_500(r, "non-string")
    assert kv.set("shared/list", "now a string").status == 200  # SET replaces any type
    assert kv.get("shared/list") == b"now a string"
    assert healthy(d)


def test_ttl_is_native_and_expires(petreld, redis):
    kv, _ = start(petreld, redis)
    assert kv.set("shared/ttl", "v", op={"expire_secs": 1}).status == 200
    assert kv.set("shared/keep", "v").status == 200
    ttl = int(redis.db("PTTL", PREFIX + "shared/ttl"))
    assert 0 < ttl <= 1000, ttl
    assert redis.db("TTL", PREFIX + "shared/keep") == "-1"
    assert kv.get("shared/ttl") == b"v"
    r = kv.post("expire-scan", {})
    assert r.status == 200 and r.json() == {"status": "ok"}, r
    wait_for(lambda: kv.get("shared/ttl") is None, timeout=5, what="TTL expiry")
    assert redis.db("EXISTS", PREFIX + "shared/ttl") == "0"
    assert kv.get("shared/keep") == b"v"
    # a batch's expire_secs applies to its sets; a later plain set clears the TTL
    r = kv.batch([{"kind": "set", "key": "shared/t2", "value": b64("x")},
                  {"kind": "set", "key": "shared/t3", "value": b64("y")}],
                 op={"expire_secs": 100})
    assert r.status == 200, r
    assert 90 <= int(redis.db("TTL", PREFIX + "shared/t3")) <= 100
    assert kv.set("shared/t3", "z").status == 200
    assert redis.db("TTL", PREFIX + "shared/t3") == "-1"
    # a huge TTL is clamped, never an error half-way through a batch
    assert kv.set("shared/forever", "v", op={"expire_secs": 2 ** 62}).status == 200
    assert int(redis.db("TTL", PREFIX + "shared/forever")) > 10 ** 11


# ---------- atomic-inc ----------

def test_atomic_inc(petreld, redis):
    kv, _ = start(petreld, redis)
    r = kv.inc("shared/n", 5)
    assert r.status == 200 and r.json() == {"result": 0, "status": "not-found"}, r
    assert redis.db("EXISTS", PREFIX + "shared/n") == "0"  # not created
    assert kv.set("shared/n", "10").status == 200
    r = kv.inc("shared/n", 5)
    assert r.status == 200 and r.json() == {"result": 1, "status": "ok"}, r
    assert kv.inc("shared/n", -20).status == 200
    assert kv.get("shared/n") == b"-5"
    assert redis.db("GET", PREFIX + "shared/n") == "-5"  # decimal text
    # 64-bit edges, checked exactly
    assert kv.set("shared/big", str(2 ** 63 - 2)).status == 200
    assert kv.inc("shared/big", 1).status == 200
    assert kv.get("shared/big") == str(2 ** 63 - 1).encode()
    assert_500(kv.inc("shared/big", 1), "overflow")
    assert kv.get("shared/big") == str(2 ** 63 - 1).encode()
    assert kv.inc("shared/big", -(2 ** 63 - 1)).status == 200
    assert kv.get("shared/big") == b"0"
    assert kv.inc("shared/big", -(2 ** 63)).status == 200
    assert kv.get("shared/big") == str(-(2 ** 63)).encode()
    assert_500(kv.inc("shared/big", -1), "overflow")
    # not an integer by Redis's rules: nothing changes
    for text in ("abc", "1.5", "+1", "007", " 1", "-0", ""):
        assert kv.set("shared/s", text).status == 200
        r = kv.inc("shared/s", 1)
        err = assert_500(r, "not an integer")
        assert r.json()["status"] == "failed"
        assert "shared/s" in err and PREFIX not in err, err
        assert kv.get("shared/s") == text.encode()


# ---------- batches ----------

def test_batch_failing_inc_applies_nothing(petreld, redis):
    kv, _ = start(petreld, redis)
    assert kv.set("shared/old", "keep").status == 200
    assert kv.set("shared/text", "not a number").status == 200
    assert kv.set("shared/cnt", "1").status == 200
    r = kv.batch([
        {"kind": "set", "key": "shared/new", "value": b64("x")},
        {"kind": "unset", "key": "shared/old"},
        {"kind": "atomic-inc", "key": "shared/cnt", "delta": 1},
        {"kind": "atomic-inc", "key": "shared/text", "delta": 1},
        {"kind": "set", "key": "shared/after", "value": b64("y")},
    ])
    assert_500(r, "not an integer")
    assert r.json()["status"] == "failed" and r.json()["result"] == -1
    assert kv.get("shared/new") is None
    assert kv.get("shared/old") == b"keep"
    assert kv.get("shared/cnt") == b"1"
    assert kv.get("shared/after") is None
    # and Redis agrees
    assert redis.db("EXISTS", PREFIX + "shared/new", PREFIX + "shared/after") == "0"
    assert redis.db("GET", PREFIX + "shared/old") == "keep"
    assert redis.db("GET", PREFIX + "shared/cnt") == "1"


def test_batch_missing_inc_is_not_found_but_rest_applied(petreld, redis):
    kv, _ = start(petreld, redis)
    assert kv.set("shared/cnt", "1").status == 200
    r = kv.batch([
        {"kind": "set", "key": "shared/a", "value": b64("A")},
        {"kind": "atomic-inc", "key": "shared/missing", "delta": 3},
        {"kind": "atomic-inc", "key": "shared/cnt", "delta": 2},
    ])
    assert r.status == 200 and r.json() == {"result": 0, "status": "not-found"}, r
    assert kv.get("shared/a") == b"A"
    assert kv.get("shared/cnt") == b"3"
    assert kv.get("shared/missing") is None


def test_batch_follows_its_own_order(petreld, redis):
    kv, _ = start(petreld, redis)
    r = kv.batch([
        {"kind": "set", "key": "shared/c", "value": b64("10")},
        {"kind": "atomic-inc", "key": "shared/c", "delta": 5},
        {"kind": "atomic-inc", "key": "shared/c", "delta": 5},
        {"kind": "set", "key": "shared/gone", "value": b64("x")},
        {"kind": "unset", "key": "shared/gone"},
        {"kind": "atomic-inc", "key": "shared/gone", "delta": 1},
    ])
    assert r.status == 200 and r.json()["status"] == "not-found", r
    assert kv.get("shared/c") == b"20"
    assert kv.get("shared/gone") is None
    # an overflow reached only through the batch's own earlier inc fails it all
    assert kv.set("shared/m", str(2 ** 63 - 10)).status == 200
    r = kv.batch([
        {"kind": "atomic-inc", "key": "shared/m", "delta": 5},
        {"kind": "set", "key": "shared/z", "value": b64("z")},
        {"kind": "atomic-inc", "key": "shared/m", "delta": 5},
    ])
    assert_500(r, "overflow")
    assert kv.get("shared/m") == str(2 ** 63 - 10).encode()
    assert kv.get("shared/z") is None


def command_calls(redis):
    """Calls per command from INFO commandstats, e.g. {"set": 3, "evalsha": 1}."""
    calls = {}
    for line in redis.cli("INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_"):
            name, _, fields = line.partition(":")
            calls[name[len("cmdstat_"):]] = int(dict(
                f.split("=", 1) for f in fields.split(","))["calls"])
    return calls


def cached_scripts(redis):
    for line in redis.cli("INFO", "memory").splitlines():
        if line.startswith("number_of_cached_scripts:"):
            return int(line.split(":", 1)[1])
    raise AssertionError("no number_of_cached_scripts in INFO memory")


def test_script_by_sha_survives_script_flush(petreld, redis):
    """Batches call the script by its SHA1 (EVALSHA); after SCRIPT FLUSH the
    next one gets NOSCRIPT, which ran nothing, and goes out again as EVAL."""
    kv, d = start(petreld, redis)
    assert kv.set("shared/cnt", "1").status == 200
    r = kv.batch([{"kind": "set", "key": "shared/a", "value": b64("A")},
                  {"kind": "atomic-inc", "key": "shared/cnt", "delta": 1}])
    assert r.status == 200 and r.json() == {"result": 1, "status": "ok"}, r
    assert cached_scripts(redis) == 1
    # cached now: one EVALSHA, the script text is not sent again
    redis.cli("CONFIG", "RESETSTAT")
    r = kv.batch([{"kind": "atomic-inc", "key": "shared/cnt", "delta": 1},
                  {"kind": "set", "key": "shared/b", "value": b64("B")}])
    assert r.status == 200 and r.json()["status"] == "ok", r
    calls = command_calls(redis)
    assert calls.get("evalsha") == 1 and "eval" not in calls, calls

    redis.cli("SCRIPT", "FLUSH")
    assert cached_scripts(redis) == 0
    redis.cli("CONFIG", "RESETSTAT")
    r = kv.batch([{"kind": "set", "key": "shared/c", "value": b64("C")},
                  {"kind": "unset", "key": "shared/a"},
                  {"kind": "atomic-inc", "key": "shared/cnt", "delta": 5},
                  {"kind": "atomic-inc", "key": "shared/missing", "delta": 1}],
                 op={"expire_secs": 100})
    assert r.status == 200 and r.json() == {"result": 0, "status": "not-found"}, r
    calls = command_calls(redis)
    assert calls.get("evalsha") == 1 and calls.get("eval") == 1, calls  # NOSCRIPT, then EVAL
    assert cached_scripts(redis) == 1
    assert kv.get("shared/c") == b"C"
    assert 90 <= int(redis.db("TTL", PREFIX + "shared/c")) <= 100
    assert kv.get("shared/a") is None
    assert kv.get("shared/b") == b"B"
    assert kv.get("shared/cnt") == b"8"
    assert redis.db("EXISTS", PREFIX + "shared/missing") == "0"

    # after another flush a failing atomic-inc still applies nothing
    redis.cli("SCRIPT", "FLUSH")
    r = kv.batch([{"kind": "set", "key": "shared/d", "value": b64("D")},
                  {"kind": "atomic-inc", "key": "shared/c", "delta": 1}])
    assert_500(r, "not an integer")
    assert r.json()["status"] == "failed"
    assert kv.get("shared/d") is None
    assert kv.get("shared/c") == b"C"

    # a flush with commits in flight: every one is applied exactly once
    redis.cli("SCRIPT", "FLUSH")
    results = []

    def worker():
        for _ in range(10):
            results.append(kv.batch([{"kind": "atomic-inc", "key": "shared/cnt", "delta": 1},
                                     {"kind": "atomic-inc", "key": "shared/cnt", "delta": 1}]))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 80
    assert all(r.status == 200 and r.json()["status"] == "ok" for r in results), results
    assert kv.get("shared/cnt") == str(8 + 160).encode()
    assert healthy(d)


def test_single_set_and_unset_are_plain_commands(petreld, redis):
    """One set or one unset (no atomic-inc) needs no script: SET [EX] / DEL."""
    kv, _ = start(petreld, redis)
    redis.cli("CONFIG", "RESETSTAT")
    assert kv.set("shared/p", "v").json() == {"result": 1, "status": "ok"}
    assert kv.set("shared/t", "v", op={"expire_secs": 50}).json()["status"] == "ok"
    assert kv.unset("shared/p").json() == {"result": 1, "status": "ok"}
    assert kv.unset("shared/p").json() == {"result": 1, "status": "ok"}  # missing: still ok
    assert kv.batch([{"kind": "set", "key": "shared/q", "value": b64("")}]).status == 200
    calls = command_calls(redis)
    assert calls.get("set") == 3 and calls.get("del") == 2, calls
    assert "eval" not in calls and "evalsha" not in calls, calls
    assert redis.db("TTL", PREFIX + "shared/p") == "-2"
    assert 40 <= int(redis.db("TTL", PREFIX + "shared/t")) <= 50
    assert redis.db("TTL", PREFIX + "shared/q") == "-1"
    assert redis.db("EXISTS", PREFIX + "shared/q") == "1" and kv.get("shared/q") == b""
    # an error reply fails the commit, as the script's would
    redis.db("CONFIG", "SET", "maxmemory", "1")
    try:
        err = assert_500(kv.set("shared/oom", "x" * 1000), "OOM")
        assert kv.unset("shared/t").status == 200  # DEL is allowed under OOM
    finally:
        redis.db("CONFIG", "SET", "maxmemory", "0")
    assert "kvstore" in err
    assert redis.db("EXISTS", PREFIX + "shared/oom") == "0"


# ---------- iterate ----------

def seed(kv, items, op=None):
    ops = [{"kind": "set", "key": k, "value": b64(v)} for k, v in items.items()]
    r = kv.batch(ops, op=op)
    assert r.status == 200, r


def test_iterate_flags(petreld, redis):
    kv, _ = start(petreld, redis)
    seed(kv, {"shared/it/b": "2", "shared/it/a": "3", "shared/it/c": "1",
              "shared/it/sub/x": "9", "shared/it/sub/deep/y": "0", "shared/itx": "no",
              "shared/other": "no"})
    direct = kv.iterate("shared/it/")
    assert sorted(k for k, _ in direct) == ["shared/it/a", "shared/it/b", "shared/it/c"]
    assert dict(direct)["shared/it/a"] == [b"3"]
    assert sorted(kv.keys("shared/it/", RECURSE)) == [
        "shared/it/a", "shared/it/b", "shared/it/c", "shared/it/sub/deep/y", "shared/it/sub/x"]
    assert kv.keys("shared/it/", RECURSE | SORT_BY_KEY) == [
        "shared/it/a", "shared/it/b", "shared/it/c", "shared/it/sub/deep/y", "shared/it/sub/x"]
    assert kv.iterate("shared/it/", SORT_BY_VALUE) == [
        ("shared/it/c", [b"1"]), ("shared/it/b", [b"2"]), ("shared/it/a", [b"3"])]
    # NoValue: keys only, in every combination
    assert kv.iterate("shared/it/", NO_VALUE | SORT_BY_KEY) == [
        ("shared/it/a", []), ("shared/it/b", []), ("shared/it/c", [])]
    assert [k for k, v in kv.iterate("shared/it/", NO_VALUE | SORT_BY_VALUE)] == [
        "shared/it/c", "shared/it/b", "shared/it/a"]
    # ExactKey: that key only (GET), and nothing for a missing one
    assert kv.iterate("shared/it/a", EXACT_KEY) == [("shared/it/a", [b"3"])]
    assert kv.iterate("shared/it/a", EXACT_KEY | NO_VALUE) == [("shared/it/a", [])]
    assert kv.iterate("shared/it/zz", EXACT_KEY) == []
    assert kv.iterate("shared/nothing/", RECURSE) == []
    # a path prefix without the slash matches like a key prefix
    assert sorted(kv.keys("shared/it", RECURSE)) == sorted(
        ["shared/it/a", "shared/it/b", "shared/it/c", "shared/it/sub/deep/y",
         "shared/it/sub/x", "shared/itx"])


def test_iterate_escapes_glob_characters(petreld, redis):
    kv, _ = start(petreld, redis, prefix="p*[x]?\\:")
    seed(kv, {"shared/g*x/1": "a", "shared/gYx/2": "b", "shared/g?x/3": "c",
              "shared/g[ab]x/4": "d", "shared/gax/5": "e", "shared/g\\x/6": "f"})
    assert kv.keys("shared/g*x/") == ["shared/g*x/1"]
    assert kv.keys("shared/g?x/") == ["shared/g?x/3"]
    assert kv.keys("shared/g[ab]x/") == ["shared/g[ab]x/4"]
    assert kv.keys("shared/g\\x/") == ["shared/g\\x/6"]
    assert len(kv.keys("shared/", RECURSE)) == 6
    # keys outside the prefix are never listed
    redis.db("SET", "shared/g*x/outside", "z")
    redis.db("SET", "p:shared/g*x/other-prefix", "z")
    assert kv.keys("shared/g*x/") == ["shared/g*x/1"]


def test_priv_keys_per_user(petreld, redis):
    kv, _ = start(petreld, redis)
    alice, bob = {"username": "alice"}, {"username": "bob"}
    assert kv.set("priv/k", "A", op=alice).status == 200
    assert kv.set("priv/k", "B", op=bob).status == 200
    assert kv.set("priv/dir/x", "AX", op=alice).status == 200
    assert kv.get("priv/k", op=alice) == b"A"
    assert kv.get("priv/k", op=bob) == b"B"
    assert redis.db("GET", PREFIX + "priv/alice/k") == "A"
    assert redis.db("GET", PREFIX + "priv/bob/k") == "B"
    assert kv.iterate("priv/", RECURSE | SORT_BY_KEY, op=alice) == [
        ("priv/dir/x", [b"AX"]), ("priv/k", [b"A"])]
    assert kv.iterate("priv/", SORT_BY_KEY, op=bob) == [("priv/k", [b"B"])]
    assert kv.inc("priv/k", 1, op=alice).status == 500  # "A" is not a counter
    assert kv.set("priv/n", "1", op=bob).status == 200
    assert kv.inc("priv/n", 1, op=bob).json()["status"] == "ok"
    assert kv.inc("priv/n", 1, op=alice).json()["status"] == "not-found"
    assert kv.lookup("priv/k").status == 400  # no username


def test_iterate_streams_many_keys(petreld, redis):
    kv, _ = start(petreld, redis)
    n = 50000
    redis.cli("EVAL", "for i = 1, tonumber(ARGV[1]) do "
              "redis.call('SET', ARGV[2] .. string.format('%06d', i), i) end", "0", str(n),
              PREFIX + "shared/many/", db=DB)
    redis.db("SET", PREFIX + "shared/many/sub/not-direct", "x")
    keys = kv.keys("shared/many/", NO_VALUE)
    assert len(keys) == n and len(set(keys)) == n
    rows = kv.iterate("shared/many/", SORT_BY_KEY)
    assert len(rows) == n
    assert rows[0] == ("shared/many/000001", [b"1"])
    assert rows[-1] == (f"shared/many/{n:06d}", [str(n).encode()])
    assert [k for k, _ in rows] == sorted(k for k, _ in rows)


# ---------- connection trouble ----------

def test_redis_down_then_back(petreld, redis):
    kv, d = start(petreld, redis)
    assert kv.set("shared/a", "1").status == 200
    port = redis.port
    redis.stop()
    t0 = time.monotonic()
    assert_500(kv.lookup("shared/a"), "kvstore 127.0.0.1:")
    assert_500(kv.set("shared/a", "2"))
    assert kv.set("shared/a", "2").json()["status"] == "failed"  # never sent
    assert_500(kv.inc("shared/a", 1))
    r, lines = kv.iterate_lines("shared/", RECURSE)
    assert_500(r)
    assert kv.unset("shared/a").status == 500
    assert time.monotonic() - t0 < 2.0  # failing fast, not waiting for timeouts
    for _ in range(20):
        assert kv.lookup("shared/a").status == 500
    assert healthy(d)
    assert d.proc.poll() is None
    # restarted (empty, nothing persisted): the dict reconnects by itself
    Redis(redis.dir, port=port).start()
    wait_for(lambda: kv.lookup("shared/a").status == 200, timeout=15,
             what="lookups working again")
    assert kv.set("shared/a", "3").status == 200
    assert kv.get("shared/a") == b"3"
    assert "kvstore connection lost" in d.stderr()
    assert "kvstore connected" in d.stderr()


def test_server_down_at_start(petreld, redis):
    port = free_port()
    kv, d = start(petreld, redis, address=f"127.0.0.1:{port}")
    assert_500(kv.lookup("shared/a"), "Connection refused")
    assert healthy(d)
    late = Redis(redis.dir.parent / "late", port=port).start()
    try:
        wait_for(lambda: kv.set("shared/a", "1").status == 200, timeout=15, what="late server")
        assert kv.get("shared/a") == b"1"
    finally:
        late.stop()


def test_frozen_server_times_out_and_recovers(petreld, redis):
    kv, d = start(petreld, redis, timeout="700ms")
    assert kv.set("shared/a", "1").status == 200
    redis.freeze()
    try:
        results = {}

        def call(name, fn):
            results[name] = fn()

        threads = [threading.Thread(target=call, args=("set", lambda: kv.set("shared/a", "2"))),
                   threading.Thread(target=call, args=("get", lambda: kv.lookup("shared/a")))]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        elapsed = time.monotonic() - t0
        assert 0.5 < elapsed < 5, elapsed
        assert_500(results["get"], "no reply within")
        r = results["set"]
        assert_500(r, "no reply within")
        # it was sent: Redis may still apply it
        assert r.json()["status"] == "write-uncertain" and r.json()["result"] == -2, r
        assert healthy(d)
    finally:
        redis.thaw()
    wait_for(lambda: kv.lookup("shared/a").status == 200, timeout=15, what="recovery")
    assert kv.get("shared/a") in (b"1", b"2")  # uncertain: it may or may not have landed


def test_unresponsive_listener_times_out(petreld, redis):
    """A socket that accepts connections (kernel backlog) but never speaks."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    try:
        port = silent.getsockname()[1]
        kv, d = start(petreld, redis, address=f"127.0.0.1:{port}", timeout="500ms")
        t0 = time.monotonic()
        assert_500(kv.lookup("shared/a"), "no connect within")
        assert 0.4 < time.monotonic() - t0 < 3
        # next attempts only after a backoff; either way the answer is an error
        assert_500(kv.lookup("shared/a"))
        assert healthy(d)
    finally:
        silent.close()


def test_unix_socket_auth_select(petreld, redis, tmp_path):
    sock = tmp_path / "r.sock"
    secured = redis.make(extra=["--requirepass", "s3cr3t-pw", "--unixsocket", str(sock),
                                "--unixsocketperm", "700"])
    kv, d = start(petreld, redis, extra_dicts={
        "unix": {"driver": "kvstore", "address": f"unix:{sock}", "password": "s3cr3t-pw",
                 "db": 3, "prefix": "u:"},
        "acl": {"driver": "kvstore", "address": secured.address, "username": "default",
                "password": "s3cr3t-pw"},
        "wrong": {"driver": "kvstore", "address": secured.address, "password": "nope-pw"},
        "none": {"driver": "kvstore", "address": secured.address},
        "nosock": {"driver": "kvstore", "address": f"unix:{tmp_path}/missing.sock"},
    })
    unix = KV(d, "unix")
    assert unix.set("shared/a", "via unix").status == 200
    assert unix.get("shared/a") == b"via unix"
    assert secured.cli("GET", "u:shared/a", db=3).strip() == "via unix"
    assert KV(d, "acl").set("shared/b", "acl").status == 200
    assert secured.cli("GET", "shared/b").strip() == "acl"
    assert_500(KV(d, "wrong").lookup("shared/a"), "AUTH failed")
    assert KV(d, "wrong").set("shared/c", "x").json()["status"] == "failed"
    assert_500(KV(d, "none").lookup("shared/a"), "NOAUTH")
    assert_500(KV(d, "nosock").lookup("shared/a"), "kvstore unix:")
    assert healthy(d)
    assert "s3cr3t-pw" not in d.stderr()
    assert "nope-pw" not in d.stderr()


def test_host_name_address(petreld, redis):
    kv, _ = start(petreld, redis, address=f"localhost:{redis.port}")
    assert kv.set("shared/h", "by name").status == 200
    assert redis.db("GET", PREFIX + "shared/h") == "by name"
    kv2, d2 = start(petreld, redis, address="no-such-host.invalid:6379")
    err = assert_500(kv2.lookup("shared/h"))
    # NXDOMAIN, or no answer at all from this machine's resolver
    assert "cannot resolve" in err or "no host name lookup within" in err, err
    assert healthy(d2)


def test_metrics(petreld, redis):
    kv, d = start(petreld, redis)
    assert kv.set("shared/a", "1").status == 200
    text = d.get("telemetry", "/metrics").body.decode()
    assert 'petrel_dict_kvstore_connected{dict="kv"} 1' in text, text


# ---------- mid-stream failure ----------

def test_iterate_error_mid_stream(petreld, redis):
    kv, d = start(petreld, redis)
    n = 200000
    value = "v" * 200  # ~300 bytes per NDJSON line: far more than any buffer holds
    redis.cli("EVAL", "for i = 1, tonumber(ARGV[1]) do "
              "redis.call('SET', ARGV[2] .. i, ARGV[3]) end", "0", str(n),
              PREFIX + "shared/big/", value, db=DB)
    assert redis.db("DBSIZE") == str(n)
    host, port = d.backend.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request("POST", "/api/backend/dict/kv/iterate",
                 body=json.dumps({"path": "shared/big/", "flags": 0}),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    rows = 0
    for _ in range(50):  # a slow reader: the server stops fetching meanwhile
        obj = json.loads(resp.readline())
        assert "key" in obj, obj
        rows += 1
    time.sleep(0.5)
    redis.stop()
    error = None
    while True:
        line = resp.readline()
        if not line:
            break
        obj = json.loads(line)
        if "error" in obj:
            error = obj["error"]
            assert resp.readline() == b""  # the error ends the stream
            break
        assert obj["values"] == [b64(value)]
        rows += 1
    conn.close()
    assert error is not None, f"no error line after {rows} rows"
    assert "kvstore" in error, error
    assert rows < n
    assert healthy(d)
    assert "dict iterate failed" in d.stderr()


# ---------- shutdown ----------

def redis_unread_bytes(port):
    """Bytes waiting in the receive queues of Redis's established TCP
    connections (/proc/net/tcp: local port, state 01, rx_queue)."""
    total = 0
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        f = line.split()
        if int(f[1].split(":")[1], 16) == port and f[3] == "01":
            total += int(f[4].split(":")[1], 16)
    return total


def test_shutdown_answers_pending_requests(petreld, redis):
    kv, d = start(petreld, redis, timeout="30s")
    assert kv.set("shared/a", "1").status == 200
    redis.freeze()
    try:
        results = []
        t = threading.Thread(target=lambda: results.append(kv.lookup("shared/a")))
        t.start()
        # In flight once the lookup waits, unread, in the stopped Redis's
        # receive queue.
        wait_for(lambda: redis_unread_bytes(redis.port) > 0, timeout=10,
                 what="the lookup to reach Redis")
        t0 = time.monotonic()
        d.signal(signal.SIGTERM)
        assert d.wait(15) == 0
        assert time.monotonic() - t0 < 3  # not held for the 30 s timeout
        t.join(10)
        assert results and results[0].status in (500, 503), results
        d.assert_clean()
    finally:
        redis.thaw()


def test_client_leaving_while_the_dict_waits_drops_the_answer(petreld, redis):
    """api-pending.h: a lookup and a set wait in a frozen Redis, their
    clients hang up, Redis comes back: the late answers are dropped (no
    use of the freed request), and petreld goes on serving."""
    kv, d = start(petreld, redis, timeout="30s")
    assert kv.set("shared/a", "1").status == 200
    host, port = d.backend.rsplit(":", 1)
    redis.freeze()
    try:
        socks = []
        for op, body in (("lookup", {"key": "shared/a"}),
                         ("set", {"key": "shared/a", "value": b64("2")})):
            data = json.dumps(body).encode()
            s = socket.create_connection((host, int(port)), timeout=10)
            s.sendall(f"POST /api/backend/dict/kv/{op} HTTP/1.1\r\nHost: x\r\n"
                      f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
                      .encode() + data)
            socks.append(s)
        wait_for(lambda: redis_unread_bytes(redis.port) > 0, timeout=10,
                 what="the requests to reach Redis")
        for s in socks:
            s.close()
        # the loop has seen the hang-ups once a later request is answered
        assert healthy(d)
    finally:
        redis.thaw()
    wait_for(lambda: kv.lookup("shared/a").status == 200, timeout=15, what="recovery")
    assert kv.get("shared/a") in (b"1", b"2")
    assert healthy(d)
    d.assert_clean()
