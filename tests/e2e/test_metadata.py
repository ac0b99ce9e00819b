"""METADATA (RFC 5464): IMAP GETMETADATA/SETMETADATA on worker threads, the
backend-plane metadata endpoints and petrelctl, over the dict named by
mail.attribute_dict (file, SQLite, PostgreSQL, Redis).

The RFC's examples are replayed on a raw socket and compared line by line
with what the server sends; imaplib drives the live sessions that must see
the API's writes at their next command."""

import base64
import imaplib
import json
import socket

import pytest

from conftest import run_petrelctl, wait_for
from servers import pgsql_server, redis_server  # noqa: F401 (fixtures of the dict variants)
from test_dict_behaviour import variant_config
from test_imap_session import addr, imap_overrides, login

imaplib.Commands.setdefault("GETMETADATA", ("AUTH", "SELECTED"))
imaplib.Commands.setdefault("SETMETADATA", ("AUTH", "SELECTED"))

# RFC 5464 4.1's minimums: a server MUST accept 1024-byte values and 10
# entries per folder or server (the configuration refuses less)
MAX_VALUE = 1024
MAX_ENTRIES = 10


def b64(data):
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode()


def md_overrides(tmp_path, dict_cfg, **mail):
    cfg = imap_overrides(tmp_path)
    cfg["components"] = ["auth", "imap", "backend-api"]
    cfg["dicts"] = {"meta": dict_cfg}
    cfg["mail"].update({"attribute_dict": "meta", "metadata_max_value_bytes": MAX_VALUE,
                        "metadata_max_entries": MAX_ENTRIES})
    cfg["mail"].update(mail)
    return cfg


@pytest.fixture
def mdd(petreld, tmp_path):
    return petreld(md_overrides(tmp_path, {"driver": "file", "path": str(tmp_path / "meta.db")}))


class Raw:
    """A logged-in connection returning the exact lines of each command."""

    def __init__(self, d, user="alice", password="wonderland"):
        self.sock = socket.create_connection(addr(d), timeout=10)
        self.f = self.sock.makefile("rb")
        assert self.f.readline().startswith(b"* OK")
        self.sock.sendall(f"l LOGIN {user} {password}\r\n".encode())
        while not self.f.readline().startswith(b"l OK"):
            pass

    def send(self, data):
        self.sock.sendall(data)

    def read_until(self, tag):
        """Every byte up to and including the tagged line."""
        out = b""
        while True:
            line = self.f.readline()
            assert line.endswith(b"\r\n"), (out, line)
            out += line
            if line.startswith(tag.encode() + b" "):
                return out

    def cmd(self, tag, text):
        if isinstance(text, str):
            text = text.encode()
        self.send(tag.encode() + b" " + text + b"\r\n")
        return self.read_until(tag)

    def cmd_literal(self, tag, head, literal, tail=b")"):
        """head ends with "{n}": waits for the continuation, then sends."""
        self.send(tag.encode() + b" " + head + b"\r\n")
        cont = self.f.readline()
        assert cont.startswith(b"+ "), cont
        self.send(literal + tail + b"\r\n")
        return self.read_until(tag)

    def close(self):
        self.sock.close()


class Api:
    def __init__(self, d):
        self.d = d

    def post(self, op, body):
        return self.d.post("backend", f"/api/backend/metadata/{op}", body=body)

    def set(self, entry, value, folder="INBOX", user="alice", **kw):
        r = self.post("set", dict(user=user, folder=folder, entry=entry, value=b64(value), **kw))
        assert r.status == 200 and r.json() == {"status": "ok"}, r
        return r

    def get(self, entry, folder="INBOX", user="alice", **kw):
        r = self.post("get", dict(user=user, folder=folder, entry=entry, **kw))
        assert r.status == 200, r
        j = r.json()
        assert set(j) == {"entry", "found", "value"}, j
        return base64.b64decode(j["value"]) if j["found"] else None

    def list(self, scope, folder="INBOX", user="alice", **kw):
        r = self.post("list", dict(user=user, folder=folder, scope=scope, **kw))
        assert r.status == 200, r
        return {e["entry"]: base64.b64decode(e["value"]) for e in r.json()["entries"]}


