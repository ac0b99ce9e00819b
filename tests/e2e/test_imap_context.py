"""CONTEXT=SEARCH and CONTEXT=SORT (RFC 5267 4) on a real petreld: the
RFC's commands with their response shapes byte for byte (the numbers are
this mailbox's), live results kept up to date while other sessions
append, expunge and change flags (ADDTO after EXISTS, REMOVEFROM before
EXPUNGE, positions in sort order), CANCELUPDATE, NOUPDATE past the
per-session limit, PARTIAL, and no update where RFC 3501 forbids one
(during a STORE for an expunge, after BYE). Every ADDTO/REMOVEFROM
received is applied to the client's copy of the result, which must end
equal to a fresh SEARCH/SORT; the concurrent run checks each line with
imap_model.SessionModel."""

import imaplib
import os
import re
import socket
import time
from collections import Counter

import pytest

from imap_load import run_sessions
from test_imap_backpressure import status_kb
from test_imap_session import addr, imap_overrides


@pytest.fixture
def imapd(petreld, tmp_path):
    return petreld(imap_overrides(tmp_path))


def message(subject, frm="a@example.org", date="Mon, 05 Jan 2026 10:00:00 +0000"):
    return (f"From: {frm}\r\nTo: b@example.org\r\nSubject: {subject}\r\nDate: {date}\r\n"
            f"\r\nbody of {subject}\r\n").encode()


def fill(d, subjects, flags=None, box="INBOX"):
    """One MULTIAPPEND (RFC 3502) with LITERAL+: UIDs in list order."""
    s = socket.create_connection(addr(d), timeout=30)
    f = s.makefile("rb")
    f.readline()
    cmd = f"a APPEND {box}".encode()
    for i, subject in enumerate(subjects):
        body = message(subject)
        fl = f" ({flags[i]})" if flags and flags[i] else ""
        cmd += f"{fl} {{{len(body)}+}}\r\n".encode() + body
    s.sendall(b"l LOGIN alice wonderland\r\n" + cmd + b"\r\n")
    for tag in (b"l ", b"a "):
        while True:
            line = f.readline()
            assert line, "closed"
            if line.startswith(tag):
                assert line.split()[1] == b"OK", line
                break
    s.close()


class Raw:
    """A logged-in raw session; `cmd` returns every line up to the tagged
    reply, `lines_until` reads what arrives unsolicited."""

    def __init__(self, d, box="INBOX"):
        self.s = socket.create_connection(addr(d), timeout=10)
        self.f = self.s.makefile("rb")
        assert self.f.readline().startswith(b"* OK")
        self.n = 0
        assert self.cmd("LOGIN alice wonderland")[-1].split()[1] == "OK"
        if box:
            assert self.cmd(f"SELECT {box}")[-1].split()[1] == "OK"

    def send(self, text, tag=None):
        self.n += 1
        tag = tag or f"r{self.n}"
        self.s.sendall(f"{tag} {text}\r\n".encode())
        return tag

    def read(self):
        line = self.f.readline()
        assert line, "connection closed"
        return line.decode().rstrip("\r\n")

    def cmd(self, text, tag=None):
        tag = self.send(text, tag)
        lines = []
        while True:
            lines.append(self.read())
            if lines[-1].startswith(tag + " "):
                return lines

    def noop_until(self, wanted, timeout=5):
        """NOOPs until `wanted` (a line, or a predicate over the lines) is
        among the untagged lines: another session's change reaches this one
        when the folder's watch fires. Returns the untagged lines."""
        ok = wanted if callable(wanted) else (lambda lines: wanted in lines)
        got = []
        deadline = time.monotonic() + timeout
        while True:
            got += [x for x in self.cmd("NOOP") if x.startswith("* ")]
            if ok(got) or time.monotonic() > deadline:
                return got
            time.sleep(0.02)

    def close(self):
        self.s.close()


def esearch(lines, tag):
    return [x for x in lines if x.startswith(f'* ESEARCH (TAG "{tag}")')]


def expand(spec):
    """A sequence-set in the order written (RFC 5267 3.2: ranges ascend)."""
    out = []
    for part in spec.split(","):
        a, _, b = part.partition(":")
        lo, hi = int(a), int(b or a)
        out.extend(range(min(lo, hi), max(lo, hi) + 1))
    return out


