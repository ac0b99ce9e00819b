"""The mail storage endpoints of the backend-plane API (spec document 1:
Addressing fields, namespace slug rules, Folders, Index, Subscriptions,
Special use, User; DECISIONS.md for the unknown-namespace and folder-less
answers) plus the Petrel bulk-import route mail/append, against a real
petreld over Maildir++ on disk.

Every test gets its own petreld and its own mail tree under tmp_path:
  <tmp>/mail/<user>/Maildir      personal namespace (slug `personal`)
  <tmp>/public                   public namespace, prefix "Public/" (slug `public`)
The on-disk side is checked directly (file names, dovecot-uidlist,
subscriptions file, mtimes) and with Python's own mailbox.Maildir reader.
"""

import base64
import mailbox
import os
import re
import threading
import time
from pathlib import Path

import pytest

from conftest import http_request
from mailstore import read_uidlist_live

SPECIAL_USE_DEFAULTS = {"Drafts": "\\Drafts", "Sent": "\\Sent", "Trash": "\\Trash"}


def personal_ns(**kw):
    ns = {"name": "inbox", "type": "personal", "prefix": "", "separator": "/",
          "location": "maildir:%h/Maildir", "subscriptions": True}
    ns.update(kw)
    return ns


def mail_section(tmp_path, extra_namespaces=(), special_use=None):
    return {"mail": {
        "home": f"{tmp_path}/mail/%u",
        "fsync": "always",
        "special_use": dict(special_use if special_use is not None else SPECIAL_USE_DEFAULTS),
        "namespaces": [personal_ns(), *extra_namespaces],
    }}


def public_ns(tmp_path, **kw):
    ns = {"name": "public", "type": "public", "prefix": "Public/", "separator": "/",
          "location": f"maildir:{tmp_path}/public", "subscriptions": True}
    ns.update(kw)
    return ns


class Store:
    """A running petreld with a mail tree; thin JSON helpers."""

    def __init__(self, daemon, tmp_path):
        self.d = daemon
        self.tmp = Path(tmp_path)

    def raw(self, path, body):
        return self.d.post("backend", "/api/backend/" + path, body=body, timeout=60)

    def call(self, path, body, status=200):
        r = self.raw(path, body)
        assert r.status == status, (path, body, r)
        assert r.headers.get("content-type", "").startswith("application/json"), r.headers
        return r.json()

    def error(self, path, body, status):
        data = self.call(path, body, status)
        assert isinstance(data.get("error"), str) and data["error"], data
        return data["error"]

    # paths on disk
    def root(self, user="alice"):
        return self.tmp / "mail" / user / "Maildir"

    def public_root(self):
        return self.tmp / "public"

    # shortcuts
    def create(self, folder, user="alice", **kw):
        return self.call("folder/create", {"user": user, "folder": folder, **kw})

    def append(self, folder, data, user="alice", status=200, **kw):
        if isinstance(data, str):
            data = data.encode()
        body = {"user": user, "folder": folder, "message": base64.b64encode(data).decode(), **kw}
        return self.call("mail/append", body, status)

    def dump(self, folder, user="alice", **kw):
        return self.call("index/dump", {"user": user, "folder": folder, **kw})

    def info(self, folder, user="alice", **kw):
        return self.call("folder/info", {"user": user, "folder": folder, **kw})

    def folders(self, user="alice", **kw):
        return self.call("folder/list", {"user": user, **kw})["folders"]


@pytest.fixture
def store(petreld, tmp_path):
    d = petreld(mail_section(tmp_path, [public_ns(tmp_path)]))
    return Store(d, tmp_path)


def message(subject="hello", body="body line\n", extra=""):
    return f"From: a@example.com\nTo: b@example.com\nSubject: {subject}\n{extra}\n{body}"


def cur_files(folder_dir):
    return sorted(os.listdir(folder_dir / "cur"))


# ---------------------------------------------------------------- folders

def test_folder_list_new_user_has_inbox(store):
    assert store.folders() == ["INBOX"]
    # The public namespace has no INBOX and nothing yet.
    assert store.folders(namespace="public") == []


def test_folder_list_sorted_inbox_first(store):
    for name in ("Zeta", "Alpha", "Alpha/Beta", "Middle"):
        store.create(name)
    assert store.folders() == ["INBOX", "Alpha", "Alpha/Beta", "Middle", "Zeta"]
    # On disk: Maildir++ with '.' between levels.
    root = store.root()
    for d in (".Zeta", ".Alpha", ".Alpha.Beta", ".Middle"):
        assert (root / d / "cur").is_dir() and (root / d / "new").is_dir()
        assert (root / d / "tmp").is_dir() and (root / d / "maildirfolder").is_file()


def test_folder_info_fields(store):
    store.create("Work")
    info = store.info("Work")
    assert set(info) == {"name", "guid", "uid_validity", "next_uid", "messages", "unseen",
                         "highest_modseq"}
    assert info["name"] == "Work"
    assert re.fullmatch(r"[0-9a-f]{32}", info["guid"]) and info["guid"] != "0" * 32
    assert info["uid_validity"] > 0
    assert info["next_uid"] == 1
    assert info["messages"] == 0 and info["unseen"] == 0
    store.append("Work", message(), flags=["\\Seen"])
    store.append("Work", message())
    info2 = store.info("Work")
    assert info2["guid"] == info["guid"]
    assert info2["uid_validity"] == info["uid_validity"]
    assert info2["next_uid"] == 3 and info2["messages"] == 2 and info2["unseen"] == 1
    assert info2["highest_modseq"] > info["highest_modseq"]


def test_folder_info_inbox_any_case(store):
    info = store.info("inbox")
    assert info["name"] == "INBOX"
    assert store.info("INBOX")["guid"] == info["guid"]


def test_folder_info_missing_404(store):
    for path in ("folder/info", "folder/guid", "folder/stats", "folder/expunge", "index/dump",
                 "index/rebuild", "index/optimize", "index/cache-purge"):
        err = store.error(path, {"user": "alice", "folder": "Nope"}, 404)
        assert "Nope" in err, (path, err)


def test_folder_guid(store):
    store.create("Work")
    g = store.call("folder/guid", {"user": "alice", "folder": "Work"})
    assert g == {"folder": "Work", "guid": store.info("Work")["guid"]}
    # GUIDs are per folder.
    store.create("Other")
    assert store.call("folder/guid", {"user": "alice", "folder": "Other"})["guid"] != g["guid"]


def test_folder_stats(store):
    store.create("Work")
    a = message("one")
    b = message("two", body="x" * 1000 + "\n")
    store.append("Work", a)
    store.append("Work", b)
    st = store.call("folder/stats", {"user": "alice", "folder": "Work"})
    assert set(st) >= {"name", "guid", "uid_validity", "next_uid", "messages", "unseen",
                       "highest_modseq", "size_bytes", "on_disk_count"}
    assert st["messages"] == 2
    assert st["size_bytes"] == len(a) + len(b)
    assert st["on_disk_count"] == 2
    # info has no stats fields
    assert "size_bytes" not in store.info("Work")


def test_folder_create_exists_409(store):
    store.create("Work")
    err = store.error("folder/create", {"user": "alice", "folder": "Work"}, 409)
    assert "exists" in err
    store.error("folder/create", {"user": "alice", "folder": "INBOX"}, 409)
    store.error("folder/create", {"user": "alice", "folder": "inbox"}, 409)


def test_folder_create_special_use(store):
    r = store.create("Archive2024", special_use="\\Archive")
    assert r == {"status": "ok"}
    got = store.call("specialuse/get", {"user": "alice", "folder": "Archive2024"})
    assert got == {"folder": "Archive2024", "attr": "\\Archive", "source": "override"}
    listed = store.call("specialuse/list", {"user": "alice"})
    assert listed["overrides"] == {"Archive2024": "\\Archive"}


def test_folder_create_invalid_special_use_400(store):
    err = store.error("folder/create",
                      {"user": "alice", "folder": "X", "special_use": "\\Bogus"}, 400)
    assert "Bogus" in err
    assert "X" not in store.folders()
    store.error("folder/create", {"user": "alice", "folder": "X", "special_use": 7}, 400)