# ---------- RFC 5464 byte for byte ----------

def test_capabilities_advertise_metadata(mdd):
    m = login(mdd)
    caps = m.capabilities
    assert "METADATA" in caps and "METADATA-SERVER" in caps, caps
    m.logout()


def test_rfc5464_getmetadata_examples(mdd):
    c = Raw(mdd)
    assert c.cmd("s1", 'SETMETADATA "" (/shared/comment "Shared comment")') == \
        b"s1 OK SETMETADATA complete\r\n"
    # 4.2: a server entry, one folder entry, several entries
    assert c.cmd("a", 'GETMETADATA "" /shared/comment') == (
        b'* METADATA "" (/shared/comment "Shared comment")\r\n'
        b"a OK GETMETADATA complete\r\n")
    assert c.cmd("s2", 'SETMETADATA INBOX (/private/comment "My own comment" '
                       '/shared/comment "Shared comment")').endswith(b"s2 OK SETMETADATA complete\r\n")
    assert c.cmd("a", 'GETMETADATA "INBOX" /private/comment') == (
        b'* METADATA "INBOX" (/private/comment "My own comment")\r\n'
        b"a OK GETMETADATA complete\r\n")
    assert c.cmd("a", 'GETMETADATA "INBOX" (/shared/comment /private/comment)') == (
        b'* METADATA "INBOX" (/shared/comment "Shared comment" /private/comment "My own comment")'
        b"\r\na OK GETMETADATA complete\r\n")
    # 4.2.1 MAXSIZE, as printed (options after the mailbox) and below as
    # erratum 2785 corrects it: the 2199-byte value (written by the operator straight
    # into the dict, past the IMAP limit) is left out and its size reported
    api = Api(mdd)
    guid = mdd.post("backend", "/api/backend/folder/guid",
                    body={"user": "alice", "folder": "INBOX"}).json()["guid"]
    r = mdd.post("backend", "/api/backend/dict/meta/set",
                 body={"key": f"shared/{guid}/comment", "value": b64("x" * 2199)})
    assert r.status == 200, r
    assert api.get("/shared/comment") == b"x" * 2199
    assert c.cmd("a", 'GETMETADATA "INBOX" (MAXSIZE 1024) (/shared/comment /private/comment)') == (
        b'* METADATA "INBOX" (/private/comment "My own comment")\r\n'
        b"a OK [METADATA LONGENTRIES 2199] GETMETADATA complete\r\n")
    # the options before the mailbox, as the ABNF has it
    assert c.cmd("a", 'GETMETADATA (MAXSIZE 1024) "INBOX" (/shared/comment /private/comment)') \
        .endswith(b"a OK [METADATA LONGENTRIES 2199] GETMETADATA complete\r\n")
    # nothing to send: no METADATA response at all
    assert c.cmd("a", 'GETMETADATA "INBOX" /private/nothing') == b"a OK GETMETADATA complete\r\n"
    c.close()


