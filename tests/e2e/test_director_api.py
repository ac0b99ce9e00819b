"""The director (docs/director.md): an operator manages backends and users
through the admin API and petrelctl, login proxies and the monitor talk to
the ring port, and every answer routes users exactly as the hashing rule
(computed here with hashlib, not by Petrel) says.

Real petreld processes on loopback ports picked at run time; the ring
protocol is spoken over real sockets; petrelctl is the real binary."""

import json
import shutil
import subprocess
import time

import pytest

from conftest import free_port, http_request, run_petreld, run_petrelctl, wait_for
from ringproto import SECRET, RingClient, _md5_prefix, answer_challenge, route, user_hash

TOKEN = "director-test-token"


def director_config(backends=None, **sections):
    d = {
        "api": {"listen": f"127.0.0.1:{free_port()}"},
        "ring": {"listen": f"127.0.0.1:{free_port()}"},
    }
    if backends is not None:
        d["backends"] = backends
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(d.get(key), dict):
            d[key].update(value)
        else:
            d[key] = value
    return {"components": ["director"], "director": d}


class Director:
    """A running petreld with the director component and its addresses."""

    def __init__(self, daemon, token=TOKEN):
        self.d = daemon
        self.api = daemon.config["director"]["api"]["listen"]
        self.ring = daemon.config["director"]["ring"]["listen"]
        self.token = token

    def call(self, method, path, body=None, token=None, **kw):
        return http_request(self.api, method, path, body=body,
                            token=self.token if token is None else token, **kw)

    def get(self, path, **kw):
        return self.call("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.call("POST", path, body=body, **kw)

    def add(self, ip, port=143, tag="", vhosts=100):
        r = self.post("/api/director/backends", {"ip": ip, "port": port, "tag": tag,
                                                 "vhosts": vhosts})
        assert r.status == 200, r
        return r

    def metrics(self):
        return http_request(self.d.telemetry, "GET", "/metrics").body.decode()

    def ctl(self, *args, env=None):
        e = {"PETREL_ADMIN_URL": f"http://{self.api}", "PETREL_ADMIN_TOKEN": self.token}
        e.update(env or {})
        return run_petrelctl(list(args), env=e)


@pytest.fixture
def director(petreld):
    def start(backends=None, env=None, token=TOKEN, **sections):
        e = {"DIRECTOR_API_TOKEN": token} if token else {}
        e["DIRECTOR_RING_SECRET"] = SECRET
        e.update(env or {})
        return Director(petreld(director_config(backends, **sections), env=e), token=token)
    return start


def metric_value(text, name, **labels):
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
        if not labels and line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name}{{{want}}} in /metrics")


# ---------- status, dump, map ----------

def test_status_and_dump_show_the_registry(director):
    d = director(backends=[{"ip": "127.0.0.1", "port": 10143},
                           {"ip": "10.0.0.2", "port": 143, "tag": "blue", "vhosts": 50}])
    r = d.get("/api/director/status")
    assert r.status == 200
    body = r.json()
    assert body["peers"] == []
    assert body["backends"] == [
        {"ip": "10.0.0.2", "port": 143, "tag": "blue", "up": True, "vhosts": 50},
        {"ip": "127.0.0.1", "port": 10143, "tag": "", "up": True, "vhosts": 100},
    ]
    dump = d.get("/api/director/dump").json()
    assert set(dump) == {"backends", "users", "peers"}
    now = time.time()
    for b in dump["backends"]:
        assert abs(b["last_updown_change"] - now) < 60
    assert dump["users"] == []
    assert d.get("/api/director/backends").json() == {"backends": body["backends"]}


def test_map_user_is_the_hash_ring_and_503_without_backends(director):
    d = director()
    r = d.get("/api/director/map?user=demo")
    assert r.status == 503
    assert r.json() == {"error": "no backends available"}
    backends = [{"ip": f"10.0.0.{i}", "port": 143, "tag": "", "vhosts": 100 + 10 * i,
                 "up": True} for i in range(1, 6)]
    for b in backends:
        d.add(b["ip"], b["port"], vhosts=b["vhosts"])
    for n in range(40):
        user = f"user{n}@example.com"
        r = d.get(f"/api/director/map?user={user}")
        assert r.status == 200
        assert r.json() == {"user": user, "backend": route(backends, user), "port": 143,
                            "tag": ""}
    # read-only: map?user= records no mapping
    assert d.get("/api/director/map").json() == {"users": []}
    assert d.get("/api/director/map?user=").status == 400
    too_long = "x" * 256
    r = d.get(f"/api/director/map?user={too_long}")
    assert r.status == 400 and "too long" in r.json()["error"]
    # ?tag= routes among that tag's backends only
    d.add("10.9.0.1", 143, tag="blue", vhosts=10)
    assert d.get("/api/director/map?user=demo&tag=blue").json()["backend"] == "10.9.0.1"
    assert d.get("/api/director/map?user=demo&tag=red").status == 503


def test_map_user_wraps_past_the_last_point(director):
    """A user whose hash lies past the highest point goes to the owner of
    the lowest point (the ring wraps), and one at or below the lowest point
    to that same owner: with five points in all, users on both sides of the
    wrap are picked from their hashes (computed here with hashlib)."""
    d = director()

    def ring_of(backends):
        return sorted((_md5_prefix(f"{b['ip']}-{i}".encode()), b["ip"])
                      for b in backends for i in range(b["vhosts"]))
    # Two backends whose points put different owners at both ends of the
    # ring, so a lookup that stopped at the last point would answer wrong.
    for n in range(2, 200):
        backends = [{"ip": "10.0.1.1", "port": 143, "tag": "", "vhosts": 2, "up": True},
                    {"ip": f"10.0.1.{n}", "port": 143, "tag": "", "vhosts": 3, "up": True}]
        points = ring_of(backends)
        if points[0][1] != points[-1][1]:
            break
    assert points[0][1] != points[-1][1]
    for b in backends:
        d.add(b["ip"], b["port"], vhosts=b["vhosts"])
    lowest_owner = points[0][1]
    past_last = [u for u in (f"wrap{n}@example.com" for n in range(2000))
                 if user_hash(u) > points[-1][0]][:5]
    before_first = [u for u in (f"low{n}@example.com" for n in range(2000))
                    if user_hash(u) <= points[0][0]][:5]
    assert len(past_last) == 5 and len(before_first) == 5
    for user in past_last + before_first:
        r = d.get(f"/api/director/map?user={user}")
        assert r.status == 200, r
        assert r.json()["backend"] == lowest_owner == route(backends, user), user


