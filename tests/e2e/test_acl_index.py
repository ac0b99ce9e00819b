"""The ACL list index and the owner-discovery registry (docs/acl.md "The ACL
list index", document 1 "ACL" items 5 and 6): every write of an ACL file
(IMAP SETACL/DELETEACL, the API's set/delete/apply/materialise, inheritance
at CREATE) writes the namespace's index rows in the same lock, folder
delete and rename (IMAP and the API) rewrite them, and the registry in the
dict of mail.acl.sharing_map follows every index write. acl/rebuild reseeds
the index from the files; acl/registry/list and registry/rebuild read and
repair the registry.

Real parts: one petreld with auth, IMAP and the backend API; imaplib;
urllib for the API; petrelctl; the registry in a file dict and in a real
redis-server (kvstore driver). The index file is read from disk as the
header of storage/acl/acl-list-index.h describes it."""

import json
import os
import shutil
import stat
import tempfile
import threading
import time
from pathlib import Path

import pytest

from conftest import run_petrelctl
from servers import redis_server  # noqa: F401 (fixture of the kvstore variant)
from test_acl import acl_config, login, ok, raw

HEADER = "PETREL-ACL-INDEX 1\n"


def config(tmp_path, registry=None, **mail_acl):
    cfg = acl_config(tmp_path)
    cfg["components"] = ["auth", "imap", "backend-api"]
    if registry is not None:
        cfg["dicts"] = {"reg": registry}
        cfg["mail"]["acl"]["sharing_map"] = "reg"
    cfg["mail"]["acl"].update(mail_acl)
    return cfg


@pytest.fixture
def regd(petreld, tmp_path):
    return petreld(config(tmp_path, {"driver": "file", "path": str(tmp_path / "registry.db")}))


def api(d, path, body):
    r = d.post("backend", "/api/backend/acl/" + path, body=body)
    return r.status, r.json()


def index_path(home, user="alice"):
    return Path(home) / "mail" / user / "Maildir" / "petrel-acl-index"


def index_rows(home, user="alice"):
    """The index file as a list of (folder, identifier, rights)."""
    p = index_path(home, user)
    if not p.exists():
        return None
    text = p.read_text()
    assert text.startswith(HEADER), text
    return [tuple(line.split("\t")) for line in text[len(HEADER):].splitlines()]


def owners(d, user):
    st, body = api(d, "registry/list", {"user": user})
    assert st == 200, body
    assert body["user"] == user
    assert body["note"] == "group grants are not resolved on the admin plane"
    return body["owners"]


def wait_owners(d, user, expected, timeout=10):
    """The registry is written after the index, asynchronously for Redis
    (from the loop of whoever wrote the index): wait for the condition."""
    deadline = time.monotonic() + timeout
    while True:
        got = owners(d, user)
        if got == expected or time.monotonic() > deadline:
            return got
        time.sleep(0.02)