def test_rfc5464_section_4_3_and_4_4_examples(mdd):
    """The SETMETADATA of several pairs (4.3) and the METADATA responses with
    values (4.4.1, with erratum 3868's list of entries), byte for byte; the
    server answers with one METADATA response for all entries, the first
    of the two forms 4.4.1 shows."""
    c = Raw(mdd)
    assert c.cmd("a", 'SETMETADATA INBOX (/private/comment "My new comment" '
                      '/shared/comment "This one is for you!")') == b"a OK SETMETADATA complete\r\n"
    assert c.cmd("a", 'GETMETADATA "INBOX" (/private/comment /shared/comment)') == (
        b'* METADATA "INBOX" (/private/comment "My new comment" '
        b'/shared/comment "This one is for you!")\r\na OK GETMETADATA complete\r\n')
    assert c.cmd("a", 'SETMETADATA "" (/shared/comment "My comment")') == \
        b"a OK SETMETADATA complete\r\n"
    assert c.cmd("a", 'GETMETADATA "" /shared/comment') == (
        b'* METADATA "" (/shared/comment "My comment")\r\na OK GETMETADATA complete\r\n')
    assert c.cmd("a", 'SETMETADATA INBOX (/private/comment "My comment" '
                      '/shared/comment "Its sunny outside!")') == b"a OK SETMETADATA complete\r\n"
    assert c.cmd("a", 'GETMETADATA "INBOX" (/private/comment /shared/comment)') == (
        b'* METADATA "INBOX" (/private/comment "My comment" /shared/comment "Its sunny outside!")'
        b"\r\na OK GETMETADATA complete\r\n")
    c.close()


def test_rfc5464_depth(mdd):
    c = Raw(mdd)
    assert c.cmd("s", 'SETMETADATA INBOX (/private/filters/values/small "SMALLER 5000" '
                      '/private/filters/values/boss "FROM \\"boss@example.com\\"" '
                      '/private/filters/values/boss/deep "x" /private/filtersx "no")') == \
        b"s OK SETMETADATA complete\r\n"
    # 4.2.2's example as erratum 2786 corrects it, then as printed (options
    # after the mailbox). The RFC lists small before boss; the order of
    # entries is the server's (key order here)
    assert c.cmd("a", 'GETMETADATA (DEPTH 1) "INBOX" (/private/filters/values)') == (
        b'* METADATA "INBOX" (/private/filters/values/boss "FROM \\"boss@example.com\\"" '
        b'/private/filters/values/small "SMALLER 5000")\r\n'
        b"a OK GETMETADATA complete\r\n")
    assert c.cmd("a", 'GETMETADATA "INBOX" (DEPTH 1) (/private/filters/values)') == (
        b'* METADATA "INBOX" (/private/filters/values/boss "FROM \\"boss@example.com\\"" '
        b'/private/filters/values/small "SMALLER 5000")\r\n'
        b"a OK GETMETADATA complete\r\n")
    assert c.cmd("a", 'GETMETADATA "INBOX" (DEPTH infinity) /private/filters') == (
        b'* METADATA "INBOX" (/private/filters/values/boss "FROM \\"boss@example.com\\"" '
        b'/private/filters/values/boss/deep "x" /private/filters/values/small "SMALLER 5000")\r\n'
        b"a OK GETMETADATA complete\r\n")
    assert c.cmd("a", 'GETMETADATA "INBOX" (DEPTH 0) /private/filters/values') == \
        b"a OK GETMETADATA complete\r\n"
    # the bare scope with infinity: everything private, in key order
    out = c.cmd("a", 'GETMETADATA "INBOX" (DEPTH infinity) /private')
    assert b"/private/filtersx \"no\"" in out and out.count(b"/private/") == 4, out
    assert c.cmd("a", 'GETMETADATA "INBOX" (DEPTH 2) /private') == \
        b"a BAD Invalid DEPTH value\r\n"
    c.close()


