"""Quota warnings and the over-flag sync (document 3, States and Events) on a
real petreld: the saved and expunged hooks run the configured program once
per crossing, with exactly the environment document 3 lists (a test program
writes its environment to a file), never again while usage stays on the same
side; a program that hangs is killed at quota_warning_exec_timeout while the
IMAP session goes on answering; the over-flag program runs at IMAP login only
when the userdb's quota_over_flag is stale, with QUOTA_OVER_FLAG and
QUOTA_OVER. petrel_quota_warnings_total counts what came of each."""

import imaplib
import os
import smtplib
import socket
import time

import pytest

from conftest import free_port, http_request, wait_for

# alice 10K storage; bob 4 messages; carol over-flag "yes" and 1K (over once
# she holds a message); dave over-flag "yes" and under; erin no flag, over.
PASSWD = ("alice:{PLAIN}a:1001:1001::::userdb_quota_rule=*:storage=10K\n"
          "bob:{PLAIN}b:1002:1002::::userdb_quota_rule=*:messages=4\n"
          "carol:{PLAIN}c:1003:1003::::userdb_quota_rule=*:storage=1K "
          "userdb_quota_over_flag=Yes\n"
          "dave:{PLAIN}d:1004:1004::::userdb_quota_rule=*:storage=1M "
          "userdb_quota_over_flag=yes\n"
          "erin:{PLAIN}e:1005:1005::::userdb_quota_rule=*:storage=1K\n")

RECORDER = """#!/bin/sh
# records its name and environment, one file per run
f="$OUT/$(basename "$0").$$"
env | sort > "$f.tmp" && mv "$f.tmp" "$f.env"
"""

HANG = """#!/bin/sh
echo $$ > "$OUT/hang.pid"
exec sleep 300
"""


def config(tmp_path, quota):
    passwd = tmp_path / "passwd"
    passwd.write_text(PASSWD)
    auth = f"127.0.0.1:{free_port()}"
    return {
        "components": ["auth", "imap", "lmtp"],
        "mail": {"home": str(tmp_path / "mail" / "%u"), "fsync": "never"},
        "auth": {"listen": [auth], "passdb": {"driver": "passwd-file", "path": str(passwd)}},
        "imap": {"listen": [f"127.0.0.1:{free_port()}"], "auth_addr": auth},
        "lmtp": {"listen": [f"127.0.0.1:{free_port()}"], "auth_addr": auth,
                 "username_format": "%n"},
        "quota": quota,
    }


@pytest.fixture
def bindir(tmp_path):
    b = tmp_path / "bin"
    b.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    for name, text in (("warn", RECORDER), ("warn2", RECORDER), ("overflag", RECORDER),
                       ("hang", HANG)):
        (b / name).write_text(text.replace("$OUT", str(out)))
        os.chmod(b / name, 0o755)
    return b, out


def runs(out, program):
    """Environments recorded by `program`, oldest first."""
    files = sorted(out.glob(f"{program}.*.env"), key=lambda p: p.stat().st_mtime_ns)
    result = []
    for f in files:
        env = dict(line.split("=", 1) for line in f.read_text().splitlines() if "=" in line)
        for k in ("PWD", "SHLVL", "_", "OLDPWD"):  # the shell adds these itself
            env.pop(k, None)
        result.append(env)
    return result


def login(d, user):
    host, port = d.config["imap"]["listen"][0].rsplit(":", 1)
    m = imaplib.IMAP4(host, int(port), timeout=30)
    m.login(user, user[0])
    return m


def message(n, size):
    head = f"Subject: w{n}\r\nMessage-ID: <w{n}@example.net>\r\n\r\n".encode()
    return head + b"z" * (size - len(head) - 2) + b"\r\n"


def warnings_metric(d, result):
    r = http_request(d.telemetry, "GET", "/metrics")
    for line in r.body.decode().splitlines():
        if line.startswith(f'petrel_quota_warnings_total{{result="{result}"}}'):
            return float(line.split()[-1])
    return 0.0


