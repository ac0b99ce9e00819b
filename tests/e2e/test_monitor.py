"""The backend health monitor (component `monitor`, docs/monitor.md) end to end:
a real petreld running the monitor against scripted IMAP/POP3/LMTP backends
(tests/e2e/monitor_fakes.py) that start failing and recover, and a scripted
director speaking the ring protocol of docs/ring-protocol.md.

The stories: a backend that fails is flushed only after `retry_count` failed
polls and `rapid_rounds` rapid probes with at least `rapid_fails_needed`
failures, and comes back up with its first successful probe; the probe counts
seen by the backends match the configuration exactly; every way of failing
(refused, silent, bad greeting, NO on LOGIN, an over-long line, TLS) is told
apart; credentials follow the backend's tag with the "" fallback; the monitor
follows RING-CHANGE pushes and survives the director going away.
"""

import re
import shutil
import ssl
import subprocess
import time

import pytest

from conftest import free_port, http_request, run_petreld, wait_for
from monitor_fakes import FakeBackend, FakeDirector, ring_line
from ringproto import SECRET

# Short timings: a normal poll every 500 ms, rapid probes 50 ms apart.
FAST = {
    "interval": "500ms",
    "timeout": "1s",
    "rapid_interval": "50ms",
    "retry_count": 3,
    "rapid_rounds": 5,
    "rapid_fails_needed": 3,
    "reconnect_min": "50ms",
    "reconnect_max": "200ms",
}

CREDS = {"": {"user": "probe", "password": "pw 1\"x"}}


def monitor_yaml(settings):
    """The monitor file as YAML text (block maps, quoted scalars)."""
    lines = []

    def emit(obj, indent):
        for key, value in obj.items():
            k = '""' if key == "" else key
            if isinstance(value, dict):
                lines.append("  " * indent + f"{k}:" + ("" if value else " {}"))
                emit(value, indent + 1)
            elif isinstance(value, bool):
                lines.append("  " * indent + f"{k}: {'true' if value else 'false'}")
            elif isinstance(value, int):
                lines.append("  " * indent + f"{k}: {value}")
            else:
                escaped = str(value).replace("\\", "\\\\").replace('"', '\\"')
                lines.append("  " * indent + f'{k}: "{escaped}"')

    emit(settings, 0)
    return "\n".join(lines) + "\n"


@pytest.fixture
def monitor(petreld, tmp_path):
    """Factory: monitor(director, **settings) -> a running petreld with only
    the monitor component, its file written from FAST + settings; the ring
    secret comes from DIRECTOR_RING_SECRET (env may replace it)."""
    count = [0]

    def start(director, env=None, **settings):
        env = {"DIRECTOR_RING_SECRET": SECRET, **(env or {})}
        cfg = dict(FAST)
        cfg["director_addr"] = director.addr
        cfg.update(settings)
        path = tmp_path / f"monitor{count[0]}.yaml"
        count[0] += 1
        path.write_text(monitor_yaml(cfg))
        return petreld({"components": ["monitor"], "monitor": {"config_file": str(path)}},
                       env=env)

    return start


@pytest.fixture
def fakes():
    """Collects fake servers and closes them at the end."""
    made = []

    def add(obj):
        made.append(obj)
        return obj

    yield add
    for obj in made:
        obj.close()


def metrics(daemon):
    """/metrics as {(name, frozenset(labels.items())): value}."""
    text = daemon.get("telemetry", "/metrics").body.decode()
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$', line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out[(m.group(1), frozenset(labels.items()))] = float(m.group(4))
    return out


def metric(daemon, name, **labels):
    return metrics(daemon).get((name, frozenset(labels.items())), 0.0)


def backend_states(daemon):
    """{ip: state} from petrel_monitor_backend_state."""
    out = {}
    for (name, labels), value in metrics(daemon).items():
        if name == "petrel_monitor_backend_state" and value == 1:
            d = dict(labels)
            out[d["ip"]] = d["state"]
    return out


def fields_of(report):
    return report[1]


# ---------- the main story ----------

