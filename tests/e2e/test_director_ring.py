"""The ring of directors: several petreld processes with the director
component on different loopback addresses (127.0.0.1, .2, .3 — all of 127/8
is loopback on Linux), each with its ring port and admin API on its own
address, peers from the configuration (and POST ring), synchronising
backend changes, user moves and kicks, reporting ring status and topology,
noticing a dead director (peer-unreachable, tombstone) and converging again
when it comes back.

Real petreld processes and real sockets; ports picked free at run time (one
ring port and one API port free on every address used: the topology check
reaches a peer at its ring ip and this replica's API port)."""
import os
import signal
import socket
import threading
import time

import pytest

from conftest import free_port, http_request, wait_for
from ringproto import SECRET, RingClient, auth_proof, route, user_hash

TOKEN = "ring-test-token"
IPS = ["127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"]


def port_free_on(ips):
    """A TCP port nothing listens on at any of these addresses."""
    for _ in range(50):
        port = free_port()
        ok = True
        for ip in ips:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((ip, port))
                except OSError:
                    ok = False
                    break
        if ok:
            return port
    raise AssertionError("no port free on every address")


class Replica:
    def __init__(self, daemon, ip, api_port, ring_port):
        self.d = daemon
        self.ip = ip
        self.api = f"{ip}:{api_port}"
        self.ring = f"{ip}:{ring_port}"

    def call(self, method, path, body=None):
        return http_request(self.api, method, path, body=body, token=TOKEN, timeout=10)

    def get(self, path):
        r = self.call("GET", path)
        assert r.status == 200, r
        return r.json()

    def post(self, path, body=None):
        return self.call("POST", path, body)

    def status(self):
        return self.get("/api/director/ring")

    def backends(self):
        return self.get("/api/director/backends")["backends"]

    def me(self):
        return next(m for m in self.status()["members"] if m["self"])


BACKENDS = [{"ip": "10.0.0.1", "port": 143}, {"ip": "10.0.0.2", "port": 143}]


@pytest.fixture
def ring(petreld):
    """ring(n, peers=True) -> [Replica]: n directors on 127.0.0.1..n, each
    with the ring secret secrets[i] (default: all SECRET; None: no secret and
    ring.allow_unauthenticated)."""
    def start(n=3, peers=True, backends=BACKENDS, secrets=None):
        ips = IPS[:n]
        api_port = port_free_on(ips)
        ring_port = port_free_on(ips)
        reps = []
        for ip in ips:
            secret = secrets[len(reps)] if secrets is not None else SECRET
            cfg = {
                "components": ["director"],
                "director": {
                    "api": {"listen": f"{ip}:{api_port}"},
                    "ring": {"listen": f"{ip}:{ring_port}", "reconnect_min": "50ms",
                             "reconnect_max": "300ms", "peer_timeout": "1s",
                             "ping_interval": "200ms"},
                    "peers": [f"{o}:{ring_port}" for o in ips if o != ip] if peers else [],
                    "backends": backends,
                },
            }
            env = {"DIRECTOR_API_TOKEN": TOKEN}
            if secret is None:
                cfg["director"]["ring"]["allow_unauthenticated"] = True
            else:
                env["DIRECTOR_RING_SECRET"] = secret
            d = petreld(cfg, env=env)
            reps.append(Replica(d, ip, api_port, ring_port))
        return reps
    return start


def all_connected(reps):
    for r in reps:
        for m in r.status()["members"]:
            if m["self"] or m["link"] is None:
                continue
            if m["link"]["state"] != "connected":
                return False
    return True


def converged(reps):
    hashes = {r.status()["backendSetHash"] for r in reps}
    return len(hashes) == 1


def healthy(r):
    return r.get("/api/director/ring/topology")["healthy"]


def wait_propagated(reps, predicate, what, timeout=1.0):
    """Every replica satisfies predicate within timeout seconds (the issue's
    bound: a change reaches the others within 1 s). Returns the time taken."""
    t0 = time.monotonic()
    wait_for(lambda: all(predicate(r) for r in reps), timeout=timeout, interval=0.01, what=what)
    return time.monotonic() - t0


def backend(r, ip):
    return next((b for b in r.backends() if b["ip"] == ip), None)


# ---------- ring status ----------

