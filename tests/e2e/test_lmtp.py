"""LMTP delivery: an MTA hands messages to Petrel over LMTP (TCP and a Unix
socket) and the users read them back, byte for byte, over IMAP and POP3.

Covers LHLO and its extensions, MAIL FROM with SIZE/BODY/SMTPUTF8, RCPT TO
looked up through the real auth service (unknown user 550 5.1.1, auth
service down 451), DATA with one reply per recipient (RFC 2033), detail
delivery (user+Folder), the size limit, dot-stuffed lines, 8-bit bodies,
the trace headers, a delivery that fails for one recipient (451, nothing
left behind), the protocol errors and limits, timeouts, shutdown, metrics,
swaks over TCP and the Unix socket, and 10,000 messages over 8 connections
with none lost or stored twice.

Clients: Python's smtplib.LMTP (with the per-recipient DATA replies read
by hand: smtplib reads only the first), swaks, imaplib, poplib, raw sockets
for what smtplib hides."""

import imaplib
import os
import poplib
import re
import shutil
import signal
import smtplib
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import free_port, http_request, wait_for

PASSWD = ("alice:{PLAIN}wonderland:1001:1001\n"
          "bob:{PLAIN}builder:1002:1002\n"
          "carol:{PLAIN}secret:1003:1003\n")

SENDER = "sender@example.net"

MSG = (b"From: Sender <sender@example.net>\r\n"
       b"To: alice@example.org\r\n"
       b"Subject: over LMTP\r\n"
       b"Message-ID: <lmtp-1@example.net>\r\n"
       b"\r\n"
       b"Hello Alice.\r\n"
       b"Second line.\r\n")

MSG_DOTS = (b"From: dots@example.net\r\n"
            b"Subject: dot lines\r\n"
            b"\r\n"
            b".\r\n"
            b"..two\r\n"
            b".leading dot\r\n"
            b"middle . dot\r\n"
            b". \r\n"
            b"...\r\n"
            b"end\r\n")

MSG_8BIT = ("From: =?utf-8?q?J=C3=BCrgen?= <j@example.net>\r\n"
            "Subject: 8bit\r\n"
            "Content-Type: text/plain; charset=utf-8\r\n"
            "Content-Transfer-Encoding: 8bit\r\n"
            "\r\n"
            "Grüße aus Köln — ½ € ✓\r\n").encode("utf-8") + b"latin1 \xe9\xe8 \x80\xff\r\n"


def lmtp_overrides(tmp_path, extra=None, pop3=True, auth_port=None):
    passwd = tmp_path / "passwd"
    passwd.write_text(PASSWD)
    auth_port = auth_port or free_port()
    components = ["auth", "lmtp", "imap"] + (["pop3"] if pop3 else [])
    cfg = {
        "components": components,
        "mail": {"home": str(tmp_path / "mail" / "%u"), "fsync": "always"},
        "auth": {"listen": [f"127.0.0.1:{auth_port}"],
                 "passdb": {"driver": "passwd-file", "path": str(passwd)}},
        "lmtp": {"listen": [f"127.0.0.1:{free_port()}", f"unix:{tmp_path}/var/lmtp.sock"],
                 "auth_addr": f"127.0.0.1:{auth_port}", "username_format": "%n",
                 "hostname": "mx.test.example", "delivery_threads": 4},
        "imap": {"listen": [f"127.0.0.1:{free_port()}"],
                 "auth_addr": f"127.0.0.1:{auth_port}"},
    }
    if pop3:
        cfg["pop3"] = {"listen": [f"127.0.0.1:{free_port()}"],
                       "auth_addr": f"127.0.0.1:{auth_port}"}
    cfg["lmtp"].update(extra or {})
    return cfg


def addr(d, section="lmtp", i=0):
    host, port = d.config[section]["listen"][i].rsplit(":", 1)
    return host, int(port)


def sock_path(d):
    return d.config["lmtp"]["listen"][1][len("unix:"):]


@pytest.fixture
def lmtpd(petreld, tmp_path):
    return petreld(lmtp_overrides(tmp_path))


def client(d):
    c = smtplib.LMTP(*addr(d), timeout=30)
    code, _ = c.ehlo("client.test.example")
    assert code == 250
    return c


