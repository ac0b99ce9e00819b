"""Dovecot 2.3 as an IMAP login proxy in front of a Petrel backend: the peer
that bench/login_proxy_bench.py measures Petrel's login proxy against.

    dv = DovecotProxy(root, "127.0.0.33", port, ("127.0.0.11", 1143),
                      passwd_lines, login_procs=1).start()
    dv.pids()        # the master and every child (imap-login, auth, ...)
    dv.stop()

Its own base_dir, state_dir and log under `root`, its own configuration
(`dovecot -F -c`), run as root as the project's Dovecot interop tests run
it (tests/e2e/test_login_forwarding_dovecot.py), listening on its own
loopback address. Only IMAP, no TLS.

Configured as Dovecot documents a proxy (doc.dovecot.org, "Proxying",
"Login processes"):

- passdb passwd-file with the bench users' passwords (the same
  SHA512-CRYPT hashes the Petrel fleet uses, or {PLAIN} ones) and
  `default_fields = proxy=y host=... port=...`: Dovecot verifies the
  password, then logs in to the backend with the password the client sent
  (no `pass=` field) and relays; it forwards the client's address in an
  IMAP ID, which the Petrel backend trusts from 127.0.0.1.
- the auth cache on (`auth_cache_size`), as the Petrel fleet's caches are;
- imap-login in Dovecot's "high-performance mode" (`service_count = 0`,
  `process_min_avail` = `login_procs`, `process_limit` the same): a few
  long-lived login processes that each serve many connections, the mode
  Dovecot recommends for a busy proxy, and the shape of Petrel's proxy (one
  event-driven process). The default "high-security mode" forks a process
  per connection."""

import os
import sys
import time
from pathlib import Path

# The Dovecot master's start, logs and stop are the interop tests' own
# (tests/e2e/dovecot_master.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
from dovecot_master import DovecotMaster, account, available  # noqa: E402,F401


class DovecotProxy(DovecotMaster):
    def __init__(self, root, ip, port, backend, passwd_lines, login_procs=1, name="dovecot"):
        Path(root).mkdir(parents=True, exist_ok=True)
        super().__init__(root)
        self.ip = ip
        self.port = port
        self.backend = backend
        self.login_procs = login_procs
        self.name = name
        # The login processes (dovenull) chroot into base_dir/login and the
        # auth process (dovecot) reads the passwd-file: let them through.
        # (root's parent is the bench's work directory, 0700 from mktemp.)
        os.chmod(self.root, 0o755)
        os.chmod(self.root.parent, os.stat(self.root.parent).st_mode | 0o011)
        self.passwd = self.root / "passwd"
        self.passwd.write_text("".join(passwd_lines))
        os.chmod(self.passwd, 0o644)

    @property
    def addr(self):
        return f"{self.ip}:{self.port}"

    def config(self):
        internal = account(["dovecot"], "nobody")
        login = account(["dovenull"], "nobody")
        host, port = self.backend
        return f"""\
base_dir = {self.root}/run
state_dir = {self.root}/state
instance_name = petrel-bench-{self.name}
log_path = {self.log}
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
protocols = imap
listen = {self.ip}
default_internal_user = {internal}
default_login_user = {login}
auth_cache_size = 10M
auth_cache_ttl = 1 hour
auth_cache_negative_ttl = 0
passdb {{
  driver = passwd-file
  args = {self.passwd}
  default_fields = proxy=y host={host} port={port}
}}
userdb {{
  driver = static
  args = uid={login} gid={login} home=/nonexistent
}}
service imap-login {{
  inet_listener imap {{
    address = {self.ip}
    port = {self.port}
  }}
  inet_listener imaps {{
    port = 0
  }}
  service_count = 0
  process_min_avail = {self.login_procs}
  process_limit = {self.login_procs}
  client_limit = 4096
  vsz_limit = 1G
}}
service anvil {{
  chroot =
}}
"""

    def start(self, timeout=20):
        if not self.launch(self.config(), self.ip, self.port, timeout):
            raise RuntimeError(f"dovecot did not start:\n{self.logs()[-4000:]}")
        # process_min_avail login processes are forked at start; wait for
        # them so a placement pins them all.
        deadline = time.monotonic() + timeout
        while len(self.login_pids()) < self.login_procs:
            if time.monotonic() > deadline:
                raise RuntimeError(f"dovecot: {len(self.login_pids())} imap-login processes, "
                                   f"wanted {self.login_procs}")
            time.sleep(0.05)
        return self

    def pids(self):
        """The master and its whole process tree now."""
        from cpu_placement import children
        if self.proc is None or self.proc.poll() is not None:
            return []
        return [self.proc.pid] + children(self.proc.pid)

    def login_pids(self):
        out = []
        for pid in self.pids()[1:]:
            try:
                with open(f"/proc/{pid}/comm") as f:
                    if f.read().strip() == "imap-login":
                        out.append(pid)
            except FileNotFoundError:
                pass
        return out
