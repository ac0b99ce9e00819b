"""SORT, ESORT, THREAD and SEARCHRES answers compared with Dovecot 2.3 on
the same messages: test_imap_sort_thread.py's SORT_SET and THREAD_SET are
appended to a real Dovecot (the interop file's helper, on a loopback port)
and to petreld through IMAP, the same commands go to both over raw
sockets, and every untagged answer must be the same."""

import imaplib
import os
import socket

import pytest

from test_imap_sort_thread import SORT_SET, THREAD_SET, fill
from test_storage_dovecot_interop import (DOVECOT, PASSWORD, USER, _nobody, dovecot,  # noqa: F401
                                          listen_addr, petrel_mail_config, workroot)

pytestmark = pytest.mark.skipif(not os.path.exists(DOVECOT), reason="dovecot not installed")

# (folder, command): commands whose answers RFC 5256/5267/5182 pin down.
COMMANDS = [("INBOX", c) for c in [
    "SORT (ARRIVAL) UTF-8 ALL",
    "SORT (DATE) UTF-8 ALL",
    "SORT (REVERSE DATE) UTF-8 ALL",
    "SORT (FROM) UTF-8 ALL",
    "SORT (TO) UTF-8 ALL",
    "SORT (CC) UTF-8 ALL",
    "SORT (SUBJECT) UTF-8 ALL",
    "SORT (SIZE) UTF-8 ALL",
    "SORT (REVERSE SIZE) UTF-8 ALL",
    "SORT (DISPLAYFROM) UTF-8 ALL",
    "SORT (DISPLAYTO) UTF-8 ALL",
    "SORT (SUBJECT REVERSE DATE) UTF-8 ALL",
    "SORT (REVERSE FROM ARRIVAL) US-ASCII 2:5",
    'SORT (SUBJECT) UTF-8 FROM "charlie"',
    'SORT (SUBJECT) US-ASCII TEXT "not in mailbox"',
    "SORT RETURN (MIN MAX COUNT) (DATE) UTF-8 ALL",
    "SORT RETURN (ALL) (ARRIVAL) UTF-8 ALL",
    "SORT RETURN (COUNT) (SUBJECT) UTF-8 SUBJECT apple",
    'SEARCH RETURN (SAVE) FROM "charlie"',
    "FETCH $ (RFC822.SIZE)",
    "SEARCH $ SMALLER 1000",
    "UID SEARCH NOT $",
    "SEARCH RETURN (SAVE MIN) ALL",
    "UID FETCH $ (RFC822.SIZE)",
    "SORT RETURN (SAVE MAX) (SIZE) UTF-8 ALL",
    "FETCH $ (UID RFC822.SIZE)",
]] + [("Threads", c) for c in [
    "THREAD REFERENCES UTF-8 ALL",
    "THREAD ORDEREDSUBJECT UTF-8 ALL",
    "THREAD REFERENCES UTF-8 3:4",
    "THREAD REFERENCES UTF-8 5:8",
    "THREAD ORDEREDSUBJECT US-ASCII 2:7",
    'THREAD REFERENCES US-ASCII TEXT "gewp"',
]]


def answers(host, port):
    """{(folder, command): [untagged lines]} from one server (tags equal
    on both sides, so ESEARCH's TAG compares too)."""
    m = imaplib.IMAP4(host, port, timeout=30)
    m.login(USER, PASSWORD)
    fill(m, "INBOX")
    fill(m, "Threads", sort_set=False)
    m.logout()
    s = socket.create_connection((host, port), timeout=30)
    f = s.makefile("rb")
    f.readline()
    n = 0
    out = {}

    def cmd(text):
        nonlocal n
        n += 1
        s.sendall(f"t{n} {text}\r\n".encode())
        lines = []
        while True:
            line = f.readline().decode().rstrip("\r\n")
            assert line, text
            if line.startswith(f"t{n} "):
                return lines, line
            lines.append(line)

    cmd(f"LOGIN {USER} {PASSWORD}")
    folder = None
    for box, text in COMMANDS:
        if box != folder:
            cmd(f"SELECT {box}")
            folder = box
        lines, tagged = cmd(text)
        assert tagged.split()[1] == "OK", (text, tagged)
        # Dovecot ends an empty THREAD answer with a space ("* THREAD "),
        # which RFC 5256's thread-data ("THREAD" [SP 1*thread-list]) does
        # not have; Petrel sends "* THREAD". The comparison ignores it.
        out[(box, text)] = [line.rstrip(" ") for line in lines
                            if not line.startswith("* OK") and "EXISTS" not in line]
    cmd("LOGOUT")
    s.close()
    return out


def test_sort_thread_answers_match_dovecot(petreld, dovecot, workroot, tmp_path):  # noqa: F811
    home_root = workroot / "home"
    uid_, gid_ = _nobody()
    os.chown(home_root, uid_, gid_)
    dv = dovecot().start()
    try:
        expected = answers("127.0.0.1", dv.port)
    finally:
        dv.stop()
    assert not dv.errors(), "\n".join(dv.errors())
    assert len(SORT_SET) == 5 and len(THREAD_SET) == 8
    assert len(set(COMMANDS)) == len(COMMANDS)  # one answer per command
    # Dovecot really answered (not an empty run): the tree has its shape.
    assert expected[("Threads", "THREAD REFERENCES UTF-8 ALL")] != ["* THREAD"]

    d = petreld(petrel_mail_config(tmp_path / "petrel-home", tmp_path))
    got = answers(*listen_addr(d, "imap"))
    differing = {k: {"petrel": got[k], "dovecot": v} for k, v in expected.items() if got[k] != v}
    assert not differing, differing
