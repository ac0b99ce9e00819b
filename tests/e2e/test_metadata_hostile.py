"""METADATA against a hostile client and a failing dict: values and entry
counts at and over the limits, long, deep and malformed entry names,
binary literals, a Redis dict that goes away mid-session, and the operator
API fed bad bodies. Each answer is a clear NO/BAD (or 4xx), nothing already
stored is lost, and nothing hangs."""

import base64
import socket
import time

import pytest

from servers import REDIS_CLI, REDIS_SERVER, start_redis, stop_redis
from servers import pgsql_server, redis_server  # noqa: F401 (fixtures of the dict variants)
from test_metadata import MAX_ENTRIES, MAX_VALUE, Api, Raw, md_overrides, vm_rss_kb


@pytest.fixture
def mdd(petreld, tmp_path):
    return petreld(md_overrides(tmp_path, {"driver": "file", "path": str(tmp_path / "meta.db")}))


def b64(data):
    return base64.b64encode(data).decode()


def test_values_at_and_over_the_limit(mdd):
    c = Raw(mdd)
    at = b"v" * MAX_VALUE
    assert c.cmd_literal("a", b"SETMETADATA INBOX (/shared/at {%d}" % MAX_VALUE, at) == \
        b"a OK SETMETADATA complete\r\n"
    over = b"w" * (MAX_VALUE + 1)
    assert c.cmd_literal("b", b"SETMETADATA INBOX (/shared/over {%d}" % len(over), over) == \
        b"b NO [METADATA MAXSIZE %d] Annotation too large\r\n" % MAX_VALUE
    # a refused command of several entries writes none of them
    assert c.cmd("c", 'SETMETADATA INBOX (/shared/first "1" /shared/over "%s")'
                 % ("w" * (MAX_VALUE + 1))).startswith(b"c NO [METADATA MAXSIZE")
    got = c.cmd("g", 'GETMETADATA INBOX (/shared/at /shared/over /shared/first)')
    assert got == b'* METADATA "INBOX" (/shared/at {%d}\r\n%s)\r\ng OK GETMETADATA complete\r\n' % (
        MAX_VALUE, at) or got == (b'* METADATA "INBOX" (/shared/at "%s")\r\n'
                                  b"g OK GETMETADATA complete\r\n" % at), got
    c.close()


