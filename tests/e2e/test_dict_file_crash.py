"""The file dict keeps every acknowledged write through kill -9 (issue: "file
— one file, crash-safe ... cross-process lock").

Writers stream sets, commit-batches and atomic-incs at petreld over HTTP;
petreld is killed with SIGKILL mid-stream, restarted on the same data file,
and every write that was answered 200 must be there (a batch all or nothing,
a counter no lower than its acknowledged increments). A second test runs two
petreld processes on one data file and checks they see each other's writes,
through compactions."""

import base64
import json
import signal
import threading
import time

from conftest import http_request

TOKEN = "e2e-dict-file-token"
ENV = {"BACKEND_API_TOKEN": TOKEN}


def dict_config(path, **options):
    opts = {"driver": "file", "path": str(path)}
    opts.update(options)
    return {"dicts": {"fd": opts}}


def b64(text):
    return base64.b64encode(text.encode()).decode()


def post(daemon, op, body, timeout=10):
    return http_request(daemon.backend, "POST", f"/api/backend/dict/fd/{op}", body=body,
                        token=TOKEN, timeout=timeout)


def snapshot(daemon, prefix):
    """Every key under `prefix` (recursive) -> value."""
    r = post(daemon, "iterate", {"path": prefix, "flags": 1}, timeout=30)
    assert r.status == 200, r
    out = {}
    for line in r.body.decode().splitlines():
        row = json.loads(line)
        assert "error" not in row, row
        out[row["key"]] = base64.b64decode(row["values"][0]).decode()
    return out


def lookup(daemon, key):
    r = post(daemon, "lookup", {"key": key})
    assert r.status == 200, r
    body = r.json()
    return base64.b64decode(body["values"][0]).decode() if body["found"] else None


class Writers:
    """Threads streaming writes until the daemon goes away; they record what
    was acknowledged (200 with status ok) and what was merely attempted."""

    def __init__(self, daemon, tag):
        self.daemon = daemon
        self.tag = tag
        self.lock = threading.Lock()
        self.sets = {}              # key -> value, acknowledged
        self.batches = []           # acknowledged batches: list of {key: value}
        self.open_batches = []      # attempted, unanswered
        self.incs_acked = 0
        self.incs_tried = 0
        self.hot_acked = {}         # hot key -> highest acknowledged sequence number
        self.hot_tried = -1         # highest sequence number sent
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._sets, args=(w,)) for w in range(3)]
        self.threads.append(threading.Thread(target=self._batches))
        self.threads.append(threading.Thread(target=self._incs))
        self.threads.append(threading.Thread(target=self._hot))

    def acked(self):
        with self.lock:
            return len(self.sets) + len(self.batches) + self.incs_acked

    def _call(self, op, body):
        try:
            r = post(self.daemon, op, body, timeout=5)
        except (OSError, ConnectionError, Exception):  # noqa: BLE001 - any failure ends the stream
            self.stop.set()
            return False
        if r.status != 200:
            self.stop.set()
            return False
        assert r.json()["status"] == "ok", r
        return True

    def _sets(self, w):
        i = 0
        while not self.stop.is_set():
            key = f"shared/crash/{self.tag}/w{w}/{i:06d}"
            value = f"{self.tag}-{w}-{i}-" + "x" * ((i * 37) % 1500)
            if self._call("set", {"key": key, "value": b64(value)}):
                with self.lock:
                    self.sets[key] = value
            i += 1

    def _batches(self):
        i = 0
        while not self.stop.is_set():
            batch = {f"shared/crash/{self.tag}/batch/{i:06d}/{k}": f"b{i}-{k}" for k in range(5)}
            ops = [{"kind": "set", "key": k, "value": b64(v)} for k, v in batch.items()]
            with self.lock:
                self.open_batches.append(batch)
            if self._call("commit-batch", {"ops": ops}):
                with self.lock:
                    self.open_batches.remove(batch)
                    self.batches.append(batch)
            i += 1

    def _incs(self):
        while not self.stop.is_set():
            with self.lock:
                self.incs_tried += 1
            if self._call("atomic-inc", {"key": "shared/crash/counter", "delta": 1}):
                with self.lock:
                    self.incs_acked += 1

    def _hot(self):
        """Rewrites 20 keys with large values: the log outgrows the live data,
        so compactions run while the other writers stream (and get killed)."""
        i = 0
        while not self.stop.is_set():
            key = f"shared/crash/hot/{i % 20:02d}"
            with self.lock:
                self.hot_tried = i
            if self._call("set", {"key": key, "value": b64(f"{i:08d}" + "h" * 8000)}):
                with self.lock:
                    self.hot_acked[key] = i
            i += 1

    def start(self):
        for t in self.threads:
            t.start()

    def join(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)
            assert not t.is_alive()