def test_failing_backend_flushed_after_threshold_and_up_on_recovery(monitor, fakes):
    port = free_port()
    be = fakes(FakeBackend("imap", ip="127.0.0.2", port=port, user="probe", password='pw 1"x'))
    director = fakes(FakeDirector({"127.0.0.2": {"port": 10143, "tag": ""}}))
    d = monitor(director, imap_port=port, imap_tls=False, tags=CREDS)

    wait_for(lambda: be.count("ok") >= 2, timeout=15, what="healthy probes")
    assert be.logins[0] == ("probe", 'pw 1"x')  # LOGIN with quoted credentials
    assert director.hellos[0][:2] == ["HELLO", "monitor"]
    assert not director.reports()
    assert backend_states(d) == {"127.0.0.2": "up"}

    be.set_mode("reject")
    wait_for(lambda: director.reports("BACKEND-FLUSH"), timeout=30, what="BACKEND-FLUSH")
    t_flush, flush = director.reports("BACKEND-FLUSH")[0]
    # Exactly retry_count (3) failed polls and rapid_rounds (5) rapid probes
    # came before the flush, and not one more.
    assert be.accepted("reject", before=t_flush) == 3 + 5
    assert flush[:2] == ["BACKEND-FLUSH", "127.0.0.2"]
    assert flush[2].startswith("reason=5 of 5 rapid probes failed; last: imap rejected: LOGIN: ")
    assert "pw 1" not in flush[2]
    # The rapid probes came quickly, the normal ones an interval apart.
    times = be.times("reject")[:8]
    assert times[7] - times[3] < times[2] - times[0] + 0.5
    wait_for(lambda: backend_states(d) == {"127.0.0.2": "flush"}, what="state flush")

    # A flush backend is polled at the normal interval (500 ms), never
    # rapidly (50 ms) again, and no second BACKEND-FLUSH is sent.
    wait_for(lambda: be.accepted("reject", after=t_flush) >= 3, timeout=15,
             what="polls of the flushed backend")
    polls = [t for t in be.times("reject") if t > t_flush][:3]
    assert min(b - a for a, b in zip(polls, polls[1:])) > 0.3, polls
    assert len(director.reports("BACKEND-FLUSH")) == 1

    t_ok = time.monotonic()
    be.set_mode("ok")
    wait_for(lambda: director.reports("BACKEND-UP"), timeout=15, what="BACKEND-UP")
    t_up, up = director.reports("BACKEND-UP")[0]
    assert up == ["BACKEND-UP", "127.0.0.2"]
    assert be.accepted("ok", after=t_ok, before=t_up) == 1  # the first success
    wait_for(lambda: backend_states(d) == {"127.0.0.2": "up"}, what="state up")

    assert metric(d, "petrel_monitor_reports_total", report="flush") == 1
    assert metric(d, "petrel_monitor_reports_total", report="up") == 1
    assert metric(d, "petrel_monitor_probes_total", protocol="imap",
                  result="rejected") == be.count("reject")
    assert metric(d, "petrel_monitor_director_connected") == 1
    assert "pw 1" not in d.stderr()


def test_rapid_failures_below_threshold_do_not_flush(monitor, fakes):
    """rapid_fails_needed is reached, not exceeded: 2 of 5 rapid failures keep
    the backend up, 3 of 5 flush it."""
    port = free_port()
    be = fakes(FakeBackend("imap", ip="127.0.0.2", port=port))
    director = fakes(FakeDirector({"127.0.0.2": {}}))
    d = monitor(director, imap_port=port, imap_tls=False, tags=CREDS)
    wait_for(lambda: be.count("ok") >= 1, timeout=15, what="first probe")

    # 3 failed polls, then 2 of the 5 rapid probes fail.
    start = time.monotonic()
    be.then(*["reject"] * 5)
    wait_for(lambda: be.accepted("ok", after=start) >= 3 + 2, timeout=20, what="rapid phase")
    # The poll after the rapid phase is the clock: by then a flush would
    # have been reported.
    wait_for(lambda: be.accepted("ok", after=start) >= 3 + 2 + 1, timeout=20,
             what="the poll after the rapid phase")
    assert not director.reports()
    assert backend_states(d) == {"127.0.0.2": "up"}
    # The next poll after the rapid phase came at the normal interval.
    assert be.accepted(after=start) <= 3 + 5 + 4

    # 3 failed polls, then 3 of 5 rapid probes fail: flushed.
    start = time.monotonic()
    be.then(*["reject"] * 6)
    wait_for(lambda: director.reports("BACKEND-FLUSH"), timeout=20, what="BACKEND-FLUSH")
    t_flush = director.reports("BACKEND-FLUSH")[0][0]
    assert be.accepted(after=start, before=t_flush) == 3 + 5
    assert be.accepted("reject", after=start, before=t_flush) == 6
    assert "reason=3 of 5 rapid probes failed" in "\t".join(director.reports()[0][1])
    # It answers again: up.
    wait_for(lambda: director.reports("BACKEND-UP"), timeout=15, what="BACKEND-UP")


