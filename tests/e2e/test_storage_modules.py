"""Storage modules (docs/storage.md "How a storage module plugs in"): a rule
written once in the storage holds for every front end.

The daemon is started with PETREL_TEST_VETO_SAVE=alice, which registers the
test module storage/test-veto-module.c (compiled into debug builds only):
it refuses every save into alice's folders with the storage's typed error
PETREL_ERR_OVER_QUOTA, before any byte is written. Each front end must take
that veto through the storage's hook and answer with its own protocol's
error, and nothing may be left on disk:

  IMAP APPEND (small, and a large literal saved from its spool file),
  MULTIAPPEND, CATENATE, COPY, MOVE
                              NO [OVERQUOTA] <the module's text>
  LMTP delivery               452 4.2.2 <the module's text> for alice (over
                              quota is temporary: docs/spec 3), 250 for bob
                              in the same DATA
  API mail/append             HTTP 507

bob, not named by the switch, saves as before; alice's reads, flag changes
and folder operations are untouched. The module also checks that the hook
learns the size of what is saved (a quota module needs it), from its log
line."""

import base64
import imaplib
import json
import re
import socket
import time
from pathlib import Path

import pytest

from conftest import BUILD, wait_for
from test_lmtp import client, deliver, lmtp_overrides

SEED = (b"From: seed@example.net\r\n"
        b"Subject: already there\r\n"
        b"\r\n"
        b"A message another program delivered.\r\n")

MSG = (b"From: Sender <sender@example.net>\r\n"
       b"Subject: vetoed\r\n"
       b"\r\n"
       b"This must not be stored.\r\n")


def build_has_test_modules():
    """Whether this build compiles test modules (meson option test_modules:
    auto = debug builds). A build from before the option existed counts as
    its buildtype says, so the tests run (and fail) against it."""
    info = BUILD / "meson-info" / "intro-buildoptions.json"
    if not info.exists():
        return False
    opts = {o["name"]: o["value"] for o in json.loads(info.read_text())}
    mode = opts.get("test_modules", "auto")
    return mode == "enabled" or (mode == "auto" and opts.get("buildtype") == "debug")


@pytest.fixture
def vetod(petreld, tmp_path):
    if not build_has_test_modules():
        pytest.skip("this build has no test modules (release build)")
    # A message alice already has, as another MDA would leave it in new/.
    new = tmp_path / "mail" / "alice" / "Maildir" / "new"
    new.mkdir(parents=True)
    for sub in ("cur", "tmp"):
        (new.parent / sub).mkdir()
    (new / "1700000000.M1P1.seed").write_bytes(SEED)
    cfg = lmtp_overrides(tmp_path)
    cfg["components"].append("backend-api")
    d = petreld(cfg, env={"PETREL_TEST_VETO_SAVE": "alice"})
    assert "test storage module enabled" in d.stderr(), d.stderr()
    return d


def imap(d, user="alice", password="wonderland"):
    host, port = d.config["imap"]["listen"][0].rsplit(":", 1)
    m = imaplib.IMAP4(host, int(port))
    m.login(user, password)
    return m


def message_files(tmp_path, user, folder=""):
    root = Path(tmp_path) / "mail" / user / "Maildir"
    if folder:
        root = root / ("." + folder)
    out = []
    for sub in ("cur", "new", "tmp"):
        p = root / sub
        if p.is_dir():
            out += [f for f in p.iterdir() if not f.name.startswith(".")]
    return out


def refusals(d):
    """(kind, count, size) of every save the test module refused so far."""
    return [(int(k), int(c), int(s)) for k, c, s in
            re.findall(r"test module refused a save.*?kind=(\d+) count=(\d+) size=(\d+)",
                       d.stderr())]


def test_imap_append_refused_with_overquota(vetod, tmp_path):
    m = imap(vetod)
    m.select("INBOX")  # the seed moves from new/ to cur/ now
    before = sorted(f.name for f in message_files(tmp_path, "alice"))
    typ, data = m.append("INBOX", None, None, MSG)
    assert typ == "NO" and data[0].startswith(b"[OVERQUOTA]"), (typ, data)
    # The reply's text is the module's (a quota's quota_exceeded_message).
    assert b"saves of alice are refused" in data[0], data
    # A literal large enough to be spooled is saved from its file: the same
    # hook refuses it before the file becomes a message.
    big = MSG + b"x" * 200 + b"\r\n" + (b"y" * 998 + b"\r\n") * 300
    typ, data = m.append("INBOX", None, None, big)
    assert typ == "NO" and data[0].startswith(b"[OVERQUOTA]"), (typ, data)
    m.noop()
    typ, data = m.search(None, "ALL")
    assert data == [b"1"]  # only the seed
    m.logout()
    assert sorted(f.name for f in message_files(tmp_path, "alice")) == before
    # The hook learnt the size of each message before refusing it.
    assert refusals(vetod) == [(0, 1, len(MSG)), (0, 1, len(big))]


def test_imap_copy_refused(vetod, tmp_path):
    m = imap(vetod)
    assert m.create("Archive")[0] == "OK"  # folder operations are not saves
    m.select("INBOX")
    typ, data = m.copy("1", "Archive")
    assert typ == "NO" and data[0].startswith(b"[OVERQUOTA]"), (typ, data)
    typ, data = m.uid("COPY", "1:*", "Archive")
    assert typ == "NO" and data[0].startswith(b"[OVERQUOTA]"), (typ, data)
    # Flags are not saves: they still change.
    assert m.store("1", "+FLAGS", "(\\Flagged)")[0] == "OK"
    assert m.select("Archive")[1] == [b"0"]
    m.logout()
    assert message_files(tmp_path, "alice", "Archive") == []
    # COPY (kind 1) of one message, its size known to the hook.
    assert refusals(vetod) == [(1, 1, len(SEED))] * 2


