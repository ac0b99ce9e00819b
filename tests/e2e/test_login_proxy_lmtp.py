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

from conftest import free_port, http_request, wait_for
from ringproto import SECRET
from test_lmtp import deliver
from test_director_ring import port_free_on

TOKEN = "lmtp-proxy-test-token"
USERS = [f"user{i}" for i in range(16)]
PASSWD = "".join(f"{u}:{{PLAIN}}pw-{u}:1001:1001\n" for u in USERS)
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
    def __init__(self, petreld, tmp_path, pki=None):
        self.tmp = tmp_path
        tls_login, tls_backend = {}, {}
        if pki is not None:
            cert, key = backend_cert(pki, tmp_path)
            tls_login = {"backend_tls": True, "backend_tls_ca_file": str(pki / "ca.pem")}
            tls_backend = {"tls_cert_file": cert, "tls_key_file": key}
        self.auth_port = free_port()
        self.lmtp_port = port_free_on(BACKEND_IPS)
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
                "lmtp": {
                    "listen": [self.front, f"unix:{self.sock}"],
                    "auth_addr": f"127.0.0.1:{self.auth_port}",
                    "username_format": "%n",
                    "hostname": "proxy.test.example",
                    "backend_port": self.lmtp_port,
                    "temp_dir": str(spool),
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
    c = fleet.client()
    assert c.mail("sender@example.net")[0] == 250
    answers = [c.rcpt(f"{a}@example.com"), c.rcpt("nobody@example.com"),
               c.rcpt(f"{b}@example.com"), c.rcpt(f"{a}@example.com")]
    assert [x[0] for x in answers] == [250, 550, 250, 250], answers
    assert b"5.1.1" in answers[1][1]
    # One answer per accepted RCPT, in order, each naming its recipient.
    code, text = c.data(MSG)
    replies = [(code, text)] + [c.getreply() for _ in range(2)]
    assert [r[0] for r in replies] == [250, 250, 250], replies
    assert f"<{a}@example.com>".encode() in replies[0][1]
    assert f"<{b}@example.com>".encode() in replies[1][1]
    assert f"<{a}@example.com>".encode() in replies[2][1]
    assert c.noop()[0] == 250  # nothing left over in the stream
    c.quit()
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
    # 1 + transient_retries times, 150 ms apart, once for all its recipients.
    assert elapsed < 5, elapsed
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
