"""Storage errors as IMAP clients see them (issue 19, item 12): a full
disk answers NO [OVERQUOTA] (RFC 5530), not [SERVERBUG]; a folder the
server may not write (chmod -R a-w, petreld running as an unprivileged
user) still opens for EXAMINE and STATUS and reads its messages, and a
write there answers NO [NOPERM]. Clients: imaplib."""

import imaplib
import os
import pwd
import shutil
import subprocess
import tempfile

import pytest

from test_imap_session import imap_overrides, login

MSG = (b"From: a@example.org\r\nTo: alice@example.org\r\nSubject: s\r\n\r\n"
       b"body line\r\n")


def mount_tmpfs(path, size):
    if os.geteuid() != 0:
        return "not root: cannot mount a small tmpfs"
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs",
                        str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        return f"mount not permitted: {r.stderr.strip()}"
    return None


def test_disk_full_is_overquota(petreld, tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    why = mount_tmpfs(mnt, "1m")
    if why:
        pytest.skip(why)
    try:
        cfg = imap_overrides(tmp_path)
        cfg["mail"]["home"] = str(mnt / "%u")
        d = petreld(cfg)
        m = login(d)
        typ, data = m.append("INBOX", None, None, MSG)  # fits
        assert typ == "OK", data
        big = MSG + b"x" * 78 + b"\r\n"
        big = big * (2 * 1024 * 1024 // len(big))
        typ, data = m.append("INBOX", None, None, big)
        assert typ == "NO" and data[0].startswith(b"[OVERQUOTA]"), data
        # The session and the folder are fine: the first message reads back.
        typ, data = m.select("INBOX")
        assert typ == "OK" and data == [b"1"], data
        typ, data = m.fetch("1", "(BODY.PEEK[])")
        assert typ == "OK" and data[0][1] == MSG
        m.logout()
        d.stop()
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.fixture
def unprivileged_home():
    """A directory the unprivileged user `nobody` owns, outside pytest's
    root-only temporary tree; None when the tests do not run as root (the
    process is then unprivileged already)."""
    if os.geteuid() != 0:
        yield None
        return
    nobody = pwd.getpwnam("nobody")
    base = tempfile.mkdtemp(prefix="petrel-ro-")
    os.chmod(base, 0o755)
    os.chown(base, nobody.pw_uid, nobody.pw_gid)
    try:
        yield base, nobody
    finally:
        subprocess.run(["chmod", "-R", "u+w", base], check=False)
        shutil.rmtree(base, ignore_errors=True)


def read_only_folder(petreld, tmp_path, unprivileged_home, late_news):
    cfg = imap_overrides(tmp_path)
    if unprivileged_home is not None:
        base, nobody = unprivileged_home
        cfg["user"] = "nobody"
        cfg.pop("allow_root", None)
        cfg["allow_root"] = False
        home = os.path.join(base, "mail")
        os.makedirs(home)
        os.chown(home, nobody.pw_uid, nobody.pw_gid)
        passwd = os.path.join(base, "passwd")
        shutil.copy(cfg["auth"]["passdb"]["path"], passwd)
        os.chmod(passwd, 0o644)
        cfg["auth"]["passdb"]["path"] = passwd
        cfg["mail"]["home"] = os.path.join(home, "%u")
    else:
        home = str(tmp_path / "mail")
    d = petreld(cfg)
    m = login(d)
    assert m.create("Archive")[0] == "OK"
    for _ in range(3):
        assert m.append("Archive", None, None, MSG)[0] == "OK"
    m.logout()
    d.stop()

    # The folder (its files, index and directories) becomes read-only; with
    # `late_news` one more message arrives first behind the index's back
    # (another MDA drops it in new/), news the index cannot take.
    user_home = os.path.join(home, "alice")
    folders = [os.path.join(r, n) for r, dirs, _ in os.walk(user_home) for n in dirs]
    archive = [f for f in folders if os.path.basename(f).endswith("Archive")]
    assert archive, folders
    count = 3
    if late_news:
        late = os.path.join(archive[0], "new", "1700000000.M1P1.other")
        with open(late, "wb") as f:
            f.write(MSG)
        if unprivileged_home is not None:
            os.chown(late, nobody.pw_uid, nobody.pw_gid)
        count = 4
    subprocess.run(["chmod", "-R", "a-w", archive[0]], check=True)

    d = petreld(cfg)
    m = login(d)
    typ, data = m.status("Archive", "(MESSAGES UIDNEXT UNSEEN)")
    assert typ == "OK" and b"MESSAGES %d" % count in data[0], data
    typ, data = m.select("Archive", readonly=True)
    assert typ == "OK" and data == [b"%d" % count], data
    typ, data = m.fetch("1:*", "(FLAGS BODY.PEEK[])")
    assert typ == "OK"
    assert [p[1] for p in data if isinstance(p, tuple)] == [MSG] * count
    m.close()
    # SELECT opens it too, read-only (as EXAMINE would).
    with pytest.raises(imaplib.IMAP4.readonly):  # imaplib: OK [READ-ONLY] to a SELECT
        m.select("Archive")
    m.untagged_responses.pop("READ-ONLY", None)  # imaplib refuses to go on otherwise
    # (imaplib's own store() raises on the [READ-ONLY] code before returning)
    tag = m._command("STORE", "1", "+FLAGS", "(\\Seen)")
    typ, data = m._command_complete("STORE", tag)
    assert typ == "NO" and b"READ-ONLY" in data[0], data
    m.untagged_responses.pop("READ-ONLY", None)
    m.close()
    # Writing there is refused with a code that says why.
    typ, data = m.append("Archive", None, None, MSG)
    assert typ == "NO" and data[0].startswith(b"[NOPERM]"), data
    m.logout()


def test_read_only_folder_opens_for_examine_and_status(petreld, tmp_path, unprivileged_home):
    read_only_folder(petreld, tmp_path, unprivileged_home, late_news=False)


def test_read_only_folder_with_news_opens_in_memory(petreld, tmp_path, unprivileged_home):
    read_only_folder(petreld, tmp_path, unprivileged_home, late_news=True)


def test_one_keyword_too_many_is_limit(petreld, tmp_path):
    """A Maildir folder holds 26 keywords (one file-name letter each): the
    27th answers NO [LIMIT] (RFC 5530: "the number of flags used in a
    mailbox"), not [SERVERBUG]; the session and the keywords stay."""
    d = petreld(imap_overrides(tmp_path))
    m = login(d)
    m.append("INBOX", None, None, MSG)
    m.select("INBOX")
    for i in range(26):
        assert m.store("1", "+FLAGS", f"(kw{i})")[0] == "OK"
    typ, data = m.store("1", "+FLAGS", "(one-too-many)")
    assert typ == "NO" and data[0].startswith(b"[LIMIT]"), data
    typ, data = m.fetch("1", "(FLAGS)")
    assert all(b"kw%d" % i in data[0] for i in range(26)) and b"one-too-many" not in data[0]
    assert m.noop()[0] == "OK"
    m.logout()
