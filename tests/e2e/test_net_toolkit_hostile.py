"""Hostile clients against the connection toolkit (review of issue 25).

- A closing IMAP session whose client stops reading: the linger bounds the
  close to NET_LINGER_GRACE_MS (5 s) on implicit TLS; the same must hold on
  a plain connection, where the session used to wait for the idle timeout
  counted on the output (30 min after login) holding its max_connections
  slot.
- A ClientHello trickled a byte at a time on an implicit-TLS IMAP port is
  cut at the login deadline, which input does not push back.
  The same after IMAP STARTTLS / POP3 STLS.
- A dial target whose DNS query is never answered does not stall the loop:
  other sessions on the same worker are served, and the LOGIN waiting on it
  is refused at imap.auth_timeout (run in a private mount namespace whose
  resolv.conf points at a silent name server; skipped when that cannot be
  set up).
- auth_addr values the dialler can never use are config errors (file:line).
- Floods past max_connections: LMTP answers 421 and recovers; the HTTP API
  pauses (no CPU) and serves every waiting client once holders leave; IMAP
  out of descriptors pauses accepting without spinning.
Real petreld, raw sockets, real TLS."""

import os
import select
import socket
import ssl
import subprocess
import sys
import threading
import time

import pytest

from conftest import wait_for
from test_imap_backpressure import populate
from test_imap_session import addr, imap_overrides

GRACE = 5.0  # NET_LINGER_GRACE_MS


def greeting_or_busy(d, key="listen", tls=False, timeout=5):
    s = socket.create_connection(addr(d, key), timeout=timeout)
    if tls:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        s = ctx.wrap_socket(s)
    try:
        return s.makefile("rb").readline()
    except (ConnectionResetError, ssl.SSLError, OSError):
        return b""
    finally:
        s.close()


def closed(sock):
    r, _, _ = select.select([sock], [], [], 0)
    if not r:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True


def test_plain_imap_closing_session_not_reading_frees_its_slot_within_linger(petreld, tmp_path):
    """LOGOUT behind a FETCH the client never reads: the session is closing
    with output queued. Its slot must come back within the linger grace,
    as it does over TLS and in LMTP."""
    d = petreld(imap_overrides(tmp_path, extra={"max_connections": 1, "workers": 1}))
    populate(d, count=1, size=200 * 1024)  # below the 256 KiB output high water
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(addr(d))
    f = s.makefile("rb")
    assert f.readline().startswith(b"* OK")
    s.sendall(b"a LOGIN alice wonderland\r\n")
    while not f.readline().startswith(b"a "):
        pass
    s.sendall(b"b SELECT INBOX\r\n")
    while not f.readline().startswith(b"b "):
        pass
    # From here the client reads nothing.
    s.sendall(b"c FETCH 1:* BODY.PEEK[]\r\nd LOGOUT\r\n")
    t0 = time.monotonic()
    freed_after = None
    while time.monotonic() - t0 < GRACE + 5:
        time.sleep(0.5)
        if greeting_or_busy(d).startswith(b"* OK"):
            freed_after = time.monotonic() - t0
            break
    s.close()
    assert freed_after is not None, \
        "the closing session kept imap.max_connections' only slot past the linger grace"
    assert freed_after < GRACE + 2.5, freed_after


def test_imap_implicit_tls_trickled_client_hello_is_cut_at_login_deadline(petreld, tmp_path,
                                                                          pki):
    d = petreld(imap_overrides(tmp_path, pki, extra={"login_timeout": "2s"}))
    s = socket.create_connection(addr(d, "listen_tls"), timeout=10)
    t0 = time.monotonic()
    s.sendall(b"\x16\x03\x01\x02\x00")  # a handshake record of 512 bytes, then a byte at a time
    gone_after = None
    while time.monotonic() - t0 < 15:
        time.sleep(0.3)
        if closed(s):
            gone_after = time.monotonic() - t0
            break
        try:
            s.sendall(b"\x01")
        except (BrokenPipeError, ConnectionResetError):
            gone_after = time.monotonic() - t0
            break
    s.close()
    assert gone_after is not None and gone_after < 2 + 1.5, gone_after