class Result:
    """The client's copy of one context's result, kept by RFC 5267 4.3.3
    and 4.3.4 from the initial ALL and every update line."""

    def __init__(self, tag, initial):
        self.tag = tag
        self.items = list(initial)

    def apply(self, line):
        m = re.match(r'\* ESEARCH \(TAG "([^"]+)"\)( UID)?(.*)$', line)
        if not m or m.group(1) != self.tag:
            return False
        for kind, body in re.findall(r" (ADDTO|REMOVEFROM) \(([^)]*)\)", m.group(3)):
            words = body.split()
            for pos, spec in zip(words[0::2], words[1::2]):
                pos, nums = int(pos), expand(spec)
                if kind == "ADDTO":
                    for x in nums:
                        assert x not in self.items, (line, self.items)
                    if pos == 0:
                        self.items = sorted(self.items + nums)
                    else:
                        assert 1 <= pos <= len(self.items) + 1, (line, self.items)
                        self.items[pos - 1:pos - 1] = nums
                else:
                    if pos == 0:
                        for x in nums:
                            assert x in self.items, (line, self.items)
                            self.items.remove(x)
                    else:
                        assert self.items[pos - 1:pos - 1 + len(nums)] == nums, (line, self.items)
                        del self.items[pos - 1:pos - 1 + len(nums)]
        return True

    def expunge(self, seq):
        """A non-UID context: later sequence numbers move down."""
        assert seq not in self.items, f"EXPUNGE {seq} before its REMOVEFROM"
        self.items = [x - 1 if x > seq else x for x in self.items]


def all_of(line):
    m = re.search(r" ALL (\S+)", line)
    return expand(m.group(1)) if m else []


# ---------- advertising, the RFC's examples ----------

def test_capabilities_advertised(imapd):
    r = Raw(imapd, box=None)
    caps = r.cmd("CAPABILITY")[0].split()
    assert {"CONTEXT=SEARCH", "CONTEXT=SORT", "ESORT", "ESEARCH", "SORT"} <= set(caps), caps
    r.close()


def test_rfc_context_hint_and_update_count(imapd):
    """RFC 5267 4.2 and 4.3.3: "A01 SEARCH RETURN (CONTEXT COUNT) UNDELETED
    UNKEYWORD $Junk" answers COUNT; "B01 UID SEARCH RETURN (UPDATE COUNT)
    DELETED KEYWORD $Junk" answers COUNT, then "* ESEARCH (TAG "B01") UID
    ADDTO (0 32768:32769)" when two messages start to match."""
    fill(imapd, ["m1", "m2", "m3", "m4", "m5"],
         flags=["$Junk", None, "\\Deleted $Junk", None, None])
    a, b = Raw(imapd), Raw(imapd)
    lines = a.cmd("SEARCH RETURN (CONTEXT COUNT) UNDELETED UNKEYWORD $Junk", "A01")
    assert lines == ['* ESEARCH (TAG "A01") COUNT 3', "A01 OK SEARCH completed."], lines
    lines = a.cmd("UID SEARCH RETURN (UPDATE COUNT) DELETED KEYWORD $Junk", "B01")
    assert lines == ['* ESEARCH (TAG "B01") UID COUNT 1', "B01 OK SEARCH completed."], lines
    assert b.cmd("STORE 4:5 +FLAGS (\\Deleted $Junk)")[-1].split()[1] == "OK"
    lines = a.noop_until(lambda x: esearch(x, "B01"))
    ups = esearch(lines, "B01")
    assert ups == ['* ESEARCH (TAG "B01") UID ADDTO (0 4:5)'], lines
    # after the FETCH lines that announce the change
    assert lines.index(ups[0]) > max(i for i, x in enumerate(lines) if "FETCH" in x)
    a.close()
    b.close()


