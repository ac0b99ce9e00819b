"""POP3 server: a user reads and deletes the mail in their INBOX with a POP3
client. Greeting and CAPA, USER/PASS and SASL (PLAIN, LOGIN, initial
responses) through the real auth service, STLS and implicit TLS, the
plaintext policy, every transaction command (STAT, LIST, UIDL, RETR, TOP,
DELE, RSET, NOOP, QUIT), pipelining, limits, timeouts and shutdown. Messages
are put in place through the backend-plane API and read back byte for byte
over both POP3 and IMAP (BODY[]); deletions happen only on QUIT; UIDLs
survive new sessions and index rebuilds; a message expunged over IMAP while
a POP3 session holds it answers -ERR. Clients: Python's poplib and imaplib,
raw sockets for what poplib hides (dot-stuffing, long lines, pipelining)."""

import imaplib
import os
import poplib
import re
import socket
import ssl
import threading
import time

import pytest

from conftest import free_port, run_petreld
from mailstore import MailApi

PASSWD = ("alice:{PLAIN}wonderland:1001:1001\n"
          "bob:{PLAIN}builder:1002:1002\n"
          "carol:{PLAIN}pass word with spaces:1003:1003\n")

MSG_CRLF = (b"From: Alice <alice@example.org>\r\n"
            b"To: bob@example.org\r\n"
            b"Subject: first\r\n"
            b"\r\n"
            b"Hello Bob.\r\n"
            b"Second line.\r\n"
            b"Third line.\r\n")

MSG_LF = b"From: x@example.org\nSubject: lf only\n\nline1\nline2\nline3\n"

MSG_DOTS = (b"From: dots@example.org\r\n"
            b"Subject: dot lines\r\n"
            b"\r\n"
            b".\r\n"
            b"..two\r\n"
            b".leading dot\r\n"
            b"middle . dot\r\n"
            b". \r\n"
            b"end\r\n")

MSG_8BIT = ("From: =?utf-8?q?J=C3=BCrgen?= <j@example.org>\r\n"
            "Subject: 8bit\r\n"
            "Content-Type: text/plain; charset=utf-8\r\n"
            "Content-Transfer-Encoding: 8bit\r\n"
            "\r\n"
            "Grüße aus Köln — ½ € ✓\r\n").encode("utf-8") + b"latin1 \xe9\xe8\r\n"

MSG_NO_EOL = b"From: n@example.org\r\nSubject: no final newline\r\n\r\nlast line"


def pop3_overrides(tmp_path, pki=None, extra=None, auth_extra=None, imap=True):
    passwd = tmp_path / "passwd"
    passwd.write_text(PASSWD)
    auth_port = free_port()
    cfg = {
        "components": ["auth", "pop3", "backend-api"] + (["imap"] if imap else []),
        "mail": {"home": str(tmp_path / "mail" / "%u")},
        "auth": {"listen": [f"127.0.0.1:{auth_port}"], "failure_delay": "10ms",
                 "failure_delay_max": "50ms",
                 "passdb": {"driver": "passwd-file", "path": str(passwd)}},
        "pop3": {"listen": [f"127.0.0.1:{free_port()}"],
                 "auth_addr": f"127.0.0.1:{auth_port}"},
    }
    if imap:
        cfg["imap"] = {"listen": [f"127.0.0.1:{free_port()}"],
                       "auth_addr": f"127.0.0.1:{auth_port}"}
    if pki is not None:
        cfg["pop3"]["listen_tls"] = [f"127.0.0.1:{free_port()}"]
        cfg["pop3"]["tls_cert_file"] = str(pki / "server.pem")
        cfg["pop3"]["tls_key_file"] = str(pki / "server.key")
    cfg["pop3"].update(extra or {})
    cfg["auth"].update(auth_extra or {})
    return cfg


def addr(d, key="listen", section="pop3"):
    host, port = d.config[section][key][0].rsplit(":", 1)
    return host, int(port)


@pytest.fixture
def popd(petreld, tmp_path, pki):
    return petreld(pop3_overrides(tmp_path, pki))


def api(d, user="alice"):
    return MailApi(d.backend, user=user)


def put(d, *messages, user="alice", flags=None):
    """Appends messages to the user's INBOX through the backend-plane API;
    returns their UIDs."""
    a = api(d, user)
    return [a.append("INBOX", m, flags=flags) for m in messages]


def pop(d, user="alice", password="wonderland"):
    p = poplib.POP3(*addr(d), timeout=10)
    p.user(user)
    p.pass_(password)
    return p


def imap(d, user="alice", password="wonderland"):
    m = imaplib.IMAP4(*addr(d, section="imap"))
    m.login(user, password)
    typ, data = m.select("INBOX")
    assert typ == "OK", data
    return m


def imap_bodies(d, user="alice", password="wonderland"):
    """{uid: BODY[]} of every INBOX message, over IMAP."""
    m = imap(d, user, password)
    typ, data = m.uid("FETCH", "1:*", "(UID BODY.PEEK[])")
    assert typ == "OK", data
    out = {}
    for item in data:
        if isinstance(item, tuple):
            uid = int(re.search(rb"UID (\d+)", item[0]).group(1))
            out[uid] = item[1]
    m.logout()
    return out


def wire(message):
    """What RETR sends for a stored message, before dot-stuffing: CRLF line
    ends and a final line break."""
    out = re.sub(rb"(?<!\r)\n", b"\r\n", message)
    if not out.endswith(b"\r\n"):
        out += b"\r\n"
    return out


def joined(lines):
    return b"".join(line + b"\r\n" for line in lines)


