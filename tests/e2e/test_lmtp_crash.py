"""kill -9 the LMTP server while it delivers, again and again.

Each round starts petreld (auth + lmtp + imap, mail.fsync: always) on the
same mail home, checks the mailboxes, lets six smtplib.LMTP clients deliver
uniquely numbered messages to 20 users (one or two recipients each, some to
a detail folder) and kills the daemon with SIGKILL at a random moment.
After every restart:

- every message that got its 250 is in the recipient's mailbox: in the
  right folder, exactly once (on disk, and in the index: IMAP sees it);
- no message is there twice, acknowledged or not (one cut short before its
  250 is there once or not at all);
- no file is left in any tmp/ directory, and nothing in cur/ is partial
  (every file is a whole message: trace headers + body + its end marker).

Rounds: PETREL_LMTP_CRASH_ROUNDS (default 15)."""

import os
import random
import re
import smtplib
import threading
import time

from test_lmtp import deliver, imap_login, lmtp_overrides

ROUNDS = int(os.environ.get("PETREL_LMTP_CRASH_ROUNDS", "15"))
USERS = [f"u{i}" for i in range(1, 21)]
ID_RE = re.compile(rb"Message-ID: <crash-(\d+)@test>")


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.serial = 0
        self.acked = {}  # n -> set of (user, folder)
        self.sent = {}   # n -> set of (user, folder) asked for
        self.errors = []  # answers other than 250 (there should be none)

    def next(self):
        with self.lock:
            self.serial += 1
            return self.serial


def body(n, rnd):
    filler = b"x" * rnd.randrange(0, 6000)
    return (f"Subject: crash {n}\r\nMessage-ID: <crash-{n}@test>\r\n\r\n".encode()
            + filler + f"\r\nend of {n}\r\n".encode())


def sender(d, state, stop, seed):
    rnd = random.Random(seed)
    while not stop.is_set():
        try:
            c = smtplib.LMTP("127.0.0.1", int(d.config["lmtp"]["listen"][0].rsplit(":", 1)[1]),
                             timeout=10)
            c.ehlo("crash.test")
        except OSError:
            return
        try:
            while not stop.is_set():
                n = state.next()
                targets = []
                for user in rnd.sample(USERS, rnd.choice((1, 1, 2))):
                    folder = "Work" if rnd.random() < 0.3 else "INBOX"
                    targets.append((user, folder))
                rcpts = {(f"{u}+Work@example.org" if f == "Work" else f"{u}@example.org"): (u, f)
                         for u, f in targets}
                with state.lock:
                    state.sent[n] = set(targets)
                res = deliver(c, list(rcpts), msg=body(n, rnd))
                ok = {rcpts[r] for r, (code, _) in res.items() if code == 250}
                with state.lock:
                    state.acked[n] = ok
                    if len(ok) != len(res):
                        state.errors.append(res)
        except (OSError, smtplib.SMTPException):
            return  # the server went away mid-conversation


def scan(home):
    """{n: [(user, folder, path)]} of every message file, and the tmp/ files."""
    found, tmp = {}, []
    for user in USERS:
        root = home / user / "Maildir"
        for folder, d in (("INBOX", root), ("Work", root / ".Work")):
            for sub in ("cur", "new"):
                p = d / sub
                if not p.is_dir():
                    continue
                for f in p.iterdir():
                    data = f.read_bytes()
                    m = ID_RE.search(data)
                    assert m, f"not a whole message: {f}"
                    n = int(m.group(1))
                    assert data.endswith(f"\r\nend of {n}\r\n".encode()), f"partial: {f}"
                    assert data.startswith(b"Return-Path: <"), f
                    found.setdefault(n, []).append((user, folder, f))
            t = d / "tmp"
            if t.is_dir():
                tmp.extend(t.iterdir())
    return found, tmp


def check(d, home, state):
    assert state.errors == []
    found, tmp = scan(home)
    assert tmp == [], f"left in tmp/: {tmp[:5]}"
    for n, places in found.items():
        where = [(u, f) for u, f, _ in places]
        assert len(where) == len(set(where)), f"message {n} stored twice: {places}"
        assert set(where) <= state.sent[n], (n, where, state.sent[n])
    for n, ok in state.acked.items():
        have = {(u, f) for u, f, _ in found.get(n, [])}
        assert ok <= have, f"acknowledged message {n} missing for {ok - have}"
    # The index agrees with the files: IMAP counts what is on disk.
    for user in USERS[:6]:
        m = imap_login(d, user, "pw")
        for folder in ("INBOX", "Work"):
            typ, data = m.select(folder)
            assert typ == "OK", data
            on_disk = sum(1 for places in found.values()
                          for u, f, _ in places if u == user and f == folder)
            assert int(data[0]) == on_disk, (user, folder, data, on_disk)
        m.logout()
    return found


def test_kill_9_during_deliveries(petreld, tmp_path):
    home = tmp_path / "mail"
    passwd = tmp_path / "passwd-crash"
    passwd.write_text("".join(f"{u}:{{PLAIN}}pw:1000:1000\n" for u in USERS))
    rnd = random.Random(int(os.environ.get("PETREL_LMTP_CRASH_SEED", "0")) or None)
    state = State()

    def start():
        cfg = lmtp_overrides(tmp_path, {"delivery_threads": 4}, pop3=False)
        cfg["auth"]["passdb"]["path"] = str(passwd)
        return petreld(cfg)

    d = start()
    for user in USERS:
        m = imap_login(d, user, "pw")
        assert m.create("Work")[0] == "OK"
        m.logout()
    kills = 0
    for _ in range(ROUNDS):
        check(d, home, state)
        stop = threading.Event()
        threads = [threading.Thread(target=sender, args=(d, state, stop, rnd.random()))
                   for _ in range(6)]
        for t in threads:
            t.start()
        time.sleep(rnd.uniform(0.3, 1.5))
        d.proc.kill()
        d.wait()
        kills += 1
        stop.set()
        for t in threads:
            t.join(30)
        d = start()
    found = check(d, home, state)
    acked = sum(len(v) for v in state.acked.values())
    unacked = sum(1 for n, places in found.items() if n not in state.acked)
    print(f"{kills} kills, {len(state.acked)} messages acknowledged ({acked} deliveries), "
          f"{len(found)} on disk, {unacked} stored without a 250 (cut short)")
    assert len(state.acked) > kills * 5
