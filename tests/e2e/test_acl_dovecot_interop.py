"""ACL interoperability with the real Dovecot 2.3 (Debian's dovecot-imapd,
its acl and imap_acl plugins): a folder's ACL written by Petrel is what
Dovecot reads (`doveadm acl get`), and one written by Dovecot (IMAP SETACL)
is what Petrel reads (GETACL) and enforces.

The Dovecot harness is test_storage_dovecot_interop's, with
`mail_plugins = acl`, `imap_acl` for IMAP and the vfile backend."""

import os
import re
import shutil
import subprocess

import pytest

from test_storage_dovecot_interop import (DOVECOT, PASSWORD, USER, Dovecot, _nobody, chown_tree,
                                          dovecot as _dovecot_fixture, listen_addr,
                                          petrel_mail_config, workroot)  # noqa: F401

import imaplib

pytestmark = pytest.mark.skipif(not os.path.exists(DOVECOT), reason="dovecot not installed")

DOVEADM = shutil.which("doveadm") or "/usr/bin/doveadm"


class DovecotAcl(Dovecot):
    def config(self):
        return super().config() + """
mail_plugins = acl
protocol imap {
  mail_plugins = $mail_plugins imap_acl
}
plugin {
  acl = vfile
}
"""

    def acl_get(self, folder):
        """doveadm acl get: {identifier: set of rights words, '-' for negative ones}."""
        out = subprocess.run([DOVEADM, "-c", str(self.root / "dovecot.conf"), "acl", "get",
                              "-u", USER, folder], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        rows = {}
        for line in out.stdout.splitlines()[1:]:
            parts = line.split()
            if parts:
                rows[parts[0]] = set(parts[1:])
        return rows


@pytest.fixture
def dovecot_acl(workroot):  # noqa: F811
    servers = []

    def make():
        dv = DovecotAcl(workroot, workroot / "home")
        servers.append(dv)
        return dv

    yield make
    for dv in servers:
        dv.stop()


def petrel_acl_config(home_root, tmp_path):
    cfg = petrel_mail_config(home_root, tmp_path)
    cfg["mail"]["acl"] = {"enabled": True, "cache_secs": 0}
    return cfg


def petrel_imap(d):
    m = imaplib.IMAP4(*listen_addr(d, "imap"))
    m.login(USER, PASSWORD)
    return m


def cmd(m, line):
    tag = m._new_tag()
    m.send(tag + b" " + line + b"\r\n")
    untagged = []
    while True:
        got = m._get_line()
        if got.startswith(tag + b" "):
            return untagged, got[len(tag) + 1:]
        untagged.append(got)


def test_dovecot_reads_the_acl_petrel_wrote(petreld, dovecot_acl, workroot, tmp_path):
    home_root = workroot / "home"
    d = petreld(petrel_acl_config(home_root, tmp_path))
    m = petrel_imap(d)
    for line in (b"CREATE Shared", b"SETACL Shared bob lrcd", b"SETACL Shared -bob w",
                 b"SETACL Shared $grp lrs", b"SETACL Shared owner lrswia"):
        assert cmd(m, line)[1].startswith(b"OK"), line
    m.logout()
    d.stop()
    chown_tree(home_root, *_nobody())
    dv = dovecot_acl().start()
    rows = dv.acl_get("Shared")
    assert rows == {
        "group=grp": {"lookup", "read", "write-seen"},
        "owner": {"lookup", "read", "write-seen", "write", "insert", "admin"},
        "user=bob": {"lookup", "read", "create", "delete", "write-deleted", "expunge", "-write"},
    }, rows
    # Dovecot enforces what Petrel wrote: the owner may not create below.
    m = dv.imap()
    typ, data = m.create("Shared/Below")
    assert typ == "NO" and b"[NOPERM]" in data[0], data
    m.logout()
    dv.stop()
    assert not dv.errors(), "\n".join(dv.errors())


def test_petrel_reads_the_acl_dovecot_wrote(petreld, dovecot_acl, workroot, tmp_path):
    home_root = workroot / "home"
    uid_, gid_ = _nobody()
    os.chown(home_root, uid_, gid_)
    dv = dovecot_acl().start()
    m = dv.imap()
    for line in (b"CREATE Team", b"SETACL Team bob lrcd", b"SETACL Team -bob w",
                 b"SETACL Team $grp lrs", b"SETACL Team owner lr"):
        untagged, tagged = cmd(m, line)
        assert tagged.startswith(b"OK"), (line, tagged)
    dv_getacl = cmd(m, b"GETACL Team")[0]
    m.logout()
    dv.stop()
    assert not dv.errors(), "\n".join(dv.errors())

    d = petreld(petrel_acl_config(home_root, tmp_path))
    m = petrel_imap(d)
    untagged, tagged = cmd(m, b"GETACL Team")
    assert tagged == b"OK Getacl completed.", tagged

    def entries(line):
        words = line.split()[3:]
        return {(words[i], frozenset(words[i + 1].decode())) for i in range(0, len(words), 2)}

    # The same entries as Dovecot shows (letters in RFC 4314's order here,
    # in the order Dovecot read them there). Dovecot shows the owner entry
    # under the owner's name too.
    assert entries(untagged[0]) == entries(dv_getacl[0]), (untagged, dv_getacl)
    assert untagged == [b"* ACL Team $grp lrs " + USER.encode() + b" lra bob lrkxtecd -bob w"]
    # And enforces them: the owner entry "lr" (+a) refuses an APPEND.
    typ, data = m.append("Team", None, None, b"Subject: x\r\n\r\nx\r\n")
    assert typ == "NO" and data[0].startswith(b"[NOPERM]"), data
    m.logout()
