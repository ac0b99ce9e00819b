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

Live contexts (RFC 5267, SEARCH/SORT RETURN (UPDATE ALL ...)): the model
keeps each one's result from its ALL and every ADDTO/REMOVEFROM, and checks
  context-unknown      an update for a tag with no live context (never
        created, refused with NOUPDATE, or cancelled)
  context-remove       REMOVEFROM of a number not in the result, or at a
        position that does not hold it (4.3.4)
  context-add          ADDTO of a number already in the result, a sequence
        number above the count (ADDTO comes after EXISTS, 4.3.3) or a
        position past the end
  context-expunged     an EXPUNGE of a message still in a result: its
        REMOVEFROM must come first (4.3.4)
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
    # RFC 5267: tag -> {"uid": bool, "sorted": bool, "items": [numbers] or None}
    contexts: dict = field(default_factory=dict)
    context_requests: dict = field(default_factory=dict)  # tag -> (uid, sorted), pending
    context_updates: int = 0
    cancelling: dict = field(default_factory=dict)  # CANCELUPDATE tag -> context tags
    contexts_checked: int = 0

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
        r = re.match(r"RETURN \(([^)]*)\)", args.strip(), re.I)
        if command.upper() in ("SEARCH", "UID SEARCH", "SORT", "UID SORT") and r and \
                "UPDATE" in r.group(1).upper().split():
            self.context_requests[tag] = (command.upper().startswith("UID"),
                                          command.upper().endswith("SORT"),
                                          "ALL" in r.group(1).upper().split())

    def selecting(self):
        """A SELECT/EXAMINE was sent: the view starts over at its reply."""
        self.exists = 0
        self.uids = []
        self.keywords = set()
        self.selected = True
        self.contexts = {}  # RFC 5267 4.3: updates end with the selection

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
        request = self.context_requests.pop(tag, None)
        if request is not None and status == "OK" and tag not in self.contexts:
            # No ALL asked for: live, but the model cannot follow its content.
            self.contexts[tag] = {"uid": request[0], "sorted": request[1], "items": None}
        if command == "CANCELUPDATE" and status == "OK":
            for t in self.cancelling.pop(tag, []):
                self.contexts.pop(t, None)
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
        m = re.match(rb'\* ESEARCH \(TAG "([^"]*)"\)( UID)?(.*)$', text)
        if m:
            self._esearch(m.group(1).decode(errors="replace"), m.group(3), text)
            return
        m = re.match(rb'\* NO \[NOUPDATE "([^"]*)"\]', text)
        if m:
            self.context_requests.pop(m.group(1).decode(errors="replace"), None)
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
        uid = self.uids[n - 1]
        for tag, ctx in self.contexts.items():
            items = ctx["items"]
            if items is None:
                continue
            if (n if not ctx["uid"] else uid) in items:
                self.violate("context-expunged", text, f"{tag} still holds it")
                items.remove(n if not ctx["uid"] else uid)
            if not ctx["uid"]:
                ctx["items"] = [x - 1 if x > n else x for x in items]
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

    # ---- RFC 5267 contexts ----

    @staticmethod
    def _expand(spec):
        out = []
        for part in spec.split(","):
            a, _, b = part.partition(":")
            lo, hi = int(a), int(b or a)
            out.extend(range(min(lo, hi), max(lo, hi) + 1))
        return out

    def cancel(self, tag, tags):
        """The client sent CANCELUPDATE `tags` as `tag`: updates may still
        come until its OK, or stop at any point before it, so the contexts
        are no longer held to complete updates."""
        self.cancelling[tag] = list(tags)
        for t in tags:
            if t in self.contexts:
                self.contexts[t]["items"] = None

    def _esearch(self, ctag, rest, text):
        rest = rest.decode(errors="replace")
        if ctag in self.context_requests and ctag in self.pending:
            # the searching command's own answer: the initial result
            uid, srt, has_all = self.context_requests.pop(ctag)
            m = re.search(r" ALL (\S+)", rest)
            # ALL asked for and absent: nothing matched; not asked: unknown
            items = self._expand(m.group(1)) if m else ([] if has_all else None)
            self.contexts[ctag] = {"uid": uid, "sorted": srt, "items": items}
            return
        updates = re.findall(r" (ADDTO|REMOVEFROM) \(([^)]*)\)", rest)
        if not updates:
            return
        ctx = self.contexts.get(ctag)
        if ctx is None:
            self.violate("context-unknown", text)
            return
        self.context_updates += 1
        items = ctx["items"]
        for kind, body in updates:
            words = body.split()
            for pos, spec in zip(words[0::2], words[1::2]):
                pos, nums = int(pos), self._expand(spec)
                if not ctx["uid"] and kind == "ADDTO" and any(
                        x < 1 or x > self.exists for x in nums):
                    self.violate("context-add", text, f"count {self.exists}")
                if items is None:
                    continue
                if kind == "ADDTO":
                    if any(x in items for x in nums):
                        self.violate("context-add", text, "already in the result")
                        continue
                    if pos == 0:
                        items[:] = sorted(items + nums)
                    elif pos > len(items) + 1:
                        self.violate("context-add", text, f"position {pos} of {len(items)}")
                    else:
                        items[pos - 1:pos - 1] = nums
                elif pos == 0:
                    for x in nums:
                        if x in items:
                            items.remove(x)
                        else:
                            self.violate("context-remove", text, f"{x} not in the result")
                elif items[pos - 1:pos - 1 + len(nums)] != nums:
                    self.violate("context-remove", text, f"position {pos}: {items[pos - 1:pos + 2]}")
                    for x in nums:
                        if x in items:
                            items.remove(x)
                else:
                    del items[pos - 1:pos - 1 + len(nums)]

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