def test_imap_move_refused_source_kept(vetod, tmp_path):
    """The tagged NO of MOVE carries [OVERQUOTA] (read off the wire) and the
    message stays where it was: not copied, not \\Deleted, not expunged."""
    host, port = vetod.config["imap"]["listen"][0].rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10)
    f = s.makefile("rb")

    def cmd(line):
        s.sendall(line + b"\r\n")
        tag = line.split(b" ", 1)[0]
        while True:
            got = f.readline()
            assert got, "connection closed"
            if got.startswith(tag + b" "):
                return got

    f.readline()  # greeting
    assert cmd(b"a LOGIN alice wonderland").startswith(b"a OK")
    assert cmd(b"b CREATE Archive").startswith(b"b OK")
    assert cmd(b"c SELECT INBOX").startswith(b"c OK")
    assert cmd(b"d MOVE 1 Archive").startswith(b"d NO [OVERQUOTA]")
    assert cmd(b"e UID MOVE 1:* Archive").startswith(b"e NO [OVERQUOTA]")
    assert cmd(b"f LOGOUT").startswith(b"f OK")
    s.close()
    m = imap(vetod)
    m.select("INBOX")
    typ, data = m.fetch("1", "(FLAGS BODY.PEEK[])")
    assert typ == "OK" and data[0][1] == SEED and b"\\Deleted" not in data[0][0], data
    assert m.select("Archive")[1] == [b"0"]
    m.logout()
    assert message_files(tmp_path, "alice", "Archive") == []
    # MOVE is kind 2.
    assert refusals(vetod) == [(2, 1, len(SEED))] * 2


def test_lmtp_delivery_refused_per_recipient(vetod, tmp_path):
    c = client(vetod)
    out = deliver(c, ["alice@example.org", "bob@example.org"], msg=MSG)
    c.quit()
    assert out["alice@example.org"][0] == 452, out
    assert out["alice@example.org"][1].startswith(b"4.2.2"), out
    assert b"saves of alice are refused" in out["alice@example.org"][1], out
    assert out["bob@example.org"][0] == 250, out
    # alice has only the seed; bob got the message.
    assert len(message_files(tmp_path, "alice")) == 1
    m = imap(vetod, "bob", "builder")
    m.select("INBOX")
    typ, data = m.fetch("1", "(BODY.PEEK[TEXT])")
    assert typ == "OK" and b"This must not be stored." in data[0][1]
    m.logout()
    # The hook saw the message with this recipient's trace headers.
    [(kind, count, size)] = refusals(vetod)
    assert kind == 0 and count == 1 and size > len(MSG)


def test_api_mail_append_refused_507(vetod, tmp_path):
    body = {"user": "alice", "folder": "INBOX", "message": base64.b64encode(MSG).decode()}
    r = vetod.post("backend", "/api/backend/mail/append", body=body, timeout=30)
    assert r.status == 507, r
    assert "refused" in r.json()["error"]
    body["user"] = "bob"
    r = vetod.post("backend", "/api/backend/mail/append", body=body, timeout=30)
    assert r.status == 200, r
    assert len(message_files(tmp_path, "alice")) == 1
    assert len(message_files(tmp_path, "bob")) == 1
    assert refusals(vetod) == [(0, 1, len(MSG))]


def raw_imap(d):
    """A raw connection logged in as alice: cmd(line) -> the tagged reply."""
    host, port = d.config["imap"]["listen"][0].rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10)
    f = s.makefile("rb")
    f.readline()  # greeting

    def cmd(line):
        tag = line.split(b" ", 1)[0]
        s.sendall(line + b"\r\n")
        while True:
            got = f.readline()
            assert got, "connection closed"
            if got.startswith(tag + b" "):
                return got

    assert cmd(b"a LOGIN alice wonderland").startswith(b"a OK")
    return s, cmd


def test_imap_multiappend_and_catenate_refused(vetod, tmp_path):
    """MULTIAPPEND (RFC 3502) is refused as a whole and CATENATE (RFC 4469)
    like any APPEND: NO [OVERQUOTA], nothing on disk."""
    m = imap(vetod)
    m.select("INBOX")
    m.logout()
    before = sorted(f.name for f in message_files(tmp_path, "alice"))
    s, cmd = raw_imap(vetod)
    line = (b"b APPEND INBOX {%d+}\r\n" % len(MSG) + MSG +
            b" (\\Seen) {%d+}\r\n" % len(MSG) + MSG)
    assert cmd(line).startswith(b"b NO [OVERQUOTA]")
    line = (b"c APPEND INBOX CATENATE (URL \"/INBOX/;UID=1\" TEXT {%d+}\r\n" % len(MSG) + MSG +
            b")")
    assert cmd(line).startswith(b"c NO [OVERQUOTA]")
    assert cmd(b"d LOGOUT").startswith(b"d OK")
    s.close()
    assert sorted(f.name for f in message_files(tmp_path, "alice")) == before
    # The first message of the MULTIAPPEND was refused (nothing to take out
    # again); CATENATE's hook saw the whole built message.
    assert refusals(vetod) == [(0, 1, len(MSG)), (0, 1, len(SEED) + len(MSG))]
