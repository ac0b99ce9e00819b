"""SORT (RFC 5256) with every key, SORT=DISPLAY (RFC 5957), ESORT (RFC
5267 3), THREAD=ORDEREDSUBJECT and THREAD=REFERENCES (RFC 5256 3), and
SEARCHRES (RFC 5182) on a real petreld: the RFCs' command/response
shapes, each key with ties broken by sequence number, REVERSE, the UID
forms, a reply tree with a missing parent, "$" in FETCH/STORE/SEARCH/COPY
and after an expunge. The expected orders are computed here from the
messages' own fields, not taken from the server."""

import datetime
import email.header
import email.utils
import functools
import imaplib
import re

import pytest

from test_imap_session import imap_overrides, login, raw

# ---------- the messages (shared with test_imap_sort_dovecot.py) ----------

# (internal date, header fields, body): fields chosen so every key has a
# tie, an empty value, an encoded word or a missing Date.
SORT_SET = [
    ('"03-Jan-2026 00:00:00 +0000"',
     [("From", '"Charlie Brown" <charlie@a.org>'), ("To", "zoe@b.org"),
      ("Subject", "Re: banana"), ("Date", "Mon, 05 Jan 2026 10:00:00 +0000")], "short\r\n"),
    ('"01-Jan-2026 00:00:00 +0000"',
     [("From", "alice@a.org"), ("To", '"Bob" <yann@b.org>'), ("Cc", "mike@c.org"),
      ("Subject", "apple"), ("Date", "Mon, 05 Jan 2026 09:00:00 -0200")],
     "a much longer body than the others\r\n" * 5),
    ('"02-Jan-2026 00:00:00 +0000"',
     [("From", "=?utf-8?q?Andr=C3=A9?= <zed@a.org>"), ("To", "adam@b.org"),
      ("Cc", "Bill <bill@c.org>"), ("Subject", "[list] Fwd: Apple (fwd)")],
     "medium body text\r\n" * 2),
    ('"03-Jan-2026 00:00:00 +0000"',
     [("From", '"Charlie Brown" <charlie@a.org>'), ("To", "zoe@b.org"),
      ("Subject", "Re: banana"), ("Date", "Mon, 05 Jan 2026 10:00:00 +0000")], "short\r\n"),
    ('"04-Jan-2026 00:00:00 +0000"',
     [("From", "bob@a.org"), ("Date", "Sun, 04 Jan 2026 23:00:00 -0500")], "x\r\n"),
]

# A reply tree: 1 <- 2 <- 3, 1 <- 4 (References only), 5 and 6 answer a
# message that is not in the mailbox, 8 is a "Re:" of 7 without any
# reference (joined by subject).
THREAD_SET = [
    ("<a@x>", None, None, "Thread A", "Thu, 01 Jan 2026 10:00:00 +0000"),
    ("<b@x>", None, "<a@x>", "Re: Thread A", "Thu, 01 Jan 2026 11:00:00 +0000"),
    ("<c@x>", "<a@x> <b@x>", None, "Re: Thread A", "Thu, 01 Jan 2026 12:00:00 +0000"),
    ("<d@x>", "<a@x>", None, "RE: thread a", "Thu, 01 Jan 2026 11:30:00 +0000"),
    ("<e@x>", "<missing@x>", None, "Re: Lost parent", "Thu, 01 Jan 2026 09:00:00 +0000"),
    ("<f@x>", "<missing@x>", None, "Re: Lost parent", "Thu, 01 Jan 2026 09:30:00 +0000"),
    ("<g@x>", None, None, "Other", "Thu, 01 Jan 2026 08:00:00 +0000"),
    ("<h@x>", None, None, "Re: Other", "Thu, 01 Jan 2026 13:00:00 +0000"),
]

# What RFC 5256 3.1 / 3.2 give for THREAD_SET, worked by hand in the
# docstring of test_thread_references_tree.
THREAD_REFERENCES = "(7 8)((5)(6))(1 (2 3)(4))"
THREAD_ORDEREDSUBJECT = "(7 8)(5 6)(1 (2)(4)(3))"


def sort_message(fields, body):
    return ("".join(f"{k}: {v}\r\n" for k, v in fields) + "\r\n" + body).encode()


def thread_message(mid, refs, irt, subject, date):
    fields = [("From", "t@x.org"), ("Subject", subject), ("Date", date), ("Message-ID", mid)]
    if refs:
        fields.append(("References", refs))
    if irt:
        fields.append(("In-Reply-To", irt))
    return sort_message(fields, "thread body\r\n")


