"""What the Python benches share about the petreld they start: a free
loopback port, starting it and waiting for its listener, its CPU time and
resident memory from /proc, and stopping it."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_petreld(petreld, config, work, port, env=None, pin_cpu0=False):
    """petreld -c `config`, stderr in work/stderr, once 127.0.0.1:`port`
    accepts (exits the bench with its stderr if it does not within 20 s).
    `pin_cpu0` keeps it on CPU 0 when there is more than one."""
    cmd = [str(petreld), "-c", str(config)]
    if pin_cpu0 and (os.cpu_count() or 1) > 1 and shutil.which("taskset"):
        cmd = ["taskset", "-c", "0"] + cmd
    proc = subprocess.Popen(cmd, stderr=open(work / "stderr", "w"), env=env)
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                sys.exit("petreld did not start: " + (work / "stderr").read_text())
            time.sleep(0.1)


def cpu_seconds(pid):
    """User plus system CPU time of `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def vm_rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def stop(proc):
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