def test_three_directors_form_a_ring(ring):
    a, b, c = ring(3)
    wait_for(lambda: all_connected([a, b, c]), timeout=10, what="all links connected")
    st = b.status()
    assert st["schemaVersion"] == 1 and st["self"] == b.ring and st["size"] == 3
    assert st["tombstones"] == []
    # members in (ip, port) order; b's neighbours are a (left) and c (right)
    assert [m["addr"] for m in st["members"]] == [a.ring, b.ring, c.ring]
    assert [m["index"] for m in st["members"]] == [0, 1, 2]
    assert [m["self"] for m in st["members"]] == [False, True, False]
    ma, mb, mc = st["members"]
    assert (mb["left"], mb["right"]) == (a.ring, c.ring)
    assert (ma["left"], ma["right"]) == (c.ring, b.ring)  # wraps around
    assert (mc["left"], mc["right"]) == (b.ring, a.ring)
    assert mb["link"] is None
    assert ma["link"]["role"] == "left" and mc["link"]["role"] == "right"
    for m in (ma, mc):
        assert m["link"]["state"] == "connected"
        assert m["link"]["since"].endswith("Z") and "T" in m["link"]["since"]
    # the configured backends are the same set everywhere
    assert converged([a, b, c])
    for r in (a, b, c):
        topo = r.get("/api/director/ring/topology")
        assert topo["schemaVersion"] == 1
        assert topo["healthy"] is True, topo
        assert [x for x in topo["issues"] if x["severity"] == "error"] == []
        assert [x["addr"] for x in topo["replicas"]][0] == r.ring
        assert sorted(x["addr"] for x in topo["replicas"]) == sorted([a.ring, b.ring, c.ring])
        assert all(x["reachable"] for x in topo["replicas"])
        assert topo["assumptions"]


def test_two_directors_link_both_ways(ring):
    a, b = ring(2)
    wait_for(lambda: all_connected([a, b]), timeout=10, what="link connected")
    other = next(m for m in a.status()["members"] if not m["self"])
    assert other["addr"] == b.ring and other["link"]["role"] == "both"
    assert other["left"] == a.ring and other["right"] == a.ring


# ---------- propagation ----------

def test_changes_reach_every_director_within_a_second(ring):
    a, b, c = ring(3)
    reps = [a, b, c]
    wait_for(lambda: all_connected(reps), timeout=10, what="all links connected")
    # add on a
    assert a.post("/api/director/backends", {"ip": "10.0.0.9", "port": 993, "tag": "blue",
                                             "vhosts": 50}).status == 200
    wait_propagated(reps, lambda r: backend(r, "10.0.0.9") == {
        "ip": "10.0.0.9", "port": 993, "tag": "blue", "up": True, "vhosts": 50},
        "the added backend everywhere")
    # down on b, up on c, vhosts on a
    assert b.post("/api/director/backends/10.0.0.9/down").status == 200
    wait_propagated(reps, lambda r: backend(r, "10.0.0.9")["up"] is False, "down everywhere")
    assert c.post("/api/director/backends/10.0.0.9/up").status == 200
    wait_propagated(reps, lambda r: backend(r, "10.0.0.9")["up"] is True, "up everywhere")
    assert a.call("PATCH", "/api/director/backends/10.0.0.9", {"vhosts": 70}).status == 200
    wait_propagated(reps, lambda r: backend(r, "10.0.0.9")["vhosts"] == 70, "vhosts everywhere")
    # remove on c
    assert c.call("DELETE", "/api/director/backends/10.0.0.9").status == 200
    wait_propagated(reps, lambda r: backend(r, "10.0.0.9") is None, "removed everywhere")
    wait_for(lambda: converged(reps), timeout=2, what="equal backendSetHash")
    # watermarks: every replica has processed each origin up to its own seq
    own = {r.ring: r.me()["seq"] for r in reps}
    assert own[a.ring] is not None and own[b.ring] is not None and own[c.ring] is not None

    def caught_up():
        for r in reps:
            for m in r.status()["members"]:
                if not m["self"] and m["seq"] != own[m["addr"]]:
                    return False
        return True
    wait_for(caught_up, timeout=2, what="watermarks equal to each origin's seq")
    # a login client and the monitor on c hear a's change, with a's origin
    login = RingClient(c.ring, "login", "proxy-c")
    mon = RingClient(c.ring, "monitor", "mon-c")
    assert a.post("/api/director/backends/10.0.0.1/down").status == 200
    for client in (login, mon):
        line = client.recv_until("RING-CHANGE")
        assert line[1:3] == ["flush", "10.0.0.1"] and line[7] == a.ring
        assert int(line[8]) == a.me()["seq"]
    login.close()
    mon.close()
    for r in reps:
        assert healthy(r)


