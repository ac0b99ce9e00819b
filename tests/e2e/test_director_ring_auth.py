"""Authentication on the director's ring port (docs/ring-protocol.md,
"Authentication"; issue 19 item 4): a real petreld with the director
component, raw sockets speaking the ring protocol, proofs computed here with
Python's hmac/hashlib.

Anonymous clients that used to be able to take backends out of service
(`HELLO monitor` + `BACKEND-FLUSH`, `HELLO director` + `RING-CHANGE down`) are
refused and change nothing (checked through the admin API); a wrong secret, a
replayed or reflected proof and anything sent before AUTH are refused; the
right secret works; an idle unauthenticated connection is closed after
ring.auth_timeout; without a secret the director refuses to start unless
ring.allow_unauthenticated says so, and then the old behaviour holds; two
directors with different secrets do not link."""

import os
import socket
import threading
import time

import pytest

from conftest import default_config, free_port, http_request, merge, run_petreld, to_yaml, \
    wait_for
from ringproto import SECRET, RingClient, auth_proof, encode, params, user_hash

TOKEN = "ring-auth-test-token"
BACKENDS = [{"ip": "10.0.0.1", "port": 143}, {"ip": "10.0.0.2", "port": 143}]


def director_cfg(ring=None, peers=None, ip="127.0.0.1", ring_port=None, api_port=None):
    return {"components": ["director"],
            "director": {"api": {"listen": f"{ip}:{api_port or free_port()}"},
                         "ring": {"listen": f"{ip}:{ring_port or free_port()}", **(ring or {})},
                         "peers": peers or [],
                         "backends": BACKENDS}}


class Director:
    def __init__(self, daemon):
        self.d = daemon
        self.api = daemon.config["director"]["api"]["listen"]
        self.ring = daemon.config["director"]["ring"]["listen"]

    def backends(self):
        r = http_request(self.api, "GET", "/api/director/backends", token=TOKEN)
        assert r.status == 200, r
        return {b["ip"]: b["up"] for b in r.json()["backends"]}


@pytest.fixture
def director(petreld):
    def start(secret=SECRET, **ring):
        env = {"DIRECTOR_API_TOKEN": TOKEN}
        if secret is not None:
            env["DIRECTOR_RING_SECRET"] = secret
        return Director(petreld(director_cfg(ring), env=env))
    return start


def raw(d):
    """A connection that has read the director's VERSION (c.version)."""
    c = RingClient(d.ring, hello=False, timeout=5)
    c.read_version()
    return c


# ---------- anonymous clients change nothing ----------

def test_anonymous_monitor_cannot_flush_a_backend(director):
    d = director()
    assert d.backends() == {"10.0.0.1": True, "10.0.0.2": True}
    c = raw(d)
    # what an anonymous monitor did on today's main: VERSION, HELLO, BACKEND-FLUSH at once
    c.send_raw(encode("VERSION", "petrel-ring", 1, 0) + encode("HELLO", "monitor", "evil")
               + encode("BACKEND-FLUSH", "10.0.0.1", "reason=attack"))
    # the director reads a connection's lines in order: once it has closed
    # this one, a flush it had taken would be applied already
    closed = c.closed(timeout=3)
    assert d.backends() == {"10.0.0.1": True, "10.0.0.2": True}
    assert closed
    assert c.buf == encode("ERROR", "authentication required: AUTH expected after VERSION")
    assert params(c.version[4:])["auth"] == "hmac-sha256"
    log = d.d.stderr()
    assert 'msg="ring authentication failed"' in log and "HELLO without AUTH" in log
    assert "monitor reports backend down" not in log


def test_anonymous_director_cannot_remove_a_backend(director):
    d = director()
    c = raw(d)
    c.send_raw(encode("VERSION", "petrel-ring", 1, 0) + encode("HELLO", "director", "10.9.9.9:9102")
               + encode("RING-CHANGE", "down", "10.0.0.1", 143, "", 100, 0, "10.9.9.9:9102",
                        2 ** 62))
    closed = c.closed(timeout=3)
    assert d.backends() == {"10.0.0.1": True, "10.0.0.2": True}
    assert closed and c.buf.startswith(b"ERROR\t")
    # nothing but the exchange before AUTH: not even a lookup or a ping
    for line in (encode("LOOKUP", 1, "user"), encode("PING", "x"), encode("HOST", "10.0.0.9",
                                                                           143, "", 1, "up", 0)):
        c = raw(d)
        c.send_raw(encode("VERSION", "petrel-ring", 1, 1) + line)
        assert c.recv()[0] == "ERROR"
        assert c.closed()


