"""The quota mirror (document 3 "Mirror", quota_clone_dicts) into a real
Redis and a real SQLite dict: after a burst of IMAP APPENDs and LMTP
deliveries both hold priv/quota/storage and priv/quota/messages of each user
equal to what quota/show sums from the index; Redis MONITOR shows that a
user's key is written at most once per quota_clone_flush_delay while the
burst runs, several users share one script call per flush, and the metric
counts the same writes. A session that ends writes at once (the final
write) although the delay has not passed. With Redis stopped, APPENDs and
deliveries go on unhindered, the SQLite mirror is still written, and the
failure is logged and counted."""

import imaplib
import re
import smtplib
import socket
import sqlite3
import subprocess
import threading
import time

import pytest

from conftest import free_port, http_request, wait_for
from servers import REDIS_CLI, pgsql_server, redis_server, start_redis, stop_redis  # noqa: F401

TOKEN = "quota-clone-token"
PASSWD = ("alice:{PLAIN}a:1001:1001::::userdb_quota_rule=*:storage=100M\n"
          "bob:{PLAIN}b:1002:1002::::userdb_quota_rule=*:storage=100M\n"
          "carol:{PLAIN}c:1003:1003\n")


def message(n, size=3000):
    head = (f"From: s@example.net\r\nTo: x@example.org\r\nSubject: m{n}\r\n"
            f"Message-ID: <qc{n}@example.net>\r\n\r\n").encode()
    return head + b"x" * (size - len(head) - 2) + b"\r\n"


def config(tmp_path, redis_addr, delay):
    passwd = tmp_path / "passwd"
    passwd.write_text(PASSWD)
    (tmp_path / "dict").mkdir(exist_ok=True)
    auth_port = free_port()
    return {
        "components": ["auth", "lmtp", "imap", "backend-api"],
        "mail": {"home": str(tmp_path / "mail" / "%u"), "fsync": "never"},
        "auth": {"listen": [f"127.0.0.1:{auth_port}"],
                 "passdb": {"driver": "passwd-file", "path": str(passwd)}},
        "lmtp": {"listen": [f"127.0.0.1:{free_port()}"],
                 "auth_addr": f"127.0.0.1:{auth_port}", "username_format": "%n"},
        "imap": {"listen": [f"127.0.0.1:{free_port()}"], "auth_addr": f"127.0.0.1:{auth_port}"},
        "backend_api": {"auth_master_addr": f"127.0.0.1:{auth_port}"},
        "dicts": {"redis": {"driver": "kvstore", "address": redis_addr, "timeout": "1s"},
                  "sq": {"driver": "sql", "backend": "sqlite",
                         "path": str(tmp_path / "dict" / "sq.db")}},
        "quota": {"enabled": True, "quota_clone_dicts": ["redis", "sq"],
                  "quota_clone_flush_delay": delay},
    }


def imap_login(d, user):
    host, port = d.config["imap"]["listen"][0].rsplit(":", 1)
    m = imaplib.IMAP4(host, int(port))
    m.login(user, user[0])
    return m


def lmtp_deliver(d, rcpt, msg):
    host, port = d.config["lmtp"]["listen"][0].rsplit(":", 1)
    with smtplib.LMTP(host, int(port), timeout=30) as c:
        c.ehlo("client.test")
        assert c.mail("s@example.net")[0] == 250
        assert c.rcpt(rcpt)[0] == 250
        assert c.data(msg)[0] == 250


def show(d, user):
    r = http_request(d.backend, "GET", f"/api/backend/quota/show?user={user}", token=TOKEN)
    assert r.status == 200, r.body
    j = r.json()
    return j["storage"]["used"], j["messages"]["used"]


def redis_values(redis, user):
    out = redis.cli("MGET", f"priv/{user}/quota/storage", f"priv/{user}/quota/messages")
    vals = out.split()
    return tuple(int(v) for v in vals) if len(vals) == 2 else None


def sqlite_values(tmp_path, user):
    db = sqlite3.connect(tmp_path / "dict" / "sq.db", timeout=5)
    try:
        rows = dict(db.execute("SELECT key, value FROM dict WHERE key LIKE ?",
                               (f"priv/{user}/quota/%",)).fetchall())
    except sqlite3.OperationalError:
        return None
    finally:
        db.close()
    if len(rows) != 2:
        return None
    return (int(rows[f"priv/{user}/quota/storage"]), int(rows[f"priv/{user}/quota/messages"]))


def clone_metric(d, dict_name, result):
    body = http_request(d.telemetry, "GET", "/metrics").body.decode()
    m = re.search(r'^petrel_quota_clone_writes_total\{dict="%s",result="%s"\} (\S+)$'
                  % (dict_name, result), body, re.M)
    return float(m.group(1)) if m else 0.0