# ---------- authentication ----------

def test_token_is_required_and_compared(director):
    d = director()
    r = d.get("/api/director/status", token="")
    assert r.status == 401
    assert r.json() == {"error": "missing or invalid bearer token"}
    assert d.get("/api/director/status", token="wrong").status == 401
    assert d.get("/api/director/status", token=TOKEN + "x").status == 401
    assert d.get("/api/director/status").status == 200
    # every endpoint, also the unknown ones, is behind the token
    assert http_request(d.api, "POST", "/api/director/backends/all/flush").status == 401
    assert http_request(d.api, "GET", "/api/director/nothing").status == 401
    assert d.get("/api/director/nothing").status == 404


def test_allow_list_is_checked_before_the_token(director):
    d = director(api={"allowed_nets": ["10.0.0.0/8"]})
    for token in (None, "", "wrong", TOKEN):
        r = http_request(d.api, "GET", "/api/director/status", token=token)
        assert r.status == 403, (token, r)
        assert "not allowed" in r.json()["error"]


def test_token_from_a_file(director, tmp_path):
    secret = tmp_path / "token"
    secret.write_text("from-the-secret\n")
    d = director(token=None, env={"DIRECTOR_API_TOKEN_FILE": str(secret),
                                  "DIRECTOR_API_TOKEN": "ignored-when-a-file-is-named"})
    assert d.get("/api/director/status", token="from-the-secret").status == 200
    assert d.get("/api/director/status", token="ignored-when-a-file-is-named").status == 401
    other = tmp_path / "token2"
    other.write_text("  config-file-token  ")
    d2 = director(token=None, api={"token_file": str(other)})
    assert d2.get("/api/director/status", token="config-file-token").status == 200


def test_unreadable_token_file_stops_start_up(petreld, tmp_path):
    d = petreld(director_config(api={"token_file": str(tmp_path / "missing")}), wait=False)
    assert d.wait() == 1
    assert "cannot read the API token file" in d.stderr()
    assert "missing" in d.stderr()


def test_no_token_means_open_api_with_a_warning(director):
    d = director(token=None)
    assert http_request(d.api, "GET", "/api/director/status").status == 200
    assert "admin API authentication disabled" in d.d.stderr()


# ---------- backends ----------

def test_backend_crud_and_errors(director):
    d = director(limits={"max_vhosts": 500, "max_tag": 8, "max_backends": 3})
    ok = {"status": "ok"}
    assert d.add("10.0.0.1", 143, "", 100).json() == ok
    r = d.post("/api/director/backends", {"ip": "10.0.0.1", "port": 993})
    assert r.status == 409 and "exists" in r.json()["error"]
    for body, fragment in (
            ({"port": 143}, "ip"),
            ({"ip": "10.0.0.5"}, "port"),
            ({"ip": "10.0.0.5", "port": "143"}, "port"),
            ({"ip": "10.0.0.500", "port": 143}, "not an IP"),
            ({"ip": "example.com", "port": 143}, "not an IP"),
            ({"ip": "10.0.0.5", "port": 0}, "port"),
            ({"ip": "10.0.0.5", "port": 65536}, "port"),
            ({"ip": "10.0.0.5", "port": 143, "vhosts": 501}, "vhosts"),
            ({"ip": "10.0.0.5", "port": 143, "vhosts": -1}, "vhosts"),
            ({"ip": "10.0.0.5", "port": 143, "tag": "123456789"}, "tag"),
            ({"ip": "10.0.0.5", "port": 143, "tag": 7}, "tag")):
        r = d.post("/api/director/backends", body)
        assert r.status == 400, (body, r)
        assert fragment in r.json()["error"], (body, r)
    r = d.post("/api/director/backends", "{not json")
    assert r.status == 400
    # the same address in another spelling is the same backend
    d.add("fd00::1", 10143, "blue", 0)
    assert d.post("/api/director/backends",
                  {"ip": "fd00:0:0::1", "port": 1}).status == 409
    d.add("10.0.0.3", 143)
    r = d.post("/api/director/backends", {"ip": "10.0.0.4", "port": 143})
    assert r.status == 409 and "too many backends" in r.json()["error"]

    assert d.call("PATCH", "/api/director/backends/10.0.0.1", {"vhosts": 7}).json() == ok
    assert d.call("PATCH", "/api/director/backends/fd00:0::1", {"vhosts": 3}).status == 200
    assert d.call("PATCH", "/api/director/backends/10.0.0.9", {"vhosts": 7}).status == 404
    assert d.call("PATCH", "/api/director/backends/10.0.0.1", {"vhosts": "x"}).status == 400
    assert d.call("PATCH", "/api/director/backends/10.0.0.1", {}).status == 400
    assert d.call("PATCH", "/api/director/backends/10.0.0.1", {"vhosts": 501}).status == 400
    status = d.get("/api/director/status").json()["backends"]
    assert {b["ip"]: b["vhosts"] for b in status} == {"10.0.0.1": 7, "10.0.0.3": 100,
                                                      "fd00::1": 3}

    assert d.post("/api/director/backends/10.0.0.1/down").json() == ok
    assert d.post("/api/director/backends/10.0.0.9/down").status == 404
    assert d.post("/api/director/backends/10.0.0.9/up").status == 404
    assert d.post("/api/director/backends/10.0.0.9/flush").status == 404
    r = d.post("/api/director/backends/nonsense/up")
    assert r.status == 404 and r.json()["error"] == "backend not found: nonsense"
    ups = {b["ip"]: b["up"] for b in d.get("/api/director/status").json()["backends"]}
    assert ups == {"10.0.0.1": False, "10.0.0.3": True, "fd00::1": True}
    assert d.post("/api/director/backends/10.0.0.1/up").json() == ok
    assert d.post("/api/director/backends/all/down").json() == ok
    assert not any(b["up"] for b in d.get("/api/director/status").json()["backends"])
    assert d.post("/api/director/backends/all/up").json() == ok
    assert all(b["up"] for b in d.get("/api/director/status").json()["backends"])

    assert d.call("DELETE", "/api/director/backends/10.0.0.3").json() == ok
    r = d.call("DELETE", "/api/director/backends/10.0.0.3")
    assert r.status == 404 and r.json() == {"error": "backend not found: 10.0.0.3"}
    assert d.call("PUT", "/api/director/backends/10.0.0.1").status == 405