class Raw:
    """A line-level POP3 connection for what poplib hides."""

    def __init__(self, d, key="listen", context=None):
        self.sock = socket.create_connection(addr(d, key), timeout=10)
        if context is not None:
            self.sock = context.wrap_socket(self.sock, server_hostname="127.0.0.1")
        self.f = self.sock.makefile("rb")
        self.greeting = self.line()
        assert self.greeting.startswith(b"+OK"), self.greeting

    def send(self, data):
        self.sock.sendall(data)

    def line(self):
        return self.f.readline()

    def cmd(self, text):
        self.send(text.encode() + b"\r\n" if isinstance(text, str) else text)
        return self.line()

    def body(self):
        """The rest of a multi-line response, as sent (still dot-stuffed),
        without the terminating ".\r\n"."""
        out = b""
        while True:
            line = self.line()
            assert line, "connection closed inside a multi-line response"
            if line == b".\r\n":
                return out
            out += line

    def closed(self):
        try:
            return self.f.read() == b""
        except (ConnectionResetError, ssl.SSLError):
            return True

    def close(self):
        self.f.close()
        self.sock.close()


def unstuff(data):
    return b"".join(line[1:] if line.startswith(b".") else line
                    for line in data.splitlines(keepends=True))


def login_raw(d, user="alice", password="wonderland"):
    r = Raw(d)
    assert r.cmd(f"USER {user}").startswith(b"+OK")
    assert r.cmd(f"PASS {password}").startswith(b"+OK")
    return r


# ---------- greeting, CAPA, login ----------

def test_greeting_and_capa(popd):
    p = poplib.POP3(*addr(popd), timeout=10)
    assert p.getwelcome().startswith(b"+OK")
    caps = p.capa()
    for word in ("TOP", "UIDL", "USER", "RESP-CODES", "PIPELINING", "AUTH-RESP-CODE", "STLS",
                 "IMPLEMENTATION"):
        assert word in caps, caps
    assert caps["SASL"] == ["PLAIN", "LOGIN"]
    p.user("alice")
    p.pass_("wonderland")
    caps = p.capa()
    assert "TOP" in caps and "UIDL" in caps and "PIPELINING" in caps
    assert "STLS" not in caps and "USER" not in caps and "SASL" not in caps
    assert p.quit().startswith(b"+OK")


def test_user_pass_and_wrong_password(popd):
    p = poplib.POP3(*addr(popd), timeout=10)
    p.user("alice")
    with pytest.raises(poplib.error_proto, match=r"-ERR \[AUTH\]"):
        p.pass_("wrong")
    with pytest.raises(poplib.error_proto, match="USER first"):
        p.pass_("wonderland")
    p.user("nobody-here")
    with pytest.raises(poplib.error_proto, match=r"\[AUTH\]"):
        p.pass_("whatever")
    # Two failures so far: the third attempt may still succeed.
    p.user("alice")
    assert p.pass_("wonderland").startswith(b"+OK")
    p.quit()


def test_password_with_spaces(popd):
    p = pop(popd, "carol", "pass word with spaces")
    assert p.stat() == (0, 0)
    p.quit()


def test_three_failures_close_the_connection_after_the_auth_delay(petreld, tmp_path, pki):
    d = petreld(pop3_overrides(tmp_path, pki, auth_extra={"failure_delay": "300ms",
                                                          "failure_delay_max": "1s"}))
    r = Raw(d)
    started = time.monotonic()
    for i in range(3):
        assert r.cmd("USER alice").startswith(b"+OK")
        line = r.cmd("PASS nope")
        assert line.startswith(b"-ERR [AUTH] Authentication failed"), line
    # Every failure waited for the auth service's failure delay.
    assert time.monotonic() - started >= 0.85
    assert r.closed()
    r.close()
    # A good login right after still works on a new connection.
    p = pop(d)
    p.quit()


def test_commands_need_the_right_state(popd):
    r = Raw(popd)
    for cmd in ("STAT", "LIST", "UIDL", "RETR 1", "TOP 1 1", "DELE 1", "RSET", "NOOP"):
        line = r.cmd(cmd)
        assert line.startswith(b"-ERR") and b"Log in first" in line, (cmd, line)
    assert r.cmd("APOP alice 0123456789abcdef0123456789abcdef").startswith(b"-ERR Unknown")
    assert r.cmd("FROB").startswith(b"-ERR Unknown command")
    assert r.cmd("USER alice").startswith(b"+OK")
    assert r.cmd("PASS wonderland").startswith(b"+OK")
    for cmd in ("USER alice", "PASS x", "AUTH PLAIN", "STLS"):
        line = r.cmd(cmd)
        assert line.startswith(b"-ERR") and b"Already logged in" in line, (cmd, line)
    assert r.cmd("NOOP").startswith(b"+OK")
    assert r.cmd("QUIT").startswith(b"+OK")
    r.close()


def test_quit_before_login(popd):
    r = Raw(popd)
    assert r.cmd("QUIT").startswith(b"+OK")
    assert r.closed()


# ---------- SASL ----------

def b64(data):
    import base64
    return base64.b64encode(data).decode()


def test_sasl_plain_with_initial_response(popd):
    r = Raw(popd)
    line = r.cmd("AUTH PLAIN " + b64(b"\0bob\0builder"))
    assert line.startswith(b"+OK"), line
    assert r.cmd("STAT").startswith(b"+OK 0 0")
    r.cmd("QUIT")
    r.close()