# ---------- wrong, replayed and reflected proofs ----------

def test_wrong_secret_is_refused_and_not_logged(director):
    d = director()
    c = raw(d)
    wrong = "another-secret-of-enough-length"
    reply = c.authenticate(secret=wrong)
    assert reply == ["ERROR", "authentication failed"]
    assert c.closed()
    # the same HELLO + BACKEND-FLUSH after a failed AUTH changes nothing
    c = raw(d)
    server_nonce = params(c.version[4:])["nonce"]
    cn = os.urandom(32).hex()
    c.send_raw(encode("VERSION", "petrel-ring", 1, 1)
               + encode("AUTH", "hmac-sha256", cn, auth_proof(wrong, "client", server_nonce, cn))
               + encode("HELLO", "monitor", "m") + encode("BACKEND-FLUSH", "10.0.0.2"))
    assert c.recv() == ["ERROR", "authentication failed"]
    assert c.closed()  # lines are taken in order: the flush would be applied by now
    assert d.backends() == {"10.0.0.1": True, "10.0.0.2": True}
    log = d.d.stderr()
    assert log.count('msg="ring authentication failed"') >= 2
    assert SECRET not in log and wrong not in log
    assert auth_proof(wrong, "client", server_nonce, cn) not in log


def test_replayed_and_reflected_proofs_are_refused(director):
    d = director()
    # a genuine exchange, recorded
    c = raw(d)
    cn = os.urandom(32).hex()
    assert c.authenticate(client_nonce=cn)[0] == "AUTH-OK"
    sn = params(c.version[4:])["nonce"]
    recorded = encode("AUTH", "hmac-sha256", cn, auth_proof(SECRET, "client", sn, cn))
    c.close()
    # replayed on a new connection: the director's nonce is fresh, so it fails
    c = raw(d)
    assert params(c.version[4:])["nonce"] != sn
    c.send_raw(encode("VERSION", "petrel-ring", 1, 1) + recorded)
    assert c.recv() == ["ERROR", "authentication failed"]
    assert c.closed()
    # reflection: the director's own nonce sent back as the client's
    c = raw(d)
    sn = params(c.version[4:])["nonce"]
    c.send_raw(encode("VERSION", "petrel-ring", 1, 1)
               + encode("AUTH", "hmac-sha256", sn, auth_proof(SECRET, "server", sn, sn)))
    assert c.recv()[0] == "ERROR"
    assert c.closed()
    # the director's proof (AUTH-OK) offered as a client proof
    c = raw(d)
    sn = params(c.version[4:])["nonce"]
    cn = os.urandom(32).hex()
    c.send_raw(encode("VERSION", "petrel-ring", 1, 1)
               + encode("AUTH", "hmac-sha256", cn, auth_proof(SECRET, "server", sn, cn)))
    assert c.recv() == ["ERROR", "authentication failed"]
    assert c.closed()


# ---------- the right secret ----------

def test_authenticated_monitor_and_director_act(director):
    d = director()
    mon = RingClient(d.ring, "monitor", "mon-0")  # AUTH, AUTH-OK checked, HELLO
    mon.send("BACKEND-FLUSH", "10.0.0.1", "reason=probe failed")
    wait_for(lambda: d.backends()["10.0.0.1"] is False, what="the flush")
    peer = RingClient(d.ring, "director", "127.0.0.9:9102")
    peer.send("RING-CHANGE", "down", "10.0.0.2", 143, "", 100, int(time.time()) + 5,
              "127.0.0.9:9102", 1)
    wait_for(lambda: "10.0.0.2" not in d.backends(), what="the removal")
    assert 'auth=hmac-sha256' in d.d.stderr()  # "ring client connected ... auth=hmac-sha256"
    mon.close()
    peer.close()


# ---------- time-outs ----------