def test_every_failure_kind_flushes_and_is_counted(monitor, fakes):
    """Refused, silent, bad greeting, NO on LOGIN and an over-long line all
    fail a probe, each under its own result; a healthy backend next to them
    is never flushed. retry_count 1, rapid_rounds 2, needed 2: 3 probes."""
    port = free_port()
    modes = {"127.0.0.2": "refuse", "127.0.0.3": "hang", "127.0.0.4": "bad_greeting",
             "127.0.0.5": "reject", "127.0.0.6": "long_line", "127.0.0.7": "ok"}
    backends = {ip: fakes(FakeBackend("imap", ip=ip, port=port)) for ip in modes}
    director = fakes(FakeDirector({ip: {} for ip in modes}))
    d = monitor(director, imap_port=port, imap_tls=False, tags=CREDS, retry_count=1,
                rapid_rounds=2, rapid_fails_needed=2, timeout="400ms", interval="1s",
                max_line_length=4096)
    wait_for(lambda: all(b.count() >= 1 for b in backends.values()), timeout=15,
             what="first probes")
    for ip, mode in modes.items():
        backends[ip].set_mode(mode)

    failing = [ip for ip, m in modes.items() if m != "ok"]
    wait_for(lambda: {f[1] for _, f in director.reports("BACKEND-FLUSH")} == set(failing),
             timeout=30, what="every failing backend flushed")
    assert all(b.count("ok") >= 1 for b in backends.values())
    for ip in failing:
        if modes[ip] != "refuse":
            t = [t for t, f in director.reports("BACKEND-FLUSH") if f[1] == ip][0]
            assert backends[ip].accepted(modes[ip], before=t) == 1 + 2, ip
    assert backend_states(d)["127.0.0.7"] == "up"
    expected = {"connect_error", "timeout", "bad_greeting", "rejected", "protocol_error"}
    for result in expected:
        assert metric(d, "petrel_monitor_probes_total", protocol="imap", result=result) >= 3, result
    assert metric(d, "petrel_monitor_probes_total", protocol="imap", result="ok") >= 6
    log = d.stderr()
    assert "reply line longer than 4096 bytes" in log


# ---------- TLS ----------

def _tls_server_context(pki):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(pki / "server.pem"), str(pki / "server.key"))
    return ctx


def test_tls_imap_probe(monitor, fakes, pki, tmp_path):
    """IMAP over implicit TLS: not verified by default, verified against
    tls_ca_file (the backend's IP must be in the certificate), refused with
    the wrong CA (tls_error, flushed)."""
    port = free_port()
    be = fakes(FakeBackend("imap", ip="127.0.0.1", port=port, tls_context=_tls_server_context(pki),
                           user="probe", password='pw 1"x'))
    director = fakes(FakeDirector({"127.0.0.1": {"port": 993}}))

    # imap_tls on a port other than 993, no CA: handshake without verification.
    d1 = monitor(director, imap_port=port, imap_tls=True, tags=CREDS)
    wait_for(lambda: len(be.logins) >= 2, timeout=15, what="logins over TLS")
    assert be.logins[0] == ("probe", 'pw 1"x')
    d1.stop()

    # Verified against the test CA.
    logins = len(be.logins)
    d2 = monitor(director, imap_port=port, imap_tls=True, tags=CREDS,
                 tls_ca_file=str(pki / "ca.pem"))
    wait_for(lambda: len(be.logins) >= logins + 2, timeout=15, what="verified logins")
    assert metric(d2, "petrel_monitor_probes_total", protocol="imap", result="tls_error") == 0
    d2.stop()

    # Another CA: every probe fails in the handshake, the backend is flushed.
    other = tmp_path / "other-ca"
    other.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                    "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=other CA"],
                   cwd=other, check=True, capture_output=True)
    logins = len(be.logins)
    d3 = monitor(director, imap_port=port, imap_tls=True, tags=CREDS,
                 tls_ca_file=str(other / "ca.pem"), retry_count=1, rapid_rounds=1,
                 rapid_fails_needed=1)
    wait_for(lambda: director.reports("BACKEND-FLUSH"), timeout=20, what="flush on TLS error")
    assert metric(d3, "petrel_monitor_probes_total", protocol="imap", result="tls_error") >= 2
    assert len(be.logins) == logins  # no password over an unverified connection


# ---------- protocols and credentials ----------

def test_pop3_lmtp_and_per_tag_credentials(monitor, fakes):
    port_imap, port_pop3, port_lmtp = free_port(), free_port(), free_port()
    tags = {"127.0.0.2": "gold", "127.0.0.3": "", "127.0.0.4": "silver"}
    servers = {}
    for ip in tags:
        servers[ip] = {
            "imap": fakes(FakeBackend("imap", ip=ip, port=port_imap)),
            "pop3": fakes(FakeBackend("pop3", ip=ip, port=port_pop3)),
            "lmtp": fakes(FakeBackend("lmtp", ip=ip, port=port_lmtp)),
        }
    director = fakes(FakeDirector({ip: {"tag": tag} for ip, tag in tags.items()}))
    d = monitor(director, imap_port=port_imap, imap_tls=False, poll_pop3=True,
                pop3_port=port_pop3, poll_lmtp=True, lmtp_port=port_lmtp,
                tags={"gold": {"user": "gold-probe", "password": "g"},
                      "": {"user": "probe", "password": "p"}})
    wait_for(lambda: all(s.count() >= 2 for srv in servers.values() for s in srv.values()),
             timeout=20, what="every protocol probed")
    assert servers["127.0.0.2"]["imap"].logins[0] == ("gold-probe", "g")
    assert servers["127.0.0.2"]["pop3"].logins[0] == ("gold-probe", "g")
    for ip in ("127.0.0.3", "127.0.0.4"):  # untagged, and a tag without an entry: ""
        assert servers[ip]["imap"].logins[0] == ("probe", "p")
        assert servers[ip]["pop3"].logins[0] == ("probe", "p")
    assert "LHLO petrel-monitor" in servers["127.0.0.3"]["lmtp"].lines
    assert not director.reports()

    # LMTP alone failing fails the poll: the backend is flushed.
    servers["127.0.0.3"]["lmtp"].set_mode("bad_greeting")
    wait_for(lambda: director.reports("BACKEND-FLUSH"), timeout=30, what="flush on LMTP")
    assert [f[1] for _, f in director.reports("BACKEND-FLUSH")] == ["127.0.0.3"]
    assert metric(d, "petrel_monitor_probes_total", protocol="lmtp", result="bad_greeting") >= 8
    servers["127.0.0.3"]["lmtp"].set_mode("ok")
    wait_for(lambda: director.reports("BACKEND-UP"), timeout=15, what="up")
    for proto in ("imap", "pop3", "lmtp"):
        assert metric(d, "petrel_monitor_probes_total", protocol=proto, result="ok") > 0
        assert metric(d, "petrel_monitor_probe_seconds_count", protocol=proto) > 0


