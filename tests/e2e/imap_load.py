"""Concurrent IMAP sessions on one folder, each a random mix of APPEND,
STORE, EXPUNGE, COPY, MOVE, FETCH, SEARCH, NOOP and IDLE (some pipelined),
every line the server sends checked by an imap_model.SessionModel. Used by
tests/e2e/test_imap_conformance.py (short runs) and
bench/imap-conformance.py (long runs); speaks plain sockets, so what is
checked is exactly what a client would read."""

import random
import re
import socket
import threading
import time

from imap_model import SessionModel

KEYWORDS = ["$Label1", "$Label2", "$Work", "$Todo", "Project-X", "$Junk", "NonJunk", "$later"]


class Connection:
    def __init__(self, addr, timeout=30):
        self.sock = socket.create_connection(addr, timeout=timeout)
        self.f = self.sock.makefile("rb")

    def readline(self):
        """One logical response line with its literals inlined."""
        line = self.f.readline()
        if not line:
            raise ConnectionError("connection closed")
        out = line
        while True:
            m = re.search(rb"\{(\d+)\+?\}\r\n$", line)
            if not m:
                return out
            out += self.f.read(int(m.group(1)))
            line = self.f.readline()
            if not line:
                raise ConnectionError("connection closed in a literal")
            out += line

    def send(self, data):
        self.sock.sendall(data)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class Driver:
    """One session: logs in, selects `folder`, then runs random commands."""

    def __init__(self, addr, user, password, folder, rng, name, other="Other"):
        self.conn = Connection(addr)
        self.model = SessionModel(name=name)
        self.rng = rng
        self.folder = folder
        self.other = other
        self.n = 0
        self.commands = 0
        greeting = self.conn.readline()
        assert greeting.startswith(b"* OK"), greeting
        self.run(f"LOGIN {user} {password}")
        self.model.selecting()
        self.run(f"SELECT {folder}")

    def tag(self):
        self.n += 1
        return f"{self.model.name}.{self.n}"

    def send(self, command):
        tag = self.tag()
        words = command.split(" ", 2)
        n = 2 if words[0] == "UID" else 1
        self.model.sent(tag, " ".join(words[:n]), " ".join(command.split(" ")[n:]))
        self.conn.send(f"{tag} {command}\r\n".encode())
        self.commands += 1
        return tag

    def wait(self, tags, lines=None):
        """Reads until every tag in `tags` is completed (every line into
        `lines` when given)."""
        left = set(tags)
        while left:
            line = self.conn.readline()
            self.model.received(line)
            if lines is not None:
                lines.append(line)
            t = line.split(b" ", 1)[0].decode(errors="replace")
            left.discard(t)

    def run(self, command):
        tag = self.send(command)
        self.wait([tag])
        return self.model.completed.pop(tag)

    # ---- RFC 5267 contexts ----

    # (live command, the same without RETURN for the final check)
    CONTEXTS = [("UID SEARCH RETURN (UPDATE ALL) FLAGGED", "UID SEARCH FLAGGED"),
                ("SEARCH RETURN (UPDATE ALL) UNSEEN", "SEARCH UNSEEN"),
                ("UID SORT RETURN (UPDATE ALL) (SUBJECT) UTF-8 UNDELETED",
                 "UID SORT (SUBJECT) UTF-8 UNDELETED")]

    def open_context(self, live):
        tag = self.send(live)
        self.wait([tag])
        status, _ = self.model.completed.pop(tag)
        assert status == "OK", (live, status)
        return tag

    def open_contexts(self):
        self.context_tags = [self.open_context(live) for live, _ in self.CONTEXTS]

    def renew_context(self):
        """CANCELUPDATE one context and start it again under a new tag: an
        update for the old tag after the OK is a violation."""
        k = self.rng.randrange(len(self.CONTEXTS))
        tag = self.tag()
        self.model.sent(tag, "CANCELUPDATE")
        self.model.cancel(tag, [self.context_tags[k]])
        self.conn.send(f'{tag} CANCELUPDATE "{self.context_tags[k]}"\r\n'.encode())
        self.commands += 1
        self.wait([tag])
        status, _ = self.model.completed.pop(tag)
        assert status == "OK", status
        self.context_tags[k] = self.open_context(self.CONTEXTS[k][0])

    def check_contexts(self, timeout=5):
        """Once nobody changes the folder any more: each live result, kept
        by the model from the updates alone, equals a fresh answer (NOOPs
        until the watch has brought every change)."""
        deadline = time.monotonic() + timeout
        while True:
            self.run("NOOP")
            wrong = []
            for (_, fresh), tag in zip(self.CONTEXTS, self.context_tags):
                lines = []
                t = self.send(fresh)
                self.wait([t], lines)
                self.model.completed.pop(t)
                answer = [x for x in lines if x.startswith((b"* SEARCH", b"* SORT"))]
                got = [int(x) for x in answer[0].split()[2:]] if answer else []
                have = self.model.contexts.get(tag, {}).get("items")
                if have != got:
                    wrong.append((fresh, have, got))
            if not wrong or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        for fresh, have, got in wrong:
            self.model.violate("context-final", fresh.encode(), f"kept {have}, fresh {got}")
        self.model.contexts_checked += len(self.CONTEXTS) - len(wrong)

    # ---- the mix ----

    def seqset(self):
        n = self.model.exists
        if n == 0:
            return None
        a = self.rng.randint(1, n)
        r = self.rng.random()
        if r < 0.4:
            return str(a)
        if r < 0.8:
            return f"{a}:{min(n, a + self.rng.randint(1, 5))}"
        return "1:*"

    def flags(self):
        pool = ["\\Seen", "\\Flagged", "\\Answered", "\\Deleted"] + KEYWORDS
        return "(" + " ".join(self.rng.sample(pool, self.rng.randint(1, 3))) + ")"

    def append(self):
        body = (f"From: load{self.rng.randint(1, 9)}@example.org\r\n"
                f"Subject: message {self.rng.randint(1, 10**6)}\r\n\r\n"
                + "x" * self.rng.randint(10, 2000) + "\r\n").encode()
        tag = self.tag()
        self.model.sent(tag, "APPEND")
        flags = self.flags() + " " if self.rng.random() < 0.5 else ""
        self.conn.send(f"{tag} APPEND {self.folder} {flags}{{{len(body)}+}}\r\n".encode()
                       + body + b"\r\n")
        self.commands += 1
        self.wait([tag])

    def idle(self):
        tag = self.send("IDLE")
        line = self.conn.readline()
        self.model.received(line)
        if not line.startswith(b"+"):
            if tag in self.model.pending:  # untagged lines came first
                self.wait([tag])
            return
        # Updates sent while idling wait in the socket and are read (and
        # checked) after DONE, in the order they came.
        time.sleep(self.rng.uniform(0.05, 0.3))
        self.conn.send(b"DONE\r\n")
        self.wait([tag])

    def step(self):
        if getattr(self, "context_tags", None) and self.rng.random() < 0.03:
            self.renew_context()
            return
        r = self.rng.random()
        seq = self.seqset()
        if r < 0.15 or seq is None:
            self.append()
        elif r < 0.35:
            op = self.rng.choice(["+FLAGS", "-FLAGS", "+FLAGS.SILENT", "FLAGS"])
            self.run(f"STORE {seq} {op} {self.flags()}")
        elif r < 0.42:
            self.run(f"UID STORE 1:* +FLAGS ({self.rng.choice(KEYWORDS)})")
        elif r < 0.50:
            self.run("EXPUNGE")
        elif r < 0.55:
            self.run(f"COPY {seq} {self.other}")
        elif r < 0.60:
            self.run(f"MOVE {seq} {self.other}")
        elif r < 0.75:
            items = self.rng.choice(["(FLAGS UID)", "(UID RFC822.SIZE FLAGS)",
                                     "(BODY.PEEK[HEADER.FIELDS (SUBJECT)])", "(BODY.PEEK[])",
                                     "(ENVELOPE)"])
            self.run(f"FETCH {seq} {items}")
        elif r < 0.80:
            self.run(f"UID FETCH 1:* (FLAGS)")
        elif r < 0.87:
            self.run(self.rng.choice(["SEARCH ALL", "SEARCH FLAGGED", "SEARCH UNSEEN",
                                      f"SEARCH KEYWORD {self.rng.choice(KEYWORDS)}",
                                      "UID SEARCH DELETED"]))
        elif r < 0.92:
            # Pipelined: a STORE and a FETCH sent together, then a NOOP.
            tags = [self.send(f"STORE {seq} +FLAGS ({self.rng.choice(KEYWORDS)})"),
                    self.send(f"FETCH {seq} (FLAGS)"), self.send("NOOP")]
            self.wait(tags)
        elif r < 0.96:
            self.idle()
        else:
            self.run("NOOP")

    def logout(self):
        tag = self.send("LOGOUT")
        try:
            self.wait([tag])
        except ConnectionError:
            pass
        self.conn.close()