def test_flush_drops_mappings_and_counts_them(director):
    d = director(backends=[{"ip": "10.0.0.1", "port": 143}, {"ip": "10.0.0.2", "port": 143}])
    backends = [{"ip": "10.0.0.1", "port": 143, "vhosts": 100},
                {"ip": "10.0.0.2", "port": 143, "vhosts": 100}]
    c = RingClient(d.ring)
    users = [f"flush{n}" for n in range(30)]
    for n, u in enumerate(users):
        assert c.lookup(n, u)[5] == "assigned"
    on_1 = [u for u in users if route(backends, u) == "10.0.0.1"]
    assert 0 < len(on_1) < len(users)
    assert len(d.get("/api/director/map").json()["users"]) == 30
    r = d.post("/api/director/backends/10.0.0.1/flush")
    assert r.json() == {"status": "ok", "users_flushed": len(on_1)}
    mapped = d.get("/api/director/map").json()["users"]
    assert len(mapped) == 30 - len(on_1)
    assert all(m["host"] == "10.0.0.2:143" for m in mapped)
    # their next login goes to the backend still up
    for n, u in enumerate(on_1):
        line = c.lookup(100 + n, u)
        assert line[2] == "10.0.0.2" and line[5] == "assigned"
    r = d.post("/api/director/backends/all/flush")
    assert r.json() == {"status": "ok", "users_flushed": 30}
    assert d.get("/api/director/map").json() == {"users": []}
    assert c.lookup(999, "anyone")[:3] == ["LOOKUP-FAIL", "999", "no_backends"]
    c.close()


# ---------- users ----------

def test_move_overrides_the_hash_and_kick_reaches_login_clients(director):
    d = director(backends=[{"ip": "10.0.0.1", "port": 143}, {"ip": "10.0.0.2", "port": 993}])
    backends = [{"ip": "10.0.0.1", "port": 143, "vhosts": 100},
                {"ip": "10.0.0.2", "port": 993, "vhosts": 100}]
    login = RingClient(d.ring, "login", "proxy-1")
    monitor = RingClient(d.ring, "monitor", "mon-1")
    user = "Mover@Example.com"
    home = route(backends, user)
    other, other_port = ("10.0.0.2", 993) if home == "10.0.0.1" else ("10.0.0.1", 143)
    r = d.post(f"/api/director/users/{user}/move", {"backend": f"{other}:{other_port}"})
    assert r.status == 200 and r.json() == {"status": "ok"}
    moved = login.recv_until("USER-MOVED")
    assert moved[1:5] == [user, str(user_hash(user)), other, str(other_port)]
    assert moved[5] == d.d.config["director"]["ring"]["listen"]  # origin: this director
    assert int(moved[6]) >= 1
    line = login.lookup("m1", user.lower())
    assert line == ["LOOKUP-OK", "m1", other, str(other_port), "", "sticky"]
    assert d.get(f"/api/director/map?user={user}").json()["backend"] == other
    mapped = d.get("/api/director/map").json()["users"]
    assert mapped == [{"hash": user_hash(user), "host": f"{other}:{other_port}", "weak": False}]
    # the other body form
    assert d.post(f"/api/director/users/{user}/move", {"ip": home, "port":
                                                        143 if home == "10.0.0.1" else 993}
                  ).status == 200
    assert login.lookup("m2", user)[2] == home
    for body, status in (({}, 400), ({"backend": "10.0.0.1"}, 400), ({"ip": "10.0.0.1"}, 400),
                         ({"backend": "10.0.0.7:143"}, 404), ({"ip": "10.0.0.1", "port": 1}, 404),
                         ({"backend": 5}, 400), ({"ip": "x", "port": 143}, 400)):
        r = d.post(f"/api/director/users/{user}/move", body)
        assert r.status == status, (body, r)
        assert "error" in r.json()
    assert d.post("/api/director/users/x/move", "[1,2]").status == 400
    too_long = "u" * 300
    assert d.post(f"/api/director/users/{too_long}/move",
                  {"backend": "10.0.0.1:143"}).status == 400
    # moving to a flushed backend is refused
    d.post("/api/director/backends/10.0.0.2/down")
    r = d.post(f"/api/director/users/{user}/move", {"backend": "10.0.0.2:993"})
    assert r.status == 409

    r = d.post(f"/api/director/users/{user}/kick")
    assert r.status == 200 and r.json() == {"status": "ok"}
    kicked = login.recv_until("USER-KICKED")
    assert kicked[1:3] == [user, str(user_hash(user))]
    # the monitor gets backend changes only, never user events
    line = monitor.recv(timeout=5)
    assert line[0] == "RING-CHANGE" and line[1:3] == ["flush", "10.0.0.2"]
    monitor.sock.settimeout(0.5)
    with pytest.raises((TimeoutError, OSError)):
        monitor.recv(timeout=0.5)
    login.close()
    monitor.close()


def test_a_moved_user_waits_for_old_sessions(director):
    d = director(backends=[{"ip": "10.0.0.1", "port": 143}, {"ip": "10.0.0.2", "port": 143}],
                 kill_timeout="10s")
    backends = [{"ip": "10.0.0.1", "port": 143, "vhosts": 100},
                {"ip": "10.0.0.2", "port": 143, "vhosts": 100}]
    login = RingClient(d.ring)
    user = "killme"
    home = route(backends, user)
    other = "10.0.0.2" if home == "10.0.0.1" else "10.0.0.1"
    assert login.lookup(1, user)[2] == home
    login.send("SESSION-START", "s1", user, home, "imap")
    d.post(f"/api/director/users/{user}/move", {"backend": f"{other}:143"})
    line = login.lookup(2, user)
    assert line[:3] == ["LOOKUP-FAIL", "2", "killing"]
    params = dict(f.split("=", 1) for f in line[3:])
    assert 0 < int(params["retry_ms"]) <= 10000
    assert d.get("/api/director/map").json()["users"][0]["weak"] is True
    login.send("SESSION-END", "s1")
    assert login.lookup(3, user) == ["LOOKUP-OK", "3", other, "143", "", "sticky"]
    assert d.get("/api/director/map").json()["users"][0]["weak"] is False
    metrics = d.metrics()
    assert metric_value(metrics, "petrel_director_lookup_seconds_count", outcome="killing") == 1
    login.close()


