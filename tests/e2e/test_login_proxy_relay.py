"""The login proxy's byte relay (src/net/relay.c) after login, attacked
from both ends with real sockets (docs/login-proxy.md, "Relay"):

    clients (raw sockets: plain, STARTTLS, implicit TLS)
      -> proxy petreld [login]
      -> a scripted IMAP backend (this file's RelayBackend): after the
         proxy's login it obeys commands the client sends through the relay
         (send N bytes, echo N bytes, stop reading, reset, half-close)
    the proxy's auth service and the director: real petreld processes

The backend is a fault injector as in test_login_proxy_faults.py: it lets a
test choose exactly what arrives at the proxy and when, and check every
byte that comes out of it."""

import hashlib
import os
import random
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time

import pytest

from conftest import free_port, wait_for
from login_proxy_rig import ProxyRig, ScriptedBackend, hand_out
from test_login_proxy import metric, vmrss_kib

PASSWD = "".join(f"u{i}:{{PLAIN}}Relay-pass-{i}:1001:1001\n" for i in range(40)) + \
    "k0:{PLAIN}Relay-pass-0:1001:1001::::director_tag=doomed\n"
# A backend in a process of its own, for kill -9 (user k0's group "doomed"):
# the login dialogue, then "t SEND n seed" as RelayBackend.
DOOMED_BACKEND = r"""
import random, socket, sys
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.2", 0))
srv.listen(8)
print(srv.getsockname()[1], flush=True)
while True:
    c, _ = srv.accept()
    c.sendall(b"* OK doomed backend ready\r\n")
    f = c.makefile("rb")
    for line in f:
        w = line.split()
        if w[1].upper() == b"ID":
            c.sendall(b"* ID NIL\r\n" + w[0] + b" OK ID completed.\r\n")
        elif w[1].upper() == b"AUTHENTICATE":
            c.sendall(w[0] + b" OK [CAPABILITY IMAP4rev1] Logged in\r\n")
        elif w[1].upper() == b"SEND":
            n = int(w[2])
            c.sendall(b"* SEND %d\r\n" % n + random.Random(int(w[3])).randbytes(n))
"""
HIGH_WATER = 256 * 1024  # MAIL_PROXY_RELAY_HIGH_WATER
# After the backend's OK to the proxy's login, in the same write: the first
# relayed bytes are already in the proxy's buffer when the relay starts.
AFTER_OK = b"* 1 EXISTS\r\n* OK [UIDNEXT 2] right behind the login answer\r\n"


def pattern(n, seed):
    """`n` reproducible bytes (every value, CR and LF included)."""
    return random.Random(seed).randbytes(n)


def read_to_eof(f, conn):
    """What the proxy still sends, kept in conn.received until its EOF."""
    while True:
        chunk = f.read1(1 << 16)
        if not chunk:
            return
        conn.received += chunk