def test_rfc_removefrom_before_expunge(imapd):
    """RFC 5267 4.3.4: "* ESEARCH (TAG "B01") UID REMOVEFROM (0 32768)"
    comes before the "* n EXPUNGE" of the message it removes, and a
    non-UID context numbers it as the client still does."""
    fill(imapd, ["m1", "m2", "m3", "m4", "m5", "m6"],
         flags=[None, "\\Deleted", "$Junk", "\\Deleted $Junk", None, "$Junk"])
    a, b = Raw(imapd), Raw(imapd)
    lines = a.cmd("UID SEARCH RETURN (UPDATE ALL) KEYWORD $Junk", "B01")
    assert lines[0] == '* ESEARCH (TAG "B01") UID ALL 3:4,6', lines
    lines = a.cmd("SEARCH RETURN (UPDATE ALL) KEYWORD $Junk", "B02")
    seqs = Result("B02", all_of(lines[0]))
    assert seqs.items == [3, 4, 6]
    assert b.cmd("EXPUNGE")[-1].split()[1] == "OK"  # messages 2 and 4 go
    lines = a.noop_until(lambda x: len([y for y in x if y.endswith("EXPUNGE")]) == 2)
    assert '* ESEARCH (TAG "B01") UID REMOVEFROM (0 4)' in lines, lines
    assert '* ESEARCH (TAG "B02") REMOVEFROM (0 4)' in lines, lines
    first_expunge = lines.index(next(x for x in lines if x.endswith("EXPUNGE")))
    assert lines.index('* ESEARCH (TAG "B01") UID REMOVEFROM (0 4)') < first_expunge
    for line in lines:
        if seqs.apply(line):
            continue
        m = re.match(r"\* (\d+) EXPUNGE", line)
        if m:
            seqs.expunge(int(m.group(1)))
    fresh = a.cmd("SEARCH KEYWORD $Junk")
    assert seqs.items == [int(x) for x in fresh[0].split()[2:]], (seqs.items, fresh)
    a.close()
    b.close()


def test_removefrom_before_vanished_with_qresync(imapd):
    """Once QRESYNC is on, expunges are VANISHED (RFC 7162 3.2.10): the
    REMOVEFROM still comes first."""
    fill(imapd, ["m1", "m2", "m3"], flags=[None, "\\Deleted $Junk", "$Junk"])
    a, b = Raw(imapd, box=None), Raw(imapd)
    a.cmd("ENABLE QRESYNC")
    a.cmd("SELECT INBOX")
    lines = a.cmd("SEARCH RETURN (UPDATE ALL) KEYWORD $Junk", "V1")
    assert lines[0] == '* ESEARCH (TAG "V1") ALL 2:3', lines
    b.cmd("EXPUNGE")
    lines = a.noop_until("* VANISHED 2")
    assert lines.index('* ESEARCH (TAG "V1") REMOVEFROM (0 2)') < lines.index("* VANISHED 2")
    a.close()
    b.close()


def test_rfc_sort_context_positions(imapd):
    """RFC 5267 4.3.3's example: a SORT context holding 2734:2735 takes
    2731:2733 in front as "ADDTO (1 2731:2733)" (the preferred form);
    REMOVEFROM names the position of what it removes."""
    fill(imapd, ["d", "e"])
    a, b = Raw(imapd), Raw(imapd)
    lines = a.cmd("UID SORT RETURN (UPDATE ALL) (SUBJECT) UTF-8 UNDELETED", "C01")
    assert lines == ['* ESEARCH (TAG "C01") UID ALL 1:2', "C01 OK SORT completed."], lines
    fill(imapd, ["a", "b", "c"])
    lines = a.noop_until("* 5 EXISTS")
    assert esearch(lines, "C01") == ['* ESEARCH (TAG "C01") UID ADDTO (1 3:5)'], lines
    assert lines.index('* ESEARCH (TAG "C01") UID ADDTO (1 3:5)') > lines.index("* 5 EXISTS")
    b.noop_until("* 5 EXISTS")
    b.cmd("UID STORE 4 +FLAGS (\\Deleted)")
    lines = a.noop_until(lambda x: esearch(x, "C01"))
    assert esearch(lines, "C01") == ['* ESEARCH (TAG "C01") UID REMOVEFROM (2 4)'], lines
    fill(imapd, ["ca", "f", "b2"])  # UIDs 6 7 8: between c and d, at the end, after b
    lines = a.noop_until(lambda x: esearch(x, "C01"))
    assert esearch(lines, "C01") == ['* ESEARCH (TAG "C01") UID ADDTO (2 8 4 6 7 7)'], lines
    a.close()
    b.close()


