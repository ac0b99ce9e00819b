"""The login proxy (the `login` component, docs/login-proxy.md) between real
clients and a real backend, with a real director routing between them:

    clients (imaplib, poplib, raw sockets, from 127.0.0.3)
      -> proxy petreld   [login, warden, backend-api]
      -> backend petreld [auth, warden, imap, pop3, director, backend-api]
    the proxy's auth service: its own petreld [auth] (stopped and started here)

The backend process's IMAP listens on 127.0.0.1 and 127.0.0.2 (two backends
for the director); it trusts the proxy's forwarding (login_trusted_networks)
and checks passwords with its own auth component, whose passwd file differs
from the proxy's for one user (so the backend can say NO to a login the
proxy's auth accepted)."""

import base64
import imaplib
import os
import poplib
import re
import signal
import socket
import ssl
import subprocess
import threading
import time

import pytest

from conftest import Daemon, default_config, free_port, merge, wait_for
from ringproto import SECRET

CLIENT_IP = "127.0.0.3"  # the clients' source address, as the backend must see it
UPSTREAM_PROXY = "127.0.0.5"  # another proxy in front of ours (its login_trusted_networks)
PASSWD = ("alice:{PLAIN}Wonderland-7qX:1001:1001\n"
          "carol:{PLAIN}Carol-pass-19:1001:1001\n"
          "dave:{PLAIN}Dave-pass-23:1001:1001\n"
          "erin:{PLAIN}Erin-pass-31:1001:1001\n"
          "bob:{PLAIN}Bob-proxy-pass-5:1001:1001\n"
          "frank:{PLAIN}Frank-pass-41:1001:1001::::director_tag=blue\n")
# The backend's own auth: bob's password differs, so the backend refuses him.
BACKEND_PASSWD = PASSWD.replace("Bob-proxy-pass-5", "Bob-backend-pass-6")
PASSWORDS = ["Frank-pass-41", "Wonderland-7qX", "Carol-pass-19", "Dave-pass-23", "Erin-pass-31",
             "Bob-proxy-pass-5", "Bob-backend-pass-6"]
MSG = (b"From: sender@example.net\r\nTo: alice@example.com\r\nSubject: via proxy\r\n"
       b"Message-ID: <proxy-1@example.net>\r\n\r\nhello through the proxy\r\n")


class SourceIMAP(imaplib.IMAP4):
    def _create_socket(self, timeout):
        return socket.create_connection((self.host, self.port), timeout or 10,
                                        source_address=(CLIENT_IP, 0))


class SourceIMAPSSL(imaplib.IMAP4_SSL):
    def _create_socket(self, timeout):
        sock = socket.create_connection((self.host, self.port), timeout or 10,
                                        source_address=(CLIENT_IP, 0))
        return self.ssl_context.wrap_socket(sock, server_hostname=self.host)


class SourcePOP3(poplib.POP3):
    def _create_socket(self, timeout):
        return socket.create_connection((self.host, self.port), timeout,
                                        source_address=(CLIENT_IP, 0))


class SourcePOP3SSL(poplib.POP3_SSL):
    def _create_socket(self, timeout):
        sock = socket.create_connection((self.host, self.port), timeout,
                                        source_address=(CLIENT_IP, 0))
        return self.context.wrap_socket(sock, server_hostname=self.host)


def metrics(d):
    return d.get("telemetry", "/metrics").body.decode()


def metric(d, name, **labels):
    """Sum of the series of `name` matching `labels` (0 when none)."""
    total = 0.0
    for line in metrics(d).splitlines():
        if not (line.startswith(name + "{") or line.startswith(name + " ")):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def who(d):
    r = d.post("backend", "/api/backend/who", {})
    assert r.status == 200, r
    return [s for g in r.json()["groups"] for s in g["sessions"]]