def test_folder_create_special_use_in_public_is_ignored(store):
    r = store.create("Shared-Archive", namespace="public", special_use="\\Archive")
    assert r == {"status": "ok"}
    assert store.folders(namespace="public") == ["Shared-Archive"]
    assert store.call("specialuse/list", {"user": "alice"})["overrides"] == {}


def test_folder_create_special_use_error_still_200(store):
    # Registering the attribute fails (its lock file cannot be opened): the
    # folder is created anyway and the reply says what went wrong.
    store.root().mkdir(parents=True)
    (store.root() / "petrel-special-use.lock").mkdir()
    r = store.create("Sent Items", special_use="\\Sent")
    assert r["status"] == "ok"
    assert isinstance(r.get("special_use_error"), str) and r["special_use_error"]
    assert "Sent Items" in store.folders()


def test_folder_delete(store):
    store.create("Work")
    store.create("Work/Projects")
    store.append("Work", message("parent"))
    store.append("Work/Projects", message("child"))
    wdir = store.root() / ".Work"
    (wdir / "dovecot-acl").write_text("owner lrswipkxtecda\n")
    assert (wdir / "petrel.index").exists() and (wdir / "dovecot-uidlist").exists()
    old_guid = store.info("Work")["guid"]
    assert store.call("folder/delete", {"user": "alice", "folder": "Work"}) == {"status": "ok"}
    # The folder, its messages, index files and ACL file are gone ...
    assert not wdir.exists()
    assert store.folders() == ["INBOX", "Work/Projects"]
    store.error("folder/info", {"user": "alice", "folder": "Work"}, 404)
    # ... nothing is left half-deleted in the root ...
    assert not [n for n in os.listdir(store.root()) if n.startswith(".#")]
    # ... and the child stays with its message.
    assert store.info("Work/Projects")["messages"] == 1
    # Re-created, it is a new folder: new GUID, no ACL, no messages.
    store.create("Work")
    assert store.info("Work")["guid"] != old_guid
    assert store.info("Work")["messages"] == 0
    assert not (wdir / "dovecot-acl").exists()


def test_folder_delete_missing_404(store):
    err = store.error("folder/delete", {"user": "alice", "folder": "Nope"}, 404)
    assert "Nope" in err


def test_folder_delete_inbox_400(store):
    store.error("folder/delete", {"user": "alice", "folder": "INBOX"}, 400)
    assert store.folders() == ["INBOX"]


def test_folder_delete_removes_special_use_override(store):
    store.create("Keep", special_use="\\Archive")
    store.create("Keep/Child", special_use="\\Junk")
    store.call("folder/delete", {"user": "alice", "folder": "Keep"})
    overrides = store.call("specialuse/list", {"user": "alice"})["overrides"]
    assert overrides == {"Keep/Child": "\\Junk"}


def test_folder_rename_moves_children_keeps_guid(store):
    store.create("Old")
    store.create("Old/Child")
    store.create("Old/Child/Grand")
    store.create("Oldish")  # shares the prefix, is not a child
    store.append("Old", message("p"))
    store.append("Old/Child", message("c"))
    (store.root() / ".Old" / "dovecot-acl").write_text("owner lrswipkxtecda\n")
    guids = {f: store.info(f)["guid"] for f in ("Old", "Old/Child", "Old/Child/Grand")}
    r = store.call("folder/rename",
                   {"user": "alice", "old_folder": "Old", "new_folder": "New/Place"})
    assert r == {"status": "ok"}
    assert store.folders() == ["INBOX", "New/Place", "New/Place/Child", "New/Place/Child/Grand",
                               "Oldish"]
    assert store.info("New/Place")["guid"] == guids["Old"]
    assert store.info("New/Place/Child")["guid"] == guids["Old/Child"]
    assert store.info("New/Place/Child/Grand")["guid"] == guids["Old/Child/Grand"]
    assert store.info("New/Place")["messages"] == 1
    assert store.info("New/Place/Child")["messages"] == 1
    # The ACL file moved with the folder.
    assert (store.root() / ".New.Place" / "dovecot-acl").read_text() == "owner lrswipkxtecda\n"
    assert not (store.root() / ".Old").exists()


def test_folder_rename_errors(store):
    store.create("A")
    store.create("B")
    err = store.error("folder/rename", {"user": "alice", "old_folder": "INBOX",
                                        "new_folder": "X"}, 400)
    assert "INBOX" in err
    store.error("folder/rename", {"user": "alice", "old_folder": "inbox", "new_folder": "X"}, 400)
    store.error("folder/rename", {"user": "alice", "old_folder": "Nope", "new_folder": "X"}, 404)
    store.error("folder/rename", {"user": "alice", "old_folder": "A", "new_folder": "B"}, 409)
    store.error("folder/rename", {"user": "alice", "old_folder": "A", "new_folder": "INBOX"}, 409)
    err = store.error("folder/rename", {"user": "alice", "old_folder": "A",
                                        "new_folder": "A/Sub"}, 400)
    assert "itself" in err
    store.error("folder/rename", {"user": "alice", "old_folder": "A", "new_folder": ""}, 400)
    store.error("folder/rename", {"user": "alice", "old_folder": "", "new_folder": "C"}, 400)
    store.error("folder/rename", {"user": "alice", "new_folder": "C"}, 400)
    store.error("folder/rename", {"user": "alice", "old_folder": "A"}, 400)
    store.error("folder/rename", {"user": "alice", "old_folder": "A", "new_folder": "C/../D"},
                400)
    assert store.folders() == ["INBOX", "A", "B"]


def test_folder_rename_child_conflict_409(store):
    store.create("A")
    store.create("A/Kid")
    store.create("Z/Kid")  # Z itself does not exist, its child does
    store.error("folder/rename", {"user": "alice", "old_folder": "A", "new_folder": "Z"}, 409)
    assert store.folders() == ["INBOX", "A", "A/Kid", "Z/Kid"]


def test_folder_rename_moves_special_use(store):
    store.create("Old", special_use="\\Archive")
    store.create("Old/Kid", special_use="\\Junk")
    store.call("folder/rename", {"user": "alice", "old_folder": "Old", "new_folder": "New"})
    overrides = store.call("specialuse/list", {"user": "alice"})["overrides"]
    assert overrides == {"New": "\\Archive", "New/Kid": "\\Junk"}


def test_folder_expunge_all_deleted(store):
    store.create("Work")
    uids = [store.append("Work", message(str(i)),
                         flags=["\\Deleted"] if i in (1, 3) else [])["uid"] for i in range(4)]
    assert uids == [1, 2, 3, 4]
    r = store.call("folder/expunge", {"user": "alice", "folder": "Work"})
    assert r == {"status": "ok", "expunged": [2, 4], "count": 2}
    assert [rec["uid"] for rec in store.dump("Work")["records"]] == [1, 3]
    assert len(cur_files(store.root() / ".Work")) == 2
    # Nothing more to do.
    assert store.call("folder/expunge", {"user": "alice", "folder": "Work"}) == \
        {"status": "ok", "expunged": [], "count": 0}
    # dovecot-uidlist keeps the lines of the expunged messages until they pile
    # up (as Dovecot does: readers skip lines whose file is gone); the lines
    # whose file exists follow the index.
    uidlist = (store.root() / ".Work" / "dovecot-uidlist").read_text().splitlines()
    assert [line.split()[0] for line in uidlist[1:]] == ["1", "2", "3", "4"]
    _, live = read_uidlist_live(store.root() / ".Work")
    assert sorted(live) == [1, 3]


def test_uidlist_compacted_when_stale_lines_pile_up(store):
    store.create("Work")
    for i in range(60):
        store.append("Work", message(str(i)), flags=["\\Deleted"] if i >= 10 else [])
    path = store.root() / ".Work" / "dovecot-uidlist"
    assert len(path.read_text().splitlines()) == 61
    r = store.call("folder/expunge", {"user": "alice", "folder": "Work"})
    assert r["count"] == 50
    # 50 stale lines for 10 live messages: rewritten at once.
    assert [int(line.split()[0]) for line in path.read_text().splitlines()[1:]] == \
        list(range(1, 11))
    # One more expunge leaves its line (1 stale line for 10 live).
    assert store.append("Work", message("late"), flags=["\\Deleted"])["uid"] == 61
    assert store.call("folder/expunge", {"user": "alice", "folder": "Work"})["expunged"] == [61]
    assert [int(line.split()[0]) for line in path.read_text().splitlines()[1:]] == \
        list(range(1, 11)) + [61]
    _, live = read_uidlist_live(store.root() / ".Work")
    assert sorted(live) == list(range(1, 11))


