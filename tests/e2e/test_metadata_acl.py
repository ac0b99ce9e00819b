"""METADATA under ACLs (RFC 5464 section 3.3 with RFC 4314 rights): the rule
lives in the storage (metadata_access_check), so IMAP obeys it and the
operator API, an admin path, does not.

RFC 5464 3.3: entries of a folder need "l" and any one of "r", "s", "w",
"i", "p" (else NO); here, as the project's issue asks, reading /shared
entries also needs "r" and writing them "w". A folder without "l" answers
exactly as a missing one. Server entries (mailbox "") are always reachable.

Real parts: petreld with auth, IMAP and the backend API, ACLs on, the file
dict; raw IMAP lines through imaplib's socket. Until shared namespaces
exist a user reaches only their own folders, so rights are restricted with
an entry naming the owner (as tests/e2e/test_acl.py does); bob is the
second user whose grant changes nothing for alice and whose own session
cannot reach alice's entries."""

import base64

import pytest

from test_acl import acl_config, login, ok, raw

NOPERM = b"NO [NOPERM] The mail store does not allow this."
NONEXISTENT = b"NO [NONEXISTENT] Mailbox does not exist."


@pytest.fixture
def mdacl(petreld, tmp_path):
    cfg = acl_config(tmp_path)
    cfg["dicts"] = {"meta": {"driver": "file", "path": str(tmp_path / "meta.db")}}
    cfg["mail"].update({"attribute_dict": "meta"})
    return petreld(cfg)


def api(d, op, body):
    r = d.post("backend", f"/api/backend/metadata/{op}", body=body)
    return r.status, r.json()


def get(m, folder, entry):
    return raw(m, b"GETMETADATA " + folder + b" " + entry)


def put(m, folder, entry, value):
    return raw(m, b"SETMETADATA " + folder + b" (" + entry + b" " + value + b")")[1]


def test_rights_decide_who_reads_and_writes_entries(mdacl):
    m = login(mdacl)
    ok(m, b"CREATE Work")
    assert put(m, b"Work", b"/shared/comment", b'"team"').startswith(b"OK")
    assert put(m, b"Work", b"/private/comment", b'"mine"').startswith(b"OK")
    shared = [b'* METADATA "Work" (/shared/comment "team")']
    private = [b'* METADATA "Work" (/private/comment "mine")']

    # l r: both read; /shared not written (needs w); /private written
    ok(m, b"SETACL Work alice lr")
    assert get(m, b"Work", b"/shared/comment") == (shared, b"OK GETMETADATA complete")
    assert get(m, b"Work", b"/private/comment") == (private, b"OK GETMETADATA complete")
    assert put(m, b"Work", b"/shared/comment", b'"x"') == NOPERM
    assert put(m, b"Work", b"/private/comment", b'"mine"').startswith(b"OK")

    # l w: /shared written but not read; /private both
    ok(m, b"SETACL Work alice lw")
    assert get(m, b"Work", b"/shared/comment") == ([], NOPERM)
    assert get(m, b"Work", b"(/private/comment /shared/comment)") == ([], NOPERM)
    assert get(m, b"Work", b"/private/comment") == (private, b"OK GETMETADATA complete")
    assert put(m, b"Work", b"/shared/comment", b'"team"').startswith(b"OK")

    # l p (any one of r s w i p will do for /private): /shared neither way
    for rights in (b"lp", b"li", b"ls"):
        ok(m, b"SETACL Work alice " + rights)
        assert get(m, b"Work", b"/private/comment") == (private, b"OK GETMETADATA complete"), rights
        assert get(m, b"Work", b"/shared/comment") == ([], NOPERM), rights
        assert put(m, b"Work", b"/shared/comment", b'"x"') == NOPERM, rights

    # l with none of r s w i p: RFC 5464 3.3's NO for either scope
    ok(m, b"SETACL Work alice lkxte")
    assert get(m, b"Work", b"/private/comment") == ([], NOPERM)
    assert put(m, b"Work", b"/private/comment", b'"x"') == NOPERM
    # a refused SETMETADATA changed nothing
    ok(m, b"SETACL Work alice lrw")
    assert get(m, b"Work", b"(/shared/comment /private/comment)") == (
        [b'* METADATA "Work" (/shared/comment "team" /private/comment "mine")'],
        b"OK GETMETADATA complete")

    # no l: the folder answers exactly as one that does not exist
    ok(m, b'SETACL Work alice ""')
    for verb in (b"GETMETADATA %s /private/comment", b'SETMETADATA %s (/private/comment "x")'):
        assert raw(m, verb % b"Work") == raw(m, verb % b"Missing") == ([], NONEXISTENT), verb

    # bob's grant is bob's: alice keeps what her own entry says
    ok(m, b"SETACL Work bob lrw")
    assert get(m, b"Work", b"/private/comment") == ([], NONEXISTENT)

    # the operator API is an admin path: no folder rights asked (document 1)
    u = {"user": "alice", "folder": "Work"}
    assert api(mdacl, "get", {**u, "entry": "/shared/comment"}) == (
        200, {"entry": "/shared/comment", "found": True, "value": base64.b64encode(b"team").decode()})
    assert api(mdacl, "set", {**u, "entry": "/shared/comment",
                              "value": base64.b64encode(b"ops").decode()}) == (200, {"status": "ok"})

    # the server's entries do not depend on any folder's ACL (RFC 5464 3.3:
    # users can always retrieve server annotations), not even INBOX's
    ok(m, b'SETACL INBOX alice ""')
    assert put(m, b'""', b"/shared/comment", b'"motd"').startswith(b"OK")
    assert get(m, b'""', b"/shared/comment") == (
        [b'* METADATA "" (/shared/comment "motd")'], b"OK GETMETADATA complete")
    m.logout()

    # bob's session reaches his own folders only: his "Work" is not alice's
    b = login(mdacl, "bob", "builder")
    assert get(b, b"Work", b"/shared/comment") == ([], NONEXISTENT)
    ok(b, b"CREATE Work")
    assert get(b, b"Work", b"/shared/comment") == ([], b"OK GETMETADATA complete")
    b.logout()


