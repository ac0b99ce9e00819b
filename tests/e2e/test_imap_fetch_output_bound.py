"""A FETCH whose answer is built in memory (messages below the sendfile
size, several body items each) for a client that reads nothing: the
FETCH stops producing once the session's output is full, so petreld's
memory stays bounded (VmRSS from /proc, with a margin), and once the
client reads again the whole answer arrives, byte-exact. The big-message
tests in test_imap_backpressure.py take the file and streaming paths,
which bound themselves; this one takes the batch path, where only the
FETCH loop's own output-full check holds the line."""

import os
import re
import time

from test_imap_backpressure import populate, slow_client, status_kb
from test_imap_session import imap_overrides

MESSAGES = 20
SIZE = 50 * 1024      # below FETCH_SENDFILE_MIN: built in memory
ITEMS = 20            # BODY.PEEK[TEXT] items per message: ~1 MB a message
BOUND_KB = 10 * 1024  # the answer is ~20 MB


def test_in_memory_fetch_for_a_client_that_reads_nothing_is_bounded(petreld, tmp_path):
    asan = os.environ.get("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=1")
    d = petreld(imap_overrides(tmp_path), env={"ASAN_OPTIONS": asan + ":quarantine_size_mb=1"})
    msgs = populate(d, MESSAGES, SIZE)
    s, f = slow_client(d, "plain")
    base = status_kb(d.pid, "VmRSS")
    items = " ".join(["BODY.PEEK[TEXT]"] * ITEMS)
    s.sendall(b"f1 FETCH 1:* (%s)\r\n" % items.encode())
    peak = base
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and peak - base <= BOUND_KB:
        peak = max(peak, status_kb(d.pid, "VmRSS"))
        time.sleep(0.05)
    print(f"unread in-memory FETCH: VmRSS +{peak - base} kB")
    assert peak - base <= BOUND_KB, f"VmRSS grew by {peak - base} kB for an unread FETCH"
    # The client reads again: the whole answer, each body as stored.
    s.settimeout(60)
    texts = 0
    while True:
        line = f.readline()
        assert line, "connection closed"
        if line.startswith(b"f1 "):
            assert line.startswith(b"f1 OK"), line
            break
        m = re.match(rb"\* (\d+) FETCH ", line)
        if not m:
            continue
        want = msgs[int(m.group(1)) - 1].split(b"\r\n\r\n", 1)[1]
        rest = line
        while True:
            lit = re.search(rb"\{(\d+)\}\r\n$", rest)
            if not lit:
                break
            body = f.read(int(lit.group(1)))
            assert body == want
            texts += 1
            rest = f.readline()
    assert texts == MESSAGES * ITEMS
    s.close()
