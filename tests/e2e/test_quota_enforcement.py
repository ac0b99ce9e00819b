"""Quota enforcement (document 3) on a real petreld: the storage module
refuses saves with exactly the replies of the Errors table, to real clients
(imaplib, raw IMAP for MULTIAPPEND, smtplib.LMTP).

Users come from a passwd-file through the auth service, with their
`quota_rule` as userdb extra fields, so the rules travel the way an
operator's do. Usage is what the index aggregate says (document 3: computed,
never stored), checked by the bytes on disk.

Also: two sessions appending in parallel to a user near the limit do not
together pass it by more than one message; an expunge lowers usage so the
next APPEND fits; a transient error reading usage lets the save through
(fail open, logged); the rejections metric counts each refusal by point and
resource."""

import imaplib
import os
import re
import signal
import smtplib
import socket
import threading

import pytest

from conftest import free_port, http_request, wait_for

EXCEEDED = "Quota exceeded (mailbox for user is full)"

PASSWD = ("alice:{PLAIN}a:1001:1001::::userdb_quota_rule=*:storage=3000\n"
          "bob:{PLAIN}b:1002:1002::::userdb_quota_rule=*:messages=2\n"
          "carol:{PLAIN}c:1003:1003::::userdb_quota_rule=*:storage=20K "
          "userdb_quota_rule2=Trash:ignore\n"
          "dave:{PLAIN}d:1004:1004\n"
          "erin:{PLAIN}e:1005:1005::::userdb_quota_rule=*:storage=100K\n")


def config(tmp_path, quota=None, imap=None):
    passwd = tmp_path / "passwd"
    passwd.write_text(PASSWD)
    auth = f"127.0.0.1:{free_port()}"
    q = {"enabled": True, "quota_storage_grace": "1000", "quota_mail_size": "50K"}
    q.update(quota or {})
    i = {"listen": [f"127.0.0.1:{free_port()}"], "auth_addr": auth}
    i.update(imap or {})
    return {
        "components": ["auth", "imap", "lmtp"],
        "mail": {"home": str(tmp_path / "mail" / "%u"), "fsync": "never"},
        "auth": {"listen": [auth], "passdb": {"driver": "passwd-file", "path": str(passwd)}},
        "imap": i,
        "lmtp": {"listen": [f"127.0.0.1:{free_port()}"], "auth_addr": auth,
                 "username_format": "%n"},
        "quota": q,
    }


def addr(d, section):
    host, port = d.config[section]["listen"][0].rsplit(":", 1)
    return host, int(port)


def login(d, user):
    m = imaplib.IMAP4(*addr(d, "imap"), timeout=30)
    m.login(user, user[0])
    return m


def message(n, size):
    head = (f"From: s@example.net\r\nTo: x@example.org\r\nSubject: m{n}\r\n"
            f"Message-ID: <e{n}@example.net>\r\n\r\n").encode()
    return head + b"x" * (size - len(head) - 2) + b"\r\n"


def append(m, folder, msg):
    typ, data = m.append(folder, None, None, msg)
    return typ, data[0].decode() if data and data[0] else ""


def lmtp(d, rcpt, msg):
    with smtplib.LMTP(*addr(d, "lmtp"), timeout=30) as c:
        c.ehlo("client.test")
        assert c.mail("s@example.net")[0] == 250
        code, text = c.rcpt(rcpt)
        assert code == 250, text
        try:
            code, text = c.data(msg)
        except smtplib.SMTPDataError as e:
            code, text = e.smtp_code, e.smtp_error
        return code, text.decode()


def on_disk(d, user):
    root = d.workdir / "mail" / user / "Maildir"
    total = 0
    if not root.exists():  # refused before anything was made
        return 0
    for folder in [root] + [p for p in root.iterdir() if p.name.startswith(".")]:
        for sub in ("new", "cur"):
            if (folder / sub).is_dir():
                total += sum(f.stat().st_size for f in (folder / sub).iterdir())
    return total


