"""The login proxy's IMAP front against backends that misbehave, and ring
pushes racing with logins (docs/login-proxy.md):

    client (imaplib, raw sockets)
      -> proxy petreld [login]
      -> fake backends A (127.0.0.1) and B (127.0.0.2): scripted IMAP servers
         that can break the backend dialogue, stay silent, hold their answer
         to the proxy's AUTHENTICATE, or hang up in the middle of a relay
    the proxy's auth service and the director: real petreld processes

The director runs in its own process, so that it can be paused. The fake
backends are fault injectors (as conftest.SilentServer): the real
backend is exercised by test_login_proxy.py."""

import imaplib
import socket
import threading
import time

import pytest

from conftest import free_port, wait_for
from login_proxy_rig import ProxyRig, ScriptedBackend, hand_out
from test_login_proxy import metric

PASSWD = "alice:{PLAIN}Alice-pass-3:1001:1001\ncarol:{PLAIN}Carol-pass-5:1001:1001\n"
TIMEOUT_MS = 400  # login.backend_timeout
DIRECTOR_TIMEOUT_MS = 300  # login.director_timeout
RETRIES = 3  # login.transient_retries


class FakeBackend(ScriptedBackend):
    """An IMAP backend speaking just the proxy's dialogue (greeting, ID,
    AUTHENTICATE PLAIN) and answering OK to anything after it. `mode`:
    ok, close (accept, then hang up), garbage (a non-IMAP greeting), silent,
    hold (the AUTHENTICATE is answered once `release` is set)."""

    def __init__(self, ip):
        self.mode = "ok"
        self.release = threading.Event()
        self.authenticating = threading.Event()
        super().__init__(ip, 64)

    def reset(self, mode):
        self.drop_connections()
        self.mode = mode
        self.release.clear()
        self.authenticating.clear()

    def connection(self, sock):
        # [socket, lines received, closed by the peer, the mode it is served in]
        return [sock, [], False, self.mode]

    def serve(self, entry):
        c, mode = entry[0], entry[3]
        try:
            if mode == "close":
                c.close()
                return
            if mode == "garbage":
                c.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
                c.close()
                return
            if mode == "silent":
                while c.recv(4096):
                    pass
                entry[2] = True
                return
            c.sendall(b"* OK fake backend ready\r\n")
            f = c.makefile("rb")
            for line in f:
                entry[1].append(line)
                tag = line.split(b" ", 1)[0]
                word = line.split(b" ")[1].strip().upper() if b" " in line else b""
                if word == b"ID":
                    c.sendall(b"* ID NIL\r\n" + tag + b" OK ID completed.\r\n")
                elif word == b"AUTHENTICATE":
                    self.authenticating.set()
                    if mode == "hold":
                        self.release.wait(10)
                    c.sendall(tag + b" OK [CAPABILITY IMAP4rev1 FAKE] Logged in at "
                              + self.ip.encode() + b"\r\n")
                elif word == b"LOGOUT":
                    c.sendall(b"* BYE bye\r\n" + tag + b" OK Logout completed.\r\n")
                    break
                elif word == b"HANGUP":  # the backend goes away in the middle of a relay
                    c.sendall(b"* BYE fake backend going away\r\n")
                    break
                else:
                    c.sendall(tag + b" OK done at " + self.ip.encode() + b"\r\n")
            else:
                entry[2] = True
            c.close()
        except OSError:
            entry[2] = True

    def close(self):
        super().close()
        self.reset("ok")


class FaultFleet(ProxyRig):
    def __init__(self, base):
        self.a = FakeBackend("127.0.0.1")
        self.b = FakeBackend("127.0.0.2")
        super().__init__(base, PASSWD, [{"ip": self.a.ip, "port": self.a.port},
                                        {"ip": self.b.ip, "port": self.b.port}], {
            "log_level": "debug",
            "login": {
                "transient_retries": RETRIES,
                "director_timeout": f"{DIRECTOR_TIMEOUT_MS}ms",
                "backend_timeout": f"{TIMEOUT_MS}ms",
                "imap": {"listen": [f"127.0.0.1:{free_port()}"]},
            },
        })

    def place(self, user, backend):
        """The director maps `user` to `backend` (no session of theirs is open)."""
        r = self.director("POST", f"/api/director/users/{user}/move",
                          {"backend": f"{backend.ip}:{backend.port}"})
        assert r.status == 200, r

    def stop(self):
        problems = super().stop()
        self.a.close()
        self.b.close()
        return problems


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    yield from hand_out(FaultFleet(tmp_path_factory.mktemp("login-proxy-faults")),
                        passwords=("Alice-pass-3", "Carol-pass-5"))


def counters(fleet):
    m = fleet.proxy
    return {
        "retries": metric(m, "petrel_login_transient_retries_total", protocol="imap",
                          stage="backend_session"),
        "exhausted": metric(m, "petrel_login_transient_exhausted_total", protocol="imap",
                            stage="backend_session"),
        "unavailable": metric(m, "petrel_login_result_total", protocol="imap",
                              result="unavailable"),
        "ok": metric(m, "petrel_login_result_total", protocol="imap", result="ok"),
    }


