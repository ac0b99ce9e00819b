"""Scripted servers for the health monitor's end-to-end tests (test_monitor.py).

- FakeBackend: a tiny IMAP, POP3 or LMTP server on one loopback address that
  can be switched between behaviours at run time: "ok", "refuse" (the port is
  closed), "hang" (accepts and never speaks), "bad_greeting", "reject" (NO on
  LOGIN, -ERR on PASS, 550 to LHLO), "long_line" (a greeting longer than any
  limit). It counts connections per behaviour and records the logins it saw,
  so a test can check exactly how many probes the monitor made. It can speak
  implicit TLS.
- FakeDirector: the director's ring port speaking the grammar of
  docs/ring-protocol.md: VERSION with the authentication challenge, AUTH /
  AUTH-OK (HMAC-SHA256 computed here with hmac/hashlib), the HOST handshake,
  RING-CHANGE pushes, and the director's reaction to BACKEND-FLUSH/BACKEND-UP
  (a RING-CHANGE echo). It records every line the monitor sends.

Only the standard library; every server runs in daemon threads and binds
loopback addresses only.
"""

import os
import socket
import ssl
import threading
import time

from ringproto import SECRET, auth_proof


def _escape(field):
    return (field.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
            .replace("\r", "\\r"))


def _unescape(field):
    out, i = [], 0
    while i < len(field):
        c = field[i]
        if c == "\\" and i + 1 < len(field):
            out.append({"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}[field[i + 1]])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def ring_line(*fields):
    return ("\t".join(_escape(str(f)) for f in fields) + "\n").encode()


class FakeBackend:
    """One protocol server on (ip, port); `mode` may be changed at any time and
    applies to connections accepted afterwards."""

    def __init__(self, proto, ip="127.0.0.1", port=0, tls_context=None, mode="ok",
                 user=None, password=None):
        self.proto = proto
        self.ip = ip
        self.tls_context = tls_context
        self.user = user          # expected credentials (None: accept any)
        self.password = password
        self._mode = mode
        self.lock = threading.Lock()
        self.served = {}          # mode -> connections accepted in that mode
        self.log = []             # (monotonic time, mode) per accepted connection
        self.script = []          # modes for the next connections, consumed first
        self.logins = []          # (user, password) seen
        self.lines = []           # every command line received
        self.stop = False
        self.sock = None
        self.port = port
        self._conns = []
        self._bind()
        self.thread = threading.Thread(target=self._accept_loop, daemon=True)
        self.thread.start()

    # ----- control -----

    @property
    def mode(self):
        return self._mode

    def set_mode(self, mode):
        with self.lock:
            old = self._mode
            self._mode = mode
            if mode == "refuse" and self.sock is not None:
                self.sock.close()
                self.sock = None
            elif old == "refuse" and mode != "refuse":
                self._bind()

    def count(self, mode=None):
        with self.lock:
            if mode is None:
                return sum(self.served.values())
            return self.served.get(mode, 0)

    def then(self, *modes):
        """The next connections get these modes, one each, before `mode` again."""
        with self.lock:
            self.script.extend(modes)

    def accepted(self, mode=None, before=None, after=None):
        """Connections accepted (in `mode`) within (after, before)."""
        with self.lock:
            return sum(1 for t, m in self.log
                       if (mode is None or m == mode) and (before is None or t < before)
                       and (after is None or t > after))

    def times(self, mode=None):
        with self.lock:
            return [t for t, m in self.log if mode is None or m == mode]

    def close(self):
        self.stop = True
        with self.lock:
            if self.sock is not None:
                self.sock.close()
                self.sock = None
        self.thread.join(timeout=5)
        for c in list(self._conns):
            try:
                c.close()
            except OSError:
                pass

    # ----- server -----

    def _bind(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((self.ip, self.port))
        s.listen(64)
        s.settimeout(0.05)
        self.port = s.getsockname()[1]
        self.sock = s

    def _accept_loop(self):
        while not self.stop:
            with self.lock:
                s = self.sock
            if s is None:
                time.sleep(0.02)
                continue
            try:
                c, _ = s.accept()
            except (socket.timeout, OSError):
                continue
            with self.lock:
                mode = self.script.pop(0) if self.script else self._mode
                self.served[mode] = self.served.get(mode, 0) + 1
                self.log.append((time.monotonic(), mode))
            self._conns.append(c)
            threading.Thread(target=self._serve, args=(c, mode), daemon=True).start()

    def _serve(self, conn, mode):
        conn.settimeout(10)
        try:
            if self.tls_context is not None:
                conn = self.tls_context.wrap_socket(conn, server_side=True)
                self._conns.append(conn)
            f = conn.makefile("rwb", buffering=0)
            if mode == "hang":
                time.sleep(30)
                return
            getattr(self, "_" + self.proto)(f, mode)
        except (OSError, ssl.SSLError, ValueError):
            pass
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def _readline(self, f):
        line = f.readline(65536)
        if not line:
            raise EOFError
        text = line.decode("utf-8", "replace").rstrip("\r\n")
        with self.lock:
            self.lines.append(text)
        return text

    def _check(self, user, password):
        with self.lock:
            self.logins.append((user, password))
        if self.user is None:
            return True
        return user == self.user and password == self.password

    def _imap(self, f, mode):
        if mode == "bad_greeting":
            f.write(b"* BYE server too busy\r\n")
            return
        if mode == "long_line":
            f.write(b"* OK " + b"x" * 200000 + b"\r\n")
            return
        f.write(b"* OK [CAPABILITY IMAP4rev1] fake ready\r\n")
        try:
            while True:
                line = self._readline(f)
                tag, _, rest = line.partition(" ")
                cmd, _, args = rest.partition(" ")
                cmd = cmd.upper()
                if cmd == "LOGIN":
                    user, password = _imap_args(args)
                    if mode == "reject" or not self._check(user, password):
                        f.write(tag.encode() + b" NO [AUTHENTICATIONFAILED] Authentication failed.\r\n")
                    else:
                        f.write(b"* CAPABILITY IMAP4rev1 IDLE\r\n")
                        f.write(tag.encode() + b" OK Logged in\r\n")
                elif cmd == "LOGOUT":
                    f.write(b"* BYE Logging out\r\n" + tag.encode() + b" OK Logout completed.\r\n")
                    return
                else:
                    f.write(tag.encode() + b" BAD unknown command\r\n")
        except EOFError:
            return

    def _pop3(self, f, mode):
        if mode == "bad_greeting":
            f.write(b"-ERR too busy\r\n")
            return
        if mode == "long_line":
            f.write(b"+OK " + b"x" * 200000 + b"\r\n")
            return
        f.write(b"+OK fake POP3 ready\r\n")
        user = None
        try:
            while True:
                line = self._readline(f)
                cmd, _, arg = line.partition(" ")
                cmd = cmd.upper()
                if cmd == "USER":
                    user = arg
                    f.write(b"+OK\r\n")
                elif cmd == "PASS":
                    if mode == "reject" or not self._check(user, arg):
                        f.write(b"-ERR [AUTH] Authentication failed.\r\n")
                    else:
                        f.write(b"+OK Logged in.\r\n")
                elif cmd == "QUIT":
                    f.write(b"+OK Logging out.\r\n")
                    return
                else:
                    f.write(b"-ERR unknown command\r\n")
        except EOFError:
            return

    def _lmtp(self, f, mode):
        if mode == "bad_greeting":
            f.write(b"421 4.3.2 shutting down\r\n")
            return
        if mode == "long_line":
            f.write(b"220 " + b"x" * 200000 + b"\r\n")
            return
        f.write(b"220-fake LMTP\r\n220 ready\r\n")
        try:
            while True:
                line = self._readline(f)
                cmd = line.split(" ", 1)[0].upper()
                if cmd == "LHLO":
                    if mode == "reject":
                        f.write(b"550 5.7.1 go away\r\n")
                    else:
                        f.write(b"250-fake\r\n250-PIPELINING\r\n250 8BITMIME\r\n")
                elif cmd == "QUIT":
                    f.write(b"221 2.0.0 bye\r\n")
                    return
                else:
                    f.write(b"500 5.5.1 unknown\r\n")
        except EOFError:
            return


def _imap_args(text):
    """Two IMAP astrings (quoted with \\-escapes, or atoms)."""
    out, i = [], 0
    while i < len(text) and len(out) < 2:
        if text[i] == " ":
            i += 1
            continue
        if text[i] == '"':
            i += 1
            s = []
            while i < len(text) and text[i] != '"':
                if text[i] == "\\" and i + 1 < len(text):
                    i += 1
                s.append(text[i])
                i += 1
            i += 1
            out.append("".join(s))
        else:
            j = text.find(" ", i)
            j = len(text) if j < 0 else j
            out.append(text[i:j])
            i = j
    while len(out) < 2:
        out.append("")
    return out[0], out[1]


class FakeDirector:
    """The director's ring port. `backends` maps ip -> dict(port, tag, vhosts,
    state). Each monitor connection gets the HOST handshake; BACKEND-FLUSH and
    BACKEND-UP change the state and are echoed to every connection as
    RING-CHANGE, as the real director does. With a `secret` (the default) its
    VERSION carries a challenge and a monitor must answer with AUTH before
    HELLO; `secret=None` is an old (1.0) director without authentication;
    `server_secret` makes it prove another secret than it checks (a director
    impostor that recorded a proof); `skip_auth_ok` checks AUTH but goes on
    to the handshake without proving anything (no AUTH-OK)."""

    def __init__(self, backends=None, answer_ping=True, react=True, version=None,
                 secret=SECRET, server_secret=None, skip_auth_ok=False):
        self.backends = {ip: dict(b) for ip, b in (backends or {}).items()}
        self.answer_ping = answer_ping
        self.react = react
        self.secret = secret
        self.server_secret = server_secret if server_secret is not None else secret
        self.skip_auth_ok = skip_auth_ok
        self.version = version or ("1\t1" if secret is not None else "1\t0")
        self.auth_failures = 0  # AUTH lines with a wrong proof, or HELLO without AUTH
        self.auth_wrong_proof = 0  # of those: AUTH lines whose proof is wrong
        self.auth_ok = 0
        self.lock = threading.Lock()
        self.received = []    # (time, fields) of every line after HELLO
        self.hellos = []      # HELLO fields per connection
        self.conns = []
        self.seq = 0
        self.stop = False
        self.port = 0
        self.sock = None
        self._bind()
        self.addr = "127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self._accept_loop, daemon=True)
        self.thread.start()

    # ----- what the monitor said -----

    def reports(self, verb=None):
        with self.lock:
            return [(t, f) for t, f in self.received
                    if f[0] in ("BACKEND-FLUSH", "BACKEND-UP") and (verb is None or f[0] == verb)]

    def connections(self):
        with self.lock:
            return len(self.hellos)

    # ----- director actions -----

    def _host_fields(self, ip, b):
        return [ip, b.get("port", 143), b.get("tag", ""), b.get("vhosts", 100),
                b.get("state", "up"), 0]

    def push(self, change, ip, **fields):
        """RING-CHANGE to every connection; updates the registry."""
        with self.lock:
            if change == "down":
                b = self.backends.pop(ip, {"port": 143, "tag": "", "vhosts": 100})
            else:
                b = self.backends.setdefault(ip, {"port": 143, "tag": "", "vhosts": 100})
                b.update(fields)
                b["state"] = change
            self.seq += 1
            line = ring_line("RING-CHANGE", change, ip, b.get("port", 143), b.get("tag", ""),
                             b.get("vhosts", 100), 0, self.addr, self.seq)
            conns = list(self.conns)
        for c in conns:
            try:
                c.sendall(line)
            except OSError:
                pass

    def send_raw(self, data):
        with self.lock:
            conns = list(self.conns)
        for c in conns:
            try:
                c.sendall(data)
            except OSError:
                pass

    def drop_connections(self):
        with self.lock:
            conns, self.conns = list(self.conns), []
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
                c.close()
            except OSError:
                pass

    def pause(self):
        """The director goes away: its port closes and so do the connections."""
        with self.lock:
            sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()
        self.drop_connections()

    def resume(self):
        """The director is back on the same port."""
        with self.lock:
            if self.sock is None:
                self._bind()

    def close(self):
        self.stop = True
        self.pause()
        self.thread.join(timeout=5)

    # ----- server -----

    def _bind(self):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(16)
        s.settimeout(0.05)
        self.port = s.getsockname()[1]
        self.sock = s

    def _accept_loop(self):
        while not self.stop:
            with self.lock:
                sock = self.sock
            if sock is None:
                time.sleep(0.02)
                continue
            try:
                c, _ = sock.accept()
            except (socket.timeout, OSError):
                continue
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, conn):
        conn.settimeout(None)
        f = conn.makefile("rb")
        try:
            nonce = os.urandom(32).hex()
            challenge = ("\tauth=hmac-sha256\tnonce=" + nonce) if self.secret is not None else ""
            conn.sendall(("VERSION\tpetrel-ring\t%s%s\n" % (self.version, challenge)).encode())
            version = f.readline()
            hello = f.readline()
            if self.secret is not None:
                auth = hello.decode().rstrip("\n").split("\t")
                ok = (len(auth) == 4 and auth[0] == "AUTH"
                      and auth[3] == auth_proof(self.secret, "client", nonce, auth[2]))
                if not ok:
                    with self.lock:
                        self.auth_failures += 1
                        self.auth_wrong_proof += auth[0] == "AUTH"
                    conn.sendall(ring_line("ERROR", "authentication failed"))
                    conn.close()
                    return
                with self.lock:
                    self.auth_ok += 1
                if not self.skip_auth_ok:
                    conn.sendall(ring_line("AUTH-OK", auth_proof(self.server_secret, "server",
                                                                 nonce, auth[2])))
                hello = f.readline()
            if not version.startswith(b"VERSION\tpetrel-ring\t1\t") or not hello.startswith(b"HELLO\t"):
                conn.sendall(ring_line("ERROR", "bad handshake"))
                conn.close()
                return
            fields = [_unescape(x) for x in hello.decode().rstrip("\n").split("\t")]
            with self.lock:
                self.hellos.append(fields)
                handshake = b"".join(ring_line("HOST", *self._host_fields(ip, b))
                                     for ip, b in sorted(self.backends.items()))
                self.conns.append(conn)
            conn.sendall(handshake + b"DONE\n")
            while not self.stop:
                line = f.readline()
                if not line:
                    break
                fields = [_unescape(x) for x in line.decode().rstrip("\n").split("\t")]
                with self.lock:
                    self.received.append((time.monotonic(), fields))
                self._react(conn, fields)
        except (OSError, ValueError):
            pass
        finally:
            with self.lock:
                if conn in self.conns:
                    self.conns.remove(conn)
            try:
                conn.close()
            except OSError:
                pass

    def _react(self, conn, fields):
        verb = fields[0]
        if verb == "PING":
            if self.answer_ping:
                conn.sendall(ring_line("PONG", *fields[1:]))
            return
        if verb not in ("BACKEND-FLUSH", "BACKEND-UP"):
            return
        ip = fields[1]
        with self.lock:
            b = self.backends.get(ip)
        if b is None:
            conn.sendall(ring_line("ERROR", "unknown backend: " + ip))
            return
        want = "flush" if verb == "BACKEND-FLUSH" else "up"
        if self.react and b.get("state", "up") != want:
            self.push(want, ip)
