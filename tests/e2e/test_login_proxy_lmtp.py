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


class ScriptedBackend:
    """A backend that breaks at a chosen step, bound where a real backend
    was (its address stays registered with the director): "silent" accepts
    and never speaks; "drop_after_data" plays LMTP up to the end of the
    message and closes instead of answering it."""

    def __init__(self, ip, port, mode):
        self.mode = mode
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((ip, port))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.accepted = 0
        self.got_message = threading.Event()
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
            if self.mode == "drop_after_data":
                threading.Thread(target=self._lmtp, args=(c,), daemon=True).start()

    def _lmtp(self, c):
        f = c.makefile("rb")
        c.sendall(b"220 scripted ready\r\n")
        for line in f:
            verb = line[:4].upper()
            if verb == b"LHLO":
                c.sendall(b"250-scripted\r\n250 PIPELINING\r\n")
            elif verb in (b"MAIL", b"RCPT"):
                c.sendall(b"250 2.1.0 OK\r\n")
            elif verb == b"DATA":
                c.sendall(b"354 go\r\n")
                for body in f:
                    if body == b".\r\n":
                        break
                self.got_message.set()
                c.close()  # no answer for the message
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
