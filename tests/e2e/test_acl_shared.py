"""Shared and public namespaces (docs/acl.md "Shared and public
namespaces"): a per-owner shared namespace "shared/%u/" in which a user
reaches the folders other users granted them, a public namespace "Public/"
whose folders only ACLs open, and private \\Seen (INDEXPVT) for readers of
shared and public folders.

Real parts: one petreld with auth (passwd-file: alice, bob, carol), IMAP
and the backend API; imaplib. mail.acl.cache_secs is 0 so a grant or a
revocation by one session is seen by the next command of another."""

import imaplib
import json
import os
from pathlib import Path

import pytest

from conftest import free_port, run_petreld
from servers import redis_server  # noqa: F401 (fixture of the Redis variant)

PASSWD = ("alice:{PLAIN}wonderland:1001:1001\n"
          "bob:{PLAIN}builder:1002:1002\n"
          "carol:{PLAIN}singer:1003:1003\n")
PASSWORDS = {"alice": "wonderland", "bob": "builder", "carol": "singer"}

MSG = (b"From: Sender <sender@example.net>\r\n"
       b"Subject: shared\r\n"
       b"\r\n"
       b"Body.\r\n")

NOPERM = b"NO [NOPERM] The mail store does not allow this."
NONEXISTENT = b"NO [NONEXISTENT] Mailbox does not exist."
READONLY = b"NO [READ-ONLY] Mailbox is read-only."


def shared_config(tmp_path, index_private=True, acl=True, registry=True):
    passwd = tmp_path / "passwd"
    passwd.write_text(PASSWD)
    auth_port = free_port()
    shared = {"name": "shared", "type": "shared", "prefix": "shared/%u/", "separator": "/",
              "location": "maildir:%h/Maildir"}
    public = {"name": "public", "type": "public", "prefix": "Public/", "separator": "/",
              "location": f"maildir:{tmp_path}/public", "subscriptions": False}
    if index_private:
        shared["index_private"] = "%h/pvt"
        public["index_private"] = "%h/pvt"
    cfg = {
        "components": ["auth", "imap", "backend-api"],
        "mail": {"home": str(tmp_path / "mail" / "%u"), "fsync": "never",
                 "acl": {"enabled": acl, "cache_secs": 0},
                 "namespaces": [
                     {"name": "inbox", "type": "personal", "prefix": "", "separator": "/",
                      "location": "maildir:%h/Maildir"},
                     shared, public]},
        "auth": {"listen": [f"127.0.0.1:{auth_port}"],
                 "passdb": {"driver": "passwd-file", "path": str(passwd)}},
        "imap": {"listen": [f"127.0.0.1:{free_port()}"],
                 "auth_addr": f"127.0.0.1:{auth_port}"},
    }
    if registry:
        # the owner-discovery registry (Dovecot's acl_shared_dict)
        cfg["dicts"] = {"reg": {"driver": "file", "path": str(tmp_path / "registry.db")}}
        cfg["mail"]["acl"]["sharing_map"] = "reg"
    return cfg


@pytest.fixture
def shd(petreld, tmp_path):
    return petreld(shared_config(tmp_path))


def login(d, user):
    host, port = d.config["imap"]["listen"][0].rsplit(":", 1)
    m = imaplib.IMAP4(host, int(port))
    m.login(user, PASSWORDS[user])
    return m


def raw(m, line):
    """One command line; (untagged lines, tagged reply without the tag)."""
    tag = m._new_tag()
    m.send(tag + b" " + line + b"\r\n")
    untagged = []
    while True:
        got = m._get_line()
        if got.startswith(tag + b" "):
            return untagged, got[len(tag) + 1:]
        untagged.append(got)


def ok(m, line):
    untagged, tagged = raw(m, line)
    assert tagged.startswith(b"OK"), (line, untagged, tagged)
    return untagged


def append(m, folder, flags=b"()"):
    tag = m._new_tag()
    m.send(tag + b" APPEND " + folder + b" " + flags + b" {%d}\r\n" % len(MSG))
    assert m._get_line().startswith(b"+")
    m.send(MSG + b"\r\n")
    while True:
        got = m._get_line()
        if got.startswith(tag + b" "):
            return got[len(tag) + 1:]