class RelayBackend(ScriptedBackend):
    """An IMAP backend speaking the proxy's login dialogue (greeting, ID,
    AUTHENTICATE), then a few commands of its own, sent by the client
    through the relay:

        t SEND n seed   "* SEND n\\r\\n" + pattern(n, seed) + "t OK\\r\\n"
        t ECHO n        reads n raw bytes, answers "* ECHO n\\r\\n" + them + "t OK\\r\\n"
        t SINK          stops reading until `unsink` is set, then counts what comes
        t RST           sends "* RST\\r\\n", then resets the connection (SO_LINGER 0)
        t SHUTWR        sends "* SHUTWR\\r\\n", half-closes, keeps reading
        LOGOUT          BYE, OK, close
        anything else   "t OK done\\r\\n"
    """

    def __init__(self, ip="127.0.0.1"):
        self.unsink = threading.Event()
        super().__init__(ip, 256)

    class Conn:
        def __init__(self, sock):
            self.sock = sock
            self.sent = 0          # bytes of SEND payload handed to the kernel
            self.received = bytearray()  # what came after SINK / SHUTWR
            self.sinking = threading.Event()
            self.eof = threading.Event()  # the proxy closed its side

    def connection(self, sock):
        return RelayBackend.Conn(sock)

    def serve(self, conn):
        c = conn.sock
        try:
            c.sendall(b"* OK relay backend ready\r\n")
            f = c.makefile("rb")
            while True:
                line = f.readline()
                if not line:
                    break
                words = line.split()
                tag = words[0] if words else b"*"
                word = words[1].upper() if len(words) > 1 else b""
                if word == b"ID":
                    c.sendall(b"* ID NIL\r\n" + tag + b" OK ID completed.\r\n")
                elif word == b"AUTHENTICATE":
                    c.sendall(tag + b" OK [CAPABILITY IMAP4rev1] Logged in\r\n" + AFTER_OK)
                elif word == b"SEND":
                    n, seed = int(words[2]), int(words[3])
                    c.sendall(b"* SEND %d\r\n" % n)
                    data = pattern(n, seed)
                    step = 64 * 1024
                    for i in range(0, n, step):
                        c.sendall(data[i:i + step])
                        conn.sent += len(data[i:i + step])
                    c.sendall(tag + b" OK\r\n")
                elif word == b"ECHO":
                    n = int(words[2])
                    data = f.read(n)
                    c.sendall(b"* ECHO %d\r\n" % n + data + tag + b" OK\r\n")
                elif word == b"SINK":
                    conn.sinking.set()
                    self.unsink.wait(60)
                    read_to_eof(f, conn)
                    break
                elif word in (b"RST", b"SENDRST"):
                    if word == b"SENDRST":  # then reset at once, the last bytes maybe in flight
                        c.sendall(b"* SEND %d\r\n" % int(words[2]) + pattern(int(words[2]), int(words[3])))
                    else:
                        c.sendall(b"* RST\r\n")
                    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    c.close()
                    return
                elif word == b"SHUTWR":
                    c.sendall(b"* SHUTWR\r\n")
                    c.shutdown(socket.SHUT_WR)
                    read_to_eof(f, conn)
                    break
                elif word == b"LOGOUT":
                    c.sendall(b"* BYE bye\r\n" + tag + b" OK Logout completed.\r\n")
                    break
                else:
                    c.sendall(tag + b" OK done\r\n")
            conn.eof.set()
            c.close()
        except OSError:
            conn.eof.set()

    def close(self):
        super().close()
        self.unsink.set()


class RelayFleet(ProxyRig):
    def __init__(self, base):
        base.mkdir(parents=True, exist_ok=True)
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                        "tls.key", "-out", "tls.pem", "-days", "2", "-subj", "/CN=localhost"],
                       cwd=base, check=True, capture_output=True)
        self.backend = RelayBackend()
        self.clients = []  # every client socket a test made (closed after it)
        self.doomed = subprocess.Popen([sys.executable, "-c", DOOMED_BACKEND],
                                       stdout=subprocess.PIPE)
        self.doomed_port = int(self.doomed.stdout.readline())
        # A small ASan quarantine: the proxy's VmRSS then follows what it
        # holds, not what it freed lately.
        asan = os.environ.get("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=1")
        super().__init__(base, PASSWD, [
            {"ip": self.backend.ip, "port": self.backend.port},
            {"ip": "127.0.0.2", "port": self.doomed_port, "tag": "doomed"},
        ], {
            "login": {
                "imap": {"listen": [f"127.0.0.1:{free_port()}"],
                         "listen_tls": [f"127.0.0.1:{free_port()}"],
                         "tls_cert_file": str(base / "tls.pem"),
                         "tls_key_file": str(base / "tls.key")},
            },
        }, env={"ASAN_OPTIONS": asan + ":quarantine_size_mb=4"})

    def sessions(self):
        return metric(self.proxy, "petrel_login_sessions", protocol="imap")

    def stop(self):
        problems = super().stop()
        self.backend.close()
        if self.doomed.poll() is None:
            self.doomed.kill()
        self.doomed.wait()
        return problems


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    yield from hand_out(RelayFleet(tmp_path_factory.mktemp("login-proxy-relay")))


