"""Memory and descriptors at rest after LMTP deliveries (issue 19, item 17).

The LMTP delivery threads keep recently used folders open between
deliveries (lmtp-folder-cache): bounded by lmtp.folder_cache_bytes for all
threads together, and closed after lmtp.folder_cache_idle unused. This test
delivers to many users and folders from parallel LMTP connections (so every
delivery thread opens many folders), lets the server go idle, and checks
from /proc that petreld's open descriptors come back to where they started
and its RSS stays within the configured budget plus a margin. Before the
fix every thread kept 16 folders open forever (with their index, uidlist
and directory descriptors): hundreds of descriptors at rest.

Real parts: petreld with the auth, LMTP and IMAP components, smtplib.LMTP
clients, imaplib to read back what was delivered."""

import imaplib
import os
import smtplib
import threading

from conftest import default_config, free_port, merge, run_petreld, to_yaml, wait_for

USERS = 48
ROUNDS = 8
CONNECTIONS = 8
BUDGET = 1024 * 1024  # lmtp.folder_cache_bytes in this test
IDLE = 1.0  # lmtp.folder_cache_idle in this test (seconds)

BODY = (b"From: load@example.net\r\nSubject: at rest\r\n\r\n"
        + b"".join(b"line %04d of a message that has some weight to it\r\n" % i
                   for i in range(80)))


def proc_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def fd_kinds(pid):
    """What the open descriptors are, counted by kind (for failure messages)."""
    kinds = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/"):
            target = "file:" + ("/".join(target.split("/")[-2:]))
        else:
            target = target.split(":")[0]
        kinds[target] = kinds.get(target, 0) + 1
    return dict(sorted(kinds.items(), key=lambda kv: -kv[1])[:12])


def proc_rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def overrides(tmp_path):
    passwd = tmp_path / "passwd"
    passwd.write_text("".join(f"u{i:03d}:{{PLAIN}}pw{i}:{2000 + i}:{2000 + i}\n"
                              for i in range(USERS)))
    auth_port = free_port()
    return {
        "components": ["auth", "lmtp", "imap"],
        "memory_trim_interval": "1s",
        "mail": {"home": str(tmp_path / "mail" / "%u"), "fsync": "never"},
        "auth": {"listen": [f"127.0.0.1:{auth_port}"],
                 "passdb": {"driver": "passwd-file", "path": str(passwd)}},
        "lmtp": {"listen": [f"127.0.0.1:{free_port()}"],
                 "auth_addr": f"127.0.0.1:{auth_port}", "username_format": "%n",
                 "delivery_threads": 8, "folder_cache_bytes": BUDGET,
                 "folder_cache_idle": f"{int(IDLE * 1000)}ms"},
        "imap": {"listen": [f"127.0.0.1:{free_port()}"],
                 "auth_addr": f"127.0.0.1:{auth_port}"},
    }


def make_folder(tmp_path, user, folder):
    """A Maildir++ folder `folder` for `user`, as an MUA or IMAP CREATE leaves it."""
    root = tmp_path / "mail" / user / "Maildir"
    for base in (root, root / f".{folder}"):
        for sub in ("cur", "new", "tmp"):
            (base / sub).mkdir(parents=True, exist_ok=True)


def deliver_rounds(addr, users, errors, counts):
    try:
        c = smtplib.LMTP(*addr, timeout=60)
        assert c.ehlo("load.test.example")[0] == 250
        for _ in range(ROUNDS):
            rcpts = [f"{u}@example.org" for u in users] + [f"{u}+Work@example.org" for u in users]
            code, text = c.mail("load@example.net")
            assert code == 250, text
            for r in rcpts:
                code, text = c.rcpt(r)
                assert code == 250, (r, code, text)
            code, text = c.data(BODY)
            assert code == 250, text
            for _ in rcpts[1:]:
                code, text = c.getreply()
                assert code == 250, text
            counts.append(len(rcpts))
        c.quit()
    except Exception as e:  # reported by the main thread
        errors.append(repr(e))


def test_folders_released_when_idle(petreld, tmp_path):
    users = [f"u{i:03d}" for i in range(USERS)]
    for u in users:
        make_folder(tmp_path, u, "Work")
    # ASan keeps freed memory in its quarantine (256 MB by default): a small
    # one, so that RSS shows what the server holds.
    d = petreld(overrides(tmp_path), env={
        "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1:quarantine_size_mb=4"})
    pid = d.pid
    host, port = d.config["lmtp"]["listen"][0].rsplit(":", 1)
    addr = (host, int(port))

    fds_start = proc_fds(pid)
    kinds_start = fd_kinds(pid)
    rss_start = proc_rss_kb(pid)

    errors, counts = [], []
    per = USERS // CONNECTIONS
    threads = [threading.Thread(target=deliver_rounds,
                                args=(addr, users[i * per:(i + 1) * per], errors, counts))
               for i in range(CONNECTIONS)]
    peak_fds = fds_start
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        peak_fds = max(peak_fds, proc_fds(pid))
        for t in threads:
            t.join(timeout=0.05)
    assert not errors, errors
    assert sum(counts) == USERS * 2 * ROUNDS

    # Idle: the delivery threads close their folders after folder_cache_idle.
    # (The LMTP server's auth connection, opened at the first RCPT, stays.)
    try:
        wait_for(lambda: proc_fds(pid) <= fds_start + 4, timeout=IDLE * 10)
    except AssertionError:
        raise AssertionError(f"descriptors not back near {fds_start}: now {proc_fds(pid)}, "
                             f"peak {peak_fds}; at start {kinds_start}, "
                             f"now {fd_kinds(pid)}") from None
    # RSS: where it started plus the folder budget and a margin for what
    # the allocator and the auth cache keep.
    limit_kb = rss_start + BUDGET // 1024 + 24 * 1024
    wait_for(lambda: proc_rss_kb(pid) <= limit_kb, timeout=IDLE * 10,
             what=f"RSS {proc_rss_kb(pid)} kB within {limit_kb} kB (start {rss_start} kB)")

    # Everything arrived where it was sent.
    for u in users[:: USERS // 6]:
        m = imaplib.IMAP4(host, int(d.config["imap"]["listen"][0].rsplit(":", 1)[1]))
        m.login(u, f"pw{int(u[1:])}")
        for box in ("INBOX", "Work"):
            typ, data = m.select(box, readonly=True)
            assert typ == "OK" and int(data[0]) == ROUNDS, (u, box, data)
        m.logout()


def test_folder_cache_keys_checked(tmp_path):
    """Bad values are configuration errors naming file, line and key."""
    for key, value, message in (
            ("folder_cache_bytes", -1, "lmtp.folder_cache_bytes"),
            ("folder_cache_idle", "10x", "lmtp.folder_cache_idle")):
        cfg = merge(default_config(), overrides(tmp_path))
        cfg["lmtp"][key] = value
        path = tmp_path / "bad.yaml"
        path.write_text(to_yaml(cfg) + "\n")
        proc = run_petreld(["-c", str(path), "--check-config"])
        assert proc.returncode == 2, proc.stderr
        assert "bad.yaml:" in proc.stderr and message in proc.stderr, proc.stderr
    cfg = merge(default_config(), overrides(tmp_path))
    path = tmp_path / "good.yaml"
    path.write_text(to_yaml(cfg) + "\n")
    proc = run_petreld(["-c", str(path), "--check-config"])
    assert proc.returncode == 0, proc.stderr
    assert "folder_cache_bytes: 1048576" in proc.stdout
    assert "folder_cache_idle: 1000ms" in proc.stdout
    assert "memory_trim_interval: 1000ms" in proc.stdout