def test_folder_expunge_only_given_uids(store):
    for i in range(5):
        store.append("INBOX", message(str(i)), flags=["\\Deleted"] if i != 2 else [])
    # uid 3 is not \Deleted: named but kept; 99 does not exist.
    r = store.call("folder/expunge", {"user": "alice", "folder": "INBOX", "uids": [5, 3, 1, 99]})
    assert r == {"status": "ok", "expunged": [1, 5], "count": 2}
    assert [rec["uid"] for rec in store.dump("INBOX")["records"]] == [2, 3, 4]
    r = store.call("folder/expunge", {"user": "alice", "folder": "INBOX", "uids": []})
    assert r["count"] == 0
    for bad in ([0], [-1], ["1"], [1.5], [4294967296], "1,2", {"a": 1}):
        store.error("folder/expunge", {"user": "alice", "folder": "INBOX", "uids": bad}, 400)
    assert [rec["uid"] for rec in store.dump("INBOX")["records"]] == [2, 3, 4]


# ---------------------------------------------------------------- index

def test_index_dump_records(store):
    store.create("Work")
    m1 = message("first")
    m2 = message("second", body="crlf\r\nline\r\n")
    store.append("Work", m1, flags=["\\Seen", "\\Answered", "\\Flagged", "\\Draft",
                                    "$Forwarded", "\\Deleted", "Important", "todo"])
    store.append("Work", m2)
    d = store.dump("Work")
    assert set(d) == {"folder", "folder_guid", "uid_validity", "next_uid", "highest_modseq",
                      "truncated", "records"}
    info = store.info("Work")
    assert d["folder"] == "Work" and d["folder_guid"] == info["guid"]
    assert d["uid_validity"] == info["uid_validity"] and d["next_uid"] == 3
    assert d["highest_modseq"] == info["highest_modseq"]
    assert d["truncated"] is False
    r1, r2 = d["records"]
    assert set(r1) == {"uid", "filename", "flags", "modseq", "size", "vsize"}
    assert r1["uid"] == 1 and r2["uid"] == 2
    assert r1["flags"] == ["\\Answered", "\\Flagged", "\\Deleted", "\\Seen", "\\Draft",
                           "$Forwarded", "Important", "todo"]
    assert r2["flags"] == []
    assert r1["size"] == len(m1) and r1["vsize"] == len(m1) + m1.count("\n")
    assert r2["size"] == len(m2) and r2["vsize"] == len(m2) + m2.count("\n") - m2.count("\r\n")
    assert 0 < r1["modseq"] < r2["modseq"] <= d["highest_modseq"]
    # The file names are those in cur/ (Dovecot flag letters, sorted; keywords a..z).
    assert cur_files(store.root() / ".Work") == sorted([r1["filename"], r2["filename"]])
    # $Forwarded is a keyword (as in Dovecot), not the maildir 'P' letter.
    assert r1["filename"].endswith(":2,DFRSTabc")
    assert r2["filename"].endswith(":2,")
    assert f",S={len(m1)}" in r1["filename"]
    kw = (store.root() / ".Work" / "dovecot-keywords").read_text().split("\n")
    assert "0 $Forwarded" in kw and "1 Important" in kw and "2 todo" in kw


def test_index_dump_limit_truncated(store):
    for i in range(5):
        store.append("INBOX", message(str(i)))
    d = store.dump("INBOX", limit=3)
    assert d["truncated"] is True and [r["uid"] for r in d["records"]] == [1, 2, 3]
    d = store.dump("INBOX", limit=5)
    assert d["truncated"] is False and len(d["records"]) == 5
    d = store.dump("INBOX", limit=0)
    assert d["truncated"] is False and len(d["records"]) == 5
    for bad in (-1, "3", 1.5, 10 ** 7):
        store.error("index/dump", {"user": "alice", "folder": "INBOX", "limit": bad}, 400)


def test_index_rebuild_preserves_uids_file_names_win(store):
    store.create("Work")
    for i in range(4):
        store.append("Work", message(str(i)), flags=["\\Flagged"] if i == 0 else [])
    wdir = store.root() / ".Work"
    before = {r["uid"]: r for r in store.dump("Work")["records"]}
    guid = store.info("Work")["guid"]
    # Another program: marks uid 2 seen (file rename), removes uid 3, delivers
    # a new message into new/.
    f2 = before[2]["filename"]
    os.rename(wdir / "cur" / f2, wdir / "cur" / (f2 + "S"))
    os.unlink(wdir / "cur" / before[3]["filename"])
    new_msg = message("delivered elsewhere")
    (wdir / "new" / "1600000000.M1P1.otherhost").write_text(new_msg)
    # uid 1's flags in the index say \Flagged; its file name drops it.
    f1 = before[1]["filename"]
    os.rename(wdir / "cur" / f1, wdir / "cur" / f1.replace(":2,F", ":2,"))

    r = store.call("index/rebuild", {"user": "alice", "folder": "Work"})
    assert set(r) == {"folder", "folder_guid", "scanned", "uids_preserved", "uids_assigned",
                      "orphans_dropped", "duration_ms"}
    assert r["folder"] == "Work" and r["folder_guid"] == guid
    assert r["scanned"] == 4
    assert r["uids_preserved"] == 3
    assert r["uids_assigned"] == 1
    assert r["orphans_dropped"] == 1
    assert r["duration_ms"] >= 0

    after = {rec["uid"]: rec for rec in store.dump("Work")["records"]}
    assert sorted(after) == [1, 2, 4, 5]
    assert after[1]["flags"] == []
    assert after[2]["flags"] == ["\\Seen"]
    assert after[4]["flags"] == []
    assert after[5]["size"] == len(new_msg)
    assert after[5]["filename"].startswith("1600000000.M1P1.otherhost")
    # The delivered file moved to cur/.
    assert os.listdir(wdir / "new") == []
    assert (wdir / "cur" / after[5]["filename"]).read_text() == new_msg
    info = store.info("Work")
    assert info["guid"] == guid and info["next_uid"] == 6 and info["unseen"] == 3
    # A second rebuild changes nothing.
    r = store.call("index/rebuild", {"user": "alice", "folder": "Work"})
    assert (r["scanned"], r["uids_preserved"], r["uids_assigned"], r["orphans_dropped"]) == \
        (4, 4, 0, 0)
    # The uidlist (Dovecot v3) matches.
    lines = (wdir / "dovecot-uidlist").read_text().splitlines()
    assert lines[0].startswith("3 V%d N6 G%s" % (info["uid_validity"], guid))
    assert [line.split()[0] for line in lines[1:]] == ["1", "2", "4", "5"]


def test_index_rebuild_after_index_loss(store):
    store.create("Work")
    for i in range(3):
        store.append("Work", message(str(i)))
    store.call("folder/expunge", {"user": "alice", "folder": "Work"})
    before = store.dump("Work")
    wdir = store.root() / ".Work"
    for name in os.listdir(wdir):
        if name.startswith("petrel.index"):
            os.unlink(wdir / name)
    # The uidlist keeps UIDs, UIDVALIDITY and GUID.
    after = store.dump("Work")
    assert after["uid_validity"] == before["uid_validity"]
    assert after["folder_guid"] == before["folder_guid"]
    assert [r["uid"] for r in after["records"]] == [1, 2, 3]
    assert after["next_uid"] == 4


def test_damaged_index_rebuilt_from_uidlist(store):
    store.create("Work")
    for i in range(3):
        store.append("Work", message(str(i)), flags=["\\Seen"] if i == 1 else [])
    before = store.dump("Work")
    (store.root() / ".Work" / "petrel.index").write_bytes(os.urandom(300))
    after = store.dump("Work")
    assert after["folder_guid"] == before["folder_guid"]
    assert after["uid_validity"] == before["uid_validity"]
    assert [(r["uid"], r["flags"], r["size"]) for r in after["records"]] == \
        [(r["uid"], r["flags"], r["size"]) for r in before["records"]]
    assert store.append("Work", message("next"))["uid"] == 4