class Fleet:
    def __init__(self, base):
        self.base = base
        base.mkdir(parents=True, exist_ok=True)
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                        "tls.key", "-out", "tls.pem", "-days", "2", "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                       cwd=base, check=True, capture_output=True)
        (base / "passwd").write_text(PASSWD)
        (base / "backend-passwd").write_text(BACKEND_PASSWD)
        (base / "ring.secret").write_text(SECRET + "\n")
        os.chmod(base / "ring.secret", 0o600)
        self.auth_port = free_port()
        self.imap_port = free_port()
        self.pop3_port = free_port()
        self.daemons = []
        self.authd = self._daemon("auth", {
            "components": ["auth"],
            "log_level": "debug",
            "auth": {"listen": [f"127.0.0.1:{self.auth_port}"], "failure_delay": "0s",
                     "passdb": {"driver": "passwd-file", "path": str(base / "passwd")}},
        })
        b_auth, b_warden = free_port(), free_port()
        mail = {"auth_addr": f"127.0.0.1:{b_auth}", "warden_addr": f"127.0.0.1:{b_warden}",
                "login_trusted_networks": ["127.0.0.1/32"]}
        self.backend = self._daemon("backend", {
            "components": ["auth", "warden", "imap", "pop3", "director", "backend-api"],
            "log_level": "debug",
            "mail": {"home": str(base / "mail" / "%u")},
            "auth": {"listen": [f"127.0.0.1:{b_auth}"], "failure_delay": "0s",
                     "passdb": {"driver": "passwd-file", "path": str(base / "backend-passwd")}},
            "warden_service": {"listen": [f"127.0.0.1:{b_warden}"]},
            "imap": {"listen": [f"127.0.0.1:{self.imap_port}", f"127.0.0.2:{self.imap_port}",
                                f"127.0.0.4:{self.imap_port}"],
                     "workers": 1, **mail},
            "pop3": {"listen": [f"127.0.0.1:{self.pop3_port}", f"127.0.0.2:{self.pop3_port}"],
                     **mail},
            "director": {
                "api": {"listen": f"127.0.0.1:{free_port()}"},
                "ring": {"listen": f"127.0.0.1:{free_port()}",
                         "secret_file": str(base / "ring.secret")},
                "backends": [{"ip": "127.0.0.1", "port": self.imap_port},
                             {"ip": "127.0.0.2", "port": self.imap_port},
                             {"ip": "127.0.0.4", "port": self.imap_port, "tag": "blue"}],
            },
        })
        p_warden = free_port()
        front = {"auth_addr": f"127.0.0.1:{self.auth_port}",
                 "warden_addr": f"127.0.0.1:{p_warden}",
                 "tls_cert_file": str(base / "tls.pem"), "tls_key_file": str(base / "tls.key"),
                 "auth_timeout": "250ms"}
        self.proxy = self._daemon("proxy", {
            "components": ["login", "warden", "backend-api"],
            "log_level": "debug",
            "warden_service": {"listen": [f"127.0.0.1:{p_warden}"]},
            "login": {
                "directors": [self.backend.config["director"]["ring"]["listen"]],
                "ring_secret_file": str(base / "ring.secret"),
                "transient_retries": 4,
                "backend_timeout": "3s",
                "imap": {"listen": [f"127.0.0.1:{free_port()}"],
                         "listen_tls": [f"127.0.0.1:{free_port()}"],
                         "login_trusted_networks": [UPSTREAM_PROXY + "/32"], **front},
                "pop3": {"listen": [f"127.0.0.1:{free_port()}"],
                         "listen_tls": [f"127.0.0.1:{free_port()}"],
                         "backend_port": self.pop3_port, **front},
            },
        })

    def _daemon(self, name, cfg):
        d = Daemon(self.base, merge(default_config(), cfg), name=name)
        d.start()
        self.daemons.append(d)
        return d

    def addr(self, proto, tls=False):
        host, port = self.proxy.config["login"][proto]["listen_tls" if tls else "listen"][0] \
            .rsplit(":", 1)
        return host, int(port)

    def director(self, method, path, body=None):
        from conftest import http_request
        return http_request(self.backend.config["director"]["api"]["listen"], method, path,
                            body=body)

    def logs(self):
        return "".join(d.stderr() for d in self.daemons)

    def stop(self):
        problems = []
        for d in reversed(self.daemons):
            try:
                if d.proc is not None and d.proc.poll() is None:
                    d.stop()
                else:
                    d.assert_clean()
            except AssertionError as e:
                problems.append(str(e))
        return problems


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    f = Fleet(tmp_path_factory.mktemp("login-proxy"))
    yield f
    problems = f.stop()
    logs = f.logs()
    for pw in PASSWORDS:
        assert pw not in logs, f"a password ({pw}) appears in a log"
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