def rejections(d, point, resource):
    r = http_request(d.telemetry, "GET", "/metrics")
    key = f'petrel_quota_rejections_total{{point="{point}",resource="{resource}"}}'
    for line in r.body.decode().splitlines():
        if line.startswith(key):
            return float(line.split()[-1])
    return 0.0


class Raw:
    def __init__(self, d, user):
        self.sock = socket.create_connection(addr(d, "imap"), timeout=10)
        self.f = self.sock.makefile("rb")
        self.f.readline()
        self.n = 0
        assert self.run(f"LOGIN {user} {user[0]}".encode())[-1].startswith(b"c1 OK")

    def run(self, data):
        self.n += 1
        tag = b"c%d" % self.n
        self.sock.sendall(tag + b" " + data + b"\r\n")
        out = []
        while True:
            line = self.f.readline()
            assert line, out
            out.append(line)
            if line.startswith(tag + b" "):
                return out

    def close(self):
        self.sock.close()


@pytest.fixture
def qd(petreld, tmp_path):
    return petreld(config(tmp_path))


def test_imap_append_copy_move_over_quota(qd):
    d = qd
    m = login(d, "alice")
    assert append(m, "INBOX", message(1, 1400))[0] == "OK"
    assert append(m, "INBOX", message(2, 1400))[0] == "OK"
    # 2800 of 3000: 300 more do not fit (no grace for IMAP)
    typ, text = append(m, "INBOX", message(3, 300))
    assert (typ, text) == ("NO", f"[OVERQUOTA] {EXCEEDED}")
    assert append(m, "INBOX", message(4, 200))[0] == "OK"
    m.create("Archive")
    m.select("INBOX")
    typ, data = m.copy("1", "Archive")
    assert (typ, data[0].decode()) == ("NO", f"[OVERQUOTA] {EXCEEDED}")
    # a move between the user's folders changes no usage: allowed when full
    typ, data = m.uid("MOVE", "1", "Archive")
    assert typ == "OK", data
    assert on_disk(d, "alice") <= 3000
    assert rejections(d, "append", "storage") == 1
    assert rejections(d, "copy", "storage") == 1
    m.logout()


def test_message_count_limit_and_mail_size(qd):
    d = qd
    m = login(d, "bob")
    assert append(m, "INBOX", message(1, 100))[0] == "OK"
    assert append(m, "INBOX", message(2, 100))[0] == "OK"
    assert append(m, "INBOX", message(3, 100)) == ("NO", f"[OVERQUOTA] {EXCEEDED}")
    assert rejections(d, "append", "messages") == 1
    # quota_mail_size (50K) whatever the usage, with its own text; dave is unlimited
    m2 = login(d, "dave")
    big = message(5, 50 * 1024 + 1)
    assert append(m2, "INBOX", big) == (
        "NO", f"[OVERQUOTA] Requested allocation size {len(big)} exceeds max mail size 51200")
    assert append(m2, "INBOX", message(6, 50 * 1024))[0] == "OK"
    code, text = lmtp(d, "dave@example.org", big)
    assert code == 552 and text.startswith("5.2.2 <dave@example.org> Requested allocation size "), text
    assert text.endswith("exceeds max mail size 51200"), text
    assert rejections(d, "append", "mail_size") == 1
    assert rejections(d, "delivery", "mail_size") == 1
    m.logout()
    m2.logout()


def test_lmtp_over_quota_is_452_with_grace(qd):
    d = qd
    # alice: 3000 + 1000 grace at delivery
    assert lmtp(d, "alice@example.org", message(1, 2500))[0] == 250
    assert lmtp(d, "alice@example.org", message(2, 1000))[0] == 250  # over 3000, within grace
    used = on_disk(d, "alice")
    assert 3000 < used <= 4000
    code, text = lmtp(d, "alice@example.org", message(3, 4000 - used + 10))
    assert code == 452, text
    assert text == f"4.2.2 <alice@example.org> {EXCEEDED}"
    assert on_disk(d, "alice") == used
    # IMAP has no grace: alice is full for APPEND now
    m = login(d, "alice")
    assert append(m, "INBOX", message(4, 10)) == ("NO", f"[OVERQUOTA] {EXCEEDED}")
    m.logout()
    assert rejections(d, "delivery", "storage") == 1


