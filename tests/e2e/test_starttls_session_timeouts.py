"""A client that upgrades with STARTTLS (IMAP) or STLS (POP3), logs in and
then stays quiet for longer than login_timeout keeps its session: once
logged in only idle_timeout applies, also under TLS layered on a plain
connection (protocols/common/mail-session-io.c clears the timeout of the
plain connection below the TLS filter). Before the shared session layer the
IMAP server dropped such a client after login_timeout with "* BYE
Disconnected for inactivity." - the POP3 server already did it right.
Clients: Python's imaplib and poplib over real TLS."""

import imaplib
import poplib
import time

from test_imap_session import addr as imap_addr
from test_imap_session import imap_overrides
from test_imap_session import tls_context
from test_pop3 import addr as pop3_addr
from test_pop3 import pop3_overrides

QUIET = 2.5  # seconds: longer than the 1 s login_timeout below


def test_imap_starttls_session_outlives_login_timeout(petreld, tmp_path, pki):
    d = petreld(imap_overrides(tmp_path, pki, extra={"login_timeout": "1s"}))
    m = imaplib.IMAP4(*imap_addr(d))
    m.starttls(ssl_context=tls_context(pki))
    m.login("alice", "wonderland")
    time.sleep(QUIET)
    m.sock.settimeout(10)
    typ, data = m.noop()
    assert typ == "OK", data
    m.logout()


def test_imap_starttls_login_timeout_still_applies_before_login(petreld, tmp_path, pki):
    d = petreld(imap_overrides(tmp_path, pki, extra={"login_timeout": "1s"}))
    m = imaplib.IMAP4(*imap_addr(d))
    m.starttls(ssl_context=tls_context(pki))
    m.sock.settimeout(10)
    t0 = time.monotonic()
    line = m.readline()
    assert line.startswith(b"* BYE"), line
    assert time.monotonic() - t0 < 5


def test_pop3_stls_session_outlives_login_timeout(petreld, tmp_path, pki):
    d = petreld(pop3_overrides(tmp_path, pki, extra={"login_timeout": "1s"}, imap=False))
    p = poplib.POP3(*pop3_addr(d), timeout=10)
    assert p.stls(context=tls_context(pki)).startswith(b"+OK")
    p.user("alice")
    p.pass_("wonderland")
    time.sleep(QUIET)
    assert p.noop().startswith(b"+OK")
    p.quit()
