"""The quota endpoints of the backend-plane API (document 3, reply shapes
from DECISIONS.md) and `petrelctl backend quota`, against a real petreld
with the auth service, LMTP and IMAP: quota/show and quota/recalc sum what
was really delivered (compared with the message files on disk), with the
user's quota_rule scaled by the site-wide percentage; recalc rebuilds the
folder aggregates from the records (a message file removed behind the
index's back shows up in recalc, not in show); clone/list and clone/get read
the mirror; every status code: 400 bad/missing fields and bad JSON, 404
unknown user / unknown clone backend, 405 wrong method, 401 without the
token, 403 outside the allow-list, 503 without the auth service."""

import base64
import imaplib
import json
import smtplib
from pathlib import Path

import pytest

from conftest import free_port, run_petrelctl, wait_for

TOKEN = "quota-api-token"
PASSWD = ("alice:{PLAIN}a:1001:1001::::userdb_quota_rule=*:storage=10M:messages=100\n"
          "bob:{PLAIN}b:1002:1002\n"
          "erin:{PLAIN}e:1005:1005::::userdb_quota_rule=*:storage=lots\n"
          "tina:{PLAIN}t:1006:1006::::userdb_quota_rule=*:storage=4K\n")


def message(n, size):
    head = (f"From: s@example.net\r\nTo: x@example.org\r\nSubject: m{n}\r\n"
            f"Message-ID: <qa{n}@example.net>\r\n\r\n").encode()
    return head + b"x" * (size - len(head) - 2) + b"\r\n"


def config(tmp_path, auth=True):
    passwd = tmp_path / "passwd"
    passwd.write_text(PASSWD)
    (tmp_path / "dict").mkdir(exist_ok=True)
    auth_port = free_port()
    cfg = {
        "components": ["auth", "lmtp", "imap", "backend-api"],
        "mail": {"home": str(tmp_path / "mail" / "%u"), "fsync": "never"},
        "auth": {"listen": [f"127.0.0.1:{auth_port}"],
                 "passdb": {"driver": "passwd-file", "path": str(passwd)}},
        "lmtp": {"listen": [f"127.0.0.1:{free_port()}"],
                 "auth_addr": f"127.0.0.1:{auth_port}", "username_format": "%n"},
        "imap": {"listen": [f"127.0.0.1:{free_port()}"], "auth_addr": f"127.0.0.1:{auth_port}"},
        "dicts": {"default": {"driver": "memory"},
                  "sq": {"driver": "sql", "backend": "sqlite",
                         "path": str(tmp_path / "dict" / "sq.db")},
                  "other": {"driver": "memory"}},
        "quota": {"enabled": True, "quota_storage_percentage": 50,
                  "quota_clone_dicts": ["default", "sq"], "quota_clone_flush_delay": "200ms"},
    }
    if auth:
        cfg["backend_api"] = {"auth_master_addr": f"127.0.0.1:{auth_port}"}
    return cfg


def deliver(d, rcpt, msg):
    host, port = d.config["lmtp"]["listen"][0].rsplit(":", 1)
    with smtplib.LMTP(host, int(port), timeout=30) as c:
        c.ehlo("client.test")
        assert c.mail("s@example.net")[0] == 250
        assert c.rcpt(rcpt)[0] == 250
        assert c.data(msg)[0] == 250


def on_disk(tmp_path, user):
    """(bytes, messages) of the user's message files."""
    root = Path(tmp_path) / "mail" / user / "Maildir"
    files = [f for sub in ("cur", "new") for f in (root / sub).iterdir()
             if not f.name.startswith(".")] if root.exists() else []
    return sum(f.stat().st_size for f in files), len(files)


@pytest.fixture
def api(petreld, tmp_path):
    d = petreld(config(tmp_path), env={"BACKEND_API_TOKEN": TOKEN})
    for i in range(3):
        deliver(d, "alice@example.org", message(i, 2000 + i * 100))
    return d


def get(d, path, token=TOKEN):
    return d.get("backend", path, token=token)


def post(d, path, body, token=TOKEN):
    return d.post("backend", path, body=body, token=token)


def error(r, status):
    assert r.status == status, (r.status, r.body)
    body = r.json()
    assert set(body) == {"error"} and body["error"], body
    return body["error"]


def test_show_sums_what_was_delivered(api, tmp_path):
    used, count = on_disk(tmp_path, "alice")
    assert count == 3
    r = get(api, "/api/backend/quota/show?user=alice")
    assert r.status == 200, r.body
    # 10M scaled by quota_storage_percentage 50; messages scaled by 100.
    assert r.json() == {"user": "alice",
                        "storage": {"used": used, "limit": 5 * 1024 * 1024},
                        "messages": {"used": 3, "limit": 100}}
    # user/usage is unchanged by the quota area.
    u = post(api, "/api/backend/user/usage", {"user": "alice"}).json()
    assert u["total_messages"] == 3 and u["total_size_bytes"] == used