def tls_context():
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def backend_session(fleet, user, service):
    """The backend's warden entry of `user` (the backend's own registration)."""
    found = [s for s in who(fleet.backend) if s["user"] == user and s["service"] == service]
    return found[0] if len(found) == 1 else None


# ---------- IMAP ----------

def test_imap_login_select_fetch_append_through_the_proxy(fleet):
    ok_before = metric(fleet.proxy, "petrel_login_result_total", protocol="imap", result="ok")
    out_before = metric(fleet.proxy, "petrel_imap_proxy_bytes_total", direction="out")
    m = SourceIMAP(*fleet.addr("imap"))
    assert b"AUTH=PLAIN" in m.welcome and b"STARTTLS" in m.welcome
    typ, data = m.login("alice", "Wonderland-7qX")
    # the backend's own OK, with its capabilities after login
    assert typ == "OK" and b"[CAPABILITY IMAP4rev1" in data[0] and b"MOVE" in data[0], data
    assert m.append("INBOX", None, None, MSG)[0] == "OK"
    typ, data = m.select("INBOX")
    assert typ == "OK" and int(data[0]) >= 1
    typ, data = m.fetch("1", "(BODY.PEEK[])")
    assert typ == "OK" and data[0][1] == MSG
    # the backend registered and logged the client's real address
    s = wait_for(lambda: backend_session(fleet, "alice", "imap"), what="backend who")
    assert s["ip"] == CLIENT_IP, s
    assert re.search(r"logged in.*user=alice peer=" + re.escape(CLIENT_IP),
                     fleet.backend.stderr())
    # the proxy registered the proxied session with its warden too
    ps = wait_for(lambda: [x for x in who(fleet.proxy) if x["user"] == "alice"] or None,
                  what="proxy who")
    assert ps[0]["ip"] == CLIENT_IP and ps[0]["service"] == "imap", ps
    assert metric(fleet.proxy, "petrel_login_sessions", protocol="imap") >= 1
    # the director counts the proxied session on its backend
    wait_for(lambda: metric(fleet.backend, "petrel_director_backend_sessions",
                            protocol="imap") >= 1, what="director session count")
    assert metric(fleet.proxy, "petrel_login_result_total", protocol="imap",
                  result="ok") == ok_before + 1
    for phase in ("preamble", "auth", "director_lookup", "warden_connect", "backend_dial",
                  "backend_preamble"):
        assert metric(fleet.proxy, "petrel_login_phase_seconds_count", protocol="imap",
                      phase=phase) >= 1, phase
    m.logout()
    wait_for(lambda: metric(fleet.backend, "petrel_director_backend_sessions",
                            protocol="imap") == 0, what="session end counted")
    wait_for(lambda: not [x for x in who(fleet.proxy) if x["user"] == "alice"],
             what="proxy registration gone")
    # the relayed bytes are counted when the session ends (the FETCH brought MSG)
    assert metric(fleet.proxy, "petrel_imap_proxy_bytes_total",
                  direction="out") >= out_before + len(MSG)


def raw_imap(fleet, tls=False):
    s = socket.create_connection(fleet.addr("imap", tls), timeout=10,
                                 source_address=(CLIENT_IP, 0))
    if tls:
        s = tls_context().wrap_socket(s, server_hostname="localhost")
    f = s.makefile("rb")
    assert f.readline().startswith(b"* OK")
    return s, f


def read_tagged(f, tag):
    lines = []
    while True:
        line = f.readline()
        assert line, f"connection closed; got {lines}"
        lines.append(line)
        if line.startswith(tag + b" "):
            return lines


def test_imap_authenticate_plain_with_sasl_ir(fleet):
    s, f = raw_imap(fleet)
    ir = base64.b64encode(b"\0carol\0Carol-pass-19")
    s.sendall(b"a1 AUTHENTICATE PLAIN " + ir + b"\r\n")
    last = read_tagged(f, b"a1")[-1]
    assert last.startswith(b"a1 OK [CAPABILITY"), last
    s.sendall(b"a2 SELECT INBOX\r\n")
    assert read_tagged(f, b"a2")[-1].startswith(b"a2 OK")
    s.sendall(b"a3 LOGOUT\r\n")
    assert read_tagged(f, b"a3")[-1].startswith(b"a3 OK")
    s.close()