def test_idle_unauthenticated_connection_is_closed(director):
    d = director(auth_timeout="500ms")
    idle = raw(d)  # says nothing at all
    half = raw(d)
    half.send("VERSION", "petrel-ring", 1, 1)  # and stops there
    t0 = time.monotonic()
    assert idle.recv(timeout=5) == ["ERROR", "authentication timeout: VERSION and AUTH expected"]
    assert idle.closed()
    assert half.recv(timeout=5)[0] == "ERROR" and half.closed()
    assert time.monotonic() - t0 < 3
    assert "ring client not authenticated in time" in d.d.stderr()
    # an authenticated client is not held to auth_timeout
    ok = RingClient(d.ring)
    time.sleep(0.8)
    assert ok.lookup(1, "alice")[0] == "LOOKUP-OK"


# ---------- no secret ----------

def test_no_secret_refuses_to_start(tmp_path):
    cfg = merge(default_config(), director_cfg())
    path = tmp_path / "petrel.yaml"
    path.write_text(to_yaml(cfg) + "\n")
    proc = run_petreld(["-c", str(path)], env={"DIRECTOR_API_TOKEN": TOKEN})
    assert proc.returncode != 0
    assert "no ring secret" in proc.stderr and "director.ring.allow_unauthenticated" in proc.stderr
    # a secret too short to be one is refused too, without being shown
    proc = run_petreld(["-c", str(path)], env={"DIRECTOR_API_TOKEN": TOKEN,
                                               "DIRECTOR_RING_SECRET": "hunter2"})
    assert proc.returncode != 0 and "at least 16" in proc.stderr and "hunter2" not in proc.stderr
    # an unreadable secret file is an error naming the file
    cfg["director"]["ring"]["secret_file"] = str(tmp_path / "missing.secret")
    path.write_text(to_yaml(cfg) + "\n")
    proc = run_petreld(["-c", str(path)], env={"DIRECTOR_API_TOKEN": TOKEN})
    assert proc.returncode != 0 and "missing.secret" in proc.stderr


def test_allow_unauthenticated_keeps_the_old_behaviour(director):
    d = director(secret=None, allow_unauthenticated=True)
    c = raw(d)
    assert "auth" not in params(c.version[4:])  # no challenge
    c.send("VERSION", "petrel-ring", 1, 0)
    c.send("HELLO", "monitor", "old-monitor")
    while c.recv()[0] != "DONE":
        pass
    c.send("BACKEND-FLUSH", "10.0.0.1")
    wait_for(lambda: d.backends()["10.0.0.1"] is False, what="the anonymous flush")
    assert "ring authentication disabled" in d.d.stderr()


def test_allow_unauthenticated_with_a_secret_takes_both(director):
    """The migration setting: a secret is offered and checked when used, but
    clients that skip AUTH still get in."""
    d = director(allow_unauthenticated=True)
    anon = RingClient(d.ring, "login", "old-proxy", secret=None)
    assert anon.lookup(1, "bob")[0] == "LOOKUP-OK"
    authed = RingClient(d.ring, "login", "new-proxy")
    assert authed.lookup(2, "bob")[0] == "LOOKUP-OK"
    c = raw(d)
    assert c.authenticate(secret="a-wrong-secret-0123456789")[0] == "ERROR"  # still checked
    assert c.closed()


# ---------- peer directors ----------

def test_directors_with_different_secrets_do_not_link(petreld):
    ips = ["127.0.0.1", "127.0.0.2"]
    api_port, ring_port = free_port(), free_port()
    reps = []
    for ip, secret in zip(ips, [SECRET, "a-different-ring-secret-4242"]):
        cfg = director_cfg({"reconnect_min": "50ms", "reconnect_max": "200ms",
                            "peer_timeout": "1s"},
                           peers=[f"{o}:{ring_port}" for o in ips if o != ip], ip=ip,
                           ring_port=ring_port, api_port=api_port)
        reps.append(Director(petreld(cfg, env={"DIRECTOR_API_TOKEN": TOKEN,
                                               "DIRECTOR_RING_SECRET": secret})))
    a, b = reps
    wait_for(lambda: 'msg="ring authentication failed"' in a.d.stderr()
             and 'msg="ring authentication failed"' in b.d.stderr(), timeout=10,
             what="both directors refusing the other's link")
    r = http_request(a.api, "POST", "/api/director/backends",
                     {"ip": "10.0.0.7", "port": 143, "tag": "", "vhosts": 10}, token=TOKEN)
    assert r.status == 200
    # a (wrongly) linked ring propagates within milliseconds; give it a second
    deadline = time.monotonic() + 1
    while time.monotonic() < deadline:
        assert "10.0.0.7" not in b.backends()
        time.sleep(0.05)
    ring = http_request(a.api, "GET", "/api/director/ring", token=TOKEN).json()
    other = next(m for m in ring["members"] if not m["self"])
    assert other["link"]["state"] == "reconnecting"
    assert "a-different-ring-secret-4242" not in a.d.stderr() + b.d.stderr()