def test_delete_with_x_but_no_r_still_removes_the_entries(mdacl):
    """A folder's deletion needs only "x": its entries go with it even when
    the deleting user may not read the folder's messages."""
    m = login(mdacl)
    ok(m, b"CREATE Gone")
    assert put(m, b"Gone", b"/shared/comment", b'"old"').startswith(b"OK")
    assert put(m, b"Gone", b"/private/comment", b'"old"').startswith(b"OK")
    guid = mdacl.post("backend", "/api/backend/folder/guid",
                      body={"user": "alice", "folder": "Gone"}).json()["guid"]
    ok(m, b"SETACL Gone alice lx")
    ok(m, b"DELETE Gone")

    def keys():
        out = []
        for path, op in (("shared/", None), ("priv/", {"username": "alice"})):
            body = {"path": f"{path}{guid}/", "flags": 1}
            if op:
                body["op"] = op
            r = mdacl.post("backend", "/api/backend/dict/meta/iterate", body=body)
            assert r.status == 200, r
            out += [line for line in r.body.decode().splitlines() if line]
        return out

    assert keys() == []
    m.logout()


def test_without_acls_another_namespace_is_not_the_sessions_but_the_api_reaches_it(
        petreld, tmp_path):
    """ACLs off: a session reaches the entries of its personal folders and
    of the server only; a public namespace's folder answers NOPERM over IMAP
    while the operator API (admin plane) reads and writes it."""
    from test_metadata import md_overrides
    from test_storage_api import personal_ns, public_ns
    cfg = md_overrides(tmp_path, {"driver": "file", "path": str(tmp_path / "meta.db")})
    cfg["mail"]["namespaces"] = [personal_ns(), public_ns(tmp_path)]
    d = petreld(cfg)
    r = d.post("backend", "/api/backend/folder/create",
               body={"user": "alice", "folder": "News", "namespace": "public"})
    assert r.status == 200, r
    body = {"user": "alice", "folder": "News", "namespace": "public", "entry": "/shared/comment"}
    assert api(d, "set", {**body, "value": base64.b64encode(b"board").decode()}) == \
        (200, {"status": "ok"})
    assert api(d, "get", body)[1]["value"] == base64.b64encode(b"board").decode()
    m = login(d, "alice", "wonderland")
    assert get(m, b'"Public/News"', b"/shared/comment") == ([], NOPERM)
    assert put(m, b'"Public/News"', b"/shared/comment", b'"mine now"') == NOPERM
    assert put(m, b"INBOX", b"/shared/comment", b'"own"').startswith(b"OK")
    m.logout()
    assert api(d, "get", body)[1]["value"] == base64.b64encode(b"board").decode()
