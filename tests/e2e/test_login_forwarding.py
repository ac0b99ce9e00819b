"""A login proxy passes on the client's real address to the backend: IMAP ID
fields (x-originating-ip, x-originating-port, x-session-id), POP3 XCLIENT
and LMTP XCLIENT, as Dovecot's proxies send them. The backend believes them
only from `login_trusted_networks` (per section, empty by default): there
the warden's `who`, the logs and the Received header show the forwarded
address; from anywhere else a client cannot forge its address (IMAP ignores
the fields, POP3 and LMTP refuse XCLIENT)."""

import imaplib
import poplib
import re
import smtplib

import pytest

from conftest import free_port, wait_for

# imaplib has no ID command of its own.
imaplib.Commands.setdefault("ID", ("NONAUTH", "AUTH", "SELECTED"))

PASSWD = "alice:{PLAIN}wonderland:1001:1001\n"
MSG = (b"From: sender@example.net\r\nTo: alice@example.com\r\nSubject: fwd\r\n"
       b"Message-ID: <fwd-1@example.net>\r\n\r\nhello\r\n")


def config(tmp_path, trusted):
    passwd = tmp_path / "passwd"
    passwd.write_text(PASSWD)
    auth_port, warden_port = free_port(), free_port()
    nets = ["127.0.0.0/8"] if trusted else []
    login = {"auth_addr": f"127.0.0.1:{auth_port}", "warden_addr": f"127.0.0.1:{warden_port}"}
    if trusted:
        login["login_trusted_networks"] = nets
    cfg = {
        "components": ["backend-api", "auth", "imap", "pop3", "lmtp", "warden"],
        "log_level": "debug",
        "mail": {"home": str(tmp_path / "mail" / "%u")},
        "auth": {"listen": [f"127.0.0.1:{auth_port}"],
                 "passdb": {"driver": "passwd-file", "path": str(passwd)}},
        "warden_service": {"listen": [f"127.0.0.1:{warden_port}"]},
        "imap": {"listen": [f"127.0.0.1:{free_port()}"], **login},
        "pop3": {"listen": [f"127.0.0.1:{free_port()}"], **login},
        "lmtp": {"listen": [f"127.0.0.1:{free_port()}"], "auth_addr": f"127.0.0.1:{auth_port}",
                 "username_format": "%n", "hostname": "mx.test.example"},
    }
    if trusted:
        cfg["lmtp"]["login_trusted_networks"] = nets
    return cfg


def addr(d, section):
    host, port = d.config[section]["listen"][0].rsplit(":", 1)
    return host, int(port)


def sessions(d):
    r = d.post("backend", "/api/backend/who", {})
    assert r.status == 200, r
    return [s for g in r.json()["groups"] for s in g["sessions"]]


def one_session(d):
    return wait_for(lambda: (lambda s: s[0] if len(s) == 1 else None)(sessions(d)),
                    what="one session in who")


def imap_id(m, *pairs):
    args = " ".join(f'"{p}"' for p in pairs)
    typ, data = m._simple_command("ID", f"({args})")
    assert typ == "OK", (typ, data)


@pytest.fixture
def trusted(petreld, tmp_path):
    return petreld(config(tmp_path, True))


@pytest.fixture
def untrusted(petreld, tmp_path):
    return petreld(config(tmp_path, False))


def test_imap_id_forwards_the_client_address_from_a_trusted_proxy(trusted):
    m = imaplib.IMAP4(*addr(trusted, "imap"))
    imap_id(m, "x-originating-ip", "192.0.2.7", "x-originating-port", "40123",
            "x-session-id", "proxy-Sess1")
    m.login("alice", "wonderland")
    s = one_session(trusted)
    assert s["ip"] == "192.0.2.7" and s["service"] == "imap", s
    # The backend's log lines carry the proxy's session id and the real peer.
    wait_for(lambda: re.search(r"logged in.*session=proxy-Sess1.*192\.0\.2\.7:40123",
                               trusted.stderr()), what="the login line")
    # After login ID changes nothing (Dovecot takes the fields before login only).
    imap_id(m, "x-originating-ip", "198.51.100.1")
    assert one_session(trusted)["ip"] == "192.0.2.7"
    m.logout()


def test_imap_bad_forwarded_values_are_ignored(trusted):
    m = imaplib.IMAP4(*addr(trusted, "imap"))
    imap_id(m, "x-originating-ip", "not-an-address", "x-session-id", "bad id")
    m.login("alice", "wonderland")
    assert one_session(trusted)["ip"] == "127.0.0.1"
    assert "forwarded field ignored" in trusted.stderr()
    m.logout()


def test_imap_id_from_an_untrusted_peer_cannot_forge_the_address(untrusted):
    m = imaplib.IMAP4(*addr(untrusted, "imap"))
    imap_id(m, "x-originating-ip", "192.0.2.7", "x-session-id", "forged")
    m.login("alice", "wonderland")
    assert one_session(untrusted)["ip"] == "127.0.0.1"
    assert "session=forged" not in untrusted.stderr()
    m.logout()