def no_recent(lines):
    """\\Recent left out: it belongs to whichever session saw a message first."""
    return [l.replace(b"\\Recent", b"").replace(b"( ", b"(").replace(b" )", b")")
            .replace(b"  ", b" ") for l in lines]


def flags_of(m, folder):
    """The flags of each message of `folder` as `m` sees them (EXAMINE,
    \\Recent left out: it is per session)."""
    ok(m, b"EXAMINE " + folder)
    lines = ok(m, b"FETCH 1:* (FLAGS)")
    ok(m, b"UNSELECT")
    return no_recent(lines)


def owner_shares(d, folder=b"Team", rights=b"lr", to=b"bob"):
    """alice makes `folder` with one message and grants `to` `rights`."""
    a = login(d, "alice")
    ok(a, b"CREATE " + folder)
    assert append(a, folder).startswith(b"OK")
    ok(a, b"SETACL " + folder + b" " + to + b" " + rights)
    return a


def test_namespace_response_lists_shared_and_public(shd):
    m = login(shd, "bob")
    assert ok(m, b"NAMESPACE") == [
        b'* NAMESPACE (("" "/")) (("shared/" "/")) (("Public/" "/"))']


def test_read_only_share_select_fetch_but_no_store_expunge_append(shd):
    a = owner_shares(shd)
    b = login(shd, "bob")
    untagged, tagged = raw(b, b"SELECT shared/alice/Team")
    # lr only: read-only, no flag may be kept (as Dovecot).
    assert tagged == b"OK [READ-ONLY] Select completed." or tagged.startswith(b"OK [READ-ONLY]"), \
        tagged
    assert b"* OK [PERMANENTFLAGS ()] No permanent flags permitted." in untagged or any(
        l.startswith(b"* OK [PERMANENTFLAGS ()]") for l in untagged), untagged
    assert b"* 1 EXISTS" in untagged
    # A body FETCH without s keeps no \\Seen, for bob or the owner.
    got = ok(b, b"FETCH 1 (BODY[HEADER.FIELDS (SUBJECT)])")
    assert got[0] == b"* 1 FETCH (BODY[HEADER.FIELDS (SUBJECT)] {19}", got
    assert ok(b, b"FETCH 1 (FLAGS)") == [b"* 1 FETCH (FLAGS (\\Recent))"]
    # Read-only (no i e w t s): what changes the folder is refused.
    assert raw(b, b"STORE 1 +FLAGS (\\Flagged)") == ([], READONLY)
    assert raw(b, b"STORE 1 +FLAGS (\\Deleted)") == ([], READONLY)
    assert raw(b, b"EXPUNGE") == ([], READONLY)
    assert append(b, b"shared/alice/Team") == NOPERM
    assert raw(b, b"COPY 1 shared/alice/Team") == ([], NOPERM)
    assert raw(b, b"MYRIGHTS shared/alice/Team") == (
        [b"* MYRIGHTS shared/alice/Team lr"], b"OK Myrights completed.")
    # The owner's message is unchanged, \Seen included.
    assert flags_of(a, b"Team") == [b"* 1 FETCH (FLAGS ())"]
    # STATUS through the shared name reaches the owner's folder.
    assert raw(b, b"STATUS shared/alice/Team (MESSAGES)") == (
        [b'* STATUS "shared/alice/Team" (MESSAGES 1)'], b"OK STATUS completed.")


def test_missing_and_unshared_folders_look_the_same(shd):
    a = owner_shares(shd)
    ok(a, b"CREATE Private")
    b = login(shd, "bob")
    for name in (b"shared/alice/Private", b"shared/alice/Nothing", b"shared/nobody/Team",
                 b"shared/alice", b"shared/bob/INBOX", b"shared/alice/INBOX"):
        assert raw(b, b"SELECT " + name) == ([], NONEXISTENT), name
        assert raw(b, b"EXAMINE " + name) == ([], NONEXISTENT), name
        assert raw(b, b"STATUS " + name + b" (MESSAGES)") == ([], NONEXISTENT), name
        assert raw(b, b"MYRIGHTS " + name) == ([], NONEXISTENT), name
    assert append(b, b"shared/alice/Private") == append(b, b"shared/alice/Nothing") == \
        b"NO [TRYCREATE] Mailbox does not exist."
    # carol was granted nothing: alice's shared folder is missing for her.
    c = login(shd, "carol")
    assert raw(c, b"SELECT shared/alice/Team") == ([], NONEXISTENT)


