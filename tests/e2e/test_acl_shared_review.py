"""Review of issue 23 (shared namespaces, the ACL list index and the
sharing registry) from a reader's and an attacker's side: what a reader's
DELETE does to the owner's registry, what LIST shows when the index and a
folder's dovecot-acl disagree, and negative entries against group grants
in LIST.

Real parts: one petreld with auth (passwd-file with userdb groups), IMAP
and the backend API, the registry in a file dict; imaplib; urllib."""

import os

import pytest

from test_acl_shared import (NONEXISTENT, append, listing, login, ok, owner_shares, raw,
                             shared_config)

GROUPS_PASSWD = ("alice:{PLAIN}wonderland:1001:1001\n"
                 "bob:{PLAIN}builder:1002:1002::::userdb_acl_groups=staff\n"
                 "carol:{PLAIN}singer:1003:1003::::userdb_acl_groups=staff\n")


@pytest.fixture
def shd(petreld, tmp_path):
    cfg = shared_config(tmp_path)
    (tmp_path / "passwd").write_text(GROUPS_PASSWD)  # with userdb groups
    return petreld(cfg)


def registry_owners(d, user):
    r = d.post("backend", "/api/backend/acl/registry/list", body={"user": user})
    assert r.status == 200, r.json()
    return r.json()["owners"]


def test_reader_delete_updates_the_owners_registry(shd, tmp_path):
    """bob (lrx) deletes alice's shared folder: alice's index loses its rows
    and the registry key that named alice to carol goes with them, as
    alice's own DELETE would do (before: the key stayed, registry/list kept
    answering alice for carol)."""
    a = owner_shares(shd, rights=b"lrx")
    ok(a, b"SETACL Team carol lr")
    assert registry_owners(shd, "carol") == ["alice"]
    b = login(shd, "bob")
    assert raw(b, b"DELETE shared/alice/Team") == ([], b"OK DELETE completed.")
    index = tmp_path / "mail" / "alice" / "Maildir" / "petrel-acl-index"
    assert index.read_text() == "PETREL-ACL-INDEX 1\n"
    assert registry_owners(shd, "carol") == []
    assert registry_owners(shd, "bob") == []


def test_reader_rename_keeps_the_owners_index_and_registry(shd, tmp_path):
    """bob (lrkx, k on alice's root) renames alice's folder with a child:
    alice's index rows follow (the child's too) and carol still finds both
    under the new names."""
    a = login(shd, "alice")
    ok(a, b"CREATE Team")
    ok(a, b"SETACL Team bob lrkx")
    ok(a, b"SETACL Team carol lr")
    ok(a, b"SETACL INBOX bob lrk")
    b = login(shd, "bob")
    ok(b, b"CREATE shared/alice/Team/Sub")
    ok(b, b"RENAME shared/alice/Team shared/alice/Renamed")
    index = (tmp_path / "mail" / "alice" / "Maildir" / "petrel-acl-index").read_text()
    assert index == ("PETREL-ACL-INDEX 1\n"
                     "\tuser=bob\tlrk\n"
                     "INBOX\tuser=bob\tlrk\n"
                     "Renamed\tuser=bob\tlrkx\n"
                     "Renamed\tuser=carol\tlr\n"
                     "Renamed/Sub\tuser=bob\tlrkx\n"
                     "Renamed/Sub\tuser=carol\tlr\n"), index
    assert registry_owners(shd, "carol") == ["alice"]
    c = login(shd, "carol")
    assert listing(c, b'LIST "" "shared/*"') == [
        b'* LIST (\\Noselect \\HasChildren) "/" "shared/alice"',
        b'* LIST (\\HasChildren) "/" "shared/alice/Renamed"',
        b'* LIST (\\HasNoChildren) "/" "shared/alice/Renamed/Sub"']


def test_list_does_not_show_a_folder_whose_acl_file_no_longer_grants_lookup(shd, tmp_path):
    """The index is a hint for LIST, the folder's dovecot-acl decides: after
    a revocation the index did not see (Dovecot's doveadm acl delete, an
    editor, an index write that failed), LIST must not name a folder that
    SELECT answers as missing (before: listed, then NONEXISTENT)."""
    owner_shares(shd)                          # Team: bob lr
    b = login(shd, "bob")
    assert b'* LIST (\\HasNoChildren) "/" "shared/alice/Team"' in listing(b, b'LIST "" "*"')
    acl = tmp_path / "mail" / "alice" / "Maildir" / ".Team" / "dovecot-acl"
    acl.write_text("user=carol lr\n")          # as Dovecot would rewrite it
    assert raw(b, b"SELECT shared/alice/Team") == ([], NONEXISTENT)
    assert listing(b, b'LIST "" "*"') == [b'* LIST (\\HasNoChildren) "/" "INBOX"']
    assert listing(b, b'LIST "" "shared/alice/%"') == []


