"""petrelctl backend folder|index|subscriptions|specialuse|user|mail against
a real petreld with a mail store: readable and --json output, exit codes
(0 ok, 1 the server said no, 2 usage, 3 cannot connect), and the bulk import
of an mbox file or a maildir directory (`mail import`), checked byte for byte
against the files Petrel writes."""

import json
import os
from pathlib import Path

import pytest

from conftest import free_port, run_petrelctl

TOKEN = "storage-ctl-token"


def mail_section(tmp_path):
    return {"mail": {
        "home": f"{tmp_path}/mail/%u",
        "special_use": {"Drafts": "\\Drafts", "Sent": "\\Sent"},
        "namespaces": [
            {"name": "inbox", "type": "personal", "prefix": "", "separator": "/",
             "location": "maildir:%h/Maildir", "subscriptions": True},
            {"name": "shared", "type": "shared", "prefix": "Shared/", "separator": "/",
             "location": f"maildir:{tmp_path}/shared/%u", "subscriptions": False},
        ],
    }}


class Ctl:
    def __init__(self, daemon, tmp_path):
        self.d = daemon
        self.tmp = Path(tmp_path)

    def run(self, *args, json_out=False, token=TOKEN):
        pre = ["--backend-url", f"http://{self.d.backend}"]
        if token:
            pre += ["--backend-token", token]
        if json_out:
            pre.append("--json")
        return run_petrelctl([*pre, "backend", *args], timeout=120)

    def ok(self, *args):
        p = self.run(*args)
        assert p.returncode == 0, (args, p.stdout, p.stderr)
        assert p.stderr == "", p.stderr
        return p.stdout

    def js(self, *args):
        p = self.run(*args, json_out=True)
        assert p.returncode == 0, (args, p.stdout, p.stderr)
        return json.loads(p.stdout)

    def refused(self, *args, status=None):
        p = self.run(*args)
        assert p.returncode == 1, (args, p.returncode, p.stdout, p.stderr)
        assert p.stdout == ""
        if status is not None:
            assert f"{status}: " in p.stderr, p.stderr
        return p.stderr

    def usage(self, *args):
        p = self.run(*args)
        assert p.returncode == 2, (args, p.returncode, p.stdout, p.stderr)
        assert "usage" in p.stderr or "unknown option" in p.stderr, p.stderr
        return p.stderr

    def root(self, user="alice"):
        return self.tmp / "mail" / user / "Maildir"


@pytest.fixture
def ctl(petreld, tmp_path):
    d = petreld(mail_section(tmp_path), env={"BACKEND_API_TOKEN": TOKEN})
    return Ctl(d, tmp_path)


# ---------------------------------------------------------------- folder

def test_folder_commands_readable(ctl):
    assert ctl.ok("folder", "list", "alice") == "folders:\n  - INBOX\n"
    assert ctl.ok("folder", "create", "alice", "Work") == "status: ok\n"
    assert ctl.ok("folder", "create", "alice", "Work/Deep", "--special-use", "\\Archive") == \
        "status: ok\n"
    assert ctl.ok("folder", "list", "alice") == \
        "folders:\n  - INBOX\n  - Work\n  - Work/Deep\n"
    out = ctl.ok("folder", "info", "alice", "Work")
    lines = out.splitlines()
    assert lines[0] == "name: Work"
    keys = [line.split(":")[0] for line in lines]
    assert keys == ["name", "guid", "uid_validity", "next_uid", "messages", "unseen",
                    "highest_modseq"]
    guid = ctl.js("folder", "guid", "alice", "Work")["guid"]
    assert f"guid: {guid}\n" in out
    assert ctl.ok("folder", "guid", "alice", "Work") == f"folder: Work\nguid: {guid}\n"
    stats = ctl.ok("folder", "stats", "alice", "Work")
    assert "size_bytes: 0\n" in stats and "on_disk_count: 0\n" in stats
    assert ctl.ok("folder", "rename", "alice", "Work", "Job") == "status: ok\n"
    assert ctl.js("folder", "list", "alice") == {"folders": ["INBOX", "Job", "Job/Deep"]}
    assert ctl.js("folder", "guid", "alice", "Job")["guid"] == guid
    assert ctl.ok("folder", "delete", "alice", "Job/Deep") == "status: ok\n"
    assert ctl.js("folder", "list", "alice") == {"folders": ["INBOX", "Job"]}


