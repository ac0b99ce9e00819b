"""ACLs (RFC 4314, docs/acl.md): the ACL storage module checks rights on the
storage hooks for every front end, and IMAP speaks SETACL, DELETEACL,
GETACL, LISTRIGHTS and MYRIGHTS as Dovecot's imap_acl plugin answers them.

Real parts: one petreld with auth (passwd-file with a userdb group for
bob), IMAP, LMTP and the backend API; imaplib and smtplib's LMTP clients.
mail.acl.cache_secs is 0 here so a change made by one session is seen by
the next command of another without waiting.

Here a user addresses only their own folders: the rights checks are shown
on the owner's own folders restricted by an "owner"/user=/negative group
entry (the owner's implicit rights give way to an entry that names them),
and a grant to a second user is shown in the file and in GETACL. Another
user's folders reached through the shared namespace are in
test_acl_shared.py."""

import imaplib
import json
import smtplib
import threading
from pathlib import Path

import pytest

from conftest import free_port

PASSWD = ("alice:{PLAIN}wonderland:1001:1001\n"
          "bob:{PLAIN}builder:1002:1002::::userdb_acl_groups=staff,ops\n")

MSG = (b"From: Sender <sender@example.net>\r\n"
       b"Subject: acl\r\n"
       b"\r\n"
       b"Body.\r\n")

NOPERM = b"[NOPERM] The mail store does not allow this."
NONEXISTENT = b"[NONEXISTENT] Mailbox does not exist."


def acl_config(tmp_path, enabled=True):
    passwd = tmp_path / "passwd"
    passwd.write_text(PASSWD)
    auth_port = free_port()
    return {
        "components": ["auth", "imap", "lmtp", "backend-api"],
        "mail": {"home": str(tmp_path / "mail" / "%u"), "fsync": "never",
                 "acl": {"enabled": enabled, "cache_secs": 0}},
        "auth": {"listen": [f"127.0.0.1:{auth_port}"],
                 "passdb": {"driver": "passwd-file", "path": str(passwd)}},
        "imap": {"listen": [f"127.0.0.1:{free_port()}"],
                 "auth_addr": f"127.0.0.1:{auth_port}"},
        "lmtp": {"listen": [f"127.0.0.1:{free_port()}"],
                 "auth_addr": f"127.0.0.1:{auth_port}", "username_format": "%n",
                 "hostname": "mx.test.example"},
    }


@pytest.fixture
def acld(petreld, tmp_path):
    return petreld(acl_config(tmp_path))


def addr(d, section):
    host, port = d.config[section]["listen"][0].rsplit(":", 1)
    return host, int(port)


def login(d, user="alice", password="wonderland"):
    m = imaplib.IMAP4(*addr(d, "imap"))
    m.login(user, password)
    return m


def raw(m, line):
    """Sends one command line; returns (untagged lines, tagged line) as
    bytes, exactly as they came."""
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


def acl_file(tmp_path, user, folder):
    root = Path(tmp_path) / "mail" / user / "Maildir"
    return (root / ("." + folder) if folder else root) / "dovecot-acl"


def test_capabilities_only_after_login_and_only_when_enabled(acld, petreld, tmp_path):
    m = imaplib.IMAP4(*addr(acld, "imap"))
    assert b"ACL" not in m.capabilities and "ACL" not in m.capabilities
    m.login("alice", "wonderland")
    untagged = ok(m, b"CAPABILITY")
    assert b" ACL RIGHTS=texk" in untagged[0], untagged
    m.logout()

    (tmp_path / "off").mkdir()
    off = petreld(acl_config(tmp_path / "off", enabled=False))
    m = login(off)
    untagged = ok(m, b"CAPABILITY")
    assert b"ACL" not in untagged[0]
    assert raw(m, b"GETACL INBOX") == ([], b"BAD Unknown command.")
    # Without ACLs an "owner" entry in a file restricts nothing.
    ok(m, b"CREATE Work")
    acl_file(tmp_path / "off", "alice", "Work").write_text("owner lr\n")
    ok(m, b"SELECT Work")
    m.append("Work", None, None, MSG)
    m.logout()