class SilentNameServer:
    """A name server on 127.0.0.77:53 that reads queries and never answers."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.77", 53))
        self.sock.settimeout(0.2)
        self.queries = 0
        self.stopping = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stopping:
            try:
                self.sock.recvfrom(4096)
                self.queries += 1
            except socket.timeout:
                pass

    def close(self):
        self.stopping = True
        self.thread.join()
        self.sock.close()


@pytest.fixture
def silent_dns(tmp_path, monkeypatch):
    """petreld started in a private mount namespace whose /etc/resolv.conf
    names the silent server (the host's resolver is left alone)."""
    import conftest
    # A lookup's end can run inside libevent, which ASan does not instrument:
    # freed memory is filled, so a read through it there crashes instead of
    # finding the old bytes.
    asan = os.environ.get("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=1")
    monkeypatch.setenv("ASAN_OPTIONS", f"{asan}:max_free_fill_size=4096:free_fill_byte=165")
    if os.geteuid() != 0 or subprocess.run(["unshare", "-m", "true"]).returncode != 0:
        pytest.skip("needs a private mount namespace (root, unshare)")
    try:
        ns = SilentNameServer()
    except OSError as e:
        pytest.skip(f"cannot bind 127.0.0.77:53: {e}")
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.77\noptions timeout:5 attempts:2\n")
    wrapper = tmp_path / "petreld-ns"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"exec unshare -m sh -c 'mount --make-rprivate / && "
        f"mount --bind {resolv} /etc/resolv.conf && exec {conftest.PETRELD} \"$@\"' sh \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setattr(conftest, "PETRELD", wrapper)
    yield ns
    ns.close()


def login_waiting_on_dns(petreld, tmp_path, **extra):
    """A one-worker IMAP petreld whose auth_addr is a name the silent server
    never answers, and a client whose LOGIN now waits on that lookup:
    (daemon, socket, socket's reader, time.monotonic() of the LOGIN)."""
    cfg = imap_overrides(tmp_path, extra={"workers": 1, **extra})
    auth_port = cfg["imap"]["auth_addr"].rsplit(":", 1)[1]
    cfg["imap"]["auth_addr"] = f"auth.slow-dns.example:{auth_port}"
    d = petreld(cfg)
    a = socket.create_connection(addr(d), timeout=60)
    fa = a.makefile("rb")
    assert fa.readline().startswith(b"* OK")
    a.sendall(b"a LOGIN alice wonderland\r\n")
    return d, a, fa, time.monotonic()


def test_unanswered_dns_for_auth_addr_does_not_stall_other_sessions(petreld, tmp_path,
                                                                    silent_dns):
    """auth_addr names a host whose DNS query is never answered. A LOGIN
    waits on the lookup; meanwhile another session on the same (only)
    worker gets its greeting and NOOP answered at once."""
    d, a, fa, _ = login_waiting_on_dns(petreld, tmp_path)
    deadline = time.monotonic() + 10
    while silent_dns.queries == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert silent_dns.queries > 0, "petreld never asked the name server"
    worst = 0.0
    for _ in range(5):
        t0 = time.monotonic()
        b = socket.create_connection(addr(d), timeout=5)
        fb = b.makefile("rb")
        assert fb.readline().startswith(b"* OK")
        b.sendall(b"n NOOP\r\n")
        assert fb.readline().startswith(b"n OK")
        b.close()
        worst = max(worst, time.monotonic() - t0)
        time.sleep(0.3)
    assert worst < 1.0, worst
    # The waiting LOGIN gets an answer (not a hang) once the lookup gives up.
    t0 = time.monotonic()
    line = fa.readline()
    while line.startswith(b"* "):
        line = fa.readline()
    assert line.startswith(b"a NO") or line.startswith(b"a BAD"), line
    print(f"LOGIN answered {time.monotonic() - t0:.1f}s after the probes: {line!r}")
    a.close()


def test_lmtp_flood_past_max_connections_gets_421_and_recovers(petreld, tmp_path):
    """lmtp.max_connections = 3: a flood of 20 more connections each gets
    the busy reply and is closed; once the holders go, new clients are
    served again (TCP and the Unix socket share the slots)."""
    from test_lmtp import Raw, addr as lmtp_addr, lmtp_overrides
    d = petreld(lmtp_overrides(tmp_path, {"max_connections": 3}, pop3=False))
    unix_path = d.config["lmtp"]["listen"][1][len("unix:"):]
    holders = [Raw(lmtp_addr(d)), Raw(lmtp_addr(d)), Raw(unix_path)]
    for h in holders:
        assert h.reply()[0].startswith(b"220 ")
    for i in range(20):
        r = Raw(lmtp_addr(d) if i % 2 else unix_path)
        got = r.reply()
        assert got[0].startswith(b"421 4.3.2") and b"Too many connections" in got[0], got
        assert r.closed()
        r.close()
    for h in holders:
        h.send(b"QUIT\r\n")
        assert h.reply()[0].startswith(b"221")
        h.close()
    deadline = time.monotonic() + 5
    while True:
        r = Raw(lmtp_addr(d))
        first = r.reply()[0]
        if first.startswith(b"220 ") or time.monotonic() > deadline:
            break
        r.close()
        time.sleep(0.1)
    assert first.startswith(b"220 "), first
    r.send(b"LHLO x\r\n")
    assert r.code() == 250
    r.close()
    assert "lmtp.max_connections reached" in d.stderr()


def test_pop3_implicit_tls_trickled_client_hello_is_cut_at_login_deadline(petreld, tmp_path,
                                                                          pki):
    from test_pop3 import pop3_overrides
    d = petreld(pop3_overrides(tmp_path, pki, extra={"login_timeout": "2s"}))
    host, port = d.config["pop3"]["listen_tls"][0].rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10)
    t0 = time.monotonic()
    s.sendall(b"\x16\x03\x01\x02\x00")
    gone_after = None
    while time.monotonic() - t0 < 15:
        time.sleep(0.3)
        if closed(s):
            gone_after = time.monotonic() - t0
            break
        try:
            s.sendall(b"\x01")
        except (BrokenPipeError, ConnectionResetError):
            gone_after = time.monotonic() - t0
            break
    s.close()
    assert gone_after is not None and gone_after < 2 + 1.5, gone_after