def test_sasl_plain_with_challenge_and_empty_initial_response(popd):
    r = Raw(popd)
    assert r.cmd("AUTH PLAIN") == b"+ \r\n"
    assert r.cmd(b64(b"\0alice\0wonderland")).startswith(b"+OK")
    r.close()
    r = Raw(popd)
    # "=" is an empty initial response (RFC 5034): PLAIN then fails.
    assert r.cmd("AUTH PLAIN =").startswith(b"-ERR [AUTH] Authentication failed")
    r.close()


def test_sasl_login_multistep_and_cancel(popd):
    r = Raw(popd)
    line = r.cmd("AUTH LOGIN")
    assert line.startswith(b"+ "), line
    line = r.cmd(b64(b"alice"))
    assert line.startswith(b"+ "), line
    assert r.cmd(b64(b"wonderland")).startswith(b"+OK")
    r.close()
    r = Raw(popd)
    assert r.cmd("AUTH LOGIN").startswith(b"+ ")
    assert r.cmd("*").startswith(b"-ERR Authentication aborted")
    assert r.cmd("AUTH PLAIN " + b64(b"\0alice\0nope")).startswith(b"-ERR [AUTH]")
    assert r.cmd("AUTH CRAM-MD5").startswith(b"-ERR Unsupported")
    assert r.cmd("AUTH PLAIN !!!notbase64").startswith(b"-ERR")
    # The session still works.
    assert r.cmd("AUTH PLAIN " + b64(b"\0alice\0wonderland")).startswith(b"+OK")
    r.close()


def test_auth_without_mechanism_lists_them(popd):
    r = Raw(popd)
    assert r.cmd("AUTH").startswith(b"+OK")
    assert r.body() == b"PLAIN\r\nLOGIN\r\n"
    r.close()


def test_poplib_sasl_via_auth_command(popd):
    """poplib has no AUTH helper: its low-level _shortcmd drives it."""
    p = poplib.POP3(*addr(popd), timeout=10)
    assert p._shortcmd("AUTH PLAIN " + b64(b"\0alice\0wonderland")).startswith(b"+OK")
    assert p.stat() == (0, 0)
    p.quit()


# ---------- TLS and the plaintext policy ----------

def tls_context(pki):
    return ssl.create_default_context(cafile=str(pki / "ca.pem"))


def test_stls_then_login(popd, pki):
    put(popd, MSG_CRLF)
    p = poplib.POP3(*addr(popd), timeout=10)
    assert p.stls(context=tls_context(pki)).startswith(b"+OK")
    caps = p.capa()
    assert "STLS" not in caps and "USER" in caps
    p.user("alice")
    p.pass_("wonderland")
    resp, lines, octets = p.retr(1)
    assert joined(lines) == MSG_CRLF
    p.quit()


def test_stls_discards_pipelined_plaintext(popd, pki):
    r = Raw(popd)
    r.send(b"STLS\r\nUSER alice\r\n")
    assert r.line().startswith(b"+OK")
    tls = tls_context(pki).wrap_socket(r.sock, server_hostname="127.0.0.1")
    f = tls.makefile("rb")
    tls.sendall(b"PASS wonderland\r\n")
    # USER was sent in clear before the handshake: it did not count.
    assert f.readline().startswith(b"-ERR Send USER first")
    tls.sendall(b"STLS\r\n")
    assert f.readline().startswith(b"-ERR TLS is already active")
    tls.close()


def test_implicit_tls(popd, pki):
    put(popd, MSG_LF)
    p = poplib.POP3_SSL(*addr(popd, "listen_tls"), context=tls_context(pki), timeout=10)
    caps = p.capa()
    assert "STLS" not in caps and "USER" in caps
    p.user("alice")
    p.pass_("wonderland")
    resp, lines, octets = p.retr(1)
    assert joined(lines) == wire(MSG_LF)
    assert p.quit().startswith(b"+OK")


def test_plaintext_refused_outside_secure_nets(petreld, tmp_path, pki):
    """With no network counted as secure, a plain loopback connection is an
    insecure one: USER, PASS and AUTH are refused, CAPA offers no
    mechanism, and after STLS the same login works."""
    d = petreld(pop3_overrides(tmp_path, pki, extra={"secure_nets": []}))
    r = Raw(d)
    assert r.cmd("CAPA").startswith(b"+OK")
    caps = r.body()
    assert b"USER" not in caps and b"SASL" not in caps and b"STLS" in caps
    for cmd in ("USER alice", "AUTH PLAIN " + b64(b"\0alice\0wonderland")):
        line = r.cmd(cmd)
        assert line.startswith(b"-ERR [AUTH] Plaintext authentication disallowed"), line
    assert r.cmd("AUTH").startswith(b"+OK") and r.body() == b""
    r.close()
    p = poplib.POP3(*addr(d), timeout=10)
    p.stls(context=tls_context(pki))
    p.user("alice")
    p.pass_("wonderland")
    p.quit()
    # Over implicit TLS too.
    p = poplib.POP3_SSL(*addr(d, "listen_tls"), context=tls_context(pki), timeout=10)
    p.user("bob")
    p.pass_("builder")
    p.quit()


def test_plaintext_allowed_when_the_policy_is_off(petreld, tmp_path, pki):
    d = petreld(pop3_overrides(tmp_path, pki, extra={"secure_nets": [],
                                                     "disable_plaintext_auth": False}))
    p = pop(d)
    p.quit()


# ---------- reading mail ----------

ALL = [MSG_CRLF, MSG_LF, MSG_DOTS, MSG_8BIT, MSG_NO_EOL]