def test_getacl_setacl_deleteacl_myrights_listrights_exact(acld, tmp_path):
    m = login(acld)
    ok(m, b"CREATE Shared")
    # No file: the owner's implicit rights, under the owner's name.
    assert raw(m, b"GETACL Shared") == (
        [b"* ACL Shared alice lrswipkxtecda"], b"OK Getacl completed.")
    assert raw(m, b"MYRIGHTS Shared") == (
        [b"* MYRIGHTS Shared lrswipkxtecda"], b"OK Myrights completed.")
    assert raw(m, b"LISTRIGHTS Shared bob") == (
        [b'* LISTRIGHTS Shared bob "" l r w s t p i e k x a c d'], b"OK Listrights completed.")

    assert raw(m, b"SETACL Shared bob lr") == ([], b"OK Setacl complete.")
    assert acl_file(tmp_path, "alice", "Shared").read_text() == "user=bob lr\n"
    assert raw(m, b"GETACL Shared") == (
        [b"* ACL Shared bob lr alice lrswipkxtecda"], b"OK Getacl completed.")
    ok(m, b"SETACL Shared bob +w")
    ok(m, b"SETACL Shared -bob w")
    ok(m, b"SETACL Shared $staff lr")
    assert raw(m, b"GETACL Shared")[0] == [
        b"* ACL Shared $staff lr bob lrw -bob w alice lrswipkxtecda"]
    ok(m, b"SETACL Shared bob -r")
    # c and d as RFC 2086 clients send them: c = k x, d = e t.
    ok(m, b"SETACL Shared bob lrcd")
    assert raw(m, b"GETACL Shared")[0] == [
        b"* ACL Shared $staff lr bob lrkxtecd -bob w alice lrswipkxtecda"]
    assert acl_file(tmp_path, "alice", "Shared").read_text() == (
        "group=staff lr\nuser=bob lrkxte\n-user=bob w\n")

    assert raw(m, b"DELETEACL Shared -bob") == ([], b"OK Deleteacl complete.")
    assert raw(m, b"DELETEACL Shared carol") == ([], b"OK Deleteacl complete.")
    ok(m, b'SETACL Shared bob ""')  # empty rights remove the entry
    assert raw(m, b"GETACL Shared")[0] == [b"* ACL Shared $staff lr alice lrswipkxtecda"]

    # Errors, as Dovecot words them (its "Error in IMAP command SETACL: "
    # prefix aside).
    assert raw(m, b"SETACL Shared bob lrZ") == ([], b"BAD Invalid ACL right: Z")
    assert raw(m, b"SETACL Shared anyone lr") == (
        [], b"BAD 'anyone' identifier is disallowed.")
    assert raw(m, b"SETACL Shared authenticated lr") == (
        [], b"BAD 'authenticated' identifier is disallowed.")
    for cmd in (b"GETACL Nope", b"SETACL Nope bob lr", b"DELETEACL Nope bob",
                b"LISTRIGHTS Nope bob", b"MYRIGHTS Nope"):
        assert raw(m, cmd) == ([], b"NO " + NONEXISTENT), cmd

    # Whoever changes their own entry keeps "a" (nobody locks themselves
    # out): "owner lr" is stored as "owner lra".
    ok(m, b"SETACL Shared owner lr")
    assert raw(m, b"MYRIGHTS Shared")[0] == [b"* MYRIGHTS Shared lra"]
    assert raw(m, b"GETACL Shared")[0] == [b"* ACL Shared $staff lr alice lra"]
    ok(m, b"SETACL Shared alice -a")
    assert raw(m, b"MYRIGHTS Shared")[0] == [b"* MYRIGHTS Shared lra"]
    m.logout()


