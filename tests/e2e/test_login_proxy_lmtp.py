"""The LMTP front of the login proxy (src/protocols/lmtp/lmtp-proxy*.c): real
petreld processes on distinct loopback addresses — two backends (the lmtp
component, each with its own mail root, on 127.0.0.2 and 127.0.0.3), a
director knowing both, and the proxy (auth + login) — and Python's
smtplib.LMTP as the MTA.

Each recipient is looked up in the userdb, routed through the director and
delivered by the backend `GET /api/director/map?user=` names (the files land
in that backend's mail root); a transaction with recipients on both backends
gets one answer per recipient after DATA (RFC 2033 4.2); an unknown user gets
550 5.1.1; a backend that is down gets 451 4.4.1 for its recipients after the
transient retries while the other backend's recipients are delivered; a
director that is down gives 451 4.4.3; the Unix socket listener works; and a
20 MB message goes through a spool file, not the proxy's memory."""

import os
import re
import smtplib
import socket
import subprocess
import time

import pytest

import threading

from conftest import (default_config, free_port, http_request, merge, run_petreld, to_yaml,
                      wait_for)
from ringproto import SECRET
from test_lmtp import deliver
from test_director_ring import port_free_on

TOKEN = "lmtp-proxy-test-token"
USERS = [f"user{i}" for i in range(16)]
PASSWD = "".join(f"{u}:{{PLAIN}}pw-{u}:1001:1001\n" for u in USERS) + \
    "vip0:{PLAIN}pw-vip0:1001:1001::::userdb_director_tag=vip\n"
VIP_IP = "127.0.0.4"
BACKEND_IPS = ["127.0.0.2", "127.0.0.3"]
MSG = (b"From: sender@example.net\r\nTo: someone@example.com\r\nSubject: proxied\r\n"
       b"Message-ID: <proxied-1@example.net>\r\n\r\nhello through the proxy\r\n"
       b".a line starting with a dot\r\n")
# ASan keeps up to 256 MB of freed memory in quarantine, which would look
# like the message held in memory (as tests/e2e/test_upload_spool.py does).
SMALL_QUARANTINE = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1:quarantine_size_mb=4:"
                                    "thread_local_quarantine_size_kb=256"}


def backend_cert(pki, tmp_path):
    """A certificate for both backend addresses, from the test CA."""
    for args in (["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "b.key", "-out", "b.csr",
                  "-subj", "/CN=petrel test backend"],
                 ["x509", "-req", "-in", "b.csr", "-CA", str(pki / "ca.pem"), "-CAkey",
                  str(pki / "ca.key"), "-CAcreateserial", "-CAserial", "b.srl", "-out", "b.pem",
                  "-days", "2", "-extfile", "b.ext"]):
        (tmp_path / "b.ext").write_text(
            "subjectAltName=" + ",".join(f"IP:{ip}" for ip in BACKEND_IPS) + "\n")
        subprocess.run(["openssl", *args], cwd=tmp_path, check=True, capture_output=True)
    return str(tmp_path / "b.pem"), str(tmp_path / "b.key")


