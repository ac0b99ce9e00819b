"""The telemetry listener (spec document 2, "Telemetry listener"): /healthz,
/readyz with its 800 ms deadline, /metrics in the Prometheus text format,
and run-time log levels through /debug/loglevel."""

import re
import shutil
import socket
import subprocess
import time

import pytest

from conftest import free_port, wait_for


def assert_json_error(resp, status):
    assert resp.status == status, resp
    assert resp.headers.get("content-type", "").startswith("application/json"), resp.headers
    body = resp.json()
    assert isinstance(body.get("error"), str) and body["error"], body
    return body["error"]


def test_healthz(petreld):
    d = petreld()
    r = d.get("telemetry", "/healthz")
    assert r.status == 200
    assert r.json() == {"status": "ok"}


# ---------- /readyz ----------

def checks_by_name(body):
    return {c["name"]: c for c in body["checks"]}


def test_readyz_without_checks_is_ready(petreld):
    d = petreld({"components": []})
    r = d.get("telemetry", "/readyz")
    assert r.status == 200, r
    assert r.json()["ready"] is True


def test_readyz_includes_own_listener(petreld):
    d = petreld()
    r = d.get("telemetry", "/readyz")
    assert r.status == 200, r
    body = r.json()
    assert body["ready"] is True
    assert checks_by_name(body)["backend-api-listener"]["ok"] is True


def test_readyz_follows_a_dependency(petreld):
    port = free_port()
    d = petreld({"telemetry": {"readiness_checks": [{"name": "dep", "tcp": f"127.0.0.1:{port}"}]}})
    r = d.get("telemetry", "/readyz")
    assert r.status == 503, r
    body = r.json()
    assert body["ready"] is False
    dep = checks_by_name(body)["dep"]
    assert dep["ok"] is False
    assert isinstance(dep.get("error"), str) and dep["error"], dep
    # The metric mirrors the latest run.
    assert 'petrel_readiness_check{check="dep"} 0' in d.get("telemetry", "/metrics").body.decode()

    # The dependency comes up: the next run passes.
    with socket.socket() as srv:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", port))
        srv.listen(16)
        r = d.get("telemetry", "/readyz")
        assert r.status == 200, r
        body = r.json()
        assert body["ready"] is True
        dep = checks_by_name(body)["dep"]
        assert dep["ok"] is True and "error" not in dep, dep
        metrics = d.get("telemetry", "/metrics").body.decode()
        assert 'petrel_readiness_check{check="dep"} 1' in metrics


def test_readyz_deadline_bounds_a_hanging_tls_check(petreld, silent_server):
    d = petreld({"telemetry": {"readiness_checks": [
        {"name": "hangs", "tcp": silent_server.addr, "tls": True},
        {"name": "plain", "tcp": silent_server.addr},
    ]}})
    t0 = time.monotonic()
    r = d.get("telemetry", "/readyz", timeout=10)
    elapsed = time.monotonic() - t0
    assert r.status == 503, r
    assert elapsed < 2.0, f"/readyz took {elapsed:.2f}s; the deadline is 800 ms"
    assert elapsed >= 0.7, f"/readyz answered after {elapsed:.2f}s, before the deadline"
    checks = checks_by_name(r.json())
    # TCP connect succeeds, but a TLS check must complete the handshake.
    assert checks["plain"]["ok"] is True, checks
    assert checks["hangs"]["ok"] is False, checks
    assert "deadline" in checks["hangs"]["error"], checks


def test_readyz_checks_run_concurrently(petreld, silent_server):
    # Three hanging checks finish under one deadline, not three.
    d = petreld({"telemetry": {"readiness_checks": [
        {"name": f"hang{i}", "tcp": silent_server.addr, "tls": True} for i in range(3)]}})
    t0 = time.monotonic()
    r = d.get("telemetry", "/readyz")
    assert time.monotonic() - t0 < 2.0
    assert r.status == 503
    assert all(not c["ok"] for c in r.json()["checks"] if c["name"].startswith("hang"))


# ---------- /debug/loglevel ----------

def level_metric(d):
    text = d.get("telemetry", "/metrics").body.decode()
    return re.findall(r'^petrel_log_level\{level="(\w+)"\} (\S+)$', text, re.M)


def test_loglevel_get_shows_configured_level(petreld):
    d = petreld()
    r = d.get("telemetry", "/debug/loglevel")
    assert r.status == 200
    assert r.json()["level"] == "info"
    assert level_metric(d) == [("info", "0")]


def test_loglevel_post_with_ttl_reverts(petreld):
    d = petreld()
    r = d.post("telemetry", "/debug/loglevel", body={"level": "debug", "ttl": "1s"})
    assert r.status == 200, r
    assert r.json()["level"] == "debug"
    assert d.get("telemetry", "/debug/loglevel").json()["level"] == "debug"
    # One series at a time, value = numeric level.
    assert level_metric(d) == [("debug", "-4")]
    time.sleep(1.5)
    wait_for(lambda: d.get("telemetry", "/debug/loglevel").json()["level"] == "info",
             timeout=3, what="the level to revert to info")
    assert level_metric(d) == [("info", "0")]