def deliver(c, rcpts, msg=MSG, sender=SENDER, mail_options=()):
    """MAIL, RCPT for each, DATA: {rcpt: (code, text)} with the RCPT answer
    for refused recipients and the DATA answer for accepted ones (LMTP sends
    one per accepted recipient, in RCPT order)."""
    code, text = c.mail(sender, list(mail_options))
    assert code == 250, text
    accepted, out = [], {}
    for r in rcpts:
        code, text = c.rcpt(r)
        if code == 250:
            accepted.append(r)
        else:
            out[r] = (code, text)
    if not accepted:
        c.rset()
        return out
    code, text = c.data(msg)
    out[accepted[0]] = (code, text)
    for r in accepted[1:]:
        out[r] = c.getreply()
    return out


def imap_login(d, user, password):
    m = imaplib.IMAP4(*addr(d, "imap"))
    m.login(user, password)
    return m


def imap_bodies(d, user="alice", password="wonderland", box="INBOX"):
    """Every message of `box` (BODY[]), in UID order."""
    m = imap_login(d, user, password)
    typ, data = m.select(box)
    assert typ == "OK", data
    out = []
    if int(data[0]) > 0:
        typ, data = m.uid("FETCH", "1:*", "(UID BODY.PEEK[])")
        assert typ == "OK", data
        out = [item[1] for item in data if isinstance(item, tuple)]
    m.logout()
    return out


def pop_bodies(d, user="alice", password="wonderland"):
    p = poplib.POP3(*addr(d, "pop3"), timeout=10)
    p.user(user)
    p.pass_(password)
    count, _ = p.stat()
    out = [b"\r\n".join(p.retr(i)[1]) + b"\r\n" for i in range(1, count + 1)]
    p.quit()
    return out


def split_trace(stored, msg):
    """The trace headers Petrel put in front of `msg` (the message must
    follow them unchanged)."""
    assert stored.endswith(msg), stored[:400]
    return stored[: len(stored) - len(msg)].decode("utf-8")


def check_trace(trace, rcpt, sender=SENDER, received=True):
    assert trace.startswith(f"Return-Path: <{sender}>\r\nDelivered-To: {rcpt}\r\n"), trace
    rest = trace[len(f"Return-Path: <{sender}>\r\nDelivered-To: {rcpt}\r\n"):]
    if not received:
        assert rest == "", trace
        return
    assert re.fullmatch(
        r"Received: from client\.test\.example \(127\.0\.0\.1\)\r\n"
        r"\tby mx\.test\.example \(Petrel\) with LMTP id [0-9a-f]+\r\n"
        r"\tfor <" + re.escape(rcpt) + r">; \w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d [+-]\d{4}\r\n",
        rest), rest


def maildir_files(tmp_path, user, sub="cur", folder=""):
    d = tmp_path / "mail" / user / "Maildir" / (f".{folder}" if folder else "") / sub
    return sorted(p for p in d.iterdir()) if d.exists() else []


def all_tmp_files(tmp_path):
    return [p for p in (tmp_path / "mail").rglob("tmp/*") if p.is_file()]


def metrics(d):
    return http_request(d.telemetry, "GET", "/metrics").body.decode()


