"""Behaviour the connection toolkit in net/ made uniform across servers.

A TLS handshake has a deadline that input does not push back
(net/tls-conn.h). A client that says STARTTLS to the LMTP server and then
sends its ClientHello one byte at a time used to keep the session for as
long as it liked: lmtp.command_timeout is an idle timeout, restarted by
every byte. Now the session is closed once the handshake has taken
min(10 s, command_timeout). Real petreld, raw socket, real TLS (the
handshake that finishes in time is Python's ssl)."""

import select
import socket
import ssl
import time

from authproto import AuthConn
from conftest import free_port
from test_auth import auth_overrides
from test_lmtp import Raw, addr, lmtp_overrides

TIMEOUT = 2.0  # lmtp.command_timeout: the handshake bound below 10 s
TRICKLE = 0.4  # seconds between bytes: well inside the idle timeout


def closed(sock):
    r, _, _ = select.select([sock], [], [], 0)
    if not r:
        return False
    try:
        return sock.recv(4096, socket.MSG_PEEK) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True


def test_lmtp_starttls_trickled_handshake_is_cut_off(petreld, tmp_path, pki):
    d = petreld(lmtp_overrides(tmp_path, {"tls_cert_file": str(pki / "server.pem"),
                                          "tls_key_file": str(pki / "server.key"),
                                          "command_timeout": "2s"}, pop3=False))
    r = Raw(addr(d))
    r.reply()
    r.send(b"LHLO x\r\n")
    r.reply()
    r.send(b"STARTTLS\r\n")
    assert r.reply()[0].startswith(b"220 2.0.0")
    # A handshake record announcing 512 bytes, then a byte at a time.
    t0 = time.monotonic()
    r.send(b"\x16\x03\x01\x02\x00")
    gone_after = None
    while time.monotonic() - t0 < 3 * TIMEOUT:
        time.sleep(TRICKLE)
        if closed(r.s):
            gone_after = time.monotonic() - t0
            break
        try:
            r.send(b"\x01")
        except (BrokenPipeError, ConnectionResetError):
            gone_after = time.monotonic() - t0
            break
    assert gone_after is not None, "the trickled handshake kept the session past 3x the bound"
    assert gone_after < TIMEOUT + 1.5, gone_after
    # A client that completes its handshake in time is served as before.
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    r = Raw(addr(d))
    r.reply()
    r.send(b"STARTTLS\r\n")
    assert r.reply()[0].startswith(b"220 2.0.0")
    tls = ctx.wrap_socket(r.s, server_hostname="127.0.0.1")
    f = tls.makefile("rb")
    # Past the handshake bound (while never idle for command_timeout).
    for pause in (1.0, 1.5):
        time.sleep(pause)
        tls.sendall(b"NOOP\r\n")
        assert f.readline() == b"250 2.0.0 OK\r\n"
    tls.close()


def test_line_service_unix_socket_directory_is_created(petreld, tmp_path):
    """The listener set creates a missing directory of a Unix socket for
    every server, as LMTP alone did: auth on unix:<tmp>/run/petrel/auth.sock
    starts (it failed with "cannot listen" before) and the socket has
    auth.socket_mode."""
    sock = tmp_path / "run" / "petrel" / "auth.sock"
    petreld(auth_overrides(tmp_path, "plain:{PLAIN}pw\n",
                           {"listen": [f"unix:{sock}", f"127.0.0.1:{free_port()}"]}))
    assert oct(sock.stat().st_mode & 0o777) == oct(0o660)
    with AuthConn(f"unix:{sock}") as c:
        assert c.verify("plain", "pw")[0] == "OK"