def test_defaults_loopback_allow_list_and_secret_never_printed(tmp_path):
    def check_config(cfg):
        path = tmp_path / "petrel.yaml"
        path.write_text(to_yaml(cfg) + "\n")
        proc = run_petreld(["-c", str(path), "--check-config"],
                           env={"DIRECTOR_RING_SECRET": SECRET})
        assert proc.returncode == 0, proc.stderr
        assert SECRET not in proc.stdout + proc.stderr
        return proc.stdout.split("\n  ring:\n", 1)[1].split("\n  user_expire:", 1)[0]

    cfg = merge(default_config(), director_cfg())
    ring = check_config(cfg)
    nets = ring.split("allowed_nets:", 1)[1]
    nets = nets[:nets.index("handshake_timeout")]
    assert "127.0.0.0/8" in nets and "::1/128" in nets
    assert "10.96.0.0/12" not in nets and "10.244.0.0/16" not in nets
    secret_file = tmp_path / "ring.secret"
    secret_file.write_text(SECRET + "\n")
    cfg["director"]["ring"]["secret_file"] = str(secret_file)
    ring = check_config(cfg)
    assert str(secret_file) in ring and "allow_unauthenticated: false" in ring
    assert "auth_timeout: 5000ms" in ring and "max_pending_per_address: 16" in ring


# ---------- an attacker on the ring port ----------

def _every_verb(now):
    """One well-formed line of every verb in the codec's table (plus an
    unknown one): none may have an effect before AUTH."""
    origin = "10.9.9.9:9102"
    return [
        encode("HELLO", "monitor", "m"), encode("HELLO", "login", "l"),
        encode("HELLO", "director", origin),
        encode("HOST", "10.0.0.9", 143, "", 10, "up", now),
        encode("DONE"),
        encode("RING-CHANGE", "down", "10.0.0.1", 143, "", 100, now + 5, origin, 2 ** 62),
        encode("RING-CHANGE", "up", "10.0.0.9", 143, "", 100, now + 5, origin, 2 ** 62),
        encode("USER-MOVED", "alice", user_hash("alice"), "10.0.0.2", 143, origin, 2 ** 62),
        encode("USER-KICKED", "alice", user_hash("alice"), origin, 2 ** 62),
        encode("USER", user_hash("alice"), "10.0.0.2", 143, now + 3600, 0),
        encode("LOOKUP", 1, "alice"),
        encode("LOOKUP-OK", 1, "10.0.0.1", 143, "", "sticky"),
        encode("LOOKUP-FAIL", 1, "killing"),
        encode("SESSION-START", "s1", "alice", "10.0.0.1", "imap"),
        encode("SESSION-END", "s1"),
        encode("BACKEND-FLUSH", "10.0.0.1", "reason=x"), encode("BACKEND-UP", "10.0.0.1"),
        encode("PING", "x"), encode("PONG", "x"), encode("ERROR", "x"),
        encode("AUTH-OK", "0" * 64),
        encode("VERSION", "petrel-ring", 1, 1),
        encode("NOSUCHVERB", "x"),
    ]


def test_no_verb_has_an_effect_before_auth(director):
    d = director()
    login = RingClient(d.ring, "login", "proxy")
    home = login.lookup(1, "alice")
    assert home[0] == "LOOKUP-OK"
    now = int(time.time())
    for first in (b"", encode("VERSION", "petrel-ring", 1, 1)):
        for line in _every_verb(now):
            if first == b"" and line.startswith(b"VERSION\t"):
                continue  # that is the expected first line
            c = raw(d)
            c.send_raw(first + line + encode("HELLO", "monitor", "m")
                       + encode("BACKEND-FLUSH", "10.0.0.2"))
            got = c.recv()
            assert got[0] == "ERROR", (first, line, got)
            assert c.closed(), (first, line)
            assert c.buf == b"", (first, line, c.buf)  # nothing after the ERROR
    assert d.backends() == {"10.0.0.1": True, "10.0.0.2": True}
    assert login.lookup(2, "alice")[2:4] == home[2:4]  # not moved, not kicked
    log = d.d.stderr()
    assert log.count("ring client connected") == 1  # the login client only
    assert "monitor reports" not in log and "peer change" not in log
    login.close()


