"""Maildir interoperability with the real Dovecot (Debian's dovecot-imapd and
dovecot-pop3d).

Direction A: Petrel writes a maildir through the API (folders, messages with
flags and keywords, an expunge so UIDs have gaps); Dovecot then serves it and
over IMAP every message's UID, UIDVALIDITY, FLAGS (keywords too),
RFC822.SIZE and INTERNALDATE match what Petrel's index/dump and folder/info
report; folders and subscriptions match too. Then Dovecot changes the maildir
(APPEND, EXPUNGE, STORE) and Petrel, opening its existing index again, shows
Dovecot's UIDs and flags.

Direction B: Dovecot creates a maildir over IMAP (APPEND with flags and
keywords, CREATE, SUBSCRIBE, EXPUNGE); with Dovecot stopped, Petrel opens it
without any petrel.index and reports the same UIDs, UIDVALIDITY, next UID,
flags, keywords and subscriptions; its next append continues Dovecot's UIDs.

Python's mailbox.Maildir also reads Petrel's maildir (keys, flags, bytes,
dates, folders).

Dovecot runs from its own minimal configuration on a free loopback port
(`dovecot -F -c <dir>/dovecot.conf`): static passdb/userdb with a fixed
uid/gid (nobody) and home, mail_location maildir:~/Maildir. Its mail
processes run as nobody, so the test hands the Petrel-written home to nobody
before Dovecot starts (Petrel runs as root and reads anything).
"""

import base64
import email.utils
import imaplib
import mailbox
import os
import poplib
import pwd
import re
import grp
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from conftest import free_port
from dovecot_master import DOVECOT, DovecotMaster, account
from mailstore import (MailApi, folder_dir, flags_of_filename, mail_config, message_files,
                       read_keywords, read_uidlist_live, parse_filename)

USER = "u1"
PASSWORD = "pass"

pytestmark = pytest.mark.skipif(not os.path.exists(DOVECOT),
                                reason="dovecot not installed (scripts/setup.sh installs "
                                       "dovecot-imapd and dovecot-pop3d)")


def _nobody():
    pw = pwd.getpwnam("nobody")
    try:
        gid = grp.getgrnam("nogroup").gr_gid
    except KeyError:
        gid = pw.pw_gid
    return pw.pw_uid, gid


def chown_tree(path, uid, gid):
    os.chown(path, uid, gid)
    for dirpath, dirnames, filenames in os.walk(path):
        for n in dirnames + filenames:
            os.lchown(os.path.join(dirpath, n), uid, gid)


class Dovecot(DovecotMaster):
    """One dovecot master (IMAP and POP3) on 127.0.0.1:<free ports>."""

    def __init__(self, root, home_root):
        super().__init__(root)
        self.home_root = Path(home_root)
        self.uid, self.gid = _nobody()
        self.port = None
        self.pop3_port = None

    def config(self):
        internal = account(["dovecot"], "nobody")
        login = account(["dovenull"], "nobody")
        return f"""\
base_dir = {self.root}/run
state_dir = {self.root}/state
log_path = {self.log}
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain
protocols = imap pop3
listen = 127.0.0.1
pop3_uidl_format = %08Xu%08Xv
mail_location = maildir:~/Maildir
first_valid_uid = 1
first_valid_gid = 1
default_internal_user = {internal}
default_login_user = {login}
passdb {{
  driver = static
  args = password={PASSWORD}
}}
userdb {{
  driver = static
  args = uid={self.uid} gid={self.gid} home={self.home_root}/%u
}}
namespace inbox {{
  inbox = yes
  separator = /
}}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {self.port}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
service pop3-login {{
  inet_listener pop3 {{
    address = 127.0.0.1
    port = {self.pop3_port}
  }}
  inet_listener pop3s {{
    port = 0
  }}
}}
service anvil {{
  chroot =
}}
"""

    def start(self):
        for attempt in range(3):
            self.port = free_port()
            self.pop3_port = free_port()
            if self.launch(self.config(), "127.0.0.1", self.port, 15):
                return self
        raise AssertionError("dovecot did not start:\n" + self.logs())

    def stop(self):
        if self.proc is None:
            return
        super().stop()
        # The master waits for its children; make sure none keeps the maildir.
        time.sleep(0.1)

    def imap(self):
        m = imaplib.IMAP4("127.0.0.1", self.port, timeout=30)
        m.login(USER, PASSWORD)
        return m

    def pop3(self):
        p = poplib.POP3("127.0.0.1", self.pop3_port, timeout=30)
        p.user(USER)
        p.pass_(PASSWORD)
        return p