class Fleet:
    def __init__(self, petreld, tmp_path, pki=None, login=None, front=None):
        self.tmp = tmp_path
        tls_login, tls_backend = {}, {}
        if pki is not None:
            cert, key = backend_cert(pki, tmp_path)
            tls_login = {"backend_tls": True, "backend_tls_ca_file": str(pki / "ca.pem")}
            tls_backend = {"tls_cert_file": cert, "tls_key_file": key}
        self.auth_port = free_port()
        self.lmtp_port = port_free_on(BACKEND_IPS + [VIP_IP])
        ring_port, api_port = free_port(), free_port()
        self.ring = f"127.0.0.1:{ring_port}"
        self.api = f"127.0.0.1:{api_port}"
        self.director = petreld({
            "components": ["director"],
            "director": {
                "api": {"listen": self.api},
                "ring": {"listen": self.ring},
                "peers": [],
                "backends": [{"ip": ip, "port": 143} for ip in BACKEND_IPS],
            },
        }, env={"DIRECTOR_API_TOKEN": TOKEN, "DIRECTOR_RING_SECRET": SECRET})
        passwd = tmp_path / "passwd"
        passwd.write_text(PASSWD)
        spool = tmp_path / "spool"
        spool.mkdir()
        self.sock = str(tmp_path / "lmtp-proxy.sock")
        self.front = f"127.0.0.1:{free_port()}"
        self.proxy = petreld({
            "components": ["auth", "login"],
            "auth": {"listen": [f"127.0.0.1:{self.auth_port}"],
                     "passdb": {"driver": "passwd-file", "path": str(passwd)}},
            "login": {
                "directors": [self.ring],
                "ring_secret_env": "LOGIN_RING_SECRET",
                "director_timeout": "1s",
                "transient_retries": 2,
                "backend_timeout": "3s",
                **tls_login,
                **(login or {}),
                "lmtp": {
                    "listen": [self.front, f"unix:{self.sock}"],
                    "auth_addr": f"127.0.0.1:{self.auth_port}",
                    "username_format": "%n",
                    "hostname": "proxy.test.example",
                    "backend_port": self.lmtp_port,
                    "temp_dir": str(spool),
                    **(front or {}),
                },
            },
        }, env={"LOGIN_RING_SECRET": SECRET, **SMALL_QUARANTINE})
        self.backends = {}
        for i, ip in enumerate(BACKEND_IPS):
            self.backends[ip] = petreld({
                "components": ["lmtp"],
                "mail": {"home": str(tmp_path / f"b{i}" / "%u")},
                "lmtp": {"listen": [f"{ip}:{self.lmtp_port}"],
                         "auth_addr": f"127.0.0.1:{self.auth_port}",
                         "login_trusted_networks": ["127.0.0.0/8"],
                         "username_format": "%n",
                         "hostname": f"b{i}.test.example", **tls_backend},
            })
        self.roots = {ip: tmp_path / f"b{i}" for i, ip in enumerate(BACKEND_IPS)}
        wait_for(lambda: self.ready(), what="the proxy's director link")

    def ready(self):
        # A lookup through the proxy only works once the director link is
        # up; until then a RCPT would get 451 4.4.3.
        try:
            c = self.client()
            c.mail("probe@example.net")
            code, _ = c.rcpt(f"{USERS[0]}@example.com")
            c.rset()
            c.quit()
            return code == 250
        except (OSError, smtplib.SMTPException):
            return False

    def client(self, where=None):
        if where == "unix":
            c = smtplib.LMTP(self.sock, timeout=30)
        else:
            host, port = self.front.rsplit(":", 1)
            c = smtplib.LMTP(host, int(port), timeout=30)
        code, _ = c.ehlo("mta.test.example")
        assert code == 250
        return c

    def home_of(self, user):
        r = http_request(self.api, "GET", f"/api/director/map?user={user}", token=TOKEN)
        assert r.status == 200, r
        return r.json()["backend"]

    def stored(self, ip, user):
        root = self.roots[ip] / user / "Maildir"
        return [p for sub in ("new", "cur") for p in (root / sub).glob("*") if p.is_file()]

    def metrics(self):
        return self.proxy.get("telemetry", "/metrics").body.decode()


def metric(text, name, **labels):
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        lab, value = line[len(name) + 1:].rsplit("} ", 1)
        have = ",".join(sorted(lab.split(",")))
        if have == want:
            return float(value)
    return 0.0


@pytest.fixture
def fleet(petreld, tmp_path):
    return Fleet(petreld, tmp_path)


def users_by_backend(f):
    by = {ip: [] for ip in BACKEND_IPS}
    for u in USERS[1:]:
        by[f.home_of(u)].append(u)
    assert all(by.values()), by  # 15 users: both backends get some
    return by


def test_each_recipient_lands_on_its_backend(fleet):
    by = users_by_backend(fleet)
    rcpts = [f"{u}@example.com" for u in USERS[1:]]
    c = fleet.client()
    out = deliver(c, rcpts, msg=MSG)
    c.quit()
    assert set(out) == set(rcpts)
    for r, (code, text) in out.items():
        assert code == 250, (r, code, text)
    for ip, users in by.items():
        other = next(o for o in BACKEND_IPS if o != ip)
        for u in users:
            files = wait_for(lambda: fleet.stored(ip, u), what=f"{u} on {ip}")
            assert len(files) == 1
            body = files[0].read_bytes()
            # Byte-exact after the trace headers (dot-stuffing undone once).
            assert body.endswith(MSG), body[-200:]
            # The backend believed the proxy's XCLIENT: the client's address
            # and the proxy's session id are in its Received header.
            assert re.search(rb"Received: from proxy\.test\.example \(127\.0\.0\.1\)", body), \
                body[:400]
            assert fleet.stored(other, u) == []