# ---------- the ring protocol ----------

def test_ring_lookups_route_like_the_rule_and_stick(director):
    backends = [{"ip": "10.1.0.1", "port": 143, "vhosts": 100},
                {"ip": "10.1.0.2", "port": 143, "vhosts": 200},
                {"ip": "fd00::3", "port": 10143, "vhosts": 300},
                {"ip": "10.2.0.1", "port": 993, "tag": "blue", "vhosts": 50}]
    d = director(backends=[dict(b) for b in backends])
    c = RingClient(d.ring, "login", "proxy-a")
    assert sorted(h[1] for h in c.hosts) == sorted(b["ip"] for b in backends)
    blue = [h for h in c.hosts if h[1] == "10.2.0.1"]
    assert blue[0][:6] == ["HOST", "10.2.0.1", "993", "blue", "50", "up"]
    assert [h[1] for h in c.hosts] == ["10.1.0.1", "10.1.0.2", "10.2.0.1", "fd00::3"]
    # pipelined: 500 lookups sent at once, answered by id
    users = [f"pipe{n}@example.org" for n in range(500)]
    c.send_raw(b"".join(f"LOOKUP\tq{n}\t{u}\n".encode() for n, u in enumerate(users)))
    for n, u in enumerate(users):
        line = c.recv()
        assert line[0] == "LOOKUP-OK" and line[1] == f"q{n}"
        assert line[2] == route(backends, u), u
        assert line[5] == "assigned"
    # a second lookup is sticky, also after the ring changes under the user
    d.call("PATCH", "/api/director/backends/10.1.0.1", {"vhosts": 0})
    for n, u in enumerate(users[:50]):
        line = c.lookup(f"s{n}", u.upper())
        assert line[2] == route(backends, u) and line[5] == "sticky"
    # tags
    assert c.lookup("t1", "anyone", tag="blue")[2] == "10.2.0.1"
    assert c.lookup("t2", "anyone", tag="green")[:3] == ["LOOKUP-FAIL", "t2", "no_backends"]
    # a mapping holds for its own tag only: untagged, "anyone" is routed anew
    now = [dict(b, vhosts=0) if b["ip"] == "10.1.0.1" else b for b in backends]
    line = c.lookup("t3", "anyone")
    assert line[2] == route(now, "anyone") and line[5] == "assigned"
    line = c.lookup("b1", "u" * 256)
    assert line[:3] == ["LOOKUP-FAIL", "b1", "bad_request"]
    line = c.lookup("b2", "ok", tag="t" * 65)
    assert line[:3] == ["LOOKUP-FAIL", "b2", "bad_request"]
    m = d.metrics()
    assert metric_value(m, "petrel_director_lookup_seconds_count", outcome="assigned") == 502
    assert metric_value(m, "petrel_director_lookup_seconds_count", outcome="sticky") == 50
    assert metric_value(m, "petrel_director_lookup_seconds_count", outcome="no_backends") == 1
    assert metric_value(m, "petrel_director_lookup_seconds_count", outcome="bad_request") == 2
    c.close()


def test_sessions_are_counted_per_backend_and_protocol(director):
    d = director(backends=[{"ip": "10.0.0.1", "port": 143}], ring={"max_sessions_per_client": 3})
    c = RingClient(d.ring)
    c.send("SESSION-START", "a", "alice", "10.0.0.1", "imap")
    c.send("SESSION-START", "b", "bob", "10.0.0.1", "imaps")
    c.send("SESSION-START", "c", "carol", "10.0.0.1", "imap")
    c.send("SESSION-START", "d", "dave", "10.0.0.1", "pop3")  # over the limit
    assert c.recv_until("ERROR")[1] == "SESSION-START: too many sessions on this connection"
    c.send("SESSION-START", "a", "alice", "10.0.0.1", "imap")
    assert "duplicate" in c.recv_until("ERROR")[1]
    c.send("SESSION-END", "zz")
    assert "unknown session" in c.recv_until("ERROR")[1]
    c.send("PING", "sync")
    assert c.recv_until("PONG") == ["PONG", "sync"]
    m = d.metrics()
    labels = {"ip": "10.0.0.1", "port": "143", "tag": ""}
    assert metric_value(m, "petrel_director_backend_sessions", protocol="imap", **labels) == 2
    assert metric_value(m, "petrel_director_backend_sessions", protocol="imaps", **labels) == 1
    assert metric_value(m, "petrel_director_backend_sessions", protocol="pop3", **labels) == 0
    # users with sessions are mapped where their sessions are
    assert len(d.get("/api/director/map").json()["users"]) == 3
    c.send("SESSION-END", "b")
    c.send("SESSION-START", "e", "x", "10.9.9.9", "lmtp")
    assert "backend not found" in c.recv_until("ERROR")[1]
    c.send("PING", "2")
    c.recv_until("PONG")
    m = d.metrics()
    assert metric_value(m, "petrel_director_backend_sessions", protocol="imaps", **labels) == 0
    # closing the connection ends its sessions
    c.close()
    wait_for(lambda: metric_value(d.metrics(), "petrel_director_backend_sessions",
                                  protocol="imap", **labels) == 0, what="sessions to end")


def test_mappings_expire_after_user_expire(director):
    d = director(backends=[{"ip": "10.0.0.1", "port": 143}], user_expire="1s")
    c = RingClient(d.ring)
    c.lookup(1, "short-lived")
    c.send("SESSION-START", "s", "long-lived", "10.0.0.1", "imap")
    c.send("PING")
    c.recv_until("PONG")
    assert len(d.get("/api/director/dump").json()["users"]) == 2
    wait_for(lambda: len(d.get("/api/director/dump").json()["users"]) == 1, timeout=5,
             what="the mapping without sessions to expire")
    users = d.get("/api/director/dump").json()["users"]
    assert users[0]["hash"] == user_hash("long-lived")
    c.send("SESSION-END", "s")
    wait_for(lambda: d.get("/api/director/dump").json()["users"] == [], timeout=5,
             what="the mapping to expire after its last session")
    c.close()