@pytest.fixture
def workroot():
    """A directory outside pytest's 0700 tmp tree, so nobody (Dovecot's mail
    processes) can reach the homes in it."""
    d = tempfile.mkdtemp(prefix="petrel-dovecot-")
    os.chmod(d, 0o755)
    home = Path(d) / "home"
    home.mkdir()
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def dovecot(workroot):
    servers = []

    def make():
        dv = Dovecot(workroot, workroot / "home")
        servers.append(dv)
        return dv

    yield make
    for dv in servers:
        dv.stop()


# ---------- IMAP helpers ----------

def mutf7(name):
    """UTF-8 folder name -> IMAP modified UTF-7 (RFC 3501 5.1.3)."""
    out = []
    run = []

    def flush():
        if run:
            b = "".join(run).encode("utf-16-be")
            out.append("&" + base64.b64encode(b).decode().rstrip("=").replace("/", ",") + "-")
            run.clear()

    for ch in name:
        if 0x20 <= ord(ch) <= 0x7e:
            flush()
            out.append("&-" if ch == "&" else ch)
        else:
            run.append(ch)
    flush()
    return "".join(out)


def imap_quote(name):
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def ok(res):
    typ, data = res
    assert typ == "OK", f"IMAP: {typ} {data}"
    return data


def imap_list(m, cmd="LIST"):
    data = ok(m.list('""', "*") if cmd == "LIST" else m.lsub('""', "*"))
    names = set()
    for line in data:
        if line is None:
            continue
        if isinstance(line, tuple):  # literal name
            names.add(line[1].decode())
            continue
        mt = re.match(rb'\((.*?)\) (?:"(.)"|NIL) (.*)$', line)
        assert mt, line
        if re.search(rb"\\(NonExistent|Noselect)", mt.group(1), re.I):
            continue  # a hierarchy level without a folder of its own
        raw = mt.group(3)
        if raw.startswith(b'"'):
            raw = raw[1:-1].replace(b'\\"', b'"').replace(b"\\\\", b"\\")
        names.add(raw.decode())
    return names


FETCH_RE = re.compile(rb"UID (\d+)|FLAGS \(([^)]*)\)|RFC822\.SIZE (\d+)|"
                      rb'INTERNALDATE "([^"]+)"')


def imap_folder(m, name):
    """{uid_validity, uidnext, exists, messages: {uid: {flags, size, date}}}
    of one folder, opened read-only."""
    ok(m.select(imap_quote(name), readonly=True))
    uidvalidity = int(m.response("UIDVALIDITY")[1][0])
    st = ok(m.status(imap_quote(name), "(MESSAGES UIDNEXT UIDVALIDITY)"))[0].decode()
    uidnext = int(re.search(r"UIDNEXT (\d+)", st).group(1))
    exists = int(re.search(r"MESSAGES (\d+)", st).group(1))
    assert int(re.search(r"UIDVALIDITY (\d+)", st).group(1)) == uidvalidity
    messages = {}
    if exists:
        for item in ok(m.uid("FETCH", "1:*", "(UID FLAGS RFC822.SIZE INTERNALDATE)")):
            if isinstance(item, tuple) or item is None:
                continue
            uid = flags = size = date = None
            for mt in FETCH_RE.finditer(item):
                if mt.group(1):
                    uid = int(mt.group(1))
                elif mt.group(2) is not None:
                    flags = set(mt.group(2).decode().split())
                elif mt.group(3):
                    size = int(mt.group(3))
                elif mt.group(4):
                    date = int(email.utils.parsedate_to_datetime(
                        mt.group(4).decode().replace("-", " ", 2)).timestamp())
            flags.discard("\\Recent")
            messages[uid] = {"flags": flags, "size": size, "date": date}
    m.close()
    return {"uid_validity": uidvalidity, "uidnext": uidnext, "exists": exists,
            "messages": messages}


