"""Failed-login protection of the auth service, end to end over its line
protocol: only failures are delayed (a correct password is answered at
once, penalty or not), trusted networks wait for nothing, failures are
limited per address and per user across connections, and `ip=` is believed
only from trusted auth clients (docs/auth.md, "Failed logins")."""

import threading
import time

from authproto import AuthConn
from conftest import free_port, wait_for

PASSWD = "\n".join([
    "alice:{PLAIN}wonderland:1001:1001::/home/alice",
    "bob:{PLAIN}builder:1002:1002::/home/bob",
    "dave:{PLAIN}s3cret:1004:1004::/home/dave::allow_nets=192.0.2.7",
]) + "\n"


def auth_daemon(petreld, tmp_path, **auth):
    (tmp_path / "passwd").write_text(PASSWD)
    cfg = {"listen": [f"127.0.0.1:{free_port()}"],
           "passdb": {"driver": "passwd-file", "path": str(tmp_path / "passwd")}}
    cfg.update(auth)
    return petreld({"components": ["auth"], "auth": cfg})


def addr(d):
    return d.config["auth"]["listen"][0]


def timed(d, user, password, ip):
    with AuthConn(addr(d)) as c:
        t0 = time.monotonic()
        reply = c.verify(user, password, ip=ip)
        return reply, time.monotonic() - t0


def parallel(d, attempts):
    """Sends every (user, password, ip) on its own connection at once;
    returns the replies."""
    replies = [None] * len(attempts)
    go = threading.Event()

    def one(i, user, password, ip):
        with AuthConn(addr(d), timeout=30) as c:
            go.wait()
            replies[i] = c.verify(user, password, ip=ip)

    threads = [threading.Thread(target=one, args=(i, *a)) for i, a in enumerate(attempts)]
    for t in threads:
        t.start()
    go.set()
    for t in threads:
        t.join(60)
    assert all(r is not None for r in replies), replies
    return replies


def checked(reply):
    """A guess whose password was looked at: a plain FAIL (not temporary)."""
    return reply[0] == "FAIL" and "temp" not in reply


def limited(reply):
    return reply[0] == "FAIL" and "temp" in reply and "too many failed logins" in "\t".join(reply)


def test_correct_login_after_failures_is_answered_at_once(petreld, tmp_path):
    # Seven failures put the address at the 1 s cap of the penalty; the
    # owner's correct password from that address (the monitor's probe, a
    # NATed office) must not wait for it.
    d = auth_daemon(petreld, tmp_path, failure_delay="200ms", failure_delay_max="1s")
    ip = "198.51.100.7"
    replies = parallel(d, [("alice", "wrong", ip)] * 7)
    assert all(checked(r) for r in replies), replies
    reply, took = timed(d, "alice", "wonderland", ip)
    assert reply[0] == "OK" and took < 0.5, (reply, took)
    # the next failure from there does carry the penalty
    reply, took = timed(d, "alice", "wrong", ip)
    assert checked(reply) and took >= 1.0, (reply, took)


def test_trusted_network_waits_for_nothing(petreld, tmp_path):
    d = auth_daemon(petreld, tmp_path, failure_delay="300ms", failure_delay_max="1s",
                    trusted_networks=["198.51.100.0/24"])
    for _ in range(7):
        reply, took = timed(d, "bob", "wrong", "198.51.100.7")
        assert checked(reply) and took < 0.2, (reply, took)
    reply, took = timed(d, "bob", "builder", "198.51.100.7")
    assert reply[0] == "OK" and took < 0.2, (reply, took)
    # an address outside the trusted network still gets the failure delay
    reply, took = timed(d, "bob", "wrong", "203.0.113.9")
    assert checked(reply) and took >= 0.3, (reply, took)