def test_imap_authenticate_login_through_continuations(fleet):
    m = SourceIMAP(*fleet.addr("imap"))
    answers = iter([b"dave", b"Dave-pass-23"])
    typ, _ = m.authenticate("LOGIN", lambda challenge: next(answers))
    assert typ == "OK"
    assert m.select("INBOX")[0] == "OK"
    m.logout()


def test_imap_starttls_and_implicit_tls(fleet):
    tls_before = metric(fleet.proxy, "petrel_login_phase_seconds_count", protocol="imap",
                        phase="tls_handshake")
    m = SourceIMAP(*fleet.addr("imap"))
    m.starttls(tls_context())
    assert m.login("erin", "Erin-pass-31")[0] == "OK"
    assert m.select("INBOX")[0] == "OK"
    m.logout()
    m = SourceIMAPSSL(*fleet.addr("imap", tls=True), ssl_context=tls_context())
    assert m.login("erin", "Erin-pass-31")[0] == "OK"
    assert m.select("INBOX")[0] == "OK"
    # the director hears the session as imaps
    wait_for(lambda: metric(fleet.backend, "petrel_director_backend_sessions",
                            protocol="imaps") == 1, what="imaps session counted")
    m.logout()
    assert metric(fleet.proxy, "petrel_login_phase_seconds_count", protocol="imap",
                  phase="tls_handshake") >= tls_before + 2


def test_starttls_injection_is_refused(fleet):
    ok_before = metric(fleet.proxy, "petrel_login_result_total", protocol="imap", result="ok")
    s, f = raw_imap(fleet)
    # A command pipelined behind STARTTLS in clear text must not run inside TLS.
    s.sendall(b"a STARTTLS\r\nb LOGIN erin Erin-pass-31\r\n")
    assert f.readline().startswith(b"a OK")
    t = tls_context().wrap_socket(s, server_hostname="localhost")
    t.settimeout(1.0)
    with pytest.raises(socket.timeout):
        t.recv(4096)  # nothing answers the injected LOGIN
    t.settimeout(10)
    t.sendall(b"c CAPABILITY\r\n")
    data = b""
    while b"c OK" not in data:
        chunk = t.recv(4096)
        assert chunk
        data += chunk
    assert b"b OK" not in data and b"b NO" not in data
    t.close()
    assert metric(fleet.proxy, "petrel_login_result_total", protocol="imap",
                  result="ok") == ok_before


def test_a_proxy_in_front_forwards_the_address_and_a_loop_is_refused(fleet):
    """A proxy in front of ours (in its login_trusted_networks) forwards the
    client's address with ID: it reaches the backend through both. Its hop
    count (x-proxy-ttl) is passed on less one; with no hop left the login is
    refused (proxies pointing at each other), as Dovecot does."""
    def upstream(ttl):
        s = socket.create_connection(fleet.addr("imap"), timeout=10,
                                     source_address=(UPSTREAM_PROXY, 0))
        f = s.makefile("rb")
        f.readline()
        s.sendall(b'u1 ID ("x-originating-ip" "192.0.2.9" "x-originating-port" "4711" '
                  b'"x-proxy-ttl" "%d")\r\n' % ttl)
        assert read_tagged(f, b"u1")[-1].startswith(b"u1 OK")
        s.sendall(b"u2 LOGIN carol Carol-pass-19\r\n")
        return s, f, read_tagged(f, b"u2")[-1]
    s, f, last = upstream(1)
    assert last.startswith(b"u2 NO [UNAVAILABLE]"), last
    assert "proxy loop" in fleet.proxy.stderr()
    s.close()
    s, f, last = upstream(4)
    assert last.startswith(b"u2 OK"), last
    found = wait_for(lambda: backend_session(fleet, "carol", "imap"), what="backend who")
    assert found["ip"] == "192.0.2.9", found
    s.sendall(b"u3 LOGOUT\r\n")
    read_tagged(f, b"u3")
    s.close()


def test_backend_refusing_the_login_is_backend_rejected(fleet):
    before = metric(fleet.proxy, "petrel_login_result_total", protocol="imap",
                    result="backend_rejected")
    m = SourceIMAP(*fleet.addr("imap"))
    with pytest.raises(imaplib.IMAP4.error) as e:
        m.login("bob", "Bob-proxy-pass-5")
    assert "AUTHENTICATIONFAILED" in str(e.value)
    assert metric(fleet.proxy, "petrel_login_result_total", protocol="imap",
                  result="backend_rejected") == before + 1
    # the session is still before login: another attempt is answered
    assert m.noop()[0] == "OK"
    m.shutdown()


