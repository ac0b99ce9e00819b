"""IMAP QUOTA (RFC 9208) on a real petreld, byte for byte: GETQUOTA and
GETQUOTAROOT as RFC 9208's examples show them (the same root names, limits
and usage), SETQUOTA refused with document 3's reply, quota_hidden and
quota_ignore_unlimited, the capabilities after login, imap.imap_quota off,
and the answers next to Dovecot 2.3's quota plugin (Debian's dovecot-imapd,
count backend with vsizes) given the same rule and the same messages."""

import os
import re
import shutil
import socket
import tempfile
from pathlib import Path

import pytest

import test_storage_dovecot_interop as dvi
from conftest import free_port

PASSWD = ("alice:{PLAIN}a:1001:1001::::userdb_quota_rule=*:storage=10923847K\n"
          "bob:{PLAIN}b:1002:1002::::userdb_quota_rule=*:messages=1000\n"
          "carol:{PLAIN}c:1003:1003::::userdb_quota_rule=*:storage=100K:messages=10\n"
          "dave:{PLAIN}d:1004:1004\n")


def config(tmp_path, quota=None, imap=None):
    passwd = tmp_path / "passwd"
    passwd.write_text(PASSWD)
    auth = f"127.0.0.1:{free_port()}"
    i = {"listen": [f"127.0.0.1:{free_port()}"], "auth_addr": auth}
    i.update(imap or {})
    return {
        "components": ["auth", "imap"],
        "mail": {"home": str(tmp_path / "mail" / "%u"), "fsync": "never"},
        "auth": {"listen": [auth], "passdb": {"driver": "passwd-file", "path": str(passwd)}},
        "imap": i,
        "quota": quota or {},
    }


class Raw:
    def __init__(self, port, user, password):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.f = self.sock.makefile("rb")
        self.f.readline()
        self.n = 0
        self.login = self.run(f"LOGIN {user} {password}".encode())

    def run(self, data):
        self.n += 1
        tag = b"c%d" % self.n
        self.sock.sendall(tag + b" " + data + b"\r\n")
        out = []
        while True:
            line = self.f.readline()
            assert line, out
            if line.startswith(tag + b" "):
                return out, line[len(tag) + 1:]
            out.append(line)

    def append(self, msg):
        untagged, tagged = self.run(b"APPEND INBOX {%d+}\r\n" % len(msg) + msg)
        assert tagged.startswith(b"OK"), tagged

    def close(self):
        self.sock.close()


def petrel(d, user):
    return Raw(int(d.config["imap"]["listen"][0].rsplit(":", 1)[1]), user, user[0])


def message(n, size):
    head = f"Subject: m{n}\r\nMessage-ID: <r{n}@example.net>\r\n\r\n".encode()
    return head + b"y" * (size - len(head) - 2) + b"\r\n"


def test_rfc9208_examples_byte_for_byte(petreld, tmp_path):
    # RFC 9208 4.2.1: * QUOTA "!partition/sda4" (STORAGE 104 10923847)
    d = petreld(config(tmp_path, quota={"quota_name": "!partition/sda4"}))
    c = petrel(d, "alice")
    assert b" QUOTA QUOTA=RES-STORAGE QUOTA=RES-MESSAGE" in c.login[1]
    c.append(message(1, 104 * 1024))
    untagged, tagged = c.run(b'GETQUOTA "!partition/sda4"')
    assert untagged == [b'* QUOTA "!partition/sda4" (STORAGE 104 10923847)\r\n']
    assert tagged == b"OK Getquota completed.\r\n"
    untagged, tagged = c.run(b"GETQUOTAROOT INBOX")
    assert untagged == [b'* QUOTAROOT INBOX "!partition/sda4"\r\n',
                        b'* QUOTA "!partition/sda4" (STORAGE 104 10923847)\r\n']
    assert tagged == b"OK Getquotaroot completed.\r\n"
    # RFC 9208 4.1.3: SETQUOTA; document 3 refuses every SETQUOTA
    assert c.run(b'SETQUOTA "" (STORAGE 512)') == ([], b"NO [NOPERM] Permission denied\r\n")
    assert c.run(b'GETQUOTA "#user/alice"')[1] == b"NO Quota root doesn't exist.\r\n"
    c.close()