def test_index_rows_follow_every_acl_write_delete_and_rename(regd, tmp_path):
    m = login(regd)
    assert index_rows(tmp_path) is None  # nobody shared anything yet
    ok(m, b"CREATE Team")
    assert index_rows(tmp_path) is None  # a folder without ACL makes no index
    # IMAP SETACL
    ok(m, b"SETACL Team bob lr")
    assert index_rows(tmp_path) == [("Team", "user=bob", "lr")]
    assert owners(regd, "bob") == ["alice"]
    # the root's file is INBOX's too: rows under both names
    ok(m, b"SETACL INBOX carol l")
    assert index_rows(tmp_path) == [("", "user=carol", "l"), ("INBOX", "user=carol", "l"),
                                    ("Team", "user=bob", "lr")]
    assert owners(regd, "carol") == ["alice"]
    # inheritance written at CREATE (from Team, the nearest parent)
    ok(m, b"CREATE Team/Sub")
    assert ("Team/Sub", "user=bob", "lr") in index_rows(tmp_path)
    # the API's apply, set, delete
    u = {"user": "alice"}
    assert api(regd, "apply", {**u, "folder": "Team/Sub", "identifier": "user=bob",
                               "rights": "w", "mode": "add"}) == (200, {"status": "ok"})
    assert ("Team/Sub", "user=bob", "lrw") in index_rows(tmp_path)
    ok(m, b"CREATE Notes")
    assert api(regd, "set", {**u, "folder": "Notes", "entries": [
        {"identifier": "group=staff", "rights": "lr"},
        {"identifier": "-user=dave", "rights": "l"}]}) == (200, {"status": "ok"})
    rows = index_rows(tmp_path)
    assert ("Notes", "group=staff", "lr") in rows and ("Notes", "-user=dave", "l") in rows
    assert api(regd, "delete", {**u, "folder": "Notes", "identifier": "-user=dave"}) == (
        200, {"status": "ok"})
    assert [r for r in index_rows(tmp_path) if r[0] == "Notes"] == [
        ("Notes", "group=staff", "lr")]
    # materialise adds the parent's entries, and the index follows
    ok(m, b"CREATE Team/Bare")
    assert api(regd, "set", {**u, "folder": "Team/Bare", "entries": []})[0] == 200
    assert not [r for r in index_rows(tmp_path) if r[0] == "Team/Bare"]
    st, body = api(regd, "materialise", {**u, "folders": ["Team/Bare"], "apply": True})
    assert st == 200 and body["added"] == [
        {"folder": "Team/Bare", "identifier": "user=bob", "rights": "lr"}], body
    assert ("Team/Bare", "user=bob", "lr") in index_rows(tmp_path)
    # IMAP RENAME takes the folder's rows and its children's
    ok(m, b"RENAME Team Crew")
    rows = index_rows(tmp_path)
    assert not [r for r in rows if r[0].startswith("Team")], rows
    assert {r[0] for r in rows if r[1] == "user=bob"} == {"Crew", "Crew/Sub", "Crew/Bare"}
    # the API's rename too
    r = regd.post("backend", "/api/backend/folder/rename",
                  body={"user": "alice", "old_folder": "Crew", "new_folder": "Band"})
    assert r.status == 200, r.json()
    assert {r[0] for r in index_rows(tmp_path) if r[1] == "user=bob"} == {
        "Band", "Band/Sub", "Band/Bare"}
    # delete: the folder's rows go, its children's (which Maildir++ keeps) stay
    ok(m, b"DELETE Band/Sub")
    r = regd.post("backend", "/api/backend/folder/delete", body={"user": "alice",
                                                                 "folder": "Band"})
    assert r.status == 200, r.json()
    assert {r[0] for r in index_rows(tmp_path) if r[1] == "user=bob"} == {"Band/Bare"}
    # IMAP DELETEACL: bob's last grant goes, and with it alice from his registry
    ok(m, b"DELETEACL Band/Bare bob")
    assert not [r for r in index_rows(tmp_path) if r[1] == "user=bob"]
    assert owners(regd, "bob") == []
    assert owners(regd, "carol") == ["alice"]  # INBOX's l (the root's own row is not projected)
    m.logout()


def test_registry_after_grants_and_revocations_file(regd, tmp_path):
    registry_grants_and_revocations(regd, tmp_path)


def test_registry_after_grants_and_revocations_redis(petreld, tmp_path, redis_server):
    d = petreld(config(tmp_path, {"driver": "kvstore", "address": redis_server.address,
                                  "prefix": f"aclidx{os.getpid()}:"}))
    registry_grants_and_revocations(d, tmp_path)
    # the keys are Dovecot's layout, seen in Redis itself
    keys = redis_server.cli("--raw", "KEYS", f"aclidx{os.getpid()}:*").split()
    assert sorted(keys) == [f"aclidx{os.getpid()}:shared/shared-boxes/user/bob/olga"], keys