def test_connect_only_without_credentials(monitor, fakes):
    """No entry for the tag and no "" entry: connect, greeting, goodbye."""
    port_imap, port_pop3 = free_port(), free_port()
    imap = fakes(FakeBackend("imap", ip="127.0.0.2", port=port_imap))
    pop3 = fakes(FakeBackend("pop3", ip="127.0.0.2", port=port_pop3))
    director = fakes(FakeDirector({"127.0.0.2": {"tag": "silver"}}))
    monitor(director, imap_port=port_imap, imap_tls=False, poll_pop3=True, pop3_port=port_pop3,
            tags={"gold": {"user": "gold-probe", "password": "g"}})
    wait_for(lambda: imap.count() >= 2 and pop3.count() >= 2, timeout=15, what="probes")
    # Each probe ends with its goodbye: wait for the last one's.
    wait_for(lambda: imap.lines and imap.lines[-1].endswith("LOGOUT") and pop3.lines
             and pop3.lines[-1] == "QUIT", timeout=15, what="the probes' goodbyes")
    assert imap.logins == [] and pop3.logins == []
    assert all(line.endswith("LOGOUT") for line in imap.lines)
    assert set(pop3.lines) == {"QUIT"}
    assert not director.reports()


# ---------- following the director ----------

def test_follows_ring_changes(monitor, fakes):
    port = free_port()
    a = fakes(FakeBackend("imap", ip="127.0.0.2", port=port))
    b = fakes(FakeBackend("imap", ip="127.0.0.3", port=port))
    director = fakes(FakeDirector({"127.0.0.2": {}}))
    d = monitor(director, imap_port=port, imap_tls=False, tags=CREDS)
    wait_for(lambda: a.count() >= 1, timeout=15, what="first backend probed")
    assert b.count() == 0

    director.push("up", "127.0.0.3", port=10143, tag="", vhosts=100)
    wait_for(lambda: b.count() >= 2, timeout=15, what="added backend probed")
    wait_for(lambda: set(backend_states(d)) == {"127.0.0.2", "127.0.0.3"}, what="two backends")

    director.push("down", "127.0.0.3")
    wait_for(lambda: set(backend_states(d)) == {"127.0.0.2"}, what="removed")
    # The other backend's polls are the clock: after its next one, a probe
    # of the removed one that was under way has ended; after two more,
    # none has started.
    base = a.count()
    wait_for(lambda: a.count() >= base + 1, timeout=15, what="next poll")
    n = b.count()
    wait_for(lambda: a.count() >= base + 3, timeout=15, what="two more polls")
    assert b.count() == n  # no longer probed
    assert a.count() >= 3

    # An operator flushes a healthy backend: the monitor's first successful
    # probe brings it back (restore_flushed: any, the specification's reading).
    director.push("flush", "127.0.0.2")
    wait_for(lambda: director.reports("BACKEND-UP"), timeout=15, what="BACKEND-UP")
    assert director.reports("BACKEND-UP")[0][1] == ["BACKEND-UP", "127.0.0.2"]
    assert not director.reports("BACKEND-FLUSH")


def test_restore_own_leaves_operator_flush(monitor, fakes):
    port = free_port()
    be = fakes(FakeBackend("imap", ip="127.0.0.2", port=port))
    director = fakes(FakeDirector({"127.0.0.2": {"state": "flush"}}))
    d = monitor(director, imap_port=port, imap_tls=False, tags=CREDS, restore_flushed="own",
                retry_count=1, rapid_rounds=1, rapid_fails_needed=1)
    wait_for(lambda: be.count("ok") >= 3, timeout=15, what="probes")
    assert not director.reports()
    assert backend_states(d) == {"127.0.0.2": "flush"}
    # Set up by the operator, then failing: the monitor's own flush is undone.
    director.push("up", "127.0.0.2")
    be.set_mode("reject")
    wait_for(lambda: director.reports("BACKEND-FLUSH"), timeout=15, what="flush")
    be.set_mode("ok")
    wait_for(lambda: director.reports("BACKEND-UP"), timeout=15, what="up")