def test_rfc9208_message_resource(petreld, tmp_path):
    # RFC 9208 4.2.2: * QUOTA "#user/alice" (MESSAGE 42 1000)
    d = petreld(config(tmp_path, quota={"quota_name": "#user/alice"}))
    c = petrel(d, "bob")
    for i in range(42):
        c.append(message(i, 100))
    untagged, tagged = c.run(b"GETQUOTAROOT INBOX")
    assert untagged == [b'* QUOTAROOT INBOX "#user/alice"\r\n',
                        b'* QUOTA "#user/alice" (MESSAGE 42 1000)\r\n']
    assert tagged == b"OK Getquotaroot completed.\r\n"
    c.close()


def test_hidden_unlimited_percentage_and_switch(petreld, tmp_path):
    d = petreld(config(tmp_path, quota={"quota_ignore_unlimited": True,
                                        "quota_storage_percentage": 50}))
    c = petrel(d, "dave")  # unlimited: no root shown
    assert c.run(b"GETQUOTAROOT INBOX") == ([b"* QUOTAROOT INBOX\r\n"],
                                            b"OK Getquotaroot completed.\r\n")
    assert c.run(b'GETQUOTA "User quota"')[1] == b"NO Quota root doesn't exist.\r\n"
    c.close()
    c = petrel(d, "carol")  # 100K at 50 %: 50 KiB; messages not scaled
    assert c.run(b'GETQUOTA "User quota"')[0] == [
        b'* QUOTA "User quota" (STORAGE 0 50 MESSAGE 0 10)\r\n']
    c.close()
    d.stop()
    d = petreld(config(tmp_path, quota={"quota_hidden": True}))
    c = petrel(d, "carol")
    assert c.run(b"GETQUOTAROOT INBOX")[0] == [b"* QUOTAROOT INBOX\r\n"]
    c.close()
    d.stop()
    d = petreld(config(tmp_path, imap={"imap_quota": False}))
    c = petrel(d, "carol")
    assert b"QUOTA" not in c.login[1]
    assert c.run(b'GETQUOTA "User quota"')[1].startswith(b"BAD")
    c.close()


class QuotaDovecot(dvi.Dovecot):
    """Dovecot with its quota plugin: count backend (usage from the index,
    as Petrel's), vsizes (CRLF sizes, what Petrel stores), one rule."""

    def config(self):
        return dvi.Dovecot.config(self) + """
mail_plugins = $mail_plugins quota
protocol imap {
  mail_plugins = $mail_plugins imap_quota
}
plugin {
  quota = count:User quota
  quota_rule = *:storage=100K:messages=10
  quota_vsizes = yes
}
"""


def session(raw, msgs):
    """The same commands on either server; tagged lines without Dovecot's
    timing suffix."""
    out = []

    def run(cmd):
        untagged, tagged = raw.run(cmd)
        tagged = re.sub(rb" \([0-9.+ ]+ secs\)", b"", tagged)
        out.append((cmd, untagged, tagged))

    run(b"GETQUOTAROOT INBOX")
    for m in msgs:
        raw.append(m)
        run(b'GETQUOTA "User quota"')
    run(b"GETQUOTAROOT INBOX")
    run(b'GETQUOTAROOT "Not there"')
    run(b'GETQUOTA "nope"')
    run(b'GETQUOTA ""')
    return out


@pytest.mark.skipif(not os.path.exists(dvi.DOVECOT), reason="dovecot not installed")
def test_same_answers_as_dovecot(petreld, tmp_path):
    msgs = [message(1, 2016), message(2, 6016), message(3, 1), message(4, 3 * 1024)]
    d = petreld(config(tmp_path))
    c = petrel(d, "carol")
    ours = session(c, msgs)
    c.close()
    root = Path(tempfile.mkdtemp(prefix="petrel-dovecot-"))
    os.chmod(root, 0o755)
    home = root / "home"
    (home / dvi.USER).mkdir(parents=True)
    os.chown(home / dvi.USER, *dvi._nobody())
    dv = QuotaDovecot(root, home)
    try:
        dv.start()
        raw = Raw(dv.port, dvi.USER, dvi.PASSWORD)
        assert b" QUOTA" in raw.login[1]
        theirs = session(raw, msgs)
        raw.close()
    finally:
        dv.stop()
        shutil.rmtree(root, ignore_errors=True)
    for (cmd, u1, t1), (_, u2, t2) in zip(ours, theirs):
        assert u1 == u2, (cmd, u1, u2)
        assert t1.split()[0] == t2.split()[0], (cmd, t1, t2)
        if t1.startswith(b"OK"):
            assert t1 == t2, (cmd, t1, t2)
    assert len(ours) == len(theirs)