def imap_body(m, name, uid):
    ok(m.select(imap_quote(name), readonly=True))
    data = ok(m.uid("FETCH", str(uid), "(BODY.PEEK[])"))
    m.close()
    for item in data:
        if isinstance(item, tuple):
            return item[1]
    raise AssertionError(f"no body for {name} {uid}: {data}")


def petrel_folder(api, name):
    info = api.info(name)
    dump = api.dump(name)
    assert dump["uid_validity"] == info["uid_validity"]
    assert dump["next_uid"] == info["next_uid"]
    assert len(dump["records"]) == info["messages"]
    messages = {r["uid"]: {"flags": set(r["flags"]), "size": r["vsize"], "physical": r["size"],
                           "filename": r["filename"]} for r in dump["records"]}
    return {"uid_validity": info["uid_validity"], "next_uid": info["next_uid"],
            "messages": messages, "guid": info["guid"]}


def crlf(b):
    return b.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")


def message(i, folder, lf=False, extra=b""):
    body = (b"From: a@example.test\r\nTo: b@example.test\r\n"
            b"Subject: message %d in %s\r\nMessage-ID: <%d.%s@petrel.test>\r\n\r\n"
            % (i, folder.encode(), i, folder.encode().replace(b"/", b".")))
    body += b"line %d\r\n" % i * (i % 7 + 1) + extra
    return body.replace(b"\r\n", b"\n") if lf else body


# What each appended message carries: (flags, lf line endings, expunge it).
INBOX_PLAN = [
    ([], False, False),
    (["\\Seen"], False, False),
    (["\\Seen", "\\Answered"], True, False),
    (["\\Flagged", "$Junk"], False, True),
    (["\\Draft"], True, False),
    (["NonJunk", "$label1"], False, False),
    (["\\Deleted"], False, True),
    (["\\Seen", "\\Flagged", "\\Answered", "\\Draft", "$label1", "Project-X"], True, False),
    (["\\Deleted", "\\Seen"], False, False),  # \Deleted but not expunged
    (["$Junk"], False, True),
    (["\\Seen", "$Junk", "NonJunk"], False, False),
]
PROJECTS_PLAN = [
    (["Project-X"], False, True),
    (["$label2", "\\Seen"], True, False),
    (["\\Flagged", "Project-X", "$label2", "$label1"], False, False),
    ([], True, False),
    (["\\Answered"], False, True),
    (["\\Seen"], False, False),
]
FOLDERS = ["Work", "Work/Projects", "Archive", "Projekte/Grüße"]
SUBSCRIBED = ["INBOX", "Work/Projects", "Projekte/Grüße"]


def petrel_populate(api):
    """Folders, subscriptions and messages per the plans; returns
    {folder: {uid: bytes}} of what stays and the expunged UIDs."""
    for f in FOLDERS:
        api.create(f)
    for f in SUBSCRIBED:
        api.subscribe(f)
    kept = {}
    base_date = 1_700_000_000
    for folder, plan in (("INBOX", INBOX_PLAN), ("Work/Projects", PROJECTS_PLAN),
                         ("Projekte/Grüße", PROJECTS_PLAN[:2])):
        kept[folder] = {}
        doomed = []
        for i, (flags, lf, expunge) in enumerate(plan):
            data = message(i, folder, lf=lf)
            fl = list(flags) + (["\\Deleted"] if expunge and "\\Deleted" not in flags else [])
            uid = api.append(folder, data, flags=fl, internal_date=base_date + 3600 * i)
            if expunge:
                doomed.append(uid)
            else:
                kept[folder][uid] = (data, base_date + 3600 * i)
        if doomed:
            res = api.expunge(folder, uids=doomed)
            assert sorted(res["expunged"]) == sorted(doomed)
    return kept


