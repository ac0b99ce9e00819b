"""Helpers for the mail-storage end-to-end tests: a `mail:` configuration
for a given home root, a thin client for the storage endpoints of the
backend-plane API, and readers for the Maildir files (dovecot-uidlist,
dovecot-keywords, message file names) so tests can check the disk itself.

Only the standard library is used.
"""

import base64
import http.client
import json
import os
from pathlib import Path

# Maildir info letters <-> the names the API uses.
FLAG_LETTERS = {"D": "\\Draft", "F": "\\Flagged", "P": "$Forwarded", "R": "\\Answered",
                "S": "\\Seen", "T": "\\Deleted"}


def mail_config(home_root, fsync="always", separator="/"):
    """Overrides for the petreld factory: users' homes under `home_root`,
    one personal namespace at <home>/Maildir (what Dovecot's
    `mail_location = maildir:~/Maildir` uses too)."""
    return {
        "mail": {
            "home": f"{home_root}/%u",
            "fsync": fsync,
            "namespaces": [{
                "name": "inbox", "type": "personal", "prefix": "", "separator": separator,
                "location": "maildir:%h/Maildir", "subscriptions": True,
            }],
        },
    }


class ApiError(Exception):
    def __init__(self, status, body):
        super().__init__(f"HTTP {status}: {body[:300]!r}")
        self.status = status
        self.body = body


class MailApi:
    """The storage endpoints of one petreld's backend-plane API; one fresh
    connection per request (so an error never leaves doubt about which
    request a reply belongs to). Safe to share between threads."""

    def __init__(self, addr, user="u1", timeout=30):
        self.host, port = addr.rsplit(":", 1)
        self.port = int(port)
        self.user = user
        self.timeout = timeout

    def call(self, path, body, ok=(200,)):
        data = dict(body)
        data.setdefault("user", self.user)
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request("POST", "/api/backend/" + path, body=json.dumps(data),
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
        if resp.status not in ok:
            raise ApiError(resp.status, raw)
        return json.loads(raw) if raw else {}

    # folders
    def create(self, folder, **kw):
        return self.call("folder/create", {"folder": folder, **kw})

    def folders(self):
        return self.call("folder/list", {})["folders"]

    def info(self, folder):
        return self.call("folder/info", {"folder": folder})

    def stats(self, folder):
        return self.call("folder/stats", {"folder": folder})

    def expunge(self, folder, uids=None):
        body = {"folder": folder}
        if uids is not None:
            body["uids"] = list(uids)
        return self.call("folder/expunge", body)

    # messages
    def append(self, folder, message, flags=None, internal_date=None):
        body = {"folder": folder, "message": base64.b64encode(message).decode()}
        if flags:
            body["flags"] = list(flags)
        if internal_date is not None:
            body["internal_date"] = internal_date
        return self.call("mail/append", body)["uid"]

    # index
    def dump(self, folder):
        return self.call("index/dump", {"folder": folder})

    def rebuild(self, folder):
        return self.call("index/rebuild", {"folder": folder})

    # subscriptions
    def subscribe(self, folder):
        return self.call("subscriptions/add", {"folder": folder})

    def subscriptions(self):
        return self.call("subscriptions/list", {})["subscriptions"]


def folder_dir(maildir, folder, separator="/"):
    """Maildir++ directory of an ASCII folder name."""
    if folder.upper() == "INBOX":
        return Path(maildir)
    return Path(maildir) / ("." + folder.replace(separator, "."))


def read_keywords(folder_path):
    """dovecot-keywords: {index: name}."""
    out = {}
    try:
        text = (Path(folder_path) / "dovecot-keywords").read_text()
    except FileNotFoundError:
        return out
    for line in text.splitlines():
        idx, _, name = line.partition(" ")
        if idx.isdigit() and name:
            out[int(idx)] = name
    return out


def read_uidlist(folder_path):
    """dovecot-uidlist (version 3): (header dict, {uid: base})."""
    lines = (Path(folder_path) / "dovecot-uidlist").read_text().splitlines()
    fields = lines[0].split(" ")
    assert fields[0] == "3", f"uidlist version {fields[0]!r}"
    header = {}
    for f in fields[1:]:
        if f:
            header[f[0]] = f[1:]
    entries = {}
    for line in lines[1:]:
        if not line:
            continue
        head, _, base = line.partition(":")
        uid = int(head.split(" ")[0])
        assert uid not in entries, f"uid {uid} twice in dovecot-uidlist"
        entries[uid] = base
    return header, entries


def read_uidlist_live(folder_path):
    """dovecot-uidlist without the lines of expunged messages: Petrel, like
    Dovecot, leaves those in place until they make up about a quarter of the
    file (every reader ignores a line whose file is gone), so only the lines
    whose message file exists are compared with the index. Asserts that the
    stale lines stay within that bound."""
    header, entries = read_uidlist(folder_path)
    on_disk = message_files(folder_path)
    live = {uid: base for uid, base in entries.items() if base in on_disk}
    stale = len(entries) - len(live)
    assert stale <= len(live) // 4 + 32, f"{stale} stale dovecot-uidlist lines for {len(live)}"
    return header, live


def parse_filename(name):
    """(base, info letters) of a maildir file name."""
    base, sep, info = name.partition(":2,")
    return base, info if sep else ""


def flags_of_filename(name, keywords):
    """The API flag names a file name carries (keywords resolved through
    dovecot-keywords as {index: name})."""
    _, info = parse_filename(name)
    out = set()
    for ch in info:
        if ch in FLAG_LETTERS:
            out.add(FLAG_LETTERS[ch])
        elif "a" <= ch <= "z" and (ord(ch) - ord("a")) in keywords:
            out.add(keywords[ord(ch) - ord("a")])
    return out


def message_files(folder_path):
    """{base: (subdir, file name)} of every message file in cur/ and new/;
    raises if one base is present twice."""
    out = {}
    for sub in ("cur", "new"):
        d = Path(folder_path) / sub
        if not d.is_dir():
            continue
        for name in os.listdir(d):
            if name.startswith("."):
                continue
            base, _ = parse_filename(name)
            assert base not in out, f"message {base} on disk twice: {out[base]} and {sub}/{name}"
            out[base] = (sub, name)
    return out


def tmp_files(folder_path):
    d = Path(folder_path) / "tmp"
    return sorted(os.listdir(d)) if d.is_dir() else []
