"""The warden (session registry and auth penalties) and the who endpoints:
real IMAP sessions made with imaplib appear in /api/backend/who when they
log in and disappear when they end; filters, groupings and counts; 501
without a warden and 502 when it cannot be reached; a petreld running IMAP
killed with SIGKILL has its sessions reaped by the warden in another
process; a restarted warden is filled again by the IMAP server's client; a
restarted instance's stale sessions are reaped on its new HELLO; limits of
the line protocol (line length, sessions, connections, allowed_nets);
penalties; petrelctl backend who; the metrics through promtool.

Protocol-level tests talk to the warden over a plain socket, one
tab-separated line at a time (docs/warden-protocol.md)."""

import datetime
import imaplib
import json
import shutil
import signal
import socket
import subprocess
import time

import pytest

from conftest import free_port, http_request, run_petrelctl, wait_for

PASSWD = ("alice:{PLAIN}wonderland:1001:1001\n"
          "bob:{PLAIN}builder:1002:1002\n"
          "carol:{PLAIN}singer:1003:1003\n")
PASSWORDS = {"alice": "wonderland", "bob": "builder", "carol": "singer"}


# ---------- configurations ----------

def imap_part(tmp_path, warden_addr, auth_port=None):
    """auth + imap sections registering sessions with `warden_addr`."""
    passwd = tmp_path / "passwd"
    passwd.write_text(PASSWD)
    auth_port = auth_port or free_port()
    return {
        "mail": {"home": str(tmp_path / "mail" / "%u")},
        "auth": {"listen": [f"127.0.0.1:{auth_port}"], "failure_delay": "10ms",
                 "failure_delay_max": "50ms",
                 "passdb": {"driver": "passwd-file", "path": str(passwd)}},
        "imap": {"listen": [f"127.0.0.1:{free_port()}"], "auth_addr": f"127.0.0.1:{auth_port}",
                 "warden_addr": warden_addr},
    }


def standalone(tmp_path, **warden):
    """One process: auth, imap, warden and the backend-plane API."""
    warden_addr = f"127.0.0.1:{free_port()}"
    cfg = imap_part(tmp_path, warden_addr)
    cfg["components"] = ["backend-api", "auth", "imap", "warden"]
    cfg["warden_service"] = {"listen": [warden_addr], **warden}
    return cfg


def warden_addr_of(d):
    return d.config["warden_service"]["listen"][0]


def imap_login(d, user):
    host, port = d.config["imap"]["listen"][0].rsplit(":", 1)
    m = imaplib.IMAP4(host, int(port))
    m.login(user, PASSWORDS[user])
    return m


def who(d, body=None, path="/api/backend/who"):
    r = d.post("backend", path, body if body is not None else {})
    return r


def who_json(d, body=None, path="/api/backend/who"):
    r = who(d, body, path)
    assert r.status == 200, r
    return r.json()


def who_when(d, body, n):
    """The who reply once it holds `n` sessions, else None (for wait_for)."""
    r = who_json(d, body)
    return r if r["total"] == n else None


def total(d, **filters):
    return who_json(d, filters, "/api/backend/who/count")["total"]


def metric(d, name):
    """The value of the unlabelled series `name`."""
    return metric_line(d, name)


def metric_line(d, series):
    text = d.get("telemetry", "/metrics").body.decode()
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{series} not in /metrics:\n{text}")


# ---------- a raw protocol client ----------

def escape(field):
    return (field.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
            .replace("\r", "\\r"))


class Wire:
    """One connection to the warden speaking its line protocol."""

    def __init__(self, addr, timeout=5):
        if addr.startswith("unix:"):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(addr[5:])
        else:
            host, port = addr.rsplit(":", 1)
            self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.settimeout(timeout)
        self.f = self.sock.makefile("rb")

    def send(self, *fields):
        self.sock.sendall(("\t".join(escape(f) for f in fields) + "\n").encode())

    def send_raw(self, data):
        self.sock.sendall(data)

    def line(self):
        raw = self.f.readline()
        if not raw:
            return None
        return raw.decode().rstrip("\n").split("\t")

    def ask(self, *fields):
        self.send(*fields)
        return self.line()

    def collect(self, *fields):
        """A LIST or COUNT: the item lines and the DONE line."""
        self.send(*fields)
        items = []
        while True:
            parts = self.line()
            assert parts is not None, "connection closed during a reply"
            if parts[0] in ("DONE", "ERROR"):
                return items, parts
            items.append(parts)

    def hello(self, instance, boot):
        assert self.ask("HELLO", "h", "1", instance, boot) == ["OK", "h", "1"]

    def close(self):
        self.f.close()
        self.sock.close()


