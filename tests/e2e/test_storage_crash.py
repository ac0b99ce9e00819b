"""kill -9 a petreld that is appending and expunging, 100 times.

Each round starts petreld on the same mail home, checks the folder, sends a
short burst of appends (some \\Deleted) and expunges from two threads, and
kills the daemon with SIGKILL at a random moment of the burst. After every
restart:

- the folder opens; every acknowledged append is there under its UID with
  its size (index/dump and the file on disk); no acknowledged expunge came
  back; nothing is listed or stored twice;
- the index lists exactly the message files in cur/ and new/ (a file whose
  append was cut short is either indexed by the opening sync or not in
  cur/ at all), and files left in tmp/ never show up as messages;
- index/rebuild agrees with the index: every scanned file keeps its UID
  (uids_preserved == messages, uids_assigned == 0, no orphans) and the UIDs
  afterwards are the same; on every other round the rebuild is the first
  request after the restart, so it sees the index as the killed daemon left
  it: it may assign UIDs only to files whose append was not acknowledged;
- dovecot-uidlist maps the same UIDs to the same files.

Rounds: PETREL_STORAGE_CRASH_ROUNDS (default 100); the whole test stays
well under 90 s.
"""

import os
import random
import threading
import time

from mailstore import (ApiError, MailApi, folder_dir, mail_config, message_files,
                       parse_filename, read_uidlist_live, tmp_files)

ROUNDS = int(os.environ.get("PETREL_STORAGE_CRASH_ROUNDS", "100"))
FOLDER = "Crash"


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.acked = {}          # uid -> (size, token, deleted)
        self.expunged = set()    # acknowledged expunges
        self.serial = 0
        self.unacked_appends = 0  # appends cut short in the last burst

    def token(self):
        with self.lock:
            self.serial += 1
            return f"m{self.serial}"


def burst(api, state, stop, seed):
    rnd = random.Random(seed)
    deleted = [u for u, (_, _, d) in state.acked.items() if d and u not in state.expunged]
    while not stop.is_set():
        try:
            r = rnd.random()
            if r < 0.75:
                token = state.token()
                body = (f"Subject: {token}\r\nX-Token: {token}\r\n\r\n".encode()
                        + os.urandom(rnd.randrange(0, 4000)).hex().encode())
                dele = rnd.random() < 0.3
                try:
                    uid = api.append(FOLDER, body,
                                     flags=["\\Deleted"] if dele else ["\\Seen"])
                except (OSError, ApiError):
                    with state.lock:
                        state.unacked_appends += 1
                    raise
                with state.lock:
                    assert uid not in state.acked, f"uid {uid} acknowledged twice"
                    state.acked[uid] = (len(body), token, dele)
                if dele:
                    deleted.append(uid)
            elif r < 0.92 and deleted:
                uids = deleted[:3]
                del deleted[:3]
                res = api.expunge(FOLDER, uids=uids)
                with state.lock:
                    state.expunged.update(res["expunged"])
            else:
                res = api.expunge(FOLDER)
                with state.lock:
                    state.expunged.update(res["expunged"])
        except (OSError, ApiError):
            # The daemon died under the request: not acknowledged.
            return


def check(api, fdir, state, rebuild_first=False):
    """The folder after a restart (no writer running). Returns the dump.
    With `rebuild_first`, index/rebuild is the first request: it sees the
    index as the killed daemon left it, so it may give UIDs only to files
    whose append was not acknowledged, and drop only \\Deleted messages whose
    expunge reply was lost."""
    if rebuild_first:
        rb = api.rebuild(FOLDER)
        assert rb["uids_assigned"] <= state.unacked_appends, rb
    dump = api.dump(FOLDER)
    records = dump["records"]
    uids = [r["uid"] for r in records]
    assert all(a < b for a, b in zip(uids, uids[1:])), "UIDs not strictly increasing"
    by_uid = {r["uid"]: r for r in records}
    for uid, (size, token, deleted) in state.acked.items():
        if uid in state.expunged:
            assert uid not in by_uid, f"expunged uid {uid} is back"
            continue
        if deleted and uid not in by_uid:
            continue  # an expunge whose reply was lost took it
        assert uid in by_uid, f"acknowledged uid {uid} ({token}) lost"
        assert by_uid[uid]["size"] == size, (uid, by_uid[uid], size)
    files = message_files(fdir)  # raises when a message is stored twice
    bases = [parse_filename(r["filename"])[0] for r in records]
    assert len(set(bases)) == len(bases), "one file listed under two UIDs"
    assert set(bases) == set(files), (
        "index and cur/+new/ differ: not indexed %s, missing %s"
        % (sorted(set(files) - set(bases))[:5], sorted(set(bases) - set(files))[:5]))
    for r in records:
        sub, name = files[parse_filename(r["filename"])[0]]
        assert os.path.getsize(fdir / sub / name) == r["size"], r
    leftovers = {parse_filename(n)[0] for n in tmp_files(fdir)}
    assert not leftovers & set(bases), "a tmp/ file shows up as a message"
    assert dump["next_uid"] > max(state.acked, default=0)

    rb = api.rebuild(FOLDER)
    assert rb["scanned"] == len(records), rb
    assert rb["uids_preserved"] == len(records) and rb["uids_assigned"] == 0, rb
    assert rb["orphans_dropped"] == 0, rb
    after = api.dump(FOLDER)
    assert [r["uid"] for r in after["records"]] == uids
    _, entries = read_uidlist_live(fdir)
    assert entries == {r["uid"]: parse_filename(r["filename"])[0] for r in after["records"]}
    return dump


def test_kill_9_while_writing(petreld, tmp_path):
    home = tmp_path / "home"
    cfg = mail_config(home)
    rnd = random.Random(int(os.environ.get("PETREL_STORAGE_CRASH_SEED", "0")) or None)
    state = State()
    fdir = folder_dir(home / "u1" / "Maildir", FOLDER)
    deadline = time.monotonic() + 85
    created = False
    rounds = 0
    for rounds in range(1, ROUNDS + 1):
        d = petreld(cfg)
        api = MailApi(d.backend, timeout=10)
        if not created:
            api.create(FOLDER)
            created = True
        check(api, fdir, state, rebuild_first=rounds % 2 == 0)
        state.unacked_appends = 0
        stop = threading.Event()
        threads = [threading.Thread(target=burst, args=(api, state, stop, rnd.random()))
                   for _ in range(2)]
        for t in threads:
            t.start()
        time.sleep(rnd.uniform(0.02, 0.25))
        d.proc.kill()
        d.wait()
        stop.set()
        for t in threads:
            t.join(30)
        if time.monotonic() > deadline:
            break
    assert rounds >= min(ROUNDS, 50), f"only {rounds} rounds in time"
    d = petreld(cfg)
    api = MailApi(d.backend)
    dump = check(api, fdir, state)
    print(f"{rounds} kills, {len(state.acked)} acknowledged appends, "
          f"{len(state.expunged)} acknowledged expunges, {len(dump['records'])} messages, "
          f"{len(tmp_files(fdir))} tmp/ leftovers")
    assert len(state.acked) > rounds
