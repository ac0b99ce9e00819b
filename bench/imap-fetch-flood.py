#!/usr/bin/env python3
"""The FETCH flood of issue 19 item 1, measured (docs/performance.md).

    bench/imap-fetch-flood.py [--build DIR] [--messages 20] [--size-mb 1]
                              [--pipelined 2000] [--seconds 10] [--tls]

Starts one petreld (auth + imap) from DIR (default build/) in a temporary
directory, APPENDs the messages to INBOX, then one client with a 4 KiB
SO_RCVBUF logs in, SELECTs INBOX, pipelines `FETCH 1:* BODY.PEEK[]`
--pipelined times and reads nothing for --seconds. Prints petreld's VmRSS
before, its peak during the flood (sampled every 100 ms), and after the
client has gone; and whether the CPU went quiet after the disconnect.
Stops the flood early if VmRSS grows past 4 GiB (an unbounded server).
"""

import argparse
import json
import os
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
_ports = set()


def free_port():
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _ports:
            _ports.add(port)
            return port


def to_yaml(obj, indent=0):
    """Enough YAML for the configuration below (JSON scalars and lists)."""
    pad = "  " * indent
    lines = []
    for key, value in obj.items():
        if isinstance(value, dict):
            lines.append(f"{pad}{key}:")
            lines.append(to_yaml(value, indent + 1))
        else:
            lines.append(f"{pad}{key}: {json.dumps(value)}")
    return "\n".join(lines)


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def until_tagged(f, tag):
    while True:
        line = f.readline()
        if not line:
            raise SystemExit(f"connection closed before {tag!r}")
        if line.startswith(tag + b" "):
            if not line.startswith(tag + b" OK"):
                raise SystemExit(line)
            return


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--messages", type=int, default=20)
    ap.add_argument("--size-mb", type=float, default=1)
    ap.add_argument("--pipelined", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--tls", action="store_true")
    ap.add_argument("--command", default="FETCH 1:* BODY.PEEK[]",
                    help="the command pipelined (e.g. CAPABILITY: answers between commands)")
    a = ap.parse_args()

    work = tempfile.mkdtemp(prefix="imap-flood-")
    proc = None
    try:
        with open(os.path.join(work, "passwd"), "w") as f:
            f.write("alice:{PLAIN}wonderland:1001:1001\n")
        auth, imap, tls = free_port(), free_port(), free_port()
        cfg = {
            "allow_root": True, "log_level": "warn",
            "telemetry": {"listen": f"127.0.0.1:{free_port()}"},
            "components": ["auth", "imap"],
            "mail": {"home": f"{work}/mail/%u", "fsync": "never"},
            "auth": {"listen": [f"127.0.0.1:{auth}"],
                     "passdb": {"driver": "passwd-file", "path": f"{work}/passwd"}},
            "imap": {"listen": [f"127.0.0.1:{imap}"], "auth_addr": f"127.0.0.1:{auth}"},
        }
        if a.tls:
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                            "-keyout", "k.pem", "-out", "c.pem", "-days", "1", "-subj",
                            "/CN=127.0.0.1"], cwd=work, check=True, capture_output=True)
            cfg["imap"].update({"listen_tls": [f"127.0.0.1:{tls}"],
                                "tls_cert_file": f"{work}/c.pem",
                                "tls_key_file": f"{work}/k.pem"})
        with open(os.path.join(work, "petreld.yaml"), "w") as f:
            f.write(to_yaml(cfg) + "\n")
        proc = subprocess.Popen([os.path.join(a.build, "petreld"), "-c",
                                 os.path.join(work, "petreld.yaml")],
                                stdout=subprocess.DEVNULL, stderr=open(f"{work}/log", "w"))
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", imap), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("petreld did not start: " + open(f"{work}/log").read())
                time.sleep(0.05)

        import imaplib
        m = imaplib.IMAP4("127.0.0.1", imap)
        m.login("alice", "wonderland")
        size = int(a.size_mb * 1024 * 1024)
        line = b"x" * 76 + b"\r\n"
        for i in range(a.messages):
            msg = b"Subject: flood %d\r\n\r\n" % i + line * (size // len(line))
            m.append("INBOX", None, None, msg)
        m.logout()

        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", tls if a.tls else imap))
        if a.tls:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            s = ctx.wrap_socket(s)
        f = s.makefile("rb")
        f.readline()
        s.sendall(b"a LOGIN alice wonderland\r\n")
        until_tagged(f, b"a")
        s.sendall(b"b SELECT INBOX\r\n")
        until_tagged(f, b"b")
        time.sleep(0.5)
        pid = proc.pid
        before = rss_kb(pid)
        s.setblocking(False)
        flood = b"".join(b"f%d %s\r\n" % (i, a.command.encode()) for i in range(a.pipelined))
        sent = 0
        peak = before
        start = time.monotonic()
        while time.monotonic() - start < a.seconds:
            if sent < len(flood):
                try:
                    sent += s.send(flood[sent:])
                except (BlockingIOError, ssl.SSLWantWriteError):
                    pass
            peak = max(peak, rss_kb(pid))
            if peak > 4 * 1024 * 1024:
                print("stopping early: VmRSS above 4 GiB")
                break
            time.sleep(0.1)
        cpu_flood = cpu(pid)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
        time.sleep(2)
        c0 = cpu(pid)
        time.sleep(1)
        busy = cpu(pid) - c0
        after = rss_kb(pid)
        print(f"build={a.build} tls={a.tls} messages={a.messages}x{a.size_mb}MB "
              f"pipelined={a.pipelined} x {a.command!r} (sent {sent}/{len(flood)} bytes)")
        print(f"VmRSS before={before // 1024} MB peak={peak // 1024} MB "
              f"(+{(peak - before) // 1024} MB) 2s after disconnect={after // 1024} MB")
        print(f"CPU during flood {cpu_flood:.1f}s; in the 3rd second after disconnect "
              f"{busy:.2f}s ({'still working' if busy > 0.2 else 'quiet'})")
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