def registry_grants_and_revocations(d, tmp_path):
    a = login(d)
    ok(a, b"CREATE Shared")
    ok(a, b"CREATE Public")
    for owner in ("alice", "olga"):
        r = d.post("backend", "/api/backend/folder/create", body={"user": owner, "folder": "X"})
        assert r.status in (200, 409), r.json()
    assert wait_owners(d, "bob", []) == []
    ok(a, b"SETACL Shared bob lr")
    assert wait_owners(d, "bob", ["alice"]) == ["alice"]
    assert api(d, "apply", {"user": "olga", "folder": "X", "identifier": "user=bob",
                            "rights": "l"})[0] == 200
    assert wait_owners(d, "bob", ["alice", "olga"]) == ["alice", "olga"]
    # anyone (and authenticated, written as anyone) is everybody's
    assert api(d, "apply", {"user": "alice", "folder": "Public",
                            "identifier": "authenticated", "rights": "lr"})[0] == 200
    assert wait_owners(d, "zoe", ["alice"]) == ["alice"]
    # a grant without l discovers nothing; a negative entry is not a grant
    assert api(d, "apply", {"user": "alice", "folder": "X", "identifier": "user=zoe",
                            "rights": "r"})[0] == 200
    assert api(d, "apply", {"user": "alice", "folder": "X", "identifier": "-user=yan",
                            "rights": "l"})[0] == 200
    assert wait_owners(d, "yan", ["alice"]) == ["alice"]  # through authenticated only
    # revocations
    assert api(d, "apply", {"user": "alice", "folder": "Public",
                            "identifier": "authenticated", "rights": ""})[0] == 200
    assert wait_owners(d, "zoe", []) == []
    ok(a, b"SETACL Shared bob -l")
    assert wait_owners(d, "bob", ["olga"]) == ["olga"]
    a.logout()


def test_registry_endpoints_status_codes(petreld, regd, tmp_path):
    # no sharing_map: both answer 400
    (tmp_path / "plain").mkdir()
    plain = petreld(config(tmp_path / "plain"))
    assert api(plain, "registry/list", {"user": "bob"}) == (
        400, {"error": "acl_sharing_map is not configured"})
    assert api(plain, "registry/rebuild", {"owner": "alice", "namespace": "personal"}) == (
        400, {"error": "acl_sharing_map is not configured"})
    # malformed requests
    assert api(regd, "registry/list", {})[0] == 400
    assert api(regd, "registry/list", {"user": "../x"})[0] == 400
    assert api(regd, "registry/rebuild", {"namespace": "personal"})[0] == 400
    assert api(regd, "registry/rebuild", {"owner": "alice", "namespace": "nope"}) == (
        404, {"error": "namespace not configured: nope"})
    # rebuild reprojects the owner's rows from the index after the registry lost them
    m = login(regd)
    ok(m, b"CREATE Shared")
    ok(m, b"SETACL Shared bob lr")
    ok(m, b"SETACL Shared $staff l")
    m.logout()
    for key in ("shared/shared-boxes/user/bob/alice", "shared/shared-boxes/group/staff/alice"):
        r = regd.post("backend", "/api/backend/dict/reg/unset", body={"key": key})
        assert r.status == 200, r.json()
    assert owners(regd, "bob") == []
    assert api(regd, "registry/rebuild", {"owner": "alice", "namespace": "personal"}) == (
        200, {"owner": "alice", "namespace": "personal", "rows": 2})
    assert owners(regd, "bob") == ["alice"]
    # an owner without an index has no rows (and loses stale ones)
    r = regd.post("backend", "/api/backend/dict/reg/set",
                  body={"key": "shared/shared-boxes/anyone/nobody", "value": "MQ=="})
    assert r.status == 200, r.json()
    assert "nobody" in owners(regd, "bob")
    assert api(regd, "registry/rebuild", {"owner": "nobody", "namespace": "personal"}) == (
        200, {"owner": "nobody", "namespace": "personal", "rows": 0})
    assert owners(regd, "bob") == ["alice"]
    # a public namespace has no owner to discover
    (tmp_path / "pub").mkdir()
    cfg = config(tmp_path / "pub", {"driver": "file", "path": str(tmp_path / "pub" / "r.db")})
    cfg["mail"]["namespaces"] = [
        {"name": "inbox", "type": "personal", "prefix": "", "separator": "/",
         "location": "maildir:%h/Maildir", "subscriptions": True},
        {"name": "public", "type": "public", "prefix": "Public/", "separator": "/",
         "location": f"maildir:{tmp_path}/pub/public", "subscriptions": True}]
    pub = petreld(cfg)
    assert api(pub, "registry/rebuild", {"owner": "alice", "namespace": "public"}) == (
        400, {"error": "namespace public has no owner to discover (personal only)"})
    # ... but it has an index, rebuilt like any other
    r = pub.post("backend", "/api/backend/folder/create",
                 body={"user": "alice", "folder": "News", "namespace": "public"})
    assert r.status == 200, r.json()
    assert api(pub, "apply", {"user": "alice", "folder": "News", "namespace": "public",
                              "identifier": "anyone", "rights": "lr"})[0] == 200
    assert (tmp_path / "pub" / "public" / "petrel-acl-index").read_text() == (
        HEADER + "News\tanyone\tlr\n")
    st, body = api(pub, "rebuild", {"user": "alice", "namespace": "public", "all": True})
    assert (st, body["rebuilt"]) == (200, ["News"]), body
    assert api(pub, "registry/list", {"user": "bob"})[1]["owners"] == []
    # an unreadable index: 500, the registry left as it is
    index_path(tmp_path).write_text("garbage\n")
    st, body = api(regd, "registry/rebuild", {"owner": "alice", "namespace": "personal"})
    assert st == 500 and "acl/rebuild" in body["error"], body
    assert owners(regd, "bob") == ["alice"]


