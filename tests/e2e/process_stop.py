"""Stopping a child process the harness or a bench started (a Dovecot
master, a petreld under a bench): SIGTERM, and SIGKILL only if it is still
there after the grace period, so that a hung child cannot hang the run."""

import signal
import subprocess


def stop_process(proc, timeout=15):
    """Stops `proc` (a subprocess.Popen, or None) if it still runs: SIGTERM,
    then SIGKILL after `timeout` seconds; returns once it is reaped."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