def test_stat_list_retr_byte_for_byte_against_imap(popd):
    uids = put(popd, *ALL)
    bodies = imap_bodies(popd)
    p = pop(popd)
    count, size = p.stat()
    assert count == len(ALL)
    assert size == sum(len(re.sub(rb"(?<!\r)\n", b"\r\n", m)) for m in ALL)
    resp, listing, _ = p.list()
    assert resp.startswith(b"+OK 5 messages")
    sizes = {int(n): int(s) for n, s in (line.split() for line in listing)}
    for i, (msg, uid) in enumerate(zip(ALL, uids), start=1):
        resp, lines, octets = p.retr(i)
        got = joined(lines)
        # POP3 and IMAP give the same bytes (POP3 ends the last line).
        assert got == wire(bodies[uid]), i
        assert got == wire(msg), i
        assert sizes[i] == len(bodies[uid]), i  # LIST size == IMAP's octets
        assert resp == b"+OK %d octets" % sizes[i]
        assert p.list(i) == b"+OK %d %d" % (i, sizes[i])
    p.quit()


def test_dot_stuffing_on_the_wire(popd):
    put(popd, MSG_DOTS, b".\r\n..\r\n.x")
    r = login_raw(popd)
    assert r.cmd("RETR 1").startswith(b"+OK")
    raw = r.body()
    assert raw == (b"From: dots@example.org\r\nSubject: dot lines\r\n\r\n"
                   b"..\r\n...two\r\n..leading dot\r\nmiddle . dot\r\n.. \r\nend\r\n")
    assert unstuff(raw) == MSG_DOTS
    assert r.cmd("RETR 2").startswith(b"+OK 9 octets")
    assert r.body() == b"..\r\n...\r\n..x\r\n"
    assert r.cmd("TOP 1 2").startswith(b"+OK")
    assert r.body() == b"From: dots@example.org\r\nSubject: dot lines\r\n\r\n..\r\n...two\r\n"
    r.cmd("QUIT")
    r.close()


def test_top(popd):
    put(popd, MSG_CRLF, MSG_LF, b"Subject: header only\r\nX: y\r\n")
    p = pop(popd)
    resp, lines, _ = p.top(1, 0)
    assert joined(lines) == b"From: Alice <alice@example.org>\r\nTo: bob@example.org\r\n" \
                            b"Subject: first\r\n\r\n"
    resp, lines, _ = p.top(1, 2)
    assert joined(lines).endswith(b"\r\n\r\nHello Bob.\r\nSecond line.\r\n")
    resp, lines, _ = p.top(1, 100)
    assert joined(lines) == MSG_CRLF
    resp, lines, _ = p.top(2, 1)
    assert joined(lines) == b"From: x@example.org\r\nSubject: lf only\r\n\r\nline1\r\n"
    resp, lines, _ = p.top(3, 5)
    assert joined(lines) == b"Subject: header only\r\nX: y\r\n"
    resp, lines, _ = p.top(1, 18446744073709551615)
    assert joined(lines) == MSG_CRLF
    for bad in ("TOP 1", "TOP 1 -1", "TOP 1 x", "TOP 99 1", "TOP 1 18446744073709551616"):
        with pytest.raises(poplib.error_proto):
            p._shortcmd(bad)
    p.quit()
    # TOP does not mark the message seen.
    m = imap(popd)
    assert b"\\Seen" not in m.fetch("1", "(FLAGS)")[1][0]
    m.logout()


def test_retr_sets_seen(popd):
    put(popd, MSG_CRLF, MSG_LF)
    p = pop(popd)
    p.retr(2)
    p.quit()
    m = imap(popd)
    flags = m.fetch("1:2", "(FLAGS)")[1]
    assert b"\\Seen" not in flags[0] and b"\\Seen" in flags[1]
    m.logout()


def test_retr_leaves_flags_when_configured(petreld, tmp_path, pki):
    d = petreld(pop3_overrides(tmp_path, pki, extra={"retr_sets_seen": False}))
    put(d, MSG_CRLF)
    p = pop(d)
    p.retr(1)
    p.quit()
    m = imap(d)
    assert b"\\Seen" not in m.fetch("1", "(FLAGS)")[1][0]
    m.logout()


def test_bad_message_numbers(popd):
    put(popd, MSG_CRLF)
    r = login_raw(popd)
    for cmd in ("RETR 0", "RETR 2", "RETR -1", "RETR +1", "RETR 1x", "RETR 99999999999999999999",
                "LIST 2", "UIDL 0", "DELE 5", "RETR", "RETR 1 2", "LIST 1 2", "STAT 1"):
        line = r.cmd(cmd)
        assert line.startswith(b"-ERR"), (cmd, line)
    assert r.cmd("RETR 1").startswith(b"+OK")
    r.body()
    r.cmd("QUIT")
    r.close()


def test_empty_mailbox(popd):
    p = pop(popd)
    assert p.stat() == (0, 0)
    resp, listing, _ = p.list()
    assert listing == [] and resp.startswith(b"+OK 0 messages")
    assert p.uidl()[1] == []
    p.quit()