class Monitor:
    """redis-cli MONITOR in the background: (time, command words) of every
    command the server ran, the ones a script ran included."""

    def __init__(self, redis):
        self.proc = subprocess.Popen([REDIS_CLI, "-h", "127.0.0.1", "-p", str(redis.port),
                                      "monitor"], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "OK"
        self.lines = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)

    def sets(self, key):
        """Times at which `key` was SET."""
        out = []
        for line in list(self.lines):
            m = re.match(r'^(\d+\.\d+) \[\d+ [^\]]+\] "(\w+)" "([^"]*)"', line)
            if m and m.group(2).upper() == "SET" and m.group(3) == key:
                out.append(float(m.group(1)))
        return out

    def scripts(self):
        """The script calls, each once: an EVALSHA the server did not know
        (NOSCRIPT) is sent again as EVAL with the same keys and arguments."""
        calls = []
        for line in list(self.lines):
            m = re.match(r'^\S+ \[[^\]]+\] "EVAL(?:SHA)?" "(?:[^"\\]|\\.)*" (.*)$', line)
            if m and m.group(1) not in calls:
                calls.append(m.group(1))
        return calls

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


def test_burst_mirrored_at_most_once_per_delay(petreld, tmp_path, redis_server):
    redis_server.flushall()
    delay = 1.0
    d = petreld(config(tmp_path, redis_server.address, "1s"), env={"BACKEND_API_TOKEN": TOKEN})
    mon = Monitor(redis_server)
    try:
        m = imap_login(d, "alice")
        start = time.monotonic()

        def deliveries():
            for i in range(15):
                lmtp_deliver(d, "bob@example.org", message(100 + i))
        t = threading.Thread(target=deliveries)
        t.start()
        # Appends for about 3 delays.
        n = 0
        while time.monotonic() - start < 3 * delay or n < 20:
            assert m.append("INBOX", None, None, message(n))[0] == "OK"
            n += 1
        t.join()
        burst = time.monotonic() - start
        # Both users reach the index's values in both dicts.
        for user in ("alice", "bob"):
            want = show(d, user)
            wait_for(lambda: redis_values(redis_server, user) == want, timeout=10,
                     what=f"{user} in redis")
            wait_for(lambda: sqlite_values(tmp_path, user) == want, timeout=10,
                     what=f"{user} in sqlite")
        assert show(d, "alice")[1] == n and show(d, "bob")[1] == 15
        # While the session is open: never two writes of a user within the delay.
        time.sleep(0.2)
        for user in ("alice", "bob"):
            writes = mon.sets(f"priv/{user}/quota/storage")
            assert writes, mon.lines[-20:]
            gaps = [b - a for a, b in zip(writes, writes[1:])]
            # (Redis's clock sees each write after its own network and queue delay.)
            assert all(g >= delay * 0.8 for g in gaps), (user, gaps)
            assert len(writes) <= burst / delay + 2, (user, len(writes), burst)
        alice_writes = len(mon.sets("priv/alice/quota/storage"))
        bob_writes = len(mon.sets("priv/bob/quota/storage"))
        # One user-write counted per user and dict: the metric agrees with Redis.
        assert clone_metric(d, "redis", "ok") == alice_writes + bob_writes
        assert clone_metric(d, "sq", "ok") == alice_writes + bob_writes
        m.logout()
    finally:
        mon.stop()


def test_users_due_together_share_one_batch(petreld, tmp_path, redis_server):
    redis_server.flushall()
    d = petreld(config(tmp_path, redis_server.address, "500ms"), env={"BACKEND_API_TOKEN": TOKEN})
    mon = Monitor(redis_server)
    try:
        # One LMTP transaction for three users: all three marked at once.
        host, port = d.config["lmtp"]["listen"][0].rsplit(":", 1)
        with smtplib.LMTP(host, int(port), timeout=30) as c:
            c.ehlo("client.test")
            assert c.mail("s@example.net")[0] == 250
            for user in ("alice", "bob", "carol"):
                assert c.rcpt(f"{user}@example.org")[0] == 250
            assert c.data(message(1))[0] == 250
            assert c.getreply()[0] == 250 and c.getreply()[0] == 250
        for user in ("alice", "bob", "carol"):
            want = show(d, user)
            wait_for(lambda: redis_values(redis_server, user) == want, timeout=10,
                     what=f"{user} in redis")
            assert sqlite_values(tmp_path, user) == want
        # The users' writes shared script calls: fewer calls than users,
        # each user's two keys in one of them. (Usually one call carries all
        # six keys; the three deliveries of one transaction run one after
        # the other, and on a loaded machine the last can fall outside the
        # 50 ms batching window.)
        calls = mon.scripts()
        assert 1 <= len(calls) < 3, calls
        for user in ("alice", "bob", "carol"):
            assert sum(f'"priv/{user}/quota/storage"' in c and
                       f'"priv/{user}/quota/messages"' in c for c in calls) == 1, calls
    finally:
        mon.stop()