def test_mixed_recipients_answered_per_recipient(fleet):
    by = users_by_backend(fleet)
    a, b = by[BACKEND_IPS[0]][0], by[BACKEND_IPS[1]][0]
    a2 = next(u for u in by[BACKEND_IPS[0]] if u != a)
    c = fleet.client()
    assert c.mail("sender@example.net")[0] == 250
    answers = [c.rcpt(f"{a}@example.com"), c.rcpt("nobody@example.com"),
               c.rcpt(f"{b}@example.com"), c.rcpt(f"{a2}@example.com"),
               c.rcpt(f"{a}@example.com")]
    assert [x[0] for x in answers] == [250, 550, 250, 250, 250], answers
    assert b"5.1.1" in answers[1][1]
    # One answer per accepted RCPT, in order, each naming its recipient
    # (two on one backend: each gets its own of that backend's answers).
    code, text = c.data(MSG)
    replies = [(code, text)] + [c.getreply() for _ in range(3)]
    assert [r[0] for r in replies] == [250, 250, 250, 250], replies
    for r, u in zip(replies, (a, b, a2, a)):
        assert f"<{u}@example.com>".encode() in r[1], (u, replies)
    assert c.noop()[0] == 250  # nothing left over in the stream
    assert metric(fleet.metrics(), "petrel_login_sessions", protocol="lmtp") == 1
    c.quit()
    wait_for(lambda: metric(fleet.metrics(), "petrel_login_sessions", protocol="lmtp") == 0,
             what="the session gone from the gauge")
    wait_for(lambda: fleet.stored(BACKEND_IPS[0], a), what="a's delivery")
    wait_for(lambda: fleet.stored(BACKEND_IPS[1], b), what="b's delivery")
    assert len(fleet.stored(BACKEND_IPS[0], a)) == 1  # the duplicate is stored once
    text = fleet.metrics()
    assert metric(text, "petrel_login_result_total", protocol="lmtp", result="ok") >= 2
    assert metric(text, "petrel_login_phase_seconds_count", protocol="lmtp",
                  phase="director_lookup") >= 2
    assert metric(text, "petrel_login_phase_seconds_count", protocol="lmtp",
                  phase="backend_dial") >= 2
    assert metric(text, "petrel_login_phase_seconds_count", protocol="lmtp",
                  phase="backend_preamble") >= 2


def test_unknown_user_gets_550(fleet):
    c = fleet.client()
    assert c.mail("sender@example.net")[0] == 250
    code, text = c.rcpt("ghost@example.com")
    assert code == 550 and b"5.1.1" in text, (code, text)
    assert c.docmd("DATA")[0] == 503  # no valid recipient
    c.quit()


def test_backend_down_gives_451_for_its_recipients_only(fleet):
    by = users_by_backend(fleet)
    up, down = BACKEND_IPS
    fleet.backends[down].stop()
    before = fleet.metrics()
    rcpts = [f"{u}@example.com" for u in by[up] + by[down]]
    c = fleet.client()
    t0 = time.monotonic()
    out = deliver(c, rcpts, msg=MSG)
    elapsed = time.monotonic() - t0
    c.quit()
    for u in by[up]:
        assert out[f"{u}@example.com"][0] == 250, out
        wait_for(lambda: fleet.stored(up, u), what=f"{u} delivered")
    for u in by[down]:
        code, text = out[f"{u}@example.com"]
        assert code == 451 and b"4.4.1" in text, (u, code, text)
    # One backend transaction per transaction: the down backend is tried
    # 1 + transient_retries times, 150 ms apart, once for all its recipients
    # (its port refuses at once: the two waits are most of the time).
    assert 0.3 <= elapsed < 5, elapsed
    after = fleet.metrics()
    labels = {"protocol": "lmtp", "stage": "backend_session"}
    assert (metric(after, "petrel_login_transient_retries_total", **labels)
            - metric(before, "petrel_login_transient_retries_total", **labels)) == 2
    assert (metric(after, "petrel_login_transient_exhausted_total", **labels)
            - metric(before, "petrel_login_transient_exhausted_total", **labels)) == 1
    assert metric(after, "petrel_login_result_total", protocol="lmtp",
                  result="unavailable") >= len(by[down])


def test_director_down_gives_451(fleet):
    fleet.director.stop()
    c = fleet.client()
    assert c.mail("sender@example.net")[0] == 250
    t0 = time.monotonic()
    code, text = c.rcpt(f"{USERS[1]}@example.com")
    assert code == 451 and b"4.4.3" in text, (code, text)
    assert time.monotonic() - t0 < 3  # director_timeout is 1 s
    # The unknown user is still told so: the userdb answers before the ring.
    assert c.rcpt("ghost@example.com")[0] == 550
    c.quit()


def test_unix_socket_listener(fleet):
    u = USERS[2]
    c = fleet.client("unix")
    out = deliver(c, [f"{u}@example.com"], msg=MSG)
    c.quit()
    assert out[f"{u}@example.com"][0] == 250, out
    files = wait_for(lambda: fleet.stored(fleet.home_of(u), u), what="the delivery")
    assert files[0].read_bytes().endswith(MSG)


def status(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])  # kB
    raise AssertionError(f"no {key}")


def margin_mb(pid):
    """What the proxy's peak RSS may grow by: a few MB in a release build;
    under ASan its allocator and (small) quarantine add about 8 MB."""
    with open(f"/proc/{pid}/maps") as f:
        asan = "libasan" in f.read()
    return 14 if asan else 4