def test_large_message_streams_byte_for_byte(popd):
    line = b"0123456789abcdefghijklmnopqrstuvwxyz" * 20 + b"\r\n"
    big = b"Subject: big\r\n\r\n" + b"".join(
        (b"." if i % 7 == 0 else b"") + line for i in range(6000))  # ~4.4 MB
    uid, = put(popd, big)
    r = login_raw(popd)
    # Pipelined behind the RETR: answered after the whole message.
    r.send(b"RETR 1\r\nSTAT\r\nNOOP\r\n")
    assert r.line() == b"+OK %d octets\r\n" % len(big)
    assert unstuff(r.body()) == big
    assert r.line() == b"+OK 1 %d\r\n" % len(big)
    assert r.line().startswith(b"+OK")
    assert imap_bodies(popd)[uid] == big
    r.cmd("QUIT")
    r.close()
    # A client that goes away in the middle of a RETR costs nothing: the
    # session ends (its message data released) and the server goes on.
    for _ in range(3):
        r = login_raw(popd)
        r.send(b"RETR 1\r\n")
        r.line()
        r.f.read(10000)
        r.close()
    p = pop(popd)
    assert p.stat() == (1, len(big))
    p.quit()


def test_large_messages_over_stls_and_implicit_tls(popd, pki):
    line = b"The quick brown fox jumps over the lazy dog. 0123456789\r\n"
    big = b"Subject: big over TLS\r\n\r\n" + b"".join(
        (b"." if i % 5 == 0 else b"") + line for i in range(60000))  # ~3.5 MB
    put(popd, big, MSG_CRLF)
    for tls in ("stls", "implicit"):
        if tls == "stls":
            p = poplib.POP3(*addr(popd), timeout=20)
            p.stls(context=tls_context(pki))
        else:
            p = poplib.POP3_SSL(*addr(popd, "listen_tls"), context=tls_context(pki), timeout=20)
        p.user("alice")
        p.pass_("wonderland")
        resp, lines, octets = p.retr(1)
        assert joined(lines) == big and octets == len(big)
        resp, lines, octets = p.retr(2)
        assert joined(lines) == MSG_CRLF
        assert p.quit().startswith(b"+OK")


def test_long_lines_and_bare_cr_in_messages(popd):
    msg = (b"Subject: long\r\n\r\n" + b"x" * 100000 + b"\r\n" + b"bare\rcr\r\n"
           + b"\rstarts with cr\r\n" + b"lf\n" + b"end")
    put(popd, msg)
    r = login_raw(popd)
    assert r.cmd("RETR 1").startswith(b"+OK")
    assert unstuff(r.body()) == wire(msg)
    r.close()


# ---------- UIDL ----------

def test_uidl_format_stable_across_sessions_and_rebuilds(popd, tmp_path):
    uids = put(popd, MSG_CRLF, MSG_LF, MSG_DOTS)
    uidv = api(popd).info("INBOX")["uid_validity"]
    p = pop(popd)
    resp, listing, _ = p.uidl()
    first = [line.split()[1].decode() for line in listing]
    assert first == ["%08x%08x" % (u, uidv) for u in uids]
    assert p.uidl(2) == b"+OK 2 %08x%08x" % (uids[1], uidv)
    p.quit()
    # A new session, then an index rebuild through the API, then the index
    # files removed altogether: the ids stay.
    p = pop(popd)
    assert [line.split()[1].decode() for line in p.uidl()[1]] == first
    p.quit()
    r = api(popd).rebuild("INBOX")
    assert r["uids_preserved"] == 3
    p = pop(popd)
    assert [line.split()[1].decode() for line in p.uidl()[1]] == first
    p.quit()
    maildir = tmp_path / "mail" / "alice" / "Maildir"
    for name in os.listdir(maildir):
        if name.startswith("petrel.index"):
            os.unlink(maildir / name)
    p = pop(popd)
    assert [line.split()[1].decode() for line in p.uidl()[1]] == first
    p.quit()
    # A later message gets a new id, the others keep theirs.
    put(popd, MSG_8BIT)
    p = pop(popd)
    ids = [line.split()[1].decode() for line in p.uidl()[1]]
    assert ids[:3] == first and len(ids) == 4 and ids[3] not in first
    p.quit()


@pytest.mark.parametrize("fmt, expect", [
    ("%u.%v", lambda u, v: "%d.%d" % (u, v)),
    ("%08xu%08xv", lambda u, v: "%08x%08x" % (u, v)),
    # Dovecot's modifiers apply in the order written: U then X is hex in
    # lower case, X then U upper case.
    ("%08UXu-%XUv", lambda u, v: "%08x-%X" % (u, v)),
    ("%Lu%03v", lambda u, v: "%d%03d" % (u, v)),
])
def test_uidl_custom_format(petreld, tmp_path, pki, fmt, expect):
    d = petreld(pop3_overrides(tmp_path, pki, extra={"uidl_format": fmt}))
    uid, = put(d, MSG_CRLF)
    uidv = api(d).info("INBOX")["uid_validity"]
    p = pop(d)
    assert p.uidl(1) == b"+OK 1 " + expect(uid, uidv).encode()
    p.quit()


# ---------- DELE, RSET, QUIT ----------

def test_dele_quit_expunges(popd):
    uids = put(popd, MSG_CRLF, MSG_LF, MSG_DOTS)
    p = pop(popd)
    assert p.dele(2).startswith(b"+OK")
    # Deleted messages are gone from this session's view at once...
    assert p.stat() == (2, len(MSG_CRLF) + len(MSG_DOTS))
    for call in (lambda: p.retr(2), lambda: p.list(2), lambda: p.uidl(2), lambda: p.dele(2),
                 lambda: p.top(2, 0)):
        with pytest.raises(poplib.error_proto, match="deleted"):
            call()
    assert [line.split()[0] for line in p.list()[1]] == [b"1", b"3"]
    # ... but not from the folder until QUIT.
    assert sorted(imap_bodies(popd)) == uids
    assert p.quit().startswith(b"+OK Logging out, 1 messages deleted")
    assert sorted(imap_bodies(popd)) == [uids[0], uids[2]]
    p = pop(popd)
    assert p.stat()[0] == 2
    p.quit()