def fill(m, box, sort_set=True):
    """Appends SORT_SET (or THREAD_SET) to `box` through imaplib."""
    if box != "INBOX":
        m.create(box)
    if sort_set:
        for date, fields, body in SORT_SET:
            typ, data = m.append(box, None, date, sort_message(fields, body))
            assert typ == "OK", data
    else:
        for t in THREAD_SET:
            typ, data = m.append(box, None, '"01-Jan-2026 00:00:00 +0000"', thread_message(*t))
            assert typ == "OK", data


def first_addr(fields, name):
    """(addr-mailbox, RFC 5957 display form) of the first address, casemapped."""
    value = dict(fields).get(name)
    if value is None:
        return "", ""
    display, address = email.utils.parseaddr(value)
    if display.startswith("=?"):
        display = str(email.header.make_header(email.header.decode_header(display)))
    mailbox = address.split("@")[0]
    return ascii_upper(mailbox), ascii_upper(display or address)


def ascii_upper(s):
    """i;ascii-casemap: only a-z change."""
    return "".join(chr(ord(c) - 32) if "a" <= c <= "z" else c for c in s)


def base_subject(s):
    # Enough of RFC 5256 2.1 for SORT_SET's subjects (the C unit test has the rest).
    s = re.sub(r"\s*\(fwd\)$", "", s.strip(), flags=re.I)
    s = re.sub(r"^(\[[^\]]*\]\s*)*(re|fwd?)\s*:\s*", "", s, flags=re.I)
    return ascii_upper(s)


def internal_epoch(internal):
    return datetime.datetime.strptime(internal.strip('"'), "%d-%b-%Y %H:%M:%S %z").timestamp()


def sent_date(fields, internal):
    """RFC 5256 2.2: the Date field in UTC, INTERNALDATE when there is none."""
    d = dict(fields).get("Date")
    if d is None:
        return internal_epoch(internal)
    return email.utils.parsedate_to_datetime(d).timestamp()


def sort_value(key, i):
    date, fields, body = SORT_SET[i]
    if key == "ARRIVAL":
        return internal_epoch(date)
    if key == "DATE":
        return sent_date(fields, date)
    if key == "SIZE":
        return len(sort_message(fields, body))
    if key == "SUBJECT":
        return base_subject(dict(fields).get("Subject", "")).encode()
    if key in ("FROM", "TO", "CC"):
        return first_addr(fields, key.capitalize())[0].encode()
    if key == "DISPLAYFROM":
        return first_addr(fields, "From")[1].encode()
    if key == "DISPLAYTO":
        return first_addr(fields, "To")[1].encode()
    raise AssertionError(key)


def expected_sort(keys):
    """Sequence numbers sorted by `keys` (REVERSE flips the next key only),
    exact ties by sequence number (RFC 5256 2.3)."""
    parsed = parse_keys(keys)

    def cmp(a, b):
        for key, reverse in parsed:
            va, vb = sort_value(key, a), sort_value(key, b)
            if va != vb:
                c = -1 if va < vb else 1
                return -c if reverse else c
        return -1 if a < b else 1
    return [i + 1 for i in sorted(range(len(SORT_SET)), key=functools.cmp_to_key(cmp))]


def parse_keys(keys):
    out, rev = [], False
    for k in keys.split():
        if k == "REVERSE":
            rev = True
            continue
        out.append((k, rev))
        rev = False
    return out


# ---------- a raw client ----------

class Raw:
    """One logged-in raw connection: exact response lines per command."""

    def __init__(self, d, box=None):
        self.s, self.f = raw(d)
        self.n = 0
        assert self.cmd("LOGIN alice wonderland")[-1].split()[1] == "OK"
        if box:
            tagged = self.cmd(f"SELECT {box}")[-1]
            assert tagged.split()[1] == "OK", tagged

    def cmd(self, text):
        self.n += 1
        tag = f"r{self.n}"
        self.s.sendall(f"{tag} {text}\r\n".encode())
        lines = []
        while True:
            line = self.f.readline()
            assert line, f"connection closed after {lines}"
            line = line.decode().rstrip("\r\n")
            lines.append(line)
            if line.startswith(tag + " "):
                return lines

    def untagged(self, text, word):
        lines = self.cmd(text)
        assert lines[-1].split()[1] == "OK", lines
        return [line for line in lines if line.startswith(f"* {word}")]

    def close(self):
        self.s.close()