def test_auth_twice_and_malformed_auth_lines(director):
    d = director()
    # AUTH again after AUTH-OK, before and after HELLO
    c = raw(d)
    assert c.authenticate()[0] == "AUTH-OK"
    c.send("AUTH", "hmac-sha256", os.urandom(32).hex(), "0" * 64)
    assert c.recv() == ["ERROR", "AUTH already done: HELLO expected"] and c.closed()
    c = RingClient(d.ring, "monitor", "m")
    c.send("AUTH", "hmac-sha256", os.urandom(32).hex(), "0" * 64)
    assert c.recv() == ["ERROR", "AUTH is not accepted from monitor clients"]
    # malformed AUTH lines: each refused and closed, the right one still works
    def good(sn, cn=None):
        cn = cn or os.urandom(32).hex()
        return cn, auth_proof(SECRET, "client", sn, cn)
    cases = [
        lambda sn: encode("AUTH", "hmac-sha256", good(sn)[0] + "0", good(sn)[1]),  # long nonce
        lambda sn: encode("AUTH", "hmac-sha256", good(sn)[0][:-1], good(sn)[1]),  # short nonce
        lambda sn: encode("AUTH", "hmac-sha256", *map(str.upper, good(sn))),  # upper case
        lambda sn: encode("AUTH", "hmac-sha256", "g" * 64, good(sn)[1]),  # not hex
        lambda sn: encode("AUTH", "hmac-sha256", *good(sn)[::-1]),  # fields swapped
        lambda sn: encode("AUTH", "HMAC-SHA256", *good(sn)),  # another mechanism
        lambda sn: encode("AUTH", "hmac-sha256", good(sn)[0], good(sn)[1] + "00" * 500),
        lambda sn: encode("AUTH", "hmac-sha256", good(sn)[0], good(sn)[1][:32] + "\t"
                          + good(sn)[1][33:]),  # an escaped TAB inside the proof
        lambda sn: (lambda cn, p: b"AUTH\thmac-sha256\t" + cn.encode() + b"\t" + p[:10].encode()
                    + b"\0" + p[11:].encode() + b"\n")(*good(sn)),  # a NUL byte
        lambda sn: (lambda cn, p: b"AUTH\thmac-sha256\t" + cn.encode() + b"\t\\x"
                    + p[2:].encode() + b"\n")(*good(sn)),  # an unknown escape
    ]
    for i, make in enumerate(cases):
        c = raw(d)
        sn = params(c.version[4:])["nonce"]
        c.send_raw(encode("VERSION", "petrel-ring", 1, 1) + make(sn)
                   + encode("HELLO", "monitor", "m") + encode("BACKEND-FLUSH", "10.0.0.1"))
        got = c.recv()
        assert got[0] == "ERROR", (i, got)
        assert c.closed(), i
    # the director's nonce echoed as the client's, even with a proof made with the secret:
    # refused as such (the role label alone already keeps it from being a reflection)
    c = raw(d)
    sn = params(c.version[4:])["nonce"]
    c.send_raw(encode("VERSION", "petrel-ring", 1, 1)
               + encode("AUTH", "hmac-sha256", sn, auth_proof(SECRET, "client", sn, sn)))
    assert c.recv() == ["ERROR", "authentication failed: the client nonce must be fresh"]
    assert c.closed()
    assert d.backends() == {"10.0.0.1": True, "10.0.0.2": True}
    assert RingClient(d.ring, "login", "after").lookup(1, "bob")[0] == "LOOKUP-OK"
    assert SECRET not in d.d.stderr()


def _fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def _rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:"))


