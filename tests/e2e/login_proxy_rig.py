"""One login proxy in front of scripted IMAP backends, for the tests that
choose exactly what a backend does (test_login_proxy_faults.py,
test_login_proxy_relay.py):

    ScriptedBackend  a listener on its own loopback address that accepts in
                     a thread of its own and serves each connection in
                     another, by the subclass's connection() and serve()
    ProxyRig         the proxy's auth service (passwd-file), a director
                     naming the backends, and the proxy petreld [login]:
                     each a real petreld process of its own

A subclass of ProxyRig starts its backends, then calls ProxyRig.__init__;
its stop() stops the daemons through ProxyRig.stop() (which returns what
went wrong at their exits), then closes its backends."""

import socket
import threading

import pytest

from conftest import Daemon, default_config, free_port, http_request, merge
from ringproto import SECRET


class ScriptedBackend:
    """Set what serve() needs, then call this __init__: the accept thread
    starts at once. `conns` holds what connection() made of each accepted
    socket, in order."""

    def __init__(self, ip, backlog):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((ip, 0))
        self.sock.listen(backlog)
        self.ip, self.port = ip, self.sock.getsockname()[1]
        self.lock = threading.Lock()
        self.conns = []
        self._socks = []  # the accepted sockets, for drop_connections()
        self.stopping = False
        threading.Thread(target=self._accept, daemon=True).start()

    def connection(self, sock):
        """The record kept in `conns` for an accepted socket, and handed to serve()."""
        raise NotImplementedError

    def serve(self, conn):
        raise NotImplementedError

    def connections(self):
        with self.lock:
            return list(self.conns)

    def _accept(self):
        self.sock.settimeout(0.1)
        while not self.stopping:
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            conn = self.connection(c)
            with self.lock:
                self._socks.append(c)
                self.conns.append(conn)
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def drop_connections(self):
        """Closes every accepted socket and forgets them."""
        with self.lock:
            for c in self._socks:
                try:
                    c.close()
                except OSError:
                    pass
            self._socks, self.conns = [], []

    def close(self):
        self.stopping = True
        self.drop_connections()
        self.sock.close()


class ProxyRig:
    """`passwd`: the auth service's passwd-file; `backends`: the director's
    backends (dicts of ip, port and maybe tag); `proxy`: the proxy's
    configuration beyond its component, its directors, the ring secret and
    login.imap.auth_addr (merged over those); `env`: added to every
    daemon's environment."""

    def __init__(self, base, passwd, backends, proxy, env=None):
        base.mkdir(parents=True, exist_ok=True)
        (base / "passwd").write_text(passwd)
        (base / "ring.secret").write_text(SECRET + "\n")
        base.joinpath("ring.secret").chmod(0o600)
        self.env = env
        self.daemons = []
        auth = free_port()
        self.authd = self._daemon(base, "auth", {
            "components": ["auth"],
            "auth": {"listen": [f"127.0.0.1:{auth}"], "failure_delay": "0s",
                     "passdb": {"driver": "passwd-file", "path": str(base / "passwd")}},
        })
        self.hub = self._daemon(base, "director", {
            "components": ["director"],
            "director": {
                "api": {"listen": f"127.0.0.1:{free_port()}"},
                "ring": {"listen": f"127.0.0.1:{free_port()}",
                         "secret_file": str(base / "ring.secret")},
                "backends": backends,
            },
        })
        self.proxy = self._daemon(base, "proxy", merge({
            "components": ["login"],
            "login": {
                "directors": [self.hub.config["director"]["ring"]["listen"]],
                "ring_secret_file": str(base / "ring.secret"),
                "imap": {"auth_addr": f"127.0.0.1:{auth}"},
            },
        }, proxy))

    def _daemon(self, base, name, cfg):
        d = Daemon(base, merge(default_config(), cfg), name=name, env=self.env)
        d.start()
        self.daemons.append(d)
        return d

    def addr(self, tls=False):
        """The proxy's first IMAP listener (`tls`: its implicit-TLS one)."""
        host, port = self.proxy.config["login"]["imap"]["listen_tls" if tls else "listen"][0] \
            .rsplit(":", 1)
        return host, int(port)

    def director(self, method, path, body=None):
        return http_request(self.hub.config["director"]["api"]["listen"], method, path,
                            body=body)

    def stop(self):
        """Stops the daemons, the proxy first; returns what went wrong at their exits."""
        problems = []
        for d in reversed(self.daemons):
            try:
                d.stop()
            except AssertionError as e:
                problems.append(str(e))
        return problems


def hand_out(rig, passwords=()):
    """The body of a module fixture (`yield from hand_out(...)`): yields
    `rig`, then stops it and fails on any of `passwords` in a daemon's log
    or on what went wrong at a daemon's exit."""
    yield rig
    problems = rig.stop()
    for pw in passwords:
        assert pw not in "".join(d.stderr() for d in rig.daemons), "a password in a log"
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)
