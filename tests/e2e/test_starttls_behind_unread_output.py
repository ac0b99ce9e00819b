"""STARTTLS (IMAP, LMTP) and STLS (POP3) whose go-ahead cannot leave at
once: the client pipelined commands whose answers it does not read, so the
server's socket is full when it queues the go-ahead. tls_conn_starttls()
then puts the TLS layer on as a filter over the clear-text bufferevent
(which sends the unread answers and the go-ahead first) instead of on the
socket. On that path too, the commands the client pipelined in clear text
behind STARTTLS are thrown away (RFC 3207 5, CVE-2011-0411), the answers
before the go-ahead all arrive in order, and the TLS session works.

The client's receive buffer is small and it reads nothing until the server
stands still, so the answers ahead of the go-ahead (about 150 KB for IMAP
and POP3, 48 KB for LMTP, each under the server's own output bound, so
that the command after them is still read at once) are more than the two
sockets hold."""

import fcntl
import socket
import ssl
import struct
import termios

from conftest import wait_steady
from test_imap_session import imap_overrides
from test_imap_session import addr as imap_addr
from test_lmtp import lmtp_overrides
from test_lmtp import addr as lmtp_addr
from test_pop3 import pop3_overrides
from test_pop3 import addr as pop3_addr


def tls_context(pki):
    return ssl.create_default_context(cafile=str(pki / "ca.pem"))


def unread(sock):
    buf = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
    return struct.unpack("i", buf)[0]


def still(sock):
    """Waits until what the client has not read stands still: the server
    has answered all it could and waits for the client."""
    wait_steady(lambda: unread(sock), 4, timeout=20, what="the server waiting for the client")


def small_client(target):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    # Loopback's 64 KiB segments would let the server's send buffer grow
    # past a megabyte (Linux sizes it on about ten segments): small
    # segments keep it, and so what the two sockets hold, small.
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 536)
    s.settimeout(20)
    s.connect(target)
    return s, s.makefile("rb")


def test_imap_starttls_behind_unread_answers(petreld, tmp_path, pki):
    d = petreld(imap_overrides(tmp_path, pki))
    s, f = small_client(imap_addr(d))
    assert f.readline().startswith(b"* OK")
    s.sendall(b"c0 CAPABILITY\r\n")
    one = f.readline() + f.readline()
    assert one.endswith(b"c0 OK Capability completed.\r\n"), one
    n = 150 * 1024 // len(one)
    s.sendall(b"".join(b"c%04d CAPABILITY\r\n" % i for i in range(1, n + 1)) +
              b"s STARTTLS\r\nx LOGIN alice wonderland\r\nx2 NOOP\r\n")
    still(s)
    for i in range(1, n + 1):
        assert f.readline().startswith(b"* CAPABILITY")
        assert f.readline() == b"c%04d OK Capability completed.\r\n" % i
    assert f.readline().startswith(b"s OK")
    tls = tls_context(pki).wrap_socket(s, server_hostname="127.0.0.1")
    tf = tls.makefile("rb")
    tls.sendall(b"c NOOP\r\n")
    line = tf.readline()
    assert line.startswith(b"c OK"), line  # no answer to x or x2 came first
    tls.sendall(b"d LOGIN alice wonderland\r\n")
    line = tf.readline()
    while not line.startswith(b"d "):
        line = tf.readline()
    assert line.startswith(b"d OK"), line
    tls.close()


def capa_answer(f):
    got = b""
    while not got.endswith(b"\r\n.\r\n"):
        line = f.readline()
        assert line, f"EOF after {got!r}"
        got += line
    return got


def test_pop3_stls_behind_unread_answers(petreld, tmp_path, pki):
    d = petreld(pop3_overrides(tmp_path, pki))
    s, f = small_client(pop3_addr(d))
    assert f.readline().startswith(b"+OK")
    s.sendall(b"CAPA\r\n")
    one = capa_answer(f)
    n = 150 * 1024 // len(one)
    s.sendall(b"CAPA\r\n" * n + b"STLS\r\nUSER alice\r\n")
    still(s)
    for _ in range(n):
        assert capa_answer(f) == one
    assert f.readline().startswith(b"+OK")
    tls = tls_context(pki).wrap_socket(s, server_hostname="127.0.0.1")
    tf = tls.makefile("rb")
    tls.sendall(b"PASS wonderland\r\n")
    # USER came in clear text behind STLS: it did not count.
    assert tf.readline().startswith(b"-ERR Send USER first")
    tls.close()


def test_lmtp_starttls_behind_unread_answers(petreld, tmp_path, pki):
    d = petreld(lmtp_overrides(tmp_path, {"tls_cert_file": str(pki / "server.pem"),
                                          "tls_key_file": str(pki / "server.key")}, pop3=False))
    s, f = small_client(lmtp_addr(d))
    assert f.readline().startswith(b"220 ")
    s.sendall(b"LHLO x\r\n")
    while f.readline()[3:4] == b"-":
        pass
    s.sendall(b"NOOP\r\n")
    one = f.readline()
    assert one.startswith(b"250 ")
    n = 48 * 1024 // len(one)
    s.sendall(b"NOOP\r\n" * n + b"STARTTLS\r\nLHLO injected\r\n")
    still(s)
    for _ in range(n):
        assert f.readline() == one
    assert f.readline().startswith(b"220 ")
    tls = tls_context(pki).wrap_socket(s, server_hostname="127.0.0.1")
    tf = tls.makefile("rb")
    tls.sendall(b"MAIL FROM:<a@b.c>\r\n")
    assert tf.readline().startswith(b"503 5.5.1")  # LHLO again first: "LHLO injected" did not count
    tls.sendall(b"LHLO y\r\n")
    lines = [tf.readline()]
    while lines[-1][3:4] == b"-":
        lines.append(tf.readline())
    assert lines[-1].startswith(b"250 "), lines
    tls.close()