# ---------- sessions through IMAP ----------

@pytest.fixture
def node(petreld, tmp_path):
    return petreld(standalone(tmp_path))


def test_sessions_appear_on_login_and_disappear_on_logout(node):
    assert who_json(node) == {"total": 0, "groups": []}
    before = int(time.time())
    a1 = imap_login(node, "alice")
    a2 = imap_login(node, "alice")
    b = imap_login(node, "bob")
    # A connection that never logs in is not a session.
    host, port = node.config["imap"]["listen"][0].rsplit(":", 1)
    anon = imaplib.IMAP4(host, int(port))
    after = int(time.time())

    body = wait_for(lambda: who_when(node, {}, 3), what="three sessions")
    assert [g["user"] for g in body["groups"]] == ["alice", "bob"]
    assert [g["total"] for g in body["groups"]] == [2, 1]
    ids = set()
    for g in body["groups"]:
        assert len(g["sessions"]) == g["total"]
        for s in g["sessions"]:
            assert set(s) == {"id", "user", "ip", "service", "connected_at"}
            assert s["user"] == g["user"] and s["service"] == "imap" and s["ip"] == "127.0.0.1"
            at = datetime.datetime.strptime(s["connected_at"], "%Y-%m-%dT%H:%M:%SZ")
            stamp = int(at.replace(tzinfo=datetime.timezone.utc).timestamp())
            assert before - 1 <= stamp <= after + 1, s
            ids.add(s["id"])
    assert len(ids) == 3
    assert metric(node, "petrel_warden_sessions") == 3

    a1.logout()
    wait_for(lambda: total(node) == 2, what="alice's first session to go")
    alice = who_json(node, {"user": "alice"})
    assert alice["total"] == 1 and alice["groups"][0]["total"] == 1
    # Dropping the TCP connection without LOGOUT ends the session too.
    b.shutdown()
    wait_for(lambda: total(node) == 1, what="bob's session to go")
    a2.logout()
    anon.logout()
    wait_for(lambda: total(node) == 0, what="every session to go")
    assert metric(node, "petrel_warden_sessions") == 0
    # Ending sessions is not reaping.
    assert metric(node, "petrel_warden_sessions_reaped_total") == 0


