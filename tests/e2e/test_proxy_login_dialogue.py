"""The login proxy's backend dialogues (src/protocols/imap/imap-proxy-login.c,
src/protocols/pop3/pop3-proxy-login.c) against real servers, through
tests/tools/proxy-login-probe: a Petrel backend that trusts the proxy logs
the forwarded client address and session id, one that does not ignores them
(POP3: no XCLIENT is even sent), a wrong password is `rejected` with the
backend's own reply, and Dovecot 2.3 accepts the same dialogues."""

import os
import re
import subprocess

import pytest

from conftest import build_dir, free_port, wait_for
from test_storage_dovecot_interop import (DOVECOT, PASSWORD, USER, Dovecot,  # noqa: F401
                                          _nobody, workroot)


def probe(proto, host, port, user, password, client=None):
    exe = os.path.join(build_dir(), "tests", "tools", "proxy-login-probe")
    args = [exe, proto, host, str(port), user, password] + list(client or [])
    out = subprocess.run(args, capture_output=True, text=True, timeout=30)
    assert "AddressSanitizer" not in out.stderr and "runtime error" not in out.stderr, out.stderr
    assert out.returncode == 0, out
    return out.stdout.splitlines()


def backend_config(tmp_path, trusted):
    passwd = tmp_path / "passwd"
    passwd.write_text("alice:{PLAIN}wonderland:1001:1001\n")
    auth_port = free_port()
    login = {"auth_addr": f"127.0.0.1:{auth_port}"}
    if trusted:
        login["login_trusted_networks"] = ["127.0.0.0/8"]
    return {
        "components": ["auth", "imap", "pop3"],
        "mail": {"home": str(tmp_path / "mail" / "%u")},
        "auth": {"listen": [f"127.0.0.1:{auth_port}"],
                 "passdb": {"driver": "passwd-file", "path": str(passwd)}},
        "imap": {"listen": [f"127.0.0.1:{free_port()}"], **login},
        "pop3": {"listen": [f"127.0.0.1:{free_port()}"], **login},
    }


def port_of(d, section):
    return int(d.config[section]["listen"][0].rsplit(":", 1)[1])


CLIENT = ["192.0.2.7", "40123", "proxySess7", "4"]


@pytest.mark.parametrize("proto", ["imap", "pop3"])
def test_trusting_backend_takes_the_client_address(petreld, tmp_path, proto):
    d = petreld(backend_config(tmp_path, trusted=True))
    lines = probe(proto, "127.0.0.1", port_of(d, proto), "alice", "wonderland", CLIENT)
    assert lines[0].startswith("ok "), lines
    if proto == "imap":
        assert re.match(r"ok \[CAPABILITY IMAP4rev1 .*\] ", lines[0]), lines
        assert lines[1].startswith("after * BYE"), lines
    else:
        assert lines[1].startswith("after +OK"), lines
    wait_for(lambda: re.search(r"logged in.*session=proxySess7.*192\.0\.2\.7:40123",
                               d.stderr()), what="the backend's login line")


@pytest.mark.parametrize("proto", ["imap", "pop3"])
def test_untrusting_backend_keeps_the_proxy_address(petreld, tmp_path, proto):
    d = petreld(backend_config(tmp_path, trusted=False))
    lines = probe(proto, "127.0.0.1", port_of(d, proto), "alice", "wonderland", CLIENT)
    assert lines[0].startswith("ok "), lines
    wait_for(lambda: "logged in" in d.stderr(), what="the login line")
    assert "192.0.2.7" not in d.stderr() and "proxySess7" not in d.stderr()


@pytest.mark.parametrize("proto,reply", [("imap", "rejected [AUTHENTICATIONFAILED]"),
                                         ("pop3", "rejected [AUTH]")])
def test_wrong_password_is_rejected_with_the_backend_reply(petreld, tmp_path, proto, reply):
    d = petreld(backend_config(tmp_path, trusted=True))
    lines = probe(proto, "127.0.0.1", port_of(d, proto), "alice", "nope", CLIENT)
    assert lines[0].startswith(reply), lines


@pytest.mark.skipif(not os.path.exists(DOVECOT), reason="dovecot not installed")
def test_dovecot_backend_accepts_the_same_dialogues(workroot):  # noqa: F811
    home = workroot / "home" / USER
    home.mkdir(parents=True, exist_ok=True)
    os.chown(home, *_nobody())  # Dovecot's mail processes run as nobody
    dv = Dovecot(workroot, workroot / "home").start()
    try:
        imap = probe("imap", "127.0.0.1", dv.port, USER, PASSWORD, CLIENT)
        assert imap[0].startswith("ok [CAPABILITY IMAP4rev1 "), imap
        assert imap[1].startswith("after * BYE"), imap
        pop3 = probe("pop3", "127.0.0.1", dv.pop3_port, USER, PASSWORD, CLIENT)
        assert pop3[0].startswith("ok "), pop3
        bad = probe("imap", "127.0.0.1", dv.port, USER, "wrong", CLIENT)
        assert bad[0].startswith("rejected [AUTHENTICATIONFAILED]"), bad
        bad = probe("pop3", "127.0.0.1", dv.pop3_port, USER, "wrong", CLIENT)
        assert bad[0].startswith("rejected [AUTH]"), bad
    finally:
        dv.stop()
    assert not dv.errors(), "\n".join(dv.errors())