def test_large_message_is_spooled_not_held_in_memory(fleet):
    u = USERS[3]
    pid = fleet.proxy.pid
    c = fleet.client()
    deliver(c, [f"{u}@example.com"], msg=MSG)  # warm up every path once
    line = b"x" * 998 + b"\r\n"
    big = MSG + line * (20 * 1024 * 1024 // len(line))
    # VmHWM from here on: the peak while the message passes through.
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")
    start = status(pid, "VmRSS")
    out = deliver(c, [f"{u}@example.com"], msg=big)
    c.quit()
    assert out[f"{u}@example.com"][0] == 250, out
    peak = status(pid, "VmHWM")
    grew = (peak - start) / 1024
    print(f"proxy VmRSS {start // 1024} MB, peak {peak // 1024} MB with a 20 MB message")
    assert grew < margin_mb(pid), f"the proxy's peak RSS grew {grew:.1f} MB for a 20 MB message"
    home = fleet.home_of(u)
    files = wait_for(lambda: (lambda f: f if len(f) == 2 else None)(fleet.stored(home, u)),
                     what="both deliveries")
    assert max(os.path.getsize(p) for p in files) > len(big)
    # The spool file has no name: nothing is left in temp_dir.
    assert list((fleet.tmp / "spool").iterdir()) == []


def test_client_that_never_reads_is_bounded(fleet):
    """A client pipelining NOOPs without reading a reply: the proxy stops
    reading it once 64 KiB of replies wait, so its memory stays flat."""
    pid = fleet.proxy.pid
    host, port = fleet.front.rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")
    start = status(pid, "VmRSS")
    s.settimeout(0.5)
    sent = 0
    chunk = b"NOOP\r\n" * 2000
    try:
        while sent < 64 * 1024 * 1024:
            sent += s.send(chunk)
    except (socket.timeout, BlockingIOError):
        pass
    peak = status(pid, "VmHWM")
    s.close()
    assert sent < 32 * 1024 * 1024, f"the proxy read {sent} bytes of a client that never reads"
    print(f"proxy read {sent // 1024} KiB of NOOPs, peak RSS +{(peak - start) // 1024} MB")
    assert (peak - start) / 1024 < margin_mb(pid)


def test_backend_tls_is_starttls_checked_against_the_ca(petreld, tmp_path, pki):
    """login.backend_tls: STARTTLS to the backend, its certificate checked
    against login.backend_tls_ca_file for the backend's address; the
    backend then records the delivery as LMTPS from the real client."""
    f = Fleet(petreld, tmp_path, pki=pki)
    u = USERS[4]
    c = f.client()
    out = deliver(c, [f"{u}@example.com"], msg=MSG)
    c.quit()
    assert out[f"{u}@example.com"][0] == 250, out
    files = wait_for(lambda: f.stored(f.home_of(u), u), what="the delivery")
    body = files[0].read_bytes()
    assert re.search(rb"\(127\.0\.0\.1\)\r\n\tby b\d\.test\.example \(Petrel\) with LMTPS", body), \
        body[:400]


def test_backend_tls_refuses_a_backend_without_starttls(petreld, tmp_path, pki):
    """With backend_tls the proxy sends nothing in clear text: a backend that
    does not offer STARTTLS is a failed set-up (451 after the retries)."""
    f = Fleet(petreld, tmp_path)
    cfg = f.proxy.config
    cfg["login"]["backend_tls"] = True
    cfg["login"]["backend_tls_ca_file"] = str(pki / "ca.pem")
    f.proxy.stop()
    f.proxy.write_config(cfg)
    f.proxy.start()
    u = USERS[5]
    c = wait_for(lambda: _client_or_none(f), what="the proxy back")
    assert c.mail("sender@example.net")[0] == 250
    code, text = wait_for(lambda: (lambda r: r if r[0] != 451 or b"4.4.1" in r[1] else None)(
        c.rcpt(f"{u}@example.com")), what="an answer")
    assert code == 451 and b"4.4.1" in text, (code, text)
    c.quit()
    assert "does not offer STARTTLS" in f.proxy.stderr()
    assert f.stored(f.home_of(u), u) == []


def _client_or_none(f):
    try:
        return f.client()
    except OSError:
        return None


class ScriptedBackend:
    """A backend that breaks at a chosen step, bound where a real backend
    was (its address stays registered with the director): "silent" accepts
    and never speaks; "drop_after_data" plays LMTP up to the end of the
    message and closes instead of answering it; "record" plays LMTP, keeps
    the DATA stream as it came (dot-stuffed, up to and with the final
    ".\r\n") in `stream` and answers 250 for each recipient."""

    def __init__(self, ip, port, mode, xclient=False):
        self.mode = mode
        self.offer_xclient = xclient  # LHLO offers XCLIENT; its lines kept in `xclient`
        self.xclient = []
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((ip, port))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.accepted = 0
        self.got_message = threading.Event()
        self.stream = b""
        self.stop = False
        self.conns = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            self.conns.append(c)
            if self.mode in ("drop_after_data", "record", "data_250", "rcpt_354", "result_354"):
                threading.Thread(target=self._lmtp, args=(c,), daemon=True).start()

    def _lmtp(self, c):
        f = c.makefile("rb")
        c.sendall(b"220 scripted ready\r\n")
        rcpts = 0
        for line in f:
            verb = line[:4].upper()
            if verb == b"LHLO":
                c.sendall(b"250-scripted\r\n" +
                          (b"250-XCLIENT ADDR PORT SESSION TTL\r\n" if self.offer_xclient else b"")
                          + b"250 PIPELINING\r\n")
            elif verb == b"XCLI":
                self.xclient.append(line)
                c.sendall(b"220 scripted ready\r\n")
            elif verb == b"RCPT" and self.mode == "rcpt_354":
                c.sendall(b"354 2.1.5 go ahead\r\n")
            elif verb in (b"MAIL", b"RCPT"):
                rcpts += verb == b"RCPT"
                c.sendall(b"250 2.1.0 OK\r\n")
            elif verb == b"DATA" and self.mode == "data_250":
                c.sendall(b"250 2.0.0 OK\r\n")  # no 354: the message is never asked for
            elif verb == b"DATA":
                c.sendall(b"354 go\r\n")
                # Lines as a backend that also ends them at a bare LF sees
                # them (Postfix, Dovecot's istream-dot).
                stream = b""
                for body in f:
                    stream += body
                    if body == b".\r\n":
                        break
                self.stream = stream
                self.got_message.set()
                if self.mode == "record":
                    c.sendall(b"250 2.0.0 recorded\r\n" * rcpts)
                    continue
                if self.mode == "result_354":
                    c.sendall(b"354 2.0.0 odd\r\n" * rcpts)
                    continue
                c.close()  # no answer for the message
                return
            elif verb == b"QUIT":
                c.sendall(b"221 bye\r\n")
                c.close()
                return

    def close(self):
        self.stop = True
        self.thread.join()
        for c in self.conns:
            c.close()
        self.sock.close()


def test_slow_backend_times_out_into_451(petreld, tmp_path):
    """A backend that accepts and never answers: each set-up attempt ends at
    backend_timeout, then 451 4.4.1; the transaction goes on with the other
    backend."""
    f = Fleet(petreld, tmp_path, login={"backend_timeout": "300ms", "transient_retries": 1})
    by = users_by_backend(f)
    up, down = BACKEND_IPS
    f.backends[down].stop()
    silent = ScriptedBackend(down, f.lmtp_port, "silent")
    try:
        c = f.client()
        assert c.mail("sender@example.net")[0] == 250
        t0 = time.monotonic()
        code, text = c.rcpt(f"{by[down][0]}@example.com")
        elapsed = time.monotonic() - t0
        assert code == 451 and b"4.4.1" in text, (code, text)
        assert 0.6 <= elapsed < 3, elapsed  # two attempts of 300 ms, 150 ms apart
        assert silent.accepted == 2
        assert c.rcpt(f"{by[up][0]}@example.com")[0] == 250
        code, _ = c.data(MSG)
        assert code == 250
        c.quit()
    finally:
        silent.close()
    wait_for(lambda: f.stored(up, by[up][0]), what="the other backend's delivery")


def test_backend_lost_after_the_message_gives_451_not_250(petreld, tmp_path):
    """One backend takes the message and drops the connection before
    answering: its recipients get 451 4.4.2 (nothing acknowledged that was
    not delivered), the other backend's recipients 250, in RCPT order."""
    f = Fleet(petreld, tmp_path)
    by = users_by_backend(f)
    up, down = BACKEND_IPS
    f.backends[down].stop()
    bad = ScriptedBackend(down, f.lmtp_port, "drop_after_data")
    try:
        rcpts = [f"{by[down][0]}@example.com", f"{by[up][0]}@example.com"]
        c = f.client()
        out = deliver(c, rcpts, msg=MSG)
        assert bad.got_message.is_set()
        code, text = out[rcpts[0]]
        assert code == 451 and b"4.4.2" in text and rcpts[0].encode() in text, (code, text)
        assert out[rcpts[1]][0] == 250, out
        assert c.noop()[0] == 250
        c.quit()
    finally:
        bad.close()
    wait_for(lambda: f.stored(up, by[up][0]), what="the good backend's delivery")


def body_with_dot_lines_at(offsets, size):
    """A message of `size` bytes whose lines at each of `offsets` start with
    a dot (the proxy's 64 KiB spool reads and 256 KiB output mark fall
    there)."""
    out = bytearray(b"From: sender@example.net\r\nSubject: dots at the seams\r\n"
                    b"Message-ID: <seams@example.net>\r\n\r\n")
    n = 0
    for at in sorted(offsets) + [size]:
        while len(out) < at:
            line_len = min(78, at - len(out))
            if line_len < 2 or (at - len(out) - line_len) in (1,):
                line_len = at - len(out)
            out += (b"%c" % (97 + n % 26)) * (line_len - 2) + b"\r\n" if line_len >= 2 else b"\r\n"
            n += 1
        del out[at:]
        if at < size:
            out += b".dot line at %d\r\n" % at
    return bytes(out)


def stuff(content):
    return re.sub(rb"(?m)^\.", b"..", content)


def stored_once(f, ip, user, content):
    files = wait_for(lambda: f.stored(ip, user), what=f"{user}'s delivery")
    assert len(files) == 1, files
    data = files[0].read_bytes()
    # The backend adds Return-Path, Delivered-To and Received above it:
    # nothing else may come before the message.
    assert data.endswith(content), (len(data), len(content), data[:300], data[-300:])
    added = data[:len(data) - len(content)].split(b"\r\n")
    assert added[-1] == b"" and all(
        ln.startswith((b"Return-Path: ", b"Delivered-To: ", b"Received: ", b"\t"))
        for ln in added[:-1]), added


def test_message_reaches_each_backend_byte_for_byte(fleet):
    """What a backend stores is the client's message, once: a small one (in
    memory), and one of 600 KiB (through the spool file) with lines starting
    with a dot at the 64 KiB and 256 KiB seams, sent to the proxy in odd
    pieces with its final CRLF.CRLF split across segments; recipients on
    both backends get the same bytes Petrel's own LMTP stores when given the
    message directly."""
    by = users_by_backend(fleet)
    small = MSG
    big = body_with_dot_lines_at([65536, 65536 * 2, 262144, 262144 + 65536, 524288], 600 * 1024)
    assert big[65536:65537] == b"." and big[262144:262145] == b"."
    host, port = fleet.front.rsplit(":", 1)
    for content, users in ((small, [by[ip][0] for ip in BACKEND_IPS]),
                           (big, [by[ip][1] for ip in BACKEND_IPS])):
        c = fleet.client()
        assert c.mail("sender@example.net")[0] == 250
        for u in users:
            assert c.rcpt(f"{u}@example.com")[0] == 250
        assert c.docmd("DATA")[0] == 354
        wire = stuff(content) + b".\r\n"
        sock = c.sock
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        cuts = sorted({0, 1000, 65535, 65537, 262143, len(wire) - 4, len(wire) - 2,
                       len(wire) - 1, len(wire)} & set(range(len(wire) + 1)))
        for a, b in zip(cuts, cuts[1:]):
            sock.sendall(wire[a:b])
            time.sleep(0.005)  # separate segments, not synchronisation
        for u in users:
            code, text = c.getreply()
            assert code == 250, (u, code, text)
        c.quit()
        for ip, u in zip(BACKEND_IPS, users):
            stored_once(fleet, ip, u, content)
    # Petrel's own LMTP on the same input stores the same bytes.
    direct_user = by[BACKEND_IPS[0]][2]
    ip = BACKEND_IPS[0]
    c = smtplib.LMTP(ip, fleet.lmtp_port, timeout=30)
    c.ehlo("mta.test.example")
    out = deliver(c, [f"{direct_user}@example.com"], msg=big)
    c.quit()
    assert out[f"{direct_user}@example.com"][0] == 250, out
    stored_once(fleet, ip, direct_user, big)


@pytest.mark.parametrize("mode", ["data_250", "rcpt_354", "result_354"])
def test_backend_reply_out_of_place_is_a_temporary_failure(petreld, tmp_path, mode):
    """A backend answering with a code that has no place there (250 to DATA
    instead of 354, 354 to a RCPT or as a recipient's result) is broken:
    its recipients get 451 4.4.2, never its code. A 250 to DATA passed on
    would tell the client a message was delivered that the backend never
    received; a 354 to RCPT would tell it to send the message."""
    f = Fleet(petreld, tmp_path)
    by = users_by_backend(f)
    up, down = BACKEND_IPS
    f.backends[down].stop()
    bad = ScriptedBackend(down, f.lmtp_port, mode)
    try:
        c = f.client()
        assert c.mail("sender@example.net")[0] == 250
        code, text = c.rcpt(f"{by[down][0]}@example.com")
        if mode == "rcpt_354":
            assert code == 451 and b"4.4.2" in text, (code, text)
        else:
            assert code == 250, (code, text)
        assert c.rcpt(f"{by[up][0]}@example.com")[0] == 250
        code, text = c.data(MSG)
        replies = [(code, text), c.getreply()] if mode != "rcpt_354" else [(code, text)]
        if mode != "rcpt_354":
            assert replies[0][0] == 451 and b"4.4.2" in replies[0][1], replies
        assert replies[-1][0] == 250 and by[up][0].encode() in replies[-1][1], replies
        assert c.noop()[0] == 250
        c.quit()
    finally:
        bad.close()
    assert f.stored(up, by[up][0]) or wait_for(lambda: f.stored(up, by[up][0]), what="delivery")


def test_bare_lf_reaches_the_backend_as_crlf_with_its_dots_stuffed(petreld, tmp_path):
    """A bare LF is content to the front (lines end at CRLF only), but many
    backends (Postfix, Dovecot's LMTP) end a line at a bare LF too: passed on
    as it came, "\n.\r\n" would end the message there and what follows would
    run as backend commands (SMTP smuggling). The front sends every line end
    as CRLF (RFC 5321 2.3.8 forbids a bare LF on the wire), so a line starting
    with a dot after one is stuffed like any other."""
    f = Fleet(petreld, tmp_path)
    by = users_by_backend(f)
    down = BACKEND_IPS[1]
    f.backends[down].stop()
    rec = ScriptedBackend(down, f.lmtp_port, "record")
    try:
        c = f.client()
        assert c.mail("sender@example.net")[0] == 250
        assert c.rcpt(f"{by[down][0]}@example.com")[0] == 250
        assert c.docmd("DATA")[0] == 354
        body = (b"Subject: bare\r\n\r\nline\n.\r\nRSET\r\nMAIL FROM:<evil@example.net>\r\n"
                b"x\n..y\r\n.z\n\n.\n")
        c.send(body + b"\r\n.\r\n")
        code, text = c.getreply()
        assert code == 250, (code, text)
        c.quit()
    finally:
        rec.close()
    stream = rec.stream
    assert stream.endswith(b"\r\n.\r\n"), stream
    assert re.search(rb"(?<!\r)\n", stream) is None, stream  # no bare LF
    lines = stream.split(b"\r\n")[:-2]
    assert all(not ln.startswith(b".") or ln.startswith(b"..") for ln in lines), stream
    assert stream == (b"Subject: bare\r\n\r\nline\r\n..\r\nRSET\r\n"
                      b"MAIL FROM:<evil@example.net>\r\nx\r\n...y\r\nz\r\n\r\n..\r\n"
                      b"\r\n.\r\n"), stream


def test_forwarded_hop_count_is_passed_on_less_one_and_a_loop_ends(petreld, tmp_path):
    """A front trusting another proxy (login.lmtp.login_trusted_networks)
    takes its XCLIENT TTL as the hops left: the backend is sent one less,
    and a recipient arriving with 1 or less gets 451 4.4.6 and `proxy loop`
    in the log instead of another hop, so LMTP proxies pointing at each
    other (or at themselves) cannot bounce a delivery for ever."""
    f = Fleet(petreld, tmp_path, front={"login_trusted_networks": ["127.0.0.0/8"]})
    by = users_by_backend(f)
    down = BACKEND_IPS[1]
    f.backends[down].stop()
    rec = ScriptedBackend(down, f.lmtp_port, "record", xclient=True)
    try:
        for ttl, want in ((1, 451), (3, 250)):
            c = f.client()
            code, text = c.docmd("XCLIENT", f"ADDR=192.0.2.7 PORT=4242 TTL={ttl}")
            assert code == 220, (code, text)
            c.ehlo_resp = None
            assert c.ehlo("mta.test.example")[0] == 250
            assert c.mail("sender@example.net")[0] == 250
            code, text = c.rcpt(f"{by[down][0]}@example.com")
            assert code == want, (ttl, code, text)
            if want == 451:
                assert b"4.4.6" in text, text
                assert rec.accepted == 0  # no hop was made
            else:
                assert c.data(MSG)[0] == 250
            c.quit()
    finally:
        rec.close()
    assert "proxy loop" in f.proxy.stderr()
    assert len(rec.xclient) == 1, rec.xclient
    assert re.match(rb"XCLIENT ADDR=192\.0\.2\.7 PORT=4242 SESSION=\S+ TTL=2\r\n$",
                    rec.xclient[0]), rec.xclient


def test_config_errors_and_print(tmp_path):
    base = merge(default_config(), {"components": ["login"], "login": {
        "directors": ["127.0.0.1:9102"],
        "lmtp": {"listen": ["127.0.0.1:11024"], "auth_addr": "127.0.0.1:10200"}}})
    path = tmp_path / "p.yaml"
    path.write_text(to_yaml(base) + "\n")
    proc = run_petreld(["-c", str(path), "--check-config"])
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"  lmtp:\n    listen:", proc.stdout), proc.stdout
    assert "    backend_port: 24" in proc.stdout
    for key, value, words in (("delivery_threads", 4, "login.lmtp"),
                              ("backend_port", 0, "login.lmtp.backend_port"),
                              ("temp_dir", "relative", "login.lmtp.temp_dir"),
                              ("listen", [], "login.lmtp")):
        cfg = merge(base, {"login": {"lmtp": {key: value}}})
        path.write_text(to_yaml(cfg) + "\n")
        proc = run_petreld(["-c", str(path), "--check-config"])
        assert proc.returncode == 2, proc.stderr
        assert re.search(r"p\.yaml:\d+: " + re.escape(words), proc.stderr), proc.stderr


