"""A client that pipelines many small commands and stops reading, then
reads again (mail-session-io's input bound, IMAP and POP3, before and
after login): petreld's memory stays bounded (VmRSS from /proc, with a
margin) while the client reads nothing, and once it reads again every
command is answered, in order, without the connection stalling. Raw
sockets: the only client that can pipeline this way."""

import os
import socket
import threading
import time

import pytest

from test_imap_backpressure import status_kb
from test_imap_session import imap_overrides
from test_pop3 import pop3_overrides

BOUND_KB = 10 * 1024  # extra VmRSS allowed while the client reads nothing
COMMANDS = 1000000    # far more than the socket buffers hold (only what is sent is answered)
# Answers read once the client reads again: more than petreld's output
# bound and the socket buffers held when it stopped (~4 MB, ~300 bytes an
# IMAP answer), so petreld must have gone back to reading its input.
RESUMED = 40000


def endpoint(d, section):
    host, port = d.config[section]["listen"][0].rsplit(":", 1)
    return host, int(port)


# (protocol, state): the commands to pipeline, and how a reply's last line
# is told apart. IMAP's CAPABILITY answer is ~15 times its command; POP3's
# CAPA ~10 times.
CASES = {
    ("imap", "prelogin"): (b"", lambda i: b"c%07d CAPABILITY\r\n" % i),
    ("imap", "selected"): (b"l LOGIN alice wonderland\r\ns SELECT INBOX\r\n",
                           lambda i: b"c%07d CAPABILITY\r\n" % i),
    ("pop3", "prelogin"): (b"", lambda i: b"CAPA\r\n"),
    ("pop3", "transaction"): (b"USER alice\r\nPASS wonderland\r\n", lambda i: b"CAPA\r\n"),
}


@pytest.mark.parametrize("proto,state", list(CASES))
def test_pipelined_unread_then_resumed(petreld, tmp_path, proto, state):
    asan = os.environ.get("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=1")
    env = {"ASAN_OPTIONS": asan + ":quarantine_size_mb=1"}
    if proto == "imap":
        d = petreld(imap_overrides(tmp_path), env=env)
    else:
        d = petreld(pop3_overrides(tmp_path, imap=False), env=env)
    pid = d.pid
    prologue, command = CASES[(proto, state)]
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(20)
    s.connect(endpoint(d, proto))
    f = s.makefile("rb")
    assert f.readline()[:3] in (b"* O", b"+OK")
    if prologue:
        s.sendall(prologue)
        want = prologue.count(b"\r\n")
        got = 0
        while got < want:  # the login's replies, read before the attack
            line = f.readline()
            assert line, "closed during login"
            if (proto == "imap" and line[:2] in (b"l ", b"s ")) or \
                    (proto == "pop3" and line[:1] in (b"+", b"-")):
                assert line.startswith((b"l OK", b"s OK", b"+OK")), line
                got += 1
    size = len(command(0))  # every command has the same length
    payload = b"".join(command(i) for i in range(COMMANDS))
    base = status_kb(pid, "VmRSS")
    peak = base
    s.setblocking(False)
    sent = 0
    deadline = time.monotonic() + 2
    stalled_since = None
    while sent < len(payload) and time.monotonic() < deadline:
        try:
            sent += s.send(payload[sent:sent + 65536])
            stalled_since = None
        except BlockingIOError:
            stalled_since = stalled_since or time.monotonic()
            if time.monotonic() - stalled_since > 0.5:
                break  # TCP pushes back: petreld stopped reading
            time.sleep(0.05)
        peak = max(peak, status_kb(pid, "VmRSS"))
        if peak - base > BOUND_KB:
            break
    assert peak - base <= BOUND_KB, (
        f"{proto}/{state}: VmRSS grew by {peak - base} kB after {sent} unread bytes")
    assert sent < len(payload), "petreld read everything: the attack did not build up"
    # The client reads again: the commands are answered in order, past what
    # was waiting when petreld stopped reading; nothing stalls.
    s.settimeout(30)
    answered = []

    def reader(expected):
        n = 0
        for line in f:
            if proto == "imap" and line.startswith(b"c") and b" OK " in line:
                if int(line[1:8]) != n:  # in order, none left out
                    break
                n += 1
            elif proto == "pop3" and line.startswith(b"+OK"):
                n += 1
            if n == expected:
                break
        answered.append(n)

    expected = (sent + size - 1) // size  # a command sent in part is completed
    assert expected > RESUMED, expected
    print(f"{proto}/{state}: {sent} bytes unread, VmRSS +{peak - base} kB")
    t = threading.Thread(target=reader, args=(RESUMED,))
    t.start()
    s.setblocking(True)
    s.settimeout(30)

    def finish_partial():  # the command cut in two, sent whole
        try:
            s.sendall(payload[sent:expected * size])
        except OSError:
            pass  # closed below once enough was answered

    w = threading.Thread(target=finish_partial)
    w.start()
    t.join(60)
    assert not t.is_alive(), "petreld stalled once the client read again"
    assert answered == [RESUMED], answered
    s.shutdown(socket.SHUT_RDWR)
    s.close()
    w.join(30)
