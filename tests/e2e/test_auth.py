"""The auth service end to end: a real petreld running the `auth` component
with passwd-file, SQLite and PostgreSQL databases, spoken to over its line
protocol (tests/e2e/authproto.py), by the backend-plane API and by
petrelctl. Password hashes come from independent tools (mkpasswd, htpasswd,
the argon2 CLI)."""

import re
import shutil
import socket
import sqlite3
import subprocess
import time

import pytest

from authproto import AuthConn, b64, encode, params
from conftest import free_port, http_request, run_petreld, run_petrelctl, wait_for
from servers import pgsql_server  # noqa: F401  (fixture)

TOKEN = "auth-e2e-token"


def mkpasswd(method, password):
    return subprocess.run(["mkpasswd", "-m", method, password], check=True,
                          capture_output=True, text=True).stdout.strip()


def htpasswd_bcrypt(password):
    out = subprocess.run(["htpasswd", "-bnBC", "5", "x", password], check=True,
                         capture_output=True, text=True).stdout.strip()
    return out.split(":", 1)[1]


def argon2id(password):
    return subprocess.run(["argon2", "somesaltsalt", "-id", "-t", "2", "-m", "10", "-p", "1",
                           "-e"], input=password, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture(scope="module")
def hashes():
    return {
        "sha512": "{SHA512-CRYPT}" + mkpasswd("sha-512", "s3cret"),
        "yescrypt": "{CRYPT}" + mkpasswd("yescrypt", "s3cret"),
        "bcrypt": "{BLF-CRYPT}" + htpasswd_bcrypt("s3cret"),
        "argon2": "{ARGON2ID}" + argon2id("s3cret"),
    }


def auth_overrides(tmp_path, passwd_text, extra=None, name="passwd"):
    path = tmp_path / name
    path.write_text(passwd_text)
    cfg = {
        "components": ["auth"],
        "auth": {
            "listen": [f"127.0.0.1:{free_port()}"],
            "failure_delay": "50ms",
            "failure_delay_max": "400ms",
            "passdb": {"driver": "passwd-file", "path": str(path)},
        },
    }
    for key, value in (extra or {}).items():
        cfg["auth"][key] = value
    return cfg


def auth_addr(d):
    return d.config["auth"]["listen"][0]


def metric(d, name, labels=None):
    text = d.get("telemetry", "/metrics").body.decode()
    total = 0.0
    found = False
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        if labels and not all(f'{k}="{v}"' in (m.group(2) or "") for k, v in labels.items()):
            continue
        total += float(m.group(3))
        found = True
    return total if found else None


@pytest.fixture
def passwd_daemon(petreld, tmp_path, hashes):
    text = "\n".join([
        "# Petrel test users",
        f"alice:{hashes['sha512']}:1001:1001::/home/alice::userdb_quota_rule=*:storage=1G "
        "quota_rule2=Trash:storage=+100M acl_groups=staff,admins extra_color=blue",
        f"bob:{hashes['bcrypt']}:1002:1002::/home/bob",
        f"carol:{hashes['yescrypt']}:::::",
        f"dave:{hashes['argon2']}:1004:1004::/home/dave::allow_nets=10.0.0.0/8,192.0.2.7",
        "plain:{PLAIN}open sesame:1005:1005",
        "broken line without fields",
        "erin:{PLAIN}x:notanumber:1",
        "",
    ]) + "\n"
    return petreld(auth_overrides(tmp_path, text))


# ---------- VERIFY and schemes ----------

@pytest.mark.parametrize("user", ["alice", "bob", "carol", "dave"])
def test_verify_every_scheme(passwd_daemon, user):
    with AuthConn(auth_addr(passwd_daemon)) as c:
        ok = c.verify(user, "s3cret", ip="10.9.9.9")
        assert ok[0] == "OK" and ok[2] == user, ok
        bad = c.verify(user, "S3cret", ip="10.9.9.9")
        assert bad[0] == "FAIL" and "temp" not in bad, bad
        assert params(bad, 2)["reason"] == ["authentication failed"]


def test_verify_plain_and_unknown_user(passwd_daemon):
    with AuthConn(auth_addr(passwd_daemon)) as c:
        assert c.verify("plain", "open sesame")[0] == "OK"
        assert c.verify("nobody-here", "x")[0] == "FAIL"
        # The malformed lines were skipped, not loaded.
        assert c.verify("erin", "x")[0] == "FAIL"


def test_passwd_file_problems_logged_with_line_numbers(passwd_daemon):
    log = passwd_daemon.stderr()
    assert re.search(r"passwd:7\b", log), log
    assert re.search(r"passwd:8\b", log), log
    assert "open sesame" not in log and "s3cret" not in log


def test_userdb_fields_from_passwd_file(passwd_daemon):
    with AuthConn(auth_addr(passwd_daemon)) as c:
        r = c.user("alice")
        assert r[0] == "OK" and r[2] == "alice"
        p = params(r)
        assert p["uid"] == ["1001"] and p["gid"] == ["1001"]
        assert p["home"] == ["/home/alice"]
        assert p["quota_rule"] == ["*:storage=1G", "Trash:storage=+100M"]
        assert sorted(p["group"]) == ["admins", "staff"]
        assert "extra_color=blue" in p["extra"]
        assert c.user("nobody-here")[0] == "NOTFOUND"
        # Names the lookup refuses outright are simply unknown.
        assert c.user("../../etc/passwd")[0] == "NOTFOUND"


def test_allow_nets_enforced(passwd_daemon):
    with AuthConn(auth_addr(passwd_daemon)) as c:
        assert c.verify("dave", "s3cret", ip="10.1.2.3")[0] == "OK"
        assert c.verify("dave", "s3cret", ip="192.0.2.7")[0] == "OK"
        refused = c.verify("dave", "s3cret", ip="127.0.0.1")
        assert refused[0] == "FAIL", refused
    assert "allow_nets" in passwd_daemon.stderr()


def test_iterate_sorted(passwd_daemon):
    with AuthConn(auth_addr(passwd_daemon)) as c:
        assert c.iterate() == ["alice", "bob", "carol", "dave", "plain"]


# ---------- SASL ----------

def test_sasl_plain_with_initial_response(passwd_daemon):
    with AuthConn(auth_addr(passwd_daemon)) as c:
        r = c.request("AUTH", "PLAIN", "service=imap", "ip=127.0.0.1",
                      "resp=" + b64(b"\0alice\0s3cret"))
        assert r[0] == "OK" and r[2] == "alice"
        r = c.request("AUTH", "PLAIN", "resp=" + b64(b"alice\0alice\0s3cret"))
        assert r[0] == "OK"
        r = c.request("AUTH", "PLAIN", "resp=" + b64(b"bob\0alice\0s3cret"))
        assert r[0] == "FAIL"  # acting as another user is not offered
        r = c.request("AUTH", "PLAIN", "resp=not*base64")
        assert r[0] == "FAIL"


def test_sasl_plain_without_initial_response(passwd_daemon):
    with AuthConn(auth_addr(passwd_daemon)) as c:
        r = c.request("AUTH", "PLAIN")
        assert r[0] == "CONT" and r[2] == ""
        c.send("CONT", r[1], b64(b"\0plain\0open sesame"))
        r = c.read()
        assert r[0] == "OK" and r[2] == "plain"


def test_sasl_login(passwd_daemon):
    with AuthConn(auth_addr(passwd_daemon)) as c:
        r = c.request("AUTH", "login", "service=pop3")
        assert r[0] == "CONT" and r[2] == b64("Username:")
        rid = r[1]
        c.send("CONT", rid, b64("bob"))
        r = c.read()
        assert r[:3] == ["CONT", rid, b64("Password:")]
        c.send("CONT", rid, b64("s3cret"))
        r = c.read()
        assert r[0] == "OK" and r[2] == "bob"
        assert c.request("AUTH", "CRAM-MD5")[0] == "FAIL"
        assert c.request("CONT", "999", b64("x"))[0] == "FAIL"


# ---------- protocol robustness ----------

def test_pipelined_requests_all_answered(passwd_daemon):
    with AuthConn(auth_addr(passwd_daemon)) as c:
        batch = b"".join(encode("VERIFY", f"p{i}", "plain" if i % 2 else "alice",
                                "open sesame" if i % 2 else "s3cret") for i in range(40))
        c.send_raw(batch + encode("USER", "last", "bob"))
        seen = {}
        for _ in range(41):
            r = c.read()
            seen[r[1]] = r[0]
        assert set(seen) == {f"p{i}" for i in range(40)} | {"last"}
        assert all(v == "OK" for v in seen.values()), seen


def test_unknown_verb_and_missing_fields(passwd_daemon):
    with AuthConn(auth_addr(passwd_daemon)) as c:
        assert c.request("FROB")[0] == "FAIL"
        assert c.request("VERIFY", "alice")[0] == "FAIL"
        assert c.request("USER")[0] == "FAIL"
        assert c.verify("plain", "open sesame")[0] == "OK"  # connection still usable


@pytest.mark.parametrize("garbage", [
    b"\n",
    b"VERIFY\n",
    b"VERIFY\tbad id!\tx\ty\n",
    b"VERIFY\t1\tbad\\qescape\tpw\n",
    b"\x00\x01\x02\n",
])
def test_malformed_line_closes_connection(passwd_daemon, garbage):
    with AuthConn(auth_addr(passwd_daemon)) as c:
        c.send_raw(garbage)
        r = c.read()
        assert r is not None and r[0] == "FAIL" and r[1] == "-", r
        assert c.read() is None
    with AuthConn(auth_addr(passwd_daemon)) as c:  # the service is fine
        assert c.verify("plain", "open sesame")[0] == "OK"


def test_overlong_line_closes_connection(passwd_daemon):
    with AuthConn(auth_addr(passwd_daemon)) as c:
        try:
            c.send_raw(b"VERIFY\t1\t" + b"a" * 200000)
        except OSError:
            pass
        r = c.read()
        assert r is None or r[0] == "FAIL"


def test_client_leaving_mid_request_is_harmless(passwd_daemon):
    for _ in range(20):
        with AuthConn(auth_addr(passwd_daemon)) as c:
            c.send("VERIFY", "1", "alice", "wrong")  # answered only after a delay
    # (another user: alice may now be at auth.max_failures_per_user)
    with AuthConn(auth_addr(passwd_daemon)) as c:
        assert c.verify("bob", "s3cret")[0] == "OK"


# ---------- failure delay, cache ----------

def test_failure_delay_grows_per_ip(passwd_daemon):
    with AuthConn(auth_addr(passwd_daemon)) as c:
        timings = []
        for _ in range(4):
            t0 = time.monotonic()
            assert c.verify("plain", "wrong", ip="198.51.100.9")[0] == "FAIL"
            timings.append(time.monotonic() - t0)
        # 50 ms failure delay, then 50, 100, 200 ms of waiting before the attempt.
        assert timings[0] >= 0.045
        assert timings[3] >= 0.2 + 0.045, timings
        # Another address is not slowed down by that one's failures.
        t0 = time.monotonic()
        assert c.verify("plain", "open sesame", ip="198.51.100.10")[0] == "OK"
        assert time.monotonic() - t0 < 0.2


def test_cache_hit_and_password_mismatch(passwd_daemon):
    d = passwd_daemon
    with AuthConn(auth_addr(d)) as c:
        assert c.verify("alice", "s3cret")[0] == "OK"
        hits = metric(d, "petrel_auth_cache_lookups_total", {"result": "hit"}) or 0
        for _ in range(5):
            assert c.verify("alice", "s3cret")[0] == "OK"
        assert metric(d, "petrel_auth_cache_lookups_total", {"result": "hit"}) == hits + 5
        before = metric(d, "petrel_auth_cache_lookups_total", {"result": "pwd_mismatch"}) or 0
        assert c.verify("alice", "nope")[0] == "FAIL"
        assert metric(d, "petrel_auth_cache_lookups_total",
                      {"result": "pwd_mismatch"}) == before + 1
    assert metric(d, "petrel_auth_cache_entries") >= 1
    assert metric(d, "petrel_auth_cache_bytes") > 0
    assert metric(d, "petrel_auth_cache_max_bytes") == 10 * 1024 * 1024
    assert metric(d, "petrel_auth_connections_total") >= 1
    assert metric(d, "petrel_auth_request_seconds_count", {"verb": "VERIFY", "result": "ok"}) >= 6
    assert metric(d, "petrel_auth_passdb_seconds_count", {"driver": "passwd-file"}) >= 1
    assert metric(d, "petrel_auth_scheme_verify_seconds_count",
                  {"scheme": "SHA512-CRYPT"}) >= 1


def test_metrics_pass_promtool(passwd_daemon):
    with AuthConn(auth_addr(passwd_daemon)) as c:
        c.verify("alice", "s3cret")
        c.verify("alice", "bad")
    body = passwd_daemon.get("telemetry", "/metrics").body
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed")
    proc = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode() + proc.stdout.decode()
    for name in ("petrel_auth_request_seconds", "petrel_auth_passdb_seconds",
                 "petrel_auth_scheme_verify_seconds", "petrel_auth_cache_lookups_total",
                 "petrel_auth_cache_entries", "petrel_auth_cache_bytes",
                 "petrel_auth_cache_max_bytes", "petrel_auth_connections",
                 "petrel_auth_connections_total"):
        assert f"# TYPE {name} " in body.decode(), name


def test_passwd_file_reloaded_when_changed(petreld, tmp_path, hashes):
    d = petreld(auth_overrides(tmp_path, "plain:{PLAIN}one\n",
                               {"cache_ttl": "0", "cache_negative_ttl": "0"}))
    path = tmp_path / "passwd"
    with AuthConn(auth_addr(d)) as c:
        assert c.verify("plain", "one")[0] == "OK"
        assert c.user("newcomer")[0] == "NOTFOUND"
        path.write_text("plain:{PLAIN}two\nnewcomer:{PLAIN}hello:2000:2000\n")

        def reloaded():
            return c.verify("plain", "two")[0] == "OK"
        wait_for(reloaded, timeout=10, what="passwd-file reload")
        assert c.verify("newcomer", "hello")[0] == "OK"


def test_unix_socket_listener(petreld, tmp_path):
    sock = tmp_path / "auth.sock"
    d = petreld(auth_overrides(tmp_path, "plain:{PLAIN}pw\n",
                               {"listen": [f"unix:{sock}", f"127.0.0.1:{free_port()}"]}))
    assert oct(sock.stat().st_mode & 0o777) == oct(0o660)  # owner and group by default
    with AuthConn(f"unix:{sock}") as c:
        assert c.verify("plain", "pw")[0] == "OK"
    assert d.proc.poll() is None


def test_allowed_nets_refuse_tcp_clients(petreld, tmp_path):
    d = petreld(auth_overrides(tmp_path, "plain:{PLAIN}pw\n", {"allowed_nets": ["10.0.0.0/8"]}))
    with AuthConn(auth_addr(d)) as c:
        c.send("VERIFY", "1", "plain", "pw")
        try:
            assert c.read() is None
        except ConnectionResetError:
            pass
    assert "allowed_nets" in d.stderr()


# ---------- configuration ----------

@pytest.mark.parametrize("auth, message", [
    ({"listen": ["127.0.0.1:1"]}, "needs a passdb"),
    ({"passdb": {"driver": "nosuch"}}, "driver"),
    ({"socket_mode": "999", "passdb": {"driver": "passwd-file", "path": "/x"}}, "octal"),
    ({"mechanisms": ["CRAM-MD5"], "passdb": {"driver": "passwd-file", "path": "/x"}},
     "CRAM-MD5"),
    ({"passdb": {"driver": "sql", "engine": "sqlite", "connect": "/x",
                 "password_query": "SELECT password FROM u WHERE name = %x"}}, "%x"),
])
def test_bad_auth_configuration(tmp_path, auth, message):
    cfg = tmp_path / "bad.yaml"
    lines = ["allow_root: true", "components: [auth]", "auth:"]
    import json
    for k, v in auth.items():
        lines.append(f"  {k}: {json.dumps(v)}")
    cfg.write_text("\n".join(lines) + "\n")
    proc = run_petreld(["-c", str(cfg), "--check-config"])
    assert proc.returncode == 2, proc.stderr
    assert re.search(r"bad\.yaml:\d+: ", proc.stderr), proc.stderr
    assert message in proc.stderr, proc.stderr


def test_missing_passwd_file_stops_start(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("allow_root: true\ncomponents: [auth]\n"
                   f"telemetry: {{listen: \"127.0.0.1:{free_port()}\"}}\n"
                   f"auth:\n  listen: [\"127.0.0.1:{free_port()}\"]\n"
                   f"  passdb: {{driver: passwd-file, path: \"{tmp_path}/none\"}}\n")
    proc = run_petreld(["-c", str(cfg)])
    assert proc.returncode != 0
    assert "none" in proc.stderr


# ---------- SQL userdb ----------

INJECTIONS = ["x' OR '1'='1", "alice'--", "'; DROP TABLE users; --", "alice\" OR 1=1 --",
              "%u", "alice%", "_lice"]


def make_sqlite(path, hashes):
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE users (username TEXT PRIMARY KEY, domain TEXT, password TEXT,
                            uid INTEGER, gid INTEGER, home TEXT, quota_rule TEXT,
                            allow_nets TEXT, quota_over_flag TEXT);
    """)
    db.executemany("INSERT INTO users VALUES (?,?,?,?,?,?,?,?,?)", [
        ("alice", "example.org", hashes["sha512"], 2001, 2001, "/srv/alice", "*:storage=2G",
         None, "yes"),
        ("bob", "example.org", "{PLAIN}hunter2", 2002, 2002, "/srv/bob", None,
         "10.0.0.0/8", None),
        ("carol", "example.net", "{PLAIN}pw", None, None, None, None, None, None),
    ])
    db.commit()
    db.close()


def sqlite_overrides(tmp_path, dbfile):
    return {
        "components": ["auth", "backend-api"],
        "backend_api": {"auth_master_addr": None},
        "auth": {
            "listen": [f"127.0.0.1:{free_port()}"],
            "failure_delay": "10ms",
            "passdb": {
                "driver": "sql", "engine": "sqlite", "connect": str(dbfile),
                "password_query": "SELECT password, uid, gid, home, quota_rule, allow_nets "
                                  "FROM users WHERE username = '%n' AND domain = '%d'",
                "iterate_query": "SELECT username || '@' || domain FROM users",
            },
            "userdb": {
                "driver": "sql", "engine": "sqlite", "connect": str(dbfile),
                "user_query": "SELECT uid, gid, home, quota_rule, allow_nets, quota_over_flag "
                              "FROM users WHERE username = %n AND domain = %d",
                "iterate_query": "SELECT username || '@' || domain FROM users",
            },
        },
    }


def test_sqlite_passdb_and_userdb(petreld, tmp_path, hashes):
    dbfile = tmp_path / "users.db"
    make_sqlite(dbfile, hashes)
    d = petreld(sqlite_overrides(tmp_path, dbfile))
    with AuthConn(auth_addr(d)) as c:
        ok = c.verify("alice@example.org", "s3cret")
        assert ok[0] == "OK", ok
        p = params(ok)
        assert p["uid"] == ["2001"] and p["home"] == ["/srv/alice"]
        assert p["extra"] == ["quota_over_flag=yes"]
        assert c.verify("alice@example.org", "wrong")[0] == "FAIL"
        assert c.verify("alice@example.net", "s3cret")[0] == "FAIL"  # other domain
        assert c.verify("bob@example.org", "hunter2", ip="10.0.0.1")[0] == "OK"
        assert c.verify("bob@example.org", "hunter2", ip="127.0.0.1")[0] == "FAIL"
        r = c.user("carol@example.net")
        assert r[0] == "OK" and "uid" not in params(r)
        assert c.user("dave@example.org")[0] == "NOTFOUND"
        assert c.iterate() == ["alice@example.org", "bob@example.org", "carol@example.net"]


@pytest.mark.parametrize("name", INJECTIONS)
def test_sqlite_injection_attempts_are_unknown_users(petreld, tmp_path, hashes, name):
    dbfile = tmp_path / "users.db"
    make_sqlite(dbfile, hashes)
    d = petreld(sqlite_overrides(tmp_path, dbfile))
    with AuthConn(auth_addr(d)) as c:
        assert c.user(name)[0] == "NOTFOUND"
        assert c.user(name + "@example.org")[0] == "NOTFOUND"
        assert c.verify(name + "@example.org", "s3cret")[0] == "FAIL"
    db = sqlite3.connect(dbfile)
    assert db.execute("SELECT count(*) FROM users").fetchone()[0] == 3
    db.close()


def test_sqlite_database_gone_is_a_temporary_failure(petreld, tmp_path, hashes):
    dbfile = tmp_path / "users.db"
    make_sqlite(dbfile, hashes)
    d = petreld(sqlite_overrides(tmp_path, dbfile))
    db = sqlite3.connect(dbfile)
    db.execute("DROP TABLE users")
    db.commit()
    db.close()
    with AuthConn(auth_addr(d)) as c:
        r = c.verify("alice@example.org", "s3cret")
        assert r[0] == "FAIL" and "temp" in r, r
        assert c.user("alice@example.org")[0] == "FAIL"


def test_pgsql_passdb_and_userdb(petreld, tmp_path, pgsql_server, hashes):  # noqa: F811
    db = "authdb_%d" % free_port()
    pgsql_server.psql(f"CREATE DATABASE {db}")
    pgsql_server.psql(
        "CREATE TABLE mailbox (email TEXT PRIMARY KEY, pw TEXT NOT NULL, uid INT, "
        "home TEXT, quota_rule TEXT, groups TEXT);"
        f"INSERT INTO mailbox VALUES ('alice@example.org', '{hashes['bcrypt']}', 3001, "
        "'/pg/alice', '*:storage=5G', 'staff,ops'),"
        "('bob@example.org', '{PLAIN}pgpass', 3002, '/pg/bob', NULL, NULL);", db=db)
    conn = pgsql_server.connect_for(db)
    d = petreld({
        "components": ["auth"],
        "auth": {
            "listen": [f"127.0.0.1:{free_port()}"],
            "failure_delay": "10ms",
            "passdb": {
                "driver": "sql", "engine": "pgsql", "connect": conn,
                "password_query": "SELECT pw AS password, uid, home, quota_rule, groups "
                                  "FROM mailbox WHERE email = '%u'",
                "iterate_query": "SELECT email FROM mailbox",
            },
        },
    })
    with AuthConn(auth_addr(d)) as c:
        ok = c.verify("alice@example.org", "s3cret")
        assert ok[0] == "OK", ok
        p = params(ok)
        assert p["uid"] == ["3001"] and sorted(p["group"]) == ["ops", "staff"]
        assert c.verify("bob@example.org", "pgpass")[0] == "OK"
        assert c.verify("bob@example.org", "nope")[0] == "FAIL"
        for name in INJECTIONS:
            assert c.user(name)[0] == "NOTFOUND", name
        assert c.iterate() == ["alice@example.org", "bob@example.org"]
    assert pgsql_server.psql("SELECT count(*) FROM mailbox", db=db).strip() == "2"
    # The database going away is a temporary failure, not a refusal.
    pgsql_server.psql(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      f"WHERE datname = '{db}'")
    pgsql_server.psql(f"ALTER DATABASE {db} WITH ALLOW_CONNECTIONS false")
    try:
        with AuthConn(auth_addr(d)) as c:
            r = c.user("nobody@example.org")
            assert r[0] == "FAIL" and "temp" in r, r
    finally:
        pgsql_server.psql(f"ALTER DATABASE {db} WITH ALLOW_CONNECTIONS true")


# ---------- backend-plane API ----------

def api_daemon(petreld, tmp_path, auth_master_addr, passwd="plain:{PLAIN}pw:1000:1000::/h\n"):
    cfg = auth_overrides(tmp_path, passwd)
    cfg["components"] = ["auth", "backend-api"]
    cfg["mail"] = {"home": str(tmp_path / "mail" / "%u")}
    cfg["backend_api"] = {"auth_master_addr": auth_master_addr or cfg["auth"]["listen"][0]}
    return petreld(cfg, env={"BACKEND_API_TOKEN": TOKEN})


def test_user_info_with_userdb(petreld, tmp_path):
    d = api_daemon(petreld, tmp_path, None,
                   "alice:{PLAIN}x:1001:1002::/home/alice::quota_rule=*:storage=1G "
                   "allow_nets=10.0.0.0/8 acl_groups=staff quota_over_flag=no\n")
    r = d.post("backend", "/api/backend/user/info", {"user": "alice"}, token=TOKEN)
    assert r.status == 200, r
    body = r.json()
    assert body["userdb_status"] == "ok"
    assert body["userdb"] == {
        "uid": 1001, "gid": 1002, "home": "/home/alice", "mail_location": "",
        "groups": ["staff"], "quota_rule": ["*:storage=1G"], "allow_nets": ["10.0.0.0/8"],
        "extra": {"quota_over_flag": "no"},
    }
    assert body["username"] == "alice" and "namespaces" in body
    r = d.post("backend", "/api/backend/user/info", {"user": "zed"}, token=TOKEN)
    assert r.status == 200
    assert r.json()["userdb_status"] == "not_found" and r.json()["userdb"] is None


def test_user_iterate_sorted(petreld, tmp_path):
    d = api_daemon(petreld, tmp_path, None,
                   "zed:{PLAIN}a\nalice:{PLAIN}b\nmallory:{PLAIN}c\n")
    r = d.post("backend", "/api/backend/user/iterate", {}, token=TOKEN)
    assert r.status == 200, r
    assert r.json() == {"users": ["alice", "mallory", "zed"]}
    out = run_petrelctl(["backend", "user", "iterate"],
                        env={"PETREL_BACKEND_URL": "http://" + d.backend,
                             "BACKEND_API_TOKEN": TOKEN})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["alice", "mallory", "zed"] or "alice" in out.stdout


def test_auth_side_down(petreld, tmp_path):
    dead = f"127.0.0.1:{free_port()}"
    cfg = {"components": ["backend-api"], "mail": {"home": str(tmp_path / "m" / "%u")},
           "backend_api": {"auth_master_addr": dead}}
    d = petreld(cfg, env={"BACKEND_API_TOKEN": TOKEN})
    r = d.post("backend", "/api/backend/user/info", {"user": "alice"}, token=TOKEN)
    assert r.status == 200, r
    assert r.json()["userdb_status"] == "error" and r.json()["userdb"] is None
    r = d.post("backend", "/api/backend/user/iterate", {}, token=TOKEN)
    assert r.status == 502, r
    assert r.json()["error"]


def test_no_auth_master_addr(petreld, tmp_path):
    d = petreld({"mail": {"home": str(tmp_path / "m" / "%u")}}, env={"BACKEND_API_TOKEN": TOKEN})
    r = d.post("backend", "/api/backend/user/info", {"user": "alice"}, token=TOKEN)
    assert r.status == 200
    assert "userdb" not in r.json() and "userdb_status" not in r.json()
    assert d.post("backend", "/api/backend/user/iterate", {}, token=TOKEN).status == 503


def test_auth_restart_recovers(petreld, tmp_path):
    """The backend-plane API's client reconnects after the auth service went away."""
    auth_port = free_port()
    passwd = tmp_path / "passwd"
    passwd.write_text("plain:{PLAIN}pw:7:7\n")
    auth_cfg = {"components": ["auth"],
                "auth": {"listen": [f"127.0.0.1:{auth_port}"],
                         "passdb": {"driver": "passwd-file", "path": str(passwd)}}}
    a = petreld(auth_cfg)
    api = petreld({"mail": {"home": str(tmp_path / "m" / "%u")},
                   "backend_api": {"auth_master_addr": f"127.0.0.1:{auth_port}"}},
                  env={"BACKEND_API_TOKEN": TOKEN})

    def info():
        return api.post("backend", "/api/backend/user/info", {"user": "plain"},
                        token=TOKEN).json()["userdb_status"]
    assert info() == "ok"
    a.stop()
    assert info() == "error"
    petreld(merge_listen(auth_cfg, auth_port))
    wait_for(lambda: info() == "ok", timeout=15, what="reconnect to the auth service")


def merge_listen(cfg, port):
    import copy
    out = copy.deepcopy(cfg)
    out["auth"]["listen"] = [f"127.0.0.1:{port}"]
    return out


# ---------- petrelctl ----------

def test_petrelctl_auth_test_and_user(passwd_daemon):
    env = {"PETREL_AUTH_ADDR": auth_addr(passwd_daemon)}
    ok = subprocess.run([str(__import__("conftest").PETRELCTL), "auth", "test", "alice",
                         "--password-stdin"], input="s3cret\n", capture_output=True, text=True,
                        env=__import__("conftest").base_env(env), timeout=30)
    assert ok.returncode == 0, ok.stderr
    assert "alice" in ok.stdout
    bad = subprocess.run([str(__import__("conftest").PETRELCTL), "auth", "test", "alice",
                          "--password-stdin"], input="wrong\n", capture_output=True, text=True,
                         env=__import__("conftest").base_env(env), timeout=30)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    user = run_petrelctl(["auth", "user", "alice", "--json"], env=env)
    assert user.returncode == 0, user.stderr
    import json
    assert json.loads(user.stdout)["userdb"]["uid"] == 1001
    missing = run_petrelctl(["auth", "user", "nobody-here"], env=env)
    assert missing.returncode == 1
    down = run_petrelctl(["auth", "user", "alice"], env={"PETREL_AUTH_ADDR":
                                                         f"127.0.0.1:{free_port()}"})
    assert down.returncode == 3, down.stdout + down.stderr


def test_shutdown_with_connected_clients(passwd_daemon):
    c = AuthConn(auth_addr(passwd_daemon))
    assert c.verify("plain", "open sesame")[0] == "OK"
    passwd_daemon.stop()
    c.close()
    s = socket.socket()
    with pytest.raises(OSError):
        s.settimeout(1)
        s.connect(tuple(auth_addr(passwd_daemon).rsplit(":", 1)[:1]) +
                  (int(auth_addr(passwd_daemon).rsplit(":", 1)[1]),))
    s.close()


def test_account_without_password_refuses_logins(petreld, tmp_path):
    """An empty password field means "no password login", even when the
    default scheme is PLAIN and the client sends an empty password."""
    d = petreld(auth_overrides(tmp_path, "nopw::1006:1006::/home/nopw\n",
                               {"passdb": {"driver": "passwd-file",
                                           "path": str(tmp_path / "passwd"),
                                           "default_scheme": "PLAIN"}}))
    with AuthConn(auth_addr(d)) as c:
        assert c.verify("nopw", "")[0] == "FAIL"
        assert c.request("AUTH", "PLAIN", "resp=" + b64(b"\0nopw\0"))[0] == "FAIL"
        assert c.user("nopw")[0] == "OK"  # still a user for lookups
    assert "account has no password" in d.stderr()


# ---------- review fixes ----------

def test_client_not_reading_is_throttled_then_served(petreld, tmp_path):
    """A client that pipelines without reading makes the service stop reading
    it (bounded output), and everything is answered once it reads again."""
    import threading
    extras = " ".join(f"x{i}={'v' * 100}" for i in range(30))
    d = petreld(auth_overrides(tmp_path, f"big:{{PLAIN}}pw:7:7::/h::{extras}\n"))
    n = 3000  # about 10 MB of replies, more than the socket buffers hold
    with AuthConn(auth_addr(d), timeout=30) as c:
        assert c.user("big")[0] == "OK"  # cached from now on: answered on the loop
        batch = b"".join(encode("USER", f"u{i}", "big") for i in range(n))
        sender = threading.Thread(target=c.send_raw, args=(batch,))
        sender.start()
        time.sleep(0.5)  # the service's output piles up meanwhile
        for i in range(n):
            r = c.read()
            assert r is not None and r[0] == "OK" and r[1] == f"u{i}", r
        sender.join(timeout=30)
        assert c.verify("big", "pw")[0] == "OK"


def test_unknown_passdb_user_is_not_cached_for_a_separate_userdb(petreld, tmp_path):
    """Not being in the passdb says nothing about the userdb: a failed login
    must not make USER answer NOTFOUND for a user the userdb has."""
    userdb = tmp_path / "userdb"
    userdb.write_text("plain::1005:1005::/h\nmailonly::1010:1010::/m\n")
    cfg = auth_overrides(tmp_path, "plain:{PLAIN}pw:1005:1005::/h\n",
                         {"userdb": {"driver": "passwd-file", "path": str(userdb)}})
    d = petreld(cfg)
    with AuthConn(auth_addr(d)) as c:
        assert c.verify("mailonly", "x")[0] == "FAIL"
        r = c.user("mailonly")
        assert r[0] == "OK" and params(r)["uid"] == ["1010"], r


def test_iterate_failure_reason_is_generic(petreld, tmp_path, hashes):
    """A driver's error text (paths, SQL) goes to the log, not to clients."""
    dbfile = tmp_path / "users.db"
    make_sqlite(dbfile, hashes)
    d = petreld(sqlite_overrides(tmp_path, dbfile))
    db = sqlite3.connect(dbfile)
    db.execute("DROP TABLE users")
    db.commit()
    db.close()
    with AuthConn(auth_addr(d)) as c:
        c.send("ITERATE", "it")
        r = c.read()
        assert r[0] == "FAIL" and "temp" in r, r
        assert params(r, 2)["reason"] == ["temporary authentication failure"], r


def test_auth_client_backoff_starts_over_after_a_connection_worked(petreld, tmp_path):
    """The auth client's reconnect waits (net/backoff.h: 100 ms doubling to
    5 s) grow while the auth service is away; once a connection worked,
    losing the service again is retried after 100 ms, not after what the
    earlier outage had grown to (the retry_ms of the warning)."""
    port = free_port()
    api = petreld({"components": ["backend-api"], "mail": {"home": str(tmp_path / "m" / "%u")},
                   "backend_api": {"auth_master_addr": f"127.0.0.1:{port}"}},
                  env={"BACKEND_API_TOKEN": TOKEN})

    def retries():
        return [int(m) for m in re.findall(r'msg="auth service unavailable" .*retry_ms=(\d+)',
                                          api.stderr())]

    def ask():
        return api.post("backend", "/api/backend/user/info", {"user": "plain"}, token=TOKEN)

    # The client connects on demand: requests for 2 s make it try each time
    # its wait is over (100, 200, 400, 800 ms): the next wait is >= 1.6 s.
    t0 = time.monotonic()
    while time.monotonic() - t0 < 2.0:
        assert ask().json()["userdb_status"] == "error"
        time.sleep(0.02)
    assert retries() == [100], api.stderr()
    cfg = auth_overrides(tmp_path, "plain:{PLAIN}pw:1000:1000::/h\n")
    cfg["auth"]["listen"] = [f"127.0.0.1:{port}"]
    auth = petreld(cfg)
    wait_for(lambda: ask().json()["userdb_status"] == "ok", timeout=15,
             what="the auth client connected")
    assert "auth service available again" in api.stderr()
    auth.stop()
    wait_for(lambda: ask().json()["userdb_status"] == "error" and len(retries()) == 2,
             timeout=15, what="the auth service gone again")
    assert retries()[1] == 100, api.stderr()