def test_filters_groupings_and_counts(node):
    clients = [imap_login(node, u) for u in ("carol", "alice", "bob", "alice")]
    wait_for(lambda: total(node) == 4, what="four sessions")

    flat = who_json(node, {"group_by": "none"})
    assert flat["total"] == 4 and "groups" not in flat
    assert len(flat["sessions"]) == 4
    keys = [(s["connected_at"], s["id"]) for s in flat["sessions"]]
    assert keys == sorted(keys)
    assert sorted(s["user"] for s in flat["sessions"]) == ["alice", "alice", "bob", "carol"]

    grouped = who_json(node, {"group_by": "user"})
    assert [g["user"] for g in grouped["groups"]] == ["alice", "bob", "carol"]
    assert who_json(node, {"group_by": ""})["groups"] == grouped["groups"]

    assert who_json(node, {"user": "bob", "group_by": "none"})["total"] == 1
    assert who_json(node, {"user": "nobody"}) == {"total": 0, "groups": []}
    assert who_json(node, {"service": "imap"})["total"] == 4
    assert who_json(node, {"service": "pop3"}) == {"total": 0, "groups": []}
    assert who_json(node, {"service": "imap", "user": "alice",
                           "group_by": "none"})["total"] == 2

    count = "/api/backend/who/count"
    assert who_json(node, {}, count) == {"total": 4, "service": "", "user": ""}
    assert who_json(node, {"service": "imap", "user": "alice"}, count) == {
        "total": 2, "service": "imap", "user": "alice"}
    assert who_json(node, {"by": "protocol"}, count) == {
        "total": 4, "by_protocol": {"imap": 4, "pop3": 0, "submission": 0, "lmtp": 0}}
    assert who_json(node, {"by": "protocol", "service": "pop3"}, count) == {
        "total": 0, "by_protocol": {"pop3": 0}}
    assert who_json(node, {"by": "user"}, count) == {
        "total": 4, "by_user": {"alice": 2, "bob": 1, "carol": 1}}
    assert who_json(node, {"by": "user", "user": "carol"}, count) == {
        "total": 1, "by_user": {"carol": 1}}

    for path, body, part in (
            ("/api/backend/who", {"service": "smtp"}, "unknown service"),
            ("/api/backend/who", {"group_by": "folder"}, "group_by"),
            ("/api/backend/who", {"user": 5}, "user"),
            ("/api/backend/who", {"user": "a\nb"}, "invalid user"),
            (count, {"by": "service"}, "by must be"),
            (count, {"service": "IMAP"}, "unknown service")):
        r = who(node, body, path)
        assert r.status == 400, (body, r)
        assert part in r.json()["error"], r
    r = node.post("backend", "/api/backend/who", b"{not json")
    assert r.status == 400
    for c in clients:
        c.logout()


def test_who_answers_501_without_a_warden(petreld):
    d = petreld()
    for path in ("/api/backend/who", "/api/backend/who/count"):
        r = d.post("backend", path, {})
        assert r.status == 501, r
        assert "warden_service.listen" in r.json()["error"]
    p = run_petrelctl(["--backend-url", f"http://{d.backend}", "backend", "who"])
    assert p.returncode == 1 and "501" in p.stderr, (p.stdout, p.stderr)


def test_who_answers_502_when_the_warden_is_unreachable(petreld):
    d = petreld({"warden_service": {"listen": [f"127.0.0.1:{free_port()}"]}})
    r = d.post("backend", "/api/backend/who", {})
    assert r.status == 502, r
    assert r.json()["error"].startswith("warden: ")
    r = d.post("backend", "/api/backend/who/count", {"by": "user"})
    assert r.status == 502, r


@pytest.mark.slow
def test_who_answers_502_when_the_warden_does_not_answer(petreld, silent_server):
    d = petreld({"warden_service": {"listen": [silent_server.addr]}})
    t0 = time.monotonic()
    r = d.post("backend", "/api/backend/who", {}, timeout=30)
    assert r.status == 502, r
    assert "did not answer within 10000 ms" in r.json()["error"], r
    assert 9.5 <= time.monotonic() - t0 < 20


# ---------- across processes: crash, restart ----------

def test_sigkill_of_the_imap_process_reaps_its_sessions(petreld, tmp_path):
    warden_addr = f"127.0.0.1:{free_port()}"
    registry = petreld({"components": ["backend-api", "warden"],
                        "warden_service": {"listen": [warden_addr]}})
    (tmp_path / "b").mkdir()
    cfg = imap_part(tmp_path / "b", warden_addr)
    cfg["components"] = ["auth", "imap"]
    backend = petreld(cfg)
    clients = [imap_login(backend, u) for u in ("alice", "bob", "alice")]
    wait_for(lambda: total(registry) == 3, what="three sessions registered")
    assert metric(registry, "petrel_warden_connections") >= 1

    backend.proc.send_signal(signal.SIGKILL)
    backend.returncode = backend.wait()
    assert backend.returncode == -signal.SIGKILL
    # The kernel closed the IMAP process's connection to the warden.
    wait_for(lambda: total(registry) == 0, what="the killed process's sessions to be reaped")
    assert metric(registry, "petrel_warden_sessions_reaped_total") == 3
    assert metric(registry, "petrel_warden_sessions") == 0
    assert "sessions reaped: connection closed" in registry.stderr()
    for c in clients:
        c.sock.close()