def timed_login(fleet, user="alice", password="Alice-pass-3"):
    m = imaplib.IMAP4(*fleet.addr(), timeout=15)
    start = time.monotonic()
    try:
        typ, data = m.login(user, password)
        result = (typ, data[0])
    except imaplib.IMAP4.error as e:
        result = ("NO", str(e).encode())
    return m, result, time.monotonic() - start


@pytest.mark.parametrize("mode", ["close", "garbage"])
def test_a_broken_backend_is_retried_150ms_apart_then_unavailable(fleet, mode):
    """Each attempt fails at once: the client hears one clean temporary
    failure after RETRIES more attempts, each after the 150 ms pause."""
    fleet.place("alice", fleet.a)
    fleet.a.reset(mode)
    before = counters(fleet)
    m, (typ, text), took = timed_login(fleet)
    assert typ == "NO" and b"UNAVAILABLE" in text, text
    assert len(fleet.a.connections()) == RETRIES + 1
    assert took >= RETRIES * 0.15 - 0.02, took
    after = counters(fleet)
    assert after["retries"] == before["retries"] + RETRIES
    assert after["exhausted"] == before["exhausted"] + 1
    assert after["unavailable"] == before["unavailable"] + 1
    # still before login: the session answers on
    assert m.noop()[0] == "OK"
    m.shutdown()


def test_a_silent_backend_times_out_each_attempt(fleet):
    fleet.place("alice", fleet.a)
    fleet.a.reset("silent")
    m, (typ, text), took = timed_login(fleet)
    assert typ == "NO" and b"UNAVAILABLE" in text, text
    low = (RETRIES + 1) * TIMEOUT_MS / 1000 + RETRIES * 0.15
    assert low - 0.05 <= took < low + 4, took
    # every attempt's connection was closed by the proxy
    wait_for(lambda: all(c[2] for c in fleet.a.connections()), what="attempts closed")
    assert len(fleet.a.connections()) == RETRIES + 1
    m.shutdown()


def test_pipelined_commands_reach_the_backend(fleet):
    """LOGIN and SELECT in one write: SELECT goes to the backend, answered
    there, not by the proxy."""
    fleet.place("alice", fleet.a)
    fleet.a.reset("ok")
    s = socket.create_connection(fleet.addr(), timeout=10)
    f = s.makefile("rb")
    assert f.readline().startswith(b"* OK")
    s.sendall(b"a LOGIN alice Alice-pass-3\r\nb SELECT INBOX\r\nc NOOP\r\n")
    assert f.readline().startswith(b"a OK [CAPABILITY IMAP4rev1 FAKE]")
    assert f.readline() == b"b OK done at 127.0.0.1\r\n"
    assert f.readline() == b"c OK done at 127.0.0.1\r\n"
    s.sendall(b"d LOGOUT\r\n")
    assert f.readline() == b"* BYE bye\r\n"
    f.close()
    s.close()


def test_a_backend_hanging_up_mid_relay_ends_the_session_and_its_counts(fleet):
    fleet.place("carol", fleet.a)
    fleet.a.reset("ok")
    m = imaplib.IMAP4(*fleet.addr(), timeout=10)
    assert m.login("carol", "Carol-pass-5")[0] == "OK"
    wait_for(lambda: metric(fleet.proxy, "petrel_login_sessions", protocol="imap") == 1,
             what="relayed")
    wait_for(lambda: metric(fleet.hub, "petrel_director_backend_sessions") == 1,
             what="SESSION-START counted")
    m.send(b"h HANGUP\r\n")
    data = b""
    while True:
        chunk = m.sock.recv(4096)
        if not chunk:
            break
        data += chunk
    assert data == b"* BYE fake backend going away\r\n", data
    wait_for(lambda: metric(fleet.proxy, "petrel_login_sessions", protocol="imap") == 0,
             what="gauge back to 0")
    wait_for(lambda: metric(fleet.hub, "petrel_director_backend_sessions") == 0,
             what="SESSION-END counted")
    m.sock.close()


def login_in_background(fleet, user, password):
    out = {}

    def run():
        out["result"] = timed_login(fleet, user, password)
    t = threading.Thread(target=run)
    t.start()
    return t, out


def test_a_move_during_the_backend_login_lands_the_session_on_the_new_backend(fleet):
    """The director answered A; while A still holds its answer to the proxy's
    login the user is moved to B. The session must not stay on A (two
    backends serving one user): the set-up starts again and lands on B."""
    fleet.place("carol", fleet.a)
    fleet.a.reset("hold")
    fleet.b.reset("ok")
    mark = len(fleet.proxy.stderr())
    t, out = login_in_background(fleet, "carol", "Carol-pass-5")
    assert fleet.a.authenticating.wait(10)
    fleet.place("carol", fleet.b)
    wait_for(lambda: "user moved" in fleet.proxy.stderr()[mark:], what="the push arrived")
    fleet.a.release.set()
    t.join(15)
    m, (typ, text), _ = out["result"]
    assert typ == "OK", text
    assert b"Logged in at 127.0.0.2" in text, text
    typ, data = m.noop()
    assert typ == "OK" and b"done at 127.0.0.2" in data[0], data
    wait_for(lambda: all(c[2] or c[0].fileno() < 0 for c in fleet.a.connections()),
             what="A's session closed")
    m.logout()