@pytest.fixture
def imapd(petreld, tmp_path):
    return petreld(imap_overrides(tmp_path))


@pytest.fixture
def sortbox(imapd):
    m = login(imapd)
    fill(m, "INBOX")
    m.logout()
    r = Raw(imapd, "INBOX")
    yield r
    r.close()


@pytest.fixture
def threadbox(imapd):
    m = login(imapd)
    fill(m, "Threads", sort_set=False)
    m.logout()
    r = Raw(imapd, "Threads")
    yield r
    r.close()


def numbers(line, word="SORT"):
    assert line.startswith(f"* {word}"), line
    return [int(x) for x in line[len(word) + 2:].split()]


# ---------- SORT ----------

def test_capabilities_advertised(imapd):
    m = login(imapd)
    caps = m.capabilities
    for c in ("SORT", "SORT=DISPLAY", "ESORT", "THREAD=ORDEREDSUBJECT", "THREAD=REFERENCES",
              "SEARCHRES", "CONTEXT=SEARCH", "CONTEXT=SORT"):  # RFC 5267: test_imap_context.py
        assert c in caps, caps
    m.logout()


@pytest.mark.parametrize("keys", [
    "ARRIVAL", "CC", "DATE", "FROM", "SIZE", "SUBJECT", "TO", "DISPLAYFROM", "DISPLAYTO",
    "REVERSE DATE", "REVERSE SUBJECT", "FROM DATE", "REVERSE FROM REVERSE ARRIVAL",
    "SUBJECT REVERSE SIZE",
])
def test_sort_each_key(sortbox, keys):
    got = numbers(sortbox.untagged(f"SORT ({keys}) UTF-8 ALL", "SORT")[0])
    assert got == expected_sort(keys), keys


def test_sort_known_orders_and_ties(sortbox):
    """Orders worked out by hand from SORT_SET: 1 and 4 are identical
    messages, so they stay in sequence order under REVERSE too (RFC 5256
    2.3); the missing Date of 3 sorts by its INTERNALDATE (2.2); the
    empty To/Cc/Subject sort first; "[list] Fwd: Apple (fwd)" is APPLE."""
    def sort(keys):
        return numbers(sortbox.untagged(f"SORT ({keys}) US-ASCII ALL", "SORT")[0])
    assert sort("ARRIVAL") == [2, 3, 1, 4, 5]
    assert sort("DATE") == [3, 5, 1, 4, 2]
    assert sort("REVERSE DATE") == [2, 1, 4, 5, 3]
    assert sort("FROM") == [2, 5, 1, 4, 3]
    assert sort("TO") == [5, 3, 2, 1, 4]
    assert sort("CC") == [1, 4, 5, 3, 2]
    assert sort("SUBJECT") == [5, 2, 3, 1, 4]
    assert sort("DISPLAYFROM") == [2, 3, 5, 1, 4]
    assert sort("DISPLAYTO") == [5, 3, 2, 1, 4]


def test_sort_criteria_and_uid_sort(sortbox):
    uids = {}
    for line in sortbox.untagged("FETCH 1:* (UID)", ""):
        mt = re.match(r"\* (\d+) FETCH \(UID (\d+)\)", line)
        if mt:
            uids[int(mt.group(1))] = int(mt.group(2))
    # The search criteria are SEARCH's.
    assert numbers(sortbox.untagged('SORT (SUBJECT) UTF-8 FROM "charlie"', "SORT")[0]) == [1, 4]
    assert numbers(sortbox.untagged("SORT (DATE) UTF-8 2:4", "SORT")[0]) == [3, 4, 2]
    got = numbers(sortbox.untagged("UID SORT (DATE) UTF-8 ALL", "SORT")[0])
    assert got == [uids[i] for i in [3, 5, 1, 4, 2]]
    got = numbers(sortbox.untagged(f"UID SORT (REVERSE SIZE) UTF-8 UID {uids[2]}:{uids[4]}",
                                   "SORT")[0])
    assert got == [uids[i] for i in expected_sort("REVERSE SIZE") if 2 <= i <= 4]