def test_a_moved_user_routes_identically_everywhere(ring):
    a, b, c = ring(3)
    reps = [a, b, c]
    wait_for(lambda: all_connected(reps), timeout=10, what="all links connected")
    user = "Mover@Example.com"
    home = route([{"ip": x["ip"], "port": x["port"], "vhosts": 100} for x in BACKENDS], user)
    other = "10.0.0.2" if home == "10.0.0.1" else "10.0.0.1"
    for r in reps:
        assert r.get(f"/api/director/map?user={user}")["backend"] == home
    login_c = RingClient(c.ring, "login", "proxy-c")
    assert b.post(f"/api/director/users/{user}/move", {"backend": f"{other}:143"}).status == 200
    moved = login_c.recv_until("USER-MOVED")  # b's move reaches c's login proxies
    assert moved[1:5] == [user, str(user_hash(user)), other, "143"] and moved[5] == b.ring
    wait_propagated(reps, lambda r: r.get(f"/api/director/map?user={user}")["backend"] == other,
                    "the moved user routed to the same backend everywhere")
    for r in reps:
        assert r.get("/api/director/map")["users"] == [
            {"hash": user_hash(user), "host": f"{other}:143", "weak": False}]
    line = login_c.lookup("l1", user.lower())
    assert line == ["LOOKUP-OK", "l1", other, "143", "", "sticky"]
    # a kick on a reaches c's login proxies once
    assert a.post(f"/api/director/users/{user}/kick").status == 200
    kicked = login_c.recv_until("USER-KICKED")
    assert kicked[1] == user and kicked[3] == a.ring
    time.sleep(0.3)  # a duplicate (the kick coming round the ring) would be here by now
    login_c.send("PING", "after-kick")
    after = []
    while True:
        line = login_c.recv(timeout=5)
        if line[0] == "PONG":
            break
        after.append(line)
    assert [x for x in after if x[0] == "USER-KICKED"] == []  # exactly once
    login_c.close()


# ---------- a director dies and comes back ----------

def test_dead_director_is_reported_and_rejoins(ring):
    a, b, c = ring(3)
    reps = [a, b, c]
    wait_for(lambda: all_connected(reps), timeout=10, what="all links connected")
    c.d.proc.send_signal(signal.SIGKILL)
    c.d.proc.wait()
    c.d._stderr.close()

    def tombstoned(r):
        st = r.status()
        return [t["addr"] for t in st["tombstones"]] == [c.ring]
    wait_for(lambda: tombstoned(a) and tombstoned(b), timeout=5, what="tombstones for c")
    st = a.status()
    assert isinstance(st["tombstones"][0]["age_secs"], int) and st["tombstones"][0]["age_secs"] >= 0
    mc = next(m for m in st["members"] if m["addr"] == c.ring)
    assert mc["link"]["state"] == "reconnecting" and mc["link"]["since"] is None
    topo = a.get("/api/director/ring/topology")
    assert topo["healthy"] is False
    unreachable = [x for x in topo["issues"] if x["type"] == "peer-unreachable"]
    assert len(unreachable) == 1 and c.ring in unreachable[0]["detail"]
    assert unreachable[0]["severity"] == "error"
    rc = next(x for x in topo["replicas"] if x["addr"] == c.ring)
    assert rc["reachable"] is False and rc["error"]
    # the ring goes on without c: changes while it is away
    assert a.post("/api/director/backends/10.0.0.2/down").status == 200
    assert b.post("/api/director/backends", {"ip": "10.0.0.7", "port": 110}).status == 200
    wait_propagated([a, b], lambda r: backend(r, "10.0.0.7") is not None
                    and backend(r, "10.0.0.2")["up"] is False, "changes between a and b")

    # c comes back (same configuration: it knows only the configured backends)
    c.d.start()
    c.d.returncode = None
    wait_for(lambda: all_connected(reps), timeout=10, what="links to c again")
    wait_for(lambda: converged(reps), timeout=5, what="c converged")
    assert backend(c, "10.0.0.7") is not None
    assert backend(c, "10.0.0.2")["up"] is False  # the ring's newer view won over c's config
    wait_for(lambda: all(r.status()["tombstones"] == [] for r in reps), timeout=5,
             what="tombstones cleared")
    wait_for(lambda: all(healthy(r) for r in reps), timeout=5, what="healthy again")
    hashes = {r.status()["backendSetHash"] for r in reps}
    assert len(hashes) == 1
    # and c's own changes are not taken for old ones (its sequence restarted above)
    assert c.post("/api/director/backends/10.0.0.2/up").status == 200
    wait_propagated(reps, lambda r: backend(r, "10.0.0.2")["up"] is True, "c's change everywhere")


