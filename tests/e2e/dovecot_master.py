"""A Dovecot master run from a configuration of its own
(`dovecot -F -c <root>/dovecot.conf`): the base of the interop tests'
Dovecot (test_storage_dovecot_interop.Dovecot and the tests built on it)
and of the login-proxy bench's peer (bench/dovecot_proxy.py).

Everything it writes stays under its root: dovecot.conf, dovecot.out (the
master's stdout and stderr), and what the subclass's configuration names
there (the log_path dovecot.log, base_dir run/ and state_dir state/, both
made here)."""

import os
import pwd
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

from process_stop import stop_process

DOVECOT = shutil.which("dovecot") or "/usr/sbin/dovecot"


def available():
    return os.path.exists(DOVECOT)


def account(names, fallback):
    """The first of `names` that is a user on this machine, else `fallback`
    (Dovecot's internal and login users differ between distributions)."""
    for n in names:
        try:
            return pwd.getpwnam(n).pw_name
        except KeyError:
            continue
    return fallback


class DovecotMaster:
    def __init__(self, root):
        self.root = Path(root)
        self.proc = None
        self.log = self.root / "dovecot.log"
        for d in ("run", "state"):
            (self.root / d).mkdir(exist_ok=True)

    def launch(self, config, ip, port, timeout):
        """Writes `config` as dovecot.conf and starts the master: True once
        ip:port greets with `* OK`; False, the master stopped again, when it
        exits or does not greet within `timeout` seconds."""
        conf = self.root / "dovecot.conf"
        conf.write_text(config)
        self.proc = subprocess.Popen([DOVECOT, "-F", "-c", str(conf)], stdin=subprocess.DEVNULL,
                                     stdout=open(self.root / "dovecot.out", "ab"),
                                     stderr=subprocess.STDOUT, cwd=self.root)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with socket.create_connection((ip, port), timeout=0.5) as s:
                    s.settimeout(5)
                    if s.recv(100).startswith(b"* OK"):
                        return True
            except OSError:
                time.sleep(0.05)
        self.stop()
        return False

    def logs(self):
        out = []
        for name in ("dovecot.out", "dovecot.log"):
            p = self.root / name
            if p.exists():
                out.append(p.read_text(errors="replace"))
        return "\n".join(out)

    def errors(self):
        """Error/panic/fatal lines Dovecot logged (corrupted uidlist, ...)."""
        return [line for line in self.logs().splitlines()
                if re.search(r"\b(Error|Panic|Fatal)\b", line)]

    def stop(self):
        stop_process(self.proc)
        self.proc = None