def test_rfc5464_setmetadata_forms_and_codes(mdd, petreld, tmp_path):
    c = Raw(mdd)
    # 4.3: a synchronizing literal across two lines
    assert c.cmd_literal("a", b"SETMETADATA INBOX (/private/comment {33}",
                         b"My new comment across\r\ntwo lines.") == b"a OK SETMETADATA complete\r\n"
    assert c.cmd("g", 'GETMETADATA "INBOX" /private/comment') == (
        b'* METADATA "INBOX" (/private/comment {33}\r\nMy new comment across\r\ntwo lines.)\r\n'
        b"g OK GETMETADATA complete\r\n")
    # NIL deletes
    assert c.cmd("a", "SETMETADATA INBOX (/private/comment NIL)") == \
        b"a OK SETMETADATA complete\r\n"
    assert c.cmd("g", 'GETMETADATA "INBOX" /private/comment') == b"g OK GETMETADATA complete\r\n"
    # literal8 with NUL bytes, given back as literal8
    assert c.cmd_literal("a", b"SETMETADATA INBOX (/private/bin ~{5}", b"a\x00b\x00c") == \
        b"a OK SETMETADATA complete\r\n"
    assert c.cmd("g", 'GETMETADATA "INBOX" /private/bin') == (
        b'* METADATA "INBOX" (/private/bin ~{5}\r\na\x00b\x00c)\r\ng OK GETMETADATA complete\r\n')
    assert Api(mdd).get("/private/bin") == b"a\x00b\x00c"
    # non-synchronizing literal (LITERAL+)
    c.send(b"p SETMETADATA INBOX (/shared/plus {3+}\r\nabc)\r\n")
    assert c.read_until("p") == b"p OK SETMETADATA complete\r\n"
    # 4.3 MAXSIZE
    big = "y" * (MAX_VALUE + 1)
    assert c.cmd("a", f'SETMETADATA INBOX (/shared/comment "{big}")') == \
        f"a NO [METADATA MAXSIZE {MAX_VALUE}] Annotation too large\r\n".encode()
    # 4.3 TOOMANY: the folder holds at most MAX_ENTRIES; nothing of the
    # refused command is written
    c.cmd("c", "CREATE Full")
    pairs = " ".join(f'/private/e{i} "v"' for i in range(MAX_ENTRIES))
    assert c.cmd("a", f"SETMETADATA Full ({pairs})") == b"a OK SETMETADATA complete\r\n"
    assert c.cmd("a", 'SETMETADATA Full (/shared/one "more" /private/e0 NIL /shared/two "x")') == \
        b"a NO [METADATA TOOMANY] Too many annotations\r\n"
    assert Api(mdd).get("/shared/one", folder="Full") is None
    # replacing an entry or replacing one by another fits
    assert c.cmd("a", 'SETMETADATA Full (/private/e0 "new" /private/e1 NIL /shared/one "x")') == \
        b"a OK SETMETADATA complete\r\n"
    # bad names and grammar: BAD with the reason
    for text, reason in [
            ('SETMETADATA INBOX (/comment "x")', b"Entry name must begin with /private or /shared"),
            ('SETMETADATA INBOX (/shared//x "x")', b"Entry name can't contain consecutive '/'"),
            ('SETMETADATA INBOX (/shared/x/ "x")', b"Entry name can't end with '/'"),
            ('SETMETADATA INBOX (/shared/a* "x")', b"Entry name can't contain '*' or '%'"),
            ('SETMETADATA INBOX (/shared "x")',
             b"Entry name must name an entry below /private or /shared"),
            ('SETMETADATA INBOX (/shared/x)', b"Entry and value pairs expected"),
            ('GETMETADATA INBOX', b"GETMETADATA takes [options] mailbox entries"),
            # RFC 5464 errata 3868: several entries only as a list
            ('GETMETADATA INBOX /private/comment /shared/comment',
             b"GETMETADATA takes [options] mailbox entries"),
            # section 3.2: names with control characters or 8-bit bytes are BAD
            ('GETMETADATA INBOX "/shared/a\tb"', b"Entry name must be printable ASCII"),
            ('GETMETADATA (MAXSIZE -1) INBOX /shared/x', b"Invalid MAXSIZE value")]:
        assert c.cmd("b", text) == b"b BAD " + reason + b"\r\n", text
    # Dovecot's internal entries are not the client's
    assert c.cmd("n", 'SETMETADATA "" (/private/vendor/vendor.dovecot/pvt/x "y")') == \
        b"n NO [NOPERM] Permission denied.\r\n"
    assert c.cmd("x", 'GETMETADATA "Nope" /shared/comment') == \
        b"x NO [NONEXISTENT] Mailbox does not exist.\r\n"
    c.close()
    # NOPRIVATE: an operator who allows shared entries only
    (tmp_path / "np").mkdir()
    d2 = petreld(md_overrides(tmp_path / "np", {"driver": "file", "path": str(tmp_path / "np.db")},
                              metadata_private=False,
                              metadata_server_admin="mailto:postmaster@example.org"))
    c2 = Raw(d2)
    assert c2.cmd("a", 'SETMETADATA INBOX (/private/comment "x")') == \
        b"a NO [METADATA NOPRIVATE] Private annotations are not supported\r\n"
    assert c2.cmd("a", 'SETMETADATA INBOX (/shared/comment "x")') == \
        b"a OK SETMETADATA complete\r\n"
    # the server's /shared/admin from the configuration (Dovecot's
    # mail_server_admin): read-only, whatever the dict holds
    assert c2.cmd("a", 'GETMETADATA "" /shared/admin') == (
        b'* METADATA "" (/shared/admin "mailto:postmaster@example.org")\r\n'
        b"a OK GETMETADATA complete\r\n")
    assert c2.cmd("a", 'SETMETADATA "" (/shared/comment "hello" /shared/admin "x")') == \
        b"a NO [NOPERM] /shared/admin is set by the server's configuration.\r\n"
    assert c2.cmd("a", 'SETMETADATA "" (/shared/comment "hello")') == \
        b"a OK SETMETADATA complete\r\n"
    # DEPTH 0 of the bare scope names no entry: not even the configured one
    assert c2.cmd("a", 'GETMETADATA "" /shared') == b"a OK GETMETADATA complete\r\n"
    assert c2.cmd("a", 'GETMETADATA "" (DEPTH infinity) /shared') == (
        b'* METADATA "" (/shared/comment "hello" /shared/admin "mailto:postmaster@example.org")'
        b"\r\na OK GETMETADATA complete\r\n")
    # a folder's /shared/admin is an ordinary entry
    assert c2.cmd("a", 'SETMETADATA INBOX (/shared/admin "folder admin")') == \
        b"a OK SETMETADATA complete\r\n"
    api2 = Api(d2)
    assert api2.get("/shared/admin", folder="") == b"mailto:postmaster@example.org"
    assert api2.list("shared", folder="") == {"/shared/comment": b"hello",
                                              "/shared/admin": b"mailto:postmaster@example.org"}
    r = api2.post("set", {"user": "alice", "folder": "", "entry": "/shared/admin",
                          "value": b64("x")})
    assert r.status == 403, r
    c2.close()