# ---------- dynamic peers ----------

def test_dynamic_peers_link_and_are_lost_on_restart(ring):
    a, b = ring(2, peers=False)
    assert a.status()["size"] == 1
    assert a.post("/api/director/ring", {"addr": b.ring}).json() == {"status": "ok"}
    assert b.post("/api/director/ring", {"addr": a.ring}).json() == {"status": "ok"}
    wait_for(lambda: all_connected([a, b]), timeout=10, what="dynamic link connected")
    assert a.status()["size"] == 2
    assert a.post("/api/director/backends", {"ip": "10.0.0.8", "port": 143}).status == 200
    wait_propagated([b], lambda r: backend(r, "10.0.0.8") is not None, "the change on b")
    # DELETE cancels the dial loop: no link, no tombstone, size 1
    assert a.call("DELETE", f"/api/director/ring?addr={b.ring}").json() == {"status": "ok"}
    st = a.status()
    assert st["size"] == 1 and st["tombstones"] == [] and len(st["members"]) == 1
    assert a.post("/api/director/backends", {"ip": "10.0.0.9", "port": 143}).status == 200
    time.sleep(0.5)
    assert backend(b, "10.0.0.9") is None  # no longer linked
    # b restarts: its dynamic peer is gone
    b.d.stop()
    b.d.start()
    b.d.returncode = None
    assert b.get("/api/director/status")["peers"] == []
    assert b.status()["size"] == 1


# ---------- the peer protocol, spoken by hand ----------

def test_peer_protocol_handshake_dedup_and_errors(ring):
    """A hand-written peer (a RingClient of kind director) against one real
    director: the handshake carries HOST and USER lines; a change is applied
    once per (origin, seq), pushed to login clients with its origin, and
    recorded as that origin's watermark; what cannot be applied gets ERROR."""
    (a,) = ring(1, peers=False)
    user = "carol@example.com"
    home = route([{"ip": x["ip"], "port": x["port"], "vhosts": 100} for x in BACKENDS], user)
    login = RingClient(a.ring, "login", "proxy")
    assert login.lookup("1", user)[5] == "assigned"
    peer = RingClient(a.ring, "director", "127.0.0.9:9102")
    assert [h[1] for h in peer.hosts] == ["10.0.0.1", "10.0.0.2"]
    assert [h[5] for h in peer.hosts] == ["up", "up"]
    assert len(peer.users) == 1
    u = peer.users[0]
    assert u[1:4] == [str(user_hash(user)), home, "143"] and u[5] == "0"
    assert int(u[4]) > time.time()  # expires_at in the future
    assert RingClient(a.ring, "login").users == []  # only directors get USER lines

    origin = "127.0.0.9:9102"
    own_seq = a.me()["seq"]
    change = ["RING-CHANGE", "up", "10.0.0.5", 110, "green", 10, 1700000000, origin, 41]
    peer.send(*change)
    line = login.recv_until("RING-CHANGE")
    assert line[1:3] == ["up", "10.0.0.5"] and line[7:9] == [origin, "41"]
    wait_for(lambda: backend(a, "10.0.0.5") is not None, what="the peer's backend")
    assert a.me()["seq"] == own_seq  # a peer's change does not use this director's sequence
    # the same change again, and an older one: dropped (no push, no change)
    peer.send(*change)
    stale = list(change)
    stale[1], stale[8] = "flush", 40
    peer.send(*stale)
    peer.send("PING", "sync")
    assert peer.recv_until("PONG") == ["PONG", "sync"]
    assert backend(a, "10.0.0.5")["up"] is True
    with pytest.raises((AssertionError, TimeoutError, OSError)):
        login.recv_until("RING-CHANGE", timeout=0.3)
    # the next seq applies
    newer = list(change)
    newer[1], newer[8] = "flush", 42
    peer.send(*newer)
    assert login.recv_until("RING-CHANGE")[1:3] == ["flush", "10.0.0.5"]
    # a move to a backend this director does not know: ERROR, connection stays
    peer.send("USER-MOVED", user, user_hash(user), "10.9.9.9", 143, origin, 43)
    err = peer.recv_until("ERROR")
    assert "backend not found" in err[1]
    peer.send("USER-KICKED", user, user_hash(user), origin, 44)
    assert login.recv_until("USER-KICKED")[3:5] == [origin, "44"]
    # a USER line is for handshakes only; login clients may not send peer changes
    peer.send("USER", 5, "10.0.0.1", 143, 1, 0)
    assert "not accepted" in peer.recv_until("ERROR")[1]
    login.send(*change[:8], 45)
    assert "not accepted from login clients" in login.recv_until("ERROR")[1]
    assert all(m["addr"] != origin for m in a.status()["members"])  # not made a member
    peer.close()
    login.close()