def test_sort_context_follows_random_changes(imapd):
    """A REVERSE SUBJECT context of sequence numbers through appends,
    flag changes and expunges from another session: the client's copy,
    kept from the updates alone, equals a fresh SORT after each round."""
    subjects = [f"s{(i * 7) % 13:02d}" for i in range(12)]
    fill(imapd, subjects)
    a, b = Raw(imapd), Raw(imapd)
    lines = a.cmd("SORT RETURN (UPDATE ALL) (REVERSE SUBJECT) UTF-8 UNFLAGGED", "S1")
    res = Result("S1", all_of(lines[0]))
    rounds = [
        ["STORE 2,5,7 +FLAGS (\\Flagged)"],
        ["STORE 5 -FLAGS (\\Flagged)", "STORE 1,3 +FLAGS (\\Deleted)", "EXPUNGE"],
        [],  # appends only
        ["STORE 1:* -FLAGS (\\Flagged)", "STORE 4 +FLAGS (\\Deleted \\Flagged)", "EXPUNGE"],
    ]
    for k, commands in enumerate(rounds):
        fill(imapd, [f"s{(k * 5) % 13:02d}b", f"z{k}"])
        b.noop_until(lambda x: any("EXISTS" in y for y in x))
        for c in commands:
            assert b.cmd(c)[-1].split()[1] == "OK", c
        # Until A has heard of every change (the watch may bring them in
        # more than one batch): then its copy must equal a fresh SORT.
        deadline = time.monotonic() + 5
        while True:
            for line in a.cmd("NOOP"):
                if res.apply(line):
                    continue
                m = re.match(r"\* (\d+) EXPUNGE", line)
                if m:
                    res.expunge(int(m.group(1)))
            fresh = a.cmd("SORT (REVERSE SUBJECT) UTF-8 UNFLAGGED")[0]
            if res.items == [int(x) for x in fresh.split()[2:]] or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert res.items == [int(x) for x in fresh.split()[2:]], (k, res.items, fresh)
    a.close()
    b.close()


# ---------- where updates may go ----------

def test_own_store_updates_come_with_the_store_but_expunges_wait(imapd):
    """The session's own STORE changes the result at once (an ESEARCH
    update before its tagged OK), while another session's expunge waits:
    RFC 3501 7.4.1 allows no EXPUNGE, nor the REMOVEFROM that announces
    it, during a STORE. A FETCH that sets \\Seen updates UNSEEN contexts."""
    fill(imapd, ["m1", "m2", "m3"])
    a, b = Raw(imapd), Raw(imapd)
    a.cmd("UID SEARCH RETURN (UPDATE) FLAGGED", "F1")
    a.cmd("SEARCH RETURN (UPDATE) UNSEEN", "U1")
    lines = a.cmd("STORE 3 +FLAGS (\\Flagged)")
    assert '* ESEARCH (TAG "F1") UID ADDTO (0 3)' in lines, lines
    assert lines.index('* ESEARCH (TAG "F1") UID ADDTO (0 3)') == len(lines) - 2, lines
    b.cmd("STORE 3 +FLAGS (\\Deleted)")
    b.cmd("EXPUNGE")
    lines = a.cmd("STORE 2 +FLAGS (\\Flagged)")
    assert not [x for x in lines if "EXPUNGE" in x or "REMOVEFROM" in x], lines
    assert '* ESEARCH (TAG "F1") UID ADDTO (0 2)' in lines, lines
    lines = a.noop_until("* 3 EXPUNGE")
    assert lines[:3] == ['* ESEARCH (TAG "F1") UID REMOVEFROM (0 3)',
                         '* ESEARCH (TAG "U1") REMOVEFROM (0 3)', "* 3 EXPUNGE"], lines
    lines = a.cmd("FETCH 1 (FLAGS)")
    assert not [x for x in lines if "ESEARCH" in x], lines
    lines = a.cmd("FETCH 1 (BODY[])")  # sets \\Seen
    assert esearch(lines, "U1") == ['* ESEARCH (TAG "U1") REMOVEFROM (0 1)'], lines
    a.close()
    b.close()


