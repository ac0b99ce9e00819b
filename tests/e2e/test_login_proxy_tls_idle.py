"""An idle proxied session of a TLS client costs the login proxy little
memory (issue 26: an idle proxied session at most 16 KiB in the proxy;
docs/performance.md, "Login proxy").

The fleet of fleet.py (two backends, two directors, the monitor, the auth
node, two proxies with implicit TLS on their IMAPS port). 200 clients log in
through proxy a over implicit TLS, SELECT INBOX and stay idle; the proxy's
VmRSS growth per session is bounded. What a TLS session holds beyond a
plain one is OpenSSL's connection state; its 16 KiB read and write buffers
are released while the connection is idle (SSL_MODE_RELEASE_BUFFERS on the
server contexts, net/tls.c), which is what brings a session under the bound.

Under AddressSanitizer every allocation carries redzones and shadow memory
and freed memory waits in a quarantine; the proxy runs with the quarantine
off (freed memory is reused, so VmRSS follows live memory) and the bound
allows for the redzones."""

from conftest import PETRELD, wait_for
from fleet import Fleet
from test_login_proxy import vmrss_kib

SESSIONS = 200
WARMUP = 20
BOUND_KIB = 20  # per session; main before the fix: about 30 (release)
# AddressSanitizer's redzones and shadow (measured: about 1.5 x release).
ASAN_BOUND_KIB = 32


def sanitized():
    with open(PETRELD, "rb") as f:
        return b"__asan_init" in f.read()


def open_sessions(fleet, proxy, users):
    sessions = []
    for user in users:
        m = fleet.imaps(proxy)
        assert m.login(user, fleet.password(user))[0] == "OK"
        assert m.select("INBOX")[0] == "OK"
        sessions.append(m)
    return sessions


def close_sessions(fleet, proxy, sessions):
    for m in sessions:
        m.shutdown()
    wait_for(lambda: proxy.metric_sum("petrel_login_sessions", protocol="imap") == 0,
             timeout=20, what="the proxy's sessions ended")


def test_an_idle_tls_proxied_session_costs_the_proxy_at_most_20_kib(tmp_path, pki):
    f = Fleet(tmp_path / "fleet", pki=pki)
    # ASan: no quarantine, so that freed memory is reused as in a release
    # build (no effect on a build without ASan).
    f.env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=1:quarantine_size_mb=0"
    f.start()
    try:
        proxy = f.proxies[0]
        # First use of the process's pages, the allocator's caches and the
        # TLS context's tables: not a session's cost.
        close_sessions(f, proxy, open_sessions(f, proxy, f.users[:WARMUP]))
        before = vmrss_kib(proxy.pid)
        sessions = open_sessions(f, proxy, f.users[:SESSIONS])
        assert proxy.metric_sum("petrel_login_sessions", protocol="imap") == SESSIONS
        after = vmrss_kib(proxy.pid)
        per = (after - before) / SESSIONS
        bound = ASAN_BOUND_KIB if sanitized() else BOUND_KIB
        print(f"proxy VmRSS {before} -> {after} KiB: {per:.1f} KiB per idle TLS session "
              f"(bound {bound})")
        assert per <= bound, f"{per:.1f} KiB per idle TLS proxied session (bound {bound} KiB)"
        # Still live: each session answers through the relay.
        for m in sessions[:: SESSIONS // 10]:
            assert m.noop()[0] == "OK"
        close_sessions(f, proxy, sessions)
    finally:
        f.stop()