def test_index_rebuild_reset_uids_501(store):
    err = store.error("index/rebuild", {"user": "alice", "folder": "INBOX", "reset_uids": True},
                      501)
    assert "reset_uids" in err
    store.error("index/rebuild", {"user": "alice", "folder": "INBOX", "reset_uids": "yes"}, 400)
    r = store.call("index/rebuild", {"user": "alice", "folder": "INBOX", "reset_uids": False})
    assert r["scanned"] == 0


def test_index_optimize(store):
    for i in range(3):
        store.append("INBOX", message(str(i)), flags=["\\Seen"])
    before = store.dump("INBOX")
    r = store.call("index/optimize", {"user": "alice", "folder": "INBOX"})
    assert set(r) == {"folder", "duration_ms"} and r["folder"] == "INBOX"
    assert store.dump("INBOX") == before
    # Again: nothing in the log, still fine.
    store.call("index/optimize", {"user": "alice", "folder": "INBOX"})
    assert store.dump("INBOX") == before
    store.append("INBOX", message("after"))
    assert [r["uid"] for r in store.dump("INBOX")["records"]] == [1, 2, 3, 4]


def test_index_cache_purge(store):
    store.append("INBOX", message())
    before = store.dump("INBOX")
    r = store.call("index/cache-purge", {"user": "alice", "folder": "INBOX"})
    assert set(r) == {"carried", "reclaimed_bytes", "duration_ms"}
    assert all(isinstance(v, int) and v >= 0 for v in r.values())
    assert store.dump("INBOX")["records"] == before["records"]


# ---------------------------------------------------------------- subscriptions

def subs(store, user="alice", **kw):
    return store.call("subscriptions/list", {"user": user, **kw})["subscriptions"]


def test_subscriptions_add_list_remove_file_format(store):
    assert subs(store) == []
    for f in ("INBOX", "Work/Projects", "Grüße", "Work"):
        assert store.call("subscriptions/add", {"user": "alice", "folder": f}) == \
            {"status": "ok"}
    # Adding twice is fine.
    store.call("subscriptions/add", {"user": "alice", "folder": "Work"})
    assert sorted(subs(store)) == sorted(["INBOX", "Work/Projects", "Grüße", "Work"])
    text = (store.root() / "subscriptions").read_bytes()
    # Dovecot v2: header, then one line per folder, levels joined by TAB,
    # each level in modified UTF-7.
    assert text.startswith(b"V\t2\n\n")
    lines = text[len(b"V\t2\n\n"):].decode("ascii").splitlines()
    assert sorted(lines) == sorted(["INBOX", "Work\tProjects", "Gr&APwA3w-e", "Work"])
    assert store.call("subscriptions/remove", {"user": "alice", "folder": "Work"}) == \
        {"status": "ok"}
    # Removing what is not there is fine too.
    store.call("subscriptions/remove", {"user": "alice", "folder": "Never"})
    assert sorted(subs(store)) == sorted(["INBOX", "Work/Projects", "Grüße"])
    lines = (store.root() / "subscriptions").read_text().splitlines()
    assert "Work" not in lines and "Work\tProjects" in lines


def test_subscriptions_inbox_any_case_stored_as_inbox(store):
    store.call("subscriptions/add", {"user": "alice", "folder": "inbox"})
    assert subs(store) == ["INBOX"]
    store.call("subscriptions/remove", {"user": "alice", "folder": "Inbox"})
    assert subs(store) == []


def test_subscriptions_shared_with_file_on_disk(store):
    # Written by IMAP (or by Dovecot before a migration): seen at once.
    store.root().mkdir(parents=True)
    (store.root() / "subscriptions").write_bytes(
        b"V\t2\n\nINBOX\nLists\tpetrel-dev\n&ANw-ber\n")
    assert sorted(subs(store)) == sorted(["INBOX", "Lists/petrel-dev", "Über"])
    store.call("subscriptions/add", {"user": "alice", "folder": "Archive"})
    lines = (store.root() / "subscriptions").read_bytes().split(b"\n")
    assert lines[:2] == [b"V\t2", b""]
    assert sorted(x for x in lines[2:] if x) == sorted(
        [b"INBOX", b"Lists\tpetrel-dev", b"&ANw-ber", b"Archive"])
    # A version-0 file (Maildir++ '.' separator) is read too.
    (store.root() / "subscriptions").write_text("INBOX\nOld.Style\n")
    assert sorted(subs(store)) == ["INBOX", "Old/Style"]


def test_subscriptions_validation(store):
    store.error("subscriptions/add", {"user": "alice"}, 400)
    store.error("subscriptions/add", {"user": "alice", "folder": ""}, 400)
    store.error("subscriptions/remove", {"user": "alice", "folder": ""}, 400)
    for bad in ("a/../b", "/lead", "trail/", "a\tb", "a\nb", "dot.ted"):
        store.error("subscriptions/add", {"user": "alice", "folder": bad}, 400)
    assert subs(store) == []


def test_subscriptions_public_namespace_own_file(store):
    store.call("subscriptions/add", {"user": "alice", "folder": "News", "namespace": "public"})
    assert subs(store, namespace="public") == ["News"]
    assert subs(store) == []
    assert (store.public_root() / "subscriptions").read_text() == "V\t2\n\nNews\n"


# ---------------------------------------------------------------- subscriptions migrate

@pytest.fixture
def shared_store(petreld, tmp_path):
    shared = {"name": "shared", "type": "shared", "prefix": "Shared/", "separator": "/",
              "location": f"maildir:{tmp_path}/shared/%u", "subscriptions": False}
    d = petreld(mail_section(tmp_path, [shared, public_ns(tmp_path)]))
    return Store(d, tmp_path)


def test_subscriptions_no_own_file_live_in_personal_file(shared_store):
    s = shared_store
    s.call("subscriptions/add", {"user": "alice", "folder": "bob/Projects", "namespace": "shared"})
    s.call("subscriptions/add", {"user": "alice", "folder": "Mine"})
    assert subs(s, namespace="shared") == ["bob/Projects"]
    assert subs(s) == ["Mine"]
    lines = (s.root() / "subscriptions").read_text().split("\n")
    assert lines[:2] == ["V\t2", ""]
    assert sorted(x for x in lines[2:] if x) == ["Mine", "Shared\tbob\tProjects"]
    assert not (s.tmp / "shared" / "alice" / "subscriptions").exists()


def test_subscriptions_migrate(shared_store):
    s = shared_store
    # Old per-namespace files: the namespace root form and the earlier
    # path form next to the personal file.
    ns_root = s.tmp / "shared" / "alice"
    ns_root.mkdir(parents=True)
    (ns_root / "subscriptions").write_text("V\t2\n\nbob\tInbox\ncarol\tNews\n")
    s.root().mkdir(parents=True)
    (s.root() / "subscriptions.shared").write_text("V\t2\n\ncarol\tNews\ndave\n")
    # The destination already has one of them.
    s.call("subscriptions/add", {"user": "alice", "folder": "dave", "namespace": "shared"})
    s.call("subscriptions/add", {"user": "alice", "folder": "INBOX"})

    dry = s.call("subscriptions/migrate", {"user": "alice", "namespace": "shared"})
    assert sorted(dry["sources"]) == sorted([str(ns_root / "subscriptions"),
                                             str(s.root() / "subscriptions.shared")])
    assert dry["folded"] == 2          # bob/Inbox, carol/News
    assert dry["already"] == 2         # carol/News twice, dave in the destination
    # A dry run writes nothing.
    assert (ns_root / "subscriptions").exists()
    assert (s.root() / "subscriptions.shared").exists()
    assert subs(s, namespace="shared") == ["dave"]

    done = s.call("subscriptions/migrate", {"user": "alice", "namespace": "shared",
                                            "apply": True})
    assert sorted(done["sources"]) == sorted(dry["sources"])
    assert done["folded"] == 2
    assert sorted(subs(s, namespace="shared")) == ["bob/Inbox", "carol/News", "dave"]
    assert subs(s) == ["INBOX"]
    assert not (ns_root / "subscriptions").exists()
    assert not (s.root() / "subscriptions.shared").exists()
    lines = (s.root() / "subscriptions").read_text().split("\n")
    assert lines[:2] == ["V\t2", ""]
    assert sorted(x for x in lines[2:] if x) == sorted(
        ["INBOX", "Shared\tbob\tInbox", "Shared\tcarol\tNews", "Shared\tdave"])

    again = s.call("subscriptions/migrate", {"user": "alice", "namespace": "shared",
                                             "apply": True})
    assert again["sources"] == [] and again["folded"] == 0 and again["already"] == 0