def test_insert_right_lets_append_and_copy_in(shd):
    a = owner_shares(shd, rights=b"lri")
    b = login(shd, "bob")
    assert append(b, b"shared/alice/Team").startswith(b"OK")
    ok(b, b"SELECT INBOX")
    assert append(b, b"INBOX").startswith(b"OK")
    ok(b, b"SELECT INBOX")
    ok(b, b"COPY 1 shared/alice/Team")
    assert flags_of(a, b"Team") == [b"* 1 FETCH (FLAGS ())", b"* 2 FETCH (FLAGS ())",
                                    b"* 3 FETCH (FLAGS ())"]
    # Files land in alice's folder, none in bob's tree under that name.
    maildir = Path(shd.config["mail"]["home"].replace("%u", "alice")) / "Maildir" / ".Team"
    assert len(list((maildir / "cur").iterdir()) + list((maildir / "new").iterdir())) == 3


def test_public_namespace_writable_only_with_granted_rights(shd, tmp_path):
    public = tmp_path / "public"
    public.mkdir()
    # The root's ACL decides who may create (no owner in a public namespace);
    # new folders inherit it.
    (public / "dovecot-acl").write_text("user=alice lrswipkxtea\nuser=bob lrs\n")
    a = login(shd, "alice")
    b = login(shd, "bob")
    c = login(shd, "carol")
    assert raw(b, b"CREATE Public/Bobs") == ([], NOPERM)
    ok(a, b"CREATE Public/News")
    assert (public / ".News" / "dovecot-acl").read_text() == \
        "user=alice lrswipkxtea\nuser=bob lrs\n"
    assert append(a, b"Public/News").startswith(b"OK")
    assert append(b, b"Public/News") == NOPERM
    untagged, tagged = raw(b, b"SELECT Public/News")
    assert tagged.startswith(b"OK [READ-WRITE]"), tagged
    assert b"* OK [PERMANENTFLAGS (\\Seen)] Flags permitted." in untagged, untagged
    assert raw(b, b"STORE 1 +FLAGS (\\Flagged)") == ([], NOPERM)
    assert raw(b, b"STORE 1 +FLAGS (\\Deleted)") == ([], NOPERM)
    assert raw(b, b"EXPUNGE") == ([], NOPERM)
    assert raw(b, b"DELETE Public/News") == ([], NOPERM)
    # s: bob's \Seen is his own (index_private), not alice's.
    assert no_recent(ok(b, b"STORE 1 +FLAGS (\\Seen)")) == [b"* 1 FETCH (FLAGS (\\Seen))"]
    assert flags_of(a, b"Public/News") == [b"* 1 FETCH (FLAGS ())"]
    # carol has no entry: the folder does not exist for her.
    assert raw(c, b"SELECT Public/News") == ([], NONEXISTENT)
    assert raw(c, b"CREATE Public/Carols") == ([], NOPERM)
    # Granting carol i lets her append, nothing more.
    ok(a, b"SETACL Public/News carol i")
    assert append(c, b"Public/News").startswith(b"OK")
    # i without l: still as missing for everything else (RFC 4314 4).
    assert raw(c, b"SELECT Public/News") == ([], NONEXISTENT)
    assert b"* 2 EXISTS" in ok(a, b"SELECT Public/News")
    ok(a, b"STORE 1 +FLAGS (\\Deleted)")
    assert ok(a, b"EXPUNGE")[0] == b"* 1 EXPUNGE"


def status_unseen(m, name):
    untagged = ok(m, b"STATUS " + name + b" (UNSEEN)")
    return int(untagged[0].rsplit(b" ", 1)[1].rstrip(b")"))


