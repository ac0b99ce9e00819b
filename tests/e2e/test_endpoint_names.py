"""Host names in configured addresses (net/endpoint.h, docs/configuration.md,
"Addresses"): a listener named by host name is resolved when the
configuration is read (an unresolvable name is `file:line: key: message`);
a service a component dials (auth_addr, a director peer) is named the same
way and resolved on the event loop at each connect, so a name that does not
resolve fails the requests that need it, not the start. Real petreld,
imaplib and the director's HTTP API."""

import imaplib

from conftest import free_port, http_request, run_petreld, to_yaml, wait_for

PASSWD = "alice:{PLAIN}wonderland:1001:1001\n"
TOKEN = "names-test-token"
BAD = "no-such-host.invalid"  # RFC 6761: never resolves


def imap_config(tmp_path, auth_addr, host="localhost"):
    passwd = tmp_path / "passwd"
    passwd.write_text(PASSWD)
    auth_port = free_port()
    return {
        "components": ["auth", "imap"],
        "mail": {"home": str(tmp_path / "mail" / "%u")},
        "auth": {"listen": [f"{host}:{auth_port}"],
                 "passdb": {"driver": "passwd-file", "path": str(passwd)}},
        "imap": {"listen": [f"{host}:{free_port()}"],
                 "auth_addr": auth_addr if auth_addr is not None else f"{host}:{auth_port}"},
    }


def imap_port(d):
    return int(d.config["imap"]["listen"][0].rsplit(":", 1)[1])


def test_listener_and_auth_target_named_localhost(petreld, tmp_path):
    d = petreld(imap_config(tmp_path, None))
    # The listener bound what the name resolves to (127.0.0.1 in /etc/hosts).
    m = imaplib.IMAP4("127.0.0.1", imap_port(d))
    assert m.login("alice", "wonderland")[0] == "OK"
    m.logout()


def test_director_peers_named_by_host_name(petreld):
    """Two directors on one address, each naming the other `localhost:port`:
    the ring knows members by IP, so the name is resolved when the
    configuration is read, and the link is dialled to it."""
    ports = [free_port(), free_port()]
    reps = []
    for i in range(2):
        api = f"127.0.0.1:{free_port()}"
        cfg = {
            "components": ["director"],
            "director": {
                "api": {"listen": api},
                "ring": {"listen": f"localhost:{ports[i]}", "allow_unauthenticated": True,
                         "reconnect_min": "50ms", "reconnect_max": "300ms"},
                "peers": [f"localhost:{ports[1 - i]}"],
                "backends": [{"ip": "10.0.0.1", "port": 143, "vhosts": 10}],
            },
        }
        reps.append((petreld(cfg, env={"DIRECTOR_API_TOKEN": TOKEN}), api))

    def ring(api):
        r = http_request(api, "GET", "/api/director/ring", token=TOKEN, timeout=10)
        assert r.status == 200, r
        return r.json()

    def linked():
        for _, api in reps:
            for m in ring(api)["members"]:
                if not m["self"] and (m["link"] is None or m["link"]["state"] != "connected"):
                    return False
        return True

    wait_for(linked, timeout=10, what="both ring links connected")
    members = {m["addr"] for m in ring(reps[0][1])["members"]}
    assert members == {f"127.0.0.1:{ports[0]}", f"127.0.0.1:{ports[1]}"}, members


def test_unresolvable_listener_is_a_config_error(tmp_path):
    cfg = imap_config(tmp_path, None, host="127.0.0.1")
    cfg["allow_root"] = True
    cfg["imap"]["listen"] = [f"127.0.0.1:{free_port()}", f"{BAD}:{free_port()}"]
    path = tmp_path / "petrel.yaml"
    path.write_text(to_yaml(cfg) + "\n")
    lines = path.read_text().splitlines()
    lineno = next(i + 1 for i, l in enumerate(lines) if BAD in l)
    for args in (["--check-config"], []):
        proc = run_petreld(["-c", str(path)] + args)
        assert proc.returncode == 2, proc.stderr
        assert f"{path}:{lineno}: imap.listen: cannot resolve '{BAD}': " in proc.stderr, \
            proc.stderr


def test_unresolvable_auth_target_fails_logins_not_the_start(petreld, tmp_path):
    """auth_addr is dialled: its name is looked up on the loop at each
    connect (evdns), so petreld starts, and a login is refused with the
    reason logged."""
    d = petreld(imap_config(tmp_path, f"{BAD}:10200", host="127.0.0.1"))
    m = imaplib.IMAP4("127.0.0.1", imap_port(d))
    try:
        m.login("alice", "wonderland")
        raise AssertionError("login succeeded without an auth service")
    except imaplib.IMAP4.error as e:
        assert "UNAVAILABLE" in str(e) or "unavailable" in str(e).lower(), e
    wait_for(lambda: f"cannot resolve '{BAD}'" in d.stderr(), timeout=10,
             what="the lookup failure logged")
    # Still serving: the greeting of a new connection.
    imaplib.IMAP4("127.0.0.1", imap_port(d)).logout()
