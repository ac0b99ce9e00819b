"""The login proxy's client of the directors (src/clients/ring/director-client.c),
driven by tests/tools/director-probe against a real ring of two petreld
directors: lookups land where the ring's hashing (computed here with hashlib)
and the director's map say, many at once on one connection; kicks and moves
pushed by either director arrive; sessions are counted once, on one
director, and announced again on the other when that one is killed; lookups
go on through the surviving director; a wrong ring secret gets nothing."""

import os
import queue
import signal
import subprocess
import threading
import time

import pytest

from conftest import build_dir, wait_for
from ringproto import SECRET, route
from test_director_api import metric_value
from test_director_ring import BACKENDS, ring  # noqa: F401


class Probe:
    def __init__(self, directors, secret=SECRET, timeout_ms=2000):
        exe = os.path.join(build_dir(), "tests", "tools", "director-probe")
        args = [exe, "--timeout-ms", str(timeout_ms)]
        if secret is not None:
            args += ["--secret", secret]
        self.proc = subprocess.Popen(args + list(directors), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     bufsize=1)
        self.lines = queue.Queue()
        self.stderr = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def _read_err(self):
        for line in self.proc.stderr:
            self.stderr.append(line)

    def send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def expect(self, prefix, timeout=5.0):
        """The next line starting with `prefix` (others are kept in order)."""
        deadline = time.monotonic() + timeout
        skipped = []
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no '{prefix}' line; got {skipped}")
                try:
                    line = self.lines.get(timeout=left)
                except queue.Empty:
                    continue
                if line.startswith(prefix):
                    return line.split(" ")
                skipped.append(line)
        finally:
            for line in skipped:
                self.lines.put(line)

    def ready(self):
        self.send("ready")
        return int(self.expect("ready ")[1])

    def close(self):
        if self.proc.poll() is None:
            self.send("quit")
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        err = "".join(self.stderr)
        assert "ERROR: AddressSanitizer" not in err and "runtime error" not in err, err


@pytest.fixture
def probes():
    made = []

    def make(*args, **kw):
        p = Probe(*args, **kw)
        made.append(p)
        return p
    yield make
    for p in made:
        p.close()


def sessions_metric(rep):
    text = rep.d.get("telemetry", "/metrics").body.decode()
    total = 0.0
    for b in BACKENDS:
        labels = {"ip": b["ip"], "port": str(b["port"]), "tag": ""}
        for proto in ("imap", "imaps", "pop3", "pop3s", "lmtp"):
            total += metric_value(text, "petrel_director_backend_sessions", protocol=proto,
                                  **labels)
    return total


def expected(user):
    ip = route([{**b, "vhosts": 100} for b in BACKENDS], user)
    port = next(b["port"] for b in BACKENDS if b["ip"] == ip)
    return ip, str(port)


def test_lookups_follow_the_ring_and_are_multiplexed(ring, probes):
    reps = ring(2)
    p = probes([r.ring for r in reps])
    wait_for(lambda: p.ready() == 2, what="both directors ready")
    users = [f"user{i}@example.com" for i in range(200)]
    for u in users:  # all sent before any answer is read
        p.send(f"lookup {u}")
    answers = {}
    for _ in users:
        line = p.expect("lookup ")
        assert line[2] == "ok", line
        answers[line[1]] = (line[3], line[4], line[5])
    assert set(answers) == set(users)
    for u in users:
        assert answers[u][:2] == expected(u), u
        assert answers[u][2] == "assigned"
    # `director map` names the same backends, on either director.
    for u in users[:20]:
        for r in reps:
            assert r.get(f"/api/director/map?user={u}")["backend"] == answers[u][0], u
    p.send(f"lookup {users[0]}")
    assert p.expect("lookup ")[5] == "sticky"
    # A tag with no backend: the director's own answer comes back.
    p.send("lookup someone blue")
    line = p.expect("lookup someone")
    assert line[2:4] == ["fail", "no_backends"], line