def test_dele_rset_quit_keeps(popd):
    uids = put(popd, MSG_CRLF, MSG_LF)
    p = pop(popd)
    p.dele(1)
    p.dele(2)
    assert p.stat() == (0, 0)
    assert p.rset().startswith(b"+OK")
    assert p.stat()[0] == 2
    p.dele(2)
    p.quit()
    assert sorted(imap_bodies(popd)) == [uids[0]]


def test_dropped_connection_deletes_nothing(popd):
    uids = put(popd, MSG_CRLF, MSG_LF)
    r = login_raw(popd)
    assert r.cmd("DELE 1").startswith(b"+OK")
    assert r.cmd("DELE 2").startswith(b"+OK")
    r.close()  # no QUIT: RFC 1939 never enters UPDATE
    # The maildrop lock is held until the server has ended the dropped
    # session: a new login succeeds only once that has happened.
    deadline = time.monotonic() + 10
    while True:
        try:
            p = pop(popd)
            break
        except poplib.error_proto as e:
            assert b"[IN-USE]" in e.args[0] and time.monotonic() < deadline, e
            time.sleep(0.02)
    assert p.stat()[0] == 2
    p.quit()
    assert sorted(imap_bodies(popd)) == uids


def test_imap_deleted_flag_is_left_alone(popd):
    """QUIT expunges what this session deleted, not what an IMAP client
    merely flagged \\Deleted."""
    uids = put(popd, MSG_CRLF, MSG_LF)
    m = imap(popd)
    m.store("1", "+FLAGS", "(\\Deleted)")
    m.logout()
    p = pop(popd)
    p.dele(2)
    p.quit()
    assert sorted(imap_bodies(popd)) == [uids[0]]


# ---------- concurrency with IMAP and later deliveries ----------

def test_maildrop_is_the_snapshot_at_login(popd):
    put(popd, MSG_CRLF)
    p = pop(popd)
    assert p.stat()[0] == 1
    put(popd, MSG_LF)
    assert p.stat()[0] == 1
    assert [line.split()[0] for line in p.uidl()[1]] == [b"1"]
    with pytest.raises(poplib.error_proto):
        p.retr(2)
    q = pop(popd)  # a concurrent session is allowed and sees both
    assert q.stat()[0] == 2
    q.quit()
    p.quit()


def test_message_expunged_by_imap_during_the_session(popd):
    uids = put(popd, MSG_CRLF, MSG_LF, MSG_DOTS)
    p = pop(popd)
    assert p.stat()[0] == 3
    m = imap(popd)
    m.store("1:2", "+FLAGS", "(\\Deleted)")
    m.expunge()
    m.logout()
    with pytest.raises(poplib.error_proto, match="no longer exists"):
        p.retr(1)
    with pytest.raises(poplib.error_proto, match="no longer exists"):
        p.top(2, 0)
    # The snapshot keeps its numbering; the rest still works.
    resp, lines, _ = p.retr(3)
    assert joined(lines) == MSG_DOTS
    assert p.dele(1).startswith(b"+OK")  # already gone: deleting it is fine
    assert p.dele(3).startswith(b"+OK")
    assert p.quit().startswith(b"+OK")
    assert imap_bodies(popd) == {}
    assert uids


def test_many_sessions_of_one_user_are_limited(petreld, tmp_path, pki):
    d = petreld(pop3_overrides(tmp_path, pki, extra={"max_connections_per_user": 2}))
    a, b = pop(d), pop(d)
    with pytest.raises(poplib.error_proto, match=r"\[IN-USE\]"):
        pop(d)
    other = pop(d, "bob", "builder")
    a.quit()
    c = pop(d)
    for s in (b, c, other):
        s.quit()


# ---------- pipelining and limits ----------

def test_pipelining(popd):
    put(popd, MSG_CRLF, MSG_LF)
    r = Raw(popd)
    r.send(b"CAPA\r\nUSER alice\r\nPASS wonderland\r\nSTAT\r\nLIST\r\nUIDL 1\r\nRETR 2\r\n"
           b"TOP 1 0\r\nDELE 1\r\nRSET\r\nNOOP\r\nQUIT\r\n")
    assert r.line().startswith(b"+OK")
    assert b"PIPELINING" in r.body()
    assert r.line().startswith(b"+OK")
    assert r.line().startswith(b"+OK Logged in")
    assert r.line() == b"+OK 2 %d\r\n" % (len(MSG_CRLF) + len(wire(MSG_LF)))
    assert r.line().startswith(b"+OK 2 messages")
    assert r.body().count(b"\r\n") == 2
    assert r.line().startswith(b"+OK 1 ")
    assert r.line().startswith(b"+OK")
    assert r.body() == wire(MSG_LF)
    assert r.line().startswith(b"+OK")
    assert r.body().endswith(b"Subject: first\r\n\r\n")
    for _ in range(3):
        assert r.line().startswith(b"+OK")
    assert r.line().startswith(b"+OK Logging out, 0 messages")
    assert r.closed()