def test_director_restart_and_pending_report(monitor, fakes):
    """The link reconnects; a flush decided while the director was away is
    sent after the next handshake."""
    port = free_port()
    be = fakes(FakeBackend("imap", ip="127.0.0.2", port=port))
    director = fakes(FakeDirector({"127.0.0.2": {}}))
    d = monitor(director, imap_port=port, imap_tls=False, tags=CREDS, retry_count=1,
                rapid_rounds=2, rapid_fails_needed=2)
    wait_for(lambda: be.count("ok") >= 1, timeout=15, what="first probe")

    director.drop_connections()
    wait_for(lambda: director.connections() >= 2, timeout=10, what="reconnect")
    assert director.hellos[1][:2] == ["HELLO", "monitor"]

    director.pause()
    wait_for(lambda: metric(d, "petrel_monitor_director_connected") == 0, what="link down")
    start = time.monotonic()
    be.set_mode("reject")
    wait_for(lambda: be.accepted("reject", after=start) >= 3, timeout=15, what="failed probes")
    wait_for(lambda: backend_states(d) == {"127.0.0.2": "flush"}, what="decided flush")
    assert not director.reports()
    director.resume()
    wait_for(lambda: director.reports("BACKEND-FLUSH"), timeout=15, what="pending flush sent")
    assert len(director.reports("BACKEND-FLUSH")) == 1
    assert metric(d, "petrel_monitor_director_connected") == 1
    assert "director link down" in d.stderr()


def test_unanswered_ping_reconnects(monitor, fakes):
    port = free_port()
    be = fakes(FakeBackend("imap", ip="127.0.0.2", port=port))
    director = fakes(FakeDirector({"127.0.0.2": {}}, answer_ping=False))
    d = monitor(director, imap_port=port, imap_tls=False, tags=CREDS, ping_interval="300ms")
    wait_for(lambda: director.connections() >= 2, timeout=10, what="reconnect after PING")
    assert any(f[0] == "PING" for _, f in director.received)
    assert "the director did not answer PING" in d.stderr()

    # Answered: the link stays. PINGs are the clock: once three more came
    # on the link in use, and were answered, it has not been replaced.
    director.answer_ping = True

    def pings():
        return sum(1 for _, f in director.received if f[0] == "PING")
    wait_for(lambda: pings() >= 1, what="a PING")
    n = director.connections()
    p = pings()
    wait_for(lambda: pings() >= p + 3, timeout=10, what="three answered PINGs")
    assert director.connections() == n
    assert be.count() >= 1


# ---------- limits ----------

def test_limits_max_backends_and_director_line(monitor, fakes):
    port = free_port()
    ips = [f"127.0.0.{i}" for i in range(2, 7)]
    servers = [fakes(FakeBackend("imap", ip=ip, port=port)) for ip in ips]
    director = fakes(FakeDirector({ip: {} for ip in ips}))
    d = monitor(director, imap_port=port, imap_tls=False, tags=CREDS, max_backends=3,
                max_line_length=1024)
    wait_for(lambda: len(backend_states(d)) == 3, timeout=15, what="three backends")
    # Two polls of each of the three are the clock for the other two.
    wait_for(lambda: all(s.count() >= 2 for s in servers[:3]), timeout=15, what="polls")
    assert set(backend_states(d)) == set(ips[:3])
    assert sum(1 for s in servers if s.count() > 0) == 3
    assert "backend limit reached" in d.stderr()

    # An unknown verb (a newer minor version of the protocol) is ignored.
    director.send_raw(ring_line("NEW-THING", "x"))
    polled = servers[0].count()
    wait_for(lambda: servers[0].count() >= polled + 2, timeout=15, what="polls after the line")
    assert director.connections() == 1
    assert not any(f[0] == "ERROR" for _, f in director.received)

    # A line longer than max_line_length: the monitor drops the link and
    # comes back.
    director.send_raw(ring_line("ERROR", "x" * 2000))
    wait_for(lambda: director.connections() >= 2, timeout=10, what="reconnect")
    assert "director line longer than 1024 bytes" in d.stderr()
    # A malformed line: ERROR back, then a reconnect.
    director.send_raw(b"RING-CHANGE\tup\tnot-an-ip\n")
    wait_for(lambda: director.connections() >= 3, timeout=10, what="reconnect")
    wait_for(lambda: any(f[0] == "ERROR" and "RING-CHANGE" in f[1] for _, f in director.received),
             what="ERROR from the monitor")


def test_wrong_ring_version_is_refused(monitor, fakes):
    director = fakes(FakeDirector({}, version="2\t0"))
    d = monitor(director, imap_tls=False)
    wait_for(lambda: director.connections() >= 1 or "ring protocol 2.0" in d.stderr(), timeout=10,
             what="version check")
    wait_for(lambda: "director speaks ring protocol 2.0, not 1.x" in d.stderr(), timeout=10,
             what="log")
    assert metric(d, "petrel_monitor_director_connected") == 0
    r = d.get("telemetry", "/readyz")
    assert r.status == 503
    assert any(c["name"] == "monitor-director" and not c["ok"] for c in r.json()["checks"])