def test_pop3_xclient_from_a_trusted_proxy(trusted):
    p = poplib.POP3(*addr(trusted, "pop3"), timeout=10)
    assert p.getwelcome().startswith(b"+OK [XCLIENT] ")
    assert "XCLIENT" in p.capa()
    assert p._shortcmd("XCLIENT ADDR=IPV6:2001:db8::7 PORT=995 SESSION=pop+fwd").startswith(
        b"+OK")
    p.user("alice")
    p.pass_("wonderland")
    s = one_session(trusted)
    assert s["ip"] == "2001:db8::7" and s["service"] == "pop3", s
    wait_for(lambda: "session=pop+fwd" in trusted.stderr(), what="the forwarded session id")
    p.quit()


def test_pop3_xclient_errors(trusted, untrusted):
    p = poplib.POP3(*addr(trusted, "pop3"), timeout=10)
    for bad in ("XCLIENT", "XCLIENT ADDR=999.1.1.1", "XCLIENT PORT=0", "XCLIENT ADDR"):
        with pytest.raises(poplib.error_proto, match="Invalid XCLIENT"):
            p._shortcmd(bad)
    p.user("alice")
    with pytest.raises(poplib.error_proto, match="before USER"):
        p._shortcmd("XCLIENT ADDR=192.0.2.1")
    p.quit()
    q = poplib.POP3(*addr(untrusted, "pop3"), timeout=10)
    assert b"XCLIENT" not in q.getwelcome()
    assert "XCLIENT" not in q.capa()
    with pytest.raises(poplib.error_proto, match="login_trusted_networks"):
        q._shortcmd("XCLIENT ADDR=192.0.2.1")
    q.user("alice")
    q.pass_("wonderland")
    assert one_session(untrusted)["ip"] == "127.0.0.1"
    q.quit()


def delivered(d, tmp_path):
    files = list((tmp_path / "mail" / "alice" / "Maildir").glob("*/*"))
    files = [f for f in files if f.parent.name in ("new", "cur") and f.is_file()]
    return files[0].read_bytes() if len(files) == 1 else None


def test_lmtp_xclient_from_a_trusted_proxy(trusted, tmp_path):
    c = smtplib.LMTP(*addr(trusted, "lmtp"), timeout=10)
    code, text = c.ehlo("proxy.test.example")
    assert code == 250 and b"XCLIENT ADDR PORT SESSION TTL" in text
    # A new greeting, then the client starts over with LHLO (Postfix's XCLIENT).
    code, text = c.docmd("XCLIENT", "ADDR=192.0.2.9 PORT=2525 SESSION=lmtpFwd1 HELO=mx.example")
    assert code == 220 and b"mx.test.example" in text, (code, text)
    code, _ = c.docmd("MAIL", "FROM:<sender@example.net>")
    assert code == 503
    c.ehlo_resp = None
    assert c.ehlo("proxy.test.example")[0] == 250
    assert c.sendmail("sender@example.net", ["alice@example.com"], MSG) == {}
    c.quit()
    stored = wait_for(lambda: delivered(trusted, tmp_path), what="the delivery")
    assert re.search(rb"Received: from proxy\.test\.example \(192\.0\.2\.9\)\r\n"
                     rb"\tby mx\.test\.example \(Petrel\) with LMTP id lmtpFwd1\r\n", stored), \
        stored[:300]


def test_lmtp_xclient_refused_from_an_untrusted_peer(untrusted, tmp_path):
    c = smtplib.LMTP(*addr(untrusted, "lmtp"), timeout=10)
    code, text = c.ehlo("client.test.example")
    assert code == 250 and b"XCLIENT" not in text
    code, _ = c.docmd("XCLIENT", "ADDR=192.0.2.9")
    assert code == 550
    assert c.sendmail("sender@example.net", ["alice@example.com"], MSG) == {}
    c.quit()
    stored = wait_for(lambda: delivered(untrusted, tmp_path), what="the delivery")
    assert b"(127.0.0.1)" in stored and b"192.0.2.9" not in stored


def test_lmtp_xclient_errors(trusted):
    c = smtplib.LMTP(*addr(trusted, "lmtp"), timeout=10)
    c.ehlo("proxy.test.example")
    assert c.docmd("XCLIENT")[0] == 501
    assert c.docmd("XCLIENT", "ADDR=1.2.3")[0] == 501
    assert c.docmd("XCLIENT", "SESSION=a+2")[0] == 501
    assert c.docmd("MAIL", "FROM:<s@example.net>")[0] == 250
    assert c.docmd("XCLIENT", "ADDR=192.0.2.1")[0] == 503
    c.quit()


def test_config_rejects_a_bad_trusted_network(petreld, tmp_path):
    cfg = config(tmp_path, True)
    cfg["imap"]["login_trusted_networks"] = ["192.0.2.0/33"]
    d = petreld(cfg, wait=False)
    assert d.wait() != 0
    assert re.search(r":\d+: imap\.login_trusted_networks", d.stderr()), d.stderr()
