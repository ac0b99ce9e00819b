"""Uploads are spooled to disk as they arrive, never held whole in memory
(issue 19 item 6): many sessions halfway through a large IMAP APPEND
literal, or a large LMTP DATA, leave petreld's resident memory bounded.
The uploads that complete are stored byte for byte; the ones whose client
goes away leave nothing in new/, cur/ or tmp/. Clients: raw sockets (a
real client sending half a literal), imaplib and smtplib for checks."""

import imaplib
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from conftest import wait_for
from test_imap_session import imap_overrides, addr as imap_addr
from test_lmtp import lmtp_overrides, addr as lmtp_addr, imap_bodies, split_trace

SESSIONS = 16
SIZE = 16 * 1024 * 1024
CHUNK = 1024 * 1024
# Resident memory the daemon may gain over its start with every session
# halfway through its upload: the sessions' buffers, not their uploads
# (16 x 8 MB = 128 MB would be kept in memory without spooling; with it
# the growth is about 10 MB under ASan).
RSS_MARGIN_KB = 64 * 1024


def rss_kb(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


# ASan keeps up to 256 MB of freed memory in quarantine, which would be
# measured as petreld's: keep it small, the checks stay on.
SMALL_QUARANTINE = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1:quarantine_size_mb=4:"
                                    "thread_local_quarantine_size_kb=256"}


def message(i, size=SIZE, bare_lf=False):
    """A message of exactly `size` bytes, different per session, with CRLF
    lines and a few bare CRs (and with `bare_lf` bare LFs, which IMAP
    presents as CRLF) and 8-bit bytes in it."""
    head = (f"From: u{i}@example.org\r\nTo: alice@example.org\r\n"
            f"Subject: upload {i}\r\n\r\n").encode()
    line = (f"{i:04d} " + "abcdefghij" * 7).encode() + b"\xe9\r\n"
    body = bytearray(head)
    while len(body) < size:
        body += line
        if len(body) % 4099 < 90:
            body += (b"bare lf\n" if bare_lf else b"") + b"bare cr\rend\r\n"
    del body[size - 2:]
    body += b"\r\n"
    assert len(body) == size
    return bytes(body)


def maildir(tmp_path, user="alice"):
    return tmp_path / "mail" / user / "Maildir"


def files_in(root):
    out = {}
    for sub in ("new", "cur", "tmp"):
        d = root / sub
        out[sub] = sorted(p.name for p in d.iterdir()) if d.is_dir() else []
    return out


def read_line(sock):
    buf = b""
    while not buf.endswith(b"\r\n"):
        b = sock.recv(1)
        assert b, "connection closed"
        buf += b
    return buf