def test_garbage_before_login_is_preamble_error_and_not_retried(fleet):
    labels = dict(protocol="imap")
    pre = metric(fleet.proxy, "petrel_login_result_total", result="preamble_error", **labels)
    retries = metric(fleet.proxy, "petrel_login_transient_retries_total", **labels)
    s, f = raw_imap(fleet)
    s.sendall(b"\x16\x03\x01garbage that is no command\r\n")
    assert b"BAD" in f.readline()
    s.sendall(b"x SELECT INBOX\r\n")
    assert b"BAD" in f.readline()
    s.close()
    wait_for(lambda: metric(fleet.proxy, "petrel_login_result_total", result="preamble_error",
                            **labels) == pre + 1, what="preamble_error counted once")
    assert metric(fleet.proxy, "petrel_login_transient_retries_total", **labels) == retries
    # ten of them close the connection, as Dovecot's imap-login does
    s, f = raw_imap(fleet)
    s.sendall(b"junk\r\n" * 10)
    lines = f.read()
    assert b"* BYE Too many invalid IMAP commands." in lines
    s.close()


def test_failed_tls_handshake_is_tls_error(fleet):
    before = metric(fleet.proxy, "petrel_login_result_total", protocol="imap",
                    result="tls_error")
    s = socket.create_connection(fleet.addr("imap", tls=True), timeout=10)
    s.sendall(b"a LOGIN plain text on the TLS port\r\n")
    s.settimeout(10)
    try:
        while s.recv(4096):
            pass
    except OSError:
        pass
    s.close()
    wait_for(lambda: metric(fleet.proxy, "petrel_login_result_total", protocol="imap",
                            result="tls_error") == before + 1, what="tls_error counted")


# ---------- ring events ----------

def logged_in(fleet, user, password):
    m = SourceIMAP(*fleet.addr("imap"))
    assert m.login(user, password)[0] == "OK"
    assert m.select("INBOX")[0] == "OK"
    return m


def routed_backend(fleet, user, after=0):
    logs = fleet.proxy.stderr()[after:]
    found = re.findall(r"routed session=\S+ user=" + re.escape(user) + r" backend=([0-9.]+):",
                       logs)
    return found[-1] if found else None


def wait_closed(m, within):
    """The proxied connection ends (a BYE then EOF) within `within` seconds."""
    start = time.monotonic()
    m.sock.settimeout(within + 1)
    data = b""
    try:
        while True:
            chunk = m.sock.recv(4096)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    return time.monotonic() - start, data


def test_director_kick_ends_the_session_within_a_second(fleet):
    m = logged_in(fleet, "carol", "Carol-pass-19")
    wait_for(lambda: metric(fleet.backend, "petrel_director_backend_sessions") >= 1,
             what="session counted")
    r = fleet.director("POST", "/api/director/users/carol/kick")
    assert r.status == 200, r
    took, data = wait_closed(m, 1.0)
    assert took < 1.0, took
    assert b"* BYE" in data and b"kicked" in data, data
    wait_for(lambda: metric(fleet.proxy, "petrel_login_sessions", protocol="imap") == 0,
             what="gauge back to 0")


def test_director_move_ends_the_session_and_the_next_login_lands_there(fleet):
    mark = len(fleet.proxy.stderr())
    m = logged_in(fleet, "dave", "Dave-pass-23")
    home = wait_for(lambda: routed_backend(fleet, "dave", mark), what="routed line")
    other = "127.0.0.2" if home == "127.0.0.1" else "127.0.0.1"
    r = fleet.director("POST", "/api/director/users/dave/move",
                       {"backend": f"{other}:{fleet.imap_port}"})
    assert r.status == 200, r
    took, data = wait_closed(m, 1.0)
    assert took < 1.0 and b"moved" in data, (took, data)
    mark = len(fleet.proxy.stderr())
    m = logged_in(fleet, "dave", "Dave-pass-23")
    assert wait_for(lambda: routed_backend(fleet, "dave", mark), what="routed again") == other
    m.logout()


