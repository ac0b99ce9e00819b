"""Shared namespaces against the real Dovecot 2.3 (Debian's dovecot-imapd,
acl and imap_acl plugins, a shared namespace prefix=shared/%%u/ with
acl_shared_dict): on the same homes, the reader of a folder another user
shared read-only gets the same NAMESPACE, LIST, EXAMINE and missing-folder
answers from Petrel as from Dovecot (names compared without the quotes
Petrel always puts around them, LIST lines in sorted order).

The Dovecot harness is test_storage_dovecot_interop's."""

import imaplib
import os
import re

import pytest

from test_acl_dovecot_interop import DovecotAcl, cmd
from test_storage_dovecot_interop import (DOVECOT, PASSWORD, _nobody, chown_tree, listen_addr,
                                          petrel_mail_config, workroot)  # noqa: F401

pytestmark = pytest.mark.skipif(not os.path.exists(DOVECOT), reason="dovecot not installed")

OWNER, READER = "u1", "u2"
MSG = b"Subject: shared\r\n\r\nBody.\r\n"


class DovecotShared(DovecotAcl):
    def config(self):
        return super().config() + f"""
namespace shared {{
  type = shared
  separator = /
  prefix = shared/%%u/
  location = maildir:%%h/Maildir:INDEXPVT=~/Maildir/shared/%%u
  subscriptions = no
  list = children
}}
plugin {{
  acl_shared_dict = file:{self.root}/dict/shared-mailboxes.db
}}
"""

    def login(self, user):
        m = imaplib.IMAP4("127.0.0.1", self.port, timeout=30)
        m.login(user, PASSWORD)
        return m


def petrel_login(d, user):
    m = imaplib.IMAP4(*listen_addr(d, "imap"))
    m.login(user, PASSWORD)
    return m


def unquote(lines):
    """LIST lines with the name unquoted, in a fixed order (the two list
    the namespaces in different orders; RFC 3501 sets none)."""
    return sorted(re.sub(rb'"([^"]*)"$', rb"\1", l) for l in lines)


def reader_view(m):
    """What the reader is told, in the order asked."""
    out = {}
    out["namespace"] = cmd(m, b"NAMESPACE")[0]
    out["list*"] = (unquote(cmd(m, b'LIST "" "*"')[0]), cmd(m, b'LIST "" "*"')[1][:2])
    out["list%"] = (unquote(cmd(m, b'LIST "" "%"')[0]), cmd(m, b'LIST "" "%"')[1][:2])
    untagged, tagged = cmd(m, b"EXAMINE shared/u1/Team")
    out["examine"] = (sorted(l for l in untagged if b"EXISTS" in l or b"PERMANENTFLAGS" in l),
                      tagged.split(b"]")[0] + b"]")
    out["myrights"] = cmd(m, b"MYRIGHTS shared/u1/Team")[0]
    # A folder not shared and one that does not exist answer the same
    # (Dovecot names the folder and has no response code; Petrel answers
    # NONEXISTENT as for its own folders).
    private = re.sub(rb"\(.*secs\)", b"", cmd(m, b"SELECT shared/u1/Private")[1])
    missing = re.sub(rb"\(.*secs\)", b"", cmd(m, b"SELECT shared/u1/Nothing")[1])
    assert private.startswith(b"NO ")
    assert private.replace(b"Private", b"Nothing") == missing, (private, missing)
    return out


def test_reader_sees_what_dovecot_shows(petreld, workroot):  # noqa: F811
    home_root = workroot / "home"
    os.chown(home_root, *_nobody())
    (workroot / "dict").mkdir()
    os.chown(workroot / "dict", *_nobody())  # Dovecot's mail processes write it
    dv = DovecotShared(workroot, home_root).start()
    m = dv.login(OWNER)
    for line in (b"CREATE Team", b"CREATE Private", b"SETACL Team u2 lr"):
        assert cmd(m, line)[1].startswith(b"OK"), line
    assert m.append("Team", None, None, MSG)[0] == "OK"
    m.logout()
    r = dv.login(READER)
    dovecot = reader_view(r)
    r.logout()
    dv.stop()
    assert not dv.errors(), "\n".join(dv.errors())

    cfg = petrel_mail_config(home_root, workroot)
    cfg["components"] = ["auth", "imap", "backend-api"]
    del cfg["pop3"]
    (workroot / "passwd").write_text(
        f"{OWNER}:{{PLAIN}}{PASSWORD}::::::\n{READER}:{{PLAIN}}{PASSWORD}::::::\n")
    cfg["auth"]["passdb"]["path"] = str(workroot / "passwd")
    cfg["mail"]["acl"] = {"enabled": True, "cache_secs": 0, "sharing_map": "reg"}
    cfg["dicts"] = {"reg": {"driver": "file", "path": str(workroot / "petrel-registry.db")}}
    cfg["mail"]["namespaces"].append(
        {"name": "shared", "type": "shared", "prefix": "shared/%u/", "separator": "/",
         "location": "maildir:%h/Maildir", "index_private": "%h/Maildir/shared"})
    d = petreld(cfg)
    m = petrel_login(d, OWNER)
    # Petrel's discovery is its own index and registry: the grant is made
    # again through Petrel (the same file results).
    assert cmd(m, b"SETACL Team u2 lr")[1].startswith(b"OK")
    m.logout()
    r = petrel_login(d, READER)
    petrel = reader_view(r)
    r.logout()
    for key in dovecot:
        assert petrel[key] == dovecot[key], (key, petrel[key], dovecot[key])