@pytest.fixture(autouse=True)
def no_session_left(fleet):
    """A test that failed half-way must not leave its sessions to the next
    one, whose counts start from none."""
    yield
    for s in fleet.clients:
        try:
            s.close()
        except OSError:
            pass
    fleet.clients.clear()
    try:
        wait_for(lambda: fleet.sessions() == 0, what="no session left")
    except AssertionError:
        pass


def tls_context():
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


class Client:
    """A raw IMAP client with its own read buffer (exact bytes, no parsing
    but lines)."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def fill(self):
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise EOFError
        self.buf += chunk

    def line(self):
        while b"\r\n" not in self.buf:
            self.fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line + b"\r\n"

    def exact(self, n):
        while len(self.buf) < n:
            self.fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def rest(self, timeout):
        """Everything until EOF; raises on a reset or a timeout."""
        self.sock.settimeout(timeout)
        while True:
            try:
                self.fill()
            except EOFError:
                data, self.buf = self.buf, b""
                return data

    def send(self, data):
        self.sock.sendall(data)

    def close(self):
        self.sock.close()


def connect(fleet, kind, user="u0", pipelined=b"", rcvbuf=None):
    """A client logged in through the proxy over `kind` (plain, starttls,
    tls), `pipelined` sent in the same write as its LOGIN. The backend's
    connection for it is returned too."""
    before = len(fleet.backend.connections())
    s = socket.socket()
    fleet.clients.append(s)
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(15)
    s.connect(fleet.addr(tls=kind == "tls"))
    if kind == "tls":
        s = tls_context().wrap_socket(s, server_hostname="localhost")
        fleet.clients.append(s)
    c = Client(s)
    assert c.line().startswith(b"* OK")
    if kind == "starttls":
        c.send(b"s STARTTLS\r\n")
        assert c.line().startswith(b"s OK")
        c = Client(tls_context().wrap_socket(s, server_hostname="localhost"))
        fleet.clients.append(c.sock)
    i = int(user[1:])
    c.send(b"a LOGIN %s Relay-pass-%d\r\n" % (user.encode(), i) + pipelined)
    line = c.line()
    assert line.startswith(b"a OK"), line
    if user.startswith("k"):
        return c, None
    wait_for(lambda: len(fleet.backend.connections()) > before, what="backend connection")
    return c, fleet.backend.connections()[-1]


KINDS = ["plain", "starttls", "tls"]


@pytest.mark.parametrize("kind", KINDS)
def test_pipelined_input_and_bytes_behind_the_login_answer_arrive(fleet, kind):
    """The client's commands sent with its LOGIN, and what the backend sent
    right behind its OK, are in the proxy's buffers when the relay starts:
    both go across, in order, and nothing else has to happen first."""
    c, _ = connect(fleet, kind, pipelined=b"b NOOP\r\nc ECHO 5\r\nhello")
    assert c.line() + c.line() == AFTER_OK
    assert c.line() == b"b OK done\r\n"
    assert c.line() == b"* ECHO 5\r\n"
    assert c.exact(5) == b"hello"
    assert c.line() == b"c OK\r\n"
    c.send(b"z LOGOUT\r\n")
    assert c.rest(5) == b"* BYE bye\r\nz OK Logout completed.\r\n"
    c.close()


def stalled(read, polls=4, interval=0.15):
    """Waits until read() stands still for `polls` looks; returns its value."""
    last = [None, 0]

    def still():
        now = read()
        last[1] = last[1] + 1 if now == last[0] else 0
        last[0] = now
        return last[1] >= polls
    wait_for(still, timeout=30, interval=interval, what="the sender held back")
    return last[0]


@pytest.mark.parametrize("kind", KINDS)
def test_a_client_that_does_not_read_holds_the_backend_back(fleet, kind):
    """64 MB from the backend to a client that reads nothing: the backend is
    held back by TCP, the proxy stays within its bound, and once the client
    reads, every byte arrives in order."""
    total = 64 << 20
    c, b = connect(fleet, kind, rcvbuf=64 * 1024)
    c.line(), c.line()
    before = vmrss_kib(fleet.proxy.pid)
    c.send(b"t SEND %d 7\r\n" % total)
    sent = stalled(lambda: b.sent)
    grown = vmrss_kib(fleet.proxy.pid) - before
    print("STAT", kind, sent, grown)
    assert sent < total // 4, sent
    assert grown < 16 * 1024, f"proxy grew by {grown} KiB"
    assert c.line() == b"* SEND %d\r\n" % total
    got = hashlib.sha256()
    left = total
    while left:
        chunk = c.exact(min(left, 1 << 20))
        got.update(chunk)
        left -= len(chunk)
    assert got.digest() == hashlib.sha256(pattern(total, 7)).digest()
    assert c.line() == b"t OK\r\n"
    c.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_backend_that_does_not_read_holds_the_client_back(fleet, kind):
    """The other way: 64 MB from a client to a backend that reads nothing.
    The client is held back, the proxy stays within its bound, and once the
    backend reads, it gets every byte in order."""
    total = 64 << 20
    fleet.backend.unsink.clear()
    c, b = connect(fleet, kind)
    c.line(), c.line()
    c.send(b"t SINK\r\n")
    assert b.sinking.wait(10)
    before = vmrss_kib(fleet.proxy.pid)
    data = pattern(total, 11)
    progress = [0]

    def upload():
        try:
            for i in range(0, total, 1 << 16):
                c.sock.sendall(data[i:i + (1 << 16)])
                progress[0] = i + (1 << 16)
        except OSError:
            pass
    t = threading.Thread(target=upload, daemon=True)
    t.start()
    sent = stalled(lambda: progress[0])
    grown = vmrss_kib(fleet.proxy.pid) - before
    print("STAT", kind, sent, grown)
    assert sent < total // 4, sent
    assert grown < 16 * 1024, f"proxy grew by {grown} KiB"
    fleet.backend.unsink.set()
    t.join(60)
    assert progress[0] == total
    c.sock.shutdown(socket.SHUT_WR) if kind == "plain" else c.sock.unwrap().shutdown(socket.SHUT_WR)
    assert b.eof.wait(20)
    assert len(b.received) == total
    assert b.received == data
    c.close()


def kick(fleet, user):
    r = fleet.director("POST", f"/api/director/users/{user}/kick")
    assert r.status == 200, r


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("talking", [False, True])
def test_a_kick_mid_transfer_delivers_what_was_relayed_then_the_bye(fleet, kind, talking):
    """A kick while 32 MB are on their way to a client that is slow to read
    (and, `talking`, keeps sending commands the relay no longer reads): the
    backend's connection is closed within the second, and the client gets
    an unbroken prefix of the transfer, the BYE, then EOF (not a reset that
    would throw away what was still in flight to it)."""
    total = 32 << 20
    user = "u%d" % (3 + KINDS.index(kind) + 3 * talking)
    c, b = connect(fleet, kind, user=user, rcvbuf=64 * 1024)
    c.line(), c.line()
    c.send(b"t SEND %d 5\r\n" % total)
    stalled(lambda: b.sent)
    if talking:  # more than the backend (blocked in its send) and the kernels take
        def chatter():
            try:
                c.sock.sendall(b"n NOOP\r\n" * (1 << 19))
            except OSError:
                pass
        threading.Thread(target=chatter, daemon=True).start()
        time.sleep(0.5)
    kick(fleet, user)
    start = time.monotonic()
    assert b.eof.wait(5)  # the session at the backend is over
    took = time.monotonic() - start
    data = c.rest(5)
    head = b"* SEND %d\r\n" % total
    assert data.startswith(head)
    end = data.rindex(b"* BYE")
    assert data[end:].startswith(b"* BYE [UNAVAILABLE] Disconnected: ") and data.endswith(b"\r\n")
    body = data[len(head):end]
    assert 0 < len(body) < total
    assert body == pattern(total, 5)[:len(body)]
    assert took < 1.0, took
    wait_for(lambda: fleet.sessions() == 0, what="the session gone")
    c.close()


def ended_logged(fleet, mark, end):
    return f"end={end}" in fleet.proxy.stderr()[mark:]


def upload_then_close(fleet, c, b, data, close):
    """After the greeting and the backend's login answer, the backend stops
    reading (SINK) while the client sends `data` and then `close()`s; once
    the backend reads again it gets every byte, then EOF."""
    c.line(), c.line()
    c.send(b"t SINK\r\n")
    assert b.sinking.wait(10)
    c.send(data)
    close()
    fleet.backend.unsink.set()
    assert b.eof.wait(10)
    assert bytes(b.received) == data


@pytest.mark.parametrize("kind", KINDS)
def test_a_client_half_close_ends_the_session_as_at_a_backend(fleet, kind):
    """A client's EOF ends its session, as it does at a backend (petreld
    and Dovecot answer nothing after it): what it sent before still reaches
    the backend, which then sees EOF, and nothing stays behind."""
    mark = len(fleet.proxy.stderr())
    c, b = connect(fleet, kind)

    def half_close():
        if kind != "plain":
            c.sock = c.sock.unwrap()  # close_notify first
        c.sock.shutdown(socket.SHUT_WR)
    upload_then_close(fleet, c, b, pattern(1 << 20, 3), half_close)
    assert c.rest(5) == b""
    wait_for(lambda: ended_logged(fleet, mark, "client_closed"), what="client_closed")
    wait_for(lambda: fleet.sessions() == 0, what="the session gone")
    fleet.backend.unsink.clear()
    c.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_backend_half_close_flushes_then_ends(fleet, kind):
    """The backend half-closes after its last words: the client gets them,
    then EOF; the backend sees the proxy close in turn."""
    mark = len(fleet.proxy.stderr())
    c, b = connect(fleet, kind)
    c.line(), c.line()
    c.send(b"t SHUTWR\r\n")
    assert c.rest(5) == b"* SHUTWR\r\n"
    assert b.eof.wait(5)
    wait_for(lambda: ended_logged(fleet, mark, "backend_closed"), what="backend_closed")
    wait_for(lambda: fleet.sessions() == 0, what="the session gone")
    c.close()


@pytest.mark.parametrize("kind", ["starttls", "tls"])
def test_a_tls_client_closing_without_close_notify_is_a_close(fleet, kind):
    """Many TLS clients just close their socket (a FIN, no close_notify):
    the relay, which reads TLS itself (SSL_read through its own socket
    BIO), takes that as the client's close, as it takes close_notify:
    end=client_closed, and what the client sent before reaches the
    backend. (The BIO once did not report the EOF, and OpenSSL made it an
    error: end=client_error.)"""
    mark = len(fleet.proxy.stderr())
    c, b = connect(fleet, kind)
    # an SSLSocket's shutdown() sends no close_notify
    upload_then_close(fleet, c, b, pattern(1 << 20, 4), lambda: c.sock.shutdown(socket.SHUT_WR))
    wait_for(lambda: ended_logged(fleet, mark, "client_closed")
             or ended_logged(fleet, mark, "client_error"), what="the client's end")
    assert ended_logged(fleet, mark, "client_closed"), fleet.proxy.stderr()[mark:][-2000:]
    wait_for(lambda: fleet.sessions() == 0, what="the session gone")
    fleet.backend.unsink.clear()
    c.close()


def test_key_updates_from_a_tls_client_mid_transfer(fleet):
    """openssl s_client over TLS 1.3 asks for key updates ("K": its
    KeyUpdate with update_requested, which the relay's SSL_read takes and
    its next SSL_write answers with one of its own) before, twice during
    and after an 8 MB transfer to it: every byte arrives in order and the
    session goes on to its LOGOUT."""
    host, port = fleet.addr(tls=True)
    p = subprocess.Popen(["openssl", "s_client", "-connect", f"{host}:{port}", "-tls1_3",
                          "-crlf", "-servername", "localhost"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = bytearray(), bytearray()
    lock = threading.Lock()

    def reader(stream, into):
        while True:
            chunk = stream.read1(1 << 16)
            if not chunk:
                return
            with lock:
                into.extend(chunk)
    threading.Thread(target=reader, args=(p.stdout, out), daemon=True).start()
    threading.Thread(target=reader, args=(p.stderr, err), daemon=True).start()

    def has(token, start=0):
        with lock:
            return out.find(token, start) >= 0

    def say(line):
        p.stdin.write(line + b"\n")
        p.stdin.flush()

    def key_update():
        # s_client drops whatever else its read of stdin brought with a
        # "K" line: each one goes alone, and is seen sent before going on.
        with lock:
            before = err.count(b"KEYUPDATE")
        say(b"K")
        wait_for(lambda: err.count(b"KEYUPDATE") > before, timeout=10, what="the key update")
    try:
        wait_for(lambda: has(b"* OK"), timeout=15, what="the greeting")
        say(b"a LOGIN u2 Relay-pass-2")
        wait_for(lambda: has(b"[UIDNEXT 2] right behind the login answer\r\n"), timeout=15,
                 what="the login")
        key_update()
        n = 8 << 20
        head = b"* SEND %d\r\n" % n
        say(b"t SEND %d 21" % n)
        wait_for(lambda: has(head), timeout=15, what="the transfer starting")
        key_update()
        with lock:
            start = out.find(head) + len(head)
        wait_for(lambda: len(out) > start + n // 2, timeout=30, what="half the transfer")
        key_update()
        wait_for(lambda: has(b"t OK\r\n", start + n), timeout=30, what="the transfer")
        with lock:
            got = bytes(out[start:start + n])
            after = bytes(out[start + n:start + n + 6])
        assert got == pattern(n, 21)
        assert after == b"t OK\r\n"
        key_update()
        say(b"z LOGOUT")
        wait_for(lambda: has(b"z OK Logout completed.\r\n", start + n), timeout=15,
                 what="the logout")
        p.wait(10)  # s_client ends at the proxy's close
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    wait_for(lambda: fleet.sessions() == 0, what="the session gone")


def reset(sock):
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_client_reset_mid_transfer_ends_the_session(fleet, kind):
    mark = len(fleet.proxy.stderr())
    c, b = connect(fleet, kind, rcvbuf=64 * 1024)
    c.line(), c.line()
    c.send(b"t SEND %d 9\r\n" % (64 << 20))
    c.exact(1 << 20)
    reset(c.sock)
    # The proxy closes the backend's connection (after a linger in which
    # it reads and drops what the backend still sends).
    assert b.eof.wait(5)
    wait_for(lambda: ended_logged(fleet, mark, "client_error")
             or ended_logged(fleet, mark, "client_closed"), what="the client's end")
    wait_for(lambda: fleet.sessions() == 0, what="the session gone")


@pytest.mark.parametrize("kind", KINDS)
def test_a_backend_reset_after_its_last_bytes_delivers_them(fleet, kind):
    """The backend sends 48 KB (less than the proxy's receive window takes
    at once, so none of it is still at the backend) and resets the
    connection at once: all of it reaches the client, then EOF."""
    mark = len(fleet.proxy.stderr())
    n = 48 * 1024
    c, b = connect(fleet, kind)
    c.line(), c.line()
    c.send(b"t SENDRST %d 13\r\n" % n)
    data = c.rest(5)
    assert data == b"* SEND %d\r\n" % n + pattern(n, 13)
    wait_for(lambda: ended_logged(fleet, mark, "backend_error")
             or ended_logged(fleet, mark, "backend_closed"), what="the backend's end")
    wait_for(lambda: fleet.sessions() == 0, what="the session gone")
    c.close()


def session_script(fleet, i, kind, rounds, errors):
    """One client: random transfers both ways, every byte checked."""
    rnd = random.Random(1000 + i)
    try:
        c, _ = connect(fleet, kind, user="u%d" % (10 + i))
        c.line(), c.line()
        for r in range(rounds):
            if rnd.random() < 0.5:
                n, seed = rnd.randrange(0, 3 << 20), rnd.randrange(1 << 30)
                c.send(b"s%d SEND %d %d\r\n" % (r, n, seed))
                assert c.line() == b"* SEND %d\r\n" % n
                assert c.exact(n) == pattern(n, seed)
                assert c.line() == b"s%d OK\r\n" % r
            else:
                n = rnd.randrange(0, 1 << 20)
                data = pattern(n, rnd.randrange(1 << 30))
                c.send(b"e%d ECHO %d\r\n" % (r, n) + data)
                assert c.line() == b"* ECHO %d\r\n" % n
                assert c.exact(n) == data
                assert c.line() == b"e%d OK\r\n" % r
        c.send(b"z LOGOUT\r\n")
        assert c.rest(10) == b"* BYE bye\r\nz OK Logout completed.\r\n"
        c.close()
    except Exception as e:  # reported by the test
        errors.append(f"session {i} ({kind}): {e!r}")


def test_many_sessions_at_once_every_byte_both_ways(fleet):
    """24 sessions at once (plain, STARTTLS, TLS), each moving random
    amounts both ways: every byte arrives, in order, on every session."""
    errors = []
    threads = [threading.Thread(target=session_script,
                                args=(fleet, i, KINDS[i % 3], 6, errors))
               for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    wait_for(lambda: fleet.sessions() == 0, what="every session gone")


def proxy_fds(fleet):
    return len(os.listdir(f"/proc/{fleet.proxy.pid}/fd"))


def short_session(fleet, i, errors):
    """Logs in, then ends in one of the ways a session ends."""
    kind = KINDS[i % 3]
    try:
        c, _ = connect(fleet, kind, user="u%d" % (i % 40))
        c.line(), c.line()
        way = i % 5
        if way == 0:
            c.send(b"z LOGOUT\r\n")
            c.rest(10)
        elif way == 1:
            c.close()
        elif way == 2:
            c.send(b"t SEND %d 1\r\n" % (4 << 20))
            c.exact(1000)
            reset(c.sock)
        elif way == 3:
            c.send(b"t SHUTWR\r\n")
            c.rest(10)
        else:
            c.send(b"t RST\r\n")
            try:
                c.rest(10)
            except OSError:
                pass
        c.close()
    except Exception as e:
        errors.append(f"session {i} ({kind}): {e!r}")


def test_sessions_ending_every_way_leave_no_descriptor(fleet):
    """Sessions that end by LOGOUT, a client close, a client reset
    mid-transfer, a backend half-close and a backend reset: afterwards the
    proxy holds as many descriptors as before and no session."""
    n = int(os.environ.get("RELAY_SESSIONS", "300"))
    warm = []
    short_session(fleet, 0, warm)
    wait_for(lambda: fleet.sessions() == 0, what="warm-up gone")
    base = proxy_fds(fleet)
    errors = []
    for start in range(0, n, 8):
        threads = [threading.Thread(target=short_session, args=(fleet, i, errors))
                   for i in range(start, min(n, start + 8))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert not errors, errors[:5]
    wait_for(lambda: fleet.sessions() == 0, timeout=20, what="every session gone")
    wait_for(lambda: proxy_fds(fleet) <= base, what=f"descriptors back to {base}")


def test_tls_sessions_kicked_mid_transfer_leave_no_descriptor(fleet):
    """TLS sessions (STARTTLS and implicit) kicked while 8 MB stream to
    clients slow to read: each client gets a prefix, the BYE and its EOF;
    afterwards the proxy holds as many descriptors as before (the relay's
    sockets, their lingering copies and the SSLs are all gone)."""
    warm, _ = connect(fleet, "tls", user="u20")
    warm.send(b"z LOGOUT\r\n")
    warm.rest(10)
    warm.close()
    wait_for(lambda: fleet.sessions() == 0, what="warm-up gone")
    base = proxy_fds(fleet)
    total = 8 << 20
    clients = []
    for i in range(12):
        user = "u%d" % (20 + i)
        c, b = connect(fleet, ("tls", "starttls")[i % 2], user=user, rcvbuf=64 * 1024)
        c.line(), c.line()
        c.send(b"t SEND %d 3\r\n" % total)
        clients.append((user, c, b))
    for _, _, b in clients:
        stalled(lambda b=b: b.sent)
    for user, _, _ in clients:
        kick(fleet, user)
    for user, c, b in clients:
        data = c.rest(10)
        assert data.startswith(b"* SEND %d\r\n" % total), user
        assert b"* BYE [UNAVAILABLE] Disconnected: " in data[-200:], (user, data[-200:])
        assert b.eof.wait(5)
        c.close()
    wait_for(lambda: fleet.sessions() == 0, timeout=20, what="every session gone")
    wait_for(lambda: proxy_fds(fleet) <= base, what=f"descriptors back to {base}")


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_idle_relayed_sessions_cost_no_cpu(fleet):
    """Sessions that moved data (each side's queue filled and emptied) and
    now wait: the proxy sleeps (no event left armed on an empty queue)."""
    clients = []
    for i, kind in enumerate(KINDS * 2):
        c, b = connect(fleet, kind, user="u%d" % (20 + i), rcvbuf=64 * 1024)
        c.line(), c.line()
        c.send(b"t SEND %d 2\r\n" % (8 << 20))
        stalled(lambda: b.sent, polls=2)
        assert c.line() == b"* SEND %d\r\n" % (8 << 20)
        c.exact(8 << 20)
        assert c.line() == b"t OK\r\n"
        c.send(b"e ECHO %d\r\n" % (1 << 20) + pattern(1 << 20, 4))
        assert c.line() == b"* ECHO %d\r\n" % (1 << 20)
        c.exact(1 << 20)
        assert c.line() == b"e OK\r\n"
        clients.append(c)
    before = cpu_seconds(fleet.proxy.pid)
    time.sleep(1.0)  # the measured interval, not a synchronisation
    used = cpu_seconds(fleet.proxy.pid) - before
    assert used < 0.15, f"the idle proxy used {used:.2f} s of CPU in 1 s"
    for c in clients:
        c.close()
    wait_for(lambda: fleet.sessions() == 0, what="the sessions gone")


def test_a_client_sending_on_after_its_session_ended_is_closed(fleet):
    """The relay's lingering close reads what a client still sends after the
    end (so that its last bytes are not lost to a reset), but for a bounded
    time: a client that keeps sending does not keep its connection (its
    sends fail once the proxy has closed it)."""
    c, _ = connect(fleet, "plain")
    c.line(), c.line()
    c.send(b"z LOGOUT\r\n")
    assert c.line() == b"* BYE bye\r\n"
    start = time.monotonic()
    c.sock.settimeout(1)
    closed = None
    while time.monotonic() < start + 6:
        try:
            c.sock.send(b"x" * 4096)
        except OSError:
            closed = time.monotonic() - start
            break
        time.sleep(0.005)
    assert closed is not None and closed < 3.5, closed
    c.close()


@pytest.mark.parametrize("kind", ["plain", "tls"])
def test_a_backend_killed_mid_transfer_ends_the_session(fleet, kind):
    """kill -9 of the backend process in the middle of a 64 MB transfer to
    a client that reads slowly: the client gets an unbroken prefix of it,
    then EOF; the session ends."""
    total = 64 << 20
    mark = len(fleet.proxy.stderr())
    c, _ = connect(fleet, kind, user="k0", rcvbuf=64 * 1024)
    c.send(b"t SEND %d 21\r\n" % total)
    head = c.line()
    assert head == b"* SEND %d\r\n" % total, head
    first = c.exact(1 << 20)
    fleet.doomed.kill()  # SIGKILL
    fleet.doomed.wait()
    body = first + c.rest(10)
    assert 0 < len(body) < total
    assert body == pattern(total, 21)[:len(body)]
    wait_for(lambda: ended_logged(fleet, mark, "backend_error")
             or ended_logged(fleet, mark, "backend_closed"), what="the backend's end")
    wait_for(lambda: fleet.sessions() == 0, what="the session gone")
    c.close()
    # the next one for the "plain" run's successor
    fleet.doomed = subprocess.Popen([sys.executable, "-c", DOOMED_BACKEND.replace(
        'srv.bind(("127.0.0.2", 0))', f'srv.bind(("127.0.0.2", {fleet.doomed_port}))')],
        stdout=subprocess.PIPE)
    assert int(fleet.doomed.stdout.readline()) == fleet.doomed_port