def test_rights_checked_on_every_imap_command(acld, tmp_path):
    m = login(acld)
    ok(m, b"CREATE Work")
    for _ in range(2):
        m.append("Work", None, None, MSG)
    # l r (and the a they keep): nothing in the folder may change, so
    # SELECT opens it read-only with no permanent flags (as Dovecot).
    ok(m, b"SETACL Work owner lr")
    assert raw(m, b"MYRIGHTS Work")[0] == [b"* MYRIGHTS Work lra"]
    untagged, tagged = raw(m, b"SELECT Work")
    assert tagged == b"OK [READ-ONLY] EXAMINE completed.", tagged  # Petrel's wording
    assert b"* OK [PERMANENTFLAGS ()] Read-only mailbox." in untagged
    ok(m, b"CLOSE")
    # l r i: read-write, but only the rights given.
    ok(m, b"SETACL Work owner lri")
    untagged, tagged = raw(m, b"SELECT Work")
    assert tagged == b"OK [READ-WRITE] SELECT completed.", tagged
    assert b"* OK [PERMANENTFLAGS ()] Flags permitted." in untagged, untagged
    # FETCH works; without s the \Seen a BODY[] fetch sets is not kept.
    untagged, tagged = raw(m, b"FETCH 1 (BODY[] FLAGS)")
    assert tagged == b"OK FETCH completed." and b"\\Seen" not in b"".join(
        x for x in untagged if isinstance(x, bytes)), untagged
    for cmd in (b"STORE 1 +FLAGS (\\Flagged)", b"STORE 1 +FLAGS (\\Seen)",
                b"STORE 1 +FLAGS (\\Deleted)", b"STORE 1 FLAGS ()", b"EXPUNGE",
                b"UID EXPUNGE 1", b"MOVE 1 INBOX"):
        assert raw(m, cmd)[1] == b"NO " + NOPERM, cmd
    ok(m, b"SETACL Work owner lr")
    assert raw(m, b"COPY 1 Work")[1] == b"NO " + NOPERM
    assert m.append("Work", None, None, MSG) == ("NO", [NOPERM])
    for cmd in (b"CREATE Work/Sub", b"DELETE Work", b"RENAME Work Other"):
        assert raw(m, cmd)[1] == b"NO " + NOPERM, cmd
    ok(m, b"CLOSE")

    # Each right alone lets its own command through.
    ok(m, b"SETACL Work owner lrw")
    assert b"* OK [PERMANENTFLAGS (\\Answered \\Flagged \\Draft \\*)] Flags permitted." in ok(
        m, b"SELECT Work")
    ok(m, b"STORE 1 +FLAGS (\\Flagged)")
    assert raw(m, b"STORE 1 +FLAGS (\\Deleted)")[1] == b"NO " + NOPERM
    ok(m, b"SETACL Work owner lrwt")
    ok(m, b"STORE 1 +FLAGS (\\Deleted)")
    assert raw(m, b"EXPUNGE")[1] == b"NO " + NOPERM
    ok(m, b"SETACL Work owner lrwte")
    ok(m, b"EXPUNGE")
    ok(m, b"SETACL Work owner lrwtei")
    assert m.append("Work", None, None, MSG)[0] == "OK"
    ok(m, b"SETACL Work owner lrwteik")
    ok(m, b"CREATE Work/Sub")
    ok(m, b"CLOSE")
    ok(m, b"SETACL Work owner lrwteikx")
    # Work/Sub was born with Work's ACL of then, without x.
    assert raw(m, b"MYRIGHTS Work/Sub")[0] == [b"* MYRIGHTS Work/Sub lrwiktecda"]
    assert raw(m, b"RENAME Work/Sub Work/Sub2")[1] == b"NO " + NOPERM
    ok(m, b"SETACL Work/Sub alice lrx")
    ok(m, b"RENAME Work/Sub Work/Sub2")
    ok(m, b"DELETE Work/Sub2")
    m.logout()


def test_folder_without_lookup_is_indistinguishable_from_a_missing_one(acld, tmp_path):
    m = login(acld)
    ok(m, b"CREATE Secret")
    m.append("Secret", None, None, MSG)
    ok(m, b'SETACL Secret alice ""')  # only the "a" the owner keeps
    assert raw(m, b"MYRIGHTS Secret")[0] == [b"* MYRIGHTS Secret a"]
    listing = b"".join(ok(m, b'LIST "" "*"'))
    assert b"Secret" not in listing and b"INBOX" in listing
    assert b"Secret" not in b"".join(ok(m, b'LIST "" "%" RETURN (CHILDREN STATUS (MESSAGES))'))
    for verb in (b"SELECT", b"EXAMINE", b"STATUS", b"DELETE", b"APPEND", b"RENAME"):
        args = {b"STATUS": b" (MESSAGES)", b"APPEND": b" {1+}\r\nx",
                b"RENAME": b" Elsewhere"}.get(verb, b"")
        hidden = raw(m, verb + b" Secret" + args)
        missing = raw(m, verb + b" Missing" + args)
        assert hidden == missing, (verb, hidden, missing)
    # The admin right alone still manages the ACL (Dovecot's rule).
    ok(m, b"SETACL Secret alice lr")
    assert b"Secret" in b"".join(ok(m, b'LIST "" "*"'))
    m.logout()