def test_sort_rfc_shapes(sortbox):
    """RFC 5256 4: "* SORT" with no numbers when nothing matches; an unknown
    charset is NO [BADCHARSET]; bad criteria are BAD."""
    lines = sortbox.cmd('SORT (SUBJECT) US-ASCII TEXT "not in mailbox"')
    assert lines[0] == "* SORT" and lines[-1].split()[1] == "OK", lines
    lines = sortbox.cmd("SORT (SUBJECT) KOI8-R ALL")
    assert lines[-1].split()[1:3] == ["NO", "[BADCHARSET"], lines
    for bad in ["SORT () UTF-8 ALL", "SORT (MOOSE) UTF-8 ALL", "SORT (REVERSE) UTF-8 ALL",
                "SORT (DATE) UTF-8", "SORT DATE UTF-8 ALL"]:
        lines = sortbox.cmd(bad)
        assert lines[-1].split()[1] == "BAD", (bad, lines)
    # The session is fine afterwards.
    assert numbers(sortbox.untagged("SORT (ARRIVAL) UTF-8 ALL", "SORT")[0]) == [2, 3, 1, 4, 5]


def test_sort_not_in_authenticated_state(imapd):
    r = Raw(imapd)
    assert r.cmd("SORT (DATE) UTF-8 ALL")[-1].split()[1] == "BAD"
    r.close()


# ---------- ESORT (RFC 5267 3) ----------

def test_esort_min_max_count_all(sortbox):
    """MIN and MAX are the first and last in sort order, not the lowest and
    highest numbers; ALL lists the numbers in sort order."""
    def esort(text):
        lines = sortbox.untagged(text, "ESEARCH")
        prefix = '* ESEARCH (TAG "r%d")' % sortbox.n
        assert len(lines) == 1 and lines[0].startswith(prefix), lines
        return lines[0][len(prefix):]
    assert esort("SORT RETURN (MIN MAX COUNT) (DATE) UTF-8 ALL") == " MIN 3 MAX 2 COUNT 5"
    # 1 and 4 tie on ARRIVAL: sequence order even under REVERSE.
    assert esort("SORT RETURN (ALL) (REVERSE ARRIVAL) UTF-8 ALL") == " ALL 5,1,4,3,2"
    assert esort("SORT RETURN (ALL) (ARRIVAL) UTF-8 ALL") == " ALL 2:3,1,4:5"
    assert esort("SORT RETURN () (SUBJECT) UTF-8 ALL") == " ALL 5,2:3,1,4"
    # Nothing matched: only COUNT 0 is left.
    assert esort('SORT RETURN (MIN MAX COUNT) (DATE) UTF-8 SUBJECT "nothing"') == " COUNT 0"
    uid_lines = sortbox.untagged("UID SORT RETURN (MIN MAX) (DATE) UTF-8 ALL", "ESEARCH")
    uids = dict(fetch_uids(sortbox, "FETCH 1:* (UID)"))
    assert uid_lines == ['* ESEARCH (TAG "r%d") UID MIN %d MAX %d' % (sortbox.n - 1, uids[3],
                                                                        uids[2])], uid_lines


def test_sort_fallbacks_internaldate_and_address_display(imapd):
    """RFC 5256 2.2: a missing or unparsable Date: sorts by INTERNALDATE;
    RFC 5957: without a display name DISPLAYFROM/DISPLAYTO sort by the
    whole address, mailbox@host (SORT_SET could not tell either from a
    mutation: sorting such messages first, or by the mailbox alone)."""
    m = login(imapd)
    m.create("Fallbacks")
    msgs = [  # (internal date, From, To, Date or None)
        ('"02-Jan-2026 00:00:00 +0000"', "same@zzz.org", '"Yves" <y@b.org>',
         "Thu, 01 Jan 2026 12:00:00 +0000"),
        ('"03-Jan-2026 00:00:00 +0000"', "same@bbb.org", "same@zzz.org", None),
        ('"31-Dec-2025 00:00:00 +0000"', '"Anna" <x@zzz.org>', "same@bbb.org", "not a date"),
        ('"01-Jan-2026 06:00:00 +0000"', "same@mmm.org", "", "Thu, 01 Jan 2026 18:00:00 +0000"),
    ]
    for date, frm, to, sent in msgs:
        text = f"From: {frm}\r\n" + (f"To: {to}\r\n" if to else "") + \
            (f"Date: {sent}\r\n" if sent else "") + "Subject: f\r\n\r\nbody\r\n"
        assert m.append("Fallbacks", None, date, text.encode())[0] == "OK"
    m.logout()
    r = Raw(imapd, "Fallbacks")
    # DATE: 3 (31 Dec, internal), 1 (1 Jan 12:00), 4 (1 Jan 18:00), 2 (3 Jan, internal)
    assert numbers(r.untagged("SORT (DATE) UTF-8 ALL", "SORT")[0]) == [3, 1, 4, 2]
    # DISPLAYFROM: ANNA, SAME@BBB.ORG, SAME@MMM.ORG, SAME@ZZZ.ORG
    assert numbers(r.untagged("SORT (DISPLAYFROM) UTF-8 ALL", "SORT")[0]) == [3, 2, 4, 1]
    # FROM is the mailbox alone: X, then the three SAME in sequence order
    assert numbers(r.untagged("SORT (FROM) UTF-8 ALL", "SORT")[0]) == [1, 2, 4, 3]
    # DISPLAYTO: "" (no To), SAME@BBB.ORG, SAME@ZZZ.ORG, YVES
    assert numbers(r.untagged("SORT (DISPLAYTO) UTF-8 ALL", "SORT")[0]) == [4, 3, 2, 1]
    r.close()