def assert_same_view(petrel, imap, folder):
    assert imap["uid_validity"] == petrel["uid_validity"], folder
    assert imap["uidnext"] == petrel["next_uid"], folder
    assert imap["exists"] == len(petrel["messages"]), folder
    assert sorted(imap["messages"]) == sorted(petrel["messages"]), folder
    for uid, pm in petrel["messages"].items():
        im = imap["messages"][uid]
        assert im["flags"] == pm["flags"], (folder, uid, pm["filename"])
        assert im["size"] == pm["size"], (folder, uid, pm["filename"])


# ---------- Direction A: Petrel writes, Dovecot serves ----------

def test_dovecot_serves_petrel_maildir(petreld, dovecot, workroot):
    home_root = workroot / "home"
    d = petreld(mail_config(home_root))
    api = MailApi(d.backend, USER)
    kept = petrel_populate(api)
    folders = api.folders()
    assert sorted(folders) == sorted(["INBOX"] + FOLDERS)
    subs = api.subscriptions()
    assert sorted(subs) == sorted(SUBSCRIBED)
    petrel = {f: petrel_folder(api, f) for f in folders}
    for f, msgs in kept.items():
        assert sorted(petrel[f]["messages"]) == sorted(msgs), f
        # UIDs have gaps where messages were expunged.
        assert petrel[f]["next_uid"] > max(msgs) or not msgs
    assert len(petrel["INBOX"]["messages"]) < petrel["INBOX"]["next_uid"] - 1
    for uid, (data, date) in kept["INBOX"].items():
        assert petrel["INBOX"]["messages"][uid]["physical"] == len(data)
    d.stop()

    uid, gid = _nobody()
    chown_tree(home_root, uid, gid)
    dv = dovecot().start()
    m = dv.imap()
    try:
        assert imap_list(m) == {mutf7(f) for f in folders}
        assert imap_list(m, "LSUB") == {mutf7(f) for f in subs}
        for f in folders:
            view = imap_folder(m, mutf7(f))
            assert_same_view(petrel[f], view, f)
            for u, (data, date) in kept.get(f, {}).items():
                assert view["messages"][u]["date"] == date, (f, u)
        # The bytes Dovecot serves are the bytes appended (CRLF on the wire).
        for f in ("INBOX", "Work/Projects"):
            for u, (data, _) in kept[f].items():
                assert imap_body(m, mutf7(f), u) == crlf(data), (f, u)

        # Dovecot changes the Petrel maildir: appends two, expunges one of
        # them and one of Petrel's, changes flags of another.
        ok(m.select("INBOX"))
        r1 = ok(m.append("INBOX", "(\\Seen $DovecotKw)", None, message(100, "INBOX")))
        r2 = ok(m.append("INBOX", "(\\Flagged)", None, message(101, "INBOX")))
        uid1 = int(re.search(rb"APPENDUID \d+ (\d+)", r1[0]).group(1))
        uid2 = int(re.search(rb"APPENDUID \d+ (\d+)", r2[0]).group(1))
        assert uid1 == petrel["INBOX"]["next_uid"] and uid2 == uid1 + 1
        inbox_uids = sorted(kept["INBOX"])
        ok(m.uid("STORE", f"{uid1},{inbox_uids[0]}", "+FLAGS.SILENT", "(\\Deleted)"))
        ok(m.uid("STORE", str(inbox_uids[1]), "FLAGS.SILENT", "(\\Answered $label1 NewKw)"))
        ok(m.expunge())
        m.close()
        after = imap_folder(m, "INBOX")
    finally:
        m.logout()
    dv.stop()
    assert not dv.errors(), "\n".join(dv.errors())

    # Petrel opens its existing index again and sees what Dovecot did.
    d2 = petreld(mail_config(home_root))
    api2 = MailApi(d2.backend, USER)
    view = petrel_folder(api2, "INBOX")
    assert view["uid_validity"] == after["uid_validity"]
    assert sorted(view["messages"]) == sorted(after["messages"])
    assert uid2 in view["messages"] and uid1 not in view["messages"]
    for u, im in after["messages"].items():
        assert view["messages"][u]["flags"] == im["flags"], u
    assert view["next_uid"] == after["uidnext"]
    # Petrel's next append continues after Dovecot's UIDs ...
    new_uid = api2.append("INBOX", message(102, "INBOX"), flags=["\\Seen", "$DovecotKw"])
    assert new_uid == after["uidnext"]
    final = petrel_folder(api2, "INBOX")
    d2.stop()

    # ... and Dovecot sees that message under the same UID.
    chown_tree(home_root, uid, gid)
    dv = dovecot().start()
    m = dv.imap()
    try:
        assert_same_view(final, imap_folder(m, "INBOX"), "INBOX")
    finally:
        m.logout()
    dv.stop()
    assert not dv.errors(), "\n".join(dv.errors())