def test_userdb_groups_reach_the_session(acld, tmp_path):
    bob = login(acld, "bob", "builder")
    ok(bob, b"CREATE Proj")
    bob.append("Proj", None, None, MSG)
    # A negative entry for one of bob's userdb groups takes w away.
    ok(bob, b"SETACL Proj -$ops w")
    assert raw(bob, b"MYRIGHTS Proj")[0] == [b"* MYRIGHTS Proj lrsipkxtecda"]
    ok(bob, b"SELECT Proj")
    assert raw(bob, b"STORE 1 +FLAGS (\\Flagged)")[1] == b"NO " + NOPERM
    ok(bob, b"STORE 1 +FLAGS (\\Seen)")
    # A group bob is not in changes nothing.
    ok(bob, b"DELETEACL Proj -$ops")
    ok(bob, b"SETACL Proj -$others w")
    ok(bob, b"STORE 1 +FLAGS (\\Flagged)")
    bob.logout()


def test_new_folders_inherit_their_parents_acl(acld, tmp_path):
    m = login(acld)
    ok(m, b"CREATE Parent")
    ok(m, b"SETACL Parent bob lr")
    ok(m, b"CREATE Parent/Child")
    assert raw(m, b"GETACL Parent/Child")[0] == [
        b"* ACL Parent/Child bob lr alice lrswipkxtecda"]
    assert acl_file(tmp_path, "alice", "Parent.Child").read_text() == "user=bob lr\n"
    # A grandchild whose parent level is no folder inherits from the
    # nearest folder above it.
    ok(m, b"CREATE Parent/Gap/Leaf")
    assert acl_file(tmp_path, "alice", "Parent.Gap.Leaf").read_text() == "user=bob lr\n"
    # Top-level folders inherit the namespace root's (in maildir, the
    # root directory is INBOX's, as in Dovecot).
    ok(m, b"SETACL INBOX bob l")
    ok(m, b"CREATE Top")
    assert acl_file(tmp_path, "alice", "Top").read_text() == "user=bob l\n"
    # The file moves with a rename, and goes with a delete.
    ok(m, b"RENAME Top Top2")
    assert acl_file(tmp_path, "alice", "Top2").read_text() == "user=bob l\n"
    ok(m, b"DELETE Top2")
    assert not acl_file(tmp_path, "alice", "Top2").parent.exists()
    m.logout()


def test_concurrent_setacl_loses_no_writer(acld, tmp_path):
    m = login(acld)
    ok(m, b"CREATE Busy")
    errors = []

    def grant(i):
        try:
            c = login(acld)
            for k in range(5):
                ok(c, b"SETACL Busy user%d_%d lr" % (i, k))
            c.logout()
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=grant, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    lines = acl_file(tmp_path, "alice", "Busy").read_text().splitlines()
    assert sorted(lines) == sorted(f"user=user{i}_{k} lr" for i in range(8) for k in range(5))
    m.logout()


def test_admin_plane_bypasses_acls(acld, tmp_path):
    m = login(acld)
    ok(m, b"CREATE Locked")
    m.append("Locked", None, None, MSG)
    ok(m, b'SETACL Locked alice ""')
    m.logout()
    r = acld.post("backend", "/api/backend/folder/info", body={"user": "alice", "folder": "Locked"})
    assert r.status == 200 and r.json()["messages"] == 1, r
    r = acld.post("backend", "/api/backend/folder/list", body={"user": "alice"})
    assert "Locked" in r.json()["folders"], r
    r = acld.post("backend", "/api/backend/folder/delete", body={"user": "alice", "folder": "Locked"})
    assert r.status == 200, r


def lmtp_deliver(d, rcpt):
    c = smtplib.LMTP(*addr(d, "lmtp"), timeout=30)
    c.ehlo("client.test.example")
    c.mail("sender@example.net")
    code, text = c.rcpt(rcpt)
    assert code == 250, text
    code, text = c.data(MSG)
    c.quit()
    return code, text


def count(m, folder):
    typ, data = m.status(folder, "(MESSAGES)")
    assert typ == "OK", data
    return int(data[0].split(b"MESSAGES ")[1].rstrip(b")"))