def test_restarted_warden_is_filled_again(petreld, tmp_path):
    warden_addr = f"127.0.0.1:{free_port()}"
    (tmp_path / "b").mkdir()
    cfg = imap_part(tmp_path / "b", warden_addr)
    cfg["components"] = ["auth", "imap"]
    backend = petreld(cfg)
    # No warden yet: logins work all the same (registration is advisory).
    a = imap_login(backend, "alice")
    b = imap_login(backend, "bob")
    assert a.noop()[0] == "OK"

    registry_cfg = {"components": ["backend-api", "warden"],
                    "warden_service": {"listen": [warden_addr]}}
    registry = petreld(registry_cfg)
    # The client retries with backoff and sends its whole table.
    wait_for(lambda: total(registry) == 2, timeout=15, what="sessions sent after connecting")

    registry.stop()
    c = imap_login(backend, "carol")  # while the warden is down
    b.logout()                        # ends while the warden is down
    again = petreld(registry_cfg)
    body = wait_for(lambda: who_when(again, {"group_by": "none"}, 2), timeout=15,
                    what="the restarted warden to be filled again")
    assert sorted(s["user"] for s in body["sessions"]) == ["alice", "carol"]
    a.logout()
    c.logout()
    wait_for(lambda: total(again) == 0, what="sessions to end")


def test_unix_socket_listener(petreld, tmp_path):
    sock = tmp_path / "warden.sock"
    cfg = imap_part(tmp_path, f"unix:{sock}")
    cfg["components"] = ["backend-api", "auth", "imap", "warden"]
    cfg["warden_service"] = {"listen": [f"unix:{sock}", f"127.0.0.1:{free_port()}"],
                             "socket_mode": "0600"}
    d = petreld(cfg)
    assert oct(sock.stat().st_mode & 0o777) == "0o600"
    m = imap_login(d, "alice")
    wait_for(lambda: total(d) == 1, what="a session over the Unix socket")
    # The second (TCP) listener serves the same registry.
    w = Wire(cfg["warden_service"]["listen"][1])
    items, done = w.collect("LIST", "1")
    assert done == ["DONE", "1", "1"] and items[0][3] == "alice"
    w.close()
    m.logout()


# ---------- the protocol ----------

@pytest.fixture
def warden(petreld):
    addr = f"127.0.0.1:{free_port()}"
    return petreld({"components": ["backend-api", "warden"],
                    "warden_service": {"listen": [addr], "max_sessions": 5,
                                       "max_connections": 4, "max_line_length": 1024,
                                       "penalty_decay": "1s"}})


def test_new_boot_id_reaps_the_old_process_sessions(warden):
    addr = warden_addr_of(warden)
    old = Wire(addr)
    old.hello("imap@mx:143", "boot1")
    old.send("CONNECT", "-", "boot1-1", "alice", "10.0.0.1", "imap", "1700000000")
    old.send("CONNECT", "-", "boot1-2", "bob", "", "imap", "1700000001")
    other = Wire(addr)
    other.hello("pop3@mx:110", "bootp")
    other.send("CONNECT", "-", "bootp-1", "alice", "10.0.0.2", "pop3", "1700000002")
    wait_for(lambda: total(warden) == 3, what="three sessions")
    s = who_json(warden, {"user": "alice", "service": "pop3", "group_by": "none"})["sessions"]
    assert s == [{"id": "bootp-1", "user": "alice", "ip": "10.0.0.2", "service": "pop3",
                  "connected_at": "2023-11-14T22:13:22Z"}]

    # The imap process restarts while its old connection still looks open.
    new = Wire(addr)
    new.hello("imap@mx:143", "boot2")
    wait_for(lambda: total(warden) == 1, what="the old boot's sessions to be reaped")
    assert metric(warden, "petrel_warden_sessions_reaped_total") == 2
    # The old connection is stale: it cannot register any more.
    reply = old.ask("CONNECT", "x1", "boot1-3", "carol", "", "imap", "1")
    assert reply[:2] == ["ERROR", "x1"] and "newer boot id" in reply[2], reply
    assert new.ask("CONNECT", "x2", "boot2-1", "carol", "", "imap", "5") == ["OK", "x2"]
    assert total(warden, by="") == 2
    for w in (old, other, new):
        w.close()
    wait_for(lambda: total(warden) == 0, what="connections closed")


