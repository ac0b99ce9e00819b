"""The README's run command gives a working mail server: petreld started on
examples/standalone.yaml as it is in the repository (only its fixed loopback
ports are swapped for free ones, and the TLS certificate comes from the
test CA instead of scripts/run-standalone.sh). The demo user (demo / demo)
gets mail over LMTP, reads it over IMAP and POP3, shows up in `who`, the
monitor probes the backend the director routes to, and the operator commands
of the README work against it."""

import imaplib
import os
import poplib
import re
import shutil
import signal
import ssl
import subprocess

import pytest

from conftest import (PETRELCTL, PETRELD, ROOT, base_env, free_port, http_request, run_petrelctl,
                      sanitizer_findings, wait_for)


class Standalone:
    def __init__(self, workdir, pki):
        self.workdir = workdir
        text = (ROOT / "examples" / "standalone.yaml").read_text()
        self.ports = {}

        def swap(m):
            fixed = int(m.group(1))
            self.ports.setdefault(fixed, free_port())
            return f"127.0.0.1:{self.ports[fixed]}"

        text = re.sub(r"127\.0\.0\.1:(\d+)", swap, text)
        # The director's backend entry names the IMAP port on its own.
        text = re.sub(r"port: (\d+)",
                      lambda m: f"port: {self.ports.get(int(m.group(1)), int(m.group(1)))}", text)
        # The monitor's file (named by the example) holds the director's
        # ring address and the IMAP TLS port.
        monitor = (ROOT / "examples" / "monitor.yaml").read_text()
        monitor = re.sub(r"127\.0\.0\.1:(\d+)", swap, monitor)
        monitor = re.sub(r"^imap_port: (\d+)",
                         lambda m: f"imap_port: {self.ports[int(m.group(1))]}", monitor,
                         flags=re.M)
        # Tests run as root in CI; the example is meant for an ordinary user.
        text += "\nallow_root: true\n"
        (workdir / "examples").mkdir()
        shutil.copy(ROOT / "examples" / "standalone-passwd", workdir / "examples")
        (workdir / "examples" / "monitor.yaml").write_text(monitor)
        (workdir / "var" / "tls").mkdir(parents=True)
        # The ring secret scripts/run-standalone.sh writes on first start.
        (workdir / "var" / "ring.secret").write_text(os.urandom(32).hex() + "\n")
        shutil.copy(pki / "server.pem", workdir / "var" / "tls" / "imap.pem")
        shutil.copy(pki / "server.key", workdir / "var" / "tls" / "imap.key")
        self.config = workdir / "standalone.yaml"
        self.config.write_text(text)
        self.stderr_path = workdir / "petreld.stderr"
        self.ca = str(pki / "ca.pem")
        self.proc = None

    def addr(self, fixed_port):
        return f"127.0.0.1:{self.ports[fixed_port]}"

    def port(self, fixed_port):
        return self.ports[fixed_port]

    def start(self):
        self._err = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen([str(PETRELD), "-c", str(self.config)],
                                     stdin=subprocess.DEVNULL, stdout=self._err,
                                     stderr=self._err, env=base_env(), cwd=self.workdir)

        def ready():
            assert self.proc.poll() is None, self.stderr()
            try:
                r = http_request(self.addr(8080), "GET", "/readyz", timeout=1)
            except OSError:
                return False
            return r.status == 200 and r.json()["ready"]

        wait_for(ready, timeout=30, what="standalone petreld ready")
        return self

    def stderr(self):
        return self.stderr_path.read_text(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(30)
        self._err.close()
        text = self.stderr()
        assert not sanitizer_findings(text), text
        assert rc == 0, text

    def ctl(self, *args):
        env = {"PETREL_BACKEND_URL": f"http://{self.addr(9105)}",
               "PETREL_AUTH_ADDR": self.addr(10200)}
        return run_petrelctl(list(args), env=env)


@pytest.fixture
def standalone(tmp_path, pki):
    s = Standalone(tmp_path, pki).start()
    yield s
    s.stop()


def imap_login(s, user="demo", password="demo"):
    ctx = ssl.create_default_context(cafile=s.ca)
    m = imaplib.IMAP4_SSL("127.0.0.1", s.port(10993), ssl_context=ctx)
    m.login(user, password)
    return m


def pop3_login(s):
    p = poplib.POP3("127.0.0.1", s.port(10110))
    p.stls(context=ssl.create_default_context(cafile=s.ca))
    p.user("demo")
    p.pass_("demo")
    return p


def test_every_component_of_the_example_is_up(standalone):
    r = http_request(standalone.addr(8080), "GET", "/readyz")
    checks = {c["name"]: c["ok"] for c in r.json()["checks"]}
    assert checks and all(checks.values()), checks
    started = [ln for ln in standalone.stderr().splitlines()
               if "component=petreld msg=started" in ln]
    assert started, standalone.stderr()
    for component in ("imap=127.0.0.1", "pop3=127.0.0.1", "lmtp=127.0.0.1", "warden=127.0.0.1",
                      "auth=127.0.0.1", "director=", "monitor=", "quota_status=127.0.0.1",
                      "login=127.0.0.1"):
        assert component in started[0], started[0]
    assert standalone.ctl("backend", "health").returncode == 0


def test_demo_user_reads_mail_over_imap_and_pop3_and_shows_in_who(standalone):
    msg = (b"From: Operator <ops@example.org>\r\nTo: demo@example.org\r\n"
           b"Subject: welcome\r\n\r\nHello demo.\r\n.dot line\r\n")
    m = imap_login(standalone)
    typ, data = m.append("INBOX", None, None, msg)
    assert typ == "OK", data
    p = pop3_login(standalone)
    count, _ = p.stat()
    assert count == 1
    _, lines, _ = p.retr(1)
    assert b"\r\n".join(lines) + b"\r\n" == msg
    m.select("INBOX")
    typ, data = m.fetch("1", "(BODY.PEEK[])")
    assert data[0][1] == msg

    # Both sessions are registered with the warden.
    def both():
        body = http_request(standalone.addr(9105), "POST", "/api/backend/who/count",
                            body={"by": "protocol"}).json()
        counts = body.get("by_protocol", {})
        return (counts.get("imap"), counts.get("pop3"), body.get("total")) == (1, 1, 2)
    wait_for(both, timeout=5, what="imap and pop3 sessions in who")
    out = standalone.ctl("backend", "who", "--user", "demo")
    assert out.returncode == 0, out.stderr
    assert "demo" in out.stdout and "imap" in out.stdout and "pop3" in out.stdout, out.stdout
    p.quit()
    m.logout()

    def gone():
        body = http_request(standalone.addr(9105), "POST", "/api/backend/who/count",
                            body={}).json()
        return body["total"] == 0
    wait_for(gone, timeout=5, what="sessions cleared after logout")


def test_the_login_proxy_routes_the_demo_user_through_the_director(standalone):
    """The example's login proxy on 11143/11993 (IMAP) and 11110/11995 (POP3)
    asks the example's director and relays to the local backend, which
    registers the session once, with the client's own address."""
    ctx = ssl.create_default_context(cafile=standalone.ca)
    m = imaplib.IMAP4("127.0.0.1", standalone.port(11143))
    m.starttls(ssl_context=ctx)
    typ, data = m.login("demo", "demo")
    assert typ == "OK" and b"[CAPABILITY IMAP4rev1" in data[0], data
    assert m.select("INBOX")[0] == "OK"
    m2 = imaplib.IMAP4_SSL("127.0.0.1", standalone.port(11993), ssl_context=ctx)
    assert m2.login("demo", "demo")[0] == "OK"
    p = poplib.POP3_SSL("127.0.0.1", standalone.port(11995), context=ctx)
    p.user("demo")
    assert p.pass_("demo").startswith(b"+OK")
    p.stat()

    def counted():
        body = http_request(standalone.addr(9105), "POST", "/api/backend/who/count",
                            body={"by": "protocol"}).json()
        counts = body.get("by_protocol", {})
        return (counts.get("imap"), counts.get("pop3"), body.get("total")) == (2, 1, 3)
    wait_for(counted, timeout=5, what="proxied sessions in who")
    text = http_request(standalone.addr(8080), "GET", "/metrics").body.decode()
    assert 'petrel_login_sessions{protocol="imap"} 2' in text, text
    assert 'petrel_login_result_total{protocol="pop3",result="ok"} 1' in text
    p.quit()
    m2.logout()
    m.logout()
    # the README's curl line, through the proxy
    out = subprocess.run(["curl", "-sS", "--cacert", standalone.ca,
                          f"imaps://127.0.0.1:{standalone.port(11993)}/INBOX", "-u", "demo:demo"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr


def test_demo_password_checked_by_the_auth_service(standalone):
    proc = subprocess.run([str(PETRELCTL), "auth", "test", "demo", "--password-stdin"],
                          input="demo\n", capture_output=True, text=True,
                          env=base_env({"PETREL_AUTH_ADDR": standalone.addr(10200)}), timeout=30)
    assert proc.returncode == 0, proc.stderr
    with pytest.raises(poplib.error_proto):
        p = poplib.POP3_SSL("127.0.0.1", standalone.port(10995),
                            context=ssl.create_default_context(cafile=standalone.ca))
        p.user("demo")
        p.pass_("not the password")


def test_director_routes_the_demo_user_to_the_local_backend(standalone):
    env = {"PETREL_ADMIN_URL": f"http://{standalone.addr(9103)}"}
    out = run_petrelctl(["director", "status"], env=env)
    assert out.returncode == 0, out.stderr
    assert "127.0.0.1" in out.stdout and str(standalone.port(10143)) in out.stdout, out.stdout
    r = http_request(standalone.addr(9103), "GET", "/api/director/map?user=demo")
    assert r.status == 200, r
    body = r.json()
    assert (body["backend"], body["port"]) == ("127.0.0.1", standalone.port(10143)), body


def test_mail_delivered_over_lmtp_is_read_back_over_imap_and_pop3(standalone):
    body = (b"From: Sender <sender@example.net>\r\nTo: demo@example.org\r\n"
            b"Subject: by lmtp\r\n\r\nDelivered by swaks.\r\n")
    out = subprocess.run(
        ["swaks", "--protocol", "LMTP", "--server", standalone.addr(10024),
         "--from", "sender@example.net", "--to", "demo@example.org", "--data", "-",
         "--suppress-data"],
        # swaks ends the data with CRLF "." CRLF itself.
        input=body[:-2], capture_output=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert b"250 2.0.0 <demo@example.org>" in out.stdout, out.stdout

    m = imap_login(standalone)
    m.select("INBOX", readonly=True)
    typ, data = m.fetch("1", "(BODY.PEEK[])")
    assert typ == "OK", data
    stored = data[0][1]
    # The delivery adds trace headers in front; the message follows byte for byte.
    assert stored.startswith(b"Return-Path: <sender@example.net>\r\n"), stored[:200]
    assert b"Delivered-To: demo@example.org\r\n" in stored.split(b"\r\n\r\n", 1)[0]
    assert stored.endswith(body), stored
    m.logout()
    p = pop3_login(standalone)
    _, lines, _ = p.retr(1)
    assert b"\r\n".join(lines) + b"\r\n" == stored
    p.quit()


def test_monitor_probes_the_backend_and_the_director_keeps_it_up(standalone):
    def probed():
        text = http_request(standalone.addr(8080), "GET", "/metrics").body.decode()
        ok = [ln for ln in text.splitlines()
              if ln.startswith("petrel_monitor_probes_total")
              and 'protocol="imap"' in ln and 'result="ok"' in ln]
        connected = [ln for ln in text.splitlines()
                     if ln.startswith("petrel_monitor_director_connected")]
        return (ok and float(ok[0].split()[-1]) >= 1
                and connected and connected[0].split()[-1] == "1")
    wait_for(probed, timeout=20, what="a successful monitor probe of the standalone IMAP")
    env = {"PETREL_ADMIN_URL": f"http://{standalone.addr(9103)}"}
    out = run_petrelctl(["director", "status"], env=env)
    assert out.returncode == 0, out.stderr
    row = [ln for ln in out.stdout.splitlines() if str(standalone.port(10143)) in ln]
    assert row and " up " in row[0], out.stdout


def test_quota_status_answers_postfix_for_the_demo_user(standalone):
    """Postfix's check_policy_service inet:127.0.0.1:10240 as the example documents it."""
    import socket
    with socket.create_connection(("127.0.0.1", standalone.port(10240)), timeout=10) as c:
        c.sendall(b"request=smtpd_access_policy\nprotocol_state=RCPT\n"
                  b"recipient=demo@example.org\nsize=1000\n\n"
                  b"request=smtpd_access_policy\nprotocol_state=RCPT\n"
                  b"recipient=nobody@example.org\n\n")
        data = b""
        while data.count(b"\n\n") < 2:
            chunk = c.recv(4096)
            assert chunk, data
            data += chunk
    assert data == b"action=DUNNO\n\naction=REJECT Unknown user\n\n"


def test_quota_on_and_mirrored_into_the_default_dict(standalone):
    """quota.enabled with the demo user's *:storage=1G, and the mirror into
    the `default` dict that the example configures."""
    import smtplib
    with smtplib.LMTP("127.0.0.1", standalone.port(10024), timeout=30) as c:
        c.ehlo("client.test")
        assert c.mail("sender@example.net")[0] == 250
        assert c.rcpt("demo@example.org")[0] == 250
        assert c.data(b"Subject: q\r\n\r\nquota\r\n")[0] == 250
    out = standalone.ctl("--json", "backend", "quota", "show", "demo")
    assert out.returncode == 0, out.stderr
    import json
    show = json.loads(out.stdout)
    assert show["storage"]["limit"] == 1 << 30 and show["messages"]["used"] == 1, show
    assert show["storage"]["used"] > 0
    out = standalone.ctl("--json", "backend", "quota", "clone", "list")
    assert json.loads(out.stdout) == {"backends": ["default"]}, out.stdout
    # The end of an IMAP session writes the mirror at once (no 10 s wait).
    m = imap_login(standalone)
    m.logout()

    def mirrored():
        out = standalone.ctl("--json", "backend", "quota", "clone", "get", "default", "demo")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)["storage"] == show["storage"]["used"]
    wait_for(mirrored, timeout=5, what="demo's usage in the default dict")


def test_demo_shares_a_folder_with_demo2_through_the_shared_namespace(standalone):
    demo = imap_login(standalone)
    assert demo.create("Work")[0] == "OK"
    assert demo.append("Work", None, None, b"Subject: shared\r\n\r\nhello\r\n")[0] == "OK"
    assert demo._simple_command("SETACL", "Work", "demo2", "lr")[0] == "OK"
    other = imap_login(standalone, "demo2", "demo2")
    typ, data = other.namespace()
    assert data == [b'(("" "/")) (("shared/" "/")) (("Public/" "/"))']
    typ, data = other.list('""', "shared/*")
    assert data == [b'(\\Noselect \\HasChildren) "/" "shared/demo"',
                    b'(\\HasNoChildren) "/" "shared/demo/Work"'], data
    assert other.select("shared/demo/Work", readonly=True) == ("OK", [b"1"])
    typ, data = other.fetch("1", "(BODY.PEEK[TEXT])")
    assert data[0][1] == b"hello\r\n"
    other.logout()
    demo.logout()