def test_rebuild_status_codes_merge_and_replace(regd, tmp_path):
    m = login(regd)
    for f in (b"A", b"B", b"C"):
        ok(m, b"CREATE " + f)
    ok(m, b"SETACL A bob lr")
    ok(m, b"SETACL B bob l")
    m.logout()
    u = {"user": "alice"}
    assert api(regd, "rebuild", {**u, "all": True, "folders": ["A"]}) == (
        400, {"error": "conflicting fields: all and folders"})
    assert api(regd, "rebuild", u) == (400, {"error": "folders or all is required"})
    assert api(regd, "rebuild", {**u, "folders": [7]})[0] == 400
    assert api(regd, "rebuild", {**u, "folders": ["a/../b"]})[0] == 400
    assert api(regd, "rebuild", {**u, "namespace": "nope", "all": True}) == (
        404, {"error": "namespace not configured: nope"})
    # only unknown names: 200, nothing rebuilt
    st, body = api(regd, "rebuild", {**u, "folders": ["Nope", "Gone"]})
    assert (st, body["rebuilt"], body["folders"]) == (200, [], 0), body
    assert body["skipped"] == [{"folder": "Nope", "reason": "folder not found"},
                               {"folder": "Gone", "reason": "folder not found"}]
    assert body["all"] is False and body["root"] is False
    # the index loses rows behind Petrel's back (an old index, a crash)
    index_path(tmp_path).write_text(HEADER + "Gone\tuser=x\tl\n")
    # named folders merge: A is reseeded, B (not named) and Gone stay as they are
    st, body = api(regd, "rebuild", {**u, "folders": ["A", "C"]})
    assert st == 200, body
    assert (body["rebuilt"], body["folders"]) == (["A"], 1)
    assert body["skipped"] == [{"folder": "C", "reason": "no ACL"}]
    assert index_rows(tmp_path) == [("A", "user=bob", "lr"), ("Gone", "user=x", "l")]
    # all replaces: B comes back, Gone goes; the root holds no ACL
    st, body = api(regd, "rebuild", {**u, "all": True})
    assert st == 200, body
    assert (body["rebuilt"], body["folders"], body["all"], body["root"]) == (
        ["A", "B"], 2, True, False)
    assert index_rows(tmp_path) == [("A", "user=bob", "lr"), ("B", "user=bob", "l")]
    assert owners(regd, "bob") == ["alice"]
    # the root with an ACL: root true, rows for "" (and INBOX, which shares the file)
    assert api(regd, "apply", {**u, "root": True, "identifier": "user=bob",
                               "rights": "l"})[0] == 200
    st, body = api(regd, "rebuild", {**u, "all": True})
    assert body["root"] is True and body["rebuilt"] == ["INBOX", "A", "B"], body
    assert index_rows(tmp_path)[0] == ("", "user=bob", "l")
    # a user with no folders at all (the root alone) is valid
    st, body = api(regd, "rebuild", {"user": "newcomer", "all": True})
    assert st == 200 and body["rebuilt"] == [] and body["root"] is False, body