def test_session_end_writes_at_once(petreld, tmp_path, redis_server):
    redis_server.flushall()
    d = petreld(config(tmp_path, redis_server.address, "60s"), env={"BACKEND_API_TOKEN": TOKEN})
    m = imap_login(d, "carol")
    assert m.append("INBOX", None, None, message(1))[0] == "OK"
    # Within the delay nothing is written while the session lasts ...
    time.sleep(1.0)
    assert redis_values(redis_server, "carol") is None
    # ... and the session's end writes at once.
    m.logout()
    want = show(d, "carol")
    assert want[1] == 1
    wait_for(lambda: redis_values(redis_server, "carol") == want, timeout=5,
             what="final write at logout")
    assert sqlite_values(tmp_path, "carol") == want


def test_redis_down_blocks_nothing(petreld, tmp_path):
    redis = start_redis(tmp_path / "redis", port=free_port())
    try:
        d = petreld(config(tmp_path, redis.address, "200ms"), env={"BACKEND_API_TOKEN": TOKEN})
        m = imap_login(d, "alice")
        assert m.append("INBOX", None, None, message(1))[0] == "OK"
        wait_for(lambda: redis_values(redis, "alice") == show(d, "alice"), timeout=10,
                 what="alice in redis")
        stop_redis(redis)
        # Appends and deliveries go on at their usual pace.
        slowest = 0.0
        for i in range(10):
            t0 = time.monotonic()
            assert m.append("INBOX", None, None, message(10 + i))[0] == "OK"
            lmtp_deliver(d, "bob@example.org", message(50 + i))
            slowest = max(slowest, time.monotonic() - t0)
            time.sleep(0.1)
        assert slowest < 1.0, slowest
        m.logout()
        # The other target is still written; the failure is logged and counted.
        for user in ("alice", "bob"):
            want = show(d, user)
            wait_for(lambda: sqlite_values(tmp_path, user) == want, timeout=10,
                     what=f"{user} in sqlite")
        wait_for(lambda: clone_metric(d, "redis", "failed") > 0, timeout=10,
                 what="failed writes counted")
        wait_for(lambda: "cannot write the quota mirror" in d.stderr(), timeout=10,
                 what="failure logged")
        line = [ln for ln in d.stderr().splitlines() if "cannot write the quota mirror" in ln][0]
        assert "dict=redis" in line, line
        # Logged once, not once per failing batch.
        assert d.stderr().count("cannot write the quota mirror") == 1, d.stderr()
    finally:
        stop_redis(redis)


def test_shutdown_writes_what_is_dirty(petreld, tmp_path, redis_server):
    redis_server.flushall()
    d = petreld(config(tmp_path, redis_server.address, "60s"), env={"BACKEND_API_TOKEN": TOKEN})
    lmtp_deliver(d, "carol@example.org", message(1))
    lmtp_deliver(d, "carol@example.org", message(2))
    want = show(d, "carol")
    assert want[1] == 2
    # alice's session is still open when the daemon stops (it sends BYE).
    m = imap_login(d, "alice")
    assert m.append("INBOX", None, None, message(3))[0] == "OK"
    want_alice = show(d, "alice")
    time.sleep(0.5)
    assert redis_values(redis_server, "carol") is None  # the delay has not passed
    assert redis_values(redis_server, "alice") is None
    d.stop()  # SIGTERM: exit 0, sanitizer-clean
    assert redis_values(redis_server, "carol") == want
    assert sqlite_values(tmp_path, "carol") == want
    assert redis_values(redis_server, "alice") == want_alice
    assert "left unwritten" not in d.stderr() and "cannot write" not in d.stderr()


