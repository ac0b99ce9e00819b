"""mail/append when the userdb cannot give the rules, with the quota
enforcing (review of issue 22): hammered with users the userdb does not
know, every call is 404 (none is saved, none leaves a directory for the
name it gave), petreld's descriptors and memory stay where they were, and
a known user's append still goes through afterwards; with the auth
service unreachable it is 502 and nothing is saved."""

import base64
import os
import threading

import test_quota_api as qa
from test_connection_limits import small_quarantine, status_kb


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_unknown_users_hammering_mail_append(petreld, tmp_path):
    env = {"BACKEND_API_TOKEN": qa.TOKEN}
    env.update(small_quarantine() or {})
    d = petreld(qa.config(tmp_path), env=env)
    msg = base64.b64encode(qa.message(1, 20000)).decode()

    def append(user):
        return qa.post(d, "/api/backend/mail/append",
                       {"user": user, "folder": "INBOX", "message": msg})

    assert append("alice").status == 200  # warm-up: the user cache, the auth link
    fds = fd_count(d.pid)
    rss = status_kb(d.pid, "VmRSS")
    statuses = {}
    lock = threading.Lock()

    def worker(n):
        for i in range(60):
            r = append("ghost%d-%d" % (n, i))
            with lock:
                statuses[r.status] = statuses.get(r.status, 0) + 1

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert statuses == {404: 300}, statuses
    mail = tmp_path / "mail"
    ghosts = [p.name for p in mail.iterdir() if p.name.startswith("ghost")]
    assert ghosts == [], ghosts[:5]
    assert fd_count(d.pid) <= fds + 2, (fds, fd_count(d.pid))
    assert status_kb(d.pid, "VmRSS") - rss < 24 * 1024, (rss, status_kb(d.pid, "VmRSS"))
    assert append("alice").status == 200


def test_auth_service_unreachable_is_502_and_nothing_saved(petreld, tmp_path):
    """With the quota enforcing and the auth service not answering, the
    user's rules cannot be known: mail/append answers 502 and saves nothing
    (not let through unlimited)."""
    from conftest import free_port
    cfg = qa.config(tmp_path)
    cfg["components"] = ["backend-api"]
    for k in ("auth", "lmtp", "imap"):
        cfg.pop(k)
    cfg["backend_api"] = {"auth_master_addr": f"127.0.0.1:{free_port()}"}
    d = petreld(cfg, env={"BACKEND_API_TOKEN": qa.TOKEN})
    r = qa.post(d, "/api/backend/mail/append",
                {"user": "tina", "folder": "INBOX",
                 "message": base64.b64encode(qa.message(1, 100)).decode()})
    assert r.status == 502, (r.status, r.body)
    assert qa.on_disk(tmp_path, "tina") == (0, 0)