def test_negative_entry_hides_a_group_grant_in_list(shd, tmp_path):
    """$staff lr with -bob l: carol (staff) lists and opens the folder, bob
    (staff too) does not see it in LIST (the index's negative row counts)
    although r still opens it (RFC 4314: l and r are independent)."""
    a = login(shd, "alice")
    ok(a, b"CREATE Team")
    assert append(a, b"Team").startswith(b"OK")
    ok(a, b"SETACL Team $staff lr")
    ok(a, b"SETACL Team -bob l")
    b = login(shd, "bob")
    c = login(shd, "carol")
    assert listing(c, b'LIST "" "shared/*"') == [
        b'* LIST (\\Noselect \\HasChildren) "/" "shared/alice"',
        b'* LIST (\\HasNoChildren) "/" "shared/alice/Team"']
    assert listing(b, b'LIST "" "*"') == [b'* LIST (\\HasNoChildren) "/" "INBOX"']
    assert raw(b, b"MYRIGHTS shared/alice/Team") == (
        [b"* MYRIGHTS shared/alice/Team r"], b"OK Myrights completed.")
    assert raw(c, b"MYRIGHTS shared/alice/Team") == (
        [b"* MYRIGHTS shared/alice/Team lr"], b"OK Myrights completed.")


def test_fifo_in_place_of_the_index_or_an_acl_file_does_not_hang_the_session(shd, tmp_path):
    """A FIFO where petrel-acl-index or a dovecot-acl should be (someone
    with access to the owner's files) is refused as not a regular file:
    before, open() waited for a writer, so the reader's LIST (or SELECT)
    never answered and petreld did not stop on SIGTERM."""
    owner_shares(shd)                          # Team: bob lr
    c = login(shd, "carol")
    ok(c, b"CREATE CT")
    ok(c, b"SETACL CT bob lr")
    root = tmp_path / "mail" / "alice" / "Maildir"
    (root / "petrel-acl-index").unlink()
    os.mkfifo(root / "petrel-acl-index")
    b = login(shd, "bob")
    b.sock.settimeout(10)
    # alice's index is unusable: she is left out, carol still listed
    assert listing(b, b'LIST "" "shared/*"') == [
        b'* LIST (\\Noselect \\HasChildren) "/" "shared/carol"',
        b'* LIST (\\HasNoChildren) "/" "shared/carol/CT"']
    (root / ".Team" / "dovecot-acl").unlink()
    os.mkfifo(root / ".Team" / "dovecot-acl")
    # an ACL file that cannot be read gives no rights
    assert raw(b, b"SELECT shared/alice/Team") == ([], NONEXISTENT)
    assert raw(b, b"STATUS shared/carol/CT (MESSAGES)") == (
        [b'* STATUS "shared/carol/CT" (MESSAGES 0)'], b"OK STATUS completed.")


def test_forged_registry_keys_give_no_access(shd, tmp_path):
    """The registry is a hint: keys saying alice shares with bob (by user
    and by anyone) when no ACL of hers does list nothing of hers for bob
    and open nothing."""
    a = login(shd, "alice")
    ok(a, b"CREATE Secret")
    assert append(a, b"Secret").startswith(b"OK")
    for key in ("shared/shared-boxes/user/bob/alice", "shared/shared-boxes/anyone/alice"):
        r = shd.post("backend", "/api/backend/dict/reg/set", body={"key": key, "value": "MQ=="})
        assert r.status == 200, r.json()
    assert registry_owners(shd, "bob") == ["alice"]
    b = login(shd, "bob")
    assert listing(b, b'LIST "" "*"') == [b'* LIST (\\HasNoChildren) "/" "INBOX"']
    for name in (b"shared/alice/Secret", b"shared/alice/INBOX"):
        assert raw(b, b"EXAMINE " + name) == ([], NONEXISTENT), name