def test_rebuild_dry_run_after_hand_editing_a_dovecot_acl(regd, tmp_path):
    m = login(regd)
    for f in (b"Hand", b"Same", b"Other"):
        ok(m, b"CREATE " + f)
    ok(m, b"SETACL Hand bob lr")
    ok(m, b"SETACL Hand carol lrs")
    ok(m, b"SETACL Same bob l")
    ok(m, b"SETACL Other dave l")
    m.logout()
    before = index_path(tmp_path).read_bytes()
    # an operator edits Hand's file: bob changed, carol gone, erin new
    acl = tmp_path / "mail" / "alice" / "Maildir" / ".Hand" / "dovecot-acl"
    acl.write_text("user=bob lrw\nuser=erin l\n")
    u = {"user": "alice"}
    st, body = api(regd, "rebuild", {**u, "folders": ["Hand", "Same"], "dry_run": True})
    assert st == 200, body
    assert body["dry_run"] is True
    assert body["missing"] == [{"folder": "Hand", "identifier": "user=erin", "rights": "l"}]
    assert body["stale"] == [{"folder": "Hand", "identifier": "user=carol", "rights": "lrs"}]
    assert body["mismatched"] == [{"folder": "Hand", "identifier": "user=bob",
                                   "rights": "lrw", "indexed": "lr"}]
    assert body["in_sync"] == ["Same"]  # Other is out of the named scope
    assert index_path(tmp_path).read_bytes() == before  # nothing written
    # all: the same, plus Other in sync; a removed folder's rows are stale
    shutil.rmtree(tmp_path / "mail" / "alice" / "Maildir" / ".Other")
    st, body = api(regd, "rebuild", {**u, "all": True, "dry_run": True})
    assert st == 200, body
    assert body["stale"] == [{"folder": "Hand", "identifier": "user=carol", "rights": "lrs"},
                             {"folder": "Other", "identifier": "user=dave", "rights": "l"}]
    assert body["in_sync"] == ["Same"]
    assert index_path(tmp_path).read_bytes() == before
    # the write does what the dry run said; a second dry run finds all in sync
    assert api(regd, "rebuild", {**u, "all": True})[0] == 200
    st, body = api(regd, "rebuild", {**u, "all": True, "dry_run": True})
    assert (body["missing"], body["stale"], body["mismatched"]) == ([], [], [])
    assert body["in_sync"] == ["Hand", "Same"]
    assert owners(regd, "erin") == ["alice"] and owners(regd, "dave") == []