def test_warning_runs_once_per_crossing_with_environment(petreld, tmp_path, bindir):
    b, out = bindir
    d = petreld(config(tmp_path, {
        "enabled": True, "quota_warning_bin_dir": str(b),
        "quota_warnings": [
            {"quota_warning_name": "s80", "quota_warning_resource": "storage",
             "quota_warning_percentage": 80, "quota_warning_execute": "warn"},
            {"quota_warning_name": "s80-under", "quota_warning_resource": "storage",
             "quota_warning_threshold": "under", "quota_warning_percentage": 80,
             "quota_warning_execute": "warn2"},
            {"quota_warning_name": "m75", "quota_warning_resource": "message",
             "quota_warning_percentage": 75, "quota_warning_execute": "warn"},
        ]}))
    m = login(d, "alice")
    for i in range(4):  # 4 x 1900 = 7600 < 8192 (80 % of 10K)
        assert m.append("INBOX", None, None, message(i, 1900))[0] == "OK"
    assert runs(out, "warn") == []
    assert m.append("INBOX", None, None, message(5, 1000))[0] == "OK"  # 8600: crosses
    wait_for(lambda: len(runs(out, "warn")) == 1, what="the warning program")
    assert m.append("INBOX", None, None, message(6, 500))[0] == "OK"   # stays above
    env = runs(out, "warn")[0]
    assert env == {"USER": "alice", "HOME": str(tmp_path / "mail" / "alice"),
                   "HOST": socket.gethostname(), "QUOTA_WARNING_NAME": "s80",
                   "QUOTA_RESOURCE": "storage", "QUOTA_THRESHOLD": "over",
                   "QUOTA_PERCENTAGE": "80", "QUOTA_USAGE": "8600", "QUOTA_LIMIT": "10240"}
    # back under 80 % by an expunge: the `under` rule runs once
    m.select("INBOX")
    m.store("1:2", "+FLAGS", "\\Deleted")
    m.expunge()
    wait_for(lambda: len(runs(out, "warn2")) == 1, what="the under program")
    env = runs(out, "warn2")[0]
    assert (env["QUOTA_WARNING_NAME"], env["QUOTA_THRESHOLD"], env["QUOTA_USAGE"]) == (
        "s80-under", "under", str(9100 - 3800))
    m.store("1", "+FLAGS", "\\Deleted")
    m.expunge()
    m.logout()
    # message resource over LMTP: bob 4 messages, 75 % = 3
    host, port = d.config["lmtp"]["listen"][0].rsplit(":", 1)
    for i in range(4):
        with smtplib.LMTP(host, int(port), timeout=30) as c:
            c.sendmail("s@example.net", ["bob@example.org"], message(10 + i, 200))
    wait_for(lambda: len(runs(out, "warn")) == 2, what="the message warning")
    env = runs(out, "warn")[1]
    assert (env["USER"], env["QUOTA_RESOURCE"], env["QUOTA_USAGE"], env["QUOTA_LIMIT"]) == (
        "bob", "message", "3", "4")
    time.sleep(0.3)  # nothing more comes (a run would have been seen by now)
    assert len(runs(out, "warn")) == 2 and len(runs(out, "warn2")) == 1
    assert warnings_metric(d, "ok") == 3


def test_hanging_program_is_killed_at_the_timeout(petreld, tmp_path, bindir):
    b, out = bindir
    d = petreld(config(tmp_path, {
        "enabled": True, "quota_warning_bin_dir": str(b),
        "quota_warning_exec_timeout": "1s",
        "quota_warnings": [{"quota_warning_name": "h", "quota_warning_resource": "storage",
                            "quota_warning_percentage": 10, "quota_warning_execute": "hang"}]}))
    m = login(d, "alice")
    t0 = time.monotonic()
    assert m.append("INBOX", None, None, message(1, 2000))[0] == "OK"
    wait_for(lambda: (out / "hang.pid").exists(), what="the program started")
    pid = int((out / "hang.pid").read_text())
    # the session is not held up by the program: answered while it runs
    assert m.noop()[0] == "OK"
    assert os.path.exists(f"/proc/{pid}") and warnings_metric(d, "timeout") == 0
    wait_for(lambda: warnings_metric(d, "timeout") == 1, timeout=5, what="the kill")
    assert time.monotonic() - t0 >= 1.0
    assert not os.path.exists(f"/proc/{pid}") or "zombie" in open(f"/proc/{pid}/status").read()
    assert "quota program killed at the timeout" in d.stderr()
    m.logout()


def test_over_flag_program_runs_only_on_a_stale_flag(petreld, tmp_path, bindir):
    b, out = bindir
    d = petreld(config(tmp_path, {
        "enabled": True, "quota_warning_bin_dir": str(b),
        "quota_over_status_mask": "y*", "quota_over_status_execute": "overflag"}))
    # carol: flag "Yes" matches y* (any case) and she is over once she holds a message
    host, port = d.config["lmtp"]["listen"][0].rsplit(":", 1)
    with smtplib.LMTP(host, int(port), timeout=30) as c:
        c.sendmail("s@example.net", ["carol@example.org"], message(1, 1500))
    login(d, "carol").logout()    # flag and state agree: nothing runs
    login(d, "dave").logout()     # flagged, not over: stale
    login(d, "erin").logout()     # not flagged, over? no: erin holds nothing, agree
    wait_for(lambda: len(runs(out, "overflag")) == 1, what="the over-flag program")
    with smtplib.LMTP(host, int(port), timeout=30) as c:
        c.sendmail("s@example.net", ["erin@example.org"], message(2, 1500))
    login(d, "erin").logout()     # not flagged, over: stale
    wait_for(lambda: len(runs(out, "overflag")) == 2, what="the second over-flag run")
    time.sleep(0.3)
    envs = runs(out, "overflag")
    assert len(envs) == 2
    assert envs[0] == {"USER": "dave", "HOME": str(tmp_path / "mail" / "dave"),
                       "HOST": socket.gethostname(), "QUOTA_OVER_FLAG": "yes",
                       "QUOTA_OVER": "no"}
    assert (envs[1]["USER"], envs[1]["QUOTA_OVER_FLAG"], envs[1]["QUOTA_OVER"]) == (
        "erin", "", "yes")


def test_over_flag_lazy_check_waits_for_a_quota_operation(petreld, tmp_path, bindir):
    b, out = bindir
    d = petreld(config(tmp_path, {
        "enabled": True, "quota_warning_bin_dir": str(b),
        "quota_over_status_mask": "yes", "quota_over_status_lazy_check": True,
        "quota_over_status_execute": "overflag"}))
    m = login(d, "dave")
    time.sleep(0.3)
    assert runs(out, "overflag") == []  # not at login
    m.getquotaroot("INBOX")             # the first quota operation
    wait_for(lambda: len(runs(out, "overflag")) == 1, what="the lazy over-flag check")
    m.logout()