def test_sort_subject_first_header_folded_whitespace_and_key_limit(imapd):
    """RFC 5256 2.1 (1): runs of white space (tabs too) count as one space
    in the base subject, and a message's first Subject: is the one sorted
    by (Dovecot 2.3 answers 2 1 3 here too). Petrel takes at most 16 sort
    keys (a fixed array; RFC 5256 sets no limit, there are ten distinct
    keys): 16 are answered, 17 are BAD."""
    m = login(imapd)
    m.create("Subj")
    for text in (b"Subject: b  z\r\nSubject: a first\r\n\r\nbody\r\n",
                 b"Subject: b a\r\n\r\nbody\r\n", b"Subject: b\tz\r\n\r\nbody\r\n"):
        assert m.append("Subj", None, None, text)[0] == "OK"
    m.logout()
    r = Raw(imapd, "Subj")
    assert numbers(r.untagged("SORT (SUBJECT) UTF-8 ALL", "SORT")[0]) == [2, 1, 3]
    assert r.untagged("THREAD ORDEREDSUBJECT UTF-8 ALL", "THREAD") == ["* THREAD (1 3)(2)"]
    keys = " ".join(["REVERSE SUBJECT"] * 16)
    assert numbers(r.untagged(f"SORT ({keys}) UTF-8 ALL", "SORT")[0]) == [1, 3, 2]
    lines = r.cmd(f"SORT ({keys} SIZE) UTF-8 ALL")
    assert lines[-1].split()[1] == "BAD" and len(lines) == 1, lines
    r.close()


def test_thread_references_subject_merge_prefers_the_non_reply(imapd):
    """RFC 5256 3.2 step 5: of unlinked roots with one base subject, a
    non-reply takes the subject table from an earlier reply, and the reply
    becomes its child (not both children of a new dummy); replies to an
    original become its children. Dovecot 2.3 answers the same here."""
    m = login(imapd)
    m.create("T")
    for i, subject in enumerate(["Re: topic", "topic", "other", "Re: other", "Fwd: other"]):
        text = (f"Subject: {subject}\r\nMessage-ID: <{'abcde'[i]}@x>\r\n"
                f"Date: Thu, 01 Jan 2026 1{i}:00:00 +0000\r\n\r\nbody\r\n").encode()
        assert m.append("T", None, None, text)[0] == "OK"
    m.logout()
    r = Raw(imapd, "T")
    assert r.untagged("THREAD REFERENCES UTF-8 ALL", "THREAD") == ["* THREAD (2 1)(3 (4)(5))"]
    r.close()


def test_thread_references_date_ties_and_a_self_reference(imapd):
    """Siblings with the same sent date stay in mailbox order (RFC 5256
    3.2 step 6 sorts by date; ties as SORT breaks them), and a message
    whose References names its own Message-ID is a thread of its own, not
    a loop (step 1.A: no link that makes a loop). Dovecot 2.3 answers the
    same."""
    m = login(imapd)
    m.create("L")
    for mid, refs, hour, subject in (("p", None, 10, "p"), ("q", "p", 11, "Re: p"),
                                     ("r", "p", 11, "Re: p"), ("s", "s", 12, "self")):
        text = f"Subject: {subject}\r\nMessage-ID: <{mid}@x>\r\n" + \
            (f"References: <{refs}@x>\r\n" if refs else "") + \
            f"Date: Thu, 01 Jan 2026 {hour}:00:00 +0000\r\n\r\nbody\r\n"
        assert m.append("L", None, None, text.encode())[0] == "OK"
    m.logout()
    r = Raw(imapd, "L")
    assert r.untagged("THREAD REFERENCES UTF-8 ALL", "THREAD") == ["* THREAD (1 (2)(3))(4)"]
    r.close()