def check_config_refuses(tmp_path, cfg, key, message):
    """--check-config on `cfg` exits 2 with `message` at the file and line
    of the first `key:` line."""
    from conftest import run_petreld, to_yaml
    path = tmp_path / "petrel.yaml"
    path.write_text(to_yaml(cfg) + "\n")
    lineno = next(i + 1 for i, l in enumerate(path.read_text().splitlines())
                  if l.strip().startswith(f"{key}:"))
    proc = run_petreld(["-c", str(path), "--check-config"])
    assert proc.returncode == 2, proc.stderr
    assert f"{path}:{lineno}: {message}" in proc.stderr, proc.stderr


@pytest.mark.parametrize("section", ["imap", "pop3", "lmtp", "quota"])
@pytest.mark.parametrize("bad", ["127.0.0.1:0", "unix:", "b\u00fccher.example:10200",
                                 "[fe80::1%eth0]:10200", "auth.example:65536", "auth.example"])
def test_bad_auth_addr_is_a_config_error_with_file_and_line(tmp_path, section, bad):
    """auth_addr is dialled later, but a value the dialler can never use is
    refused when the configuration is read, as warden_addr is (it used to
    pass --check-config and fail every login at run time)."""
    from conftest import default_config
    cfg = default_config()
    cfg["mail"] = {"home": str(tmp_path / "mail" / "%u")}
    if section == "quota":
        cfg["components"] = ["quota-status"]
        cfg["quota"] = {"quota_status": {"listen": [f"127.0.0.1:{free_port_()}"],
                                         "auth_addr": bad}}
        key = "quota.quota_status.auth_addr"
    else:
        cfg["components"] = [section]
        cfg[section] = {"listen": [f"127.0.0.1:{free_port_()}"], "auth_addr": bad}
        key = f"{section}.auth_addr"
    check_config_refuses(tmp_path, cfg, "auth_addr", f"{key}: ")