def test_updates_arrive_during_idle_and_never_after_bye(imapd):
    fill(imapd, ["m1", "m2"])
    a, b = Raw(imapd), Raw(imapd)
    a.cmd("UID SEARCH RETURN (UPDATE) SEEN", "I1")
    tag = a.send("IDLE")
    assert a.read().startswith("+")
    b.cmd("STORE 2 +FLAGS (\\Seen)")
    deadline = time.monotonic() + 5
    got = []
    while time.monotonic() < deadline and '* ESEARCH (TAG "I1") UID ADDTO (0 2)' not in got:
        got.append(a.read())
    assert '* ESEARCH (TAG "I1") UID ADDTO (0 2)' in got, got
    a.s.sendall(b"DONE\r\n")
    while not a.read().startswith(tag + " "):
        pass
    # A change waiting when LOGOUT comes is never sent: BYE, then only OK.
    b.cmd("STORE 1 +FLAGS (\\Seen)")
    lines = a.cmd("LOGOUT")
    assert lines[0].startswith("* BYE") and len(lines) == 2, lines
    a.close()
    b.close()


def test_sequence_sets_name_the_messages_of_the_moment(imapd):
    """A context over "2:3" keeps meaning those two messages when an
    expunge renumbers the folder (Dovecot does the same)."""
    fill(imapd, ["m1", "m2", "m3", "m4"])
    a, b = Raw(imapd), Raw(imapd)
    lines = a.cmd("UID SEARCH RETURN (UPDATE ALL) 2:3 UNFLAGGED", "Q1")
    assert lines[0] == '* ESEARCH (TAG "Q1") UID ALL 2:3', lines
    b.cmd("STORE 1 +FLAGS (\\Deleted)")
    b.cmd("EXPUNGE")
    b.cmd("STORE 3 +FLAGS (\\Flagged)")  # UID 4: never in the context's set
    b.cmd("STORE 1 +FLAGS (\\Flagged)")  # UID 2: leaves
    lines = a.noop_until(lambda x: esearch(x, "Q1"))
    lines += a.cmd("NOOP")
    assert esearch(lines, "Q1") == ['* ESEARCH (TAG "Q1") UID REMOVEFROM (0 2)'], lines
    # "$" in a context is the saved result of before the command, even when
    # the same command SAVEs a new one.
    assert a.cmd("SEARCH RETURN (SAVE) 1")[-1].split()[1] == "OK"  # $ = UID 2
    b.cmd("UID STORE 3 +FLAGS (\\Seen)")
    a.noop_until(lambda x: any("FETCH" in y and "UID 3 " in y for y in x))
    lines = a.cmd("UID SEARCH RETURN (UPDATE SAVE ALL) OR $ SEEN", "Q2")
    assert lines[0] == '* ESEARCH (TAG "Q2") UID ALL 2:3', lines
    b.cmd("UID STORE 3 -FLAGS (\\Seen)")  # $ is now 2:3, the context's $ still 2
    lines = a.noop_until(lambda x: esearch(x, "Q2"))
    assert esearch(lines, "Q2") == ['* ESEARCH (TAG "Q2") UID REMOVEFROM (0 3)'], lines
    a.close()
    b.close()


# ---------- CANCELUPDATE, tags, limits ----------

def test_cancelupdate_and_tag_rules(imapd):
    fill(imapd, ["m1", "m2"])
    a, b = Raw(imapd), Raw(imapd)
    a.cmd("SEARCH RETURN (UPDATE) SEEN", "B01")
    assert a.cmd("SEARCH RETURN (UPDATE) ALL", "B01")[-1].startswith("B01 BAD"), "tag reuse"
    # A tag whose context is gone, or one that never asked for updates, may run again.
    assert a.cmd("SEARCH RETURN (COUNT) ALL", "B01")[-1].startswith("B01 OK")
    assert a.cmd('CANCELUPDATE "nosuch"')[-1].split()[1] == "NO"
    assert a.cmd("CANCELUPDATE B01")[-1].split()[1] == "BAD"  # tags are quoted
    assert a.cmd("CANCELUPDATE")[-1].split()[1] == "BAD"
    assert a.cmd('CANCELUPDATE "B01"')[-1].split()[1] == "OK"
    b.cmd("STORE 1:2 +FLAGS (\\Seen)")
    lines = a.noop_until(lambda x: len([y for y in x if "FETCH" in y]) == 2)
    assert not [x for x in lines if "ESEARCH" in x], lines
    assert a.cmd("SEARCH RETURN (UPDATE) ALL", "B01")[-1].startswith("B01 OK")
    # Closing the folder ends every context.
    a.cmd("SELECT INBOX")
    assert a.cmd('CANCELUPDATE "B01"')[-1].split()[1] == "NO"
    for bad in ["SEARCH RETURN (UPDATE UPDATE) ALL", "SEARCH RETURN (PARTIAL 1:2 ALL) ALL"]:
        assert a.cmd(bad)[-1].split()[1] == "BAD", bad
    a.close()
    b.close()