def test_loglevel_post_without_ttl_sticks(petreld):
    d = petreld()
    assert d.post("telemetry", "/debug/loglevel", body={"level": "warn"}).status == 200
    time.sleep(0.2)
    assert d.get("telemetry", "/debug/loglevel").json()["level"] == "warn"
    assert level_metric(d) == [("warn", "4")]


@pytest.mark.parametrize("body", [
    '{"level": "debug"',                # malformed JSON
    "not json at all",
    "[]",                               # not an object
    "{}",                               # level missing
    '{"level": 3}',                     # level mistyped
    '{"level": "verbose"}',             # unknown level
    '{"level": "debug", "ttl": 5}',     # ttl mistyped
    '{"level": "debug", "ttl": "soon"}',  # ttl not a duration
    '{"level": "debug", "ttl": "0s"}',  # ttl not positive
])
def test_loglevel_rejects_bad_requests(petreld, body):
    d = petreld()
    r = d.post("telemetry", "/debug/loglevel", body=body,
               headers={"Content-Type": "application/json"})
    assert_json_error(r, 400)
    # Nothing changed.
    assert d.get("telemetry", "/debug/loglevel").json()["level"] == "info"


def test_telemetry_wrong_method_and_unknown_path(petreld):
    d = petreld()
    r = d.post("telemetry", "/metrics", body="{}")
    assert_json_error(r, 405)
    assert "GET" in r.headers.get("allow", "")
    assert_json_error(d.get("telemetry", "/nope"), 404)


def test_telemetry_allowed_nets_spare_healthz(petreld):
    d = petreld({"telemetry": {"allowed_nets": ["10.0.0.0/8"]}})
    assert d.get("telemetry", "/healthz").status == 200
    assert_json_error(d.get("telemetry", "/metrics"), 403)
    assert_json_error(d.get("telemetry", "/debug/loglevel"), 403)


# ---------- /metrics ----------

def parse_exposition(text):
    """Returns ({family: type}, [(name, labels dict, value)])."""
    types = {}
    samples = []
    label_re = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
            continue
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$", line)
        assert m, f"unparsable metrics line: {line!r}"
        labels = dict(label_re.findall(m.group(3) or ""))
        samples.append((m.group(1), labels, m.group(4)))
    return types, samples


def histogram_problems(text):
    types, samples = parse_exposition(text)
    problems = []
    for family, kind in types.items():
        if kind != "histogram":
            continue
        series = {}
        for name, labels, value in samples:
            if name not in (family + "_bucket", family + "_count", family + "_sum"):
                continue
            key = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
            s = series.setdefault(key, {"buckets": [], "count": None, "sum": None})
            if name.endswith("_bucket"):
                s["buckets"].append((labels.get("le"), float(value)))
            elif name.endswith("_count"):
                s["count"] = float(value)
            else:
                s["sum"] = float(value)
        for key, s in series.items():
            les = [le for le, _ in s["buckets"]]
            if "+Inf" not in les:
                problems.append(f"{family}{dict(key)}: no +Inf bucket")
                continue
            counts = [v for _, v in s["buckets"]]
            if counts != sorted(counts):
                problems.append(f"{family}{dict(key)}: buckets not cumulative")
            inf = dict(s["buckets"])["+Inf"]
            if s["count"] is None or s["count"] != inf:
                problems.append(f"{family}{dict(key)}: _count {s['count']} != +Inf {inf}")
            if s["sum"] is None:
                problems.append(f"{family}{dict(key)}: no _sum")
    return types, problems


def test_histogram_checker_catches_a_missing_inf_bucket():
    bad = ("# TYPE x_seconds histogram\n"
           'x_seconds_bucket{le="0.1"} 1\nx_seconds_sum 0.05\nx_seconds_count 1\n')
    assert histogram_problems(bad)[1]


@pytest.fixture(scope="module")
def promtool():
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: scripts/setup.sh installs Debian's prometheus package")
    return path


def test_metrics_pass_promtool_and_histograms_have_inf(petreld, promtool):
    d = petreld({"telemetry": {"readiness_checks": [
        {"name": "dep", "tcp": f"127.0.0.1:{free_port()}"}]}},
        env={"BACKEND_API_TOKEN": "t"})
    # Traffic so that histograms have series with several label sets.
    d.get("backend", "/api/backend/health")
    d.get("backend", "/api/backend/version")
    d.get("backend", "/api/backend/version", token="t")
    d.get("backend", "/nope", token="t")
    d.get("telemetry", "/readyz")
    d.get("telemetry", "/debug/loglevel")
    r = d.get("telemetry", "/metrics")
    assert r.status == 200
    assert r.headers["content-type"].startswith("text/plain")
    text = r.body.decode()
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr
    types, problems = histogram_problems(text)
    assert not problems, problems
    assert types.get("petrel_http_request_seconds") == "histogram", types
    for name, kind in (("petrel_log_level", "gauge"), ("petrel_readiness_check", "gauge"),
                       ("petrel_build_info", "gauge")):
        assert types.get(name) == kind, types
    assert 'server="backend-api"' in text and 'code="401"' in text