def test_subscriptions_migrate_dot_separator(petreld, tmp_path):
    # A namespace with '.' between levels: its rows in the personal file
    # still use TAB between levels (prefix included), and list finds them.
    shared = {"name": "shared", "type": "shared", "prefix": "Shared.", "separator": ".",
              "location": f"maildir:{tmp_path}/shared/%u", "subscriptions": False}
    s = Store(petreld(mail_section(tmp_path, [shared])), tmp_path)
    s.call("subscriptions/add", {"user": "alice", "folder": "bob.Work", "namespace": "shared"})
    ns_root = tmp_path / "shared" / "alice"
    ns_root.mkdir(parents=True)
    (ns_root / "subscriptions").write_text("V\t2\n\ncarol\tNews\nbob\tWork\n")
    r = s.call("subscriptions/migrate", {"user": "alice", "namespace": "shared", "apply": True})
    assert r["folded"] == 1 and r["already"] == 1
    assert sorted(subs(s, namespace="shared")) == ["bob.Work", "carol.News"]
    lines = (s.root() / "subscriptions").read_text().split("\n")
    assert sorted(x for x in lines[2:] if x) == ["Shared\tbob\tWork", "Shared\tcarol\tNews"]


def test_subscriptions_migrate_refused_where_nothing_to_migrate(shared_store):
    s = shared_store
    s.error("subscriptions/migrate", {"user": "alice"}, 400)
    s.error("subscriptions/migrate", {"user": "alice", "namespace": "public"}, 400)
    s.error("subscriptions/migrate", {"user": "alice", "namespace": "nope"}, 404)
    s.error("subscriptions/migrate", {"user": "alice", "namespace": "shared", "apply": "yes"}, 400)


def test_subscriptions_migration_keeps_sources_when_the_merge_fails(shared_store):
    """The old files go only after every row is in the user's file: when
    writing that file fails (here its lock cannot be taken: a directory
    stands in its place), both sources stay as they were, and a later
    migrate folds them in."""
    s = shared_store
    ns_root = s.tmp / "shared" / "alice"
    ns_root.mkdir(parents=True)
    old_a = "V\t2\n\nbob\tInbox\n"
    old_b = "V\t2\n\ncarol\tNews\n"
    (ns_root / "subscriptions").write_text(old_a)
    s.root().mkdir(parents=True)
    (s.root() / "subscriptions.shared").write_text(old_b)
    lock = s.root() / "subscriptions.lock"
    lock.mkdir()
    r = s.raw("subscriptions/migrate", {"user": "alice", "namespace": "shared", "apply": True})
    assert r.status >= 500, r
    assert (ns_root / "subscriptions").read_text() == old_a
    assert (s.root() / "subscriptions.shared").read_text() == old_b
    assert not (s.root() / "subscriptions").exists()
    lock.rmdir()
    done = s.call("subscriptions/migrate", {"user": "alice", "namespace": "shared",
                                            "apply": True})
    assert done["folded"] == 2
    assert sorted(subs(s, namespace="shared")) == ["bob/Inbox", "carol/News"]
    assert not (ns_root / "subscriptions").exists()
    assert not (s.root() / "subscriptions.shared").exists()


# ---------------------------------------------------------------- special use

def test_specialuse_list_get_set_delete(store):
    got = store.call("specialuse/list", {"user": "alice"})
    assert got == {"overrides": {}, "defaults": SPECIAL_USE_DEFAULTS}

    def get(folder):
        return store.call("specialuse/get", {"user": "alice", "folder": folder})

    assert get("Sent") == {"folder": "Sent", "attr": "\\Sent", "source": "default"}
    assert get("Nothing") == {"folder": "Nothing", "attr": "", "source": "none"}
    store.create("Sent")
    store.create("Old Mail")
    # An override wins over the default.
    assert store.call("specialuse/set", {"user": "alice", "folder": "Sent",
                                         "attr": "\\Archive"}) == {"status": "ok"}
    store.call("specialuse/set", {"user": "alice", "folder": "Old Mail", "attr": "\\Trash"})
    assert get("Sent") == {"folder": "Sent", "attr": "\\Archive", "source": "override"}
    assert get("Old Mail")["source"] == "override"
    got = store.call("specialuse/list", {"user": "alice"})
    assert got["overrides"] == {"Sent": "\\Archive", "Old Mail": "\\Trash"}
    assert got["defaults"] == SPECIAL_USE_DEFAULTS
    text = (store.root() / "petrel-special-use").read_text()
    assert sorted(text.splitlines()) == ["Old Mail\t\\Trash", "Sent\t\\Archive"]
    # Deleting the override brings the default back.
    assert store.call("specialuse/delete", {"user": "alice", "folder": "Sent"}) == \
        {"status": "ok"}
    assert get("Sent")["source"] == "default"
    store.call("specialuse/delete", {"user": "alice", "folder": "Old Mail"})
    assert get("Old Mail") == {"folder": "Old Mail", "attr": "", "source": "none"}
    # Deleting what is not there is fine.
    store.call("specialuse/delete", {"user": "alice", "folder": "Old Mail"})


def test_specialuse_errors(store):
    store.create("Box")
    store.error("specialuse/set", {"user": "alice", "folder": "Missing", "attr": "\\Junk"}, 404)
    store.error("specialuse/set", {"user": "alice", "folder": "Box", "attr": "\\Bogus"}, 400)
    store.error("specialuse/set", {"user": "alice", "folder": "Box", "attr": "Junk"}, 400)
    store.error("specialuse/set", {"user": "alice", "folder": "Box"}, 400)
    store.error("specialuse/set", {"user": "alice", "folder": "Box", "attr": ""}, 400)
    for path in ("specialuse/get", "specialuse/set", "specialuse/delete"):
        store.error(path, {"user": "alice", "attr": "\\Junk"}, 400)
        store.error(path, {"user": "alice", "folder": "", "attr": "\\Junk"}, 400)
        for bad in ("a/../b", "/Box", "a\tb", "a\nb"):
            store.error(path, {"user": "alice", "folder": bad, "attr": "\\Junk"}, 400)
    assert store.call("specialuse/list", {"user": "alice"})["overrides"] == {}


def test_specialuse_personal_namespace_only(store):
    store.create("Box", namespace="public")
    store.create("Box")
    for path in ("specialuse/get", "specialuse/set", "specialuse/delete"):
        store.error(path, {"user": "alice", "folder": "Box", "attr": "\\Junk",
                           "namespace": "public"}, 400)
    store.error("specialuse/list", {"user": "alice", "namespace": "public"}, 400)
    store.error("specialuse/get", {"user": "alice", "folder": "Box", "namespace": "shared"}, 404)
    assert store.call("specialuse/list", {"user": "alice"})["overrides"] == {}


# ---------------------------------------------------------------- user

def test_user_info(store):
    info = store.call("user/info", {"user": "alice"})
    assert info["username"] == "alice"
    assert info["home"] == f"{store.tmp}/mail/alice"
    assert "userdb" not in info and "userdb_status" not in info
    ns = {n["name"]: n for n in info["namespaces"]}
    assert ns["inbox"] == {"name": "inbox", "type": "personal", "prefix": "",
                           "home": f"{store.tmp}/mail/alice/Maildir",
                           "location": "maildir:%h/Maildir", "exists": False}
    assert ns["public"] == {"name": "public", "type": "public", "prefix": "Public/",
                            "home": f"{store.tmp}/public",
                            "location": f"maildir:{store.tmp}/public", "exists": False}
    store.create("Work")
    store.create("News", namespace="public")
    info = store.call("user/info", {"user": "alice"})
    assert all(n["exists"] for n in info["namespaces"])