def test_imap_append_literals_spooled_not_in_memory(petreld, tmp_path):
    d = petreld(imap_overrides(tmp_path, extra={"max_literal_size": 64 * 1024 * 1024}),
                env=SMALL_QUARANTINE)
    pid = d.proc.pid
    # A first session creates the user's maildir and index.
    m = imaplib.IMAP4(*imap_addr(d))
    m.login("alice", "wonderland")
    m.append("INBOX", None, None, b"Subject: first\r\n\r\nsmall\r\n")
    m.logout()
    start = rss_kb(pid)

    msgs = [message(i) for i in range(SESSIONS)]
    socks = []
    for i in range(SESSIONS):
        s = socket.create_connection(imap_addr(d), timeout=30)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * 1024 * 1024)
        assert read_line(s).startswith(b"* OK")
        s.sendall(b"l LOGIN alice wonderland\r\n")
        while not read_line(s).startswith(b"l OK"):
            pass
        s.sendall(b"a APPEND INBOX (\\Seen) {%d}\r\n" % SIZE)
        assert read_line(s).startswith(b"+")
        socks.append(s)

    # Half of every literal, from all sessions at once.
    def send_half(i):
        v = memoryview(msgs[i])
        for off in range(0, SIZE // 2, CHUNK):
            socks[i].sendall(v[off:min(off + CHUNK, SIZE // 2)])
    threads = [threading.Thread(target=send_half, args=(i,)) for i in range(SESSIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    peak = wait_taken(pid, socks)
    print(f"VmRSS start {start // 1024} MB, peak {peak // 1024} MB")
    assert peak - start < RSS_MARGIN_KB, (
        f"VmRSS grew {(peak - start) // 1024} MB with {SESSIONS} half-sent "
        f"{SIZE // (1 << 20)} MB literals (start {start // 1024} MB)")
    # Each half literal sits in an unnamed file in the INBOX's tmp/, which
    # shows nothing of it.
    assert spool_fds(pid, maildir(tmp_path) / "tmp") == SESSIONS
    assert files_in(maildir(tmp_path))["tmp"] == []

    # Even sessions finish their upload; odd ones go away in the middle.
    done = [i for i in range(SESSIONS) if i % 2 == 0]
    gone = [i for i in range(SESSIONS) if i % 2 == 1]
    for i in gone:
        socks[i].close()

    def finish(i):
        s = socks[i]
        v = memoryview(msgs[i])
        for off in range(SIZE // 2, SIZE, CHUNK):
            s.sendall(v[off:min(off + CHUNK, SIZE)])
        s.sendall(b"\r\n")
        line = read_line(s)
        assert line.startswith(b"a OK") and b"APPENDUID" in line, line
        s.sendall(b"z LOGOUT\r\n")
        s.close()
    threads = [threading.Thread(target=finish, args=(i,)) for i in done]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    m = imaplib.IMAP4(*imap_addr(d))
    m.login("alice", "wonderland")
    typ, data = m.select("INBOX")
    assert typ == "OK" and int(data[0]) == 1 + len(done), data
    got = set()
    for seq in range(2, 2 + len(done)):
        typ, data = m.fetch(str(seq), "(FLAGS RFC822.SIZE BODY.PEEK[])")
        assert typ == "OK"
        # Byte for byte one of the messages sent (not printed when not).
        idx = [k for k in range(SESSIONS) if msgs[k] == data[0][1]]
        assert len(idx) == 1, f"message {seq} differs from every upload"
        got.add(idx[0])
        assert b"\\Seen" in data[0][0] and b"RFC822.SIZE %d" % SIZE in data[0][0], data[0][0]
    assert got == set(done)
    m.logout()
    # The disconnected sessions' spools went with their connections.
    wait_for(lambda: spool_fds(pid, maildir(tmp_path) / "tmp") == 0, timeout=10)
    f = files_in(maildir(tmp_path))
    assert f["new"] == [] and len(f["cur"]) == 1 + len(done), f


def wait_taken(pid, socks, timeout=30):
    """Waits until the daemon has read everything the clients sent (their
    send queues are empty: it sits in spool files or in memory then) and
    returns the highest VmRSS seen meanwhile."""
    deadline = time.monotonic() + timeout
    peak = rss_kb(pid)
    while time.monotonic() < deadline:
        peak = max(peak, rss_kb(pid))
        if sum(len_unread(s) for s in socks) == 0:
            break
        time.sleep(0.05)
    return max(peak, rss_kb(pid))


def len_unread(sock):
    """Bytes this client has sent that the daemon has not read yet (the
    socket's send queue; SIOCOUTQ)."""
    import fcntl
    import struct
    import termios
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]


# ---------- LMTP DATA ----------

def dot_stuffed(msg):
    """The DATA form of `msg`: lines starting with "." get another one."""
    out = msg.replace(b"\r\n.", b"\r\n..")
    return b"." + out if out.startswith(b".") else out


_LMTP_MESSAGES = {}


def lmtp_message(i, size):
    """`size` bytes with lines that start with dots, NUL bytes, bare CRs and
    bare LFs: LMTP keeps all of them as delivered. Built once per (i, size)."""
    key = (i, size)
    if key not in _LMTP_MESSAGES:
        head = f"From: u{i}@example.net\r\nSubject: data {i}\r\n\r\n".encode()
        block = b"".join((f"{i:04d} line {k} " + "0123456789" * 6).encode() + b"\r\n"
                         for k in range(80))
        block += (b".leading dot\r\n..two dots\r\n.\tdot tab\r\n"
                  b"nul \x00 byte, bare cr \r and bare lf \n here\r\n")
        body = head + block * ((size - len(head)) // len(block))
        body += b"-" * (size - len(body) - 2) + b"\r\n"
        assert len(body) == size
        _LMTP_MESSAGES[key] = body
    return _LMTP_MESSAGES[key]


def spool_fds(pid, spool_dir):
    """Open files of the daemon in the spool directory (unnamed: they show
    as "<dir>/#<inode> (deleted)")."""
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(spool_dir) + "/"):
            n += 1
    return n


def lmtp_start(d, rcpts):
    s = socket.create_connection(lmtp_addr(d), timeout=30)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * 1024 * 1024)
    assert read_line(s).startswith(b"220")
    s.sendall(b"LHLO client.test.example\r\n")
    while not read_line(s).startswith(b"250 "):
        pass
    s.sendall(b"MAIL FROM:<sender@example.net>\r\n")
    assert read_line(s).startswith(b"250")
    for r in rcpts:
        s.sendall(b"RCPT TO:<%s>\r\n" % r.encode())
        assert read_line(s).startswith(b"250")
    s.sendall(b"DATA\r\n")
    assert read_line(s).startswith(b"354")
    return s


def stored_messages(tmp_path, user):
    cur = maildir(tmp_path, user) / "cur"
    return [p.read_bytes() for p in sorted(cur.iterdir())] if cur.is_dir() else []


def test_lmtp_data_spooled_not_in_memory(petreld, tmp_path):
    spool = Path("/var/tmp")  # the default lmtp.temp_dir
    d = petreld(lmtp_overrides(tmp_path, extra={"max_message_size": 64 * 1024 * 1024}),
                env=SMALL_QUARANTINE)
    pid = d.proc.pid
    start = rss_kb(pid)
    wires = [dot_stuffed(lmtp_message(i, SIZE)) for i in range(SESSIONS)]
    socks = [lmtp_start(d, ["alice@example.org"]) for _ in range(SESSIONS)]

    def send(i, a, b):
        v = memoryview(wires[i])
        for off in range(a, b, CHUNK):
            socks[i].sendall(v[off:min(off + CHUNK, b)])
    threads = [threading.Thread(target=send, args=(i, 0, len(wires[i]) // 2))
               for i in range(SESSIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    peak = wait_taken(pid, socks)
    print(f"VmRSS start {start // 1024} MB, peak {peak // 1024} MB")
    assert peak - start < RSS_MARGIN_KB, (
        f"VmRSS grew {(peak - start) // 1024} MB with {SESSIONS} half-sent "
        f"{SIZE // (1 << 20)} MB DATA (start {start // 1024} MB)")
    # Each half message sits in an unnamed file of the spool directory.
    assert spool_fds(pid, spool) == SESSIONS
    assert files_in(maildir(tmp_path))["tmp"] == []

    done = [i for i in range(SESSIONS) if i % 2 == 0]
    for i in range(SESSIONS):
        if i % 2 == 1:
            socks[i].close()

    def finish(i):
        send(i, len(wires[i]) // 2, len(wires[i]))
        socks[i].sendall(b".\r\n")
        line = read_line(socks[i])
        assert line.startswith(b"250"), line
        socks[i].sendall(b"QUIT\r\n")
        socks[i].close()
    threads = [threading.Thread(target=finish, args=(i,)) for i in done]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    # The spools went with the deliveries and with the dropped sessions.
    wait_for(lambda: spool_fds(pid, spool) == 0, timeout=10)
    stored = stored_messages(tmp_path, "alice")
    assert len(stored) == len(done)
    got = set()
    for data in stored:
        # Trace headers, then the message exactly as sent before dot-stuffing.
        match = [i for i in done if data.endswith(lmtp_message(i, SIZE))]
        assert len(match) == 1, "a stored message differs from every one sent"
        trace = split_trace(data, lmtp_message(match[0], SIZE))
        assert trace.startswith("Return-Path: <sender@example.net>\r\n"
                                "Delivered-To: alice@example.org\r\n")
        got.add(match[0])
    assert got == set(done)
    f = files_in(maildir(tmp_path))
    assert f["new"] == [] and f["tmp"] == [], f


def test_lmtp_spooled_message_to_several_recipients(petreld, tmp_path):
    """One spooled DATA, three recipients: each gets its own trace headers
    in front of the same bytes, read back over IMAP too."""
    spool = tmp_path / "spool"
    spool.mkdir()
    d = petreld(lmtp_overrides(tmp_path, extra={"temp_dir": str(spool)}))
    msg = lmtp_message(7, 3 * 1024 * 1024 + 5)
    rcpts = ["alice@example.org", "bob@example.org", "carol@example.org"]
    s = lmtp_start(d, rcpts)
    s.sendall(dot_stuffed(msg) + b".\r\n")
    for r in rcpts:
        line = read_line(s)
        assert line.startswith(b"250") and r.encode() in line, line
    s.sendall(b"QUIT\r\n")
    s.close()
    for user, r in zip(("alice", "bob", "carol"), rcpts):
        stored = stored_messages(tmp_path, user)
        assert len(stored) == 1
        trace = split_trace(stored[0], msg)
        assert f"Delivered-To: {r}\r\n" in trace and f"for <{r}>;" in trace
    # IMAP presents it with CRLF lines: the size counts each bare LF twice.
    m = imaplib.IMAP4(*lmtp_addr(d, "imap"))
    m.login("bob", "builder")
    m.select("INBOX")
    typ, data = m.fetch("1", "(RFC822.SIZE)")
    stored = stored_messages(tmp_path, "bob")[0]
    vsize = len(stored) + stored.count(b"\n") - stored.count(b"\r\n")
    assert b"RFC822.SIZE %d" % vsize in data[0], data
    m.logout()
    assert list(spool.iterdir()) == []


def test_lmtp_small_message_stays_in_memory(petreld, tmp_path):
    """Below the threshold no spool file is made (the spool directory may
    even be missing); the delivery is as before."""
    d = petreld(lmtp_overrides(tmp_path, extra={"temp_dir": str(tmp_path / "missing")}))
    msg = lmtp_message(3, 64 * 1024)
    s = lmtp_start(d, ["alice@example.org"])
    s.sendall(dot_stuffed(msg) + b".\r\n")
    assert read_line(s).startswith(b"250")
    # A large one cannot be spooled there: a temporary failure, nothing stored.
    s.sendall(b"MAIL FROM:<sender@example.net>\r\nRCPT TO:<alice@example.org>\r\nDATA\r\n")
    assert read_line(s).startswith(b"250")
    assert read_line(s).startswith(b"250")
    assert read_line(s).startswith(b"354")
    s.sendall(dot_stuffed(lmtp_message(4, 1024 * 1024)) + b".\r\n")
    line = read_line(s)
    assert line.startswith(b"451 4.3.0"), line
    s.sendall(b"QUIT\r\n")
    s.close()
    stored = stored_messages(tmp_path, "alice")
    assert len(stored) == 1 and stored[0].endswith(msg)


def test_spooled_uploads_survive_kill_and_half_ones_leave_nothing(petreld, tmp_path):
    """A spooled APPEND answered OK and a spooled DATA answered 250 are on
    disk after kill -9; uploads cut in the middle by the kill leave nothing
    in new/, cur/ or tmp/."""
    cfg = lmtp_overrides(tmp_path, pop3=False)
    d = petreld(cfg)
    appended = message(1, 1024 * 1024 + 3)
    # A raw client: imaplib would turn the bare CRs into CRLF.
    i = socket.create_connection(lmtp_addr(d, "imap"), timeout=30)
    assert read_line(i).startswith(b"* OK")
    i.sendall(b"l LOGIN alice wonderland\r\na APPEND INBOX {%d+}\r\n" % len(appended) +
              appended + b"\r\n")
    while not (line := read_line(i)).startswith(b"a "):
        pass
    assert line.startswith(b"a OK"), line
    i.close()
    delivered = lmtp_message(2, 1024 * 1024 + 7)
    s = lmtp_start(d, ["bob@example.org"])
    s.sendall(dot_stuffed(delivered) + b".\r\n")
    assert read_line(s).startswith(b"250")
    s.close()

    # Half uploads in flight when the process dies.
    big = message(3, 4 * 1024 * 1024)
    i = socket.create_connection(lmtp_addr(d, "imap"), timeout=30)
    assert read_line(i).startswith(b"* OK")
    i.sendall(b"l LOGIN alice wonderland\r\n")
    while not read_line(i).startswith(b"l OK"):
        pass
    i.sendall(b"a APPEND INBOX {%d}\r\n" % len(big))
    assert read_line(i).startswith(b"+")
    i.sendall(big[:len(big) // 2])
    s = lmtp_start(d, ["bob@example.org"])
    s.sendall(dot_stuffed(lmtp_message(4, 4 * 1024 * 1024))[:2 * 1024 * 1024])
    wait_taken(d.proc.pid, [i, s])
    d.proc.kill()
    d.wait()
    i.close()
    s.close()

    d = petreld(cfg)
    m = imaplib.IMAP4(*lmtp_addr(d, "imap"))
    m.login("alice", "wonderland")
    typ, data = m.select("INBOX")
    assert data == [b"1"], data
    assert m.fetch("1", "(BODY.PEEK[])")[1][0][1] == appended
    m.logout()
    stored = stored_messages(tmp_path, "bob")
    assert len(stored) == 1 and stored[0].endswith(delivered)
    for user in ("alice", "bob"):
        f = files_in(maildir(tmp_path, user))
        assert f["new"] == [] and f["tmp"] == [] and len(f["cur"]) == 1, (user, f)


def test_lmtp_temp_dir_config(tmp_path):
    """lmtp.temp_dir: an absolute path, printed by --check-config; anything
    else is an error naming the key."""
    import re
    from conftest import run_petreld, to_yaml
    path = tmp_path / "cfg.yaml"
    for value, ok in (("relative/spool", False), ("", False), ("/srv/petrel-spool", True)):
        cfg = lmtp_overrides(tmp_path, {"temp_dir": value}, pop3=False)
        path.write_text(to_yaml(cfg) + "\n")
        proc = run_petreld(["-c", str(path), "--check-config"])
        if ok:
            assert proc.returncode == 0, proc.stderr
            assert 'temp_dir: "/srv/petrel-spool"' in proc.stdout + proc.stderr
        else:
            assert proc.returncode == 2, (value, proc.stderr)
            assert re.search(r"cfg\.yaml:\d+: lmtp\.temp_dir: an absolute directory path",
                             proc.stderr), proc.stderr


def test_multiappend_spooled_and_all_or_nothing(petreld, tmp_path):
    """MULTIAPPEND (RFC 3502) with spooled and in-memory literals, literal8
    with NUL bytes among them; a refused message takes the ones before it
    out again."""
    d = petreld(imap_overrides(tmp_path))
    big1, big2 = message(11, 300 * 1024), message(12, 2 * 1024 * 1024 + 1)
    small = b"Subject: small\r\n\r\nsmall one\r\n"
    # NUL and 8-bit bytes, no bare CR or LF (IMAP would present those as CRLF).
    binary = (b"Subject: bin\r\n\r\n" +
              bytes(b for b in range(256) if b not in (10, 13)) * 1024 + b"\r\n")
    s = socket.create_connection(imap_addr(d), timeout=30)
    assert read_line(s).startswith(b"* OK")
    s.sendall(b"l LOGIN alice wonderland\r\n")
    while not read_line(s).startswith(b"l OK"):
        pass

    def command(tag, parts):
        """parts: bytes of the command line and literals, each literal
        after its synchronising announcement's continuation."""
        s.sendall(parts[0])
        for p in parts[1:]:
            line = read_line(s)
            if not line.startswith(b"+"):
                return line
            s.sendall(p)
        while not (line := read_line(s)).startswith(tag + b" "):
            pass
        return line

    line = command(b"a", [b"a APPEND INBOX {%d}\r\n" % len(big1),
                          big1 + b" (\\Flagged) {%d}\r\n" % len(small),
                          small + b" ~{%d}\r\n" % len(binary),
                          binary + b" {%d}\r\n" % len(big2), big2 + b"\r\n"])
    assert line.startswith(b"a OK [APPENDUID ") and (b" 1:4]" in line or b" 1,2,3,4]" in line), \
        line
    # A NUL byte in a plain (not literal8) literal: NO, and nothing stays.
    line = command(b"b", [b"b APPEND INBOX {%d}\r\n" % len(big1),
                          big1 + b" {%d}\r\n" % len(binary), binary + b"\r\n"])
    assert line.startswith(b"b NO"), line
    s.sendall(b"z LOGOUT\r\n")
    s.close()
    m = imaplib.IMAP4(*imap_addr(d))
    m.login("alice", "wonderland")
    typ, data = m.select("INBOX")
    assert data == [b"4"], data
    for seq, want in enumerate((big1, small, binary, big2), start=1):
        typ, data = m.fetch(str(seq), "(BINARY.PEEK[])" if want is binary else "(BODY.PEEK[])")
        assert typ == "OK" and data[0][1] == want, f"message {seq} differs"
    m.logout()
    f = files_in(maildir(tmp_path))
    assert len(f["cur"]) == 4 and f["new"] == [] and f["tmp"] == [], f