def test_folder_commands_json(ctl):
    assert ctl.js("folder", "list", "alice") == {"folders": ["INBOX"]}
    assert ctl.js("folder", "create", "alice", "Work") == {"status": "ok"}
    info = ctl.js("folder", "info", "alice", "Work")
    assert info["name"] == "Work" and info["messages"] == 0 and info["next_uid"] == 1
    st = ctl.js("folder", "stats", "alice", "Work")
    assert st["size_bytes"] == 0 and st["on_disk_count"] == 0
    assert ctl.js("folder", "create", "alice", "Team", "--namespace", "shared") == {"status": "ok"}
    assert ctl.js("folder", "list", "alice", "--namespace", "shared") == {"folders": ["Team"]}
    assert (ctl.tmp / "shared" / "alice" / ".Team").is_dir()


def test_folder_errors_exit_1(ctl):
    err = ctl.refused("folder", "info", "alice", "Nope", status=404)
    assert "Nope" in err
    ctl.ok("folder", "create", "alice", "Work")
    ctl.refused("folder", "create", "alice", "Work", status=409)
    ctl.refused("folder", "create", "alice", "X", "--special-use", "\\Bogus", status=400)
    ctl.refused("folder", "rename", "alice", "INBOX", "Other", status=400)
    ctl.refused("folder", "rename", "alice", "Nope", "Other", status=404)
    ctl.ok("folder", "create", "alice", "Other")
    ctl.refused("folder", "rename", "alice", "Work", "Other", status=409)
    ctl.refused("folder", "delete", "alice", "Nope", status=404)
    ctl.refused("folder", "info", "alice", "a/../b", status=400)
    ctl.refused("folder", "list", "../evil", status=400)
    err = ctl.refused("folder", "list", "alice", "--namespace", "public", status=404)
    assert "namespace not configured: public" in err
    err = ctl.refused("folder", "info", "alice", "", status=400)
    assert "folder is required" in err


def test_folder_errors_json_still_on_stderr(ctl):
    p = ctl.run("folder", "info", "alice", "Nope", json_out=True)
    assert p.returncode == 1
    assert "404" in p.stderr


def test_token_required(ctl):
    p = ctl.run("folder", "list", "alice", token=None)
    assert p.returncode == 1 and "401" in p.stderr


def test_cannot_connect_exit_3():
    p = run_petrelctl(["--backend-url", f"http://127.0.0.1:{free_port()}", "backend", "folder",
                       "list", "alice"])
    assert p.returncode == 3, (p.stdout, p.stderr)
    assert "cannot connect" in p.stderr


@pytest.mark.parametrize("args", [
    ["folder"],
    ["folder", "nosuch"],
    ["folder", "list"],
    ["folder", "list", "alice", "extra"],
    ["folder", "info", "alice"],
    ["folder", "rename", "alice", "Old"],
    ["folder", "list", "alice", "--bogus"],
    ["folder", "expunge", "alice", "INBOX", "--uid", "0"],
    ["folder", "expunge", "alice", "INBOX", "--uid", "abc"],
    ["folder", "expunge", "alice", "INBOX", "--uid", "4294967296"],
    ["index", "dump", "alice", "INBOX", "--limit", "0"],
    ["index", "dump", "alice", "INBOX", "--limit", "x"],
    ["index"],
    ["subscriptions", "add", "alice"],
    ["specialuse", "set", "alice", "Box"],
    ["user", "info"],
    ["user", "iterate", "extra"],
    ["mail"],
    ["mail", "append", "alice", "INBOX"],
    ["mail", "import", "alice", "INBOX"],
    ["mail", "nosuch", "alice", "INBOX", "x"],
    ["mail", "append", "alice", "INBOX", "-", "--date", "-3"],
])
def test_usage_errors_exit_2(ctl, args):
    ctl.usage(*args)
    # Nothing was done.
    assert not (ctl.tmp / "mail").exists()