def test_lmtp_detail_delivery_needs_post(acld, tmp_path):
    m = login(acld)
    ok(m, b"CREATE Lists")
    # The owner's own folder: their i will do.
    assert lmtp_deliver(acld, "alice+Lists@example.org")[0] == 250
    assert count(m, "Lists") == 1
    # Neither p nor i: the delivery falls back to INBOX (Dovecot's
    # lmtp_save_to_detail_mailbox).
    ok(m, b"SETACL Lists owner lrs")
    assert lmtp_deliver(acld, "alice+Lists@example.org")[0] == 250
    assert count(m, "Lists") == 1 and count(m, "INBOX") == 1
    # p alone is enough.
    ok(m, b"SETACL Lists owner lrsp")
    assert lmtp_deliver(acld, "alice+Lists@example.org")[0] == 250
    assert count(m, "Lists") == 2
    # INBOX itself without p or i: refused for good.
    ok(m, b"SETACL INBOX owner lrs")
    code, text = lmtp_deliver(acld, "alice@example.org")
    assert (code, text) == (550, b"5.7.1 <alice@example.org> Delivery not authorized"), text
    m.logout()


def api(d, path, body):
    r = d.post("backend", "/api/backend/acl/" + path, body=body)
    return r.status, r.json()


def test_api_acl_endpoints(acld, tmp_path):
    m = login(acld)
    ok(m, b"CREATE Team")
    ok(m, b"CREATE Team/Old")
    m.logout()
    u = {"user": "alice"}
    assert api(acld, "get", {**u, "folder": "Team"}) == (
        200, {"folder": "Team", "namespace": "personal", "root": False, "entries": []})
    # set replaces the whole list; rights come back in canonical order with c and d.
    assert api(acld, "set", {**u, "folder": "Team", "entries": [
        {"identifier": "user=bob", "rights": "rl"},
        {"identifier": "-group=staff", "rights": "w"},
        {"identifier": "owner", "rights": "lrswipkxtea"}]}) == (200, {"status": "ok"})
    assert api(acld, "get", {**u, "folder": "Team"})[1]["entries"] == [
        {"identifier": "-group=staff", "rights": "w"},
        {"identifier": "owner", "rights": "lrswipkxtecda"},
        {"identifier": "user=bob", "rights": "lr"}]
    assert acl_file(tmp_path, "alice", "Team").read_text() == (
        "-group=staff w\nowner lrswipkxtea\nuser=bob lr\n")
    # apply: one identifier; default mode replace; replace with "" removes.
    assert api(acld, "apply", {**u, "folder": "Team", "identifier": "user=bob", "rights": "w",
                               "mode": "add"}) == (200, {"status": "ok"})
    assert api(acld, "apply", {**u, "folder": "Team", "identifier": "user=bob", "rights": "r",
                               "mode": "remove"}) == (200, {"status": "ok"})
    assert api(acld, "apply", {**u, "folder": "Team", "identifier": "user=carol",
                               "rights": "lr"}) == (200, {"status": "ok"})
    assert api(acld, "apply", {**u, "folder": "Team", "identifier": "-group=staff",
                               "rights": ""}) == (200, {"status": "ok"})
    assert api(acld, "delete", {**u, "folder": "Team", "identifier": "owner"}) == (
        200, {"status": "ok"})
    assert api(acld, "get", {**u, "folder": "Team"})[1]["entries"] == [
        {"identifier": "user=bob", "rights": "lw"}, {"identifier": "user=carol", "rights": "lr"}]
    # my-rights and list-rights
    assert api(acld, "my-rights", {**u, "folder": "Team", "identifier": "user=carol"}) == (
        200, {"folder": "Team", "namespace": "personal", "root": False,
              "identifier": "user=carol", "rights": "lr"})
    assert api(acld, "my-rights", {**u, "folder": "Team", "identifier": "owner"})[1]["rights"] \
        == "lrswipkxtecda"
    assert api(acld, "my-rights", {**u, "folder": "Team", "identifier": "anyone"})[1]["rights"] \
        == ""
    assert api(acld, "list-rights", {**u, "folder": "Team", "identifier": "user=bob"})[1] == {
        "folder": "Team", "namespace": "personal", "root": False, "identifier": "user=bob",
        "required": "", "optional": list("lrwstpiekxacd")}
    # The root: no folder, root true.
    assert api(acld, "apply", {**u, "root": True, "identifier": "user=bob", "rights": "l"}) == (
        200, {"status": "ok"})
    assert api(acld, "get", {**u, "root": True}) == (
        200, {"folder": "", "namespace": "personal", "root": True,
              "entries": [{"identifier": "user=bob", "rights": "l"}]})
    # The root of a user who has no mail yet.
    assert api(acld, "apply", {"user": "carol", "root": True, "identifier": "user=bob",
                               "rights": "l"}) == (200, {"status": "ok"})
    assert acl_file(tmp_path, "carol", "").read_text() == "user=bob l\n"
    # Errors: 404 for a missing folder (nothing written), 400 for bad input.
    assert api(acld, "get", {**u, "folder": "Nope"}) == (404, {"error": "folder not found"})
    assert api(acld, "set", {**u, "folder": "Nope", "entries": []})[0] == 404
    assert not acl_file(tmp_path, "alice", "Nope").parent.exists()
    assert api(acld, "get", u) == (400, {"error": "folder is required"})
    assert api(acld, "get", {**u, "folder": ""}) == (400, {"error": "folder is required"})
    assert api(acld, "get", {**u, "root": True, "folder": "Team"})[0] == 400
    assert api(acld, "get", {**u, "folder": "Team", "namespace": "public"}) == (
        404, {"error": "namespace not configured: public"})
    assert api(acld, "apply", {**u, "folder": "Team", "identifier": "user=bob",
                               "rights": "lZ"}) == (400, {"error": "unknown right 'Z'"})
    assert api(acld, "apply", {**u, "folder": "Team", "identifier": "nobody", "rights": "l"})[0] \
        == 400
    assert api(acld, "apply", {**u, "folder": "Team", "identifier": "user=bob", "rights": "l",
                               "mode": "merge"})[0] == 400

    # materialise: Team/Old was created before Team had an ACL.
    assert not acl_file(tmp_path, "alice", "Team.Old").exists()
    dry = api(acld, "materialise", {**u, "folders": ["Team/Old"]})
    assert dry == (200, {"added": [
        {"folder": "Team/Old", "identifier": "user=bob", "rights": "lw"},
        {"folder": "Team/Old", "identifier": "user=carol", "rights": "lr"}],
        "skipped": [], "apply": False}), dry
    assert not acl_file(tmp_path, "alice", "Team.Old").exists()
    api(acld, "apply", {**u, "folder": "Team/Old", "identifier": "user=carol", "rights": "l"})
    done = api(acld, "materialise", {**u, "folders": ["Team/Old"], "apply": True})
    assert done == (200, {"added": [
        {"folder": "Team/Old", "identifier": "user=bob", "rights": "lw"}],
        "skipped": [{"folder": "Team/Old", "identifier": "user=carol", "rights": "l"}],
        "apply": True}), done
    again = api(acld, "materialise", {**u, "folders": ["Team/Old"], "apply": True})
    assert again[1]["added"] == [] and len(again[1]["skipped"]) == 2
    assert api(acld, "materialise", {**u, "folders": ["Nope"], "apply": True})[0] == 404