def test_user_table_limit(director):
    d = director(backends=[{"ip": "10.0.0.1", "port": 143}], limits={"max_users": 2})
    c = RingClient(d.ring)
    assert c.lookup(1, "one")[5] == "assigned"
    assert c.lookup(2, "two")[5] == "assigned"
    # full: the third user is routed but not remembered
    assert c.lookup(3, "three")[5] == "assigned"
    assert c.lookup(4, "three")[5] == "assigned"
    assert c.lookup(5, "one")[5] == "sticky"
    assert len(d.get("/api/director/map").json()["users"]) == 2
    c.close()


def test_monitor_reports_flush_and_up(director):
    d = director(backends=[{"ip": "10.0.0.1", "port": 143}, {"ip": "10.0.0.2", "port": 143}])
    login = RingClient(d.ring, "login")
    mon = RingClient(d.ring, "monitor", "monitor-0")
    assert [h[1] for h in mon.hosts] == ["10.0.0.1", "10.0.0.2"]
    mon.send("BACKEND-FLUSH", "10.0.0.1", "reason=imap probe failed 7/10")
    for client in (mon, login):
        line = client.recv_until("RING-CHANGE")
        assert line[1:7] == ["flush", "10.0.0.1", "143", "", "100", line[6]]
        assert line[7] == d.ring
    st = {b["ip"]: b["up"] for b in d.get("/api/director/status").json()["backends"]}
    assert st == {"10.0.0.1": False, "10.0.0.2": True}
    for n in range(20):  # nobody goes to the flushed backend
        assert login.lookup(n, f"user{n}")[2] == "10.0.0.2"
    m = d.metrics()
    assert metric_value(m, "petrel_director_backend_info", ip="10.0.0.1", status="flush") == 1
    assert metric_value(m, "petrel_director_backend_info", ip="10.0.0.2", status="up") == 1
    mon.send("BACKEND-UP", "10.0.0.1")
    line = mon.recv_until("RING-CHANGE")
    assert line[1:3] == ["up", "10.0.0.1"]
    assert login.recv_until("RING-CHANGE")[1:3] == ["up", "10.0.0.1"]
    mon.send("BACKEND-FLUSH", "10.9.9.9")
    assert mon.recv_until("ERROR") == ["ERROR", "unknown backend: 10.9.9.9"]
    mon.send("LOOKUP", "1", "x")
    assert mon.recv_until("ERROR") == ["ERROR", "LOOKUP is not accepted from monitor clients"]
    login.send("BACKEND-UP", "10.0.0.1")
    assert login.recv_until("ERROR")[1] == "BACKEND-UP is not accepted from login clients"
    assert "monitor reports backend down" in d.d.stderr()
    login.close()
    mon.close()


def test_api_changes_are_pushed_with_origin_and_sequence(director):
    d = director()
    login = RingClient(d.ring)
    mon = RingClient(d.ring, "monitor")
    d.add("10.0.0.5", 10143, "blue", 20)
    d.call("PATCH", "/api/director/backends/10.0.0.5", {"vhosts": 30})
    d.post("/api/director/backends/10.0.0.5/down")
    d.post("/api/director/backends/10.0.0.5/down")  # no change: nothing pushed
    d.call("DELETE", "/api/director/backends/10.0.0.5")
    for client in (login, mon):
        seen = [client.recv_until("RING-CHANGE") for _ in range(4)]
        assert [s[1] for s in seen] == ["up", "up", "flush", "down"]
        assert [s[5] for s in seen] == ["20", "30", "30", "30"]
        assert all(s[2:5] == ["10.0.0.5", "10143", "blue"] for s in seen)
        seqs = [int(s[8]) for s in seen]
        assert seqs == sorted(seqs) and len(set(seqs)) == 4
        assert all(s[7] == d.ring for s in seen)
    ring = d.get("/api/director/ring").json()
    assert ring["members"][0]["seq"] == int(seen[-1][8])
    login.close()
    mon.close()


def test_ring_protocol_errors(director):
    d = director(backends=[{"ip": "10.0.0.1", "port": 143}],
                 ring={"max_line": 512, "handshake_timeout": "300ms"})
    # HELLO before VERSION
    c = RingClient(d.ring, hello=False)
    assert c.recv()[0] == "VERSION"
    c.send("HELLO", "login", "x")
    assert c.recv() == ["ERROR", "VERSION expected first"]
    assert c.closed()
    # another major version
    c = RingClient(d.ring, hello=False)
    c.recv()
    c.send("VERSION", "petrel-ring", 2, 0)
    assert "unsupported major version 2" in c.recv()[1]
    assert c.closed()
    # another protocol
    c = RingClient(d.ring, hello=False)
    c.recv()
    c.send("VERSION", "dovecot-director", 1, 0)
    assert c.recv()[0] == "ERROR" and c.closed()
    # a client that authenticates and never says HELLO
    c = RingClient(d.ring, hello=False)
    assert c.authenticate()[0] == "AUTH-OK"
    assert c.recv(timeout=5) == ["ERROR", "handshake timeout: VERSION and HELLO expected"]
    assert c.closed()
    # a newer minor version is fine
    c = RingClient(d.ring, hello=False)
    assert c.authenticate(minor=9)[0] == "AUTH-OK"
    c.send("HELLO", "login", "future")
    assert c.recv()[0] == "HOST"
    assert c.recv() == ["DONE"]
    # unknown verbs and bad fields: ERROR, the connection stays
    c.send("FROBNICATE", "x")
    assert c.recv() == ["ERROR", "unknown command: FROBNICATE"]
    c.send("SESSION-START", "s", "u", "not-an-ip", "imap")
    assert c.recv()[0] == "ERROR"
    assert c.lookup(1, "still-here")[0] == "LOOKUP-OK"
    # a malformed escape or a line over ring.max_line: ERROR and closed
    c.send_raw(b"LOOKUP\t2\tbad\\qescape\n")
    assert c.recv()[0] == "ERROR" and c.closed()
    c = RingClient(d.ring)
    c.send_raw(b"LOOKUP\t3\t" + b"x" * 600 + b"\n")
    assert c.recv() == ["ERROR", "line too long"]
    assert c.closed()
    c = RingClient(d.ring)
    c.send_raw(b"y" * 2000)  # no line end at all
    assert c.recv() == ["ERROR", "line too long"]
    assert c.closed()
    c = RingClient(d.ring)
    c.send_raw(b"LOOKUP\t4\ta\x00b\n")
    assert c.recv()[0] == "ERROR" and c.closed()