def test_protocol_errors_and_limits(warden):
    addr = warden_addr_of(warden)
    # max_connections 4 (the backend-plane API has not connected yet).
    conns = [Wire(addr) for _ in range(4)]
    for c in conns:
        assert c.ask("PENALTY-GET", "1", "10.0.0.1") == ["PENALTY", "1", "0"]
    extra = Wire(addr)
    assert extra.line() is None  # closed at once
    assert "max_connections reached" in warden.stderr()
    for c in conns + [extra]:
        c.close()
    wait_for(lambda: metric(warden, "petrel_warden_connections") == 0, what="connections closed")

    w = Wire(addr)
    assert w.ask("CONNECT", "1", "s", "u", "", "imap", "1") == [
        "ERROR", "1", "CONNECT before HELLO"]
    assert w.ask("HELLO", "2", "9", "i", "b")[:2] == ["ERROR", "2"]
    w.hello("inst", "b")
    assert w.ask("HELLO", "3", "1", "inst", "b")[:2] == ["ERROR", "3"]
    assert w.ask("FROB", "4") == ["ERROR", "4", "FROB: unknown verb"]
    reply = w.ask("CONNECT", "5", "s1", "u", "not-an-ip", "imap", "1")
    assert reply[:2] == ["ERROR", "5"] and "IP" in reply[2]
    reply = w.ask("CONNECT", "6", "s1", "u", "", "smtp", "1")
    assert "unknown service" in reply[2]
    reply = w.ask("LIST", "-")
    assert reply[:2] == ["ERROR", "-"]
    # DISCONNECT of an unknown session is not an error.
    assert w.ask("DISCONNECT", "7", "nothing") == ["OK", "7"]
    # Fire-and-forget requests are only answered when refused.
    for i in range(5):
        w.send("CONNECT", "-", f"s{i}", "user", "", "lmtp", "1")
    reply = w.ask("CONNECT", "-", "s5", "user", "", "lmtp", "1")
    assert reply[:2] == ["ERROR", "-"] and "max_sessions 5" in reply[2], reply
    assert w.ask("COUNT", "8", "by=protocol") == ["ITEM", "8", "lmtp", "5"]
    assert w.line() == ["DONE", "8", "5"]
    # max_line_length 1024: a longer line is refused and the connection closed.
    w.send_raw(b"LIST\t9\tuser=" + b"x" * 1100 + b"\n")
    reply = w.line()
    assert reply == ["ERROR", "-", "line too long"], reply
    assert w.line() is None
    wait_for(lambda: total(warden) == 0, what="the closed connection's sessions reaped")

    # A bad escape is a framing error: answered, then closed.
    w = Wire(addr)
    w.send_raw(b"LIST\t1\\x\n")
    reply = w.line()
    assert reply[:2] == ["ERROR", "-"] and "bad escape" in reply[2]
    assert w.line() is None



def test_allowed_nets_refuse_other_clients(petreld):
    addr = f"127.0.0.1:{free_port()}"
    d = petreld({"components": ["warden"],
                 "warden_service": {"listen": [addr], "allowed_nets": ["10.0.0.0/8"]}})
    w = Wire(addr)
    assert w.line() is None
    assert "not in warden_service.allowed_nets" in d.stderr()
    w.close()