def test_oversized_line_closes_the_connection(petreld, tmp_path, pki):
    d = petreld(pop3_overrides(tmp_path, pki, extra={"max_line_length": 1024}))
    r = Raw(d)
    assert r.cmd("USER " + "a" * 1019).startswith(b"+OK")  # exactly 1024 bytes
    r.send(b"PASS " + b"x" * 5000 + b"\r\n")
    assert r.line().startswith(b"-ERR Line too long")
    assert r.closed()
    # Also without any line break at all.
    r = Raw(d)
    r.send(b"A" * 300000)
    assert r.line().startswith(b"-ERR Line too long")
    assert r.closed()
    # A SASL response counts too.
    r = Raw(d)
    assert r.cmd("AUTH PLAIN").startswith(b"+ ")
    r.send(b"A" * 2000 + b"\r\n")
    assert r.line().startswith(b"-ERR Line too long")
    assert r.closed()


def test_bad_lines_get_err_and_the_session_goes_on(popd):
    r = Raw(popd)
    for bad in (b"\r\n", b"   \r\n", b"USER a b c d e f\r\n", b"US\x00ER a\r\n",
                b"NO\rOP\r\n", b"ABCDEFGHIJKLMNOPQRSTUVWXYZ\r\n", b"\xff\xfe\r\n"):
        r.send(bad)
        line = r.line()
        assert line.startswith(b"-ERR"), (bad, line)
    r.send(b"capa\n")  # lower case and a bare LF are accepted
    assert r.line().startswith(b"+OK")
    r.body()
    r.close()


def test_login_timeout(petreld, tmp_path, pki):
    d = petreld(pop3_overrides(tmp_path, pki, extra={"login_timeout": "1s"}))
    r = Raw(d)
    started = time.monotonic()
    assert r.line().startswith(b"-ERR Disconnected for inactivity")
    assert 0.8 <= time.monotonic() - started < 5
    assert r.closed()


def test_max_connections(petreld, tmp_path, pki):
    d = petreld(pop3_overrides(tmp_path, pki, extra={"max_connections": 2}))

    def session():
        # The readiness checks connect to the listener too and may hold a
        # slot for a moment: retry those refusals.
        for _ in range(100):
            try:
                return Raw(d)
            except AssertionError:
                time.sleep(0.05)
        raise AssertionError("no connection slot came free")

    a, b = session(), session()
    s = socket.create_connection(addr(d), timeout=5)
    assert s.makefile("rb").readline().startswith(b"-ERR [SYS/TEMP] Too many connections")
    s.close()
    a.close()
    b.close()


# ---------- operations ----------

def test_shutdown_ends_sessions_without_deleting(petreld, tmp_path, pki):
    d = petreld(pop3_overrides(tmp_path, pki))
    uids = put(d, MSG_CRLF)
    r = login_raw(d)
    assert r.cmd("DELE 1").startswith(b"+OK")
    d.stop()
    assert r.line().startswith(b"-ERR Server shutting down")
    assert r.closed()
    # The message is still there (read the maildir: the daemon is gone).
    cur = tmp_path / "mail" / "alice" / "Maildir" / "cur"
    new = tmp_path / "mail" / "alice" / "Maildir" / "new"
    files = os.listdir(cur) + os.listdir(new)
    assert len(files) == len(uids) and ":2,T" not in files[0] and "T" not in files[0][-3:]


def test_metrics(popd):
    put(popd, MSG_CRLF)
    p = pop(popd)
    p.retr(1)
    with pytest.raises(poplib.error_proto):
        p.retr(9)
    q = poplib.POP3(*addr(popd), timeout=10)
    q.user("alice")
    with pytest.raises(poplib.error_proto):
        q.pass_("bad")
    text = popd.get("telemetry", "/metrics").body.decode()
    assert 'petrel_pop3_sessions{state="transaction"} 1' in text
    assert 'petrel_pop3_sessions{state="authorization"} 1' in text
    assert re.search(r"petrel_pop3_connections_total \d+", text)
    assert 'petrel_pop3_logins_total{result="ok"} 1' in text
    assert 'petrel_pop3_logins_total{result="failed"} 1' in text
    assert 'petrel_pop3_command_seconds_count{command="RETR",result="ok"} 1' in text
    assert 'petrel_pop3_command_seconds_count{command="RETR",result="err"} 1' in text
    out = int(re.search(r'petrel_pop3_bytes_total\{direction="out"\} (\d+)', text).group(1))
    assert out > len(MSG_CRLF)
    assert re.search(r'petrel_pop3_bytes_total\{direction="in"\} \d+', text)
    p.quit()
    q.quit()


@pytest.mark.parametrize("key,value,message", [
    ("idle_timeout", "5m", "idle_timeout"),
    ("uidl_format", "%Q", "unknown variable"),
    ("uidl_format", "%v", "needs %u"),
    ("uidl_format", "a b%u", "printable"),
    ("uidl_format", "%20u%20u%20u%20u", "70"),
    ("max_line_length", 100, "max_line_length"),
    ("secure_nets", ["10.0.0.0/33"], "secure_nets"),
    ("listen_tls", ["127.0.0.1:1"], "needs tls_cert_file"),
    ("warden_addr", "nohost", "warden_addr"),
    ("no_such_key", 1, "no_such_key"),
])
def test_bad_configuration_is_reported_with_file_and_line(tmp_path, key, value, message):
    cfg_path = tmp_path / "petrel.yaml"
    cfg = (f"components: [auth, pop3]\n"
           f"auth:\n  passdb: {{driver: passwd-file, path: {tmp_path}/passwd}}\n"
           f"pop3:\n  listen: [\"127.0.0.1:0\"]\n  {key}: {__import__('json').dumps(value)}\n")
    cfg_path.write_text(cfg)
    proc = run_petreld(["-c", str(cfg_path), "--check-config"])
    assert proc.returncode == 2, proc.stderr
    assert re.search(rf"{re.escape(str(cfg_path))}:\d+: pop3", proc.stderr), proc.stderr
    assert message in proc.stderr, proc.stderr


