"""Stopping petreld in the states where teardown has something left on an
event loop; each stop must exit 0 with nothing leaked (the fixture's
d.stop() fails on any sanitizer report):

- host-name lookups waiting on a name server that never answers, on each
  kind of loop a lookup lives on: an IMAP worker's own loop
  (imap.workers > 1), the login proxy's main loop (director and auth), a
  kvstore dict's connect (main loop), the private loop of an auth pgsql
  connection (the main loop's IMAP case is
  test_net_toolkit_hostile.py::test_stop_while_a_dns_lookup_waits_exits_clean);
  run in a private mount namespace whose resolv.conf names a silent server;
- relayed and IDLE sessions open, and a relay still lingering when
  shutdown_timeout ends the loop (a fleet of real petrelds)."""

import time

import pytest

from authproto import AuthConn
from conftest import free_port, wait_for
from test_net_toolkit_hostile import login_waiting_on_dns, silent_dns  # noqa: F401 (fixture)


@pytest.mark.parametrize("with_client", [True, False])
def test_stop_while_a_worker_loop_lookup_waits_exits_clean(petreld, tmp_path,
                                                           silent_dns, with_client):  # noqa: F811
    """imap.workers: 2 puts the session, its auth client and so the lookup
    on a worker thread's loop, freed by imap_worker_stop, not on the main
    loop."""
    d, a, _, _ = login_waiting_on_dns(petreld, tmp_path, workers=2, auth_timeout="30s")
    wait_for(lambda: silent_dns.queries > 0, timeout=10, what="the query to the name server")
    if not with_client:
        a.close()
    t0 = time.monotonic()
    d.stop()
    assert time.monotonic() - t0 < 8
    a.close()


def test_stop_after_an_auth_pgsql_lookup_timed_out_exits_clean(petreld, silent_dns):  # noqa: F811
    """auth's pgsql passdb runs each connection on a private loop
    (sql-pgsql-blocking.c). Its host= name is never answered: the connect
    times out (a temporary failure), the lookup is cancelled, and the stop
    frees that loop with the cancelled answer still queued on it."""
    d = petreld({
        "components": ["auth"],
        "auth": {
            "listen": [f"127.0.0.1:{free_port()}"],
            "failure_delay": "10ms",
            "passdb": {
                "driver": "sql", "engine": "pgsql",
                "connect": "host=pg.slow-dns.example dbname=auth user=petrel",
                "connect_timeout": "1s",
                "password_query": "SELECT pw AS password FROM mailbox WHERE email = '%u'",
            },
        },
    })
    with AuthConn(d.config["auth"]["listen"][0], timeout=30) as c:
        r = c.verify("alice@example.org", "s3cret")
        assert r[0] == "FAIL" and "temp" in r, r
    assert silent_dns.queries > 0, "petreld never asked the name server"
    d.stop()


def test_stop_while_the_login_proxy_waits_on_dns_exits_clean(petreld, tmp_path,
                                                              silent_dns):  # noqa: F811
    """The login proxy (main loop) dials its director and its auth service
    by names never answered: the director client's lookup waits from the
    start, a LOGIN's auth lookup waits too; the stop frees both."""
    import socket
    from ringproto import SECRET
    secret = tmp_path / "ring.secret"
    secret.write_text(SECRET + "\n")
    secret.chmod(0o600)
    d = petreld({
        "components": ["login"],
        "login": {
            "directors": ["director.slow-dns.example:9102"],
            "ring_secret_file": str(secret),
            "imap": {"listen": [f"127.0.0.1:{free_port()}"],
                     "auth_addr": "auth.slow-dns.example:10200", "auth_timeout": "30s"},
        },
    })
    host, port = d.config["login"]["imap"]["listen"][0].rsplit(":", 1)
    a = socket.create_connection((host, int(port)), timeout=30)
    f = a.makefile("rb")
    assert f.readline().startswith(b"* OK")
    a.sendall(b"a LOGIN alice wonderland\r\n")
    wait_for(lambda: silent_dns.queries >= 4, timeout=10,
             what="both names asked of the name server (A and AAAA each)")
    t0 = time.monotonic()
    d.stop()
    assert time.monotonic() - t0 < 8
    a.close()