def test_ring_connection_limits(director):
    d = director(backends=[{"ip": "10.0.0.1", "port": 143}], ring={"max_clients": 2})
    a = RingClient(d.ring)
    b = RingClient(d.ring)
    c = RingClient(d.ring, hello=False, timeout=5)
    with pytest.raises(ConnectionError):
        c.recv()
    a.close()
    wait_for(lambda: RingClient(d.ring).hosts != [], what="a free slot")
    b.close()
    assert "director.ring.max_clients reached" in d.d.stderr()


def test_ring_allow_list(director):
    d = director(ring={"allowed_nets": ["10.0.0.0/8"]})
    c = RingClient(d.ring, hello=False, timeout=5)
    with pytest.raises(ConnectionError):
        c.recv()
    assert "address not in director.ring.allowed_nets" in d.d.stderr()


def test_a_client_that_does_not_read_its_pushes_is_dropped(director):
    tag = "t" * 64
    d = director(backends=[{"ip": "10.0.0.1", "port": 143, "tag": tag}],
                 ring={"max_output": 65536})
    import select
    import socket as sk
    import threading
    lazy = sk.socket()
    lazy.setsockopt(sk.SOL_SOCKET, sk.SO_RCVBUF, 4096)
    host, port = d.ring.rsplit(":", 1)
    lazy.connect((host, int(port)))
    version = b""
    while not version.endswith(b"\n"):
        version += lazy.recv(1)
    lazy.sendall(answer_challenge(version.decode().rstrip("\n").split("\t"))
                 + b"HELLO\tlogin\tlazy\n")  # and never reads
    mon = RingClient(d.ring, "monitor", "flapper", timeout=30)
    stop = threading.Event()

    def drain():  # the monitor reads everything pushed back to it
        while not stop.is_set():
            if select.select([mon.sock], [], [], 0.2)[0] and not mon.sock.recv(1 << 20):
                return

    reader = threading.Thread(target=drain)
    reader.start()
    # Each flap pushes two ~140-byte RING-CHANGE lines to every client: far
    # more than the lazy client's socket buffers and ring.max_output hold.
    flaps = b"BACKEND-FLUSH\t10.0.0.1\nBACKEND-UP\t10.0.0.1\n" * 2000
    try:
        for _ in range(40):
            mon.send_raw(flaps)
            if "does not read its pushes" in d.d.stderr():
                break
        wait_for(lambda: "ring client dropped: it does not read its pushes" in d.d.stderr(),
                 timeout=20, what="the lazy client to be dropped")
    finally:
        stop.set()
        reader.join()
    assert "kind=login" in d.d.stderr().split("does not read its pushes", 1)[1].split("\n")[0]
    probe = RingClient(d.ring)  # the director is fine (and ends with the backend up)
    ids = iter(range(1, 1000000))
    wait_for(lambda: probe.lookup(next(ids), "x", tag=tag)[0] == "LOOKUP-OK", timeout=30,
             what="a lookup once the flapping is over")
    probe.close()
    mon.close()
    lazy.close()


def test_pipelining_without_reading_is_throttled_not_dropped(director):
    d = director(backends=[{"ip": "10.0.0.1", "port": 143}])
    c = RingClient(d.ring)
    # 20,000 lookups (~ 1 MB of replies) sent before reading a single reply
    batch = b"".join(f"LOOKUP\t{n}\tuser{n % 1000}\n".encode() for n in range(20000))
    c.sock.settimeout(60)
    import threading
    sender = threading.Thread(target=c.send_raw, args=(batch,))
    sender.start()
    time.sleep(1)
    got = 0
    while got < 20000:
        line = c.recv(timeout=60)
        assert line[0] == "LOOKUP-OK" and line[1] == str(got)
        got += 1
    sender.join()
    c.close()


# ---------- ring endpoints ----------

def test_ring_status_and_peers(director):
    d = director(backends=[{"ip": "10.0.0.1", "port": 143}])
    ring = d.get("/api/director/ring").json()
    assert ring["schemaVersion"] == 1
    assert ring["self"] == d.ring
    assert ring["size"] == 1
    assert ring["tombstones"] == []
    assert len(ring["backendSetHash"]) == 64
    assert ring["members"] == [{"addr": d.ring, "index": 0, "self": True, "left": None,
                                "right": None, "seq": ring["members"][0]["seq"],
                                "link": None}]
    topo = d.get("/api/director/ring/topology").json()
    assert topo["schemaVersion"] == 1 and topo["healthy"] is True and topo["issues"] == []
    assert topo["replicas"] == [{"addr": d.ring, "reachable": True, "status": ring}]
    assert any("API port" in a for a in topo["assumptions"])

    ok = {"status": "ok"}
    assert d.post("/api/director/ring", {"addr": "10.0.0.50:9102"}).json() == ok
    assert d.post("/api/director/ring", {"addr": "10.0.0.50:9102"}).json() == ok  # idempotent
    assert d.post("/api/director/ring", {"addr": "[fd00::0:7]:9102"}).json() == ok
    for body in ({}, {"addr": "10.0.0.50"}, {"addr": "host:9102"}, {"addr": 5},
                 {"addr": d.ring}):
        r = d.post("/api/director/ring", body)
        assert r.status == 400, (body, r)
    assert d.get("/api/director/status").json()["peers"] == ["10.0.0.50:9102", "[fd00::7]:9102"]
    topo = d.get("/api/director/ring/topology").json()
    assert topo["healthy"] is False
    assert [i["type"] for i in topo["issues"]] == ["peer-unreachable", "peer-unreachable"]
    assert all(i["severity"] == "error" for i in topo["issues"])
    assert [r["addr"] for r in topo["replicas"]] == [d.ring, "10.0.0.50:9102", "[fd00::7]:9102"]
    assert topo["replicas"][1]["reachable"] is False and "error" in topo["replicas"][1]

    assert d.call("DELETE", "/api/director/ring?addr=10.0.0.50:9102").json() == ok
    r = d.call("DELETE", "/api/director/ring?addr=10.0.0.50:9102")
    assert r.status == 404 and "peer not found" in r.json()["error"]
    assert d.call("DELETE", "/api/director/ring").status == 400
    assert d.call("DELETE", "/api/director/ring?addr=bogus").status == 400
    assert d.call("DELETE", "/api/director/ring?addr=%5Bfd00::7%5D:9102").json() == ok
    assert d.get("/api/director/status").json()["peers"] == []