def test_acknowledged_writes_survive_kill_9(petreld, tmp_path):
    data = tmp_path / "var" / "dict" / "file.db"
    # A small compaction threshold so kills also land around compactions.
    overrides = dict_config(data, compact_min_bytes=65536, compact_ratio=2)
    d = petreld(overrides, env=ENV)
    r = post(d, "set", {"key": "shared/crash/counter", "value": b64("0")})
    assert r.status == 200, r

    rounds = []
    incs_acked = incs_tried = 0
    for rnd in range(3):
        w = Writers(d, f"r{rnd}")
        w.start()
        deadline = time.monotonic() + 20
        target = 150 + 100 * rnd
        while w.acked() < target and time.monotonic() < deadline:
            time.sleep(0.01)
        assert w.acked() >= target, f"only {w.acked()} writes acknowledged in 20 s"
        d.signal(signal.SIGKILL)  # mid-stream: writers are still sending
        assert d.wait() == -signal.SIGKILL
        w.join()
        rounds.append(w)
        incs_acked += w.incs_acked
        incs_tried += w.incs_tried

        d = petreld(overrides, env=ENV)
        assert "file dict loaded" in d.stderr()
        everything = snapshot(d, "shared/crash/")
        for past in rounds:
            for key, value in past.sets.items():
                assert everything.get(key) == value, f"acknowledged set of {key} lost"
            for batch in past.batches:
                for key, value in batch.items():
                    assert everything.get(key) == value, f"acknowledged batch key {key} lost"
            for batch in past.open_batches:  # in flight at the kill: all or nothing
                present = [k for k in batch if k in everything]
                assert len(present) in (0, len(batch)), f"half a batch applied: {present}"
        for key, seq in w.hot_acked.items():  # never older than the last acknowledged
            got = int(everything[key][:8])
            assert seq <= got <= w.hot_tried and got % 20 == seq % 20, (key, seq, got)
        counter = int(everything["shared/crash/counter"])
        assert incs_acked <= counter <= incs_tried, (incs_acked, counter, incs_tried)
        # Spot checks through lookup, and the dict takes writes again.
        some = next(iter(w.sets))
        assert lookup(d, some) == w.sets[some]
        assert post(d, "set", {"key": f"shared/after/{rnd}", "value": b64("ok")}).status == 200
        assert lookup(d, f"shared/after/{rnd}") == "ok"

    assert sum(len(w.sets) for w in rounds) > 0
    assert "msg=compacted" in "".join(p.read_text() for p in tmp_path.glob("petreld*.stderr"))
    # The fixture stops the last daemon with SIGTERM and checks a clean exit.


def test_two_daemons_share_one_file(petreld, tmp_path):
    data = tmp_path / "shared.db"
    overrides = dict_config(data, compact_min_bytes=0, compact_ratio=2)
    a = petreld(overrides, env=ENV)
    b = petreld(overrides, env=ENV)

    assert post(a, "set", {"key": "shared/x", "value": b64("from a")}).status == 200
    assert lookup(b, "shared/x") == "from a"
    assert post(b, "set", {"key": "shared/n", "value": b64("0")}).status == 200
    for i in range(60):
        who = a if i % 2 == 0 else b
        r = post(who, "atomic-inc", {"key": "shared/n", "delta": 1})
        assert r.status == 200 and r.json()["status"] == "ok", r
        # rewriting keys grows the log, so both daemons compact along the way
        assert post(who, "set", {"key": f"shared/k/{i % 7}", "value": b64(str(i))}).status == 200
    assert lookup(a, "shared/n") == "60"
    assert lookup(b, "shared/n") == "60"
    want = {f"shared/k/{k}": str(max(i for i in range(60) if i % 7 == k)) for k in range(7)}
    assert snapshot(a, "shared/k/") == want
    assert snapshot(b, "shared/k/") == want

    # A missing key reads as not-found in both; unset in one is seen by the other.
    r = post(a, "atomic-inc", {"key": "shared/missing", "delta": 1})
    assert r.status == 200 and r.json()["status"] == "not-found", r
    assert post(b, "unset", {"key": "shared/x"}).status == 200
    assert lookup(a, "shared/x") is None
    compactions = [line for line in a.stderr().splitlines() + b.stderr().splitlines()
                   if "msg=compacted" in line]
    assert compactions, "no compaction happened"
