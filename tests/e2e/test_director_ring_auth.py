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
import time

import pytest

from conftest import default_config, free_port, http_request, merge, run_petreld, to_yaml, \
    wait_for
from ringproto import SECRET, RingClient, auth_proof, encode, params

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
    assert "auth_timeout: 5000ms" in ring