def test_permanent_peers_come_from_the_configuration(director):
    d = director(peers=["10.0.0.60:9102", "10.0.0.61:9102"])
    assert d.get("/api/director/status").json()["peers"] == ["10.0.0.60:9102", "10.0.0.61:9102"]
    assert d.get("/api/director/dump").json()["peers"] == ["10.0.0.60:9102", "10.0.0.61:9102"]


def test_backend_set_hash_is_order_independent(director):
    a = director()
    b = director()
    specs = [("10.0.0.1", 143, "", 100), ("fd00::2", 993, "x", 50), ("10.0.0.3", 143, "y", 7)]
    for s in specs:
        a.add(*s)
    for s in reversed(specs):
        b.add(*s)
    ha = a.get("/api/director/ring").json()["backendSetHash"]
    hb = b.get("/api/director/ring").json()["backendSetHash"]
    assert ha == hb
    b.post("/api/director/backends/10.0.0.3/down")
    assert b.get("/api/director/ring").json()["backendSetHash"] != ha
    b.post("/api/director/backends/10.0.0.3/up")
    assert b.get("/api/director/ring").json()["backendSetHash"] == ha
    b.call("PATCH", "/api/director/backends/10.0.0.3", {"vhosts": 8})
    assert b.get("/api/director/ring").json()["backendSetHash"] != ha


# ---------- telemetry ----------

