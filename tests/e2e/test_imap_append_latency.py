"""APPEND latency from one client (issue 20 item 13): a synchronising
literal's round trip ("+ OK", then the literal, then the CRLF ending the
command) must not wait for a delayed ACK. imaplib sends the literal and
its closing CRLF in two writes, so Nagle on the client holds the CRLF
until the server ACKs the literal; a server that ACKs only after its
delayed-ACK timer (~40 ms on Linux) makes every APPEND take that long."""

import time

import pytest

from test_imap_session import imap_overrides, login

MSG = (b"From: a@example.org\r\nTo: b@example.org\r\nSubject: latency\r\n\r\n" +
       (b"x" * 74 + b"\r\n") * 26)


@pytest.fixture
def imapd(petreld, tmp_path):
    # The stall is the same with every mail.fsync setting; without the disk
    # flushes (tens of ms each on a disk shared with other jobs) the test
    # measures only the network round trips it is about.
    cfg = imap_overrides(tmp_path)
    cfg["mail"]["fsync"] = "never"
    return petreld(cfg)


def test_fifty_sequential_appends_do_not_stall(imapd):
    m = login(imapd)
    assert 2000 <= len(MSG) <= 2200
    m.append("INBOX", None, None, MSG)  # warm-up: index created, user cached
    started = time.monotonic()
    for _ in range(50):
        typ, data = m.append("INBOX", None, None, MSG)
        assert typ == "OK", data
    elapsed = time.monotonic() - started
    print(f"50 APPENDs of {len(MSG)} bytes: {elapsed:.3f} s")
    typ, data = m.select("INBOX")
    assert typ == "OK" and data == [b"51"]
    typ, data = m.fetch("51", "(BODY.PEEK[])")
    assert data[0][1] == MSG
    m.logout()
    # With a 40 ms stall per APPEND this is over 2 s; without, well under 1 s
    # even under the sanitizers.
    assert elapsed < 1.5, f"50 APPENDs took {elapsed:.2f} s"