def test_mailbox_message_count_and_mailbox_count(petreld, tmp_path):
    d = petreld(config(tmp_path, quota={"quota_mailbox_message_count": 2,
                                        "quota_mailbox_count": 3}))
    m = login(d, "dave")
    assert append(m, "INBOX", message(1, 100))[0] == "OK"
    assert append(m, "INBOX", message(2, 100))[0] == "OK"
    assert append(m, "INBOX", message(3, 100)) == (
        "NO", "[OVERQUOTA] Too many messages in the mailbox")
    code, text = lmtp(d, "dave@example.org", message(4, 100))
    assert code == 552 and text == "5.2.2 <dave@example.org> Too many messages in the mailbox"
    # INBOX + 2 folders = 3: the next CREATE is refused
    assert m.create("A")[0] == "OK"
    assert m.create("B")[0] == "OK"
    typ, data = m.create("C")
    assert (typ, data[0].decode()) == ("NO", "[LIMIT] Maximum number of mailboxes reached.")
    assert rejections(d, "create", "mailbox_count") == 1
    assert rejections(d, "append", "mailbox_messages") == 1
    assert rejections(d, "delivery", "mailbox_messages") == 1
    m.logout()


def test_multiappend_all_or_nothing(qd):
    d = qd
    r = Raw(d, "alice")
    one, two = message(1, 1500), message(2, 1600)
    out = r.run(b"APPEND INBOX {%d+}\r\n" % len(one) + one + b" {%d+}\r\n" % len(two) + two)
    assert out[-1] == f"c{r.n} NO [OVERQUOTA] {EXCEEDED}\r\n".encode(), out
    assert on_disk(d, "alice") == 0
    out = r.run(b"STATUS INBOX (MESSAGES)")
    assert b"(MESSAGES 0)" in out[0], out
    # both fit: both saved
    two = message(2, 1400)
    out = r.run(b"APPEND INBOX {%d+}\r\n" % len(one) + one + b" {%d+}\r\n" % len(two) + two)
    assert out[-1].startswith(b"c%d OK" % r.n), out
    r.close()


def test_expunge_lowers_usage(qd):
    d = qd
    m = login(d, "alice")
    for i in range(3):
        assert append(m, "INBOX", message(i, 900))[0] == "OK"
    assert append(m, "INBOX", message(9, 900))[0] == "NO"
    m.select("INBOX")
    m.store("1", "+FLAGS", "\\Deleted")
    m.expunge()
    assert on_disk(d, "alice") == 1800
    assert append(m, "INBOX", message(9, 900))[0] == "OK"
    assert append(m, "INBOX", message(10, 900))[0] == "NO"
    m.logout()


def test_ignored_folder_and_unlimited_user(qd):
    d = qd
    m = login(d, "carol")
    m.create("Trash")
    for i in range(5):  # Trash is not counted: 25K into a 20K user
        assert append(m, "Trash", message(i, 5 * 1024))[0] == "OK"
    assert append(m, "INBOX", message(9, 19 * 1024))[0] == "OK"
    assert append(m, "INBOX", message(10, 2 * 1024))[0] == "NO"
    # Full, yet the ignored folder still takes saves: APPEND, and a COPY
    # out of a counted folder; a MOVE out of it into a counted one is a save
    # the quota counts, and refuses.
    assert append(m, "Trash", message(11, 5 * 1024))[0] == "OK"
    m.select("INBOX")
    typ, data = m.copy("1", "Trash")
    assert typ == "OK", data
    m.select("Trash")
    typ, data = m.uid("MOVE", "1", "INBOX")
    assert (typ, data[0].decode()) == ("NO", f"[OVERQUOTA] {EXCEEDED}")
    m.logout()
    m = login(d, "dave")  # no quota_rule: unlimited
    for i in range(3):
        assert append(m, "INBOX", message(i, 40 * 1024))[0] == "OK"
    m.logout()