def test_rebuild_all_answers_500_before_clearing_when_listing_fails(petreld, tmp_path):
    # The folders cannot be listed: the namespace root is not readable (but
    # still searchable, so the index itself can be read and written). As
    # root, petreld runs as nobody here so that the mode counts.
    home = Path(tempfile.mkdtemp(prefix="petrel-aclidx-"))
    os.chmod(home, 0o777)
    try:
        cfg = config(home)
        cfg["mail"]["home"] = str(home / "mail" / "%u")
        if os.geteuid() == 0:
            cfg["user"] = "nobody"
            os.chmod(home / "passwd", 0o644)
        d = petreld(cfg)
        m = login(d)
        ok(m, b"CREATE Kept")
        ok(m, b"SETACL Kept bob lr")
        m.logout()
        root = home / "mail" / "alice" / "Maildir"
        assert index_rows(home) == [("Kept", "user=bob", "lr")]
        os.chmod(root, stat.S_IWUSR | stat.S_IXUSR | stat.S_IWOTH | stat.S_IXOTH)
        try:
            st, body = api(d, "rebuild", {"user": "alice", "all": True})
            assert st == 500 and body["error"].startswith("cannot enumerate the folders"), body
        finally:
            os.chmod(root, 0o777)
        assert index_rows(home) == [("Kept", "user=bob", "lr")]
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_concurrent_apply_from_8_clients_and_8_sessions_keeps_the_index_consistent(regd, tmp_path):
    m = login(regd)
    ok(m, b"CREATE Busy")
    ok(m, b"CREATE Busy2")
    m.logout()
    errors = []

    def grant(i):
        try:
            for k in range(5):
                folder = "Busy" if k % 2 == 0 else "Busy2"
                st, body = api(regd, "apply", {"user": "alice", "folder": folder,
                                               "identifier": f"user=c{i}_{k}", "rights": "lr",
                                               "mode": "add"})
                assert st == 200, body
        except Exception as e:  # reported below
            errors.append(e)

    def setacl(i):
        # IMAP sessions on the worker threads, at the same time as the API
        try:
            c = login(regd)
            for k in range(5):
                ok(c, f"SETACL Busy{'' if k % 2 == 0 else '2'} im{i}_{k} lr".encode())
            c.logout()
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=grant, args=(i,)) for i in range(8)]
    threads += [threading.Thread(target=setacl, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    rows = index_rows(tmp_path)
    for folder in ("Busy", "Busy2"):
        entries = api(regd, "get", {"user": "alice", "folder": folder})[1]["entries"]
        assert sorted((folder, e["identifier"], "lr") for e in entries) == sorted(
            r for r in rows if r[0] == folder)
    assert len(rows) == 80
    st, body = api(regd, "rebuild", {"user": "alice", "all": True, "dry_run": True})
    assert (body["missing"], body["stale"], body["mismatched"]) == ([], [], []), body
    # the registry holds every grantee: none of the 80 syncs left an older projection
    assert all(owners(regd, f"{p}{i}_{k}") == ["alice"]
               for p in ("c", "im") for i in range(8) for k in range(5))


def test_petrelctl_rebuild_and_registry(regd, tmp_path):
    def ctl(*args):
        p = run_petrelctl(["--backend-url", f"http://{regd.backend}", "--json", "backend",
                           "acl", *args], timeout=60)
        return p.returncode, (json.loads(p.stdout) if p.stdout.strip() else None), p.stderr

    m = login(regd)
    ok(m, b"CREATE Team")
    ok(m, b"SETACL Team bob lr")
    m.logout()
    code, body, err = ctl("rebuild", "alice", "Team", "--dry-run")
    assert code == 0, err
    assert body["in_sync"] == ["Team"] and body["dry_run"] is True
    code, body, err = ctl("rebuild", "alice", "--all")
    assert code == 0 and body["rebuilt"] == ["Team"], (body, err)
    code, body, err = ctl("rebuild", "alice", "--all", "Team")
    assert code != 0 and "conflicting fields" in err, (code, body, err)
    code, body, err = ctl("registry", "list", "bob")
    assert code == 0 and body["owners"] == ["alice"], (body, err)
    code, body, err = ctl("registry", "rebuild", "alice")
    assert (code, body) == (0, {"owner": "alice", "namespace": "personal", "rows": 1}), err
    code, body, err = ctl("registry", "frobnicate", "alice")
    assert code != 0 and "registry list" in err
