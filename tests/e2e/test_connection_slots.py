"""Per-address connection slots come back on every way a connection ends
(issue 19, item 5 review): a slot counted at accept and not given back on
some close path (a failed TLS handshake, STARTTLS, a parse error, a
timeout, a server-side close) would lock an address out for good once it
has ended `max_connections_per_ip` connections that way.

Each test sets a cap of 3 for 127.0.0.1, ends one more than that many
connections one way, and checks after each that 127.0.0.1 is still served.
The cap leaves room for the two closes the server may not have seen yet
when the next connection arrives (the previous one and the check's).
"""

import socket
import ssl
import time

from conftest import free_port, wait_for
from test_connection_limits import auth_config, closed_by_server, connect_from, imap_config

CAP = 3
ROUNDS = CAP + 1  # a slot lost per close has locked the address out by then


def answered(addr, request, expect):
    """Connects from 127.0.0.1, sends `request` (b"" for none) and says
    whether the first line back starts with `expect`; False when refused or
    cut off (the per-address BYE, a closed slot)."""
    try:
        s = connect_from("127.0.0.1", addr, timeout=5)
    except OSError:
        return False
    try:
        if request:
            s.sendall(request)
        return s.makefile("rb").readline().startswith(expect)
    except OSError:
        return False
    finally:
        s.close()


def drain_and_close(s, data=b""):
    """Sends `data`, reads until the server closes (or the read fails),
    then closes."""
    try:
        if data:
            s.sendall(data)
        while s.recv(4096):
            pass
    except OSError:
        pass
    s.close()


def served_imap(addr):
    """127.0.0.1 gets a greeting (not the per-address BYE)."""
    return answered(addr, b"", b"* OK")


def wait_served(check, addr, what):
    # Counts are given back when the server sees the close: wait for that.
    wait_for(lambda: check(addr), timeout=10, what=what)


def tls_garbage(addr):
    """Connects and sends bytes that are no TLS ClientHello."""
    drain_and_close(connect_from("127.0.0.1", addr, timeout=5), b"GET / HTTP/1.0\r\n\r\n" * 4)


def test_imap_slots_come_back_on_every_close_path(petreld, tmp_path, pki):
    d = petreld(imap_config(tmp_path, {
        "max_connections_per_ip": CAP,
        "listen_tls": [f"127.0.0.1:{free_port()}"],
        "tls_cert_file": str(pki / "server.pem"), "tls_key_file": str(pki / "server.key"),
        "login_timeout": "1s"}))
    plain = d.config["imap"]["listen"][0]
    tls_addr = d.config["imap"]["listen_tls"][0]
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))

    def close_after_greeting():
        s = connect_from("127.0.0.1", plain)
        s.makefile("rb").readline()
        s.close()

    def logout():
        s = connect_from("127.0.0.1", plain)
        f = s.makefile("rb")
        f.readline()
        s.sendall(b"a LOGOUT\r\n")
        while f.readline():
            pass
        s.close()

    def failed_login_then_reset():
        s = connect_from("127.0.0.1", plain)
        f = s.makefile("rb")
        f.readline()
        s.sendall(b"a LOGIN alice wrong\r\n")
        f.readline()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()  # RST

    def starttls_garbage():
        s = connect_from("127.0.0.1", plain)
        f = s.makefile("rb")
        f.readline()
        s.sendall(b"a STARTTLS\r\n")
        f.readline()
        drain_and_close(s, b"\x16\x03\x01\x00\x05hello" * 8)

    def tls_bad_handshake():
        tls_garbage(tls_addr)

    def tls_close_mid_handshake():
        s = connect_from("127.0.0.1", tls_addr)
        s.close()

    def tls_logged_in_logout():
        raw = connect_from("127.0.0.1", tls_addr)
        s = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        f = s.makefile("rb")
        f.readline()
        s.sendall(b"a LOGIN alice wonderland\r\n")
        f.readline()
        s.close()

    def login_timeout():
        s = connect_from("127.0.0.1", plain)
        f = s.makefile("rb")
        f.readline()
        s.settimeout(10)
        while f.readline():  # until the server gives up on us
            pass
        s.close()

    paths = [close_after_greeting, logout, failed_login_then_reset, starttls_garbage,
             tls_bad_handshake, tls_close_mid_handshake, tls_logged_in_logout]
    for path in paths:
        for _ in range(ROUNDS):
            path()
            wait_served(served_imap, plain, f"a slot for 127.0.0.1 after {path.__name__}")
    # Two at a time time out (the login timeout is the server's own close).
    for _ in range(CAP):
        login_timeout()
    wait_served(served_imap, plain, "a slot for 127.0.0.1 after login timeouts")