def test_thread_references_empty_subjects_are_not_merged(imapd):
    """RFC 5256 3.2 step 5.B: a root whose thread subject is empty is
    skipped by the subject grouping: two unrelated messages without a
    Subject (or with a bare "Re:") stay two threads, as Dovecot answers."""
    m = login(imapd)
    m.create("E")
    for i, subj in enumerate([None, "Re:", None]):
        text = (f"Subject: {subj}\r\n" if subj else "") + \
            f"Message-ID: <e{i}@x>\r\nDate: Thu, 01 Jan 2026 1{i}:00:00 +0000\r\n\r\nb\r\n"
        assert m.append("E", None, None, text.encode())[0] == "OK"
    m.logout()
    r = Raw(imapd, "E")
    assert r.untagged("THREAD REFERENCES UTF-8 ALL", "THREAD") == ["* THREAD (1)(2)(3)"]
    r.close()


def test_esort_with_modseq_criterion_carries_modseq(sortbox):
    """RFC 7162 3.1.5: a SORT RETURN with a MODSEQ search key answers
    MODSEQ in its ESEARCH (Dovecot 2.3 does; Petrel's SEARCH did, its ESORT
    did not): with MIN and/or MAX only, the mod-sequence of the message(s)
    returned (first and last in sort order), otherwise the highest."""
    def esort(text):
        lines = sortbox.untagged(text, "ESEARCH")
        assert len(lines) == 1, lines
        return lines[0]
    def modseq(seq):
        line = [ln for ln in sortbox.untagged(f"FETCH {seq} (MODSEQ)", f"{seq} FETCH")][0]
        return int(line.split("MODSEQ (")[1].split(")")[0])
    sortbox.untagged("STORE 4 +FLAGS (\\Flagged)", "4 FETCH")  # the highest mod-sequence
    high, m3, m2 = modseq(4), modseq(3), modseq(2)
    assert high > max(m3, m2)
    # DATE order is 3 ... 2 (test_esort_min_max_count_all).
    assert esort("SORT RETURN (MIN) (DATE) UTF-8 MODSEQ 1").endswith(f" MIN 3 MODSEQ {m3}")
    assert esort("SORT RETURN (MAX) (DATE) UTF-8 MODSEQ 1").endswith(f" MAX 2 MODSEQ {m2}")
    assert esort("SORT RETURN (MIN MAX) (DATE) UTF-8 MODSEQ 1").endswith(
        f" MIN 3 MAX 2 MODSEQ {max(m2, m3)}")
    assert esort("SORT RETURN (COUNT) (DATE) UTF-8 MODSEQ 1").endswith(f" COUNT 5 MODSEQ {high}")
    assert esort("UID SORT RETURN (ALL) (DATE) UTF-8 MODSEQ 1").endswith(f" MODSEQ {high}")
    # Nothing matched: no MODSEQ (RFC 7162 3.1.5 gives it for matches only).
    assert esort(f"SORT RETURN (COUNT) (DATE) UTF-8 MODSEQ {high + 1}").endswith(" COUNT 0")


# ---------- THREAD (RFC 5256 3) ----------

def test_thread_references_tree(threadbox):
    """REFERENCES on THREAD_SET: 2 answers 1 by In-Reply-To, 3 by
    References 1 2, 4 by References 1; 5 and 6 reference a message that is
    not there, so a dummy parent holds them ("((5)(6))"); 8 has no
    references but "Re: Other" joins 7 by base subject (3.2 step 6);
    siblings 2 and 4 by sent date; the threads by the date of their first
    message (the dummy by its first child's)."""
    assert threadbox.untagged("THREAD REFERENCES UTF-8 ALL", "THREAD") == \
        ["* THREAD " + THREAD_REFERENCES]


def test_thread_orderedsubject(threadbox):
    """ORDEREDSUBJECT (3.1): by base subject, then sent date; the first
    message of each subject is the parent of the rest."""
    assert threadbox.untagged("THREAD ORDEREDSUBJECT UTF-8 ALL", "THREAD") == \
        ["* THREAD " + THREAD_ORDEREDSUBJECT]