# ---------------------------------------------------------------- mail append, expunge, index

def test_mail_append_and_expunge(ctl, tmp_path):
    src = tmp_path / "one.eml"
    src.write_bytes(b"Subject: one\n\nbody\n")
    out = ctl.ok("mail", "append", "alice", "INBOX", str(src), "--flag", "\\Deleted",
                 "--date", "1200000000")
    assert out == "uid: 1\n"
    assert ctl.js("mail", "append", "alice", "INBOX", str(src), "--flag", "\\Seen",
                  "--flag", "work") == {"uid": 2}
    assert ctl.js("mail", "append", "alice", "INBOX", str(src), "--flag", "\\Deleted") == \
        {"uid": 3}
    d = ctl.js("index", "dump", "alice", "INBOX")
    assert [r["flags"] for r in d["records"]] == [["\\Deleted"], ["\\Seen", "work"],
                                                  ["\\Deleted"]]
    f1 = ctl.root() / "cur" / d["records"][0]["filename"]
    assert f1.read_bytes() == src.read_bytes()
    assert int(os.stat(f1).st_mtime) == 1200000000
    out = ctl.ok("folder", "expunge", "alice", "INBOX", "--uid", "3", "--uid", "2")
    assert out == "status: ok\nexpunged:\n  - 3\ncount: 1\n"
    assert ctl.js("folder", "expunge", "alice", "INBOX") == \
        {"status": "ok", "expunged": [1], "count": 1}
    assert [r["uid"] for r in ctl.js("index", "dump", "alice", "INBOX")["records"]] == [2]
    ctl.refused("mail", "append", "alice", "Nope", str(src), status=404)
    ctl.refused("mail", "append", "alice", "INBOX", str(src), "--flag", "\\Bogus", status=400)
    p = ctl.run("mail", "append", "alice", "INBOX", str(tmp_path / "missing.eml"))
    assert p.returncode != 0 and "missing.eml" in p.stderr


def test_index_commands(ctl, tmp_path):
    src = tmp_path / "m.eml"
    src.write_bytes(b"Subject: m\n\nbody\n")
    for _ in range(3):
        ctl.ok("mail", "append", "alice", "INBOX", str(src))
    d = ctl.js("index", "dump", "alice", "INBOX", "--limit", "2")
    assert d["truncated"] is True and [r["uid"] for r in d["records"]] == [1, 2]
    out = ctl.ok("index", "dump", "alice", "INBOX", "--limit", "1")
    assert "truncated: true\n" in out and "records:\n  -\n    uid: 1\n" in out
    assert "    flags: (none)\n" in out
    r = ctl.js("index", "rebuild", "alice", "INBOX")
    assert (r["scanned"], r["uids_preserved"], r["uids_assigned"], r["orphans_dropped"]) == \
        (3, 3, 0, 0)
    out = ctl.ok("index", "rebuild", "alice", "INBOX")
    assert "uids_preserved: 3\n" in out
    err = ctl.refused("index", "rebuild", "alice", "INBOX", "--reset-uids", status=501)
    assert "reset_uids" in err
    out = ctl.ok("index", "optimize", "alice", "INBOX")
    assert out.startswith("folder: INBOX\nduration_ms: ")
    r = ctl.js("index", "cache-purge", "alice", "INBOX")
    assert set(r) == {"carried", "reclaimed_bytes", "duration_ms"}
    ctl.refused("index", "dump", "alice", "Nope", status=404)


# ---------------------------------------------------------------- subscriptions