# ---------- a peer gone silent ----------

class SilentPeer:
    """A ring listener that completes the director handshake (VERSION with
    its challenge, AUTH-OK, DONE) and then never answers again, like a peer
    behind a partition."""

    def __init__(self, ip):
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind((ip, 0))
        self.srv.listen(8)
        self.addr = f"{ip}:{self.srv.getsockname()[1]}"
        self.conns = []
        self.pings = 0
        self.stop = False
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        self.srv.settimeout(0.1)
        while not self.stop:
            try:
                c, _ = self.srv.accept()
            except (socket.timeout, OSError):
                continue
            self.conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        try:
            nonce = os.urandom(32).hex()
            c.sendall(f"VERSION\tpetrel-ring\t1\t1\tauth=hmac-sha256\tnonce={nonce}\n".encode())
            buf = b""
            while b"HELLO" not in buf:
                data = c.recv(4096)
                if not data:
                    return
                buf += data
            auth = next(ln for ln in buf.decode().split("\n") if ln.startswith("AUTH\t"))
            _, _, client_nonce, proof = auth.split("\t")
            assert proof == auth_proof(SECRET, "client", nonce, client_nonce)
            c.sendall(f"AUTH-OK\t{auth_proof(SECRET, 'server', nonce, client_nonce)}\n"
                      "DONE\n".encode())
            while not self.stop:
                data = c.recv(4096)
                if not data:
                    return
                self.pings += data.count(b"PING")
        except OSError:
            return

    def close(self):
        self.stop = True
        self.srv.close()
        for c in self.conns:
            c.close()


def test_a_silent_peer_is_dropped_by_the_keepalive(petreld):
    fake = SilentPeer("127.0.0.2")
    try:
        api_port = port_free_on(["127.0.0.1"])
        ring_port = port_free_on(["127.0.0.1"])
        cfg = {"components": ["director"], "director": {
            "api": {"listen": f"127.0.0.1:{api_port}"},
            "ring": {"listen": f"127.0.0.1:{ring_port}", "ping_interval": "200ms",
                     "peer_timeout": "300ms", "reconnect_min": "50ms", "reconnect_max": "100ms"},
            "peers": [fake.addr]}}
        d = petreld(cfg, env={"DIRECTOR_API_TOKEN": TOKEN, "DIRECTOR_RING_SECRET": SECRET})
        a = Replica(d, "127.0.0.1", api_port, ring_port)

        def link_state():
            m = next(m for m in a.status()["members"] if m["addr"] == fake.addr)
            return m["link"]["state"]
        wait_for(lambda: link_state() == "connected", timeout=5, what="the link to the fake peer")
        # it goes quiet: PING unanswered -> the link drops (a tombstone until the
        # redial connects again) and is redialled
        wait_for(lambda: "no answer to PING" in d.stderr(), timeout=5, what="keep-alive timeout")
        assert fake.pings >= 1
        wait_for(lambda: len(fake.conns) >= 2, timeout=5, what="a redial")
    finally:
        fake.close()