# ---------- API and IMAP see each other; folder lifecycle; every dict ----------

def folder_guid(d, folder):
    r = d.post("backend", "/api/backend/folder/guid", body={"user": "alice", "folder": folder})
    assert r.status == 200, r
    return r.json()["guid"]


def dict_keys(d, guid, user="alice"):
    """Every key of the metadata dict under the folder GUID (both scopes)."""
    out = []
    for path, op in (("shared/", None), ("priv/", {"username": user})):
        body = {"path": f"{path}{guid}/", "flags": 1}
        if op:
            body["op"] = op
        r = d.post("backend", "/api/backend/dict/meta/iterate", body=body)
        assert r.status == 200, r
        out += [json.loads(line)["key"] for line in r.body.decode().splitlines()]
    return sorted(out)


@pytest.mark.parametrize("variant", ["file", "sql-sqlite", "sql-pgsql", "kvstore"])
def test_api_and_imap_share_entries(variant, petreld, tmp_path, request):
    d = petreld(md_overrides(tmp_path, variant_config(variant, request, tmp_path)))
    api = Api(d)
    m = login(d)  # a live session on a worker thread, kept open throughout
    m.create("Projects")

    def imap_get(folder, entry):
        typ, data = m._simple_command("GETMETADATA", folder, entry)
        assert typ == "OK", data
        typ, data = m._untagged_response(typ, data, "METADATA")
        return data

    # an admin write is seen by the session's next command
    api.set("/shared/comment", "from the operator", folder="Projects")
    assert imap_get("Projects", "/shared/comment") == \
        [b'"Projects" (/shared/comment "from the operator")']
    # and the session's write by the API at once
    assert m._simple_command("SETMETADATA", "Projects", '(/private/comment "mine")')[0] == "OK"
    assert api.get("/private/comment", folder="Projects") == b"mine"
    assert api.list("private", folder="Projects") == {"/private/comment": b"mine"}
    assert api.list("shared", folder="Projects") == {"/shared/comment": b"from the operator"}
    # DEPTH over the dict's iteration (asynchronous for PostgreSQL and Redis)
    assert m._simple_command("SETMETADATA", "Projects",
                             '(/private/a/b "1" /private/a/b/c "2" /private/a/d "3")')[0] == "OK"
    typ, data = m._simple_command("GETMETADATA", "(DEPTH 1)", "Projects", "/private/a")
    assert typ == "OK", data
    assert m._untagged_response(typ, data, "METADATA")[1] == \
        [b'"Projects" (/private/a/b "1" /private/a/d "3")']
    typ, data = m._simple_command("GETMETADATA", "(DEPTH infinity)", "Projects", "/private")
    assert m._untagged_response(typ, data, "METADATA")[1] == \
        [b'"Projects" (/private/a/b "1" /private/a/b/c "2" /private/a/d "3" '
         b'/private/comment "mine")']
    assert m._simple_command("SETMETADATA", "Projects",
                             '(/private/a/b NIL /private/a/b/c NIL /private/a/d NIL)')[0] == "OK"
    # an admin delete too
    r = api.post("delete", {"user": "alice", "folder": "Projects", "entry": "/shared/comment"})
    assert r.status == 200 and r.json() == {"status": "ok"}
    assert imap_get("Projects", "/shared/comment") == [None]
    # server entries (folder "")
    api.set("/shared/admin", "mailto:postmaster@example.com", folder="")
    assert imap_get('""', "/shared/admin") == \
        [b'"" (/shared/admin "mailto:postmaster@example.com")']
    # as_user: someone else's private entry on the same folder
    api.set("/private/comment", "bob's view", folder="Projects", as_user="bob")
    assert api.get("/private/comment", folder="Projects", as_user="bob") == b"bob's view"
    assert api.get("/private/comment", folder="Projects") == b"mine"
    # rename keeps the entries (keys follow the GUID) ...
    assert m.rename("Projects", "Archive")[0] == "OK"
    assert imap_get("Archive", "/private/comment") == [b'"Archive" (/private/comment "mine")']
    assert api.get("/private/comment", folder="Archive") == b"mine"
    # ... delete removes them from the dict (the dict work runs on the
    # session's loop after the reply: waited for, not slept on)
    guid = folder_guid(d, "Archive")
    assert dict_keys(d, guid) == [f"priv/{guid}/comment"]
    assert m.delete("Archive")[0] == "OK"
    wait_for(lambda: dict_keys(d, guid) == [], what="the deleted folder's keys gone")
    assert m.create("Archive")[0] == "OK"
    assert api.list("private", folder="Archive") == {}
    assert imap_get("Archive", "/private/comment") == [None]
    m.logout()