def test_subscriptions_commands(ctl):
    assert ctl.ok("subscriptions", "list", "alice") == "subscriptions: (none)\n"
    assert ctl.ok("subscriptions", "add", "alice", "Work") == "status: ok\n"
    ctl.ok("subscriptions", "add", "alice", "INBOX")
    ctl.ok("subscriptions", "add", "alice", "bob/Inbox", "--namespace", "shared")
    assert ctl.ok("subscriptions", "list", "alice") == "subscriptions:\n  - INBOX\n  - Work\n"
    assert ctl.js("subscriptions", "list", "alice", "--namespace", "shared") == \
        {"subscriptions": ["bob/Inbox"]}
    ctl.ok("subscriptions", "remove", "alice", "Work")
    assert ctl.js("subscriptions", "list", "alice") == {"subscriptions": ["INBOX"]}
    text = (ctl.root() / "subscriptions").read_text()
    assert text.startswith("V\t2\n\n")
    assert sorted(text[5:].splitlines()) == ["INBOX", "Shared\tbob\tInbox"]
    ctl.refused("subscriptions", "add", "alice", "a/../b", status=400)


def test_subscriptions_migrate_commands(ctl):
    old = ctl.tmp / "shared" / "alice"
    old.mkdir(parents=True)
    (old / "subscriptions").write_text("V\t2\n\nbob\tInbox\n")
    dry = ctl.js("subscriptions", "migrate", "alice", "--namespace", "shared")
    assert dry["folded"] == 1 and dry["sources"] == [str(old / "subscriptions")]
    assert (old / "subscriptions").exists()
    out = ctl.ok("subscriptions", "migrate", "alice", "--namespace", "shared", "--apply")
    assert "folded: 1\n" in out
    assert not (old / "subscriptions").exists()
    assert ctl.js("subscriptions", "list", "alice", "--namespace", "shared") == \
        {"subscriptions": ["bob/Inbox"]}
    again = ctl.js("subscriptions", "migrate", "alice", "--namespace", "shared", "--apply")
    assert again["sources"] == [] and again["folded"] == 0
    ctl.refused("subscriptions", "migrate", "alice", status=400)


# ---------------------------------------------------------------- special use, user

def test_specialuse_commands(ctl):
    ctl.ok("folder", "create", "alice", "Sent")
    out = ctl.ok("specialuse", "list", "alice")
    assert out == "overrides: {}\ndefaults:\n  Drafts: \\Drafts\n  Sent: \\Sent\n"
    assert ctl.ok("specialuse", "get", "alice", "Sent") == \
        "folder: Sent\nattr: \\Sent\nsource: default\n"
    assert ctl.ok("specialuse", "set", "alice", "Sent", "\\Archive") == "status: ok\n"
    assert ctl.js("specialuse", "get", "alice", "Sent") == \
        {"folder": "Sent", "attr": "\\Archive", "source": "override"}
    assert ctl.js("specialuse", "list", "alice")["overrides"] == {"Sent": "\\Archive"}
    assert ctl.ok("specialuse", "delete", "alice", "Sent") == "status: ok\n"
    assert ctl.js("specialuse", "get", "alice", "Sent")["source"] == "default"
    assert ctl.js("specialuse", "get", "alice", "Other")["source"] == "none"
    ctl.refused("specialuse", "set", "alice", "Missing", "\\Junk", status=404)
    ctl.refused("specialuse", "set", "alice", "Sent", "\\Bogus", status=400)


def test_user_commands(ctl, tmp_path):
    info = ctl.js("user", "info", "alice")
    assert info["username"] == "alice" and info["home"] == f"{tmp_path}/mail/alice"
    assert [n["name"] for n in info["namespaces"]] == ["inbox", "shared"]
    out = ctl.ok("user", "info", "alice")
    assert out.startswith(f"username: alice\nhome: {tmp_path}/mail/alice\nnamespaces:\n  -\n")
    assert "    exists: false\n" in out
    src = tmp_path / "m.eml"
    src.write_bytes(b"Subject: m\n\n" + b"x" * 100 + b"\n")
    ctl.ok("mail", "append", "alice", "INBOX", str(src))
    ctl.ok("folder", "create", "alice", "Team", "--namespace", "shared")
    ctl.ok("mail", "append", "alice", "Team", str(src), "--namespace", "shared")
    u = ctl.js("user", "usage", "alice")
    assert u["total_messages"] == 2 and u["total_size_bytes"] == 2 * len(src.read_bytes())
    assert {(f["namespace"], f["folder"]) for f in u["folders"]} == \
        {("personal", "INBOX"), ("shared", "Team")}
    out = ctl.ok("user", "usage", "alice")
    assert "total_messages: 2\n" in out
    err = ctl.refused("user", "iterate", status=503)
    assert "auth_master_addr" in err