def test_backend_flushed_ends_its_sessions(fleet):
    mark = len(fleet.proxy.stderr())
    m = logged_in(fleet, "erin", "Erin-pass-31")
    home = wait_for(lambda: routed_backend(fleet, "erin", mark), what="routed line")
    r = fleet.director("POST", f"/api/director/backends/{home}/flush")
    assert r.status in (200, 204), r
    took, data = wait_closed(m, 1.0)
    assert took < 1.0 and b"flushed" in data, (took, data)


def test_the_userdb_director_tag_picks_the_backend_group(fleet):
    """frank's userdb has director_tag=blue: the director answers from the
    backends tagged blue (only 127.0.0.4); untagged users never land there."""
    mark = len(fleet.proxy.stderr())
    m = logged_in(fleet, "frank", "Frank-pass-41")
    assert wait_for(lambda: routed_backend(fleet, "frank", mark), what="routed") == "127.0.0.4"
    m.logout()
    routed = re.findall(r"routed session=\S+ user=(\S+) backend=127\.0\.0\.4:", fleet.proxy.stderr())
    assert set(routed) == {"frank"}, routed


# ---------- POP3 ----------

def test_pop3_user_pass_retr_through_the_proxy(fleet):
    # a message to retrieve, put there over IMAP through the proxy
    m = logged_in(fleet, "alice", "Wonderland-7qX")
    assert m.append("INBOX", None, None, MSG)[0] == "OK"
    m.logout()
    p = SourcePOP3(*fleet.addr("pop3"), timeout=10)
    assert "STLS" in p.capa()
    assert p.user("alice").startswith(b"+OK")
    assert p.pass_("Wonderland-7qX").startswith(b"+OK")
    count, _ = p.stat()
    assert count >= 1
    _, lines, _ = p.retr(1)
    assert b"Subject: via proxy" in lines
    s = wait_for(lambda: backend_session(fleet, "alice", "pop3"), what="backend pop3 who")
    assert s["ip"] == CLIENT_IP
    wait_for(lambda: metric(fleet.backend, "petrel_director_backend_sessions",
                            protocol="pop3") == 1, what="pop3 session counted")
    p.quit()


def test_pop3_auth_plain_with_initial_response_and_tls(fleet):
    s = socket.create_connection(fleet.addr("pop3"), timeout=10, source_address=(CLIENT_IP, 0))
    f = s.makefile("rb")
    assert f.readline().startswith(b"+OK")
    ir = base64.b64encode(b"\0carol\0Carol-pass-19")
    s.sendall(b"AUTH PLAIN " + ir + b"\r\n")
    assert f.readline().startswith(b"+OK"), "AUTH PLAIN"
    s.sendall(b"STAT\r\n")
    assert f.readline().startswith(b"+OK ")
    s.sendall(b"QUIT\r\n")
    assert f.readline().startswith(b"+OK")
    s.close()
    p = SourcePOP3(*fleet.addr("pop3"), timeout=10)
    p.stls(tls_context())
    p.user("carol")
    assert p.pass_("Carol-pass-19").startswith(b"+OK")
    p.stat()
    p.quit()
    p = SourcePOP3SSL(*fleet.addr("pop3", tls=True), context=tls_context(), timeout=10)
    p.user("carol")
    assert p.pass_("Carol-pass-19").startswith(b"+OK")
    wait_for(lambda: metric(fleet.backend, "petrel_director_backend_sessions",
                            protocol="pop3s") == 1, what="pop3s session counted")
    p.quit()


def test_pop3_backend_rejected(fleet):
    before = metric(fleet.proxy, "petrel_login_result_total", protocol="pop3",
                    result="backend_rejected")
    p = SourcePOP3(*fleet.addr("pop3"), timeout=10)
    p.user("bob")
    with pytest.raises(poplib.error_proto):
        p.pass_("Bob-proxy-pass-5")
    assert metric(fleet.proxy, "petrel_login_result_total", protocol="pop3",
                  result="backend_rejected") == before + 1
    p.quit()