def test_director_tag_from_the_userdb_picks_the_backend_group(fleet, petreld, tmp_path):
    """The userdb extra field director_tag is the tag the director hashes
    in: a user tagged `vip` lands on the only `vip` backend."""
    r = http_request(fleet.api, "POST", "/api/director/backends",
                     body={"ip": VIP_IP, "port": 143, "tag": "vip"}, token=TOKEN)
    assert r.status in (200, 201), r
    petreld({
        "components": ["lmtp"],
        "mail": {"home": str(tmp_path / "vip" / "%u")},
        "lmtp": {"listen": [f"{VIP_IP}:{fleet.lmtp_port}"],
                 "auth_addr": f"127.0.0.1:{fleet.auth_port}",
                 "login_trusted_networks": ["127.0.0.0/8"], "username_format": "%n"},
    })
    c = fleet.client()
    out = deliver(c, ["vip0@example.com", f"{USERS[6]}@example.com"], msg=MSG)
    c.quit()
    assert [v[0] for v in out.values()] == [250, 250], out
    vip = tmp_path / "vip" / "vip0" / "Maildir"
    wait_for(lambda: [p for sub in ("new", "cur") for p in (vip / sub).glob("*")],
             what="vip0 on the vip backend")
    home = fleet.home_of(USERS[6])
    assert home in BACKEND_IPS  # the untagged user stays on the untagged backends
    wait_for(lambda: fleet.stored(home, USERS[6]), what="the untagged delivery")