def test_noupdate_past_the_limit_and_memory_stays_flat(petreld, tmp_path):
    """RFC 5267 4.3.1: past the per-session limit (10) the search is still
    answered, with "* NO [NOUPDATE "tag"]"; a client creating and
    cancelling contexts (or being refused) hundreds of times does not
    grow the server."""
    asan = os.environ.get("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=1")
    imapd = petreld(imap_overrides(tmp_path), env={"ASAN_OPTIONS": asan + ":quarantine_size_mb=1"})
    fill(imapd, [f"m{i}" for i in range(300)])
    a, b = Raw(imapd), Raw(imapd)
    for i in range(10):
        lines = a.cmd("UID SEARCH RETURN (UPDATE COUNT) ALL", f"L{i}")
        assert lines == [f'* ESEARCH (TAG "L{i}") UID COUNT 300', f"L{i} OK SEARCH completed."]
    lines = a.cmd("UID SORT RETURN (UPDATE COUNT) (SUBJECT) UTF-8 ALL", "L10")
    assert lines == ['* NO [NOUPDATE "L10"] Too many contexts.',
                     '* ESEARCH (TAG "L10") UID COUNT 300', "L10 OK SORT completed."], lines
    b.cmd("STORE 300 +FLAGS (\\Deleted)")
    b.cmd("EXPUNGE")
    lines = a.noop_until("* 300 EXPUNGE")
    assert sorted(esearch(lines, f"L{i}") for i in range(11)) == sorted(
        [[f'* ESEARCH (TAG "L{i}") UID REMOVEFROM (0 300)'] for i in range(10)] + [[]]), lines
    rounds = 0

    def churn(n):
        nonlocal rounds
        for _ in range(n):
            rounds += 1
            a.send("SEARCH RETURN (UPDATE) OR UID 1:7 FLAGGED", f"X{rounds}")
            a.send("UID SORT RETURN (UPDATE MIN) (REVERSE ARRIVAL) UTF-8 ALL", f"Y{rounds}")
            a.send(f'CANCELUPDATE "L0" "X{rounds}"', f"Z{rounds}")
            tag = a.send("UID SEARCH RETURN (UPDATE) 1:*", f"L0")
            while not a.read().startswith(tag + " "):
                pass

    churn(150)
    pid = imapd.pid
    base = status_kb(pid, "VmRSS")
    churn(600)
    grown = status_kb(pid, "VmRSS") - base
    print(f"\nVmRSS {base} kB, +{grown} kB after 600 more rounds of 4 context commands")
    # Unbounded, the never-cancelled SORT contexts alone would hold
    # 600 x 299 UIDs twice over (1.4 MB).
    assert grown < 1024, grown
    a.close()
    b.close()


# ---------- PARTIAL ----------