def test_private_seen_two_readers_and_the_owner(shd, tmp_path):
    a = owner_shares(shd, rights=b"lrs")
    assert append(a, b"Team").startswith(b"OK")
    ok(a, b"SETACL Team carol lrs")
    b = login(shd, "bob")
    c = login(shd, "carol")
    untagged, tagged = raw(b, b"SELECT shared/alice/Team")
    assert tagged.startswith(b"OK [READ-WRITE]"), tagged
    assert b"* OK [PERMANENTFLAGS (\\Seen)] Flags permitted." in untagged, untagged
    # bob reads message 1: \Seen for bob only.
    got = ok(b, b"FETCH 1 (FLAGS BODY[TEXT])")
    assert no_recent(got)[0] == b"* 1 FETCH (FLAGS (\\Seen) BODY[TEXT] {7}", got
    ok(b, b"STORE 2 +FLAGS.SILENT (\\Seen)")
    assert no_recent(ok(b, b"FETCH 1:2 (FLAGS)")) == [b"* 1 FETCH (FLAGS (\\Seen))",
                                           b"* 2 FETCH (FLAGS (\\Seen))"]
    assert flags_of(a, b"Team") == [b"* 1 FETCH (FLAGS ())", b"* 2 FETCH (FLAGS ())"]
    assert flags_of(c, b"shared/alice/Team") == [b"* 1 FETCH (FLAGS ())",
                                                  b"* 2 FETCH (FLAGS ())"]
    assert status_unseen(a, b"Team") == 2
    assert status_unseen(c, b"shared/alice/Team") == 2
    ok(b, b"UNSELECT")
    assert status_unseen(b, b"shared/alice/Team") == 0
    # The owner's own \Seen is the folder's; readers keep theirs.
    ok(a, b"SELECT Team")
    ok(a, b"STORE 1 +FLAGS.SILENT (\\Seen)")
    ok(a, b"UNSELECT")
    assert flags_of(a, b"Team") == [b"* 1 FETCH (FLAGS (\\Seen))", b"* 2 FETCH (FLAGS ())"]
    assert flags_of(c, b"shared/alice/Team") == [b"* 1 FETCH (FLAGS ())",
                                                  b"* 2 FETCH (FLAGS ())"]
    ok(b, b"SELECT shared/alice/Team")
    ok(b, b"STORE 1 -FLAGS.SILENT (\\Seen)")
    assert no_recent(ok(b, b"FETCH 1:2 (FLAGS)")) == [b"* 1 FETCH (FLAGS ())",
                                           b"* 2 FETCH (FLAGS (\\Seen))"]
    # A replacement needs s, t and w; it keeps the folder's own \Seen of
    # each message (the owner's), whatever the reader's becomes.
    assert raw(b, b"STORE 2 FLAGS.SILENT ()") == ([], NOPERM)
    ok(a, b"SETACL Team bob lrswt")
    ok(b, b"STORE 1:2 FLAGS.SILENT (\\Flagged)")
    assert no_recent(ok(b, b"FETCH 1:2 (FLAGS)")) == [b"* 1 FETCH (FLAGS (\\Flagged))",
                                           b"* 2 FETCH (FLAGS (\\Flagged))"]
    assert ok(b, b"SEARCH UNSEEN") == [b"* SEARCH 1 2"]
    assert flags_of(a, b"Team") == [b"* 1 FETCH (FLAGS (\\Flagged \\Seen))",
                                    b"* 2 FETCH (FLAGS (\\Flagged))"]
    # bob's set lives under bob's home, named by the folder's GUID.
    files = list((tmp_path / "mail" / "bob" / "pvt" / "alice").glob("*.seen"))
    assert len(files) == 1 and files[0].read_bytes()[:8] == b"PVTSEEN1"
    assert not (tmp_path / "mail" / "alice" / "pvt").exists()


def listing(m, line):
    return [l for l in ok(m, line)]