def test_forwarded_flag_survives_dovecot(petreld, dovecot, workroot):
    home_root = workroot / "home"
    d = petreld(mail_config(home_root))
    api = MailApi(d.backend, USER)
    uid = api.append("INBOX", message(1, "INBOX"), flags=["$Forwarded", "\\Seen"])
    d.stop()
    chown_tree(home_root, *_nobody())
    dv = dovecot().start()
    m = dv.imap()
    try:
        view = imap_folder(m, "INBOX")
    finally:
        m.logout()
    assert view["messages"][uid]["flags"] == {"$Forwarded", "\\Seen"}


def test_python_mailbox_reads_petrel_maildir(petreld, tmp_path):
    home_root = tmp_path / "home"
    d = petreld(mail_config(home_root))
    api = MailApi(d.backend, USER)
    kept = petrel_populate(api)
    dumps = {f: api.dump(f) for f in api.folders()}
    d.stop()

    root = home_root / USER / "Maildir"
    inbox = mailbox.Maildir(str(root), factory=None, create=False)
    assert sorted(inbox.list_folders()) == sorted(
        ["Work", "Work.Projects", "Archive", "Projekte." + mutf7("Grüße")])
    for folder, dump in dumps.items():
        box = inbox if folder == "INBOX" else mailbox.Maildir(
            str(folder_dir(root, mutf7(folder))), factory=None, create=False)
        keywords = read_keywords(folder_dir(root, mutf7(folder)))
        by_base = {parse_filename(r["filename"])[0]: r for r in dump["records"]}
        assert sorted(box.keys()) == sorted(by_base), folder
        for key in box.keys():
            rec = by_base[key]
            msg = box.get_message(key)
            assert msg.get_subdir() == "cur"
            assert msg.get_info() == "2," + parse_filename(rec["filename"])[1]
            # Letters through dovecot-keywords give back the API's flags.
            assert flags_of_filename(rec["filename"], keywords) == set(rec["flags"])
            assert set(msg.get_flags()) == set(parse_filename(rec["filename"])[1])
            data, date = kept[folder][rec["uid"]]
            assert box.get_bytes(key) == data
            assert len(data) == rec["size"]
            assert int(msg.get_date()) == date
        # The uidlist agrees with the index.
        header, entries = read_uidlist_live(folder_dir(root, mutf7(folder)))
        assert {u: b for u, b in entries.items()} == {
            r["uid"]: parse_filename(r["filename"])[0] for r in dump["records"]}
        assert int(header["V"]) == dump["uid_validity"]


