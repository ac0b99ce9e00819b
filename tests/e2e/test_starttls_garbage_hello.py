"""After STARTTLS (IMAP, LMTP) or STLS (POP3), a client that sends garbage
instead of a ClientHello, or closes, or resets in the middle of its
handshake: the server closes the connection at once (no wait for a
timeout), and once the sessions are gone the daemon holds as many
descriptors as before. tls_conn_starttls() frees the clear-text
bufferevent and puts TLS on the socket itself when the go-ahead leaves at
once: neither the descriptor nor either bufferevent may be lost or closed
twice on any of these ends."""

import os
import socket
import ssl
import struct
import time

import pytest

from conftest import wait_for, wait_steady
from test_imap_session import imap_overrides
from test_imap_session import addr as imap_addr
from test_lmtp import lmtp_overrides
from test_lmtp import addr as lmtp_addr
from test_pop3 import pop3_overrides
from test_pop3 import addr as pop3_addr


def fds(d):
    return len(os.listdir(f"/proc/{d.proc.pid}/fd"))


def imap(petreld, tmp_path, pki):
    d = petreld(imap_overrides(tmp_path, pki))
    return d, imap_addr(d), b"* OK", b"s STARTTLS\r\n", b"s OK"


def pop3(petreld, tmp_path, pki):
    d = petreld(pop3_overrides(tmp_path, pki))
    return d, pop3_addr(d), b"+OK", b"STLS\r\n", b"+OK"


def lmtp(petreld, tmp_path, pki):
    d = petreld(lmtp_overrides(tmp_path, {"tls_cert_file": str(pki / "server.pem"),
                                          "tls_key_file": str(pki / "server.key")}, pop3=False))
    return d, lmtp_addr(d), b"220 ", b"LHLO x\r\nSTARTTLS\r\n", b"220 "


def go_ahead(target, greeting, command, ok):
    s = socket.create_connection(target, timeout=10)
    f = s.makefile("rb")
    assert f.readline().startswith(greeting)
    s.sendall(command)
    line = f.readline()
    while not line.startswith(ok):  # LHLO's answer first
        assert line, "EOF before the go-ahead"
        line = f.readline()
    return s


def closed_soon(s):
    """The server closed: EOF (or a reset) within two seconds."""
    s.settimeout(2)
    start = time.monotonic()
    try:
        while s.recv(4096):
            pass
    except ConnectionResetError:
        pass
    return time.monotonic() - start < 2


@pytest.mark.parametrize("proto", [imap, pop3, lmtp], ids=["imap", "pop3", "lmtp"])
def test_garbage_close_or_reset_in_the_handshake_leaves_nothing(petreld, tmp_path, pki, proto):
    d, target, greeting, command, ok = proto(petreld, tmp_path, pki)
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    # Warm-up: a whole STARTTLS session, so that lazily made state is there.
    s = go_ahead(target, greeting, command, ok)
    ctx.wrap_socket(s, server_hostname="127.0.0.1").close()
    # The warm-up session is gone once its descriptor is: the count stands.
    base = wait_steady(lambda: fds(d), 5, timeout=10, what="the descriptor count standing still")
    for i in range(30):
        s = go_ahead(target, greeting, command, ok)
        way = i % 3
        if way == 0:  # not a TLS record: the handshake fails at once
            s.sendall(b"GET / HTTP/1.0\r\n\r\n" + b"\x00" * 600)
            assert closed_soon(s), "no close after a garbage ClientHello"
        elif way == 1:  # half a ClientHello, then a close
            s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
            s.close()
            continue
        else:  # a reset in the middle of the handshake
            s.sendall(b"\x16\x03\x01\x02\x00")
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    wait_for(lambda: fds(d) <= base, timeout=15, what=f"descriptors back to {base}")