@pytest.mark.parametrize("bad", ["127.1:10200", "0x7f.0.0.1:10200", "127.0.0.1:0", "unix:",
                                 "auth.example", "::1:10200"])
def test_bad_auth_master_addr_is_a_config_error_with_file_and_line(tmp_path, bad):
    """backend_api.auth_master_addr is dialled as the other auth_addr keys
    are: a value the dialler refuses must fail --check-config with
    file:line, not pass it and then stop the start ("cannot start")."""
    from conftest import default_config
    cfg = default_config()
    cfg["backend_api"]["auth_master_addr"] = bad
    check_config_refuses(tmp_path, cfg, "auth_master_addr", "backend_api.auth_master_addr: invalid")


def free_port_():
    from conftest import free_port
    return free_port()


def _cpu_seconds(pid):
    total = 0.0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def test_http_api_at_max_connections_pauses_without_spinning_and_resumes(petreld):
    """backend_api.max_connections = 4 (CONN_SLOTS_PAUSE): a fifth client
    waits in the backlog, unanswered, while petreld burns no CPU; when a
    holder leaves, the waiting request is answered."""
    d = petreld({"backend_api": {"max_connections": 4}})
    host, port = d.backend.rsplit(":", 1)
    holders = [socket.create_connection((host, int(port)), timeout=5) for _ in range(4)]
    time.sleep(0.3)  # the four are accepted and hold every slot
    waiting = socket.create_connection((host, int(port)), timeout=5)
    waiting.sendall(b"GET /api/backend/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    cpu0 = _cpu_seconds(d.pid)
    r, _, _ = select.select([waiting], [], [], 1.5)
    cpu1 = _cpu_seconds(d.pid)
    assert not r, "answered past backend_api.max_connections"
    assert cpu1 - cpu0 < 0.5, f"{cpu1 - cpu0:.2f}s CPU in 1.5s while paused"
    holders.pop().close()
    t0 = time.monotonic()
    first = waiting.makefile("rb").readline()
    assert first.startswith(b"HTTP/1.1 "), first
    assert time.monotonic() - t0 < 2.0
    for h in holders:
        h.close()
    waiting.close()


def test_unanswered_dns_for_auth_addr_is_bounded_by_auth_timeout(petreld, tmp_path, silent_dns):
    """The lookup counts in imap.auth_timeout: a LOGIN waiting on a name
    server that never answers is refused once auth_timeout has passed, not
    after the resolver's own retries (here 2 x 5 s)."""
    d, a, fa, t0 = login_waiting_on_dns(petreld, tmp_path, auth_timeout="2s")
    line = fa.readline()
    while line.startswith(b"* "):
        line = fa.readline()
    took = time.monotonic() - t0
    assert line.startswith(b"a NO"), line
    assert took < 2 + 1.5, f"LOGIN answered after {took:.1f}s: {line!r}"
    a.close()


@pytest.mark.parametrize("with_client", [True, False])
def test_stop_while_a_dns_lookup_waits_exits_clean(petreld, tmp_path, silent_dns, with_client):
    """SIGTERM while auth_addr's lookup waits on a name server that never
    answers: petreld exits 0 within its shutdown time, with nothing leaked
    (the client still connected, or already gone and the lookup orphaned)."""
    d, a, _, _ = login_waiting_on_dns(petreld, tmp_path, auth_timeout="30s")
    wait_for(lambda: silent_dns.queries > 0, timeout=10, what="the query to the name server")
    if not with_client:
        a.close()
    t0 = time.monotonic()
    d.stop()  # exit code 0, no sanitizer report (leaks included)
    assert time.monotonic() - t0 < 8
    a.close()


@pytest.mark.parametrize("proto", ["imap", "pop3"])
def test_trickled_handshake_after_starttls_is_cut_at_login_deadline(petreld, tmp_path, pki,
                                                                     proto):
    if proto == "imap":
        d = petreld(imap_overrides(tmp_path, pki, extra={"login_timeout": "2s"}))
        go, ok = b"a STARTTLS\r\n", b"a OK"
    else:
        from test_pop3 import pop3_overrides
        d = petreld(pop3_overrides(tmp_path, pki, extra={"login_timeout": "2s"}))
        go, ok = b"STLS\r\n", b"+OK"
    host, port = d.config[proto]["listen"][0].rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10)
    f = s.makefile("rb")
    t0 = time.monotonic()
    assert f.readline().startswith(b"* OK" if proto == "imap" else b"+OK")
    s.sendall(go)
    assert f.readline().startswith(ok)
    s.sendall(b"\x16\x03\x01\x02\x00")
    gone_after = None
    while time.monotonic() - t0 < 15:
        time.sleep(0.3)
        if closed(s):
            gone_after = time.monotonic() - t0
            break
        try:
            s.sendall(b"\x01")
        except (BrokenPipeError, ConnectionResetError):
            gone_after = time.monotonic() - t0
            break
    s.close()
    assert gone_after is not None and gone_after < 2 + 1.5, gone_after