def test_show_unlimited_user_and_empty_mailbox(api):
    r = get(api, "/api/backend/quota/show?user=bob")
    assert r.status == 200, r.body
    assert r.json() == {"user": "bob", "storage": {"used": 0, "limit": 0},
                        "messages": {"used": 0, "limit": 0}}


def test_recalc_rebuilds_from_the_records(api, tmp_path):
    # A message file removed behind the index's back: the aggregate still
    # counts it (show reads the aggregate), recalc syncs the folder and
    # rebuilds the aggregate from the records under the folder's lock.
    root = tmp_path / "mail" / "alice" / "Maildir"
    victim = sorted(f for sub in ("cur", "new") for f in (root / sub).iterdir())[0]
    before = get(api, "/api/backend/quota/show?user=alice").json()
    victim.unlink()
    used, count = on_disk(tmp_path, "alice")
    assert get(api, "/api/backend/quota/show?user=alice").json() == before
    r = post(api, "/api/backend/quota/recalc", {"user": "alice"})
    assert r.status == 200, r.body
    assert r.json() == {"user": "alice", "storage": {"used": used, "limit": 5 * 1024 * 1024},
                        "messages": {"used": count, "limit": 100}}
    assert count == 2
    assert get(api, "/api/backend/quota/show?user=alice").json() == r.json()


def test_status_codes(api):
    assert "user not found: nobody" in error(get(api, "/api/backend/quota/show?user=nobody"), 404)
    assert "user not found" in error(post(api, "/api/backend/quota/recalc", {"user": "nobody"}), 404)
    assert "user is required" in error(get(api, "/api/backend/quota/show"), 400)
    assert "user is required" in error(get(api, "/api/backend/quota/show?user="), 400)
    error(get(api, "/api/backend/quota/show?user=../etc"), 400)
    error(post(api, "/api/backend/quota/recalc", {}), 400)
    error(post(api, "/api/backend/quota/recalc", {"user": 7}), 400)
    error(api.post("backend", "/api/backend/quota/recalc", body=b"{not json",
                   token=TOKEN), 400)
    # A rule the userdb holds that does not parse: the server's problem.
    assert "quota_rule" in error(get(api, "/api/backend/quota/show?user=erin"), 500)
    error(post(api, "/api/backend/quota/show", {"user": "alice"}), 405)
    error(get(api, "/api/backend/quota/recalc?user=alice"), 405)
    for path in ("/api/backend/quota/show?user=alice", "/api/backend/quota/clone/list",
                 "/api/backend/quota/clone/get?backend=default&user=alice"):
        error(get(api, path, token=None), 401)
        error(get(api, path, token=TOKEN + "x"), 401)
    error(post(api, "/api/backend/quota/recalc", {"user": "alice"}, token=None), 401)


def test_clone_list_and_get(api):
    r = get(api, "/api/backend/quota/clone/list")
    assert r.status == 200 and r.json() == {"backends": ["default", "sq"]}
    # Nothing mirrored for bob: both values null.
    r = get(api, "/api/backend/quota/clone/get?backend=sq&user=bob")
    assert r.status == 200, r.body
    assert r.json() == {"backend": "sq", "user": "bob", "storage": None, "messages": None}
    # A message saved through the API itself (the main loop's storage handle) is mirrored too.
    r = post(api, "/api/backend/mail/append",
             {"user": "bob", "folder": "INBOX",
              "message": base64.b64encode(message(9, 1234)).decode()})
    assert r.status == 200, r.body
    wait_for(lambda: get(api, "/api/backend/quota/clone/get?backend=sq&user=bob").json()
             == {"backend": "sq", "user": "bob", "storage": 1234, "messages": 1},
             timeout=10, what="bob mirrored after mail/append")
    # alice got three deliveries: the mirror follows within the delay.
    show = get(api, "/api/backend/quota/show?user=alice").json()
    for backend in ("default", "sq"):
        def mirrored():
            r = get(api, f"/api/backend/quota/clone/get?backend={backend}&user=alice")
            return r.json() if r.status == 200 and r.json()["storage"] is not None else None
        got = wait_for(mirrored, timeout=10, what=f"alice mirrored in {backend}")
        assert got == {"backend": backend, "user": "alice",
                       "storage": show["storage"]["used"], "messages": 3}
    # Errors: a dict that is configured but not a clone target, an unknown
    # one, and missing parameters.
    assert "not configured: other" in error(
        get(api, "/api/backend/quota/clone/get?backend=other&user=alice"), 404)
    error(get(api, "/api/backend/quota/clone/get?backend=nope&user=alice"), 404)
    assert "backend is required" in error(get(api, "/api/backend/quota/clone/get?user=alice"), 400)
    assert "user is required" in error(get(api, "/api/backend/quota/clone/get?backend=sq"), 400)
    error(get(api, "/api/backend/quota/clone/get?backend=sq&user=a/b"), 400)