def test_connections_per_address_are_capped(petreld, tmp_path):
    """login.lmtp.max_connections_per_ip: one address cannot hold every
    slot; over the cap a connection gets 421 4.7.0 and is closed, and a
    slot given back can be taken again."""
    f = Fleet(petreld, tmp_path, front={"max_connections_per_ip": 2})
    host, port = f.front.rsplit(":", 1)
    # Fleet.ready()'s own sessions give their slots back as they close.
    held = [wait_for(lambda: _client_or_none(f), what="a slot") for _ in range(2)]
    s = socket.create_connection((host, int(port)), timeout=10)
    data = s.recv(512)
    s.close()
    assert data.startswith(b"421 4.7.0"), data
    held.pop().quit()
    c = wait_for(lambda: _client_or_none(f), what="a slot again")
    c.quit()
    for c in held:
        c.quit()
    assert "login.lmtp.max_connections_per_ip" in f.proxy.stderr()


def test_user_being_moved_is_looked_up_again_not_refused(fleet):
    """While a moved user still has a session on the old backend the
    director answers `killing` with a retry time: the front asks again
    (within director_timeout) and delivers to the new backend once the old
    session is gone, instead of answering 451."""
    from test_director_client import Probe
    user = USERS[7]
    old = fleet.home_of(user)
    new = next(ip for ip in BACKEND_IPS if ip != old)
    probe = Probe([fleet.ring])
    try:
        wait_for(lambda: probe.ready() == 1, what="the probe's director link")
        probe.send(f"start s1 {user} {old} imap")
        assert probe.expect("start s1") == ["start", "s1", "ok"]
        # "ok" only means the probe queued SESSION-START (the ring protocol
        # does not acknowledge it): the move must not overtake it, or the
        # director sees no session on the old backend, moves at once and
        # the RCPT is answered without the `killing` wait.
        wait_for(lambda: metric(fleet.director.get("telemetry", "/metrics").body.decode(),
                                "petrel_director_backend_sessions", ip=old, port="143", tag="",
                                protocol="imap") == 1,
                 what="the director counting the old session")
        r = http_request(fleet.api, "POST", f"/api/director/users/{user}/move",
                         body={"backend": f"{new}:143"}, token=TOKEN)
        assert r.status in (200, 202), r
        c = fleet.client()
        assert c.mail("sender@example.net")[0] == 250
        # The old session ends 300 ms into the RCPT's lookup.
        timer = threading.Timer(0.3, lambda: probe.send("end s1"))
        timer.start()
        t0 = time.monotonic()
        code, text = c.rcpt(f"{user}@example.com")
        elapsed = time.monotonic() - t0
        timer.join()
        assert code == 250, (code, text)
        assert 0.25 < elapsed < 1.5, elapsed
        assert c.data(MSG)[0] == 250
        c.quit()
    finally:
        probe.close()
    wait_for(lambda: fleet.stored(new, user), what="the delivery on the new backend")
    assert fleet.stored(old, user) == []