def test_check_config_prints_the_pop3_section(tmp_path):
    cfg_path = tmp_path / "petrel.yaml"
    cfg_path.write_text(f"components: [auth, pop3]\n"
                        f"auth:\n  passdb: {{driver: passwd-file, path: {tmp_path}/passwd}}\n"
                        f"pop3:\n  listen: [\"127.0.0.1:0\"]\n  idle_timeout: 15m\n")
    proc = run_petreld(["-c", str(cfg_path), "--check-config"])
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "pop3:\n" in out and "idle_timeout: 900000ms" in out
    assert 'uidl_format: "%08Xu%08Xv"' in out


def test_concurrent_clients(popd):
    """Six clients, two users, five sessions each at once: every session
    sees each user's own maildrop, every message byte for byte (lines as
    RFC 1939 gives them once poplib has removed the dot-stuffing), and the
    same UIDLs every time."""
    mailboxes = {"alice": (MSG_CRLF, MSG_LF, MSG_DOTS), "bob": (MSG_DOTS, MSG_CRLF)}
    for user, messages in mailboxes.items():
        put(popd, *messages, user=user)

    def lines(message):
        return message.replace(b"\r\n", b"\n").split(b"\n")[:-1]

    errors = []
    uidls = {"alice": set(), "bob": set()}

    def client(n):
        try:
            for _ in range(5):
                user, pw = ("alice", "wonderland") if n % 2 == 0 else ("bob", "builder")
                p = pop(popd, user, pw)
                count, _ = p.stat()
                expected = mailboxes[user]
                if count != len(expected):
                    errors.append(f"{user}: STAT {count}, expected {len(expected)}")
                for i in range(1, count + 1):
                    _, got, _ = p.retr(i)
                    if got != lines(expected[i - 1]):
                        errors.append(f"{user}: RETR {i} differs: {got!r}")
                uidls[user].add(tuple(p.uidl()[1]))
                p.quit()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=client, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(uidls["alice"]) == 1 and len(uidls["bob"]) == 1, uidls


# ---------- the session registry (warden) ----------

def test_sessions_are_registered_with_the_warden(petreld, tmp_path, pki):
    """With pop3.warden_addr set, a logged-in POP3 session is listed by the
    warden (service "pop3") until it ends by QUIT or a dropped connection;
    a connection that never logs in is not a session."""
    warden_addr = f"127.0.0.1:{free_port()}"
    cfg = pop3_overrides(tmp_path, pki, extra={"warden_addr": warden_addr}, imap=False)
    cfg["components"].append("warden")
    cfg["warden_service"] = {"listen": [warden_addr]}
    d = petreld(cfg)

    def sessions(**filters):
        r = d.post("backend", "/api/backend/who", {"group_by": "none", **filters})
        assert r.status == 200, r
        return r.json()["sessions"]

    def wait_count(n, **filters):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            got = sessions(**filters)
            if len(got) == n:
                return got
            time.sleep(0.05)
        raise AssertionError(f"expected {n} sessions, have {sessions(**filters)}")

    anon = Raw(d)
    p = pop(d)
    b = login_raw(d, "bob", "builder")
    got = wait_count(2, service="pop3")
    assert sorted(s["user"] for s in got) == ["alice", "bob"]
    assert all(s["service"] == "pop3" and s["ip"] == "127.0.0.1" for s in got)
    assert wait_count(1, user="alice")[0]["service"] == "pop3"
    p.quit()
    wait_count(1, service="pop3")
    b.close()  # dropped without QUIT
    wait_count(0, service="pop3")
    anon.close()


# ---------- delivered over LMTP, read over POP3 and IMAP ----------

def test_lmtp_delivery_read_back_over_pop3_and_imap(petreld, tmp_path, pki):
    """Mail delivered by the LMTP server reaches the POP3 maildrop of the
    next session with the bytes IMAP's BODY[] shows, Received header and
    all; every message (dot-lines, 8-bit) comes back intact."""
    import smtplib
    cfg = pop3_overrides(tmp_path, pki)
    lmtp_port = free_port()
    cfg["components"].append("lmtp")
    cfg["lmtp"] = {"listen": [f"127.0.0.1:{lmtp_port}"], "auth_addr": cfg["pop3"]["auth_addr"],
                   "username_format": "%n"}
    d = petreld(cfg)
    # smtplib ends a message that lacks a final CRLF with one more: send
    # what an MTA would, CRLF throughout.
    sent = [wire(m) for m in (MSG_CRLF, MSG_DOTS, MSG_8BIT, MSG_LF)]
    with smtplib.LMTP("127.0.0.1", lmtp_port) as lmtp:
        for msg in sent:
            refused = lmtp.sendmail("sender@example.org", ["alice@example.org"], msg)
            assert refused == {}, refused
    bodies = imap_bodies(d)
    assert len(bodies) == len(sent)
    p = pop(d)
    assert p.stat()[0] == len(sent)
    listing = {int(n): int(s) for n, s in (line.split() for line in p.list()[1])}
    for i, (uid, msg) in enumerate(sorted(bodies.items()), start=1):
        resp, lines, octets = p.retr(i)
        got = joined(lines)
        assert got == wire(msg), i
        assert listing[i] == len(msg) == octets
        # What the client sent is all there, after the headers LMTP added.
        assert got.endswith(wire(sent[i - 1]))
    p.quit()
