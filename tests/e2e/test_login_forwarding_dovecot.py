"""Dovecot 2.3's own login proxy in front of a Petrel backend: Dovecot
(`proxy=y` in its passdb) logs in to Petrel on the client's behalf and
forwards the client's address the way it forwards it to a Dovecot backend
(IMAP ID x-originating-ip, POP3 XCLIENT). The client connects to Dovecot
from 127.0.0.2, Dovecot dials Petrel from 127.0.0.1, and Petrel's `who`
must show 127.0.0.2: the forwarding Petrel understands is Dovecot's."""

import imaplib
import os
import poplib
import re
import socket

import pytest

from conftest import free_port, wait_for
from test_storage_dovecot_interop import (DOVECOT, PASSWORD, USER, Dovecot,  # noqa: F401
                                          listen_addr, petrel_mail_config, workroot)

pytestmark = pytest.mark.skipif(not os.path.exists(DOVECOT), reason="dovecot not installed")


class DovecotProxy(Dovecot):
    """Dovecot's login processes proxying every login to a Petrel backend."""

    def __init__(self, root, imap_port, pop3_port):
        super().__init__(root, root / "home")
        self.backend = {"imap": imap_port, "pop3": pop3_port}

    def config(self):
        text = super().config()
        # The passdb sends every login on to Petrel, per protocol.
        static = (f"  driver = static\n  args = password={PASSWORD} proxy=y host=127.0.0.1 "
                  f"port=%{{if;%s;eq;imap;{self.backend['imap']};"
                  f"{self.backend['pop3']}}}\n")
        start = text.index("passdb {\n") + len("passdb {\n")
        end = text.index("}\n", start)
        return text[:start] + static + text[end:]


def from_127_0_0_2(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.2", 0))
    s.settimeout(10)
    s.connect(("127.0.0.1", port))
    return s


class IMAPFrom(imaplib.IMAP4):
    def _create_socket(self, timeout):
        return from_127_0_0_2(self.port)


class POP3From(poplib.POP3):
    def _create_socket(self, timeout):
        return from_127_0_0_2(self.port)


def who_ips(d, service):
    r = d.post("backend", "/api/backend/who", {})
    assert r.status == 200, r
    return [s["ip"] for g in r.json()["groups"] for s in g["sessions"] if s["service"] == service]


@pytest.mark.parametrize("trusted", [True, False])
def test_dovecot_proxy_forwards_the_client_address(petreld, workroot, tmp_path, trusted):
    cfg = petrel_mail_config(workroot / "home", tmp_path)
    warden = f"127.0.0.1:{free_port()}"
    cfg["components"].append("warden")
    cfg["warden_service"] = {"listen": [warden]}
    for proto in ("imap", "pop3"):
        cfg[proto]["warden_addr"] = warden
        if trusted:
            cfg[proto]["login_trusted_networks"] = ["127.0.0.1/32"]
    d = petreld(cfg)
    dv = DovecotProxy(workroot, listen_addr(d, "imap")[1], listen_addr(d, "pop3")[1]).start()
    try:
        want = "127.0.0.2" if trusted else "127.0.0.1"
        m = IMAPFrom("127.0.0.1", dv.port)
        m.login(USER, PASSWORD)
        assert m.select("INBOX")[0] == "OK"
        assert wait_for(lambda: who_ips(d, "imap") or None, what="the IMAP session") == [want]
        m.logout()
        p = POP3From("127.0.0.1", dv.pop3_port)
        p.user(USER)
        p.pass_(PASSWORD)
        assert wait_for(lambda: who_ips(d, "pop3") or None, what="the POP3 session") == [want]
        p.quit()
    finally:
        dv.stop()
    assert not dv.errors(), "\n".join(dv.errors())
    # Petrel's log lines carry Dovecot's session ids when they were forwarded.
    ids = re.findall(r"Started proxying.*session=<([^>]+)>", dv.logs())
    assert len(ids) == 2, dv.logs()
    for sid in ids:
        assert (f"session={sid}" in d.stderr()) == trusted, (sid, trusted)
