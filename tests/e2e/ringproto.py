"""A minimal client of the director's ring protocol (docs/ring-protocol.md)
for end-to-end tests: TAB-separated fields, backslash escaping, LF ends;
plus the director's hashing rule computed with hashlib (independently of
the C code), so tests can check where users must go."""

import bisect
import hashlib
import hmac
import ipaddress
import os
import socket
import time

# The ring secret the e2e directors are started with (DIRECTOR_RING_SECRET)
# and RingClient proves by default.
SECRET = "e2e-ring-secret-3f9c2a71d04b"

_ESC = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}
_UNESC = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}


def escape(field):
    return "".join(_ESC.get(c, c) for c in field)


def unescape(field):
    out, i = [], 0
    while i < len(field):
        c = field[i]
        if c == "\\" and i + 1 < len(field):
            out.append(_UNESC[field[i + 1]])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def encode(*fields):
    return ("\t".join(escape(str(f)) for f in fields) + "\n").encode("utf-8", "surrogateescape")


# ---------- the hashing rule (DECISIONS.md), independent of the C code ----------

def _md5_prefix(data):
    return int.from_bytes(hashlib.md5(data).digest()[:4], "big")


def user_hash(user):
    if isinstance(user, str):
        user = user.encode()
    return _md5_prefix(user.lower()) or 1


def route(backends, user, tag=""):
    """backends: iterable of dicts {ip, port, tag, vhosts, up}; returns the ip."""
    ring = []
    for b in backends:
        if not b.get("up", True) or b.get("tag", "") != tag:
            continue
        a = ipaddress.ip_address(b["ip"])
        for i in range(b["vhosts"]):
            ring.append((_md5_prefix(f"{b['ip']}-{i}".encode()), a.version, a.packed,
                         b["port"], b["ip"]))
    if not ring:
        return None
    ring.sort()
    i = bisect.bisect_left([p[0] for p in ring], user_hash(user))
    return ring[i % len(ring)][4]


# ---------- authentication (docs/ring-protocol.md#authentication) ----------

def auth_proof(secret, role, server_nonce, client_nonce):
    """HMAC-SHA256 proof computed here with hmac/hashlib, not by Petrel."""
    if isinstance(secret, str):
        secret = secret.encode()
    msg = (b"petrel-ring-auth\0" + role.encode() + b"\0" + server_nonce.encode() + b"\0"
           + client_nonce.encode())
    return hmac.new(secret, msg, hashlib.sha256).hexdigest()


def params(fields):
    """The key=value parameters of a line's fields."""
    return dict(f.split("=", 1) for f in fields if "=" in f)


def answer_challenge(version_fields, secret=SECRET, client_nonce=None):
    """VERSION and AUTH (bytes) answering a director's VERSION line."""
    server_nonce = params(version_fields[4:])["nonce"]
    client_nonce = client_nonce or os.urandom(32).hex()
    return (encode("VERSION", "petrel-ring", 1, 1)
            + encode("AUTH", "hmac-sha256", client_nonce,
                     auth_proof(secret, "client", server_nonce, client_nonce)))


# ---------- the client ----------

class RingClient:
    """One connection. `hello=False` stops after the director's VERSION (kept
    in self.version); `secret=None` says HELLO without authenticating; `source`
    is the local address to connect from."""

    def __init__(self, addr, kind="login", name="pytest", timeout=10, hello=True,
                 secret=SECRET, source=None):
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout,
                                             source_address=(source, 0) if source else None)
        self.buf = b""
        self.hosts = []
        self.users = []  # USER lines (a `director` client's handshake)
        self.skipped = []  # pushes read while waiting for a reply
        self.secret = secret
        self.version = None
        if hello:
            self.handshake(kind, name)

    def read_version(self):
        if self.version is None:
            self.version = self.recv()
            assert self.version[:2] == ["VERSION", "petrel-ring"], self.version
        return self.version

    def authenticate(self, secret=None, client_nonce=None, minor=1):
        """VERSION and AUTH; checks the director's AUTH-OK proof and returns
        the AUTH-OK line (or whatever came instead, e.g. ERROR)."""
        secret = self.secret if secret is None else secret
        challenge = params(self.read_version()[4:])
        assert challenge.get("auth") == "hmac-sha256", self.version
        server_nonce = challenge["nonce"]
        self.send("VERSION", "petrel-ring", 1, minor)
        client_nonce = client_nonce or os.urandom(32).hex()
        self.send("AUTH", "hmac-sha256", client_nonce,
                  auth_proof(secret, "client", server_nonce, client_nonce))
        line = self.recv()
        if line[0] == "AUTH-OK":
            assert line[1] == auth_proof(secret, "server", server_nonce, client_nonce), \
                "the director's proof does not match"
        return line

    def handshake(self, kind, name):
        if self.secret is not None:
            ok = self.authenticate()
            assert ok[0] == "AUTH-OK", ok
        else:
            self.read_version()
            self.send("VERSION", "petrel-ring", 1, 1)
        self.send("HELLO", kind, name)
        while True:
            line = self.recv()
            if line[0] == "DONE":
                return
            assert line[0] in ("HOST", "USER"), line
            (self.hosts if line[0] == "HOST" else self.users).append(line)

    def send(self, *fields):
        self.sock.sendall(encode(*fields))

    def send_raw(self, data):
        self.sock.sendall(data)

    def recv(self, timeout=None):
        """The next line's fields; raises ConnectionError at EOF."""
        if timeout is not None:
            self.sock.settimeout(timeout)
        while b"\n" not in self.buf:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("ring connection closed")
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return [unescape(f) for f in line.decode("utf-8", "surrogateescape").split("\t")]

    def recv_until(self, verb, timeout=5):
        """Skips lines until one with `verb` (returns it); looks at the pushes
        lookup() set aside first."""
        for i, line in enumerate(self.skipped):
            if line[0] == verb:
                del self.skipped[:i + 1]
                return line
        self.skipped.clear()
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {verb} line within {timeout}s")
            line = self.recv(timeout=left)
            if line[0] == verb:
                return line

    def closed(self, timeout=5):
        """True when the director closes the connection (after any lines)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
                self.buf += data
        except (socket.timeout, TimeoutError):
            return False
        except ConnectionResetError:
            return True

    def lookup(self, req_id, user, tag=None):
        """The reply to this LOOKUP; pushes arriving before it are set aside."""
        if tag is None:
            self.send("LOOKUP", req_id, user)
        else:
            self.send("LOOKUP", req_id, user, f"tag={tag}")
        while True:
            line = self.recv()
            if line[0] in ("LOOKUP-OK", "LOOKUP-FAIL") and line[1] == str(req_id):
                return line
            self.skipped.append(line)

    def close(self):
        self.sock.close()