# ---------- Direction B: Dovecot writes, Petrel opens ----------

def test_petrel_opens_dovecot_maildir(petreld, dovecot, workroot):
    home_root = workroot / "home"
    uid_, gid_ = _nobody()
    os.chown(home_root, uid_, gid_)
    dv = dovecot().start()
    m = dv.imap()
    created = ["Work/Projects", "Archive", "Junk", "Projekte/" + mutf7("Grüße")]
    try:
        for f in created:
            ok(m.create(imap_quote(f)))
        for f in ("INBOX", "Work/Projects", "Junk"):
            ok(m.subscribe(imap_quote(f)))
        plans = {
            "INBOX": [("", False), ("(\\Seen)", False), ("(\\Seen \\Answered $Forwarded)", False),
                      ("($Junk NonJunk)", True), ("(\\Flagged \\Draft custom1)", False),
                      ("(\\Deleted)", False), ("($label1)", True), ("", True)],
            "Work/Projects": [("(\\Seen project)", False), ("(\\Flagged)", True),
                              ("(project other \\Answered)", False), ("", True)],
            "Projekte/" + mutf7("Grüße"): [("(\\Seen)", False)],
        }
        appended = {}
        for f, plan in plans.items():
            appended[f] = {}
            for i, (flags, doomed) in enumerate(plan):
                res = ok(m.append(imap_quote(f), flags or None, None, message(i, f)))
                u = int(re.search(rb"APPENDUID \d+ (\d+)", res[0]).group(1))
                appended[f][u] = doomed
        for f, uids in appended.items():
            doomed = [str(u) for u, d in uids.items() if d]
            if doomed:
                ok(m.select(imap_quote(f)))
                ok(m.uid("STORE", ",".join(doomed), "+FLAGS.SILENT", "(\\Deleted)"))
                ok(m.expunge())
                m.close()
        dv_folders = imap_list(m)
        dv_subs = imap_list(m, "LSUB")
        views = {f: imap_folder(m, f) for f in dv_folders}
    finally:
        m.logout()
    dv.stop()
    assert not dv.errors(), "\n".join(dv.errors())
    # UIDs have gaps, and the last INBOX message was expunged (next UID is
    # past the highest remaining one).
    assert max(views["INBOX"]["messages"]) < views["INBOX"]["uidnext"] - 1

    root = home_root / USER / "Maildir"
    assert not list(root.rglob("petrel.index*"))
    d = petreld(mail_config(home_root))
    api = MailApi(d.backend, USER)
    folders = api.folders()
    assert {mutf7(f) for f in folders} == dv_folders
    assert {mutf7(f) for f in api.subscriptions()} == dv_subs
    for f in folders:
        view = petrel_folder(api, f)
        assert_same_view(view, views[mutf7(f)], f)
    # Files Dovecot left in new/ are in cur/ now, with the same UIDs.
    assert not message_files(root) or all(
        sub == "cur" for sub, _ in message_files(root).values())
    # Petrel's appends continue Dovecot's UIDs.
    new_uid = api.append("INBOX", message(50, "INBOX"), flags=["\\Seen", "custom1"])
    assert new_uid == views["INBOX"]["uidnext"]
    final = petrel_folder(api, "INBOX")
    # Rebuilding keeps Dovecot's UIDs.
    rb = api.rebuild("INBOX")
    assert rb["uids_assigned"] == 0 and rb["uids_preserved"] == len(final["messages"])
    assert petrel_folder(api, "INBOX")["messages"] == final["messages"]
    d.stop()

    # And Dovecot, back on the maildir Petrel touched, agrees.
    chown_tree(home_root, uid_, gid_)
    dv = dovecot().start()
    m = dv.imap()
    try:
        assert_same_view(final, imap_folder(m, "INBOX"), "INBOX")
    finally:
        m.logout()
    dv.stop()
    assert not dv.errors(), "\n".join(dv.errors())