def test_delete_removes_keys_from_the_dict(mdd):
    api = Api(mdd)
    m = login(mdd)
    m.create("Tmp")
    guid = folder_guid(mdd, "Tmp")
    api.set("/shared/a", "1", folder="Tmp")
    api.set("/private/b/c", "2", folder="Tmp")
    assert dict_keys(mdd, guid) == [f"priv/{guid}/b/c", f"shared/{guid}/a"]
    # the operator API's folder delete as well as IMAP's
    r = mdd.post("backend", "/api/backend/folder/delete", body={"user": "alice", "folder": "Tmp"})
    assert r.status == 200, r
    assert dict_keys(mdd, guid) == []
    m.logout()


def test_api_validation(mdd):
    api = Api(mdd)
    cases = [
        ({"user": "alice", "folder": "INBOX", "entry": "/shared//x"}, "get", 400,
         "entry: Entry name can't contain consecutive '/'"),
        ({"user": "alice", "folder": "INBOX", "entry": "/x"}, "get", 400,
         "entry: Entry name must begin with /private or /shared"),
        ({"user": "alice", "folder": "INBOX", "entry": "/shared/%"}, "delete", 400,
         "entry: Entry name can't contain '*' or '%'"),
        ({"user": "alice", "folder": "INBOX", "entry": "/shared/" + "a" * 1100}, "get", 400,
         "entry: Entry name is too long"),
        ({"user": "alice", "folder": "INBOX", "scope": "public"}, "list", 400,
         "scope must be private or shared"),
        ({"user": "alice", "folder": "INBOX", "entry": "/shared/x", "value": "!!"}, "set", 400,
         "value: invalid base64"),
        ({"user": "alice", "folder": "INBOX", "entry": "/shared/x",
          "value": b64("z" * (MAX_VALUE + 1))}, "set", 400,
         f"value: {MAX_VALUE + 1} bytes is more than mail.metadata_max_value_bytes ({MAX_VALUE})"),
        ({"user": "alice", "folder": "Nope", "entry": "/shared/x"}, "get", 404,
         "folder not found: Nope"),
        ({"user": "alice", "folder": "INBOX", "namespace": "nope", "entry": "/shared/x"}, "get",
         404, "namespace not configured: nope"),
        ({"user": "alice", "folder": "INBOX", "entry": "/shared/x", "as_user": "a/b"}, "get",
         400, None),
    ]
    for body, op, status, message in cases:
        r = api.post(op, body)
        assert r.status == status, (body, r)
        if message is not None:
            assert r.json() == {"error": message}, (body, r.json())
    # TOOMANY through the API: 409
    for i in range(MAX_ENTRIES):
        api.set(f"/shared/n{i}", "v", folder="")
    r = api.post("set", {"user": "alice", "folder": "", "entry": "/shared/more", "value": b64("v")})
    assert r.status == 409 and "too many entries" in r.json()["error"], r