def test_penalties_count_and_decay(warden):
    w = Wire(warden_addr_of(warden))
    assert w.ask("PENALTY-GET", "1", "192.0.2.7") == ["PENALTY", "1", "0"]
    assert w.ask("PENALTY-INC", "2", "192.0.2.7") == ["PENALTY", "2", "1"]
    w.send("PENALTY-INC", "-", "::ffff:192.0.2.7")
    assert w.ask("PENALTY-GET", "3", "192.0.2.7") == ["PENALTY", "3", "2"]
    # No HELLO is needed for penalties; a second connection sees the same table.
    other = Wire(warden_addr_of(warden))
    assert other.ask("PENALTY-GET", "1", "192.0.2.7") == ["PENALTY", "1", "2"]
    time.sleep(1.1)  # penalty_decay: 1s
    assert w.ask("PENALTY-GET", "4", "192.0.2.7") == ["PENALTY", "4", "0"]
    lookups = 'petrel_warden_penalty_lookups_total{result="%s"}'
    assert metric_line(warden, lookups % "hit") == 2
    assert metric_line(warden, lookups % "miss") == 1
    assert metric_line(warden, lookups % "expired") == 1
    assert "ERROR" == w.ask("PENALTY-INC", "5", "example.org")[0]
    w.close()
    other.close()


def test_bad_configuration_is_reported(tmp_path):
    from conftest import run_petreld
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("warden_service:\n  listen: []\n  max_sessions: 0\n")
    p = run_petreld(["-c", str(cfg), "--check-config"])
    assert p.returncode == 2
    assert "bad.yaml:3: warden_service.max_sessions:" in p.stderr, p.stderr
    cfg.write_text("components: [warden]\n")
    p = run_petreld(["-c", str(cfg), "--check-config"])
    assert p.returncode == 2 and "warden_service.listen" in p.stderr, p.stderr
    cfg.write_text("components: [warden]\nwarden_service:\n  listen: []\n")
    p = run_petreld(["-c", str(cfg), "--check-config"])
    assert p.returncode == 2, p.stderr
    assert "bad.yaml:3: warden_service.listen: the warden component needs" in p.stderr
    cfg.write_text("warden_service:\n  listen: [\"nohost\"]\n")
    p = run_petreld(["-c", str(cfg), "--check-config"])
    assert p.returncode == 2 and "bad.yaml:2: warden_service.listen:" in p.stderr, p.stderr
    cfg.write_text("imap:\n  warden_addr: \"1.2.3.4\"\n")
    p = run_petreld(["-c", str(cfg), "--check-config"])
    assert p.returncode == 2 and "imap.warden_addr" in p.stderr, p.stderr
    cfg.write_text("warden_service:\n  listen: [\"127.0.0.1:10210\"]\n  penalty_decay: 5m\n")
    p = run_petreld(["-c", str(cfg), "--check-config"])
    assert p.returncode == 0, p.stderr
    assert "penalty_decay: 300000ms" in p.stdout


# ---------- petrelctl ----------

def ctl(d, *args):
    return run_petrelctl(["--backend-url", f"http://{d.backend}", *args])


def test_petrelctl_who(node):
    clients = [imap_login(node, u) for u in ("alice", "alice", "bob")]
    wait_for(lambda: total(node) == 3, what="three sessions")
    p = ctl(node, "backend", "who")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].split() == ["USER", "SESSIONS", "SERVICES", "IPS"]
    assert lines[1].split() == ["alice", "2", "imap", "127.0.0.1"]
    assert lines[2].split() == ["bob", "1", "imap", "127.0.0.1"]
    assert lines[3] == "total: 3"

    p = ctl(node, "backend", "who", "--group-by", "none", "--user", "alice")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].split() == ["USER", "SERVICE", "IP", "CONNECTED", "ID"]
    assert len(lines) == 4 and lines[-1] == "total: 2"
    assert all(line.split()[0] == "alice" for line in lines[1:3])

    p = ctl(node, "--json", "backend", "who", "--service", "imap")
    assert p.returncode == 0 and json.loads(p.stdout)["total"] == 3

    p = ctl(node, "backend", "who", "count")
    assert p.returncode == 0 and p.stdout.splitlines()[0] == "total: 3", p.stdout
    p = ctl(node, "--json", "backend", "who", "count", "--by", "protocol")
    assert json.loads(p.stdout)["by_protocol"]["imap"] == 3
    p = ctl(node, "backend", "who", "count", "--by", "user")
    assert p.returncode == 0
    assert "  alice: 2" in p.stdout.splitlines() and "  bob: 1" in p.stdout.splitlines()

    p = ctl(node, "backend", "who", "--service", "smtp")
    assert p.returncode == 1 and "400" in p.stderr and "unknown service" in p.stderr
    for bad in (["who", "--nope", "x"], ["who", "--user"], ["who", "count", "--group-by", "user"],
                ["who", "--by", "user"]):
        p = ctl(node, "backend", *bad)
        assert p.returncode == 2, (bad, p.stdout, p.stderr)
        assert "usage: petrelctl backend who" in p.stderr
    for c in clients:
        c.logout()


