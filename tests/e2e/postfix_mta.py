"""A throwaway Postfix MTA for end-to-end tests: Debian's postfix package,
started from the test with its own configuration directory, queue and data
directories and log file, listening for SMTP on one loopback port; no system
service, nothing outside its directory is touched.

    mta = PostfixMTA(smtp_port, main_cf_extra={...})
    mta.start(); ...; mta.stop()

Postfix's daemons run as the `postfix` user, which must be able to enter
the queue directory: it lives under a directory of its own in /tmp (mode
0755), not in pytest's private tmp_path. `available()` says whether the
package is installed (scripts/setup.sh installs it)."""

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

POSTFIX = "/usr/sbin/postfix"


def available():
    return os.path.exists(POSTFIX) and os.geteuid() == 0


MASTER_CF = """\
{port} inet n - n - - smtpd
pickup    unix  n       -       n       60      1       pickup
cleanup   unix  n       -       n       -       0       cleanup
qmgr      unix  n       -       n       300     1       qmgr
tlsmgr    unix  -       -       n       1000?   1       tlsmgr
rewrite   unix  -       -       n       -       -       trivial-rewrite
bounce    unix  -       -       n       -       0       bounce
defer     unix  -       -       n       -       0       bounce
trace     unix  -       -       n       -       0       bounce
verify    unix  -       -       n       -       1       verify
flush     unix  n       -       n       1000?   0       flush
proxymap  unix  -       -       n       -       -       proxymap
smtp      unix  -       -       n       -       -       smtp
relay     unix  -       -       n       -       -       smtp
showq     unix  n       -       n       -       -       showq
error     unix  -       -       n       -       -       error
retry     unix  -       -       n       -       -       error
discard   unix  -       -       n       -       -       discard
local     unix  -       n       n       -       -       local
lmtp      unix  -       -       n       -       -       lmtp
anvil     unix  -       -       n       -       1       anvil
scache    unix  -       -       n       -       1       scache
postlog   unix-dgram n  -       n       -       1       postlogd
"""


class PostfixMTA:
    def __init__(self, smtp_port, main_cf):
        self.port = smtp_port
        self.root = Path(tempfile.mkdtemp(prefix="petrel-postfix-", dir="/tmp"))
        os.chmod(self.root, 0o755)
        self.conf = self.root / "etc"
        self.queue = self.root / "queue"
        self.data = self.root / "data"
        self.log = self.root / "postfix.log"
        for d in (self.conf, self.queue, self.data):
            d.mkdir()
        shutil.chown(self.data, "postfix", "postfix")
        settings = {
            "compatibility_level": "3.6",
            "queue_directory": str(self.queue),
            "data_directory": str(self.data),
            "mail_owner": "postfix",
            "myhostname": "mta.test.example",
            "mydomain": "test.example",
            "mydestination": "",
            "inet_interfaces": "127.0.0.1",
            "inet_protocols": "ipv4",
            "mynetworks": "127.0.0.0/8",
            "maillog_file": str(self.log),
            "maillog_file_prefixes": str(self.root),
            "smtpd_banner": "$myhostname ESMTP",
            "biff": "no",
            "append_dot_mydomain": "no",
            "alias_maps": "",
            "alias_database": "",
            "local_recipient_maps": "",
            "smtp_dns_support_level": "disabled",
            "disable_dns_lookups": "yes",
            "queue_run_delay": "1s",
            "minimal_backoff_time": "1s",
            "maximal_backoff_time": "2s",
            "smtpd_tls_security_level": "none",
            "smtp_tls_security_level": "none",
            "lmtp_tls_security_level": "none",
        }
        settings.update(main_cf)
        (self.conf / "main.cf").write_text(
            "".join(f"{k} = {v}\n" for k, v in settings.items()))
        (self.conf / "master.cf").write_text(MASTER_CF.format(port=f"127.0.0.1:{smtp_port}"))

    def _postfix(self, *args, check=True):
        return subprocess.run([POSTFIX, "-c", str(self.conf), *args], capture_output=True,
                              text=True, timeout=60, check=check)

    def start(self, timeout=20.0):
        self._postfix("check")
        self._postfix("start")
        import socket
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    if s.recv(100).startswith(b"220"):
                        return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"postfix did not answer on {self.port}: {self.log_text()}")

    def log_text(self):
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self):
        self._postfix("stop", check=False)
        # master exits after its children; wait for the pid file to go.
        pid_file = self.queue / "pid" / "master.pid"
        deadline = time.monotonic() + 20
        while pid_file.exists() and time.monotonic() < deadline:
            try:
                pid = int(pid_file.read_text().split()[0])
                os.kill(pid, 0)
            except (OSError, ValueError, IndexError):
                break
            time.sleep(0.1)
        shutil.rmtree(self.root, ignore_errors=True)
