"""A minimal client of Petrel's auth line protocol (docs/auth-protocol.md)
for end-to-end tests: TAB-separated fields, backslash escaping, LF ends."""

import base64
import socket

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
    return ("\t".join(escape(f) for f in fields) + "\n").encode("utf-8", "surrogateescape")


def b64(data):
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode()


class AuthConn:
    def __init__(self, addr, timeout=10):
        if addr.startswith("unix:"):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(addr[5:])
        else:
            host, port = addr.rsplit(":", 1)
            self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.f = self.sock.makefile("rb")
        self.next_id = 1

    def close(self):
        self.f.close()
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, *fields):
        self.sock.sendall(encode(*fields))

    def send_raw(self, data):
        self.sock.sendall(data)

    def read(self):
        """One reply as a list of unescaped fields; None at EOF."""
        line = self.f.readline()
        if not line:
            return None
        assert line.endswith(b"\n"), line
        text = line[:-1].decode("utf-8", "surrogateescape")
        return [unescape(f) for f in text.split("\t")]

    def new_id(self):
        i = str(self.next_id)
        self.next_id += 1
        return i

    def request(self, verb, *args):
        rid = self.new_id()
        self.send(verb, rid, *args)
        reply = self.read()
        assert reply is not None, "connection closed"
        assert reply[1] == rid, reply
        return reply

    def verify(self, user, password, ip=None, service="imap"):
        extra = [f"service={service}"] + ([f"ip={ip}"] if ip else [])
        return self.request("VERIFY", user, password, *extra)

    def user(self, user):
        return self.request("USER", user)

    def iterate(self):
        rid = self.new_id()
        self.send("ITERATE", rid)
        users = []
        while True:
            reply = self.read()
            assert reply is not None and reply[1] == rid, reply
            if reply[0] == "ITEM":
                users.append(reply[2])
            elif reply[0] == "DONE":
                return users
            else:
                raise AssertionError(reply)


def params(reply, first=3):
    """key=value fields of a reply as a dict of lists."""
    out = {}
    for f in reply[first:]:
        k, _, v = f.partition("=")
        out.setdefault(k, []).append(v)
    return out