@pytest.mark.parametrize("shutdown_timeout", ["5s", "1s"])
def test_stop_while_a_kvstore_dict_request_waits_on_dns_exits_clean(petreld, silent_dns,
                                                                    shutdown_timeout):  # noqa: F811
    """A kvstore dict whose address is a name never answered: an API
    lookup waits on the connect's lookup when the stop comes, answered by
    the dicts' close (5s) or abandoned at shutdown_timeout (1s, the dict's
    own timeout being 30s)."""
    import threading
    from test_dict_kvstore import KV
    d = petreld({"shutdown_timeout": shutdown_timeout,
                 "dicts": {"kv": {"driver": "kvstore", "address": "kv.slow-dns.example:6379",
                                  "timeout": "30s"}}})
    kv = KV(d)
    answers = []

    def ask():
        try:
            answers.append(kv.lookup("shared/k").status)
        except OSError as e:
            answers.append(e)

    t = threading.Thread(target=ask, daemon=True)
    t.start()
    wait_for(lambda: silent_dns.queries > 0, timeout=10, what="the query to the name server")
    t0 = time.monotonic()
    d.stop()
    assert time.monotonic() - t0 < 8
    t.join(10)
    assert answers and answers[0] != 200, answers


def test_stop_with_relayed_and_idling_sessions_open_exits_clean(tmp_path):
    """Not a lookup, but the other state the final loop pass must survive:
    sessions relayed through both proxies, some in IDLE on the backends.
    Proxy a stops with its relays open, then a backend with IDLE sessions
    (relayed by proxy b) open, then the rest of the fleet: each exits 0
    with no sanitizer report."""
    from fleet import Fleet
    f = Fleet(tmp_path / "fleet").start()
    try:
        sessions = []
        for i, user in enumerate(f.users[:8]):
            m = f.imap(f.proxies[i % 2])
            assert m.login(user, f.password(user))[0] == "OK"
            assert m.select("INBOX")[0] == "OK"
            if i % 4 < 2:
                m.send(b"i IDLE\r\n")
                assert m.readline().startswith(b"+ ")
            sessions.append(m)
        for node in (f.proxies[0], f.backends[0]):
            node.d.stop()  # exit 0, no sanitizer report
            f.nodes.remove(node)  # stopped and checked: not "exited by itself"
        f.stop()
    finally:
        f.stop(check=False)


def test_stop_past_shutdown_timeout_with_a_lingering_relay_exits_clean(tmp_path):
    """A relayed client that reads nothing has megabytes queued towards it
    when the proxy stops with shutdown_timeout (1 s) shorter than the
    relay's linger (2 s): the loop ends while the relay still lingers, and
    the proxy's session, its hub and its front are freed around it. The
    exit must still be 0 with no sanitizer report."""
    import socket
    from fleet import CLIENT_IP, Fleet

    class ShortStop(Fleet):
        def proxy_config(self, name):
            cfg = super().proxy_config(name)
            cfg["shutdown_timeout"] = "1s"
            return cfg

    f = ShortStop(tmp_path / "fleet").start()
    try:
        proxy = f.proxies[0]
        user = f.users[0]
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.bind((CLIENT_IP, 0))
        s.settimeout(20)
        s.connect((proxy.ip, f.port["imap"]))
        r = s.makefile("rb")
        assert r.readline().startswith(b"* OK")
        s.sendall(b'a LOGIN %s "%s"\r\n' % (user.encode(), f.password(user).encode()))
        while not (line := r.readline()).startswith(b"a "):
            pass
        assert line.startswith(b"a OK"), line
        body = b"Subject: big\r\n\r\n" + b"x" * 78 + b"\r\n"
        body += b"y" * 78 * 20000 + b"\r\n"  # about 1.5 MB
        s.sendall(b"b APPEND INBOX {%d}\r\n" % len(body))
        assert r.readline().startswith(b"+")
        s.sendall(body + b"\r\n")
        while not (line := r.readline()).startswith(b"b "):
            pass
        assert line.startswith(b"b OK"), line
        s.sendall(b"c SELECT INBOX\r\n")
        while not (line := r.readline()).startswith(b"c "):
            pass
        # From here the client reads nothing: the answers pile up in the proxy.
        s.sendall(b"".join(b"f%d FETCH 1:* BODY.PEEK[]\r\n" % i for i in range(4)))
        wait_for(lambda: proxy.metric_sum("petrel_login_sessions", protocol="imap") == 1,
                 timeout=5, what="the relayed session")
        wait_for(lambda: send_queue(s.getpeername(), s.getsockname()) > 100_000, timeout=10,
                 what="the proxy's answers stalled towards the client")
        proxy.d.stop()  # exit 0, no sanitizer report
        f.nodes.remove(proxy)
        s.close()
        f.stop()
    finally:
        f.stop(check=False)