# ---------- metrics ----------

def test_metrics_pass_promtool(node):
    m = imap_login(node, "alice")
    w = Wire(warden_addr_of(node))
    w.ask("PENALTY-GET", "1", "10.0.0.1")
    wait_for(lambda: total(node) == 1, what="a session")
    text = node.get("telemetry", "/metrics").body.decode()
    for name in ("petrel_warden_request_seconds_bucket", "petrel_warden_sessions ",
                 "petrel_warden_sessions_reaped_total ", "petrel_warden_penalty_lookups_total{",
                 "petrel_warden_connections ", "petrel_warden_connections_total "):
        assert name in text, name
    assert 'petrel_warden_request_seconds_count{verb="CONNECT",result="ok"} 1' in text
    assert 'petrel_warden_request_seconds_bucket{verb="LIST",result="ok",le="+Inf"}' in text
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed")
    check = subprocess.run([promtool, "check", "metrics"], input=text.encode(),
                           capture_output=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr
    w.close()
    m.logout()


# ---------- auth penalties shared through the warden ----------

def auth_node(petreld, tmp_path, name, warden_addr):
    d = tmp_path / name
    d.mkdir()
    (d / "passwd").write_text(PASSWD)
    return petreld({"components": ["auth"],
                    "auth": {"listen": [f"127.0.0.1:{free_port()}"], "failure_delay": "50ms",
                             "failure_delay_max": "400ms", "warden_addr": warden_addr,
                             "passdb": {"driver": "passwd-file", "path": str(d / "passwd")}}})


def timed_verify(auth, user, password, ip):
    from authproto import AuthConn
    with AuthConn(auth.config["auth"]["listen"][0]) as c:
        t0 = time.monotonic()
        reply = c.verify(user, password, ip=ip)
        return reply[0], time.monotonic() - t0


def test_auth_instances_share_failure_counts(petreld, tmp_path, warden):
    addr = warden_addr_of(warden)
    a1 = auth_node(petreld, tmp_path, "a1", addr)
    a2 = auth_node(petreld, tmp_path, "a2", addr)
    for _ in range(3):
        assert timed_verify(a1, "alice", "wrong", "198.51.100.7")[0] == "FAIL"
    w = Wire(addr)
    wait_for(lambda: w.ask("PENALTY-GET", "1", "198.51.100.7")[2] == "3",
             what="three failures in the warden")
    # The other instance delays the same address's next failure: 50 ms
    # doubled twice on top of the 50 ms failure delay. A correct password
    # is answered at once, penalty or not.
    result, took = timed_verify(a2, "alice", "wrong", "198.51.100.7")
    assert result == "FAIL" and took >= 0.25, took
    result, took = timed_verify(a2, "alice", "wrong", "198.51.100.8")
    assert result == "FAIL" and took < 0.2, took
    result, took = timed_verify(a2, "alice", "wonderland", "198.51.100.7")
    assert result == "OK" and took < 0.2, took
    lookups = 'petrel_warden_penalty_lookups_total{result="%s"}'
    assert metric_line(warden, lookups % "hit") >= 2
    w.close()


def test_auth_counts_locally_while_the_warden_is_down(petreld, tmp_path):
    a = auth_node(petreld, tmp_path, "a", f"127.0.0.1:{free_port()}")
    for _ in range(3):
        assert timed_verify(a, "alice", "wrong", "198.51.100.9")[0] == "FAIL"
    result, took = timed_verify(a, "alice", "wrong", "198.51.100.9")
    assert result == "FAIL" and took >= 0.25, took
    assert "warden unavailable" in a.stderr()