# ---------- POP3 UIDLs and LIST on the same maildir ----------

def petrel_mail_config(home_root, tmp_path):
    """mail_config plus auth, IMAP and POP3 with the Dovecot test user's
    password, so both servers can be asked the same questions."""
    passwd = tmp_path / "passwd"
    passwd.write_text(f"{USER}:{{PLAIN}}{PASSWORD}::::::\n")
    auth_port = free_port()
    cfg = mail_config(home_root)
    cfg["components"] = ["auth", "imap", "pop3", "backend-api"]
    cfg["auth"] = {"listen": [f"127.0.0.1:{auth_port}"],
                   "passdb": {"driver": "passwd-file", "path": str(passwd)}}
    for proto in ("imap", "pop3"):
        cfg[proto] = {"listen": [f"127.0.0.1:{free_port()}"],
                      "auth_addr": f"127.0.0.1:{auth_port}"}
    return cfg


def listen_addr(d, section):
    host, port = d.config[section]["listen"][0].rsplit(":", 1)
    return host, int(port)


# LIST commands both servers are asked (arguments after the command name).
LIST_COMMANDS = [
    ("LIST", '""', '"*"'), ("LIST", '""', '"%"'), ("LIST", '""', '"Dove/%"'),
    ("LIST", '""', '"D*"'), ("LIST", '()', '""', '"%"'), ("LIST", '()', '""', '"*"'),
    ("LIST", '""', '"*"', "RETURN", "(SUBSCRIBED)"),
    ("LIST", '""', '"*"', "RETURN", "(CHILDREN)"),
    ("LIST", "(SUBSCRIBED)", '""', '"*"'),
    ("LSUB", '""', '"*"'), ("LSUB", '""', '"%"'),
]


def list_lines(m, command):
    """LIST/LSUB replies as (attributes, delimiter, name, rest): a name may
    be sent as an atom or as a quoted string (RFC 3501 astring), and
    servers differ in that, not in meaning."""
    typ, data = m._simple_command(*command)
    assert typ == "OK", (command, data)
    typ, data = m._untagged_response(typ, data, command[0])
    out = []
    for line in data:
        if line is None:
            continue
        mt = re.match(rb'\(([^)]*)\) (NIL|"[^"]*") ("(?:[^"\\]|\\.)*"|[^ ]+)(.*)$', line)
        assert mt, line
        name = mt.group(3)
        if name.startswith(b'"'):
            name = re.sub(rb'\\(.)', rb"\1", name[1:-1])
        rest = mt.group(4).replace(b'"CHILDINFO"', b"CHILDINFO")
        out.append((tuple(sorted(mt.group(1).split())), mt.group(2), name, rest))
    return sorted(out)


def test_pop3_uidls_and_list_match_dovecot(petreld, dovecot, workroot, tmp_path):
    """One maildir served by Dovecot and then by Petrel: a POP3 client that
    leaves mail on the server sees the same UIDL strings from both (Dovecot
    prints %08Xu%08Xv in lower case), and IMAP LIST shows the same folders
    with the same attributes, including the \\Noselect parent that exists
    only as the prefix of `Dove/Made`."""
    home_root = workroot / "home"
    uid_, gid_ = _nobody()
    os.chown(home_root, uid_, gid_)
    dv = dovecot().start()
    m = dv.imap()
    try:
        for f in ("Dove/Made", "Work", "Work/Sub"):
            ok(m.create(imap_quote(f)))
        for f in ("Dove/Made", "Work/Sub"):
            ok(m.subscribe(imap_quote(f)))
        for i in range(4):
            ok(m.append("INBOX", None, None, message(i, "INBOX")))
        ok(m.select("INBOX"))
        ok(m.store("2", "+FLAGS.SILENT", "(\\Deleted)"))
        ok(m.expunge())
        m.close()
        dv_list = {cmd: list_lines(m, cmd) for cmd in LIST_COMMANDS}
    finally:
        m.logout()
    p = dv.pop3()
    dv_uidls = p.uidl()[1]
    p.quit()
    dv.stop()
    assert not dv.errors(), "\n".join(dv.errors())
    assert len(dv_uidls) == 3
    assert ((b"\\HasChildren", b"\\Noselect"), b'"/"', b"Dove", b"") in dv_list[LIST_COMMANDS[0]]

    d = petreld(petrel_mail_config(home_root, tmp_path))
    p = poplib.POP3(*listen_addr(d, "pop3"), timeout=30)
    p.user(USER)
    p.pass_(PASSWORD)
    assert p.uidl()[1] == dv_uidls
    p.quit()
    m = imaplib.IMAP4(*listen_addr(d, "imap"), timeout=30)
    m.login(USER, PASSWORD)
    try:
        for cmd, lines in dv_list.items():
            assert list_lines(m, cmd) == lines, cmd
    finally:
        m.logout()