def test_api_apply_from_8_clients_loses_none(acld, tmp_path):
    m = login(acld)
    ok(m, b"CREATE Busy")
    m.logout()
    errors = []

    def grant(i):
        try:
            for k in range(5):
                st, body = api(acld, "apply", {"user": "alice", "folder": "Busy",
                                               "identifier": f"user=api{i}_{k}", "rights": "lr",
                                               "mode": "add"})
                assert st == 200, body
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=grant, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    entries = api(acld, "get", {"user": "alice", "folder": "Busy"})[1]["entries"]
    assert sorted(e["identifier"] for e in entries) == sorted(
        f"user=api{i}_{k}" for i in range(8) for k in range(5))


def test_petrelctl_backend_acl(acld, tmp_path):
    from conftest import run_petrelctl

    def ctl(*args, json_out=True):
        pre = ["--backend-url", f"http://{acld.backend}"] + (["--json"] if json_out else [])
        return run_petrelctl([*pre, "backend", "acl", *args], timeout=60)

    m = login(acld)
    ok(m, b"CREATE Team")
    m.logout()
    p = ctl("set", "alice", "Team", "user=bob", "lr")
    assert (p.returncode, json.loads(p.stdout)) == (0, {"status": "ok"}), p.stderr
    assert ctl("apply", "alice", "Team", "user=bob", "w", "--mode", "add").returncode == 0
    assert ctl("set", "alice", "--root", "group=staff", "l").returncode == 0
    p = ctl("get", "alice", "Team", json_out=False)
    assert p.returncode == 0 and "user=bob" in p.stdout and "lw" not in p.stdout, p.stdout
    assert json.loads(ctl("get", "alice", "Team").stdout)["entries"] == [
        {"identifier": "user=bob", "rights": "lrw"}]
    assert json.loads(ctl("get", "alice", "--root").stdout)["entries"] == [
        {"identifier": "group=staff", "rights": "l"}]
    assert json.loads(ctl("my-rights", "alice", "Team", "user=bob").stdout)["rights"] == "lrw"
    assert json.loads(ctl("list-rights", "alice", "Team", "user=bob").stdout)["required"] == ""
    p = ctl("materialise", "alice", "Team")
    assert json.loads(p.stdout) == {"added": [{"folder": "Team", "identifier": "group=staff",
                                               "rights": "l"}], "skipped": [], "apply": False}
    assert ctl("delete", "alice", "Team", "user=bob").returncode == 0
    assert json.loads(ctl("get", "alice", "Team").stdout)["entries"] == []
    # exit codes: 1 the server said no, 2 usage
    p = ctl("get", "alice", "Nope")
    assert p.returncode == 1 and "404" in p.stderr, (p.returncode, p.stderr)
    assert ctl("set", "alice", "Team", "user=bob").returncode == 2
    assert ctl("frobnicate", "alice").returncode == 2