# ---------------------------------------------------------------- mail import

def mboxrd_quote(msg):
    """mboxrd: every line matching ^>*From gets one more '>'."""
    out = []
    for line in msg.split(b"\n"):
        stripped = line.lstrip(b">")
        if stripped.startswith(b"From "):
            line = b">" + line
        out.append(line)
    return b"\n".join(out)


def make_messages(n=20):
    msgs = []
    for i in range(n):
        body = [f"Message number {i}".encode()]
        if i % 3 == 0:
            body.append(b"From the desk of the sender, a line starting with From.")
        if i % 4 == 1:
            body.append(b">From a line that was quoted in the original")
            body.append(b">>From and one quoted twice")
        if i % 5 == 2:
            body.append(b"From")  # no space: not a separator
            body.append(b" From indented")
        if i == 7:
            body.append(b"\xc3\xa4\xc3\xb6\xc3\xbc 8-bit text")
        text = (f"From: sender{i}@example.com\nTo: alice@example.com\n"
                f"Subject: test {i}\nMessage-ID: <{i}@example.com>\n\n").encode()
        text += b"\n".join(body) + b"\n"
        if i == 11:
            text += b"\n"  # a message whose last line is empty
        msgs.append(text)
    return msgs


def write_mbox(path, msgs):
    with open(path, "wb") as f:
        for i, m in enumerate(msgs):
            f.write(f"From sender{i}@example.com Mon Jan  1 00:00:{i:02d} 2024\n".encode())
            f.write(mboxrd_quote(m))
            f.write(b"\n")  # the empty line that ends each message in an mbox


def test_mail_import_mbox(ctl, tmp_path):
    msgs = make_messages(20)
    mbox = tmp_path / "in.mbox"
    write_mbox(mbox, msgs)
    assert mbox.read_bytes().count(b"\n>From ") >= 7
    ctl.ok("folder", "create", "alice", "Imported")
    p = ctl.run("mail", "import", "alice", "Imported", str(mbox))
    assert p.returncode == 0, p.stderr
    assert p.stdout == "imported: 20\n"
    d = ctl.js("index", "dump", "alice", "Imported")
    recs = d["records"]
    assert [r["uid"] for r in recs] == list(range(1, 21))
    assert [r["size"] for r in recs] == [len(m) for m in msgs]
    folder = ctl.root() / ".Imported" / "cur"
    for r, m in zip(recs, msgs):
        assert (folder / r["filename"]).read_bytes() == m, r["uid"]
    # Quoting undone by one level exactly.
    assert b"\nFrom the desk" in msgs[0]
    assert b"\n>From a line" in msgs[1] and b"\n>>From and" in msgs[1]


def test_mail_import_mbox_with_flags_and_namespace(ctl, tmp_path):
    msgs = make_messages(3)
    mbox = tmp_path / "in.mbox"
    write_mbox(mbox, msgs)
    ctl.ok("folder", "create", "alice", "Team", "--namespace", "shared")
    p = ctl.run("mail", "import", "alice", "Team", str(mbox), "--namespace", "shared",
                "--flag", "\\Seen", json_out=True)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == {"imported": 3}
    d = ctl.js("index", "dump", "alice", "Team", "--namespace", "shared")
    assert [r["flags"] for r in d["records"]] == [["\\Seen"]] * 3


