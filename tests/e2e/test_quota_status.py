"""quota-status, the Postfix policy service of document 3: a mail server asks
at RCPT whether a recipient can take a message, and gets DUNNO, the over-quota
reply, or the unknown-user reply.

Usage is real: messages are delivered to the users over LMTP first (smtplib),
then the policy service is asked over raw sockets speaking Postfix's policy
delegation protocol (TCP and a Unix socket): over/under quota with and
without size=, the delivery grace, quota_mail_size, an unknown user, a
folder marked ignore reached through the recipient detail, a user with a
bad rule and an auth service that is down (DUNNO), pipelined requests
answered in order, a malformed request closing the connection, and the
petrel_quota_status_requests_total metric. Finally a real Postfix (Debian's,
started by the test on loopback with its own directories) with
check_policy_service pointing at quota-status rejects an over-quota recipient
at RCPT with the configured reply and delivers to an under-quota one over
LMTP to Petrel."""

import imaplib
import smtplib
import socket
import time

import pytest

import postfix_mta
from conftest import free_port, http_request, wait_for

PASSWD = ("alice:{PLAIN}a:1001:1001::::userdb_quota_rule=*:storage=3000\n"
          "bob:{PLAIN}b:1002:1002::::userdb_quota_rule=*:storage=50K\n"
          "carol:{PLAIN}c:1003:1003::::userdb_quota_rule=*:messages=2 "
          "userdb_quota_rule2=Spam:ignore\n"
          "dave:{PLAIN}d:1004:1004\n"
          "erin:{PLAIN}e:1005:1005::::userdb_quota_rule=*:storage=lots\n")


def message(n, size):
    head = (f"From: s@example.net\r\nTo: x@example.org\r\nSubject: m{n}\r\n"
            f"Message-ID: <q{n}@example.net>\r\n\r\n").encode()
    return head + b"x" * (size - len(head) - 2) + b"\r\n"


def config(tmp_path, auth_port=None, extra_quota=None):
    passwd = tmp_path / "passwd"
    passwd.write_text(PASSWD)
    (tmp_path / "var").mkdir(exist_ok=True)
    auth_port = auth_port or free_port()
    qs_port = free_port()
    quota = {
        "quota_storage_grace": "1000",
        "quota_mail_size": "100K",
        "quota_status_toolarge": "552 5.3.4 Message too big for quota",
        "quota_status": {"listen": [f"127.0.0.1:{qs_port}",
                                    f"unix:{tmp_path}/var/quota-status.sock"],
                         "auth_addr": f"127.0.0.1:{auth_port}",
                         "username_format": "%n"},
    }
    quota.update(extra_quota or {})
    return {
        "components": ["auth", "lmtp", "quota-status"],
        "mail": {"home": str(tmp_path / "mail" / "%u"), "fsync": "never"},
        "auth": {"listen": [f"127.0.0.1:{auth_port}"],
                 "passdb": {"driver": "passwd-file", "path": str(passwd)}},
        "lmtp": {"listen": [f"127.0.0.1:{free_port()}"],
                 "auth_addr": f"127.0.0.1:{auth_port}", "username_format": "%n"},
        "quota": quota,
    }


def lmtp_addr(d):
    host, port = d.config["lmtp"]["listen"][0].rsplit(":", 1)
    return host, int(port)


def qs_addr(d):
    host, port = d.config["quota"]["quota_status"]["listen"][0].rsplit(":", 1)
    return host, int(port)


def deliver(d, rcpt, msg):
    with smtplib.LMTP(*lmtp_addr(d), timeout=30) as c:
        c.ehlo("client.test")
        assert c.mail("s@example.net")[0] == 250
        code, text = c.rcpt(rcpt)
        assert code == 250, text
        code, text = c.data(msg)
        assert code == 250, text


def request(recipient=None, size=None, state="RCPT"):
    lines = ["request=smtpd_access_policy", f"protocol_state={state}", "protocol_name=ESMTP",
             "client_address=192.0.2.1", "sender=s@example.net"]
    if recipient is not None:
        lines.append(f"recipient={recipient}")
    if size is not None:
        lines.append(f"size={size}")
    return ("\n".join(lines) + "\n\n").encode()