def served_http(addr):
    return answered(addr, b"GET /api/backend/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                    b"HTTP/1.1 200")


def test_http_slots_come_back_on_every_close_path(petreld):
    d = petreld({"backend_api": {"max_connections_per_ip": CAP,
                                 "allowed_nets": ["127.0.0.1/32", "127.0.0.2/32"]}})
    api = d.backend

    def bad_request():
        drain_and_close(connect_from("127.0.0.1", api), b"GARBAGE\r\n\r\n")

    def reset_mid_body():
        s = connect_from("127.0.0.1", api)
        s.sendall(b"POST /api/backend/mail/append?user=a&folder=INBOX HTTP/1.1\r\n"
                  b"Host: x\r\nContent-Length: 100000\r\n\r\nxxxx")
        time.sleep(0.05)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()

    def keep_alive_then_close():
        s = connect_from("127.0.0.1", api)
        s.sendall(b"GET /api/backend/health HTTP/1.1\r\nHost: x\r\n\r\n")
        s.recv(4096)
        s.close()

    for path in (bad_request, reset_mid_body, keep_alive_then_close):
        for _ in range(ROUNDS):
            path()
            wait_served(served_http, api, f"a slot for 127.0.0.1 after {path.__name__}")


def served_auth(addr):
    return answered(addr, b"VERIFY\t1\talice\twonderland\tservice=imap\n", b"OK")


def test_auth_slots_come_back_on_every_close_path(petreld, tmp_path):
    d = petreld(auth_config(tmp_path, {"max_connections_per_ip": CAP,
                                       "handshake_timeout": "300ms",
                                       "max_connections": 4}))
    addr = d.config["auth"]["listen"][0]
    assert served_auth(addr)

    def line_too_long():
        drain_and_close(connect_from("127.0.0.1", addr), b"x" * 200000)

    def handshake_timeout():
        s = connect_from("127.0.0.1", addr)
        s.settimeout(5)
        drain_and_close(s)

    for path in (line_too_long, handshake_timeout):
        for _ in range(ROUNDS):
            path()
            wait_served(served_auth, addr, f"a slot for 127.0.0.1 after {path.__name__}")


def test_auth_slot_comes_back_when_making_room(petreld, tmp_path):
    d = petreld(auth_config(tmp_path, {"max_connections_per_ip": CAP, "max_connections": 2 * CAP}))
    addr = d.config["auth"]["listen"][0]
    # Full: CAP idle connections from each of two addresses.
    held = [(src, connect_from(src, addr)) for src in ("127.0.0.2", "127.0.0.3")
            for _ in range(CAP)]
    src = "127.0.0.1"
    try:
        for _ in range(ROUNDS):
            # A newcomer makes room: the oldest connection without a request
            # is closed by the server, and its address's slot is free again,
            # so the next newcomer comes from that address (at its cap
            # otherwise) and is admitted.
            victim_src, victim = held.pop(0)
            s = connect_from(src, addr)
            held.append((src, s))
            assert closed_by_server(victim, timeout=5)
            victim.close()
            assert not closed_by_server(s, timeout=0.3), f"{src} refused"
            src = victim_src
    finally:
        for _, s in held:
            s.close()


def test_imap_slot_comes_back_when_refused_at_max_connections(petreld, tmp_path):
    # A connection refused because the server is full was counted for its
    # address at accept: the count must go back with it.
    d = petreld(imap_config(tmp_path, {"max_connections_per_ip": CAP, "max_connections": 2}))
    addr = d.config["imap"]["listen"][0]
    held = [connect_from("127.0.0.2", addr) for _ in range(2)]
    try:
        for s in held:
            assert s.makefile("rb").readline().startswith(b"* OK")
        for _ in range(ROUNDS):
            s = connect_from("127.0.0.1", addr)
            line = s.makefile("rb").readline()
            s.close()
            assert line.startswith(b"* BYE") and b"from your address" not in line, line
    finally:
        for s in held:
            s.close()
    wait_served(served_imap, addr, "a slot for 127.0.0.1 once the server has room")


def test_auth_slot_comes_back_when_refused_at_max_connections(petreld, tmp_path):
    # Full of clients that have sent a request (none to close for room):
    # newcomers are refused, and their per-address counts go back.
    d = petreld(auth_config(tmp_path, {"max_connections_per_ip": CAP, "max_connections": 2}))
    addr = d.config["auth"]["listen"][0]
    held = []
    try:
        for _ in range(2):
            s = connect_from("127.0.0.2", addr)
            s.sendall(b"VERIFY\t1\talice\twonderland\tservice=imap\n")
            assert s.makefile("rb").readline().startswith(b"OK")
            held.append(s)
        for _ in range(ROUNDS):
            s = connect_from("127.0.0.1", addr)
            assert closed_by_server(s, timeout=5)
            s.close()
    finally:
        for s in held:
            s.close()
    wait_served(served_auth, addr, "a slot for 127.0.0.1 once the server has room")


def test_imap_tls_port_over_the_cap_closes_without_plain_text(petreld, tmp_path, pki):
    # A client on the implicit-TLS port expects a ServerHello: the refusal
    # is a close, not a plain-text BYE its TLS library reports as a
    # protocol error ("wrong version number").
    d = petreld(imap_config(tmp_path, {
        "max_connections_per_ip": 1, "listen_tls": [f"127.0.0.1:{free_port()}"],
        "tls_cert_file": str(pki / "server.pem"), "tls_key_file": str(pki / "server.key")}))
    tls_addr = d.config["imap"]["listen_tls"][0]
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    first = ctx.wrap_socket(connect_from("127.0.0.1", tls_addr), server_hostname="127.0.0.1")
    try:
        assert first.recv(64).startswith(b"* OK")
        raw = connect_from("127.0.0.1", tls_addr)
        raw.settimeout(5)
        assert raw.recv(64) == b""  # closed, nothing written
        raw.close()
    finally:
        first.close()