def test_readiness_and_metrics(director):
    d = director(backends=[{"ip": "10.0.0.1", "port": 143, "tag": "blue"}])
    r = http_request(d.d.telemetry, "GET", "/readyz").json()
    assert r["ready"] is True
    names = {c["name"]: c["ok"] for c in r["checks"]}
    assert names == {"director-ring-listener": True, "director-api-listener": True}
    c = RingClient(d.ring)
    c.lookup(1, "metric-user", tag="blue")
    c.send("SESSION-START", "x", "metric-user", "10.0.0.1", "lmtp")
    c.send("PING")
    c.recv_until("PONG")
    text = d.metrics()
    assert metric_value(text, "petrel_director_backend_info", ip="10.0.0.1", port="143",
                        tag="blue", status="up") == 1
    assert metric_value(text, "petrel_director_backend_sessions", ip="10.0.0.1",
                        protocol="lmtp") == 1
    for outcome in ("sticky", "assigned", "killing", "no_backends", "bad_request"):
        assert f'petrel_director_lookup_seconds_bucket{{outcome="{outcome}",le="+Inf"}}' in text
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed")
    proc = subprocess.run([promtool, "check", "metrics"], input=text.encode(),
                          capture_output=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    c.close()


def test_request_body_limit(director):
    d = director(api={"max_body_bytes": 1024})
    r = d.post("/api/director/backends", {"ip": "10.0.0.1", "port": 143, "tag": "x" * 2000})
    assert r.status == 413


# ---------- configuration ----------

@pytest.mark.parametrize("section, fragment", [
    ({"api": {"listen": "nowhere"}}, "director.api.listen"),
    ({"api": {"allowed_nets": ["10.0.0.0/33"]}}, "director.api.allowed_nets"),
    ({"ring": {"self": "host:1"}}, "director.ring.self"),
    ({"ring": {"max_line": 10}}, "director.ring.max_line"),
    ({"ring": {"reconnect_min": "1s", "reconnect_max": "500ms"}}, "director.ring.reconnect_max"),
    ({"ring": {"reconnect_min": "never"}}, "director.ring.reconnect_min"),
    ({"ring": {"peer_timeout": "5ms"}}, "director.ring.peer_timeout"),
    ({"ring": {"ping_interval": "1ms"}}, "director.ring.ping_interval"),
    ({"user_expire": "soon"}, "director.user_expire"),
    ({"peers": ["10.0.0.1"]}, "director.peers"),
    ({"backends": [{"ip": "10.0.0.1"}]}, "director.backends.port"),
    ({"backends": [{"ip": "nope", "port": 1}]}, "director.backends.ip"),
    ({"backends": [{"ip": "10.0.0.1", "port": 1, "vhosts": 5000}]}, "director.backends.vhosts"),
    ({"backends": [{"ip": "10.0.0.1", "port": 1}, {"ip": "10.0.0.1", "port": 2}]},
     "listed twice"),
    ({"limits": {"max_users": 0}}, "director.limits.max_users"),
    ({"surprise": 1}, "director.surprise: unknown key"),
])
def test_bad_configuration_is_reported_with_its_line(tmp_path, section, fragment):
    cfg = director_config()
    cfg["director"].update(section)
    from conftest import to_yaml
    path = tmp_path / "bad.yaml"
    path.write_text(to_yaml({"allow_root": True, **cfg}) + "\n")
    proc = run_petreld(["-c", str(path), "--check-config"])
    assert proc.returncode == 2, proc.stderr
    assert fragment in proc.stderr, proc.stderr
    assert f"{path}:" in proc.stderr


def test_check_config_prints_the_section_without_the_token(tmp_path):
    cfg = director_config(backends=[{"ip": "10.0.0.1", "port": 143, "tag": "t"}])
    from conftest import to_yaml
    path = tmp_path / "ok.yaml"
    path.write_text(to_yaml({"allow_root": True, **cfg}) + "\n")
    proc = run_petreld(["-c", str(path), "--check-config"],
                       env={"DIRECTOR_API_TOKEN": "very-secret-value"})
    assert proc.returncode == 0, proc.stderr
    assert "director:" in proc.stdout and "10.0.0.1" in proc.stdout
    assert "very-secret-value" not in proc.stdout + proc.stderr


# ---------- petrelctl ----------

def test_petrelctl_director_commands(director):
    d = director(backends=[{"ip": "127.0.0.1", "port": 10143}])
    p = d.ctl("director", "status")
    assert p.returncode == 0, p.stderr
    assert "127.0.0.1" in p.stdout and "10143" in p.stdout and "peers: (none)" in p.stdout
    p = d.ctl("--json", "director", "status")
    assert json.loads(p.stdout)["backends"][0]["ip"] == "127.0.0.1"

    assert d.ctl("director", "backend", "add", "10.0.0.2", "993", "--tag", "blue",
                 "--vhosts", "30").returncode == 0
    backends = {b["ip"]: b for b in d.get("/api/director/backends").json()["backends"]}
    assert backends["10.0.0.2"] == {"ip": "10.0.0.2", "port": 993, "tag": "blue", "up": True,
                                    "vhosts": 30}
    assert d.ctl("director", "backend", "update", "10.0.0.2", "--vhosts", "40").returncode == 0
    assert d.get("/api/director/backends").json()["backends"][0]["vhosts"] == 40
    p = d.ctl("director", "backend", "list")
    assert p.returncode == 0 and "blue" in p.stdout
    assert d.ctl("director", "backend", "down", "10.0.0.2").returncode == 0
    assert d.ctl("director", "backend", "up", "all").returncode == 0
    p = d.ctl("director", "map", "demo")
    assert p.returncode == 0 and "backend: 127.0.0.1" in p.stdout
    p = d.ctl("director", "map", "demo", "--tag", "blue")
    assert p.returncode == 0 and "backend: 10.0.0.2" in p.stdout
    c = RingClient(d.ring)
    c.lookup(1, "demo")
    p = d.ctl("director", "map")
    assert p.returncode == 0 and "127.0.0.1:10143" in p.stdout and str(user_hash("demo")) in p.stdout
    p = d.ctl("director", "dump")
    assert p.returncode == 0 and "EXPIRES-AT" in p.stdout
    p = d.ctl("director", "user", "move", "demo", "10.0.0.2:993")
    assert p.returncode == 0, p.stderr
    assert c.recv_until("USER-MOVED")[1] == "demo"
    assert d.ctl("director", "user", "kick", "demo").returncode == 0
    assert c.recv_until("USER-KICKED")[1] == "demo"
    p = d.ctl("director", "backend", "flush", "10.0.0.2")
    assert p.returncode == 0 and "users_flushed: 1" in p.stdout
    assert d.ctl("director", "ring", "add", "10.0.0.9:9102").returncode == 0
    p = d.ctl("director", "ring", "show")
    assert p.returncode == 0 and "backendSetHash" in p.stdout
    p = d.ctl("--json", "director", "ring", "topology")
    assert json.loads(p.stdout)["healthy"] is False
    assert d.ctl("director", "ring", "remove", "10.0.0.9:9102").returncode == 0
    assert d.ctl("director", "backend", "remove", "10.0.0.2").returncode == 0

    # errors: the server says no (1), usage (2), unreachable (3)
    p = d.ctl("director", "backend", "remove", "10.0.0.2")
    assert p.returncode == 1 and "404: backend not found: 10.0.0.2" in p.stderr
    assert d.ctl("director", "backend", "add", "10.0.0.3").returncode == 2
    assert d.ctl("director", "backend", "add", "10.0.0.3", "70000").returncode == 2
    assert d.ctl("director", "frobnicate").returncode == 2
    assert d.ctl("director", "backend", "update", "10.0.0.3").returncode == 2
    p = d.ctl("director", "status", env={"PETREL_ADMIN_TOKEN": "wrong"})
    assert p.returncode == 1 and "401" in p.stderr
    p = d.ctl("director", "status", env={"PETREL_ADMIN_URL": f"http://127.0.0.1:{free_port()}"})
    assert p.returncode == 3
    # DIRECTOR_API_TOKEN is the fallback when PETREL_ADMIN_TOKEN is unset
    p = run_petrelctl(["director", "status"],
                      env={"PETREL_ADMIN_URL": f"http://{d.api}", "DIRECTOR_API_TOKEN": TOKEN})
    assert p.returncode == 0, p.stderr
    p = run_petrelctl(["--admin-url", f"http://{d.api}", "--admin-token", TOKEN, "director",
                       "status"])
    assert p.returncode == 0, p.stderr
    c.close()


# ---------- with the real monitor ----------

class FakeLmtp:
    """A backend's LMTP port that answers the monitor's probe (220, LHLO, QUIT)."""

    def __init__(self, port=0):
        import socket as sk
        import threading
        self.sock = sk.socket()
        self.sock.setsockopt(sk.SOL_SOCKET, sk.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        self.sock.settimeout(0.1)
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            try:
                c.settimeout(2)
                f = c.makefile("rwb")
                f.write(b"220 fake LMTP\r\n")
                f.flush()
                for line in f:
                    if line.upper().startswith(b"LHLO"):
                        f.write(b"250-fake\r\n250 PIPELINING\r\n")
                    elif line.upper().startswith(b"QUIT"):
                        f.write(b"221 bye\r\n")
                        f.flush()
                        break
                    else:
                        f.write(b"500 what\r\n")
                    f.flush()
            except OSError:
                pass
            finally:
                c.close()

    def close(self):
        self.stop = True
        self.thread.join()
        self.sock.close()


def test_the_monitor_flushes_and_restores_a_backend(director, petreld, tmp_path):
    lmtp = FakeLmtp()
    port = lmtp.port
    d = director(backends=[{"ip": "127.0.0.1", "port": 10024}])
    monitor_file = tmp_path / "monitor.yaml"
    secret_file = tmp_path / "ring.secret"
    secret_file.write_text(SECRET + "\n")
    monitor_file.write_text(
        f"director_addr: {d.ring}\ndirector_secret_file: {secret_file}\n"
        f"poll_imap: false\npoll_lmtp: true\nlmtp_port: {port}\n"
        "interval: 200ms\ntimeout: 500ms\nretry_count: 1\nrapid_rounds: 2\n"
        "rapid_fails_needed: 1\nrapid_interval: 100ms\n")
    try:
        m = petreld({"components": ["monitor"], "monitor": {"config_file": str(monitor_file)}})
    except AssertionError as e:
        if "unknown component 'monitor'" in str(e):
            pytest.skip("this build has no monitor component")
        raise
    try:
        wait_for(lambda: "kind=monitor" in d.d.stderr(), what="the monitor to connect")
        time.sleep(1)  # a few probe rounds that succeed
        assert d.get("/api/director/status").json()["backends"][0]["up"] is True
        lmtp.close()  # the backend dies
        wait_for(lambda: d.get("/api/director/status").json()["backends"][0]["up"] is False,
                 timeout=15, what="the monitor to flush the backend")
        assert "monitor reports backend down" in d.d.stderr()
        lmtp = FakeLmtp(port)  # and comes back
        wait_for(lambda: d.get("/api/director/status").json()["backends"][0]["up"] is True,
                 timeout=15, what="the monitor to bring the backend back")
        assert "monitor reports backend up" in d.d.stderr()
    finally:
        lmtp.close()
        m.stop()