def test_list_shows_exactly_the_granted_folders_and_revocation_hides(shd):
    a = owner_shares(shd)                     # Team: bob lr
    ok(a, b"CREATE Private")
    ok(a, b"CREATE Team/Sub")                 # inherits Team's ACL
    ok(a, b"CREATE Other")
    ok(a, b"SETACL Other bob r")              # no l: not listed
    b = login(shd, "bob")
    assert listing(b, b'LIST "" "*"') == [
        b'* LIST (\\HasNoChildren) "/" "INBOX"',
        b'* LIST (\\Noselect \\HasChildren) "/" "shared"',
        b'* LIST (\\Noselect \\HasChildren) "/" "shared/alice"',
        b'* LIST (\\HasChildren) "/" "shared/alice/Team"',
        b'* LIST (\\HasNoChildren) "/" "shared/alice/Team/Sub"',
    ]
    assert listing(b, b'LIST "" "%"') == [
        b'* LIST (\\HasNoChildren) "/" "INBOX"',
        b'* LIST (\\Noselect \\HasChildren) "/" "shared"',
    ]
    assert listing(b, b'LIST "" "shared/%"') == [
        b'* LIST (\\Noselect \\HasChildren) "/" "shared/alice"']
    assert listing(b, b'LIST "shared/alice/" "%"') == [
        b'* LIST (\\HasChildren) "/" "shared/alice/Team"']
    assert listing(b, b'LIST "" "shared/alice/*" RETURN (MYRIGHTS)') == [
        b'* LIST () "/" "shared/alice/Team"',
        b'* MYRIGHTS "shared/alice/Team" lr',
        b'* LIST () "/" "shared/alice/Team/Sub"',
        b'* MYRIGHTS "shared/alice/Team/Sub" lr',
    ]
    # Subscriptions live in bob's own file, with the prefix.
    ok(b, b"SUBSCRIBE shared/alice/Team")
    assert listing(b, b'LSUB "" "*"') == [b'* LSUB () "/" "shared/alice/Team"']
    assert "shared\talice\tTeam\n" in (  # Dovecot v2 format
        Path(shd.config["mail"]["home"].replace("%u", "bob")) / "Maildir" / "subscriptions"
    ).read_text()
    # carol was granted nothing: no shared level at all.
    c = login(shd, "carol")
    assert listing(c, b'LIST "" "*"') == [b'* LIST (\\HasNoChildren) "/" "INBOX"']
    # alice's own shares do not show under shared/ for herself.
    assert not any(b"shared" in l for l in listing(a, b'LIST "" "*"'))
    # Revocation: gone at the next LIST, and SELECT answers as missing.
    ok(a, b"DELETEACL Team/Sub bob")
    ok(a, b"DELETEACL Team bob")
    assert listing(b, b'LIST "" "*"') == [b'* LIST (\\HasNoChildren) "/" "INBOX"']
    assert raw(b, b"SELECT shared/alice/Team") == ([], NONEXISTENT)


def test_list_without_registry_lists_no_shared_folders_but_they_open(petreld, tmp_path):
    d = petreld(shared_config(tmp_path, registry=False))
    owner_shares(d)
    b = login(d, "bob")
    assert listing(b, b'LIST "" "*"') == [b'* LIST (\\HasNoChildren) "/" "INBOX"']
    ok(b, b"EXAMINE shared/alice/Team")


def check_config(tmp_path, cfg):
    path = tmp_path / "check.yaml"
    path.write_text(json.dumps(cfg))  # YAML is a superset of JSON
    return run_petreld(["-c", str(path), "--check-config"])


