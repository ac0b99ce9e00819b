#!/usr/bin/env python3
"""RING-CHANGE propagation across a ring of directors (docs/performance.md,
"Director"); bench/director.sh runs it as the `propagation` scenario.

  director-propagation.py <petreld> <directors> <changes> <workdir>

Starts <directors> petreld processes with the director component on
127.0.0.1, 127.0.0.2, ... (each one's ring port and admin API on its own
loopback address, every other one as a configured peer), waits until every
link is connected, then makes <changes> backend changes (down/up in turn,
each on the next director round the ring) through the admin API. For each
change it measures the time from sending the HTTP request until a monitor
client connected to every OTHER director's ring port has received the
RING-CHANGE. Prints one line: count, p50, p90, p99 and max in ms."""
import hashlib
import hmac
import json
import os
import select
import socket
import subprocess
import sys
import time
import urllib.request

TOKEN = "bench-token-0123456789abcdef0123456789abcdef"
RING_SECRET = "bench-ring-secret-0123456789abcdef"  # the directors' DIRECTOR_RING_SECRET


def proof(role, server_nonce, client_nonce):
    msg = b"\0".join([b"petrel-ring-auth", role, server_nonce, client_nonce])
    return hmac.new(RING_SECRET.encode(), msg, hashlib.sha256).hexdigest().encode()


def port_free_on(ips):
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        ok = True
        for ip in ips:
            with socket.socket() as s:
                try:
                    s.bind((ip, port))
                except OSError:
                    ok = False
                    break
        if ok:
            return port
    raise SystemExit("no free port on every address")


def api(addr, method, path, body=None):
    req = urllib.request.Request(f"http://{addr}{path}", method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": f"Bearer {TOKEN}",
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read() or b"{}")


class Monitor:
    """A monitor client on a ring port: reads RING-CHANGE pushes."""

    def __init__(self, addr):
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.buf = b""
        while b"\n" not in self.buf:
            self.buf += self.sock.recv(65536)
        version, self.buf = self.buf.split(b"\n", 1)
        server_nonce = version.split(b"nonce=", 1)[1].split(b"\t", 1)[0]
        client_nonce = os.urandom(32).hex().encode()
        self.sock.sendall(b"VERSION\tpetrel-ring\t1\t1\nAUTH\thmac-sha256\t" + client_nonce
                          + b"\t" + proof(b"client", server_nonce, client_nonce)
                          + b"\nHELLO\tmonitor\tbench\n")
        while b"DONE\n" not in self.buf:
            self.buf += self.sock.recv(65536)
        self.buf = self.buf.split(b"DONE\n", 1)[1]

    def changes(self):
        """RING-CHANGE lines read so far (non-blocking)."""
        out = []
        while True:
            r, _, _ = select.select([self.sock], [], [], 0)
            if not r:
                break
            data = self.sock.recv(65536)
            if not data:
                raise SystemExit("a director closed its monitor connection")
            self.buf += data
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            if line.startswith(b"RING-CHANGE\t"):
                out.append(line.decode().split("\t"))
        return out


def main():
    petreld, n, changes, work = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    ips = [f"127.0.0.{i + 1}" for i in range(n)]
    api_port, ring_port = port_free_on(ips), port_free_on(ips)
    procs = []
    try:
        for ip in ips:
            tport = port_free_on([ip])
            peers = ", ".join(f'"{o}:{ring_port}"' for o in ips if o != ip)
            path = os.path.join(work, f"director-{ip}.yaml")
            with open(path, "w") as f:
                f.write(f"""allow_root: true
log_level: warn
components: [director]
telemetry: {{listen: "{ip}:{tport}"}}
director:
  api: {{listen: "{ip}:{api_port}"}}
  ring: {{listen: "{ip}:{ring_port}", reconnect_min: 50ms, reconnect_max: 500ms}}
  peers: [{peers}]
  backends:
    - {{ip: 10.0.0.1, port: 143, vhosts: 100}}
    - {{ip: 10.0.0.2, port: 143, vhosts: 100}}
""")
            log = open(os.path.join(work, f"director-{ip}.log"), "wb")
            procs.append(subprocess.Popen([petreld, "-c", path], stdout=log, stderr=log,
                                          env=dict(os.environ, DIRECTOR_API_TOKEN=TOKEN,
                                                   DIRECTOR_RING_SECRET=RING_SECRET)))
        apis = [f"{ip}:{api_port}" for ip in ips]
        deadline = time.monotonic() + 30
        while True:
            try:
                if all(all(m["link"] is None or m["link"]["state"] == "connected"
                           for m in api(a, "GET", "/api/director/ring")["members"])
                       for a in apis):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the ring did not connect within 30 s")
            time.sleep(0.05)
        monitors = [Monitor(f"{ip}:{ring_port}") for ip in ips]
        times = []
        for i in range(changes):
            origin = i % n
            action = "down" if i % 2 == 0 else "up"
            for m in monitors:
                m.changes()  # drain
            t0 = time.monotonic()
            api(apis[origin], "POST", f"/api/director/backends/10.0.0.1/{action}")
            waiting = {j for j in range(n) if j != origin}
            state = "flush" if action == "down" else "up"
            while waiting:
                r, _, _ = select.select([monitors[j].sock for j in waiting], [], [], 5)
                if not r:
                    raise SystemExit(f"change {i} did not reach every director within 5 s")
                for j in list(waiting):
                    if any(c[1] == state and c[2] == "10.0.0.1" for c in monitors[j].changes()):
                        waiting.discard(j)
            times.append((time.monotonic() - t0) * 1000)
        times.sort()

        def pct(p):
            return times[min(len(times) - 1, int(p / 100 * len(times)))]
        print(f"directors={n} changes={len(times)} p50_ms={pct(50):.2f} p90_ms={pct(90):.2f} "
              f"p99_ms={pct(99):.2f} max_ms={times[-1]:.2f}")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()


if __name__ == "__main__":
    main()