def test_user_usage_totals(store):
    a, b, c, d = message("a"), message("bb", body="b" * 100), message("c" * 50), message("d")
    store.append("INBOX", a)
    store.create("Work")
    store.append("Work", b)
    store.append("Work", c)
    store.create("News", namespace="public")
    store.append("News", d, namespace="public")
    store.create("Empty")
    u = store.call("user/usage", {"user": "alice"})
    assert u["user"] == "alice"
    assert u["total_messages"] == 4
    assert u["total_size_bytes"] == len(a) + len(b) + len(c) + len(d)
    rows = {(f["namespace"], f["folder"]): f for f in u["folders"]}
    assert rows[("personal", "INBOX")] == {"namespace": "personal", "folder": "INBOX",
                                           "messages": 1, "size_bytes": len(a)}
    assert rows[("personal", "Work")]["messages"] == 2
    assert rows[("personal", "Work")]["size_bytes"] == len(b) + len(c)
    assert rows[("personal", "Empty")]["messages"] == 0
    assert rows[("public", "News")] == {"namespace": "public", "folder": "News",
                                        "messages": 1, "size_bytes": len(d)}
    assert len(rows) == 4


def test_user_iterate_503_without_auth(store):
    err = store.error("user/iterate", {}, 503)
    assert "auth_master_addr" in err


def test_user_usage_other_users_separate(store):
    store.append("INBOX", message())
    u = store.call("user/usage", {"user": "bob"})
    assert u["total_messages"] == 0
    assert [f["folder"] for f in u["folders"] if f["namespace"] == "personal"] == ["INBOX"]


# ---------------------------------------------------------------- mail/append

def test_append_uids_increment_and_content(store):
    data = [message(str(i)).encode() for i in range(3)]
    assert [store.append("INBOX", m)["uid"] for m in data] == [1, 2, 3]
    recs = store.dump("INBOX")["records"]
    for rec, m in zip(recs, data):
        assert (store.root() / "cur" / rec["filename"]).read_bytes() == m
    # Another folder counts on its own.
    store.create("Work")
    assert store.append("Work", data[0])["uid"] == 1
    # Binary content (8-bit, NUL) survives.
    blob = bytes(range(256)) * 4
    uid = store.append("INBOX", blob)["uid"]
    rec = [r for r in store.dump("INBOX")["records"] if r["uid"] == uid][0]
    assert (store.root() / "cur" / rec["filename"]).read_bytes() == blob


def test_append_flags_keywords(store):
    uid = store.append("INBOX", message(), flags=["\\seen", "$Label1", "\\Answered"])["uid"]
    rec = store.dump("INBOX")["records"][0]
    assert rec["uid"] == uid
    assert rec["flags"] == ["\\Answered", "\\Seen", "$Label1"]
    assert rec["filename"].endswith(":2,RSa")
    assert store.info("INBOX")["unseen"] == 0
    store.error("mail/append", {"user": "alice", "folder": "INBOX",
                                "message": base64.b64encode(b"x\n").decode(),
                                "flags": ["\\Recent"]}, 400)
    store.error("mail/append", {"user": "alice", "folder": "INBOX",
                                "message": base64.b64encode(b"x\n").decode(),
                                "flags": ["bad keyword"]}, 400)
    store.error("mail/append", {"user": "alice", "folder": "INBOX",
                                "message": base64.b64encode(b"x\n").decode(),
                                "flags": [1]}, 400)
    store.error("mail/append", {"user": "alice", "folder": "INBOX",
                                "message": base64.b64encode(b"x\n").decode(),
                                "flags": "\\Seen"}, 400)
    assert len(store.dump("INBOX")["records"]) == 1


def test_append_internal_date_sets_mtime(store):
    store.append("INBOX", message(), internal_date=1000000000)
    rec = store.dump("INBOX")["records"][0]
    st = os.stat(store.root() / "cur" / rec["filename"])
    assert int(st.st_mtime) == 1000000000
    # Without it: now.
    store.append("INBOX", message("now"))
    rec = store.dump("INBOX")["records"][1]
    assert abs(os.stat(store.root() / "cur" / rec["filename"]).st_mtime - time.time()) < 120
    store.error("mail/append", {"user": "alice", "folder": "INBOX",
                                "message": base64.b64encode(b"x\n").decode(),
                                "internal_date": -5}, 400)
    store.error("mail/append", {"user": "alice", "folder": "INBOX",
                                "message": base64.b64encode(b"x\n").decode(),
                                "internal_date": "yesterday"}, 400)
    for too_late in (253402300800, 2 ** 62, 2 ** 63 - 1):
        store.error("mail/append", {"user": "alice", "folder": "INBOX",
                                    "message": base64.b64encode(b"x\n").decode(),
                                    "internal_date": too_late}, 400)
    # The last second of year 9999 is fine (the file system may clamp it).
    store.append("INBOX", message("late"), internal_date=253402300799)
    assert len(store.dump("INBOX")["records"]) == 3


def test_append_bad_requests(store):
    for msg in ("!!!not base64!!!", "QUJD=x", "A"):
        err = store.error("mail/append", {"user": "alice", "folder": "INBOX", "message": msg},
                          400)
        assert "base64" in err, err
    store.error("mail/append", {"user": "alice", "folder": "INBOX", "message": ""}, 400)
    store.error("mail/append", {"user": "alice", "folder": "INBOX"}, 400)
    store.error("mail/append", {"user": "alice", "folder": "INBOX", "message": 5}, 400)
    store.error("mail/append", {"user": "alice", "folder": "Missing",
                                "message": base64.b64encode(b"x\n").decode()}, 404)
    assert store.dump("INBOX")["records"] == []
    assert os.listdir(store.root() / "tmp") == []


def test_append_large_message_and_body_limit_elsewhere(store):
    big = (b"Subject: big\n\n" + (b"0123456789abcdef" * 64 + b"\n") * 5000)
    assert len(big) > 5 * 1000 * 1000
    uid = store.append("INBOX", big)["uid"]
    rec = store.dump("INBOX")["records"][0]
    assert rec["uid"] == uid and rec["size"] == len(big)
    assert (store.root() / "cur" / rec["filename"]).read_bytes() == big
    # Everywhere else the 1 MiB request limit applies.
    padding = "x" * (1024 * 1024 + 100)
    r = store.raw("folder/list", {"user": "alice", "pad": padding})
    assert r.status == 413, r
    r = store.raw("folder/create", {"user": "alice", "folder": "Pad", "pad": padding})
    assert r.status == 413, r
    assert store.folders() == ["INBOX"]


def test_append_public_namespace(store):
    store.create("News", namespace="public")
    assert store.append("News", message(), namespace="public")["uid"] == 1
    assert len(cur_files(store.public_root() / ".News")) == 1
    store.error("mail/append", {"user": "alice", "folder": "INBOX", "namespace": "public",
                                "message": base64.b64encode(b"x\n").decode()}, 404)


# ---------------------------------------------------------------- addressing

def test_namespace_slug_from_prefix(petreld, tmp_path):
    # Type shared, prefix Public/: addressed as `public`, never as `shared`.
    ns = public_ns(tmp_path, type="shared")
    s = Store(petreld(mail_section(tmp_path, [ns])), tmp_path)
    s.create("Team", namespace="public")
    assert s.folders(namespace="public") == ["Team"]
    assert (tmp_path / "public" / ".Team" / "cur").is_dir()
    err = s.error("folder/list", {"user": "alice", "namespace": "shared"}, 404)
    assert err == "namespace not configured: shared"
    info = s.call("user/info", {"user": "alice"})
    assert [(n["type"], n["prefix"]) for n in info["namespaces"]] == \
        [("personal", ""), ("shared", "Public/")]


ENDPOINTS_WITH_NAMESPACE = [
    ("folder/list", {}), ("folder/info", {"folder": "X"}), ("folder/guid", {"folder": "X"}),
    ("folder/stats", {"folder": "X"}), ("folder/create", {"folder": "X"}),
    ("folder/delete", {"folder": "X"}),
    ("folder/rename", {"old_folder": "X", "new_folder": "Y"}),
    ("folder/expunge", {"folder": "X"}), ("index/dump", {"folder": "X"}),
    ("index/rebuild", {"folder": "X"}), ("index/optimize", {"folder": "X"}),
    ("index/cache-purge", {"folder": "X"}), ("subscriptions/list", {}),
    ("subscriptions/add", {"folder": "X"}), ("subscriptions/remove", {"folder": "X"}),
    ("subscriptions/migrate", {}),
    ("mail/append", {"folder": "X", "message": "eA=="}),
]