def test_thread_uid_and_criteria_and_shapes(threadbox):
    uids = []
    for line in threadbox.untagged("FETCH 1:* (UID)", ""):
        mt = re.match(r"\* (\d+) FETCH \(UID (\d+)\)", line)
        if mt:
            uids.append(int(mt.group(2)))
    want = re.sub(r"\d+", lambda mt: str(uids[int(mt.group(0)) - 1]), THREAD_REFERENCES)
    assert threadbox.untagged("UID THREAD REFERENCES UTF-8 ALL", "THREAD") == ["* THREAD " + want]
    # Only 3 and 4 match: their common ancestor 1 is outside the search, so
    # it is a dummy holding both (2's dummy below it was pruned away).
    assert threadbox.untagged("THREAD REFERENCES UTF-8 3:4", "THREAD") == ["* THREAD ((4)(3))"]
    assert threadbox.untagged("THREAD REFERENCES UTF-8 3", "THREAD") == ["* THREAD (3)"]
    # RFC 5256 4: nothing matched is "* THREAD" alone.
    lines = threadbox.cmd('THREAD REFERENCES US-ASCII TEXT "gewp"')
    assert lines[0] == "* THREAD" and lines[-1].split()[1] == "OK", lines
    assert threadbox.cmd("THREAD MOOSE UTF-8 ALL")[-1].split()[1] == "BAD"
    assert threadbox.cmd("THREAD REFERENCES KOI8-R ALL")[-1].split()[1:3] == ["NO", "[BADCHARSET"]


# ---------- SEARCHRES (RFC 5182) ----------

def fetch_uids(r, what):
    out = []
    for line in r.untagged(what, ""):
        mt = re.match(r"\* (\d+) FETCH \(.*UID (\d+)", line)
        if mt:
            out.append((int(mt.group(1)), int(mt.group(2))))
    return out


def test_searchres_save_then_use(sortbox):
    r = sortbox
    all_uids = dict(fetch_uids(r, "FETCH 1:* (UID)"))
    # RFC 5182 2.4 example shape: SAVE alone answers no ESEARCH.
    lines = r.cmd('SEARCH RETURN (SAVE) FROM "charlie"')
    assert lines[-1].split()[1] == "OK" and len(lines) == 1, lines
    assert fetch_uids(r, "FETCH $ (UID)") == [(1, all_uids[1]), (4, all_uids[4])]
    assert fetch_uids(r, "UID FETCH $ (UID)") == [(1, all_uids[1]), (4, all_uids[4])]
    lines = r.cmd("STORE $ +FLAGS (\\Flagged)")
    assert lines[-1].split()[1] == "OK", lines
    assert sorted(int(x) for x in r.untagged("SEARCH FLAGGED", "SEARCH")[0].split()[2:]) == [1, 4]
    # $ inside a SEARCH program, and in its UID form.
    assert r.untagged("SEARCH $ SMALLER 1000", "SEARCH") == ["* SEARCH 1 4"]
    assert r.untagged("SEARCH UID $", "SEARCH") == ["* SEARCH 1 4"]
    assert r.untagged("SEARCH NOT $", "SEARCH") == ["* SEARCH 2 3 5"]
    # SAVE with MIN only keeps just that message; with others, all of them.
    lines = r.cmd("SEARCH RETURN (SAVE MIN) ALL")
    assert lines[0] == '* ESEARCH (TAG "r%d") MIN 1' % r.n, lines
    assert fetch_uids(r, "FETCH $ (UID)") == [(1, all_uids[1])]
    lines = r.cmd("SEARCH RETURN (SAVE MIN MAX) 2:4")
    assert fetch_uids(r, "FETCH $ (UID)") == [(2, all_uids[2]), (4, all_uids[4])]
    # SORT RETURN (SAVE): the saved set follows the same rule.
    r.cmd("SORT RETURN (SAVE MIN) (REVERSE SIZE) UTF-8 ALL")
    biggest = max(range(1, 6), key=lambda i: len(sort_message(SORT_SET[i - 1][1],
                                                              SORT_SET[i - 1][2])))
    assert fetch_uids(r, "FETCH $ (UID)") == [(biggest, all_uids[biggest])]
    # COPY $. RFC 5182 2.1: a SAVE answered BAD leaves $ as it was (as
    # Dovecot does), one answered NO empties it.
    r.cmd("CREATE Saved")
    assert r.cmd("COPY $ Saved")[-1].split()[1] == "OK"
    assert r.cmd("SEARCH RETURN (SAVE) MOOSE")[-1].split()[1] == "BAD"
    assert r.cmd("SORT RETURN (SAVE) (MOOSE) UTF-8 ALL")[-1].split()[1] == "BAD"
    assert r.cmd("SORT RETURN (SAVE) (SIZE) UTF-8 MOOSE")[-1].split()[1] == "BAD"
    assert fetch_uids(r, "FETCH $ (UID)") == [(biggest, all_uids[biggest])]
    assert r.cmd("SEARCH RETURN (SAVE) CHARSET X-NOSUCH ALL")[-1].split()[1] == "NO"
    assert fetch_uids(r, "FETCH $ (UID)") == []
    r.cmd("SEARCH RETURN (SAVE) ALL")
    assert r.cmd("SORT RETURN (SAVE) (SIZE) X-NOSUCH ALL")[-1].split()[1] == "NO"
    assert fetch_uids(r, "FETCH $ (UID)") == []
    st = r.untagged("STATUS Saved (MESSAGES)", "STATUS")
    assert st and st[0].endswith("(MESSAGES 1)"), st