def test_huge_literals_are_dropped_as_they_come(petreld, tmp_path):
    """Non-synchronizing literals of 8, 32 and 64 MB for a value: each
    answered BAD [TOOBIG] after its bytes, none held. ASan's quarantine
    (which keeps freed memory resident) is off for this daemon, so VmRSS
    shows what petreld holds rather than what it churned through."""
    d = petreld(md_overrides(tmp_path, {"driver": "file", "path": str(tmp_path / "meta.db")}),
                env={"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1:quarantine_size_mb=0:"
                                     "thread_local_quarantine_size_kb=0"})
    c = Raw(d)
    chunk = b"h" * 65536
    before = vm_rss_kb(d.pid)
    for mb in (8, 32, 64):
        c.send(b"d SETMETADATA INBOX (/shared/huge {%d+}\r\n" % (mb << 20))
        for _ in range((mb << 20) // len(chunk)):
            c.send(chunk)
        c.send(b")\r\n")
        assert c.read_until("d") == b"d BAD [TOOBIG] Literal too large\r\n", mb
    grown = vm_rss_kb(d.pid) - before
    assert grown < 4 * 1024, f"petreld grew by {grown} kB over 104 MB of refused literals"
    assert c.cmd("e", "NOOP").startswith(b"e OK")
    assert c.cmd("g", "GETMETADATA INBOX /shared/huge") == b"g OK GETMETADATA complete\r\n"
    c.close()


def test_too_many_entries_and_too_many_in_one_command(mdd):
    c = Raw(mdd)
    pairs = " ".join(f'/private/e{i} "v"' for i in range(MAX_ENTRIES + 1))
    assert c.cmd("a", f"SETMETADATA INBOX ({pairs})") == \
        b"a NO [METADATA TOOMANY] Too many annotations\r\n"
    assert c.cmd("b", 'GETMETADATA INBOX (DEPTH infinity) /private') == \
        b"b OK GETMETADATA complete\r\n"
    # the grammar's own cap on one command's entries
    pairs = " ".join(f'/private/e{i} NIL' for i in range(1001))
    assert c.cmd("c", f"SETMETADATA INBOX ({pairs})") == b"c BAD Too many entries\r\n"
    names = " ".join(f"/private/e{i}" for i in range(1001))
    assert c.cmd("d", f"GETMETADATA INBOX ({names})") == b"d BAD Too many entries\r\n"
    c.close()


def test_long_deep_and_malformed_names(mdd):
    c = Raw(mdd)
    longest = "/shared/" + "n" * (1024 - len("/shared/"))
    assert c.cmd("a", f'SETMETADATA INBOX ({longest} "x")') == b"a OK SETMETADATA complete\r\n"
    assert c.cmd("b", f'SETMETADATA INBOX ({longest}n "x")') == b"b BAD Entry name is too long\r\n"
    deep = "/shared" + "/d" * 500
    assert c.cmd("c", f'SETMETADATA INBOX ({deep} "deep")') == b"c OK SETMETADATA complete\r\n"
    assert c.cmd("d", "GETMETADATA INBOX (DEPTH 1) /shared/d").count(b"/shared/") == 0
    assert f'{deep} "deep"'.encode() in c.cmd("e", "GETMETADATA INBOX (DEPTH infinity) /shared/d")
    for name, reason in [
            (b"/shared/*", b"Entry name can't contain '*' or '%'"),
            (b"/shared/%", b"Entry name can't contain '*' or '%'"),
            (b"/shared//x", b"Entry name can't contain consecutive '/'"),
            (b"//shared/x", b"Entry name must begin with /private or /shared"),
            (b"/shared/", b"Entry name can't end with '/'"),
            (b"/sharedx/y", b"Entry name must begin with /private or /shared")]:
        assert c.cmd("f", b"GETMETADATA INBOX " + name) == b"f BAD " + reason + b"\r\n", name
    # 8-bit and NUL bytes in a name, sent as literals: BAD (RFC 5464 3.2)
    assert c.cmd_literal("g", b"GETMETADATA INBOX {14}", b"/shared/caf\xc3\xa9s", b"") == \
        b"g BAD Entry name must be printable ASCII\r\n"
    # (an entry is an astring: a literal8 is no entry name at all)
    assert c.cmd_literal("h", b"GETMETADATA INBOX ~{10}", b"/shared/a\x00b", b"").startswith(
        b"h BAD ")
    assert c.cmd_literal("i", b"GETMETADATA INBOX {10}", b"/shared/a\x00b", b"").startswith(
        b"i BAD ")
    c.close()


def test_binary_values_round_trip_through_imap_and_api(mdd):
    c = Raw(mdd)
    blob = bytes(range(256)) * 4  # every byte, NUL included: 1024 bytes
    assert c.cmd_literal("a", b"SETMETADATA INBOX (/private/blob ~{%d}" % len(blob), blob) == \
        b"a OK SETMETADATA complete\r\n"
    want = (b'* METADATA "INBOX" (/private/blob ~{1024}\r\n' + blob +
            b")\r\nb OK GETMETADATA complete\r\n")
    c.send(b"b GETMETADATA INBOX /private/blob\r\n")
    assert c.f.read(len(want)) == want
    assert Api(mdd).get("/private/blob") == blob
    # an empty value is a value, not a deletion
    assert c.cmd("c", 'SETMETADATA INBOX (/private/empty "")') == b"c OK SETMETADATA complete\r\n"
    assert c.cmd("d", "GETMETADATA INBOX /private/empty") == (
        b'* METADATA "INBOX" (/private/empty "")\r\nd OK GETMETADATA complete\r\n')
    c.close()


def test_api_bad_bodies_and_as_user(mdd):
    api = Api(mdd)
    u = {"user": "alice", "folder": "INBOX"}
    cases = [
        ({**u, "entry": 5}, "get", 400),
        ({**u, "entry": "/shared/x", "value": 5}, "set", 400),
        ({**u, "entry": "/shared/x"}, "set", 400),  # no value
        ({**u, "scope": ["shared"]}, "list", 400),
        ({**u}, "list", 400),
        ({**u, "entry": "/shared/x", "as_user": "../bob"}, "get", 400),
        ({**u, "entry": "/shared/x", "as_user": "b" * 300}, "get", 400),
        ({**u, "entry": "/shared/x", "as_user": "bo\u0000b"}, "get", 400),
        ({**u, "entry": "/shared/x", "as_user": 7}, "get", 400),
        ({**u, "entry": "/private/x", "value": b64(b"v"), "as_user": "bob\nalice"}, "set", 400),
        ({"folder": "INBOX", "entry": "/shared/x"}, "get", 400),
        ({**u, "entry": "/shared/x\u00e9"}, "get", 400),
        ({**u, "entry": "/private/vendor/vendor.dovecot/pvt/server/x"}, "get", 400),
    ]
    for body, op, status in cases:
        r = api.post(op, body)
        assert r.status == status, (body, r.status, r.body)
        assert isinstance(r.json().get("error"), str), (body, r.body)
    for raw_body in (b"not json", b"[1,2]", b"{", b'{"user": "alice"'):
        r = mdd.post("backend", "/api/backend/metadata/get", body=raw_body)
        assert r.status == 400, (raw_body, r.status, r.body)
    # nothing of the above was written for anybody
    assert api.list("private", as_user="bob") == {}
    assert api.list("private") == {} and api.list("shared") == {}


@pytest.fixture
def own_redis(tmp_path):
    import os
    if not os.path.exists(REDIS_SERVER):
        pytest.skip("redis-server is not installed")
    server = start_redis(tmp_path / "redis")
    yield server
    stop_redis(server)


def test_redis_going_away_answers_no_loses_nothing_and_recovers(petreld, tmp_path, own_redis):
    import subprocess
    d = petreld(md_overrides(tmp_path, {"driver": "kvstore", "address": own_redis.address,
                                        "prefix": "hostile:"}))
    c = Raw(d)
    assert c.cmd("a", 'SETMETADATA INBOX (/shared/comment "kept")') == b"a OK SETMETADATA complete\r\n"
    # Redis stops, saving what it holds (--dir is the fixture's)
    subprocess.run([REDIS_CLI, "-h", "127.0.0.1", "-p", str(own_redis.port), "shutdown", "save"],
                   capture_output=True, timeout=30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", own_redis.port), timeout=1).close()
            time.sleep(0.05)
        except OSError:
            break
    c.sock.settimeout(20)
    t0 = time.monotonic()
    assert c.cmd("b", "GETMETADATA INBOX /shared/comment") == \
        b"b NO [UNAVAILABLE] Metadata storage failed.\r\n"
    assert c.cmd("c", 'SETMETADATA INBOX (/shared/comment "lost?")') == \
        b"c NO [UNAVAILABLE] Metadata storage failed.\r\n"
    assert time.monotonic() - t0 < 15
    assert b"d OK" in c.cmd("d", "NOOP")
    r = Api(d).post("get", {"user": "alice", "folder": "INBOX", "entry": "/shared/comment"})
    assert r.status >= 500 and "error" in r.json(), r
    # back on the same port with its data: the old value, not the refused one
    start_redis(own_redis.dir, port=own_redis.port)
    deadline = time.monotonic() + 20
    while True:
        out = c.cmd("e", "GETMETADATA INBOX /shared/comment")
        if out.endswith(b"e OK GETMETADATA complete\r\n") or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert out == b'* METADATA "INBOX" (/shared/comment "kept")\r\ne OK GETMETADATA complete\r\n', out
    c.close()


def test_maxsize_boundary_and_longentries_is_the_biggest(mdd):
    """RFC 5464 4.2.1: values "less than or equal in octet size" to MAXSIZE
    are returned; LONGENTRIES is "the size of the biggest entry value
    requested by the client that exceeded the MAXSIZE limit"."""
    c = Raw(mdd)
    assert c.cmd("s", 'SETMETADATA INBOX (/shared/a "%s" /shared/b "%s" /shared/c "%s")'
                 % ("a" * 30, "b" * 20, "c" * 10)) == b"s OK SETMETADATA complete\r\n"
    assert c.cmd("g", "GETMETADATA (MAXSIZE 10) INBOX (/shared/a /shared/b /shared/c)") == (
        b'* METADATA "INBOX" (/shared/c "cccccccccc")\r\n'
        b"g OK [METADATA LONGENTRIES 30] GETMETADATA complete\r\n")
    assert c.cmd("g", "GETMETADATA (MAXSIZE 9 DEPTH 1) INBOX /shared") == \
        b"g OK [METADATA LONGENTRIES 30] GETMETADATA complete\r\n"
    assert c.cmd("g", "GETMETADATA (MAXSIZE 20) INBOX (/shared/c /shared/b)") == (
        b'* METADATA "INBOX" (/shared/c "cccccccccc" /shared/b "bbbbbbbbbbbbbbbbbbbb")\r\n'
        b"g OK GETMETADATA complete\r\n")
    assert c.cmd("g", "GETMETADATA (MAXSIZE 0) INBOX /shared/b") == \
        b"g OK [METADATA LONGENTRIES 20] GETMETADATA complete\r\n"
    c.close()


NO_QUARANTINE = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1:quarantine_size_mb=0:"
                                 "thread_local_quarantine_size_kb=0"}


def fill_64k_entries(c, count):
    """/shared/e0 .. e<count-1> of INBOX, 64 KiB of "x" each, 100 a command;
    returns the exact GETMETADATA (DEPTH infinity) response they make."""
    val = b"x" * 65536
    for k in range(0, count, 100):
        n = min(100, count - k)
        pairs = b" ".join(b"/shared/e%d {65536+}\r\n" % (k + i) + val for i in range(n))
        c.send(b"s%d SETMETADATA INBOX (" % k + pairs + b")\r\n")
        assert c.read_until("s%d" % k).endswith(b"OK SETMETADATA complete\r\n")
    names = sorted(b"/shared/e%d" % i for i in range(count))  # key order
    return b'* METADATA "INBOX" (' + b" ".join(n + b" {65536}\r\n" + val for n in names) + b")\r\n"


def unread_bytes(sock):
    import fcntl
    import termios
    n = bytearray(4)
    fcntl.ioctl(sock.fileno(), termios.FIONREAD, n)
    return int.from_bytes(n, "little")


def test_a_large_getmetadata_is_not_built_whole(petreld, tmp_path):
    """200 entries of 64 KiB (12.8 MB) answered to a client that reads
    nothing: petreld writes entries only while the client takes them, so
    it holds the output's high-water mark (256 KiB) and one entry, not the
    response (measured on this test: 11 MB grown when the whole response
    was queued at once, under 1 MB streamed). ASan's quarantine is off for
    this daemon so VmRSS shows what is held. The bytes are those of one
    untagged response, written in pieces; a client that goes away in the
    middle of one costs nothing after."""
    from conftest import wait_for
    cfg = md_overrides(tmp_path, {"driver": "file", "path": str(tmp_path / "meta.db")},
                       metadata_max_value_bytes=65536, metadata_max_entries=1000)
    d = petreld(cfg, env=NO_QUARANTINE)
    c = Raw(d)
    expected = fill_64k_entries(c, 200)
    before = vm_rss_kb(d.pid)
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    c.send(b"g GETMETADATA (DEPTH infinity) INBOX /shared\r\n")
    wait_for(lambda: unread_bytes(c.sock) > 32 * 1024, what="the answer reaching the client")
    # Sampled for a while: a daemon that kept producing would show it here.
    grown = 0
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        grown = max(grown, vm_rss_kb(d.pid) - before)
        time.sleep(0.05)
    assert grown < 2 * 1024, f"petreld grew by {grown} kB answering 12.8 MB of values"
    # another session is served meanwhile (the paused one holds no lock)
    other = Raw(d)
    assert other.cmd("n", "SETMETADATA INBOX (/shared/other \"v\")") == \
        b"n OK SETMETADATA complete\r\n"
    c.sock.settimeout(30)
    out = c.read_until("g")
    assert out == expected + b"g OK GETMETADATA complete\r\n" or out.startswith(
        expected[:-3]), len(out)  # "other" sorts after the cursor: it may be in the answer
    assert out.endswith(b")\r\ng OK GETMETADATA complete\r\n")
    # MAXSIZE leaves every one out, LONGENTRIES names the biggest
    assert c.cmd("m", "GETMETADATA (MAXSIZE 1000 DEPTH infinity) INBOX /shared") == (
        b'* METADATA "INBOX" (/shared/other "v")\r\n'
        b"m OK [METADATA LONGENTRIES 65536] GETMETADATA complete\r\n")
    c.close()
    # a client that asks and leaves while its answer waits: the session
    # and its reader go (ASan checks nothing leaks or is used after)
    gone = Raw(d)
    gone.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    gone.send(b"g GETMETADATA (DEPTH infinity) INBOX /shared\r\n")
    wait_for(lambda: unread_bytes(gone.sock) > 32 * 1024, what="the answer reaching the client")
    gone.sock.close()
    assert other.cmd("p", "NOOP").startswith(b"p OK")
    other.close()


@pytest.mark.parametrize("variant", ["file", "sql-sqlite", "sql-pgsql", "kvstore"])
def test_a_paused_getmetadata_resumes_on_every_dict(variant, petreld, tmp_path, request):
    """150 entries of 64 KiB (9.6 MB, more than the socket buffers and the
    output bound hold) read by a client that reads slowly: the reader
    pauses and resumes on each dict (the SQL and Redis cursors kept across
    pauses) and the answer is byte for byte the whole one, while another
    session writes."""
    from test_dict_behaviour import variant_config
    cfg = md_overrides(tmp_path, variant_config(variant, request, tmp_path),
                       metadata_max_value_bytes=65536, metadata_max_entries=1000)
    d = petreld(cfg)
    c = Raw(d)
    expected = fill_64k_entries(c, 150)
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    c.send(b"g GETMETADATA (DEPTH infinity) INBOX /shared\r\n")
    other = Raw(d)
    for i in range(3):
        assert other.cmd("w%d" % i, "SETMETADATA INBOX (/private/p%d \"v\")" % i) == \
            b"w%d OK SETMETADATA complete\r\n" % i
    c.sock.settimeout(30)
    assert c.read_until("g") == expected + b"g OK GETMETADATA complete\r\n"
    # named entries: one lookup each (asynchronous for PostgreSQL and Redis),
    # pausing after a lookup's entry, then DEPTH 1's iteration below it
    names = b" ".join(b"/shared/e%d" % i for i in range(150))
    c.send(b"n GETMETADATA (DEPTH 1) INBOX (" + names + b")\r\n")
    assert other.cmd("w9", "NOOP").startswith(b"w9 OK")
    assert c.read_until("n") == b'* METADATA "INBOX" (' + b" ".join(
        b"/shared/e%d {65536}\r\n" % i + b"x" * 65536 for i in range(150)) + \
        b")\r\nn OK GETMETADATA complete\r\n"
    assert c.cmd("h", "GETMETADATA INBOX /shared/e7") == \
        b'* METADATA "INBOX" (/shared/e7 {65536}\r\n' + b"x" * 65536 + b")\r\nh OK GETMETADATA complete\r\n"
    other.close()
    c.close()


def test_a_stalled_getmetadata_is_closed_after_the_idle_timeout(petreld, tmp_path):
    """A client that asks for 9.6 MB of entries and never reads: the paused
    response does not keep the session past imap.idle_timeout (which then
    counts on the output); it is cut off without a BYE, which would land
    inside the untagged response, and what the client got is a prefix of
    the response."""
    from conftest import wait_for
    from test_imap_workers import sessions_gauge
    cfg = md_overrides(tmp_path, {"driver": "file", "path": str(tmp_path / "meta.db")},
                       metadata_max_value_bytes=65536, metadata_max_entries=1000)
    cfg["imap"]["idle_timeout"] = "1s"
    d = petreld(cfg)
    c = Raw(d)
    expected = fill_64k_entries(c, 150)
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    c.send(b"g GETMETADATA (DEPTH infinity) INBOX /shared\r\n")
    wait_for(lambda: unread_bytes(c.sock) > 32 * 1024, what="the answer reaching the client")
    wait_for(lambda: sessions_gauge(d, "authenticated") == 0, timeout=20,
             what="the stalled session closed")
    got = b""
    c.sock.settimeout(10)
    try:
        while chunk := c.sock.recv(1 << 20):
            got += chunk
    except ConnectionResetError:
        pass
    assert 32 * 1024 < len(got) < len(expected), len(got)
    assert expected.startswith(got) and b"* BYE" not in got
    c.close()