def test_mirror_into_postgresql_columns(petreld, tmp_path, pgsql_server):
    """Dovecot's dict-sql quota layout: a table with one row per user and a
    column per resource, through the sql dict's maps."""
    db = f"petrel_quota_clone_{free_port()}"
    pgsql_server.psql(f"CREATE DATABASE {db}")
    pgsql_server.psql("CREATE TABLE quota (username TEXT PRIMARY KEY, bytes BIGINT, "
                      "messages BIGINT)", db=db)
    cfg = config(tmp_path, "127.0.0.1:1", "200ms")
    maps = [{"pattern": "priv/quota/storage", "table": "quota", "username_field": "username",
             "value_field": "bytes"},
            {"pattern": "priv/quota/messages", "table": "quota", "username_field": "username",
             "value_field": "messages"}]
    cfg["dicts"] = {"pg": {"driver": "sql", "backend": "pgsql",
                           "connect": pgsql_server.connect_for(db), "maps": maps},
                    "sq": cfg["dicts"]["sq"]}
    cfg["quota"]["quota_clone_dicts"] = ["pg", "sq"]
    d = petreld(cfg, env={"BACKEND_API_TOKEN": TOKEN})
    host, port = d.config["lmtp"]["listen"][0].rsplit(":", 1)
    with smtplib.LMTP(host, int(port), timeout=30) as c:
        c.ehlo("client.test")
        assert c.mail("s@example.net")[0] == 250
        for user in ("alice", "bob"):
            assert c.rcpt(f"{user}@example.org")[0] == 250
        assert c.data(message(1))[0] == 250
        assert c.getreply()[0] == 250
    lmtp_deliver(d, "alice@example.org", message(2))

    def rows():
        out = pgsql_server.psql("SELECT username, bytes, messages FROM quota ORDER BY username",
                                db=db)
        return [tuple(line.split("|")) for line in out.split()]
    want = [(u, str(show(d, u)[0]), str(show(d, u)[1])) for u in ("alice", "bob")]
    wait_for(lambda: rows() == want, timeout=10, what="rows in PostgreSQL")
    assert want[0][2] == "2" and want[1][2] == "1"
    r = http_request(d.backend, "GET", "/api/backend/quota/clone/get?backend=pg&user=alice",
                     token=TOKEN)
    assert r.json() == {"backend": "pg", "user": "alice", "storage": int(want[0][1]),
                        "messages": 2}


def test_redis_that_never_answers_blocks_nothing(petreld, tmp_path):
    """A mirror target that accepts and then never answers (a hung Redis):
    saves go on at their pace, the other target is still written, and the
    daemon still stops promptly with sessions' final writes pending."""
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(64)
    held = []
    stop = threading.Event()

    def swallow():
        hole.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(hole.accept()[0])  # read nothing, answer nothing
            except OSError:
                pass

    t = threading.Thread(target=swallow, daemon=True)
    t.start()
    try:
        d = petreld(config(tmp_path, "127.0.0.1:%d" % hole.getsockname()[1], "200ms"),
                    env={"BACKEND_API_TOKEN": TOKEN})
        m = imap_login(d, "alice")
        slowest = 0.0
        for i in range(8):
            t0 = time.monotonic()
            assert m.append("INBOX", None, None, message(10 + i))[0] == "OK"
            lmtp_deliver(d, "bob@example.org", message(50 + i))
            slowest = max(slowest, time.monotonic() - t0)
            time.sleep(0.1)
        assert slowest < 1.0, slowest
        wait_for(lambda: len(held) > 0, timeout=10, what="a connection to the hung target")
        for user in ("alice", "bob"):
            want = show(d, user)
            wait_for(lambda: sqlite_values(tmp_path, user) == want, timeout=10,
                     what=f"{user} in sqlite")
        t0 = time.monotonic()
        d.stop(timeout=15)
        assert time.monotonic() - t0 < 10
    finally:
        stop.set()
        t.join()
        for c in held:
            c.close()
        hole.close()


def test_mirror_skips_ignored_folders_as_getquota(petreld, tmp_path, redis_server):
    """A folder the user's rule marks ignore is left out of the mirror as it
    is of quota/show and GETQUOTA: the mirror gets the rules the session
    had (the quota module's view of the user), not an empty set."""
    redis_server.flushall()
    cfg = config(tmp_path, redis_server.address, "60s")
    (tmp_path / "passwd").write_text(
        PASSWD + "dave:{PLAIN}d:1004:1004::::"
        "userdb_quota_rule=*:storage=100M:messages=1000,Spam:ignore\n")
    d = petreld(cfg, env={"BACKEND_API_TOKEN": TOKEN})
    m = imap_login(d, "dave")
    assert m.create("Spam")[0] == "OK"
    assert m.append("INBOX", None, None, message(1, 3000))[0] == "OK"
    for n in range(2, 5):
        assert m.append("Spam", None, None, message(n, 5000))[0] == "OK"
    typ, data = m.getquota('"User quota"')
    assert typ == "OK", data
    got = re.search(rb"STORAGE (\d+) \d+ MESSAGE (\d+) \d+", data[0])
    kib, count = int(got.group(1)), int(got.group(2))
    m.logout()  # the final write
    want = show(d, "dave")
    assert want[1] == 1 and count == 1  # Spam's three are not counted
    wait_for(lambda: redis_values(redis_server, "dave") is not None, timeout=5,
             what="final write at logout")
    for mirrored in (redis_values(redis_server, "dave"), sqlite_values(tmp_path, "dave")):
        assert mirrored == want, (mirrored, want)
        assert mirrored[1] == count
        assert (mirrored[0] + 1023) // 1024 == kib