def test_parallel_guesses_from_one_address_are_limited(petreld, tmp_path):
    # 60 connections with two guesses each from one address, all at once:
    # only auth.max_failures_per_ip (default 20) of them are checked, across
    # connections; the rest are refused as temporary failures unchecked.
    d = auth_daemon(petreld, tmp_path, failure_delay="10ms", failure_delay_max="50ms")
    ip = "198.51.100.50"
    attempts = [(f"guess{i % 30}", f"pw{i}", ip) for i in range(120)]
    t0 = time.monotonic()
    replies = parallel(d, attempts[:60]) + parallel(d, attempts[60:])
    took = time.monotonic() - t0
    n_checked = sum(checked(r) for r in replies)
    n_limited = sum(limited(r) for r in replies)
    assert n_checked <= 20 and n_checked + n_limited == 120, (n_checked, n_limited, took)
    assert n_checked >= 15, n_checked  # the limit, not something else, refused them
    # the address stays refused, even with the right password, until its
    # count decays; another address is not affected
    assert limited(timed(d, "alice", "wonderland", ip)[0])
    assert timed(d, "alice", "wonderland", "198.51.100.51")[0][0] == "OK"
    assert "too many failed logins" in d.stderr()


def test_parallel_good_logins_from_one_address_all_succeed(petreld, tmp_path):
    # A webmail host or a login proxy logs many users in at once from one
    # address: attempts beyond the limit wait for the ones being checked
    # instead of failing, so none of these gets a temporary failure.
    d = auth_daemon(petreld, tmp_path, failure_delay="10ms", failure_delay_max="50ms")
    ip = "198.51.100.60"
    replies = parallel(d, [("alice", "wonderland", ip)] * 50 + [("bob", "builder", ip)] * 30)
    assert all(r[0] == "OK" for r in replies), [r for r in replies if r[0] != "OK"][:3]
    # guesses from there are still counted and limited afterwards
    replies = parallel(d, [("alice", f"guess{i}", ip) for i in range(40)])
    assert sum(checked(r) for r in replies) <= 20, replies


def test_parallel_guesses_for_one_user_are_limited(petreld, tmp_path):
    # the same for one account guessed from many addresses at once
    # (auth.max_failures_per_user, default 20)
    d = auth_daemon(petreld, tmp_path, failure_delay="10ms", failure_delay_max="50ms")
    replies = parallel(d, [("bob", f"pw{i}", f"198.51.100.{i + 1}") for i in range(60)])
    n_checked = sum(checked(r) for r in replies)
    n_limited = sum(limited(r) for r in replies)
    assert n_checked <= 20 and n_checked + n_limited == 60, (n_checked, n_limited)
    # other users are not affected
    assert timed(d, "alice", "wonderland", "198.51.100.1")[0][0] == "OK"


def test_ipv6_failures_count_per_48_and_mapped_ipv4_as_ipv4(petreld, tmp_path):
    # An IPv6 client holds at least a /64 (a site a /48): counting single
    # addresses would give it a fresh count per guess. Failures count per
    # /48, as Dovecot's auth penalty does; an IPv4 client seen through a
    # dual-stack socket (::ffff:a.b.c.d) is the IPv4 address. Loopback is
    # a trusted client by default, so ip= says where each guess is from.
    d = auth_daemon(petreld, tmp_path, failure_delay="10ms", failure_delay_max="50ms",
                    max_failures_per_ip=3)
    for i in range(3):
        assert checked(timed(d, "alice", "wrong", f"2001:db8:7:{i}::{i + 1}")[0])
    assert limited(timed(d, "bob", "builder", "2001:db8:7:ffff::99")[0])
    assert timed(d, "bob", "builder", "2001:db8:8::1")[0][0] == "OK"  # another /48
    for ip in ("198.51.100.7", "::ffff:198.51.100.7", "198.51.100.7"):
        assert checked(timed(d, "alice", "wrong", ip)[0])
    assert limited(timed(d, "bob", "builder", "::ffff:198.51.100.7")[0])
    assert limited(timed(d, "bob", "builder", "198.51.100.7")[0])


def test_user_failures_count_whatever_the_case(petreld, tmp_path):
    # A passdb that ignores case (an SQL collation) takes "Bob" and "BOB"
    # for bob: each spelling must not bring its own max_failures_per_user.
    d = auth_daemon(petreld, tmp_path, failure_delay="10ms", failure_delay_max="50ms",
                    max_failures_per_user=3)
    for i, name in enumerate(("Bob", "BOB", "bOb")):
        assert checked(timed(d, name, "wrong", f"198.51.100.{i + 1}")[0])
    assert limited(timed(d, "bob", "builder", "198.51.100.9")[0])