def test_hostile_unauthenticated_connections_are_bounded(director):
    d = director(auth_timeout="500ms", max_pending_per_address=1000)
    pid = d.d.pid
    RingClient(d.ring, "login", "warm").close()  # first-use allocations out of the way
    fds0, rss0 = _fds(pid), _rss_kb(pid)
    # a huge line before AUTH: refused at max_line, not buffered
    c = raw(d)
    t0 = time.monotonic()
    try:
        c.send_raw(b"AUTH\thmac-sha256\t" + b"a" * (4 << 20))
    except OSError:
        pass  # closed while we were still sending
    try:
        assert c.recv() == ["ERROR", "line too long"]
    except ConnectionResetError:
        pass  # the RST for the unread rest of the line may overtake the ERROR line
    assert c.closed() and time.monotonic() - t0 < 3
    assert 'reason="line too long"' in d.d.stderr()
    # slow-loris: a byte every 50 ms does not stretch auth_timeout
    c = raw(d)
    t0 = time.monotonic()
    line = encode("VERSION", "petrel-ring", 1, 1) + b"AUTH\thmac-sha256\t"
    closed = False
    for i in range(60):
        try:
            c.send_raw(line[i % len(line):i % len(line) + 1])
        except OSError:
            closed = True
            break
        time.sleep(0.05)
    assert closed or c.closed(timeout=1)
    assert time.monotonic() - t0 < 2.5
    # 300 connections that never authenticate: all closed after auth_timeout
    conns = [raw(d) for _ in range(300)]
    assert _fds(pid) >= fds0 + 250
    for c in conns:
        assert c.recv(timeout=5)[0] == "ERROR" and c.closed()
        c.close()
    wait_for(lambda: _fds(pid) <= fds0 + 2, timeout=5, what="descriptors returned")
    assert _rss_kb(pid) < rss0 + 16 * 1024, (rss0, _rss_kb(pid))
    assert RingClient(d.ring, "login", "after").lookup(1, "bob")[0] == "LOOKUP-OK"


def test_an_authenticated_client_keeps_to_its_kind(director):
    """One secret for every kind (docs/ring-protocol.md): what a kind may send
    is still checked after AUTH."""
    d = director()
    now = int(time.time())
    mon = RingClient(d.ring, "monitor", "mon")
    login = RingClient(d.ring, "login", "proxy")
    home = login.lookup(1, "alice")
    peer_only = [
        ("RING-CHANGE", "down", "10.0.0.1", 143, "", 100, now + 5, "10.9.9.9:9102", 1),
        ("USER-MOVED", "alice", user_hash("alice"), "10.0.0.2", 143, "10.9.9.9:9102", 2),
        ("USER-KICKED", "alice", user_hash("alice"), "10.9.9.9:9102", 3),
        ("USER", user_hash("alice"), "10.0.0.2", 143, now + 3600, 0),
        ("HOST", "10.0.0.9", 143, "", 10, "up", now),
    ]
    for fields in peer_only + [("LOOKUP", 7, "alice"), ("SESSION-START", "s", "alice",
                                                         "10.0.0.1", "imap")]:
        mon.send(*fields)
        assert mon.recv_until("ERROR")[1] == f"{fields[0]} is not accepted from monitor clients"
    for fields in peer_only + [("BACKEND-FLUSH", "10.0.0.1"), ("BACKEND-UP", "10.0.0.1")]:
        login.send(*fields)
        assert login.recv_until("ERROR")[1] == f"{fields[0]} is not accepted from login clients"
    assert d.backends() == {"10.0.0.1": True, "10.0.0.2": True}
    assert login.lookup(2, "alice")[2:4] == home[2:4]


# ---------- a fake peer director ----------