def test_mail_import_crlf_mbox(ctl, tmp_path):
    msgs = [b"Subject: crlf %d\r\n\r\nline one\r\nFrom inside\r\n" % i for i in range(3)]
    mbox = tmp_path / "crlf.mbox"
    with open(mbox, "wb") as f:
        for m in msgs:
            f.write(b"From someone Mon Jan  1 00:00:00 2024\r\n")
            f.write(m.replace(b"\r\nFrom ", b"\r\n>From "))
            f.write(b"\r\n")
    p = ctl.run("mail", "import", "alice", "INBOX", str(mbox))
    assert p.returncode == 0 and p.stdout == "imported: 3\n", p.stderr
    recs = ctl.js("index", "dump", "alice", "INBOX")["records"]
    for r, m in zip(recs, msgs):
        assert (ctl.root() / "cur" / r["filename"]).read_bytes() == m


def test_mail_import_mbox_skips_empty_entries(ctl, tmp_path):
    mbox = tmp_path / "gaps.mbox"
    mbox.write_bytes(b"From a Mon Jan  1 00:00:00 2024\n\n"
                     b"From b Mon Jan  1 00:00:00 2024\nSubject: real\n\nbody\n\n"
                     b"From c Mon Jan  1 00:00:00 2024\n")
    p = ctl.run("mail", "import", "alice", "INBOX", str(mbox))
    assert p.returncode == 0 and p.stdout == "imported: 1\n", (p.stdout, p.stderr)
    (r,) = ctl.js("index", "dump", "alice", "INBOX")["records"]
    assert (ctl.root() / "cur" / r["filename"]).read_bytes() == b"Subject: real\n\nbody\n"


def test_mail_import_empty_and_missing(ctl, tmp_path):
    empty = tmp_path / "empty.mbox"
    empty.write_bytes(b"")
    p = ctl.run("mail", "import", "alice", "INBOX", str(empty))
    assert p.returncode == 0 and p.stdout == "imported: 0\n"
    p = ctl.run("mail", "import", "alice", "INBOX", str(tmp_path / "nope.mbox"))
    assert p.returncode != 0 and "nope.mbox" in p.stderr
    # A folder that does not exist: the server says no.
    mbox = tmp_path / "in.mbox"
    write_mbox(mbox, make_messages(2))
    p = ctl.run("mail", "import", "alice", "Missing", str(mbox))
    assert p.returncode == 1 and "404" in p.stderr, (p.stdout, p.stderr)


def test_mail_import_maildir(ctl, tmp_path):
    src = tmp_path / "src-maildir"
    for sub in ("cur", "new", "tmp"):
        (src / sub).mkdir(parents=True)
    files = {
        "cur/1700000001.M1P1.host:2,FS": (b"Subject: flagged seen\n\none\n",
                                           ["\\Flagged", "\\Seen"], 1700000001),
        "cur/1700000002.M2P2.host:2,RT": (b"Subject: answered deleted\n\ntwo\n",
                                           ["\\Answered", "\\Deleted"], 1700000002),
        "cur/1700000003.M3P3.host:2,DP": (b"Subject: draft passed\n\nthree\n",
                                           ["\\Draft", "$Forwarded"], 1700000003),
        "cur/1700000004.M4P4.host:2,": (b"Subject: none\n\nfour\n", [], 1700000004),
        "new/1700000005.M5P5.host": (b"Subject: new\r\n\r\nfive\r\n", [], 1700000005),
    }
    for name, (data, _, mtime) in files.items():
        (src / name).write_bytes(data)
        os.utime(src / name, (mtime, mtime))
    (src / "tmp" / "1700000009.M9P9.host").write_bytes(b"Subject: in tmp\n\nskip\n")
    (src / "cur" / ".hidden").write_bytes(b"not a message")
    p = ctl.run("mail", "import", "alice", "INBOX", str(src))
    assert p.returncode == 0, p.stderr
    assert p.stdout == "imported: 5\n"
    recs = ctl.js("index", "dump", "alice", "INBOX")["records"]
    assert len(recs) == 5
    expected = list(files.values())
    for r, (data, flags, mtime) in zip(recs, expected):
        assert sorted(r["flags"]) == sorted(flags), r
        path = ctl.root() / "cur" / r["filename"]
        assert path.read_bytes() == data
        assert int(os.stat(path).st_mtime) == mtime
    info = ctl.js("folder", "info", "alice", "INBOX")
    assert info["messages"] == 5 and info["unseen"] == 4