def test_petrelctl_metadata(mdd, tmp_path):
    env = {"PETREL_BACKEND_URL": f"http://{mdd.backend}"}

    def ctl(*args, input=None):
        import subprocess
        from conftest import PETRELCTL, base_env
        return subprocess.run([str(PETRELCTL), "backend", "metadata"] + list(args), input=input,
                              capture_output=True, env=base_env(env), timeout=30)

    r = ctl("set", "alice", "INBOX", "/shared/comment", "from an argument")
    assert r.returncode == 0, r
    assert ctl("get", "alice", "INBOX", "/shared/comment").stdout == b"from an argument"
    f = tmp_path / "value.bin"
    f.write_bytes(b"\x00\x01binary\xff")
    assert ctl("set", "alice", "INBOX", "/private/blob", "--file", str(f)).returncode == 0
    assert ctl("get", "alice", "INBOX", "/private/blob").stdout == b"\x00\x01binary\xff"
    assert ctl("set", "alice", "", "/shared/motd", "-", input=b"from stdin\n").returncode == 0
    assert ctl("get", "alice", "", "/shared/motd").stdout == b"from stdin\n"
    j = json.loads(run_petrelctl(["--backend-url", f"http://{mdd.backend}", "--json", "backend",
                                  "metadata", "get", "alice", "INBOX", "/private/blob"]).stdout)
    assert j == {"entry": "/private/blob", "found": True, "value": b64(b"\x00\x01binary\xff")}
    out = ctl("list", "alice", "INBOX", "--scope", "shared").stdout
    assert out == b"/shared/comment\tfrom an argument\n"
    assert ctl("delete", "alice", "INBOX", "/shared/comment").returncode == 0
    r = ctl("get", "alice", "INBOX", "/shared/comment")
    assert r.returncode == 1 and r.stdout == b""
    assert ctl("list", "alice", "INBOX").returncode == 2  # --scope is required


# ---------- configuration ----------