def test_own_setacl_seen_at_once_with_the_default_cache(petreld, tmp_path):
    cfg = acl_config(tmp_path)
    del cfg["mail"]["acl"]["cache_secs"]  # the default, 1 s
    d = petreld(cfg)
    m = login(d)
    ok(m, b"CREATE Work")
    m.append("Work", None, None, MSG)
    ok(m, b"SELECT Work")
    ok(m, b"STORE 1 +FLAGS (\\Flagged)")
    ok(m, b'LIST "" "*"')
    ok(m, b"SETACL Work owner lr")
    assert raw(m, b"STORE 1 +FLAGS (\\Answered)")[1] == b"NO " + NOPERM
    ok(m, b"CLOSE")
    ok(m, b'SETACL Work owner ""')
    assert b"Work" not in b"".join(ok(m, b'LIST "" "*"'))
    m.logout()


def test_list_myrights(acld, petreld, tmp_path):
    m = login(acld)
    assert b" LIST-MYRIGHTS" in ok(m, b"CAPABILITY")[0]
    ok(m, b"CREATE Shared")
    ok(m, b"CREATE Hidden")
    ok(m, b"SETACL Shared owner lr")
    ok(m, b'SETACL Hidden owner ""')
    # RFC 8440 2: a MYRIGHTS response after each listed folder's LIST.
    untagged, tagged = raw(m, b'LIST "" "%" RETURN (MYRIGHTS)')
    assert tagged.startswith(b"OK"), tagged
    assert untagged == [
        b'* LIST () "/" "INBOX"', b'* MYRIGHTS "INBOX" lrswipkxtecda',
        b'* LIST () "/" "Shared"', b'* MYRIGHTS "Shared" lra'], untagged
    m.logout()
    (tmp_path / "off").mkdir()
    off = petreld(acl_config(tmp_path / "off", enabled=False))
    m = login(off)
    assert b"LIST-MYRIGHTS" not in ok(m, b"CAPABILITY")[0]
    assert raw(m, b'LIST "" "%" RETURN (MYRIGHTS)')[1].startswith(b"BAD")
    m.logout()


def test_acl_commands_need_the_admin_right(acld, tmp_path):
    m = login(acld)
    ok(m, b"CREATE Team")
    # The operator takes the owner's "a" away (IMAP would keep it).
    assert api(acld, "set", {"user": "alice", "folder": "Team",
                             "entries": [{"identifier": "owner", "rights": "lr"}]})[0] == 200
    for cmd in (b"GETACL Team", b"SETACL Team bob l", b"DELETEACL Team bob",
                b"LISTRIGHTS Team bob"):
        assert raw(m, cmd) == (
            [], b"NO [NOPERM] You lack administrator privileges on this mailbox."), cmd
    assert raw(m, b"MYRIGHTS Team") == ([b"* MYRIGHTS Team lr"], b"OK Myrights completed.")
    m.logout()