# ---------- ring authentication ----------

def test_monitor_authenticates_and_checks_the_director(monitor, fakes):
    """The monitor proves the ring secret (AUTH) and requires the director's
    proof (AUTH-OK) before it takes the backend list: an impostor that cannot
    prove the secret, or a director that offers no challenge, gets no
    reports and the monitor is not ready."""
    good = fakes(FakeDirector({"127.0.0.2": {}}))
    d = monitor(good, imap_tls=False)
    wait_for(lambda: good.connections() >= 1, timeout=10, what="an authenticated monitor")
    assert good.auth_ok >= 1 and good.auth_failures == 0

    impostor = fakes(FakeDirector({"127.0.0.2": {}}, server_secret="not-the-ring-secret-000"))
    d = monitor(impostor, imap_tls=False)
    wait_for(lambda: "the director's proof does not match the ring secret" in d.stderr(),
             timeout=10, what="the impostor refused")
    assert metric(d, "petrel_monitor_director_connected") == 0
    assert impostor.reports() == []

    # a director that takes AUTH but sends its handshake without AUTH-OK
    silent = fakes(FakeDirector({"127.0.0.2": {}}, skip_auth_ok=True))
    d = monitor(silent, imap_tls=False)
    wait_for(lambda: "AUTH-OK expected from the director" in d.stderr(), timeout=10,
             what="a director without AUTH-OK refused")
    assert metric(d, "petrel_monitor_director_connected") == 0
    assert silent.reports() == []

    old = fakes(FakeDirector({"127.0.0.2": {}}, secret=None))
    d = monitor(old, imap_tls=False)
    wait_for(lambda: "the director does not authenticate" in d.stderr(), timeout=10,
             what="a director without a challenge refused")
    assert old.connections() == 0  # no HELLO was sent


def test_monitor_with_a_wrong_secret_is_refused(monitor, fakes):
    director = fakes(FakeDirector({"127.0.0.2": {}}))
    d = monitor(director, env={"DIRECTOR_RING_SECRET": "the-wrong-ring-secret-12"},
                imap_tls=False)
    wait_for(lambda: director.auth_wrong_proof >= 2, timeout=10, what="refused AUTH lines")
    assert director.connections() == 0
    wait_for(lambda: "authentication failed" in d.stderr(), timeout=10, what="the refusal logged")
    assert "the-wrong-ring-secret-12" not in d.stderr()


def test_monitor_without_a_secret_talks_to_an_unauthenticated_director(monitor, fakes):
    director = fakes(FakeDirector({"127.0.0.2": {}}, secret=None))
    d = monitor(director, env={"DIRECTOR_RING_SECRET": ""}, imap_tls=False)
    wait_for(lambda: director.connections() >= 1, timeout=10, what="an anonymous monitor")
    assert "director link not authenticated" in d.stderr()