@pytest.mark.parametrize("path,extra", ENDPOINTS_WITH_NAMESPACE)
def test_unknown_namespace_404(store, path, extra):
    for slug in ("shared", "Public", "nope"):
        err = store.error(path, {"user": "alice", "namespace": slug, **extra}, 404)
        assert err == f"namespace not configured: {slug}", (path, err)
    assert store.folders() == ["INBOX"]


def test_public_namespace_addressed_as_public(store):
    store.create("Team", namespace="public")
    store.create("Team/Sub", namespace="public")
    assert store.folders(namespace="public") == ["Team", "Team/Sub"]
    assert store.folders() == ["INBOX"]
    assert (store.public_root() / ".Team.Sub").is_dir()
    # No INBOX in a public namespace.
    store.error("folder/info", {"user": "alice", "folder": "INBOX", "namespace": "public"}, 404)
    # "" and absent mean personal.
    assert store.folders(namespace="") == ["INBOX"]


FOLDER_REQUIRED = ["folder/info", "folder/guid", "folder/stats", "folder/create",
                   "folder/delete", "folder/expunge", "index/dump", "index/rebuild",
                   "index/optimize", "index/cache-purge", "subscriptions/add",
                   "subscriptions/remove", "specialuse/get", "specialuse/set",
                   "specialuse/delete", "mail/append"]


@pytest.mark.parametrize("path", FOLDER_REQUIRED)
def test_folderless_request_400(store, path):
    extra = {"attr": "\\Junk", "message": "eA=="}
    for body in ({"user": "alice", **extra}, {"user": "alice", "folder": "", **extra},
                 {"user": "alice", "folder": "", "root": False, **extra}):
        err = store.error(path, body, 400)
        assert err == "folder is required", (path, body, err)


BAD_NAMES = ["..", "a/../b", "../etc", "a/./b", "/lead", "trail/", "a//b", "dot.ted",
             "ctl\x01x", "tab\tx", "nl\nx", "del\x7f", "c1\u0085x", "back\\slash", "x" * 1100]


@pytest.mark.parametrize("path", ["folder/create", "folder/info", "folder/delete",
                                  "folder/stats", "folder/expunge", "index/dump",
                                  "index/rebuild", "mail/append"])
def test_invalid_folder_names_400(store, path):
    for name in BAD_NAMES:
        store.error(path, {"user": "alice", "folder": name, "message": "eA=="}, 400)
    assert store.folders() == ["INBOX"]
    # Nothing was created anywhere for them.
    root = store.root()
    assert not root.exists() or not [n for n in os.listdir(root) if n.startswith(".")]
    assert not (store.tmp / "mail").exists() or os.listdir(store.tmp / "mail") == ["alice"]


def test_folder_name_length_limits(store):
    # Maildir++ keeps every level in one directory name (".L1.L2"): it must
    # fit the file system's 255 bytes, or the name is refused as invalid.
    store.create("x" * 254)
    assert store.folders() == ["INBOX", "x" * 254]
    for name in ("y" * 255, "y" * 300, "/".join(["z" * 100] * 3), "ü" * 100):
        err = store.error("folder/create", {"user": "alice", "folder": name}, 400)
        assert "too long" in err, err
        store.error("folder/info", {"user": "alice", "folder": name}, 400)
        store.error("folder/rename", {"user": "alice", "old_folder": "x" * 254,
                                      "new_folder": name}, 400)
    deep = "/".join(["d"] * 16)
    store.create(deep)
    store.error("folder/create", {"user": "alice", "folder": deep + "/d"}, 400)
    assert store.folders() == ["INBOX", deep, "x" * 254]


def test_invalid_rename_names_400(store):
    store.create("A")
    for name in BAD_NAMES:
        store.error("folder/rename", {"user": "alice", "old_folder": "A", "new_folder": name}, 400)
        store.error("folder/rename", {"user": "alice", "old_folder": name, "new_folder": "B"}, 400)
    assert store.folders() == ["INBOX", "A"]


@pytest.mark.parametrize("user", ["a/b", "../x", ".hidden", ".", "..", "", "x\x01", "a\\b",
                                  "u" * 256])
def test_invalid_user_names_400(store, user):
    for path, extra in (("folder/list", {}), ("folder/create", {"folder": "X"}),
                        ("user/info", {}), ("user/usage", {}), ("subscriptions/list", {}),
                        ("specialuse/list", {}), ("mail/append", {"folder": "INBOX",
                                                                   "message": "eA=="})):
        store.error(path, {"user": user, **extra}, 400)
    assert not (store.tmp / "mail").exists() or os.listdir(store.tmp / "mail") == []


def test_home_template_domain_cannot_escape_the_mail_root(petreld, tmp_path):
    # with home /root/mail/%d/%n, user "escape@.." once expanded to
    # /root/mail/../escape and got a maildir outside the mail root
    root = tmp_path / "root"
    (root / "mail").mkdir(parents=True)
    d = petreld({"mail": {"home": f"{root}/mail/%d/%n", "fsync": "always",
                          "namespaces": [personal_ns()]}})
    store = Store(d, tmp_path)
    for user in ("escape@..", "escape@.", "escape@", "escape@a/../..", "escape@a..b",
                 "@example.com"):
        for path, extra in (("folder/create", {"folder": "X"}), ("folder/list", {}),
                            ("mail/append", {"folder": "INBOX", "message": "eA=="})):
            err = store.error(path, {"user": user, **extra}, 400)
            assert any(w in err for w in ("domain", "local part", "must not contain")), (user, err)
    assert sorted(os.listdir(root)) == ["mail"], os.listdir(root)
    assert os.listdir(root / "mail") == []
    # a real domain still gets its own directory under the root
    store.create("Work", user="carol@example.com")
    assert (root / "mail" / "example.com" / "carol" / "Maildir" / ".Work").is_dir()
    assert sorted(os.listdir(root)) == ["mail"]


def test_user_required_400(store):
    for path in ("folder/list", "user/info", "user/usage", "specialuse/list"):
        store.error(path, {}, 400)
        store.error(path, {"user": 5}, 400)
    store.error("folder/list", {"user": "alice", "namespace": 3}, 400)
    store.error("folder/info", {"user": "alice", "folder": ["x"]}, 400)


def test_malformed_json_400(store):
    for body in (b"{", b"[]", b"not json", b'"str"', b""):
        r = http_request(store.d.backend, "POST", "/api/backend/folder/list", body=body,
                         headers={"Content-Type": "application/json"})
        assert r.status == 400, (body, r)


def test_user_name_with_at_sign(store):
    store.create("Work", user="carol@example.com")
    assert store.folders(user="carol@example.com") == ["INBOX", "Work"]
    assert (store.tmp / "mail" / "carol@example.com" / "Maildir" / ".Work").is_dir()


# ---------------------------------------------------------------- non-ASCII

def test_non_ascii_folder_names_round_trip(store):
    store.create("Grüße")
    store.create("Grüße/日本語")
    store.create("Emoji 😀 & more")
    names = store.folders()
    assert names == ["INBOX", "Emoji 😀 & more", "Grüße", "Grüße/日本語"]
    on_disk = sorted(n for n in os.listdir(store.root()) if n.startswith("."))
    assert ".Gr&APwA3w-e" in on_disk
    assert ".Gr&APwA3w-e.&ZeVnLIqe-" in on_disk
    assert ".Emoji &2D3eAA- &- more" in on_disk
    assert store.info("Grüße")["name"] == "Grüße"
    store.append("Grüße/日本語", message("jp"))
    assert store.info("Grüße/日本語")["messages"] == 1
    store.call("folder/rename", {"user": "alice", "old_folder": "Grüße",
                                 "new_folder": "Größe"})
    assert store.folders() == ["INBOX", "Emoji 😀 & more", "Größe", "Größe/日本語"]
    assert store.info("Größe/日本語")["messages"] == 1
    store.call("folder/delete", {"user": "alice", "folder": "Größe/日本語"})
    assert store.folders() == ["INBOX", "Emoji 😀 & more", "Größe"]