class FakePeer:
    """A ring listener at a peer's address that does not know the secret:
    `mode` "none" offers no challenge (a downgrade), "skip" offers one but
    never sends AUTH-OK, "wrong" answers AUTH with a proof made from another
    secret, "right" with the real one (the control). Each then sends a handshake that would flush 10.0.0.1 and add
    10.0.0.9 if the director took it."""

    def __init__(self, mode):
        self.mode = mode
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.2", 0))
        self.srv.listen(8)
        self.srv.settimeout(0.1)
        self.addr = f"127.0.0.2:{self.srv.getsockname()[1]}"
        self.dials = 0
        self.proofs = []  # the AUTH-OK proofs sent (none may be logged)
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop:
            try:
                c, _ = self.srv.accept()
            except (socket.timeout, OSError):
                continue
            self.dials += 1
            try:
                self._serve(c)
            except OSError:
                pass
            c.close()

    def _serve(self, c):
        c.settimeout(2)
        now = int(time.time())
        handshake = (encode("HOST", "10.0.0.1", 143, "", 100, "flush", now + 60)
                     + encode("HOST", "10.0.0.9", 143, "", 100, "up", now + 60) + encode("DONE"))
        if self.mode == "none":
            c.sendall(encode("VERSION", "petrel-ring", 1, 0) + handshake)
        else:
            nonce = os.urandom(32).hex()
            c.sendall(encode("VERSION", "petrel-ring", 1, 1, "auth=hmac-sha256",
                             f"nonce={nonce}"))
            buf = b""
            while b"HELLO" not in buf:
                data = c.recv(4096)
                if not data:
                    return
                buf += data
            auth = next(ln for ln in buf.decode().split("\n") if ln.startswith("AUTH\t"))
            client_nonce = auth.split("\t")[2]
            secret = SECRET if self.mode == "right" else "not-the-ring-secret-0000"
            self.proofs.append(auth_proof(secret, "server", nonce, client_nonce))
            if self.mode == "skip":
                c.sendall(handshake)
            else:
                c.sendall(encode("AUTH-OK", self.proofs[-1]) + handshake)
        end = time.monotonic() + 1
        while time.monotonic() < end and c.recv(4096):
            pass

    def close(self):
        self.stop = True
        self.thread.join()
        self.srv.close()


@pytest.mark.parametrize("mode", ["none", "skip", "wrong", "right"])
def test_a_peer_that_cannot_prove_the_secret_is_not_believed(petreld, mode):
    fake = FakePeer(mode)
    try:
        cfg = director_cfg({"reconnect_min": "50ms", "reconnect_max": "100ms",
                            "peer_timeout": "1s"}, peers=[fake.addr])
        d = Director(petreld(cfg, env={"DIRECTOR_API_TOKEN": TOKEN,
                                       "DIRECTOR_RING_SECRET": SECRET}))
        if mode == "right":  # the control: the same handshake is taken from a real peer
            wait_for(lambda: d.backends().get("10.0.0.9") is True
                     and d.backends()["10.0.0.1"] is False, timeout=10, what="the merge")
            return
        wait_for(lambda: fake.dials >= 3, timeout=10, what="three dials")
        assert d.backends() == {"10.0.0.1": True, "10.0.0.2": True}
        log = d.d.stderr()
        # at the default log level: an operator sees why the peer is not linked
        assert 'msg="peer failed authentication"' in log
        if mode == "none":
            assert "offers no challenge" in log
        if mode == "skip":
            assert "it sent HOST instead of AUTH-OK" in log
        assert not any(p in log for p in fake.proofs) and SECRET not in log
    finally:
        fake.close()


def test_one_address_cannot_hold_every_slot(director):
    """Connections that never authenticate are bounded per client address
    (ring.max_pending_per_address), so one address cannot take every
    ring.max_clients slot and lock the monitor, proxies and peers out."""
    d = director(max_clients=20, max_pending_per_address=8)
    hold = [raw(d) for _ in range(8)]  # from 127.0.0.1, never authenticating
    # the ninth from that address is closed at accept, before any VERSION
    c = RingClient(d.ring, hello=False, timeout=5)
    assert c.closed() and c.buf == b""
    # another address still gets in and is served
    other = RingClient(d.ring, "monitor", "mon", source="127.0.0.2")
    other.send("PING", "t")
    assert other.recv_until("PONG")[1] == "t"
    # a held connection that authenticates no longer counts: its address gets a slot
    assert hold[0].authenticate()[0] == "AUTH-OK"
    hold[0].send("HELLO", "login", "held")
    hold[0].recv_until("DONE")
    assert RingClient(d.ring, "login", "again").lookup(1, "bob")[0] == "LOOKUP-OK"
    extra = raw(d)  # 7 held and this one: the address is at its limit again
    c = RingClient(d.ring, hello=False, timeout=5)
    assert c.closed() and c.buf == b""
    # Refusals are logged at most once a second per listener (a flood
    # cannot flood the log): the second may be counted, not written.
    assert 1 <= d.d.stderr().count("max_pending_per_address reached") <= 2
    # closed connections give their slots back
    for h in hold[1:] + [extra]:
        h.close()
    wait_for(lambda: RingClient(d.ring, "login", "later").lookup(2, "bob")[0] == "LOOKUP-OK",
             timeout=5, what="the address's slots back")