def read_answers(sock, n):
    buf = b""
    while buf.count(b"\n\n") < n:
        chunk = sock.recv(65536)
        if not chunk:
            break
        buf += chunk
    parts = buf.split(b"\n\n")
    return [p.decode() for p in parts[:n]]


def ask(d, recipient=None, size=None, unix=False):
    if unix:
        s = socket.socket(socket.AF_UNIX)
        s.connect(d.config["quota"]["quota_status"]["listen"][1][len("unix:"):])
    else:
        s = socket.create_connection(qs_addr(d), timeout=10)
    with s:
        s.settimeout(10)
        s.sendall(request(recipient, size))
        (answer,) = read_answers(s, 1)
    return answer


def metric(d, result):
    r = http_request(d.telemetry, "GET", "/metrics")
    for line in r.body.decode().splitlines():
        if line.startswith(f'petrel_quota_status_requests_total{{result="{result}"}}'):
            return float(line.split()[-1])
    return 0.0


@pytest.fixture
def qsd(petreld, tmp_path):
    d = petreld(config(tmp_path))
    # alice: limit 3000 + 1000 grace at delivery; 2 x 1500 = 3000 bytes used.
    deliver(d, "alice@example.org", message(1, 1500))
    deliver(d, "alice@example.org", message(2, 1500))
    # carol: message limit 2, two messages in INBOX, a Spam folder ignored.
    deliver(d, "carol@example.org", message(3, 500))
    deliver(d, "carol@example.org", message(4, 500))
    spam = tmp_path / "mail" / "carol" / "Maildir" / ".Spam"
    for sub in ("cur", "new", "tmp"):
        (spam / sub).mkdir(parents=True)
    (spam / "maildirfolder").write_text("")
    return d


def used(d, user):
    """Bytes of the user's INBOX as the files on disk say (LMTP adds trace
    headers, so this is more than what was sent)."""
    root = d.workdir / "mail" / user / "Maildir"
    return sum(f.stat().st_size for sub in ("new", "cur") for f in (root / sub).iterdir())


def test_answers_by_usage_limit_and_size(qsd):
    d = qsd
    # alice: limit 3000 + 1000 grace at delivery; what is left fits, a byte more does not.
    left = 4000 - used(d, "alice")
    assert 0 < left < 1000
    assert ask(d, "alice@example.org", left) == "action=DUNNO"
    assert ask(d, "alice@example.org", left + 1) == "action=552 5.2.2 Mailbox is full"
    assert ask(d, "alice@example.org") == "action=DUNNO"  # size unknown, still below
    deliver(d, "alice@example.org", message(5, 1200))   # LMTP does not enforce yet
    assert used(d, "alice") >= 4000
    assert ask(d, "alice@example.org") == "action=552 5.2.2 Mailbox is full"
    assert ask(d, "alice@example.org", 1, unix=True) == "action=552 5.2.2 Mailbox is full"
    # the detail part goes: alice+lists is alice
    assert ask(d, "alice+lists@example.org", 10) == "action=552 5.2.2 Mailbox is full"
    # bob: 50 KiB + 1000 grace, never got mail (asking creates nothing for him)
    assert ask(d, "bob@example.org", 50 * 1024 + 1000) == "action=DUNNO"
    assert not (d.workdir / "mail" / "bob").exists()
    assert ask(d, "bob@example.org", 50 * 1024 + 1001) == "action=552 5.2.2 Mailbox is full"
    # dave: unlimited, but one message above quota_mail_size (100K) is too large
    assert ask(d, "dave@example.org", 100 * 1024) == "action=DUNNO"
    assert ask(d, "dave@example.org", 100 * 1024 + 1) == "action=552 5.3.4 Message too big for quota"
    # carol: 2 of 2 messages
    assert ask(d, "carol@example.org", 10) == "action=552 5.2.2 Mailbox is full"
    # ...but carol+Spam goes to a folder marked ignore
    assert ask(d, "carol+Spam@example.org", 10) == "action=DUNNO"
    # ...and a detail naming no folder is INBOX
    assert ask(d, "carol+nothing@example.org", 10) == "action=552 5.2.2 Mailbox is full"
    # unknown user, bad rule (lookup error: DUNNO), no recipient at all
    assert ask(d, "nobody@example.org", 10) == "action=REJECT Unknown user"
    assert ask(d, "erin@example.org", 10) == "action=DUNNO"
    assert ask(d, None) == "action=DUNNO"
    assert metric(d, "overquota") == 7
    assert metric(d, "toolarge") == 1
    assert metric(d, "nouser") == 1
    assert metric(d, "error") == 1
    assert metric(d, "ok") == 6
    assert "cannot check the quota" in d.stderr() and "erin" in d.stderr()