def test_http_api_burst_past_max_connections_waits_and_is_all_served(petreld):
    """A burst of 30 clients at once against backend_api.max_connections = 4
    with four idle holders: every one of them is answered once the holders
    leave (none closed unanswered by a batch accepted past the pause)."""
    d = petreld({"backend_api": {"max_connections": 4}})
    host, port = d.backend.rsplit(":", 1)
    holders = [socket.create_connection((host, int(port)), timeout=5) for _ in range(4)]
    time.sleep(0.3)
    burst = []
    for _ in range(30):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex((host, int(port)))
        burst.append(s)
    for s in burst:
        select.select([], [s], [], 5)
        s.setblocking(True)
        s.settimeout(15)
        s.sendall(b"GET /api/backend/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    for h in holders:
        h.close()
    answers = []
    for s in burst:
        try:
            answers.append(s.makefile("rb").readline())
        except OSError as e:
            answers.append(repr(e).encode())
        s.close()
    bad = [a for a in answers if not a.startswith(b"HTTP/1.1 ")]
    assert not bad, bad


def test_imap_out_of_descriptors_pauses_accepting_without_spinning(petreld, tmp_path):
    """RLIMIT_NOFILE 128 and 220 IMAP clients: accept fails for want of
    descriptors, the listener pauses instead of spinning on the readable
    listening socket, and once the clients go, new ones are greeted."""
    import resource
    from test_connection_limits import accept_errors, close_all
    d = petreld(imap_overrides(tmp_path, extra={"max_connections_per_ip": 0, "workers": 1}),
                start_now=False)
    d.preexec = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))
    d.start()
    socks = []
    try:
        for _ in range(220):
            s = socket.create_connection(addr(d), timeout=5)
            socks.append(s)
        deadline = time.monotonic() + 10
        while not accept_errors(d) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert accept_errors(d), "no accept failure logged"
        before = _cpu_seconds(d.pid)
        t0 = time.monotonic()
        time.sleep(2.0)  # a CPU rate over a period: the period is the point
        used = _cpu_seconds(d.pid) - before
        assert used < 0.1 * (time.monotonic() - t0), f"{used:.2f}s CPU while out of descriptors"
    finally:
        close_all(socks)
    deadline = time.monotonic() + 10
    while True:
        if greeting_or_busy(d).startswith(b"* OK"):
            break
        assert time.monotonic() < deadline, "no greeting after the clients left"
        time.sleep(0.2)
