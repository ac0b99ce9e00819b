"""The conformance checker (imap_model.py) and concurrent sessions run
through it (imap_load.py).

First the checker's own tests: transcripts with each defect issue 20
named put in by hand (an EXPUNGE during a STORE, also pipelined; updates
after BYE; a keyword used before FLAGS announced it; a FETCH that failed),
each of which it must report, and a correct transcript it must pass.
Then a live run: sessions of one user on one folder, a random mix each,
every untagged response checked against the session's model; no
violation is allowed. bench/imap-conformance.py runs the same for longer
with more sessions."""

import imaplib
from collections import Counter

import pytest

from imap_load import run_sessions
from imap_model import SessionModel, recent_seen_twice
from test_imap_session import addr, imap_overrides


def feed(model, transcript):
    """Lines starting with 'C: tag COMMAND' are what the client sent."""
    for line in transcript.strip().splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("C: "):
            tag, rest = line[3:].split(" ", 1)
            name = rest.split(" ")
            n = 2 if name[0] == "UID" else 1
            model.sent(tag, " ".join(name[:n]), " ".join(name[n:]))
            if name[0] in ("SELECT", "EXAMINE"):
                model.selecting()
        else:
            model.received(line.encode() + b"\r\n")
    return [v.kind for v in model.violations]


SELECTED = """
C: a1 SELECT INBOX
* FLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft $Work)
* OK [PERMANENTFLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft $Work \\*)] Ok.
* 3 EXISTS
a1 OK [READ-WRITE] done
"""


def test_checker_passes_a_correct_session():
    kinds = feed(SessionModel(), SELECTED + """
C: a2 FETCH 1:3 (UID FLAGS)
* 1 FETCH (UID 4 FLAGS (\\Seen))
* 2 FETCH (UID 7 FLAGS ($Work))
* 3 FETCH (UID 9 FLAGS ())
a2 OK done
C: a3 NOOP
* 2 EXPUNGE
* FLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft $Work $New)
* 2 FETCH (UID 9 FLAGS ($New))
* 3 EXISTS
a3 OK done
C: a4 LOGOUT
* BYE bye
a4 OK done
""")
    assert kinds == []


def test_checker_catches_expunge_during_store():
    kinds = feed(SessionModel(), SELECTED + """
C: a2 STORE 1 +FLAGS ($Work)
* 2 EXPUNGE
* 1 FETCH (FLAGS ($Work))
a2 OK done
""")
    assert kinds == ["expunge-during-fetch-store-search"]


def test_checker_catches_expunge_while_a_pipelined_store_is_uncompleted():
    kinds = feed(SessionModel(), SELECTED + """
C: a2 NOOP
C: a3 STORE 1 +FLAGS ($Work)
* 3 EXPUNGE
a2 OK done
* 1 FETCH (FLAGS ($Work))
a3 OK done
""")
    assert kinds == ["expunge-during-fetch-store-search"]


def test_checker_catches_updates_after_bye():
    kinds = feed(SessionModel(), SELECTED + """
C: a2 LOGOUT
* BYE bye
* 2 EXPUNGE
* 1 FETCH (FLAGS (\\Seen))
a2 OK done
""")
    assert kinds == ["after-bye", "after-bye"]


def test_checker_catches_an_unannounced_keyword():
    kinds = feed(SessionModel(), SELECTED + """
C: a2 NOOP
* 1 FETCH (UID 4 FLAGS (\\Seen $Label1))
a2 OK done
""")
    assert kinds == ["keyword-unannounced"]


def test_checker_catches_a_failed_fetch_and_other_breaches():
    kinds = feed(SessionModel(), SELECTED + """
C: a2 FETCH 1:3 (BODY.PEEK[])
a2 NO [EXPUNGEISSUED] Some messages were expunged.
C: a3 NOOP
* 5 EXPUNGE
* 1 EXISTS
* 2 FETCH (UID 3 FLAGS ())
a3 OK done
C: a4 NOOP
* 1 FETCH (UID 8 FLAGS ())
* 1 FETCH (UID 9 FLAGS ())
a4 OK done
""")
    assert kinds == ["fetch-failed", "seq-out-of-range", "exists-shrank", "seq-out-of-range",
                     "uid-order"]


def test_checker_catches_recent_above_exists():
    kinds = feed(SessionModel(), SELECTED + """
C: a2 NOOP
* 4 RECENT
* 4 EXISTS
a2 OK done
C: a3 NOOP
* 5 EXISTS
* 1 RECENT
a3 OK done
""")
    assert kinds == ["recent-above-exists"]


def test_checker_catches_a_store_answering_the_wrong_flags():
    kinds = feed(SessionModel(), SELECTED + """
C: a2 STORE 1:2 +FLAGS (\\Seen $Work)
* 1 FETCH (FLAGS (\\Seen $Work))
* 2 FETCH (FLAGS (\\Seen))
a2 OK done
C: a3 UID STORE 7 -FLAGS ($Work)
* 2 FETCH (UID 7 FLAGS ($Work))
a3 OK done
C: a4 STORE 3 FLAGS (\\Flagged)
* 3 FETCH (FLAGS (\\Recent \\Flagged))
a4 OK done
C: a5 STORE 1 FLAGS (\\Flagged)
* 1 FETCH (FLAGS (\\Flagged \\Seen))
a5 OK done
C: a6 STORE 2 +FLAGS.SILENT ($Work)
* 2 FETCH (FLAGS ())
a6 OK done
""")
    assert kinds == ["store-flags-wrong"] * 3


def test_checker_catches_a_message_recent_in_two_sessions():
    a, b = SessionModel(name="a"), SessionModel(name="b")
    feed(a, SELECTED + """
C: a2 FETCH 1:2 (UID FLAGS)
* 1 FETCH (UID 4 FLAGS (\\Recent))
* 2 FETCH (UID 7 FLAGS (\\Recent))
a2 OK done
""")
    feed(b, SELECTED + """
C: a2 FETCH 2:3 (UID FLAGS)
* 2 FETCH (UID 7 FLAGS (\\Recent \\Seen))
* 3 FETCH (UID 9 FLAGS ())
a2 OK done
""")
    assert recent_seen_twice([a, b]) == [(7, "a", "b")]


@pytest.fixture
def imapd(petreld, tmp_path):
    return petreld(imap_overrides(tmp_path))


def test_concurrent_sessions_follow_the_rfc(imapd):
    """Twelve sessions of one user on INBOX for 15 s: every untagged response
    fits each session's model (bench/imap-conformance.py: 50 sessions,
    5 minutes)."""
    m = imaplib.IMAP4(*addr(imapd))
    m.login("alice", "wonderland")
    assert m.create("Other")[0] == "OK"
    m.logout()
    models, commands, errors = run_sessions(addr(imapd), "alice", "wonderland", sessions=12,
                                            seconds=15, seed=20)
    assert not errors, errors
    assert commands > 300, commands
    violations = [(mo.name, v.kind, v.line[:200], v.detail) for mo in models
                  for v in mo.violations]
    assert not violations, (Counter(v[1] for v in violations), violations[:20])
    assert not recent_seen_twice(models)