def test_pop3_kick_garbage_and_tls_error(fleet):
    p = SourcePOP3(*fleet.addr("pop3"), timeout=10)
    p.user("dave")
    assert p.pass_("Dave-pass-23").startswith(b"+OK")
    wait_for(lambda: metric(fleet.proxy, "petrel_login_sessions", protocol="pop3") == 1,
             what="pop3 session relayed")
    assert fleet.director("POST", "/api/director/users/dave/kick").status == 200
    start = time.monotonic()
    p.sock.settimeout(2)
    data = b""
    while True:
        chunk = p.sock.recv(4096)
        if not chunk:
            break
        data += chunk
    assert time.monotonic() - start < 1.0
    assert data.startswith(b"-ERR [SYS/TEMP] Disconnected: kicked"), data
    p.sock.close()
    pre = metric(fleet.proxy, "petrel_login_result_total", protocol="pop3",
                 result="preamble_error")
    s = socket.create_connection(fleet.addr("pop3"), timeout=10, source_address=(CLIENT_IP, 0))
    f = s.makefile("rb")
    f.readline()
    s.sendall(b"RETR 1\r\nNOSUCH\r\n")
    assert f.readline().startswith(b"-ERR") and f.readline().startswith(b"-ERR")
    s.close()
    wait_for(lambda: metric(fleet.proxy, "petrel_login_result_total", protocol="pop3",
                            result="preamble_error") == pre + 1, what="pop3 preamble_error")
    tls = metric(fleet.proxy, "petrel_login_result_total", protocol="pop3", result="tls_error")
    s = socket.create_connection(fleet.addr("pop3", tls=True), timeout=10)
    s.sendall(b"USER plain-text-on-the-tls-port\r\n")
    try:
        while s.recv(4096):
            pass
    except OSError:
        pass
    s.close()
    wait_for(lambda: metric(fleet.proxy, "petrel_login_result_total", protocol="pop3",
                            result="tls_error") == tls + 1, what="pop3 tls_error")


# ---------- transient retries ----------

def test_auth_paused_300ms_logs_in_after_retries(fleet):
    before = metric(fleet.proxy, "petrel_login_transient_retries_total", protocol="imap")
    unavailable = metric(fleet.proxy, "petrel_login_result_total", protocol="imap",
                         result="unavailable")
    m = SourceIMAP(*fleet.addr("imap"))
    fleet.authd.signal(signal.SIGSTOP)
    result = {}

    def login():
        try:
            result["r"] = m.login("erin", "Erin-pass-31")
        except Exception as e:  # noqa: BLE001 - reported below
            result["r"] = e
    t = threading.Thread(target=login)
    t.start()
    try:
        time.sleep(0.3)  # the outage itself, not a wait for something
    finally:
        fleet.authd.signal(signal.SIGCONT)
    t.join(10)
    assert result["r"][0] == "OK", result
    assert metric(fleet.proxy, "petrel_login_transient_retries_total",
                  protocol="imap") > before
    assert metric(fleet.proxy, "petrel_login_result_total", protocol="imap",
                  result="unavailable") == unavailable
    m.logout()


def test_auth_down_longer_is_unavailable_with_the_budget_exhausted(fleet):
    exhausted = metric(fleet.proxy, "petrel_login_transient_exhausted_total", protocol="imap",
                       stage="auth_dial")
    unavailable = metric(fleet.proxy, "petrel_login_result_total", protocol="imap",
                         result="unavailable")
    fleet.authd.stop()
    try:
        m = SourceIMAP(*fleet.addr("imap"))
        start = time.monotonic()
        with pytest.raises(imaplib.IMAP4.error) as e:
            m.login("erin", "Erin-pass-31")
        took = time.monotonic() - start
        assert "UNAVAILABLE" in str(e.value)
        # four retries 150 ms apart, then one clean answer
        assert 0.55 <= took < 5, took
        assert metric(fleet.proxy, "petrel_login_transient_exhausted_total", protocol="imap",
                      stage="auth_dial") == exhausted + 1
        assert metric(fleet.proxy, "petrel_login_result_total", protocol="imap",
                      result="unavailable") == unavailable + 1
        m.shutdown()
    finally:
        fleet.authd.start()


# ---------- back-pressure ----------