def run_sessions(addr, user, password, sessions, seconds, seed=1, folder="INBOX",
                 other="Other", contexts=False):
    """Runs `sessions` drivers for `seconds`; returns (models, commands, errors).
    With `contexts`, each session keeps three live RFC 5267 contexts, and
    once all have stopped each checks them against fresh answers."""
    drivers, errors = [], []
    barrier = threading.Barrier(sessions)
    lock = threading.Lock()
    models = []
    total = [0]

    def one(i):
        rng = random.Random(seed * 1000 + i)
        try:
            d = Driver(addr, user, password, folder, rng, f"s{i}", other=other)
        except Exception as e:  # noqa: BLE001 - reported
            with lock:
                errors.append(f"s{i} start: {e!r}")
            barrier.abort()
            return
        with lock:
            drivers.append(d)
            models.append(d.model)
        deadline = time.monotonic() + seconds
        try:
            if contexts:
                d.open_contexts()
            while time.monotonic() < deadline:
                d.step()
            if contexts:
                barrier.wait(timeout=60)
                d.check_contexts()
            d.logout()
        except Exception as e:  # noqa: BLE001 - reported
            with lock:
                errors.append(f"s{i}: {e!r}")
            barrier.abort()
        with lock:
            total[0] += d.commands

    threads = [threading.Thread(target=one, args=(i,)) for i in range(sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return models, total[0], errors