def test_usage_read_error_fails_open(qd):
    d = qd
    m = login(d, "alice")
    assert append(m, "INBOX", message(1, 2500))[0] == "OK"
    assert append(m, "INBOX", message(2, 1000))[0] == "NO"
    # A folder whose index cannot be read (a directory where its log file
    # belongs): summing usage fails, the check is skipped and logged.
    m.create("Broken")
    m.select("Broken")
    m.close()
    root = d.workdir / "mail" / "alice" / "Maildir" / ".Broken"
    for f in root.glob("petrel.index*"):
        f.unlink()
    (root / "petrel.index").mkdir()
    assert append(m, "INBOX", message(2, 1000))[0] == "OK"
    assert "quota check skipped: cannot read usage" in d.stderr()
    m.logout()


def test_parallel_sessions_overshoot_at_most_one_message(petreld, tmp_path):
    d = petreld(config(tmp_path, imap={"workers": 4}))
    size = 2000
    limit = 100 * 1024  # erin
    results = []

    def fill(n):
        m = login(d, "erin")
        ok = 0
        for i in range(200):
            typ, _ = append(m, "INBOX", message(n * 1000 + i, size))
            if typ != "OK":
                break
            ok += 1
        results.append(ok)
        m.logout()

    threads = [threading.Thread(target=fill, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    used = on_disk(d, "erin")
    assert used <= limit + size, (used, results)
    # A save whose read may already hold another's commit counts it twice
    # (safe side): near the limit each session may stop up to one message
    # of each other session early.
    assert used > limit - 4 * size, (used, results)
    assert sum(results) == used // size


def test_enormous_rule_scaled_up_is_not_a_tiny_limit(petreld, tmp_path):
    """quota_storage_percentage above 100 on an enormous rule saturates:
    9223372036854775900 x 200 % wrapped round to 184 bytes and refused a
    1000-byte APPEND."""
    cfg = config(tmp_path, quota={"quota_storage_percentage": 200})
    (tmp_path / "passwd").write_text(
        "alice:{PLAIN}a:1001:1001::::userdb_quota_rule=*:storage=9223372036854775900\n")
    d = petreld(cfg)
    m = login(d, "alice")
    assert append(m, "INBOX", message(1, 1000))[0] == "OK"
    m.logout()


def test_literal_over_mail_size_refused_before_it_is_sent(qd):
    """An APPEND whose synchronising literal announces more than
    quota_mail_size is answered NO at once, without the "+" that would have
    the client send bytes only to be thrown away (Dovecot's quota plugin
    refuses at save begin likewise). A non-synchronising literal is on its
    way already: read, then refused by the save hook."""
    d = qd
    r = Raw(d, "dave")
    want = b"[OVERQUOTA] Requested allocation size 60000 exceeds max mail size 51200\r\n"
    r.sock.sendall(b"a1 APPEND INBOX {60000}\r\n")
    assert r.f.readline() == b"a1 NO " + want
    # MULTIAPPEND: the second message's literal; the first is not saved
    small = message(1, 1000)
    r.sock.sendall(b"a2 APPEND INBOX {%d+}\r\n" % len(small) + small + b" {60000}\r\n")
    assert r.f.readline() == b"a2 NO " + want
    r.sock.sendall(b"a3 APPEND INBOX {60000+}\r\n" + b"x" * 60000 + b"\r\n")
    assert r.f.readline() == b"a3 NO " + want
    assert r.run(b"STATUS INBOX (MESSAGES)")[0] == b"* STATUS \"INBOX\" (MESSAGES 0)\r\n"
    # at the cap exactly it is asked for and saved
    ok = message(2, 50 * 1024)
    r.sock.sendall(b"a4 APPEND INBOX {%d}\r\n" % len(ok))
    assert r.f.readline() == b"+ OK\r\n"
    r.sock.sendall(ok + b"\r\n")
    assert r.f.readline().startswith(b"a4 OK")
    assert rejections(d, "append", "mail_size") == 3
    r.close()


def test_usage_after_kill_9_during_appends(qd):
    """petreld killed (SIGKILL) while a client appends: after the restart
    usage is what the folder holds once synchronised (a message whose file
    landed but whose index record did not is counted, none twice), and the
    limit still holds to the byte."""
    d = qd
    stop = threading.Event()

    def writer():
        try:
            m = login(d, "erin")
            i = 0
            while not stop.is_set():
                m.append("INBOX", None, None, message(100 + i, 3000))
                i += 1
        except (OSError, imaplib.IMAP4.abort, imaplib.IMAP4.error):
            pass

    t = threading.Thread(target=writer)
    t.start()
    try:
        wait_for(lambda: on_disk(d, "erin") >= 30000, timeout=20, what="appends under way")
        d.signal(signal.SIGKILL)
        d.wait()
    finally:
        stop.set()
        t.join()
    d.start()
    r = Raw(d, "erin")
    r.run(b"SELECT INBOX")  # synchronises the folder with its files
    used = on_disk(d, "erin")
    quota = [ln for ln in r.run(b'GETQUOTA "User quota"') if ln.startswith(b"* QUOTA")]
    assert quota == [b'* QUOTA "User quota" (STORAGE %d 100)\r\n' % -(-used // 1024)], (quota, used)
    while True:
        out = r.run(b"APPEND INBOX {3000+}\r\n" + message(900, 3000))
        if not out[-1].split()[1] == b"OK":
            assert b"[OVERQUOTA]" in out[-1], out
            break
    assert 100 * 1024 - 3000 < on_disk(d, "erin") <= 100 * 1024
    r.close()


def test_kept_folder_list_sees_folders_made_and_removed_by_other_sessions(petreld, tmp_path):
    """An LMTP delivery thread keeps the user's folder list between checks
    while the Maildir root is unchanged (docs/quota.md, Cost): a folder that
    another session creates and fills afterwards still counts at the next
    delivery, and one it deletes stops counting, at once. (One delivery
    thread, so that every delivery checks with the same kept list.)"""
    cfg = config(tmp_path)
    cfg["lmtp"]["delivery_threads"] = 1
    d = petreld(cfg)
    root = d.workdir / "mail" / "carol" / "Maildir"
    assert lmtp(d, "carol@example.org", message(1, 1000))[0] == 250
    # An old root, as any mailbox's but in the seconds after it was made:
    # the next delivery lists it and keeps the list.
    os.utime(root, (1_000_000_000, 1_000_000_000))
    assert lmtp(d, "carol@example.org", message(2, 1000))[0] == 250
    m = login(d, "carol")
    assert m.create("Big")[0] == "OK"
    assert append(m, "Big", message(3, 15000))[0] == "OK"
    # carol: 20K; 2,000 + 15,000 used: 4,000 more does not fit even with
    # the 1,000 of grace (a list without Big would let it through)
    code, text = lmtp(d, "carol@example.org", message(4, 4000))
    assert code == 452, text
    assert m.delete("Big")[0] == "OK"
    m.logout()
    assert lmtp(d, "carol@example.org", message(5, 4000))[0] == 250

def test_literal_over_quota_refused_before_it_is_sent(qd):
    """An APPEND whose synchronising literal already cannot fit in what is
    left of the user's quota is answered NO [OVERQUOTA] at once, before the
    "+" (Dovecot 2.3's quota_test_alloc at save begin; the storage's quota
    module decides, asked through mail_save_test). A MULTIAPPEND counts its
    earlier messages and stays all or nothing. A non-synchronising literal
    is on its way: its bytes are read and dropped, then the same NO, and
    the connection goes on."""
    d = qd
    before = rejections(d, "append", "storage")
    r = Raw(d, "alice")  # *:storage=3000
    want = b"NO [OVERQUOTA] " + EXCEEDED.encode() + b"\r\n"
    r.sock.sendall(b"a1 APPEND INBOX {4000}\r\n")
    assert r.f.readline() == b"a1 " + want
    # a folder that does not exist says so first, as the APPEND would
    r.sock.sendall(b"a0 APPEND Nowhere {4000}\r\n")
    assert r.f.readline() == b"a0 NO [TRYCREATE] Mailbox does not exist.\r\n"
    small = message(1, 1000)
    r.sock.sendall(b"a2 APPEND INBOX {%d}\r\n" % len(small))
    assert r.f.readline() == b"+ OK\r\n"
    r.sock.sendall(small + b"\r\n")
    assert r.f.readline().startswith(b"a2 OK")
    # 1000 used: a first message of 1000 fits, with a second of 1500 the
    # command would not (1000 + 1000 + 1500 > 3000); nothing is saved.
    r.sock.sendall(b"a3 APPEND INBOX {%d+}\r\n" % len(small) + small + b" {1500}\r\n")
    assert r.f.readline() == b"a3 " + want
    r.sock.sendall(b"a4 APPEND INBOX {2500+}\r\n" + b"x" * 2500 + b"\r\n")
    assert r.f.readline() == b"a4 " + want
    assert r.run(b"STATUS INBOX (MESSAGES)")[0] == b"* STATUS \"INBOX\" (MESSAGES 1)\r\n"
    # a1, a3, a4, and a0 (the quota said no; the reply names the missing folder)
    assert rejections(d, "append", "storage") - before == 4
    # what fits is still asked for
    r.sock.sendall(b"a5 APPEND INBOX {%d}\r\n" % len(small))
    assert r.f.readline() == b"+ OK\r\n"
    r.sock.sendall(small + b"\r\n")
    assert r.f.readline().startswith(b"a5 OK")
    r.close()


def plant(d, user, size):
    """A message file of `size` bytes put into the user's INBOX behind the
    server's back (a message from before quota_mail_size was set)."""
    root = d.workdir / "mail" / user / "Maildir"
    for sub in ("cur", "new", "tmp"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "new" / "1700000000.M1P1.planted").write_bytes(message(99, size))


def test_copy_and_move_obey_mail_size(qd):
    """COPY of a message over quota_mail_size is refused with the size cap's
    text, as an APPEND of it is; a MOVE from another of the user's folders
    brings nothing new in and goes through (Dovecot skips every check for a
    move inside one quota root)."""
    d = qd
    plant(d, "dave", 60000)  # dave has no rule; the cap is 50K
    m = login(d, "dave")
    assert m.create("Other")[0] == "OK"
    assert m.select("INBOX")[0] == "OK"
    typ, data = m.copy("1", "Other")
    assert typ == "NO"
    assert data[0] == b"[OVERQUOTA] Requested allocation size 60000 exceeds max mail size 51200"
    assert rejections(d, "copy", "mail_size") == 1
    typ, data = m._simple_command("MOVE", "1", "Other")
    assert typ == "OK", data
    assert m.status("Other", "(MESSAGES)")[1][0].endswith(b"(MESSAGES 1)")
    m.logout()


def test_literal_asked_for_after_another_session_made_room(qd):
    """The test allocation answers from the usage the session last saw; a
    no from that estimate is read again, so room another session made
    (an expunge) is seen and the literal is asked for."""
    d = qd
    a = Raw(d, "alice")  # *:storage=3000
    msg = message(1, 2000)
    a.sock.sendall(b"a1 APPEND INBOX {%d}\r\n" % len(msg))
    assert a.f.readline() == b"+ OK\r\n"
    a.sock.sendall(msg + b"\r\n")
    assert a.f.readline().startswith(b"a1 OK")
    b = Raw(d, "alice")
    b.run(b"SELECT INBOX")
    b.run(b"STORE 1 +FLAGS.SILENT (\\Deleted)")
    assert b.run(b"EXPUNGE")[-1].startswith(b"c4 OK")
    b.close()
    a.sock.sendall(b"a2 APPEND INBOX {%d}\r\n" % len(msg))  # 2000 + 2000 > 3000 by the estimate
    assert a.f.readline() == b"+ OK\r\n"
    a.sock.sendall(msg + b"\r\n")
    assert a.f.readline().startswith(b"a2 OK")
    a.close()
