"""One user-name rule (core/user-name.h) for auth, storage and the warden:
a name the storage would refuse as a path is refused by auth already, so no
user logs in to find the mail store closed to them (issue 21).

The passwd-file holds ".hidden" (a leading dot) and "back\\slash" (a path
separator on the systems Dovecot migrates from) next to alice. Before, auth
let both log in over IMAP and POP3 and the storage then refused to open
their INBOX; now both are refused at LOGIN/PASS like any unknown user,
while alice logs in and reads her mail as before."""

import imaplib
import poplib

import pytest

from conftest import free_port

PASSWD = ("alice:{PLAIN}wonderland:1001:1001\n"
          ".hidden:{PLAIN}secret:1002:1002\n"
          "back\\slash:{PLAIN}secret:1003:1003\n")


@pytest.fixture
def daemon(petreld, tmp_path):
    passwd = tmp_path / "passwd"
    passwd.write_text(PASSWD)
    auth_port = free_port()
    return petreld({
        "components": ["auth", "imap", "pop3"],
        "mail": {"home": str(tmp_path / "mail" / "%u")},
        "auth": {"listen": [f"127.0.0.1:{auth_port}"], "failure_delay": "10ms",
                 "failure_delay_max": "50ms",
                 "passdb": {"driver": "passwd-file", "path": str(passwd)}},
        "imap": {"listen": [f"127.0.0.1:{free_port()}"], "auth_addr": f"127.0.0.1:{auth_port}"},
        "pop3": {"listen": [f"127.0.0.1:{free_port()}"], "auth_addr": f"127.0.0.1:{auth_port}"},
    })


def addr(d, section):
    host, port = d.config[section]["listen"][0].rsplit(":", 1)
    return host, int(port)


@pytest.mark.parametrize("user", [".hidden", "back\\slash"])
def test_name_storage_refuses_cannot_log_in(daemon, user):
    m = imaplib.IMAP4(*addr(daemon, "imap"))
    with pytest.raises(imaplib.IMAP4.error) as e:
        m.login(user, "secret")
    # Refused as a failed login, not as a store that is "unavailable".
    assert "AUTHENTICATIONFAILED" in str(e.value), e.value
    m.logout()
    p = poplib.POP3(*addr(daemon, "pop3"))
    p.user(user)
    with pytest.raises(poplib.error_proto):
        p.pass_("secret")
    p.close()


def test_valid_user_still_logs_in(daemon):
    m = imaplib.IMAP4(*addr(daemon, "imap"))
    m.login("alice", "wonderland")
    assert m.select("INBOX")[0] == "OK"
    m.logout()