def test_readiness_and_metrics_exposition(monitor, fakes, tmp_path):
    port = free_port()
    fakes(FakeBackend("imap", ip="127.0.0.2", port=port))
    director = fakes(FakeDirector({"127.0.0.2": {"port": 10143, "tag": "gold"}}))
    d = monitor(director, imap_port=port, imap_tls=False, tags=CREDS)
    wait_for(lambda: d.get("telemetry", "/readyz").status == 200, timeout=10, what="ready")
    wait_for(lambda: metric(d, "petrel_monitor_probes_total", protocol="imap", result="ok") >= 1,
             what="a probe")
    text = d.get("telemetry", "/metrics").body.decode()
    assert ('petrel_monitor_backend_state{ip="127.0.0.2",port="10143",tag="gold",state="up"} 1'
            in text)
    assert 'petrel_monitor_probe_seconds_bucket{protocol="imap",le="+Inf"}' in text
    promtool = shutil.which("promtool")
    if promtool:
        path = tmp_path / "metrics.txt"
        path.write_text(text)
        with open(path, "rb") as f:
            proc = subprocess.run([promtool, "check", "metrics"], stdin=f, capture_output=True,
                                  text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr


# ---------- configuration ----------

def test_configuration_errors_and_check_config(tmp_path):
    bad = tmp_path / "monitor.yaml"
    bad.write_text("interval: 10\nrapid_rounds: 5\nrapid_fails_needed: 6\n")
    main = tmp_path / "petrel.yaml"
    main.write_text(f'components: [monitor]\nmonitor:\n  config_file: "{bad}"\n'
                    "telemetry: {listen: \"127.0.0.1:0\"}\nallow_root: true\n")
    proc = run_petreld(["-c", str(main), "--check-config"])
    assert proc.returncode == 2
    assert (f"petreld: {bad}:3: rapid_fails_needed: 6 exceeds rapid_rounds (5): no backend "
            "could ever be flushed") in proc.stderr

    missing = tmp_path / "nope.yaml"
    proc = run_petreld(["-c", str(main), "--check-config"], env={"MONITOR_CONFIG": str(missing)})
    assert proc.returncode == 2
    assert f"petreld: {missing}: cannot open: No such file or directory" in proc.stderr

    good = tmp_path / "good.yaml"
    good.write_text('tags:\n  "": {user: probe, password: "top-secret"}\ninterval: 2s\n')
    proc = run_petreld(["-c", str(main), "--check-config"], env={"MONITOR_CONFIG": str(good)})
    assert proc.returncode == 0, proc.stderr
    assert "top-secret" not in proc.stdout
    assert 'password: "(set)"' in proc.stdout
    assert "interval: 2000ms" in proc.stdout

    # --component monitor on a file that does not list it loads the monitor file too.
    other = tmp_path / "other.yaml"
    other.write_text(f'monitor:\n  config_file: "{bad}"\nallow_root: true\n')
    proc = run_petreld(["-c", str(other), "--component", "monitor", "--check-config"])
    assert proc.returncode == 2
    assert "rapid_fails_needed" in proc.stderr
    # Without the monitor component the file is not read.
    proc = run_petreld(["-c", str(other), "--check-config"])
    assert proc.returncode == 0, proc.stderr
    assert "monitor file not read" in proc.stdout


# ---------- with the real director ----------

def test_with_the_real_director(petreld, fakes, tmp_path):
    """director + monitor in one petreld: the monitor reads the director's
    HOST handshake, follows backends added and removed through the admin API,
    and its reports change the director's registry."""
    port = free_port()
    a = fakes(FakeBackend("imap", ip="127.0.0.2", port=port))
    b = fakes(FakeBackend("imap", ip="127.0.0.3", port=port))
    ring, api = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    secret = tmp_path / "ring.secret"
    secret.write_text(SECRET + "\n")
    cfg = dict(FAST)
    cfg.update({"director_addr": ring, "imap_port": port, "imap_tls": False, "tags": CREDS,
                "director_secret_file": str(secret)})
    path = tmp_path / "monitor.yaml"
    path.write_text(monitor_yaml(cfg))
    d = petreld({"components": ["director", "monitor"],
                 "monitor": {"config_file": str(path)},
                 "director": {"api": {"listen": api},
                              "ring": {"listen": ring, "secret_file": str(secret)},
                              "backends": [{"ip": "127.0.0.2", "port": 10143, "tag": "",
                                            "vhosts": 100}]}},
                env={"DIRECTOR_API_TOKEN": "secret"})

    def up():
        r = d.get(api, "/api/director/backends", token="secret")
        assert r.status == 200, r
        return {x["ip"]: x["up"] for x in r.json()["backends"]}

    wait_for(lambda: d.get("telemetry", "/readyz").status == 200, timeout=15, what="ready")
    wait_for(lambda: a.count("ok") >= 2, timeout=15, what="probes of the HOST backend")
    assert up() == {"127.0.0.2": True}

    # Added through the API: RING-CHANGE up reaches the monitor.
    r = d.post(api, "/api/director/backends",
               {"ip": "127.0.0.3", "port": 10143, "tag": "", "vhosts": 50}, token="secret")
    assert r.status == 200, r
    wait_for(lambda: b.count("ok") >= 2, timeout=15, what="probes of the added backend")

    # Failing: the director holds it in flush only after the threshold.
    start = time.monotonic()
    a.set_mode("reject")
    seen = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        state = up()["127.0.0.2"]
        seen.append((time.monotonic(), state))
        if not state:
            break
        time.sleep(0.02)
    t_down = seen[-1][0]
    assert seen[-1][1] is False, "never flushed"
    assert a.accepted("reject", after=start, before=t_down) >= 3 + 5
    last_up = max(t for t, s in seen if s)
    assert a.accepted("reject", after=start, before=last_up) <= 3 + 5
    assert up()["127.0.0.3"] is True
    assert metric(d, "petrel_monitor_reports_total", report="flush") == 1

    # Recovery: up again on the first successful probe.
    a.set_mode("ok")
    wait_for(lambda: up()["127.0.0.2"] is True, timeout=15, what="director sets it up")
    assert metric(d, "petrel_monitor_reports_total", report="up") == 1

    # An operator's `down` on a healthy backend is undone by the next probe
    # (restore_flushed: any).
    assert d.post(api, "/api/director/backends/127.0.0.3/down", token="secret").status == 200
    wait_for(lambda: up()["127.0.0.3"] is True, timeout=15, what="monitor brings it back")
    assert metric(d, "petrel_monitor_reports_total", report="up") == 2

    # Removed: no longer probed.
    r = http_request(api, "DELETE", "/api/director/backends/127.0.0.3", token="secret")
    assert r.status == 200, r
    wait_for(lambda: set(backend_states(d)) == {"127.0.0.2"}, what="removed from the monitor")
    # 127.0.0.2's polls are the clock (as in test_follows_ring_changes).
    base = a.count()
    wait_for(lambda: a.count() >= base + 1, timeout=15, what="next poll")
    n = b.count()
    wait_for(lambda: a.count() >= base + 3, timeout=15, what="two more polls")
    assert b.count() == n


def test_real_imap_backend_and_director(petreld, tmp_path, pki):
    """The whole chain with real parts: a backend petreld (auth + IMAP over
    implicit TLS), a director + monitor petreld probing it with the tag's
    credentials and a verified certificate. The backend stopping flushes it in
    the director; started again, it comes back up."""
    passwd = tmp_path / "passwd"
    passwd.write_text("probe:{PLAIN}probe-secret:1001:1001\n")
    auth_port, imap_tls_port = free_port(), free_port()
    backend_cfg = {
        "components": ["auth", "imap"],
        "mail": {"home": str(tmp_path / "mail" / "%u")},
        "auth": {"listen": [f"127.0.0.1:{auth_port}"], "failure_delay": "10ms",
                 "failure_delay_max": "50ms",
                 "passdb": {"driver": "passwd-file", "path": str(passwd)}},
        "imap": {"listen": [f"127.0.0.1:{free_port()}"],
                 "listen_tls": [f"127.0.0.1:{imap_tls_port}"],
                 "tls_cert_file": str(pki / "server.pem"),
                 "tls_key_file": str(pki / "server.key"),
                 "auth_addr": f"127.0.0.1:{auth_port}"},
    }
    backend = petreld(backend_cfg)

    ring, api = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    secret = tmp_path / "ring.secret"
    secret.write_text(SECRET + "\n")
    cfg = dict(FAST)
    cfg.update({"director_addr": ring, "imap_port": imap_tls_port, "imap_tls": True,
                "director_secret_file": str(secret),
                "tls_ca_file": str(pki / "ca.pem"),
                "tags": {"gold": {"user": "probe", "password": "probe-secret"},
                         "": {"user": "nobody", "password": "wrong"}}})
    path = tmp_path / "monitor.yaml"
    path.write_text(monitor_yaml(cfg))
    d = petreld({"components": ["director", "monitor"],
                 "monitor": {"config_file": str(path)},
                 "director": {"api": {"listen": api},
                              "ring": {"listen": ring, "secret_file": str(secret)},
                              "backends": [{"ip": "127.0.0.1", "port": 10143, "tag": "gold",
                                            "vhosts": 100}]}},
                env={"DIRECTOR_API_TOKEN": "secret"})

    def up():
        r = http_request(api, "GET", "/api/director/backends", token="secret")
        return {x["ip"]: x["up"] for x in r.json()["backends"]}

    wait_for(lambda: metric(d, "petrel_monitor_probes_total", protocol="imap", result="ok") >= 2,
             timeout=20, what="successful IMAP logins")
    assert up() == {"127.0.0.1": True}
    assert re.search(r'msg="logged in" .*user=probe .*tls=yes', backend.stderr())

    backend.stop()
    wait_for(lambda: up()["127.0.0.1"] is False, timeout=30, what="flushed")
    assert metric(d, "petrel_monitor_probes_total", protocol="imap",
                  result="connect_error") >= 3 + 5

    backend.start()
    wait_for(lambda: up()["127.0.0.1"] is True, timeout=30, what="up again")
    assert metric(d, "petrel_monitor_reports_total", report="up") == 1
    assert "probe-secret" not in d.stderr() and "probe-secret" not in backend.stderr()


def test_reconnect_backoff_doubles_caps_and_starts_over(petreld, tmp_path, fakes):
    """The director link's reconnect waits (net/backoff.h): reconnect_min,
    doubling, capped at reconnect_max while the director is away; once a
    link worked, losing it waits reconnect_min again, not the cap the
    earlier outage had reached."""
    director = fakes(FakeDirector({}))
    director.pause()
    cfg = dict(FAST, director_addr=director.addr, reconnect_min="60ms", reconnect_max="240ms")
    path = tmp_path / "monitor-backoff.yaml"
    path.write_text(monitor_yaml(cfg))
    d = petreld({"components": ["monitor"], "monitor": {"config_file": str(path)},
                 "log_level": "debug"}, env={"DIRECTOR_RING_SECRET": SECRET})

    def waits():
        return [int(w) for w in re.findall(r"director link (?:still )?down\" .*retry_ms=(\d+)",
                                           d.stderr())]

    wait_for(lambda: waits()[:5] == [60, 120, 240, 240, 240] or len(waits()) > 5, timeout=10,
             what="five failed dials")
    assert waits()[:5] == [60, 120, 240, 240, 240], waits()
    director.resume()
    wait_for(lambda: metric(d, "petrel_monitor_director_connected") == 1, timeout=10,
             what="link up")
    before = len(waits())
    director.drop_connections()
    wait_for(lambda: len(waits()) > before, timeout=10, what="link lost")
    assert waits()[before] == 60, waits()