def metric(text, name, labels=""):
    m = re.search(r"^" + re.escape(name + labels) + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


# ---------- LHLO, delivery, reading back ----------

def test_greeting_and_lhlo(lmtpd):
    c = smtplib.LMTP(*addr(lmtpd), timeout=10)
    code, text = c.ehlo("client.test.example")
    assert code == 250 and text.startswith(b"mx.test.example")
    for ext in ("pipelining", "enhancedstatuscodes", "8bitmime", "smtputf8"):
        assert c.has_extn(ext), c.esmtp_features
    assert c.esmtp_features["size"] == str(64 * 1024 * 1024)
    assert not c.has_extn("starttls") and not c.has_extn("chunking")
    assert c.noop()[0] == 250
    code, text = c.quit()
    assert code == 221


def test_multiple_recipients_one_unknown(lmtpd, tmp_path):
    c = client(lmtpd)
    res = deliver(c, ["alice@example.org", "nobody@example.org", "bob@example.org"])
    assert res["nobody@example.org"][0] == 550
    assert res["nobody@example.org"][1].startswith(b"5.1.1 <nobody@example.org>")
    assert res["alice@example.org"][0] == 250 and res["alice@example.org"][1].startswith(b"2.0.0")
    assert res["bob@example.org"][0] == 250
    # The session goes on: another transaction right away.
    res = deliver(c, ["carol@example.org"], msg=MSG)
    assert res["carol@example.org"][0] == 250
    c.quit()
    for user, password, rcpt in (("alice", "wonderland", "alice@example.org"),
                                 ("bob", "builder", "bob@example.org"),
                                 ("carol", "secret", "carol@example.org")):
        bodies = imap_bodies(lmtpd, user, password)
        assert len(bodies) == 1, user
        check_trace(split_trace(bodies[0], MSG), rcpt)
        # POP3 hands out the very same bytes.
        assert pop_bodies(lmtpd, user, password) == bodies
    assert not (tmp_path / "mail" / "nobody").exists()
    assert all_tmp_files(tmp_path) == []


def test_detail_delivers_to_existing_folder(lmtpd):
    m = imap_login(lmtpd, "bob", "builder")
    assert m.create("Work")[0] == "OK"
    assert m.create("Lists/Petrel")[0] == "OK"
    m.logout()
    c = client(lmtpd)
    msgs = {}
    for i, rcpt in enumerate(["bob+Work@example.org", "bob+Nope@example.org",
                              "alice+Work@example.org", "bob+Lists/Petrel@example.org",
                              "bob+INBOX@example.org", "bob+../x@example.org"]):
        msg = MSG.replace(b"lmtp-1@", f"detail-{i}@".encode())
        msgs[rcpt] = msg
        assert deliver(c, [rcpt], msg=msg)[rcpt][0] == 250, rcpt
    c.quit()
    work = imap_bodies(lmtpd, "bob", "builder", "Work")
    assert len(work) == 1
    check_trace(split_trace(work[0], msgs["bob+Work@example.org"]), "bob+Work@example.org")
    lists = imap_bodies(lmtpd, "bob", "builder", "Lists/Petrel")
    assert len(lists) == 1 and lists[0].endswith(msgs["bob+Lists/Petrel@example.org"])
    inbox = imap_bodies(lmtpd, "bob", "builder")
    assert [b[-len(msgs[r]):] for b, r in zip(inbox, ["bob+Nope@example.org",
                                                       "bob+INBOX@example.org",
                                                       "bob+../x@example.org"])] == \
        [msgs["bob+Nope@example.org"], msgs["bob+INBOX@example.org"],
         msgs["bob+../x@example.org"]]
    alice = imap_bodies(lmtpd)
    assert len(alice) == 1
    check_trace(split_trace(alice[0], msgs["alice+Work@example.org"]), "alice+Work@example.org")



def test_kept_folders_follow_deletes_renames_and_other_writers(lmtpd, tmp_path):
    """Delivery threads keep folders open between deliveries: a folder deleted,
    re-created or renamed meanwhile, and a message another program dropped
    into new/, are all seen as an open would see them."""
    m = imap_login(lmtpd, "bob", "builder")
    assert m.create("Work")[0] == "OK"
    c = client(lmtpd)

    def send(rcpt, tag):
        msg = MSG.replace(b"lmtp-1@", f"{tag}@".encode())
        assert deliver(c, [rcpt], msg=msg)[rcpt][0] == 250
        return msg

    # Every delivery thread gets to hold Work and INBOX open.
    first = [send("bob+Work@example.org", f"work-{i}") for i in range(12)]
    inbox_first = [send("bob@example.org", f"inbox-{i}") for i in range(12)]
    assert m.delete("Work")[0] == "OK"
    to_inbox = send("bob+Work@example.org", "after-delete")
    assert m.create("Work")[0] == "OK"
    recreated = [send("bob+Work@example.org", f"recreated-{i}") for i in range(12)]
    assert m.rename("Work", "Old")[0] == "OK"
    after_rename = send("bob+Work@example.org", "after-rename")
    # Another program (a Dovecot LDA, a migration) drops a file into new/.
    dropped = b"From: other@example.org\r\nSubject: dropped\r\n\r\nby hand\r\n"
    new_dir = tmp_path / "mail" / "bob" / "Maildir" / "new"
    (new_dir / "1700000000.M1P1.otherhost").write_bytes(dropped)
    last = [send("bob@example.org", f"last-{i}") for i in range(12)]
    c.quit()
    m.logout()

    assert len(first) == 12
    old = imap_bodies(lmtpd, "bob", "builder", "Old")
    assert len(old) == 12 and all(b.endswith(x) for b, x in zip(old, recreated))
    inbox = imap_bodies(lmtpd, "bob", "builder")
    expected = inbox_first + [to_inbox, after_rename]
    assert [b for b in inbox if b == dropped] == [dropped]
    rest = [b for b in inbox if b != dropped]
    assert len(rest) == len(expected) + len(last)
    assert all(b.endswith(x) for b, x in zip(rest, expected + last))
    # UIDs stay unique and increasing across all of it.
    mm = imap_login(lmtpd, "bob", "builder")
    mm.select("INBOX", readonly=True)
    typ, data = mm.uid("SEARCH", "ALL")
    uids = [int(x) for x in data[0].split()]
    assert len(uids) == len(set(uids)) == len(inbox)
    mm.logout()

def test_dot_stuffed_lines_and_8bit(lmtpd):
    c = client(lmtpd)
    assert deliver(c, ["alice@example.org"], msg=MSG_DOTS)["alice@example.org"][0] == 250
    res = deliver(c, ["alice@example.org"], msg=MSG_8BIT, mail_options=["BODY=8BITMIME"])
    assert res["alice@example.org"][0] == 250
    # A message without a final line break gets one (the CRLF before ".").
    assert deliver(c, ["alice@example.org"], msg=b"Subject: n\r\n\r\nno eol")[
        "alice@example.org"][0] == 250
    c.quit()
    bodies = imap_bodies(lmtpd)
    assert len(bodies) == 3
    check_trace(split_trace(bodies[0], MSG_DOTS), "alice@example.org")
    check_trace(split_trace(bodies[1], MSG_8BIT), "alice@example.org")
    check_trace(split_trace(bodies[2], b"Subject: n\r\n\r\nno eol\r\n"), "alice@example.org")
    assert pop_bodies(lmtpd) == bodies


def test_smtputf8_addresses(lmtpd):
    c = client(lmtpd)
    c.command_encoding = "utf-8"
    sender = "jürgen@bücher.example"
    code, text = c.docmd("MAIL FROM:<" + sender + ">")
    assert code == 553 and text.startswith(b"5.6.7"), text
    code, _ = c.docmd("MAIL FROM:<" + sender + "> SMTPUTF8")
    assert code == 250
    code, text = c.docmd("RCPT TO:<älice@example.org>")
    assert code == 550 and b"5.1.1" in text
    code, _ = c.docmd("RCPT TO:<alice@example.org>")
    assert code == 250
    code, text = c.data(MSG)
    assert code == 250, text
    c.quit()
    bodies = imap_bodies(lmtpd)
    check_trace(split_trace(bodies[0], MSG), "alice@example.org", sender=sender)


def test_size_limit(petreld, tmp_path):
    d = petreld(lmtp_overrides(tmp_path, {"max_message_size": 2048}))
    c = client(d)
    assert c.esmtp_features["size"] == "2048"
    code, text = c.mail(SENDER, ["SIZE=4096"])
    assert code == 552 and text.startswith(b"5.3.4")
    # Declared small, sent big: read to the end, refused per recipient.
    big = b"Subject: big\r\n\r\n" + b"x" * 70 + b"\r\n"
    big = big * 40
    res = deliver(c, ["alice@example.org", "bob@example.org"], msg=big,
                  mail_options=["SIZE=100"])
    assert res["alice@example.org"][0] == 552 and res["bob@example.org"][0] == 552
    assert res["alice@example.org"][1].startswith(b"5.3.4")
    # Exactly at the limit is fine; the session is still in step.
    exact = b"Subject: x\r\n\r\n" + b"y" * (2048 - 16) + b"\r\n"
    assert len(exact) == 2048
    assert deliver(c, ["alice@example.org"], msg=exact)["alice@example.org"][0] == 250
    c.quit()
    bodies = imap_bodies(d)
    assert len(bodies) == 1 and bodies[0].endswith(exact)
    assert imap_bodies(d, "bob", "builder") == []
    text = metrics(d)
    assert metric(text, "petrel_lmtp_deliveries_total", '{result="permfail"}') == 2
    assert metric(text, "petrel_lmtp_deliveries_total", '{result="ok"}') == 1


def test_without_received_header(petreld, tmp_path):
    d = petreld(lmtp_overrides(tmp_path, {"add_received_header": False}, pop3=False))
    c = client(d)
    assert deliver(c, ["alice@example.org"], sender="")["alice@example.org"][0] == 250
    c.quit()
    bodies = imap_bodies(d)
    check_trace(split_trace(bodies[0], MSG), "alice@example.org", sender="", received=False)


def test_duplicate_recipient_stored_once(lmtpd):
    c = client(lmtpd)
    res = deliver(c, ["alice@example.org", "alice@example.org", "bob@example.org"])
    assert res["alice@example.org"][0] == 250
    # Two RCPTs of one address: two 250 replies after DATA, one copy.
    c.quit()
    assert len(imap_bodies(lmtpd)) == 1
    assert len(imap_bodies(lmtpd, "bob", "builder")) == 1


# ---------- failures ----------

def test_failed_delivery_answers_451_and_leaves_nothing(lmtpd, tmp_path):
    c = client(lmtpd)
    # Both users exist; bob's cur/ is replaced by a file so his append fails
    # after DATA, alice's succeeds.
    assert deliver(c, ["bob@example.org"])["bob@example.org"][0] == 250
    cur = tmp_path / "mail" / "bob" / "Maildir" / "cur"
    saved = tmp_path / "bob-cur"
    cur.rename(saved)
    cur.write_text("not a directory\n")
    msg = MSG.replace(b"lmtp-1@", b"lmtp-fail@")
    res = deliver(c, ["bob@example.org", "alice@example.org"], msg=msg)
    assert res["bob@example.org"][0] == 451, res
    assert res["bob@example.org"][1].startswith(b"4.3.0 <bob@example.org>")
    assert res["alice@example.org"][0] == 250
    c.quit()
    cur.unlink()
    saved.rename(cur)
    assert all_tmp_files(tmp_path) == []
    bob = imap_bodies(lmtpd, "bob", "builder")
    assert len(bob) == 1 and b"lmtp-fail" not in bob[0]
    assert not any(b"lmtp-fail" in p.read_bytes()
                   for p in (tmp_path / "mail" / "bob").rglob("*") if p.is_file())
    assert imap_bodies(lmtpd)[0].endswith(msg)
    text = metrics(lmtpd)
    assert metric(text, "petrel_lmtp_deliveries_total", '{result="tempfail"}') == 1
    assert "delivery failed" in lmtpd.stderr()


def test_auth_service_down_is_temporary(petreld, tmp_path):
    d = petreld(lmtp_overrides(tmp_path, {"auth_addr": f"127.0.0.1:{free_port()}",
                                          "auth_timeout": "2s"}, pop3=False))
    c = client(d)
    code, _ = c.mail(SENDER)
    assert code == 250
    code, text = c.rcpt("alice@example.org")
    assert code == 451 and text.startswith(b"4.3.0"), text
    c.quit()
    assert metric(metrics(d), "petrel_lmtp_recipients_total", '{result="tempfail"}') == 1


# ---------- protocol ----------

class Raw:
    def __init__(self, target):
        if isinstance(target, str):
            self.s = socket.socket(socket.AF_UNIX)
            self.s.connect(target)
        else:
            self.s = socket.create_connection(target, timeout=10)
        self.f = self.s.makefile("rb")

    def send(self, data):
        self.s.sendall(data)

    def reply(self):
        lines = []
        while True:
            line = self.f.readline()
            assert line, f"connection closed after {lines!r}"
            lines.append(line.rstrip(b"\r\n"))
            if line[3:4] != b"-":
                return lines

    def code(self):
        return int(self.reply()[-1][:3])

    def closed(self):
        return self.f.read() == b""

    def close(self):
        self.s.close()


def test_sequence_errors_and_refused_commands(lmtpd):
    r = Raw(addr(lmtpd))
    assert r.reply()[0].startswith(b"220 mx.test.example")
    expect = [(b"HELO x\r\n", 500), (b"EHLO x\r\n", 500), (b"MAIL FROM:<a@b.c>\r\n", 503),
              (b"LHLO x\r\n", 250), (b"RCPT TO:<alice@example.org>\r\n", 503),
              (b"DATA\r\n", 503), (b"VRFY alice\r\n", 502), (b"EXPN staff\r\n", 502),
              (b"BDAT 10 LAST\r\n", 502), (b"STARTTLS\r\n", 502), (b"FROB\r\n", 500),
              (b"HELP\r\n", 214), (b"MAIL FROM:<a@b.c> RET=FULL\r\n", 555),
              (b"MAIL FROM:<a@b.c> BODY=BINARYMIME\r\n", 555),
              (b"MAIL FROM:<a@b.c>\r\n", 250), (b"MAIL FROM:<a@b.c>\r\n", 503),
              (b"RCPT TO:<nobody@example.org>\r\n", 550), (b"DATA\r\n", 503),
              (b"RCPT TO:<alice@example.org> NOTIFY=NEVER\r\n", 555),
              (b"RCPT TO:<>\r\n", 501), (b"RSET\r\n", 250),
              (b"RCPT TO:<alice@example.org>\r\n", 503), (b"NOOP\r\n", 250),
              (b"QUIT\r\n", 221)]
    for line, code in expect:
        r.send(line)
        got = r.reply()
        assert int(got[-1][:3]) == code, (line, got)
    assert r.closed()


def test_pipelined_transaction(lmtpd):
    """Everything up to DATA in one write, the message and the next
    transaction in the next: the replies come in order."""
    r = Raw(addr(lmtpd))
    r.reply()
    r.send(b"LHLO x\r\nMAIL FROM:<s@example.net>\r\nRCPT TO:<alice@example.org>\r\n"
           b"RCPT TO:<ghost@example.org>\r\nRCPT TO:<bob@example.org>\r\nDATA\r\n")
    assert r.code() == 250
    assert [r.code() for _ in range(4)] == [250, 250, 550, 250]
    assert r.code() == 354
    r.send(MSG + b".\r\nMAIL FROM:<>\r\nRCPT TO:<carol@example.org>\r\nDATA\r\n")
    assert [r.code() for _ in range(2)] == [250, 250]   # alice, bob
    assert [r.code() for _ in range(3)] == [250, 250, 354]
    r.send(b"Subject: second\r\n\r\nx\r\n.\r\nQUIT\r\n")
    assert r.code() == 250
    assert r.code() == 221
    assert r.closed()
    assert len(imap_bodies(lmtpd)) == 1 and len(imap_bodies(lmtpd, "bob", "builder")) == 1
    assert imap_bodies(lmtpd, "carol", "secret")[0].startswith(b"Return-Path: <>\r\n")


def test_limits(petreld, tmp_path):
    d = petreld(lmtp_overrides(tmp_path, {"max_recipients": 2, "max_line_length": 512,
                                          "max_errors": 3}, pop3=False))
    r = Raw(addr(d))
    r.reply()
    r.send(b"LHLO x\r\nMAIL FROM:<s@example.net>\r\n")
    assert [r.code() for _ in range(2)] == [250, 250]
    for rcpt, code in ((b"alice", 250), (b"bob", 250), (b"carol", 452)):
        r.send(b"RCPT TO:<" + rcpt + b"@example.org>\r\n")
        got = r.reply()
        assert int(got[0][:3]) == code, got
    assert got[0].startswith(b"452 4.5.3")
    r.send(b"RSET\r\n")
    assert r.code() == 250
    # A line over max_line_length: 500, the rest of it is skipped.
    r.send(b"NOOP " + b"x" * 600 + b"\r\nNOOP\r\n")
    got = r.reply()
    assert got[0].startswith(b"500 5.5.2"), got
    assert r.code() == 250
    # Sent in pieces, with no line end for a while.
    r.send(b"NOOP " + b"y" * 1000)
    assert r.reply()[0].startswith(b"500 5.5.2")
    r.send(b"y" * 1000 + b"\r\nNOOP\r\n")
    assert r.code() == 250
    # The third error is answered, then the connection closes with 421.
    r.send(b"FROB\r\n")
    assert r.code() == 500
    got = r.reply()
    assert got[0].startswith(b"421 4.7.0"), got
    assert r.closed()


def test_command_timeout(petreld, tmp_path):
    d = petreld(lmtp_overrides(tmp_path, {"command_timeout": "1s"}, pop3=False))
    r = Raw(addr(d))
    r.reply()
    r.send(b"LHLO x\r\nMAIL FROM:<s@example.net>\r\nRCPT TO:<alice@example.org>\r\nDATA\r\n")
    assert [r.code() for _ in range(4)] == [250, 250, 250, 354]
    r.send(b"Subject: stalled\r\n\r\nhalf a mess")
    t0 = time.monotonic()
    got = r.reply()
    assert got[0].startswith(b"421 4.4.2"), got
    assert 0.8 < time.monotonic() - t0 < 5
    assert r.closed()
    assert imap_bodies(d) == []


def test_unix_socket_and_allowed_nets(petreld, tmp_path):
    d = petreld(lmtp_overrides(tmp_path, {"allowed_nets": ["10.0.0.0/8"]}, pop3=False))
    path = sock_path(d)
    assert os.stat(path).st_mode & 0o777 == 0o660  # the default: owner and group
    # TCP from 127.0.0.1 is not in allowed_nets: refused with 554.
    r = Raw(addr(d))
    got = r.reply()
    assert got[0].startswith(b"554 5.7.1"), got
    assert r.closed()
    # The Unix socket is always allowed; smtplib.LMTP takes a path.
    c = smtplib.LMTP(path, timeout=10)
    c.ehlo("client.test.example")
    assert deliver(c, ["alice@example.org"])["alice@example.org"][0] == 250
    c.quit()
    bodies = imap_bodies(d)
    assert len(bodies) == 1
    trace = split_trace(bodies[0], MSG)
    assert "Received: from client.test.example (unix)" in trace


@pytest.mark.skipif(shutil.which("swaks") is None, reason="swaks is not installed")
def test_swaks_tcp_and_unix_socket(lmtpd, tmp_path):
    host, port = addr(lmtpd)
    body = "Subject: from swaks\n\nHello from swaks."
    for target in (["--server", f"{host}:{port}"], ["--socket", sock_path(lmtpd)]):
        proc = subprocess.run(["swaks", "--protocol", "LMTP", *target, "--helo", "swaks.test",
                               "--from", "swaks@example.net", "--to", "alice@example.org,bob@example.org",
                               "--data", body, "--timeout", "20"],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "<-  250 2.0.0 <alice@example.org>" in proc.stdout, proc.stdout
        assert "<-  250 2.0.0 <bob@example.org>" in proc.stdout, proc.stdout
    proc = subprocess.run(["swaks", "--protocol", "LMTP", "--server", f"{host}:{port}",
                           "--to", "nobody@example.org", "--timeout", "20"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "550 5.1.1" in proc.stdout
    for user, password in (("alice", "wonderland"), ("bob", "builder")):
        bodies = imap_bodies(lmtpd, user, password)
        assert len(bodies) == 2
        for b in bodies:
            assert b.endswith(b"Subject: from swaks\r\n\r\nHello from swaks.\r\n"), b


def test_starttls(petreld, tmp_path, pki):
    import ssl
    d = petreld(lmtp_overrides(tmp_path, {"tls_cert_file": str(pki / "server.pem"),
                                          "tls_key_file": str(pki / "server.key")}, pop3=False))
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    c = client(d)
    assert c.has_extn("starttls")
    code, _ = c.starttls(context=ctx)
    assert code == 220
    code, _ = c.ehlo("client.test.example")
    assert code == 250 and not c.has_extn("starttls")
    assert deliver(c, ["alice@example.org"])["alice@example.org"][0] == 250
    code, text = c.docmd("STARTTLS")
    assert code == 503
    c.quit()
    trace = split_trace(imap_bodies(d)[0], MSG)
    assert "(Petrel) with LMTPS id" in trace
    # Commands pipelined behind STARTTLS in clear text are thrown away.
    r = Raw(addr(d))
    r.reply()
    r.send(b"LHLO x\r\n")
    r.reply()
    r.send(b"STARTTLS\r\nLHLO injected\r\n")
    assert r.reply()[0].startswith(b"220 2.0.0")
    tls = ctx.wrap_socket(r.s, server_hostname="127.0.0.1")
    f = tls.makefile("rb")
    tls.sendall(b"NOOP\r\n")
    assert f.readline() == b"250 2.0.0 OK\r\n"
    tls.sendall(b"MAIL FROM:<a@b.c>\r\n")
    assert f.readline().startswith(b"503 5.5.1")   # LHLO again first
    tls.close()


def test_shutdown_says_421_and_finishes_deliveries(petreld, tmp_path):
    d = petreld(lmtp_overrides(tmp_path, pop3=False))
    idle = Raw(addr(d))
    idle.reply()
    idle.send(b"LHLO x\r\n")
    assert idle.code() == 250
    busy = Raw(addr(d))
    busy.reply()
    busy.send(b"LHLO x\r\nMAIL FROM:<s@example.net>\r\nRCPT TO:<alice@example.org>\r\nDATA\r\n")
    assert [busy.code() for _ in range(4)] == [250, 250, 250, 354]
    busy.send(b"Subject: in flight\r\n\r\nfirst half\r\n")
    time.sleep(0.2)
    d.signal(signal.SIGTERM)
    got = idle.reply()
    assert got[0].startswith(b"421 4.3.2"), got
    assert idle.closed()
    # The session in DATA finishes its message, then gets 421.
    busy.send(b"second half\r\n.\r\n")
    assert busy.code() == 250
    assert busy.reply()[0].startswith(b"421 4.3.2")
    assert busy.closed()
    assert d.wait() == 0
    d.assert_clean()
    files = maildir_files(tmp_path, "alice")
    assert len(files) == 1 and files[0].read_bytes().endswith(
        b"Subject: in flight\r\n\r\nfirst half\r\nsecond half\r\n")


def test_metrics(lmtpd):
    c = client(lmtpd)
    deliver(c, ["alice@example.org", "ghost@example.org"])
    c.quit()
    def settled():
        t = metrics(lmtpd)
        return t if metric(t, "petrel_lmtp_sessions") == 0 else None

    text = wait_for(settled, what="sessions back to 0")
    assert metric(text, "petrel_lmtp_deliveries_total", '{result="ok"}') == 1
    assert metric(text, "petrel_lmtp_deliveries_total", '{result="tempfail"}') == 0
    assert metric(text, "petrel_lmtp_recipients_total", '{result="accepted"}') == 1
    assert metric(text, "petrel_lmtp_recipients_total", '{result="unknown"}') == 1
    assert metric(text, "petrel_lmtp_connections_total") >= 1
    assert metric(text, "petrel_lmtp_bytes_total", '{direction="in"}') >= len(MSG)
    assert metric(text, "petrel_lmtp_bytes_total", '{direction="out"}') > 0
    assert metric(text, "petrel_lmtp_delivery_seconds_count") == 1
    assert metric(text, "petrel_lmtp_delivery_seconds_bucket", '{le="+Inf"}') == 1


def test_config_errors(tmp_path):
    from conftest import run_petreld, to_yaml
    cases = [({"max_recipients": 0}, "lmtp.max_recipients"),
             ({"recipient_delimiter": "@"}, "lmtp.recipient_delimiter"),
             ({"username_format": "%h"}, "lmtp.username_format"),
             ({"listen": ["nowhere"]}, "lmtp.listen"),
             ({"socket_mode": "999"}, "lmtp.socket_mode"),
             ({"tls_cert_file": "/x"}, "lmtp"),
             ({"max_line_length": 100}, "lmtp.max_line_length"),
             ({"bogus": 1}, "lmtp.bogus")]
    for extra, key in cases:
        cfg = lmtp_overrides(tmp_path, extra, pop3=False)
        path = tmp_path / "bad.yaml"
        path.write_text(to_yaml(cfg) + "\n")
        proc = run_petreld(["-c", str(path), "--check-config"])
        assert proc.returncode == 2, (extra, proc.stderr)
        assert re.search(r"bad\.yaml:\d+: " + re.escape(key), proc.stderr), (extra, proc.stderr)


# ---------- load ----------

@pytest.mark.slow
def test_ten_thousand_messages_none_lost_or_doubled(petreld, tmp_path):
    users = [f"user{i}" for i in range(1, 51)]
    cfg = lmtp_overrides(tmp_path, {"delivery_threads": 8}, pop3=False)
    (tmp_path / "passwd-load").write_text("".join(f"{u}:{{PLAIN}}pw:1000:1000\n" for u in users))
    cfg["auth"]["passdb"]["path"] = str(tmp_path / "passwd-load")
    d = petreld(cfg)
    total, conns = 10_000, 8
    acked = [[] for _ in range(conns)]
    errors = []

    def run(k):
        try:
            c = smtplib.LMTP(*addr(d), timeout=60)
            c.ehlo("load.test")
            for n in range(k, total, conns):
                user = users[(n * 7919) % len(users)]
                msg = (f"Subject: load {n}\r\nMessage-ID: <load-{n}@test>\r\n\r\n"
                       f"body {n}\r\n").encode()
                res = deliver(c, [f"{user}@example.org"], msg=msg)
                if res[f"{user}@example.org"][0] == 250:
                    acked[k].append((n, user))
                else:
                    errors.append(res)
            c.quit()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    t0 = time.monotonic()
    threads = [threading.Thread(target=run, args=(k,)) for k in range(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    secs = time.monotonic() - t0
    assert errors == []
    sent = {n: u for lst in acked for n, u in lst}
    assert len(sent) == total
    found = {}
    for user in users:
        for f in maildir_files(tmp_path, user) + maildir_files(tmp_path, user, "new"):
            n = int(re.search(rb"Message-ID: <load-(\d+)@test>", f.read_bytes()).group(1))
            assert n not in found, f"message {n} stored twice"
            found[n] = user
    assert found == sent
    # The index agrees: IMAP sees each user's count.
    for user in users[:5]:
        m = imap_login(d, user, "pw")
        typ, data = m.select("INBOX")
        assert int(data[0]) == sum(1 for u in sent.values() if u == user)
        m.logout()
    assert all_tmp_files(tmp_path) == []
    assert metric(metrics(d), "petrel_lmtp_deliveries_total", '{result="ok"}') == total
    print(f"10,000 messages over {conns} connections in {secs:.1f} s ({total / secs:.0f}/s)")