def test_kick_and_move_pushed_by_either_director_arrive(ring, probes):
    reps = ring(2)
    p = probes([reps[0].ring])  # connected to the first director only
    wait_for(lambda: p.ready() == 1, what="the director ready")
    user = "mover@example.com"
    p.send(f"lookup {user}")
    home = p.expect(f"lookup {user}")[3]
    other = next(b for b in BACKENDS if b["ip"] != home)
    # Operators talk to the second director: the ring carries it to the first.
    t0 = time.monotonic()
    assert reps[1].post(f"/api/director/users/{user}/kick").status in (200, 202)
    assert p.expect(f"kicked {user}", timeout=1.5) == ["kicked", user]
    assert time.monotonic() - t0 < 1.5
    r = reps[1].post(f"/api/director/users/{user}/move",
                     {"backend": f"{other['ip']}:{other['port']}"})
    assert r.status in (200, 202), r
    assert p.expect(f"moved {user}", timeout=1.5) == ["moved", user, other["ip"],
                                                      str(other["port"])]
    p.send(f"lookup {user}")
    line = p.expect(f"lookup {user}")
    assert line[3] == other["ip"] and line[5] == "sticky", line


def test_sessions_are_counted_once_and_move_when_their_director_dies(ring, probes):
    reps = ring(2)
    p = probes([r.ring for r in reps])
    wait_for(lambda: p.ready() == 2, what="both directors ready")
    for i, proto in enumerate(("imap", "imaps", "pop3")):
        p.send(f"start s{i} user{i} {BACKENDS[i % 2]['ip']} {proto}")
        assert p.expect(f"start s{i}") == ["start", f"s{i}", "ok"]
    p.send("start s0 again 10.0.0.1 imap")
    assert p.expect("start s0") == ["start", "s0", "refused"]
    p.send("start bad/id u 10.0.0.1 imap")
    assert p.expect("start bad/id") == ["start", "bad/id", "refused"]
    wait_for(lambda: sum(sessions_metric(r) for r in reps) == 3, what="three sessions counted")
    counted = [r for r in reps if sessions_metric(r) == 3]
    assert len(counted) == 1  # once, on the primary
    primary = counted[0]
    survivor = next(r for r in reps if r is not primary)
    p.send("end s1")
    p.expect("end s1")
    wait_for(lambda: sessions_metric(primary) == 2, what="one session ended")
    primary.d.signal(signal.SIGKILL)
    primary.d.wait()
    # The survivor learns the open sessions within the primary check (0.5 s).
    wait_for(lambda: sessions_metric(survivor) == 2, timeout=3, what="sessions re-announced")
    # And lookups go on through the survivor.
    p.send("lookup after@example.com")
    line = p.expect("lookup after@example.com")
    assert line[2] == "ok" and tuple(line[3:5]) == expected("after@example.com")


def test_lookups_wait_for_a_director_and_fail_at_their_deadline(ring, probes):
    reps = ring(1)
    wrong = probes([reps[0].ring], secret="not-the-ring-secret-000", timeout_ms=400)
    t0 = time.monotonic()
    wrong.send("lookup nobody")
    line = wrong.expect("lookup nobody", timeout=3)
    assert line[2:4] == ["fail", "-"] and "no director answered within 400 ms" in " ".join(line)
    assert 0.35 <= time.monotonic() - t0 < 2.5
    assert wrong.ready() == 0
    # With its director gone, a lookup waits for it and is answered once it
    # is back within the lookup's deadline.
    p = probes([reps[0].ring], timeout_ms=6000)
    wait_for(lambda: p.ready() == 1, what="the director ready")
    reps[0].d.signal(signal.SIGKILL)
    reps[0].d.wait()
    wait_for(lambda: p.ready() == 0, what="the probe to notice")
    p.send("lookup waiter@example.com")
    time.sleep(0.3)  # the lookup is waiting: nothing to answer it yet
    assert p.lines.empty()
    reps[0].d.start()
    line = p.expect("lookup waiter@example.com", timeout=6)
    assert line[2] == "ok" and tuple(line[3:5]) == expected("waiter@example.com"), line