def test_expunge_lowers_usage_seen_by_quota_status(petreld, tmp_path):
    cfg = config(tmp_path)
    cfg["components"].append("imap")
    cfg["imap"] = {"listen": [f"127.0.0.1:{free_port()}"],
                   "auth_addr": cfg["lmtp"]["auth_addr"]}
    d = petreld(cfg)
    deliver(d, "carol@example.org", message(3, 500))
    deliver(d, "carol@example.org", message(4, 500))
    assert ask(d, "carol@example.org", 10) == "action=552 5.2.2 Mailbox is full"
    host, port = cfg["imap"]["listen"][0].rsplit(":", 1)
    with imaplib.IMAP4(host, int(port)) as m:
        m.login("carol", "c")
        m.select("INBOX")
        m.store("1", "+FLAGS", "(\\Deleted)")
        m.expunge()
    # the expunge's index transaction carried the new aggregate
    assert ask(d, "carol@example.org", 10) == "action=DUNNO"
    deliver(d, "carol@example.org", message(5, 500))
    assert ask(d, "carol@example.org", 10) == "action=552 5.2.2 Mailbox is full"


def test_pipelined_requests_answered_in_order(qsd):
    d = qsd
    batch = [("alice@example.org", 1), ("bob@example.org", 10), ("nobody@example.org", 1),
             (None, None), ("dave@example.org", 200000), ("bob@example.org", 5)] * 50
    expected = ["action=552 5.2.2 Mailbox is full", "action=DUNNO",
                "action=REJECT Unknown user", "action=DUNNO",
                "action=552 5.3.4 Message too big for quota", "action=DUNNO"] * 50
    deliver(d, "alice@example.org", message(6, 1200))
    with socket.create_connection(qs_addr(d), timeout=10) as s:
        s.sendall(b"".join(request(r, z) for r, z in batch))
        assert read_answers(s, len(batch)) == expected
        # the connection stays open for more
        s.sendall(request("bob@example.org", 1))
        assert read_answers(s, 1) == ["action=DUNNO"]


def test_malformed_request_closes_connection(qsd):
    d = qsd
    with socket.create_connection(qs_addr(d), timeout=10) as s:
        s.sendall(b"request=smtpd_access_policy\nthis line has no equals sign\n\n")
        assert s.recv(100) == b""
    with socket.create_connection(qs_addr(d), timeout=10) as s:
        s.sendall(b"recipient=" + b"a" * 5000 + b"\n\n")  # over max_line_length
        assert s.recv(100) == b""
    # still serving
    assert ask(d, "bob@example.org", 1) == "action=DUNNO"


def test_auth_down_answers_dunno(petreld, tmp_path):
    cfg = config(tmp_path, auth_port=free_port(),
                 extra_quota={"quota_status_nouser": ""})
    cfg["components"] = ["quota-status"]  # no auth service behind auth_addr
    cfg["quota"]["quota_status"]["auth_timeout"] = "2s"
    d = petreld(cfg)
    assert ask(d, "alice@example.org", 10) == "action=DUNNO"
    assert metric(d, "error") == 1
    assert "userdb lookup failed" in d.stderr()