# ---------- SEARCH on address fields, asked of both servers ----------

SEARCH_FROMS = [
    b"<user-from (comment)@ (comment) domain.org>",
    b"\"Quoted, Name\" <q.name@Example.ORG>",
    b"plain@host.example (Real Name)",
    b"Group: one@g.example, \"Two\" <two@g.example>;",
    b"=?utf-8?q?J=C3=BCrgen?= <juergen@example.de>",
    b"Alice Example <alice@example.org>",
]
SEARCH_NEEDLES = [
    "user-from@domain.org", "<user-from@domain.org>", "comment", "Quoted, Name",
    "\"Quoted, Name\" <q.name@example.org>", "Quoted, Name <q.name", "q.name@example.org",
    "plain@host.example", "Real Name", "Real Name <plain", "Group", "two@g.example",
    "Two <two@g.example>", "Group: one@g.example", "Jürgen", "Jürgen <juergen",
    "Alice Example <alice@", "example <alice", "e@example.org>", "(",
]


def search_table(m):
    """{(key, needle): [message numbers]} for FROM and HEADER From."""
    ok(m.select("INBOX"))
    out = {}
    for needle in SEARCH_NEEDLES:
        for key in (("FROM",), ("HEADER", "From")):
            m.literal = needle.encode()
            typ, data = m.search("UTF-8", *key)
            assert typ == "OK", (key, needle, data)
            out[(key, needle)] = data[0].split()
    return out


def test_search_from_matches_dovecot(petreld, dovecot, workroot, tmp_path):
    """SEARCH FROM/TO/CC/BCC compare the addresses written out anew
    (comments inside an address and quoting gone), HEADER compares the
    field as it is: the same messages match on Petrel and on Dovecot for
    each of twenty needles (RFC 3501 leaves the matching to the server;
    clients expect what Dovecot answers)."""
    home_root = workroot / "home"
    uid_, gid_ = _nobody()
    os.chown(home_root, uid_, gid_)
    dv = dovecot().start()
    m = dv.imap()
    try:
        for frm in SEARCH_FROMS:
            ok(m.append("INBOX", None, None, b"From: " + frm + b"\r\nSubject: s\r\n\r\nbody\r\n"))
        expected = search_table(m)
    finally:
        m.logout()
    dv.stop()
    assert expected[(("FROM",), "user-from@domain.org")] == [b"1"]

    d = petreld(petrel_mail_config(tmp_path / "petrel-home", tmp_path))
    m = imaplib.IMAP4(*listen_addr(d, "imap"), timeout=30)
    m.login(USER, PASSWORD)
    try:
        for frm in SEARCH_FROMS:
            ok(m.append("INBOX", None, None, b"From: " + frm + b"\r\nSubject: s\r\n\r\nbody\r\n"))
        got = search_table(m)
    finally:
        m.logout()
    differing = {k: (got[k], v) for k, v in expected.items() if got[k] != v}
    assert not differing, differing