def send_queue(local, remote):
    """Bytes queued unsent on the IPv4 TCP socket `local` -> `remote`
    (/proc/net/tcp's tx_queue), 0 when there is no such socket."""
    import socket

    def hexaddr(a):
        ip, port = a
        return "%08X:%04X" % (int.from_bytes(socket.inet_aton(ip), "little"), port)
    want = (hexaddr(local), hexaddr(remote))
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if (fields[1], fields[2]) == want:
                return int(fields[4].split(":")[0], 16)
    return 0


@pytest.mark.parametrize("workers", [1, 2])
def test_stop_while_logins_wait_on_a_silent_auth_service_exits_clean(petreld, tmp_path,
                                                                     silent_server, workers):
    """LOGINs (IMAP, on the main loop or two workers) and a POP3 PASS wait
    on an auth service that accepted and never answers (auth_timeout 30 s):
    the stop ends them with their sessions, their auth requests pending."""
    import socket
    from test_imap_session import addr, imap_overrides
    cfg = imap_overrides(tmp_path, extra={"workers": workers, "auth_addr": silent_server.addr,
                                          "auth_timeout": "30s"})
    cfg["components"] = list(cfg.get("components", ["imap"])) + ["pop3"]
    cfg["pop3"] = {"listen": [f"127.0.0.1:{free_port()}"], "auth_addr": silent_server.addr,
                   "auth_timeout": "30s"}
    d = petreld(cfg)
    clients = []
    for i in range(4):
        c = socket.create_connection(addr(d), timeout=30)
        f = c.makefile("rb")
        assert f.readline().startswith(b"* OK")
        c.sendall(b"a%d LOGIN alice wonderland\r\n" % i)
        clients.append(c)
    host, port = cfg["pop3"]["listen"][0].rsplit(":", 1)
    p = socket.create_connection((host, int(port)), timeout=30)
    pf = p.makefile("rb")
    assert pf.readline().startswith(b"+OK")
    p.sendall(b"USER alice\r\n")
    assert pf.readline().startswith(b"+OK")
    p.sendall(b"PASS wonderland\r\n")
    clients.append(p)
    wait_for(lambda: len(silent_server.conns) >= 2, timeout=10,
             what="the auth service connected to")
    t0 = time.monotonic()
    d.stop()
    assert time.monotonic() - t0 < 8
    for c in clients:
        c.close()


def api_call_waiting(d, path):
    """Starts `path` (GET on the backend API) in a thread: its answers list."""
    import threading
    answers = []

    def ask():
        try:
            answers.append(d.get("backend", path, timeout=20).status)
        except OSError as e:
            answers.append(e)

    threading.Thread(target=ask, daemon=True).start()
    return answers


def stop_abandons_the_api_call(d, answers):
    """The stop waits for the API call until shutdown_timeout (1 s), then
    ends the loop with it pending: exit 0, nothing leaked, the call not
    answered 200."""
    t0 = time.monotonic()
    d.stop()
    assert 1 <= time.monotonic() - t0 < 8
    wait_for(lambda: answers, timeout=10, what="the API call's end")
    assert answers[0] != 200, answers
    assert "shutdown timeout reached" in d.stderr()


def test_stop_past_shutdown_timeout_with_an_api_call_waiting_on_auth_exits_clean(
        petreld, silent_server):
    """An API call (quota/show, through backend_api.auth_master_addr) waits
    on an auth service that accepted and never answers: it holds the stop
    up until shutdown_timeout (1 s) abandons it, and the loop ends with the
    auth request pending."""
    import select
    d = petreld({"shutdown_timeout": "1s",
                 "backend_api": {"auth_master_addr": silent_server.addr}})
    answers = api_call_waiting(d, "/api/backend/quota/show?user=alice")
    wait_for(lambda: silent_server.conns and select.select(silent_server.conns, [], [], 0)[0],
             timeout=10, what="the auth request written to the silent service")
    stop_abandons_the_api_call(d, answers)


def test_stop_past_shutdown_timeout_with_an_api_call_waiting_on_dns_exits_clean(
        petreld, silent_dns):  # noqa: F811
    """The same, the auth service's name never answered by DNS: the loop
    ends with the lookup pending."""
    d = petreld({"shutdown_timeout": "1s",
                 "backend_api": {"auth_master_addr": "auth.slow-dns.example:10200"}})
    answers = api_call_waiting(d, "/api/backend/quota/show?user=alice")
    wait_for(lambda: silent_dns.queries > 0, timeout=10, what="the query to the name server")
    stop_abandons_the_api_call(d, answers)