@pytest.mark.skipif(not postfix_mta.available(), reason="postfix not installed (scripts/setup.sh)")
def test_postfix_rejects_over_quota_recipient_at_rcpt(qsd):
    d = qsd
    deliver(d, "alice@example.org", message(7, 1200))  # alice over quota now
    qs_host, qs_port = qs_addr(d)
    lmtp_host, lmtp_port = lmtp_addr(d)
    smtp_port = free_port()
    mta = postfix_mta.PostfixMTA(smtp_port, {
        "relay_domains": "example.org",
        "relay_transport": f"lmtp:inet:{lmtp_host}:{lmtp_port}",
        "smtpd_relay_restrictions": "permit_mynetworks, reject_unauth_destination",
        "smtpd_recipient_restrictions":
            f"check_policy_service inet:{qs_host}:{qs_port}",
    })
    try:
        mta.start()
        with smtplib.SMTP("127.0.0.1", smtp_port, timeout=30) as c:
            c.ehlo("client.test")
            assert c.mail("s@example.net")[0] == 250
            code, text = c.rcpt("alice@example.org")
            assert code == 552, (code, text)
            assert b"5.2.2" in text and b"Mailbox is full" in text
            code, text = c.rcpt("bob@example.org")
            assert code == 250, (code, text)
            code, text = c.data(b"Subject: via postfix\r\nMessage-ID: <pf1@example.net>\r\n\r\n"
                                b"hello bob\r\n")
            assert code == 250, (code, text)
        bob = d.workdir / "mail" / "bob" / "Maildir"

        def delivered():
            for sub in ("new", "cur"):
                for f in (bob / sub).iterdir() if (bob / sub).exists() else ():
                    if b"hello bob" in f.read_bytes():
                        return f
            return None
        wait_for(delivered, timeout=30, what="Postfix to deliver to bob over LMTP")
        assert b"via postfix" in delivered().read_bytes()
        assert metric(d, "overquota") >= 1
    except Exception:
        print(mta.log_text())
        raise
    finally:
        mta.stop()


def test_requests_waiting_for_lookups_are_capped_per_connection(petreld, tmp_path,
                                                                silent_server):
    """A client that sends faster than lookups finish (here the auth service
    accepts and never answers, so each lookup waits for auth_timeout) can
    hold at most max_pipelined requests; the next one closes its connection."""
    cfg = config(tmp_path)
    cfg["components"] = ["quota-status"]
    cfg["quota"]["quota_status"]["auth_addr"] = silent_server.addr
    cfg["quota"]["quota_status"].update({"auth_timeout": "10s", "max_pipelined": 8})
    d = petreld(cfg)
    with socket.create_connection(qs_addr(d), timeout=20) as s:
        s.sendall(b"".join(request(f"user{i}@example.org", 10) for i in range(8)))
        s.settimeout(1)
        with pytest.raises(socket.timeout):
            s.recv(100)  # eight waiting: no answer yet, connection open
        s.sendall(request("one-more@example.org", 10))
        s.settimeout(20)
        assert s.recv(100) == b""  # closed
    wait_for(lambda: "too many requests ahead of their answers" in d.stderr(),
             what="the log line")
    assert ask(d, None) == "action=DUNNO"  # other connections are served


def test_allow_list_and_silent_connections(petreld, tmp_path):
    """TCP clients outside allowed_nets are closed at accept, before a byte
    is read; a connection that says nothing is closed after handshake_timeout."""
    cfg = config(tmp_path)
    cfg["components"] = ["auth", "quota-status"]
    cfg["quota"]["quota_status"].update({"handshake_timeout": "1s",
                                         "allowed_nets": ["192.0.2.0/24"]})
    d = petreld(cfg)
    with socket.create_connection(qs_addr(d), timeout=10) as s:
        try:
            s.sendall(request("bob@example.org", 1))
            assert s.recv(100) == b""
        except ConnectionResetError:
            pass
    # The Unix socket is governed by its mode, not by allowed_nets.
    assert ask(d, "bob@example.org", 1, unix=True) == "action=DUNNO"
    u = socket.socket(socket.AF_UNIX)
    u.connect(d.config["quota"]["quota_status"]["listen"][1][len("unix:"):])
    with u:
        u.settimeout(10)
        start = time.monotonic()
        assert u.recv(100) == b""  # closed by the server, nothing sent
        assert 0.5 < time.monotonic() - start < 8
