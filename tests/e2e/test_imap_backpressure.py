"""IMAP output back-pressure (issue 19, item 1): a client that pipelines
many FETCHes of large messages and never reads holds a bounded amount of
petreld's memory; its work stops once it disconnects; a client that never
reads is closed after the idle timeout; and large FETCHes still return
byte-exact bodies to clients that do read, over plain, implicit TLS and
STARTTLS. Clients: raw sockets (small SO_RCVBUF) and imaplib."""

import imaplib
import os
import socket
import ssl
import time

import pytest

from test_imap_session import imap_overrides, addr, login

MESSAGES = 10
MESSAGE_SIZE = 1024 * 1024
PIPELINED = 100         # 100 x FETCH 1:* of 10 MB: a 1 GB answer
RSS_BOUND_KB = 64 * 1024  # extra VmRSS allowed during the attack
SMALL_BOUND_KB = 10 * 1024  # the same for pipelined small commands (today: ~3 MB)


def status_kb(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise AssertionError(f"{key} not in /proc/{pid}/status")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def message(i, size=MESSAGE_SIZE):
    head = (f"From: sender{i}@example.org\r\nTo: alice@example.org\r\n"
            f"Subject: big {i}\r\nMessage-ID: <big{i}@example.org>\r\n\r\n").encode()
    line = f"{i:04d} " + "abcdefghijklmnopqrstuvwxyz0123456789" * 2 + "\r\n"
    body = (line.encode() * (size // len(line) + 1))[:size - len(head) - 2] + b"\r\n"
    return head + body


def populate(d, count=MESSAGES, size=MESSAGE_SIZE):
    m = login(d)
    msgs = [message(i, size) for i in range(count)]
    for msg in msgs:
        typ, data = m.append("INBOX", None, None, msg)
        assert typ == "OK", data
    m.logout()
    return msgs


@pytest.fixture
def imapd(petreld, tmp_path, pki):
    return petreld(imap_overrides(tmp_path, pki))


def client_context():
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def read_until_tagged(f, tag):
    lines = []
    while True:
        line = f.readline()
        assert line, f"connection closed before {tag!r}: {lines!r}"
        lines.append(line)
        if line.startswith(tag + b" "):
            assert line.startswith(tag + b" OK"), lines
            return lines


def slow_client(d, mode):
    """A logged-in raw client with a tiny receive buffer, INBOX selected."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(10)
    s.connect(addr(d, "listen_tls" if mode == "tls" else "listen"))
    if mode == "tls":
        s = client_context().wrap_socket(s)
    f = s.makefile("rb")
    assert f.readline().startswith(b"* OK")
    if mode == "starttls":
        s.sendall(b"t0 STARTTLS\r\n")
        read_until_tagged(f, b"t0")
        s = client_context().wrap_socket(s)
        f = s.makefile("rb")
    s.sendall(b"t1 LOGIN alice wonderland\r\n")
    read_until_tagged(f, b"t1")
    s.sendall(b"t2 SELECT INBOX\r\n")
    read_until_tagged(f, b"t2")
    return s, f


def reset(s):
    """Disconnect with a RST, as a client that goes away does."""
    import struct
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def wait_for(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def fetch_all_and_check(m, msgs):
    typ, data = m.fetch("1:*", "(RFC822.SIZE BODY.PEEK[])")
    assert typ == "OK", data
    bodies = [part[1] for part in data if isinstance(part, tuple)]
    assert len(bodies) == len(msgs)
    for got, want in zip(bodies, msgs):
        assert got == want


@pytest.mark.parametrize("mode", ["plain", "tls", "starttls"])
def test_pipelined_fetch_without_reading_is_bounded(imapd, mode):
    msgs = populate(imapd)
    pid = imapd.pid
    s, f = slow_client(imapd, mode)
    # Let the server settle after the uploads, then take the baseline.
    time.sleep(0.3)
    base = status_kb(pid, "VmRSS")
    s.sendall(b"".join(b"f%d FETCH 1:* BODY.PEEK[]\r\n" % i for i in range(PIPELINED)))
    peak = base
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        peak = max(peak, status_kb(pid, "VmRSS"))
        if peak - base > RSS_BOUND_KB:
            break  # failed: do not let an unbounded server eat the machine
        time.sleep(0.1)
    f.close()  # the socket's descriptor is shared with the file: reset() closes it
    reset(s)
    assert peak - base <= RSS_BOUND_KB, (
        f"VmRSS grew by {peak - base} kB (bound {RSS_BOUND_KB} kB) while a client "
        f"pipelined {PIPELINED} FETCHes of {MESSAGES} x 1 MB and read nothing")

    # Once the client is gone its work stops: the CPU goes quiet.
    def idle():
        before = cpu_seconds(pid)
        time.sleep(0.5)
        return cpu_seconds(pid) - before < 0.1
    wait_for(idle, 10, "petreld to stop working for the disconnected client")
    assert status_kb(pid, "VmRSS") - base <= RSS_BOUND_KB

    # Another client is served normally, byte-exact.
    if mode == "plain":
        m = login(imapd)
    else:
        m = imaplib.IMAP4_SSL(*addr(imapd, "listen_tls"), ssl_context=client_context())
        m.login("alice", "wonderland")
    m.select("INBOX", readonly=True)
    fetch_all_and_check(m, msgs)
    m.logout()


@pytest.mark.parametrize("mode", ["plain", "tls"])
def test_client_that_never_reads_is_closed_after_idle_timeout(petreld, tmp_path, pki, mode):
    d = petreld(imap_overrides(tmp_path, pki, extra={"idle_timeout": "2s"}))
    populate(d, count=4)
    s, f = slow_client(d, mode)
    s.sendall(b"".join(b"f%d FETCH 1:* BODY.PEEK[]\r\n" % i for i in range(50)))
    # The session is dropped once the output made no progress for the
    # timeout; then what was in flight is read: the stream must end (EOF)
    # long before the 200 MB answer.
    # The client keeps sending a byte now and then, which must not restart
    # the clock.
    def dropped():
        try:
            s.send(b"x")
        except OSError:
            pass
        return "the client reads nothing" in d.stderr()
    wait_for(dropped, 20, "petreld to drop the session that reads nothing")
    s.settimeout(10)
    got = 0
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(1 << 20)
        except (ConnectionResetError, ssl.SSLError):
            break  # closed with our unread bytes in its buffer: a RST
        if not chunk:
            break
        got += len(chunk)
    else:
        raise AssertionError(f"still sending after {got} bytes: no timeout on the output")
    assert got < 50 * 4 * MESSAGE_SIZE // 10, got
    s.close()
    m = login(d)  # the server itself is fine
    m.logout()


@pytest.mark.parametrize("mode", ["plain", "tls", "starttls"])
def test_large_fetch_byte_exact(imapd, mode):
    # Mixed sizes around the streaming threshold (64 KiB), read normally.
    sizes = [1000, 64 * 1024 - 1, 64 * 1024, 300 * 1024, 2 * MESSAGE_SIZE + 7]
    m = login(imapd)
    msgs = []
    for i, size in enumerate(sizes):
        msg = message(i, size)
        msgs.append(msg)
        typ, data = m.append("INBOX", None, None, msg)
        assert typ == "OK", data
    m.logout()
    for _ in range(2):  # the second round takes the sendfile path on plain
        if mode == "plain":
            m = login(imapd)
        elif mode == "tls":
            m = imaplib.IMAP4_SSL(*addr(imapd, "listen_tls"), ssl_context=client_context())
            m.login("alice", "wonderland")
        else:
            m = imaplib.IMAP4(*addr(imapd))
            m.starttls(ssl_context=client_context())
            m.login("alice", "wonderland")
        m.select("INBOX")
        fetch_all_and_check(m, msgs)
        typ, data = m.fetch("4", "(BODY.PEEK[]<1000.70000>)")
        assert typ == "OK" and data[0][1] == msgs[3][1000:71000]
        # Pipelined FETCHes, each answer read in full, in order.
        tags = [m._command("FETCH", "5", "(BODY.PEEK[])") for _ in range(3)]
        for tag in tags:
            typ, data = m._command_complete("FETCH", tag)
            assert typ == "OK", data
        typ, data = m._untagged_response("OK", [None], "FETCH")
        bodies = [part[1] for part in data if isinstance(part, tuple)]
        assert bodies == [msgs[4]] * 3
        m.logout()


def test_pipelined_small_commands_without_reading_are_bounded(petreld, tmp_path):
    """Between commands too: a client that pipelines cheap commands (each
    CAPABILITY answer is ~15 times its command) as fast as it can and reads
    nothing holds a bounded amount of petreld's memory: petreld stops
    reading its input once its answers wait, and TCP pushes back. (ASan's
    quarantine is kept small here so VmRSS follows live memory, not the
    churn of freed buffers.)"""
    asan = os.environ.get("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=1")
    d = petreld(imap_overrides(tmp_path), env={"ASAN_OPTIONS": asan + ":quarantine_size_mb=1"})
    pid = d.pid
    s, f = slow_client(d, "plain")
    base = status_kb(pid, "VmRSS")
    chunk = b"".join(b"c%d CAPABILITY\r\n" % i for i in range(4000))
    s.setblocking(False)
    sent = 0
    peak = base
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        try:
            sent += s.send(chunk)
        except BlockingIOError:
            time.sleep(0.05)
        peak = max(peak, status_kb(pid, "VmRSS"))
        if peak - base > SMALL_BOUND_KB:
            break
    f.close()
    reset(s)
    print(f"pipelined CAPABILITY: sent {sent} bytes, VmRSS +{peak - base} kB")
    assert peak - base <= SMALL_BOUND_KB, (
        f"VmRSS grew by {peak - base} kB after {sent} bytes of pipelined CAPABILITY")
    m = login(d)
    assert m.noop()[0] == "OK"
    m.logout()