def test_partial_results(imapd):
    """RFC 5267 4.4: the window of the result, the range echoed, NIL past
    the end; in sort order for SORT; BAD for the forms the RFC rules out.
    Dovecot 2.3 gives the same answers (test_imap_context_dovecot)."""
    fill(imapd, [f"s{9 - i}" for i in range(8)])
    a = Raw(imapd)
    assert a.cmd("UID SEARCH RETURN (PARTIAL 1:3) ALL", "A01")[0] == \
        '* ESEARCH (TAG "A01") UID PARTIAL (1:3 1:3)'
    assert a.cmd("SEARCH RETURN (PARTIAL 6:500) ALL", "A02")[0] == \
        '* ESEARCH (TAG "A02") PARTIAL (6:500 6:8)'
    assert a.cmd("UID SEARCH RETURN (PARTIAL 24000:24500) ALL", "A04")[0] == \
        '* ESEARCH (TAG "A04") UID PARTIAL (24000:24500 NIL)'
    assert a.cmd("SEARCH RETURN (PARTIAL 3:2) ALL", "A05")[0] == \
        '* ESEARCH (TAG "A05") PARTIAL (2:3 2:3)'
    assert a.cmd("SEARCH RETURN (MIN PARTIAL 2:3 COUNT) ALL", "A06")[0] == \
        '* ESEARCH (TAG "A06") MIN 1 PARTIAL (2:3 2:3) COUNT 8'
    assert a.cmd("SORT RETURN (PARTIAL 2:4) (SUBJECT) UTF-8 ALL", "A07")[0] == \
        '* ESEARCH (TAG "A07") PARTIAL (2:4 7,6,5)'
    for bad in ["PARTIAL 0:2", "PARTIAL 1:*", "PARTIAL -1:-2", "PARTIAL", "PARTIAL 1:2 ALL",
                "PARTIAL 1:2 PARTIAL 3:4", "PARTIAL 1", "PARTIAL 1:4294967296"]:
        assert a.cmd(f"SEARCH RETURN ({bad}) ALL")[-1].split()[1] == "BAD", bad
    a.close()


# ---------- many sessions, checked by the model ----------

def test_concurrent_sessions_keep_their_contexts(imapd):
    """Eight sessions, each with three live contexts (UID SEARCH, SEARCH and
    UID SORT), run the conformance mix for 8 s: every ADDTO/REMOVEFROM fits
    the model's mailbox state (no unknown member removed, none added twice,
    no member expunged before its REMOVEFROM, no sequence number above the
    count), and at the end each session's results, kept from the updates
    alone, equal a fresh SEARCH/SORT."""
    m = imaplib.IMAP4(*addr(imapd))
    m.login("alice", "wonderland")
    assert m.create("Other")[0] == "OK"
    m.logout()
    models, commands, errors = run_sessions(addr(imapd), "alice", "wonderland", sessions=8,
                                            seconds=8, seed=5267, contexts=True)
    assert not errors, errors
    assert commands > 150, commands
    violations = [(mo.name, v.kind, v.line[:200], v.detail) for mo in models
                  for v in mo.violations]
    assert not violations, (Counter(v[1] for v in violations), violations[:20])
    updates = sum(mo.context_updates for mo in models)
    checked = sum(mo.contexts_checked for mo in models)
    assert checked == 3 * len(models), checked
    assert updates > 20, updates


# ---------- the checker's own tests: it catches each breach ----------

def test_checker_catches_context_breaches():
    from imap_model import SessionModel
    from test_imap_conformance import SELECTED, feed

    start = SELECTED + """
C: c1 SEARCH RETURN (UPDATE ALL) UNSEEN
* ESEARCH (TAG "c1") ALL 2:3
c1 OK done
"""
    good = start + """
C: c2 NOOP
* ESEARCH (TAG "c1") REMOVEFROM (0 3)
* 3 EXPUNGE
* 3 EXISTS
* ESEARCH (TAG "c1") ADDTO (0 3)
c2 OK done
"""
    model = SessionModel()
    assert feed(model, good) == []
    assert model.contexts["c1"]["items"] == [2, 3]
    assert feed(SessionModel(), start + """
C: c2 NOOP
* 3 EXPUNGE
* ESEARCH (TAG "c1") REMOVEFROM (0 3)
c2 OK done
""") == ["context-expunged", "context-remove"]
    assert feed(SessionModel(), start + """
C: c2 NOOP
* ESEARCH (TAG "c1") ADDTO (0 4)
* 4 EXISTS
c2 OK done
""") == ["context-add"]
    assert feed(SessionModel(), start + """
C: c2 NOOP
* ESEARCH (TAG "c9") ADDTO (0 1)
c2 OK done
""") == ["context-unknown"]
    # Updates may come until CANCELUPDATE's OK, none after it.
    model = SessionModel()
    feed(model, start)
    model.sent("c3", "CANCELUPDATE")
    model.cancel("c3", ["c1"])
    for line in [b'* ESEARCH (TAG "c1") ADDTO (0 1)', b"c3 OK done",
                 b'* ESEARCH (TAG "c1") REMOVEFROM (0 1)']:
        model.received(line + b"\r\n")
    assert [v.kind for v in model.violations] == ["context-unknown"]
