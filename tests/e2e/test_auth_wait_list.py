"""The auth service's wait list (docs/auth.md, "Failed logins"): an attempt
that could pass auth.max_failures_per_user if every attempt being checked
failed waits for one of them. These tests make the checks slow (an Argon2id
record, a few hundred milliseconds a check) so that attempts really wait,
then take the clients away: a client that leaves while its attempt waits,
and a shutdown with attempts waiting, must leave the service sound (no
use after free, no leak: the daemons run under ASan, and the fixture's
stop() checks the exit code and stderr)."""

import subprocess
import threading

import pytest

from authproto import AuthConn
from conftest import free_port, http_request, wait_for

MAX_USER = 2


def argon2id_slow(password):
    # 64 MiB and 6 passes: each check takes long enough for the attempts
    # sent meanwhile to find MAX_USER attempts in flight and wait.
    return subprocess.run(["argon2", "somesaltsalt", "-id", "-t", "6", "-m", "16", "-p", "1", "-e"],
                          input=password, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture(scope="module")
def slow_hash():
    return "{ARGON2ID}" + argon2id_slow("right")


def slow_daemon(petreld, tmp_path, slow_hash, **top):
    (tmp_path / "passwd").write_text(
        f"slow:{slow_hash}:1001:1001::/home/slow\n"
        "alice:{PLAIN}wonderland:1002:1002::/home/alice\n")
    return petreld({"components": ["auth"], "auth": {
        "listen": [f"127.0.0.1:{free_port()}"],
        "passdb": {"driver": "passwd-file", "path": str(tmp_path / "passwd")},
        "max_failures_per_user": MAX_USER,
        "failure_delay": "10ms", "failure_delay_max": "50ms"}, **top})


def addr(d):
    return d.config["auth"]["listen"][0]


def checks_done(d):
    """Password checks of the slow user's scheme finished so far."""
    text = http_request(d.telemetry, "GET", "/metrics", timeout=5).body.decode()
    for line in text.splitlines():
        if line.startswith('petrel_auth_scheme_verify_seconds_count{scheme="ARGON2ID"'):
            return int(float(line.split()[-1]))
    return 0


def send_guess(c, n):
    c.send("VERIFY", "1", "slow", f"wrong{n}", "service=imap", f"ip=198.51.100.{n + 1}")


def test_client_leaving_while_its_attempt_waits(petreld, tmp_path, slow_hash):
    d = slow_daemon(petreld, tmp_path, slow_hash)
    # Ten guesses for one user at once: at most MAX_USER are checked at a
    # time, the others wait. Eight clients leave at once, most of them
    # while their attempt waits; the last stays.
    conns = [AuthConn(addr(d), timeout=30) for _ in range(10)]
    for i, c in enumerate(conns[:9]):
        send_guess(c, i)
    # The last guess goes in only once a check has finished: the nine
    # before it have been read by then (a check takes hundreds of
    # milliseconds), so the two checked first are among them and the last
    # one waits behind them, whatever order the loop read the sockets in.
    wait_for(lambda: checks_done(d) >= 1, timeout=30)
    send_guess(conns[9], 9)
    for c in conns[1:9]:
        c.close()
    # The one that stayed is answered once the checks before it are over
    # (refused: the user is at its limit by then, the checks of the
    # clients that left counting too).
    stayed = conns[9].read()
    first = conns[0].read()
    assert stayed is not None and stayed[0] == "FAIL", stayed
    assert first is not None and first[0] == "FAIL", first
    assert "too many failed logins" in "\t".join(stayed), stayed
    for c in (conns[0], conns[9]):
        c.close()
    # The service is sound afterwards: another user logs in at once, and a
    # burst for that user (waiting again) is answered in full.
    with AuthConn(addr(d), timeout=60) as c:  # behind the slow checks on the workers
        assert c.verify("alice", "wonderland", ip="203.0.113.5")[0] == "OK"
    replies = [None] * 6

    def one(i):
        with AuthConn(addr(d), timeout=30) as c:
            replies[i] = c.verify("slow", f"again{i}", ip=f"203.0.113.{i + 10}")
    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(r is not None and r[0] == "FAIL" for r in replies), replies
    d.stop()


def test_shutdown_with_attempts_waiting(petreld, tmp_path, slow_hash):
    # shutdown_timeout 0: no draining, the service is freed with attempts
    # still being checked and waiting.
    d = slow_daemon(petreld, tmp_path, slow_hash, shutdown_timeout="0ms")
    conns = [AuthConn(addr(d), timeout=30) for _ in range(8)]
    for i, c in enumerate(conns):
        send_guess(c, i)
    # A later connection's answer: the loop has been round the sockets that
    # were readable before it, so the guesses are in (two checking, the
    # rest waiting, a check taking far longer than this exchange). Then
    # SIGTERM: it exits 0 with nothing leaked or freed twice.
    with AuthConn(addr(d), timeout=60) as c:  # behind the slow checks on the workers
        assert c.verify("alice", "wonderland", ip="203.0.113.5")[0] == "OK"
    d.stop()
    for c in conns:
        c.close()


def test_checks_of_clients_that_left_count_toward_the_limit(petreld, tmp_path, slow_hash):
    """A guess whose client closes the connection before the answer is
    checked all the same (the password hash is computed); its failure must
    count, or closing each connection early would buy any number of costly
    checks past auth.max_failures_per_user."""
    d = slow_daemon(petreld, tmp_path, slow_hash)
    for i in range(MAX_USER):
        c = AuthConn(addr(d), timeout=30)
        send_guess(c, i)
        c.close()
    wait_for(lambda: d.stderr().count('reason="password mismatch"') >= MAX_USER, timeout=30,
             what="the checks of the clients that left")
    with AuthConn(addr(d), timeout=30) as c:
        reply = c.verify("slow", "right", ip="203.0.113.77")
    assert reply[0] == "FAIL" and "too many failed logins" in "\t".join(reply), reply
    assert "too many failed logins" in d.stderr()