def vmrss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_client_that_stops_reading_does_not_grow_the_proxy(fleet):
    big = b"Subject: big\r\n\r\n" + (b"x" * 998 + b"\r\n") * 4000  # ~4 MB
    m = logged_in(fleet, "alice", "Wonderland-7qX")
    assert m.append("INBOX", None, None, big)[0] == "OK"
    typ, data = m.select("INBOX")
    n = int(data[0])
    before = vmrss_kib(fleet.proxy.pid)
    sent_before = metric(fleet.backend, "petrel_imap_bytes_total", direction="out")
    # 25 fetches of the 4 MB message (100 MB) and never a byte read
    m.sock.sendall(b"".join(b"f%d FETCH %d BODY.PEEK[]\r\n" % (i, n) for i in range(25)))
    # Until the backend can send no more: its output count stands still.
    last = [None, 0]

    def stalled():
        now = metric(fleet.backend, "petrel_imap_bytes_total", direction="out")
        last[1] = last[1] + 1 if now == last[0] else 0
        last[0] = now
        return last[1] >= 3
    wait_for(stalled, timeout=20, interval=0.2, what="the backend held back")
    moved = last[0] - sent_before
    assert 1 << 20 < moved < 40 << 20, moved  # some went through, the rest waits at the backend
    grown = vmrss_kib(fleet.proxy.pid) - before
    assert grown < 16 * 1024, f"proxy grew by {grown} KiB"
    m.shutdown()


# ---------- backend TLS, shutdown ----------

def test_backend_tls_with_the_internal_ca_and_shutdown_says_bye(petreld, pki, tmp_path):
    """login.backend_tls: the proxy dials the backend's implicit-TLS port and
    checks its certificate against login.backend_tls_ca_file; a proxy that
    does not trust the backend's CA never logs in there. A proxy stopping
    ends its relayed sessions with a BYE."""
    (tmp_path / "passwd").write_text(PASSWD)
    auth, plain, tls = free_port(), free_port(), free_port()
    backend = petreld({
        "components": ["auth", "imap", "director"],
        "mail": {"home": str(tmp_path / "mail" / "%u")},
        "auth": {"listen": [f"127.0.0.1:{auth}"], "failure_delay": "0s",
                 "passdb": {"driver": "passwd-file", "path": str(tmp_path / "passwd")}},
        "imap": {"listen": [f"127.0.0.1:{plain}"], "listen_tls": [f"127.0.0.1:{tls}"],
                 "tls_cert_file": str(pki / "server.pem"),
                 "tls_key_file": str(pki / "server.key"),
                 "auth_addr": f"127.0.0.1:{auth}", "workers": 1},
        "director": {"api": {"listen": f"127.0.0.1:{free_port()}"},
                     "ring": {"listen": f"127.0.0.1:{free_port()}"},
                     "backends": [{"ip": "127.0.0.1", "port": plain}]},
    }, env={"DIRECTOR_RING_SECRET": SECRET})

    def proxy(ca_file, retries):
        return petreld({
            "components": ["login"],
            "login": {"directors": [backend.config["director"]["ring"]["listen"]],
                      "ring_secret_env": "DIRECTOR_RING_SECRET",
                      "transient_retries": retries,
                      "backend_tls": True, "backend_tls_ca_file": ca_file,
                      "imap": {"listen": [f"127.0.0.1:{free_port()}"],
                               "auth_addr": f"127.0.0.1:{auth}", "backend_port": tls}},
        }, env={"DIRECTOR_RING_SECRET": SECRET})

    good = proxy(str(pki / "ca.pem"), 2)
    m = imaplib.IMAP4(*good.config["login"]["imap"]["listen"][0].rsplit(":", 1))
    assert m.login("alice", "Wonderland-7qX")[0] == "OK"
    assert m.select("INBOX")[0] == "OK"
    # the backend saw a TLS session (its log line says tls=yes)
    assert wait_for(lambda: re.search(r"logged in.*user=alice .*tls=yes", backend.stderr()),
                    what="backend login over TLS")
    # a proxy with another CA: the handshake fails, the client gets one clean answer
    bad = proxy(str(pki / "client.pem"), 0)
    m2 = imaplib.IMAP4(*bad.config["login"]["imap"]["listen"][0].rsplit(":", 1))
    with pytest.raises(imaplib.IMAP4.error) as e:
        m2.login("alice", "Wonderland-7qX")
    assert "UNAVAILABLE" in str(e.value)
    assert "certificate verify failed" in bad.stderr()
    m2.shutdown()
    # shutdown: the relayed session is told goodbye, the proxy exits cleanly
    good.stop()
    m.sock.settimeout(5)
    data = b""
    while True:
        chunk = m.sock.recv(4096)
        if not chunk:
            break
        data += chunk
    assert b"* BYE" in data, data