def test_config_refuses_unsafe_or_unknown_shared_settings(tmp_path):
    ok_proc = check_config(tmp_path, shared_config(tmp_path))
    assert ok_proc.returncode == 0, ok_proc.stderr
    assert 'prefix: "shared/%u/"' in ok_proc.stdout, ok_proc.stdout
    assert 'index_private: "%h/pvt"' in ok_proc.stdout, ok_proc.stdout
    cases = [
        # without ACLs nothing would stand between users
        (lambda c: c["mail"]["acl"].update(enabled=False),
         "a per-owner shared namespace ('shared/%u/') needs mail.acl.enabled: true"),
        (lambda c: c["mail"]["namespaces"][1].update(prefix="shared/%n/"),
         "a variable in a prefix is the owner level of a shared namespace"),
        (lambda c: c["mail"]["namespaces"][1].update(prefix="shared/%u/x/"),
         "a variable in a prefix is the owner level of a shared namespace"),
        (lambda c: c["mail"]["namespaces"][1].update(subscriptions=True),
         "keeps its subscriptions in the reader's personal file"),
        (lambda c: c["mail"]["namespaces"][0].update(index_private="%h/pvt"),
         "private indexes are for shared and public namespaces"),
        (lambda c: c["mail"]["namespaces"][2].update(index_private="%x/pvt"),
         "unknown variable %x"),
    ]
    for change, message in cases:
        cfg = shared_config(tmp_path)
        change(cfg)
        proc = check_config(tmp_path, cfg)
        assert proc.returncode == 2 and message in proc.stderr, (message, proc.stderr)


def test_list_waits_for_a_registry_on_redis(petreld, tmp_path, redis_server):
    """The kvstore driver answers later, on the loop: LIST waits for it
    (the session takes no other command meanwhile) and pipelined commands
    behind it are answered in order."""
    cfg = shared_config(tmp_path)
    cfg["dicts"] = {"reg": {"driver": "kvstore", "address": redis_server.address,
                            "prefix": f"aclshare{os.getpid()}:"}}
    d = petreld(cfg)
    owner_shares(d)
    b = login(d, "bob")
    tags = [b"p1", b"p2", b"p3"]
    b.send(b'p1 LIST "" "shared/*"\r\np2 NOOP\r\np3 LIST "" "%"\r\n')
    got = []
    while len([l for l in got if l.split(b" ")[0] in tags]) < 3:
        got.append(b._get_line())
    assert got == [
        b'* LIST (\\Noselect \\HasChildren) "/" "shared/alice"',
        b'* LIST (\\HasNoChildren) "/" "shared/alice/Team"',
        b"p1 OK LIST completed.",
        b"p2 OK NOOP completed.",
        b'* LIST (\\HasNoChildren) "/" "INBOX"',
        b'* LIST (\\Noselect \\HasChildren) "/" "shared"',
        b"p3 OK LIST completed.",
    ], got


def test_reader_with_admin_right_shares_further(shd):
    """A reader holding a on someone's folder may grant it on: the owner's
    index and sharing registry follow, so the third user finds it."""
    a = owner_shares(shd, rights=b"lra")
    b = login(shd, "bob")
    assert raw(b, b"SETACL shared/alice/Team carol lr") == ([], b"OK Setacl complete.")
    # the file's entries (the owner's implicit rights are shown only to
    # the owner, in their personal namespace)
    assert raw(b, b"GETACL shared/alice/Team") == (
        [b"* ACL shared/alice/Team bob lra carol lr"], b"OK Getacl completed.")
    c = login(shd, "carol")
    assert listing(c, b'LIST "" "shared/*"') == [
        b'* LIST (\\Noselect \\HasChildren) "/" "shared/alice"',
        b'* LIST (\\HasNoChildren) "/" "shared/alice/Team"']
    ok(c, b"EXAMINE shared/alice/Team")
    a.logout()


def test_personal_folder_cannot_take_a_namespace_name(shd):
    """A personal folder named `shared` or `Public` (another namespace's prefix
    without its separator) would be listed twice, as the folder and as the
    namespace's \\Noselect root: CREATE and RENAME refuse the name; names
    that only start with it are fine."""
    m = login(shd, "bob")
    for name in (b"shared", b"Public"):
        assert raw(m, b"CREATE " + name)[1].startswith(b"NO [ALREADYEXISTS]"), name
    ok(m, b"CREATE sharedstuff")
    ok(m, b"CREATE Publicity")
    assert raw(m, b"RENAME sharedstuff shared")[1].startswith(b"NO [ALREADYEXISTS]")
    lines = ok(m, b'LIST "" "%"')
    names = [ln.rsplit(b" ", 1)[1] for ln in lines]
    assert names.count(b"shared") <= 1 and names.count(b"Public") <= 1, lines
