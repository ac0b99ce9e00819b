"""A model of one IMAP session's view of its selected mailbox, fed every
line the server sends, that reports each response RFC 3501 (with RFC 9051
and RFC 7162 where they apply) does not allow at that point. It knows
nothing of Petrel: it is the client's side of the contract.

What it holds per session: the message count, the UID at each sequence
number where the server has told it (FETCH UID, SEARCH/UID answers are
not needed), the keywords announced in FLAGS, the command in progress and
the commands sent but not completed (pipelining), and whether BYE was
seen. What it checks (each a `Violation.kind`):

  expunge-during-fetch-store-search  RFC 3501 7.4.1: no EXPUNGE while a
        FETCH, STORE or SEARCH (or UID form) is in progress, and with
        pipelining none while any such command is still uncompleted
        (5.5: the client cannot tell which command it belongs to)
  seq-out-of-range     EXPUNGE/FETCH for a number above the count, or 0
  exists-shrank        EXISTS below the count without EXPUNGEs (7.3.1)
  uid-order            UIDs not strictly ascending with sequence numbers,
        or a message's UID changing (2.3.1.1)
  keyword-unannounced  a FETCH FLAGS keyword never announced in FLAGS
        (7.2.6: FLAGS lists the flags "applicable" to the mailbox)
  after-bye            anything but the tagged completion after * BYE
        (7.1.5)
  fetch-failed         a FETCH/UID FETCH completed with NO (RFC 2180 4.1
        allows it; clients take it badly, and Dovecot never does it on
        the same load: the checker counts it so a run can require none)
  search-out-of-range  a SEARCH result above the count
  recent-above-exists  * n RECENT with n above the message count (7.3.2:
        the number of messages with \\Recent set)
  store-flags-wrong    the last FETCH FLAGS a non-silent STORE sent for a
        message it stored does not hold the result of the STORE (6.4.6:
        "the updated value"): +FLAGS missing one of its flags, -FLAGS
        keeping one, FLAGS not exactly its list (\\Recent aside)
  recent-twice         (across sessions, `recent_seen_twice`) one UID shown
        with \\Recent to two sessions (3501 2.3.2: "this session is the
        first session to have been notified")
  bad-response         a tagged BAD for a command the driver built as valid
"""

import re
from dataclasses import dataclass, field

QUIET_COMMANDS = {"FETCH", "STORE", "SEARCH", "UID FETCH", "UID STORE", "UID SEARCH"}
SYSTEM_FLAGS = {"\\seen", "\\answered", "\\flagged", "\\deleted", "\\draft", "\\recent"}


@dataclass
class Violation:
    kind: str
    line: bytes
    detail: str = ""