def test_ip_param_from_an_untrusted_peer_is_ignored(petreld, tmp_path):
    # Loopback is not in trusted_clients here: the service counts and
    # checks the peer's own address (127.0.0.1), whatever ip= says.
    d = auth_daemon(petreld, tmp_path, failure_delay="10ms", failure_delay_max="50ms",
                    trusted_clients=["10.0.0.0/8"], max_failures_per_ip=3)
    # dave may log in only from 192.0.2.7: claiming it does not help
    reply, _ = timed(d, "dave", "s3cret", "192.0.2.7")
    assert checked(reply), reply
    # failures "from" many made-up addresses all count against 127.0.0.1
    for i in range(2):
        assert checked(timed(d, "alice", "wrong", f"198.51.100.{i + 1}")[0])
    assert limited(timed(d, "bob", "builder", "198.51.100.99")[0])
    wait_for(lambda: "ignoring ip= from a peer not in auth.trusted_clients" in d.stderr(),
             what="the warning about the ignored ip=")


def test_ip_param_from_a_trusted_peer_is_believed(petreld, tmp_path):
    # by default loopback peers are trusted clients; a Unix-socket peer
    # always is
    sock = tmp_path / "auth.sock"
    d = auth_daemon(petreld, tmp_path, trusted_clients=[],
                    listen=[f"127.0.0.1:{free_port()}", f"unix:{sock}"])
    with AuthConn(f"unix:{sock}") as c:
        assert c.verify("dave", "s3cret", ip="192.0.2.7")[0] == "OK"
    assert checked(timed(d, "dave", "s3cret", "192.0.2.7")[0])  # TCP, not trusted
    d2 = auth_daemon(petreld, tmp_path)
    assert timed(d2, "dave", "s3cret", "192.0.2.7")[0][0] == "OK"


def test_user_counts_are_shared_through_the_warden(petreld, tmp_path):
    # two auth instances on one warden: failures for a user on one count on
    # the other, under the warden key "user:<name>"
    warden_addr = f"127.0.0.1:{free_port()}"
    petreld({"components": ["warden"], "warden_service": {"listen": [warden_addr]}})
    a1 = auth_daemon(petreld, tmp_path, failure_delay="10ms", failure_delay_max="50ms",
                     warden_addr=warden_addr, max_failures_per_user=3)
    a2 = auth_daemon(petreld, tmp_path, failure_delay="10ms", failure_delay_max="50ms",
                     warden_addr=warden_addr, max_failures_per_user=3)
    for i in range(3):
        assert checked(timed(a1, "bob", "wrong", f"198.51.100.{i + 1}")[0])
    with AuthConn(warden_addr) as w:
        def count():
            w.send("PENALTY-GET", "1", "user:bob")
            return w.read()
        wait_for(lambda: count() == ["PENALTY", "1", "3"], what="bob's three failures in the warden")
    assert limited(timed(a2, "bob", "builder", "198.51.100.9")[0])
    assert timed(a2, "alice", "wonderland", "198.51.100.9")[0][0] == "OK"


def test_parallel_guesses_through_the_warden_are_limited(petreld, tmp_path):
    # With a warden the counts are asked over the network, the user's after
    # the address's: failures counted in that round trip were missing from
    # the address's count, and 120 parallel guesses from one address got
    # 25-40 checked instead of max_failures_per_ip (20).
    warden_addr = f"127.0.0.1:{free_port()}"
    petreld({"components": ["warden"], "warden_service": {"listen": [warden_addr]}})
    d = auth_daemon(petreld, tmp_path, failure_delay="10ms", failure_delay_max="50ms",
                    warden_addr=warden_addr)
    # four addresses in turn (the race is a matter of timing: each is a
    # fresh chance to slip past)
    for k in range(4):
        ip = f"198.51.100.{80 + k}"
        replies = parallel(d, [(f"guess{i}", f"pw{i}", ip) for i in range(80)])
        n_checked = sum(checked(r) for r in replies)
        n_limited = sum(limited(r) for r in replies)
        assert n_checked <= 20 and n_checked + n_limited == 80, (ip, n_checked, n_limited)
        assert n_checked >= 15, (ip, n_checked)
    # a correct login from another address is not held back by them
    assert timed(d, "alice", "wonderland", "198.51.100.71")[0][0] == "OK"