def test_a_kick_during_the_backend_login_does_not_leave_that_session(fleet):
    """A kick while the backend login is in flight: the session being set up
    is not relayed as it was (it would outlive the kick); it is set up again."""
    fleet.place("alice", fleet.a)
    fleet.a.reset("hold")
    mark = len(fleet.proxy.stderr())
    t, out = login_in_background(fleet, "alice", "Alice-pass-3")
    assert fleet.a.authenticating.wait(10)
    assert fleet.director("POST", "/api/director/users/alice/kick").status == 200
    wait_for(lambda: "user kicked" in fleet.proxy.stderr()[mark:], what="the push arrived")
    fleet.a.release.set()
    t.join(15)
    m, (typ, text), _ = out["result"]
    assert typ == "OK", text
    conns = fleet.a.connections()
    assert len(conns) == 2, conns  # the first login at A was dropped, a second made
    wait_for(lambda: conns[0][2], what="the kicked attempt closed by the proxy")
    assert m.noop()[0] == "OK"
    m.logout()


def proxy_fds(fleet):
    return len(__import__("os").listdir(f"/proc/{fleet.proxy.pid}/fd"))


@pytest.mark.parametrize("mode", ["hold", "close"])
def test_a_client_hanging_up_during_the_set_up_leaves_nothing_behind(fleet, mode):
    """The client goes while the backend login is in flight (hold) or during
    a retry pause (close): the backend connection is closed, nothing is
    counted as relayed, no descriptor stays."""
    fleet.place("alice", fleet.a)
    fleet.a.reset("ok")
    m = imaplib.IMAP4(*fleet.addr(), timeout=10)  # one session to warm up
    assert m.login("alice", "Alice-pass-3")[0] == "OK"
    m.logout()
    wait_for(lambda: metric(fleet.proxy, "petrel_login_sessions", protocol="imap") == 0,
             what="warm-up session ended")
    base = proxy_fds(fleet)
    fleet.a.reset(mode)
    for _ in range(5):
        s = socket.create_connection(fleet.addr(), timeout=10)
        f = s.makefile("rb")
        f.readline()
        s.sendall(b"a LOGIN alice Alice-pass-3\r\n")
        if mode == "hold":
            assert fleet.a.authenticating.wait(10)
            fleet.a.authenticating.clear()
        else:
            wait_for(lambda: fleet.a.connections(), what="an attempt")
        f.close()
        s.close()
    # the client connections and the backend logins in flight are closed
    wait_for(lambda: proxy_fds(fleet) <= base, what="descriptors back")
    fleet.a.release.set()
    assert metric(fleet.proxy, "petrel_login_sessions", protocol="imap") == 0
    assert metric(fleet.hub, "petrel_director_backend_sessions") == 0


def test_a_paused_director_costs_retries_then_unavailable(fleet):
    """The director stops answering (SIGSTOP): each lookup gives up after
    login.director_timeout and is retried; back within the budget, the
    login succeeds; away for longer, one clean temporary failure. The late
    answers to the abandoned lookups are dropped."""
    import signal
    fleet.place("carol", fleet.a)
    fleet.a.reset("ok")
    before = counters(fleet)
    fleet.hub.signal(signal.SIGSTOP)
    try:
        t, out = login_in_background(fleet, "carol", "Carol-pass-5")
        wait_for(lambda: counters(fleet)["retries"] >= before["retries"] + 1,
                 what="a lookup retried")
    finally:
        fleet.hub.signal(signal.SIGCONT)
    t.join(15)
    m, (typ, text), _ = out["result"]
    assert typ == "OK" and b"Logged in at 127.0.0.1" in text, text
    after = counters(fleet)
    assert after["unavailable"] == before["unavailable"]
    assert after["ok"] == before["ok"] + 1
    m.logout()
    before = after
    fleet.hub.signal(signal.SIGSTOP)
    try:
        m, (typ, text), took = timed_login(fleet, "carol", "Carol-pass-5")
    finally:
        fleet.hub.signal(signal.SIGCONT)
    assert typ == "NO" and b"UNAVAILABLE" in text, text
    low = (RETRIES + 1) * DIRECTOR_TIMEOUT_MS / 1000 + RETRIES * 0.15
    assert low - 0.05 <= took < low + 4, took
    after = counters(fleet)
    assert after["retries"] == before["retries"] + RETRIES
    assert after["exhausted"] == before["exhausted"] + 1
    # the director is back: the next login works at once
    assert m.login("carol", "Carol-pass-5")[0] == "OK"
    m.logout()