def test_mail_append_obeys_the_users_rule(api, tmp_path):
    """mail/append asks the userdb for the user's quota_rule as IMAP and
    LMTP do: tina's 4K rule (scaled by quota_storage_percentage 50 to 2K)
    refuses through the API what it refuses over IMAP, with the same text
    (507 Insufficient Storage), and lets through what fits."""
    def append(user, msg):
        return post(api, "/api/backend/mail/append",
                    {"user": user, "folder": "INBOX",
                     "message": base64.b64encode(msg).decode()})

    r = append("tina", message(1, 1500))
    assert r.status == 200, r.body
    big = message(2, 1000)  # 1500 + 1000 > 2048
    text = error(append("tina", big), 507)
    assert text == "Quota exceeded (mailbox for user is full)"
    host, port = api.config["imap"]["listen"][0].rsplit(":", 1)
    m = imaplib.IMAP4(host, int(port))
    m.login("tina", "t")
    typ, data = m.append("INBOX", None, None, big)
    assert (typ, data[0]) == ("NO", b"[OVERQUOTA] " + text.encode()), (typ, data)
    m.logout()
    used, count = on_disk(tmp_path, "tina")
    assert count == 1
    r = get(api, "/api/backend/quota/show?user=tina").json()
    assert r["storage"] == {"used": used, "limit": 2048}, r
    # A user without a rule is not limited; one the userdb does not know is 404.
    assert append("bob", message(3, 9000)).status == 200
    assert "user not found" in error(append("nobody", message(4, 100)), 404)


def test_without_auth_service_is_503(petreld, tmp_path):
    d = petreld(config(tmp_path, auth=False), env={"BACKEND_API_TOKEN": TOKEN})
    assert "auth_master_addr" in error(get(d, "/api/backend/quota/show?user=alice"), 503)
    # With the quota enforcing, mail/append cannot know the user's rules either.
    r = post(d, "/api/backend/mail/append", {"user": "tina", "folder": "INBOX",
                                              "message": base64.b64encode(b"x\r\n").decode()})
    assert "auth_master_addr" in error(r, 503)
    assert get(d, "/api/backend/quota/clone/list").status == 200


def test_outside_allow_list_is_403(petreld, tmp_path):
    cfg = config(tmp_path)
    cfg["backend_api"]["allowed_nets"] = ["10.0.0.0/8"]
    d = petreld(cfg, env={"BACKEND_API_TOKEN": TOKEN})
    error(get(d, "/api/backend/quota/show?user=alice"), 403)
    error(get(d, "/api/backend/quota/clone/list", token=None), 403)


def ctl(d, *args, json_out=False, token=TOKEN):
    pre = ["--backend-url", f"http://{d.backend}"]
    if token:
        pre += ["--backend-token", token]
    if json_out:
        pre.append("--json")
    return run_petrelctl([*pre, "backend", "quota", *args])


def test_petrelctl_quota(api, tmp_path):
    used, _ = on_disk(tmp_path, "alice")
    p = ctl(api, "show", "alice", json_out=True)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["storage"] == {"used": used, "limit": 5 * 1024 * 1024}
    p = ctl(api, "show", "alice")
    assert p.returncode == 0 and "alice" in p.stdout and str(used) in p.stdout, p.stdout
    p = ctl(api, "recalc", "alice", json_out=True)
    assert p.returncode == 0 and json.loads(p.stdout)["messages"]["used"] == 3, p.stderr
    p = ctl(api, "clone", "list", json_out=True)
    assert p.returncode == 0 and json.loads(p.stdout) == {"backends": ["default", "sq"]}
    wait_for(lambda: json.loads(ctl(api, "clone", "get", "sq", "alice",
                                    json_out=True).stdout)["messages"] == 3,
             timeout=10, what="alice mirrored")
    p = ctl(api, "clone", "get", "sq", "alice", json_out=True)
    assert json.loads(p.stdout) == {"backend": "sq", "user": "alice", "storage": used,
                                    "messages": 3}
    # Exit codes: 1 the server said no (with its status), 2 usage, 3 unreachable.
    p = ctl(api, "show", "nobody")
    assert p.returncode == 1 and "404" in p.stderr and "user not found" in p.stderr, p.stderr
    p = ctl(api, "clone", "get", "nope", "alice")
    assert p.returncode == 1 and "404" in p.stderr
    p = ctl(api, "show", "alice", token="wrong")
    assert p.returncode == 1 and "401" in p.stderr
    p = ctl(api, "clone")
    assert p.returncode == 2 and "usage: petrelctl backend quota" in p.stderr
    p = ctl(api, "show")
    assert p.returncode == 2
    p = run_petrelctl(["--backend-url", f"http://127.0.0.1:{free_port()}", "backend", "quota",
                       "show", "alice"])
    assert p.returncode == 3, p.stderr