@dataclass
class SessionModel:
    """Feed it with `sent(tag, command_name)` for every command written and
    `received(line)` for every line read (literals already folded into
    their line by the caller, as `IMAP.readline` plus literal bytes)."""

    name: str = "s"
    exists: int = 0
    uids: list = field(default_factory=list)  # uid or None per sequence number
    keywords: set = field(default_factory=set)  # announced, lower case
    pending: dict = field(default_factory=dict)  # tag -> command name, in send order
    bye: bool = False
    selected: bool = False
    violations: list = field(default_factory=list)
    completed: dict = field(default_factory=dict)  # tag -> (status, text)
    recent: int = 0
    recent_uids: set = field(default_factory=set)  # UIDs seen with \Recent
    # tag -> (kind, flags, seq or uid set, uid?); the STORE's own FETCHes
    stores: dict = field(default_factory=dict)
    store_seen: dict = field(default_factory=dict)  # tag -> {uid or seq: flags}

    def violate(self, kind, line, detail=""):
        self.violations.append(Violation(kind, line, detail))

    # ---- what the client does ----

    def sent(self, tag, command, args=""):
        """`args`: the rest of the command line, for the checks on STORE."""
        self.pending[tag] = command.upper()
        m = re.match(r"(\S+) ([+-]?FLAGS)(\.SILENT)? \(([^)]*)\)$", args.strip(), re.I)
        if command.upper() in ("STORE", "UID STORE") and m and not m.group(3):
            flags = {f.lower() for f in m.group(4).split()}
            self.stores[tag] = (m.group(2).upper(), flags, m.group(1),
                                command.upper() == "UID STORE")
            self.store_seen[tag] = {}

    def selecting(self):
        """A SELECT/EXAMINE was sent: the view starts over at its reply."""
        self.exists = 0
        self.uids = []
        self.keywords = set()
        self.selected = True

    # ---- what the server says ----

    def quiet_in_progress(self):
        return any(c in QUIET_COMMANDS for c in self.pending.values())

    def received(self, line):
        text = line.rstrip(b"\r\n")
        if self.bye and not self._is_tagged(text):
            self.violate("after-bye", text)
            return
        if text.startswith(b"* "):
            self._untagged(text)
        elif text.startswith(b"+"):
            pass
        else:
            self._tagged(text)

    def _is_tagged(self, text):
        tag = text.split(b" ", 1)[0].decode(errors="replace")
        return tag in self.pending

    def _tagged(self, text):
        parts = text.split(b" ", 2)
        tag = parts[0].decode(errors="replace")
        status = parts[1].decode(errors="replace").upper() if len(parts) > 1 else ""
        command = self.pending.pop(tag, None)
        if command is None:
            self.violate("bad-response", text, "tagged reply to no command")
            return
        self.completed[tag] = (status, parts[2] if len(parts) > 2 else b"")
        if tag in self.stores:
            self._store_done(tag, status, text)
        if status == "BAD":
            self.violate("bad-response", text, command)
        if status == "NO" and command in ("FETCH", "UID FETCH"):
            self.violate("fetch-failed", text, command)

    def _untagged(self, text):
        m = re.match(rb"\* (\d+) (EXPUNGE|EXISTS|RECENT|FETCH)\b(.*)$", text, re.S)
        if m:
            n = int(m.group(1))
            kind = m.group(2)
            if kind == b"EXPUNGE":
                self._expunge(n, text)
            elif kind == b"EXISTS":
                self._exists(n, text)
            elif kind == b"FETCH":
                self._fetch(n, m.group(3), text)
            elif kind == b"RECENT":
                if n > self.exists:
                    self.violate("recent-above-exists", text, f"count {self.exists}")
                self.recent = n
            return
        if text.startswith(b"* FLAGS "):
            inner = text[len(b"* FLAGS "):].strip(b"()")
            self.keywords = {w.lower() for w in inner.decode(errors="replace").split()
                             if w.lower() not in SYSTEM_FLAGS}
            return
        if text.startswith(b"* OK [PERMANENTFLAGS"):
            return
        if text.startswith(b"* BYE"):
            self.bye = True
            return
        m = re.match(rb"\* SEARCH((?: \d+)*)", text)
        if m and self.pending:
            command = list(self.pending.values())[0]
            if command == "SEARCH":
                for n in m.group(1).split():
                    if int(n) > self.exists or int(n) == 0:
                        self.violate("search-out-of-range", text)
                        break

    def _expunge(self, n, text):
        if self.quiet_in_progress():
            self.violate("expunge-during-fetch-store-search", text,
                         ",".join(self.pending.values()))
        if n < 1 or n > self.exists:
            self.violate("seq-out-of-range", text, f"count {self.exists}")
            return
        del self.uids[n - 1]
        self.exists -= 1
        self._expunge_adjusts_store(n)

    def _exists(self, n, text):
        if n < self.exists:
            self.violate("exists-shrank", text, f"count {self.exists}")
            self.uids = self.uids[:n]
        else:
            self.uids.extend([None] * (n - self.exists))
        self.exists = n

    def _fetch(self, n, rest, text):
        if n < 1 or n > self.exists:
            self.violate("seq-out-of-range", text, f"count {self.exists}")
            return
        m = re.search(rb"\bUID (\d+)", rest)
        if m:
            uid = int(m.group(1))
            known = self.uids[n - 1]
            if known is not None and known != uid:
                self.violate("uid-order", text, f"seq {n} had uid {known}")
            self.uids[n - 1] = uid
            before = [u for u in self.uids[:n - 1] if u is not None]
            after = [u for u in self.uids[n:] if u is not None]
            if (before and before[-1] >= uid) or (after and after[0] <= uid):
                self.violate("uid-order", text, f"seq {n} uid {uid}")
        m = re.search(rb"\bFLAGS \(([^)]*)\)", rest)
        if m:
            flags = m.group(1).decode(errors="replace").split()
            for flag in flags:
                low = flag.lower()
                if low not in SYSTEM_FLAGS and low not in self.keywords:
                    self.violate("keyword-unannounced", text, flag)
            uid = self.uids[n - 1]
            if uid is not None and "\\recent" in {f.lower() for f in flags}:
                self.recent_uids.add(uid)
            self._store_fetch(n, uid, {f.lower() for f in flags}, text)

    # ---- a STORE's own FETCH responses ----

    @staticmethod
    def _in_set(number, spec, star):
        for part in spec.split(","):
            a, _, b = part.partition(":")
            lo = star if a == "*" else int(a)
            hi = lo if not b else (star if b == "*" else int(b))
            if min(lo, hi) <= number <= max(lo, hi):
                return True
        return False

    def _store_fetch(self, n, uid, flags, text):
        # Only when the STORE is the one command in progress: with others
        # pipelined, a FETCH may answer them.
        if len(self.pending) != 1:
            return
        tag = next(iter(self.pending))
        if tag not in self.stores:
            return
        _, _, spec, by_uid = self.stores[tag]
        if by_uid:
            if uid is None or not self._in_set(uid, spec, 1 << 32):
                return
            key = uid
        else:
            if not self._in_set(n, spec, self.exists):
                return
            key = n
        self.store_seen[tag][key] = (flags, text)

    def _store_done(self, tag, status, text):
        kind, wanted, _, _ = self.stores.pop(tag)
        seen = self.store_seen.pop(tag, {})
        if status != "OK":
            return
        for flags, line in seen.values():
            have = flags - {"\\recent"}
            want = wanted - {"\\recent"}
            if kind == "+FLAGS" and not want <= have:
                self.violate("store-flags-wrong", line, f"+FLAGS {sorted(want - have)} missing")
            elif kind == "-FLAGS" and want & have:
                self.violate("store-flags-wrong", line, f"-FLAGS {sorted(want & have)} kept")
            elif kind == "FLAGS" and want != have:
                self.violate("store-flags-wrong", line, f"FLAGS {sorted(want)}")

    def _expunge_adjusts_store(self, n):
        """Sequence keys of STOREs in progress move down past an EXPUNGE."""
        for tag, seen in self.store_seen.items():
            if self.stores[tag][3]:
                continue
            self.store_seen[tag] = {(k - 1 if k > n else k): v for k, v in seen.items()
                                    if k != n}


def recent_seen_twice(models):
    """UIDs that more than one session was shown with \\Recent (one folder)."""
    owner, twice = {}, []
    for mo in models:
        for uid in mo.recent_uids:
            if uid in owner:
                twice.append((uid, owner[uid], mo.name))
            owner[uid] = mo.name
    return twice