def test_searchres_after_expunge_and_reselect(sortbox):
    r = sortbox
    before = dict(fetch_uids(r, "FETCH 1:* (UID)"))
    r.cmd("SEARCH RETURN (SAVE) 2:4")
    r.cmd("STORE 3 +FLAGS.SILENT (\\Deleted)")
    lines = r.cmd("EXPUNGE")
    assert "* 3 EXPUNGE" in lines, lines
    # The expunged message left $: the old 4 is now 3.
    assert fetch_uids(r, "FETCH $ (UID)") == [(2, before[2]), (3, before[4])]
    assert fetch_uids(r, "UID FETCH $ (UID)") == [(2, before[2]), (3, before[4])]
    # A new SELECT forgets $.
    r.cmd("SELECT INBOX")
    assert fetch_uids(r, "FETCH $ (UID)") == []
    assert r.untagged("SEARCH $", "SEARCH") == ["* SEARCH"]


def test_searchres_expunged_by_another_session(imapd, sortbox):
    r = sortbox
    before = dict(fetch_uids(r, "FETCH 1:* (UID)"))
    r.cmd("UID SEARCH RETURN (SAVE) ALL")
    other = login(imapd)
    other.select("INBOX")
    other.store("1", "+FLAGS.SILENT", "(\\Deleted)")
    other.expunge()
    other.logout()
    lines = r.cmd("NOOP")
    assert "* 1 EXPUNGE" in lines, lines
    got = fetch_uids(r, "UID FETCH $ (UID)")
    assert [u for _, u in got] == [before[i] for i in range(2, 6)]


def test_searchres_rfc5182_pipelined_example(sortbox):
    """RFC 5182 2.4's example, pipelined as the RFC shows it: the SAVE
    completes before the commands that use $ run, and each answer is the
    one the saved result gives (SINCE 2 January by INTERNALDATE is 1, 3, 4
    and 5; without Charlie's, 3 and 5)."""
    r = sortbox
    uids = dict(fetch_uids(r, "FETCH 1:* (UID)"))
    base = r.n
    r.s.sendall(b'A300 SEARCH RETURN (SAVE) SINCE 2-Jan-2026 NOT FROM "charlie"\r\n'
                b"A301 FETCH $ (UID FLAGS)\r\n"
                b"A302 STORE $ +FLAGS (Processed)\r\n"
                b"A303 SEARCH $ SMALLER 4096\r\n")
    lines = []
    while not (lines and lines[-1].startswith("A303 ")):
        line = r.f.readline()
        assert line, lines
        lines.append(line.decode().rstrip("\r\n"))
    assert r.n == base
    tagged = [line for line in lines if line.startswith("A30")]
    assert [t.split()[:2] for t in tagged] == [["A300", "OK"], ["A301", "OK"], ["A302", "OK"],
                                               ["A303", "OK"]], lines
    # SAVE alone: nothing untagged before A300's OK.
    assert lines[0].startswith("A300 OK"), lines
    fetched = [line for line in lines[1:lines.index(tagged[1])] if " FETCH " in line]
    assert [re.match(r"\* (\d+) FETCH \(UID (\d+)", f).groups() for f in fetched] == \
        [(str(s), str(uids[s])) for s in (3, 5)], fetched
    stored = [line for line in lines if " FETCH " in line and "Processed" in line]
    assert [line.split()[1] for line in stored] == ["3", "5"], lines
    assert "* SEARCH 3 5" in lines, lines