def test_foreign_directories_are_not_folders(store):
    store.create("Real")
    root = store.root()
    (root / ".bad&mutf7").mkdir()          # not valid modified UTF-7
    (root / ".#deleted-0000").mkdir()      # interrupted delete
    (root / ".Gr&AFw-x").mkdir()           # shifted printable ASCII: not canonical
    (root / ".plainfile").write_text("x")
    (root / "..double").mkdir()
    assert store.folders() == ["INBOX", "Real"]


# ---------------------------------------------------------------- interop: Python's reader

def test_python_maildir_reads_petrel_maildir(store):
    m1 = message("one").encode()
    m2 = message("two", body="second body\n").encode()
    store.append("INBOX", m1, flags=["\\Seen", "\\Flagged"])
    store.append("INBOX", m2)
    store.create("Work")
    store.create("Work/Projects")
    m3 = message("three").encode()
    store.append("Work/Projects", m3, flags=["\\Answered"])

    md = mailbox.Maildir(str(store.root()), factory=None, create=False)
    msgs = sorted(md.values(), key=lambda m: m["Subject"])
    assert [m["Subject"] for m in msgs] == ["one", "two"]
    assert msgs[0].get_flags() == "FS" and msgs[1].get_flags() == ""
    assert all(m.get_subdir() == "cur" for m in msgs)
    assert msgs[0].as_bytes().replace(b"\r\n", b"\n").endswith(b"body line\n")
    assert sorted(md.list_folders()) == ["Work", "Work.Projects"]
    sub = md.get_folder("Work.Projects")
    (m,) = sub.values()
    assert m["Subject"] == "three" and m.get_flags() == "R"
    key = sub.keys()[0]
    with sub.get_file(key) as f:
        assert f.read() == m3


def test_petrel_reads_python_maildir(store):
    # Python writes a message into new/ and sets a flag on another in cur/:
    # Petrel's next look picks both up (sync on access).
    store.append("INBOX", message("existing"))
    md = mailbox.Maildir(str(store.root()), factory=None, create=False)
    msg = mailbox.MaildirMessage(message("from python"))
    md.add(msg)
    key = [k for k, v in md.items() if v["Subject"] == "existing"][0]
    old = md[key]
    old.set_flags("ST")
    md[key] = old
    recs = store.dump("INBOX")["records"]
    by_uid = {r["uid"]: r for r in recs}
    assert sorted(by_uid) == [1, 2]
    # md[key] = ... replaces the file under the same base name: same UID,
    # the flags of the new file name.
    assert by_uid[1]["flags"] == ["\\Deleted", "\\Seen"]
    assert by_uid[1]["filename"].startswith(key + ":2,")
    assert by_uid[2]["flags"] == []
    assert by_uid[2]["filename"].startswith(md.keys()[0] if md.keys()[0] != key
                                            else md.keys()[1])
    # The python-written folder is usable through the API.
    md.add_folder("FromPython")
    assert "FromPython" in store.folders()
    assert store.append("FromPython", message())["uid"] == 1


def test_personal_namespace_with_dot_separator(petreld, tmp_path):
    cfg = mail_section(tmp_path)
    cfg["mail"]["namespaces"] = [personal_ns(separator=".")]
    s = Store(petreld(cfg), tmp_path)
    s.create("Work.Projects", special_use="\\Archive")
    s.create("Work")
    assert s.folders() == ["INBOX", "Work", "Work.Projects"]
    assert (s.root() / ".Work.Projects" / "cur").is_dir()
    s.error("folder/create", {"user": "alice", "folder": "a/b"}, 400)
    s.call("subscriptions/add", {"user": "alice", "folder": "Work.Projects"})
    assert subs(s) == ["Work.Projects"]
    assert (s.root() / "subscriptions").read_text() == "V\t2\n\nWork\tProjects\n"
    s.call("folder/rename", {"user": "alice", "old_folder": "Work", "new_folder": "Job"})
    assert s.folders() == ["INBOX", "Job", "Job.Projects"]
    assert s.call("specialuse/list", {"user": "alice"})["overrides"] == \
        {"Job.Projects": "\\Archive"}
    s.error("folder/rename", {"user": "alice", "old_folder": "Job", "new_folder": "Job.In"},
            400)


def test_two_processes_append_to_one_folder(petreld, tmp_path):
    # Two petreld processes over the same mail tree (as IMAP and the API
    # are): the folder lock keeps UIDs unique and nothing is lost.
    cfg = mail_section(tmp_path)
    a = Store(petreld(cfg), tmp_path)
    b = Store(petreld(cfg), tmp_path)
    a.create("Shared")
    uids = []
    errors = []

    def worker(s, n, tag):
        try:
            for i in range(n):
                uids.append(s.append("Shared", message(f"{tag}-{i}"))["uid"])
                if i % 5 == 0:
                    s.dump("Shared")
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s, 12, f"{name}{k}"))
               for k in range(3) for name, s in (("a", a), ("b", b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sorted(uids) == list(range(1, 73))
    for s in (a, b):
        d = s.dump("Shared")
        assert [r["uid"] for r in d["records"]] == list(range(1, 73))
        assert d["next_uid"] == 73
    lines = (a.root() / ".Shared" / "dovecot-uidlist").read_text().splitlines()
    assert [int(line.split()[0]) for line in lines[1:]] == list(range(1, 73))
    assert len(cur_files(a.root() / ".Shared")) == 72
    # A rebuild agrees with what was written.
    r = b.call("index/rebuild", {"user": "alice", "folder": "Shared"})
    assert (r["scanned"], r["uids_preserved"], r["uids_assigned"], r["orphans_dropped"]) == \
        (72, 72, 0, 0)


def test_two_processes_append_expunge_rebuild(petreld, tmp_path):
    cfg = mail_section(tmp_path)
    a = Store(petreld(cfg), tmp_path)
    b = Store(petreld(cfg), tmp_path)
    stop = threading.Event()
    errors = []
    got = []

    def appender():
        try:
            for i in range(40):
                got.append((a.append("INBOX", message(str(i)),
                                     flags=["\\Deleted"] if i % 2 == 0 else [])["uid"], i))
        except Exception as e:  # noqa: BLE001
            errors.append(e)
        finally:
            stop.set()

    def maintainer():
        try:
            while not stop.is_set():
                b.call("folder/expunge", {"user": "alice", "folder": "INBOX"})
                b.call("index/rebuild", {"user": "alice", "folder": "INBOX"})
                b.dump("INBOX")
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=appender), threading.Thread(target=maintainer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sorted(u for u, _ in got) == list(range(1, 41))
    b.call("folder/expunge", {"user": "alice", "folder": "INBOX"})
    kept = sorted(u for u, i in got if i % 2 == 1)
    for s in (a, b):
        d = s.dump("INBOX")
        assert [r["uid"] for r in d["records"]] == kept
        assert d["next_uid"] == 41
        assert all(r["flags"] == [] for r in d["records"])
    assert len(cur_files(a.root())) == 20


def test_storage_endpoints_need_token_and_allowed_net(petreld, tmp_path):
    d = petreld(mail_section(tmp_path), env={"BACKEND_API_TOKEN": "tok"})
    paths = ["folder/list", "folder/create", "index/dump", "subscriptions/add",
             "specialuse/set", "user/info", "user/usage", "mail/append"]
    body = {"user": "alice", "folder": "X", "attr": "\\Junk", "message": "eA=="}
    for p in paths:
        assert d.post("backend", "/api/backend/" + p, body=body).status == 401, p
        assert d.post("backend", "/api/backend/" + p, body=body, token="bad").status == 401, p
    r = d.post("backend", "/api/backend/folder/list", body={"user": "alice"}, token="tok")
    assert r.status == 200 and r.json() == {"folders": ["INBOX"]}
    assert not (tmp_path / "mail" / "alice" / "Maildir" / ".X").exists()
    d2 = petreld(merge_allowed(mail_section(tmp_path), ["10.0.0.0/8"]),
                 env={"BACKEND_API_TOKEN": "tok"})
    for p in paths:
        assert d2.post("backend", "/api/backend/" + p, body=body, token="tok").status == 403, p


def merge_allowed(cfg, nets):
    cfg = dict(cfg)
    cfg["backend_api"] = {"allowed_nets": nets}
    return cfg