def test_config_checks_attribute_dict(tmp_path):
    from conftest import default_config, merge, run_petreld, to_yaml

    def check(mail, dicts):
        cfg = merge(default_config(), {"dicts": dicts, "mail": mail})
        path = tmp_path / "c.yaml"
        path.write_text(to_yaml(cfg) + "\n")
        return run_petreld(["-c", str(path), "--check-config"])

    ok = check({"attribute_dict": "meta", "metadata_max_entries": 50},
               {"meta": {"driver": "file", "path": str(tmp_path / "m.db")}})
    assert ok.returncode == 0, ok.stderr
    assert 'attribute_dict: "meta"' in ok.stdout and "metadata_max_entries: 50" in ok.stdout
    assert "metadata_max_value_bytes: 65536" in ok.stdout
    bad = check({"attribute_dict": "nope"}, {})
    assert bad.returncode != 0
    assert "mail.attribute_dict: no dict named 'nope' in dicts:" in bad.stderr, bad.stderr
    mem = check({"attribute_dict": "m"}, {"m": {"driver": "memory"}})
    assert mem.returncode != 0 and "is a memory dict" in mem.stderr, mem.stderr
    big = check({"metadata_max_value_bytes": 2 * 1024 * 1024}, {})
    assert big.returncode != 0 and "mail.metadata_max_value_bytes" in big.stderr, big.stderr
    # below RFC 5464 4.1's "MUST accept ... at least 1024 bytes ... at least 10"
    for key, value in (("metadata_max_value_bytes", 1023), ("metadata_max_entries", 9)):
        low = check({key: value}, {})
        assert low.returncode != 0 and f"mail.{key}" in low.stderr, (key, low.stderr)
    assert check({"metadata_max_value_bytes": 1024, "metadata_max_entries": 10}, {}).returncode == 0


def test_without_attribute_dict_no_metadata(petreld, tmp_path):
    cfg = imap_overrides(tmp_path)
    cfg["components"] = ["auth", "imap", "backend-api"]
    d = petreld(cfg)
    m = login(d)
    assert "METADATA" not in m.capabilities
    m.logout()
    r = d.post("backend", "/api/backend/metadata/get",
               body={"user": "alice", "folder": "INBOX", "entry": "/shared/comment"})
    assert r.status == 501 and r.json() == {"error": "METADATA is not configured"}, r


# ---------- back-pressure ----------

def vm_rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_pipelined_getmetadata_waits_for_a_slow_reader(mdd):
    """20,000 GETMETADATA of ~8 KB each (160 MB of answers) pipelined by a
    client that reads nothing: the session stops taking commands once its
    output is over the high-water mark, so petreld grows by far less than
    the answers would take (release build: ~0.4 MB; under ASan 13-20 MB of
    allocator quarantine and shadow, hence the 48 MB margin)."""
    import fcntl
    import termios
    api = Api(mdd)
    for i in range(MAX_ENTRIES):
        api.set(f"/shared/big{i}", "v" * MAX_VALUE)
    c = Raw(mdd)
    assert c.cmd("w", 'GETMETADATA "INBOX" (DEPTH 1) /shared').count(b"/shared/big") == MAX_ENTRIES
    before = vm_rss_kb(mdd.pid)
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    c.sock.settimeout(2)
    data = b"".join(b'p%d GETMETADATA "INBOX" (DEPTH 1) /shared\r\n' % i for i in range(20000))
    try:
        c.sock.sendall(data)
    except socket.timeout:
        pass  # petreld stopped reading: what it has is in its buffers

    def queued():
        n = bytearray(4)
        fcntl.ioctl(c.sock.fileno(), termios.FIONREAD, n)
        return int.from_bytes(n, "little")

    wait_for(lambda: queued() > 32 * 1024, what="answers waiting in the client's socket")
    grown = vm_rss_kb(mdd.pid) - before
    assert grown < 48 * 1024, f"petreld grew by {grown} kB for a client that does not read"
    c.close()
