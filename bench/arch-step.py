#!/usr/bin/env python3
"""Fixed-count request driver for bench/arch-step.sh (docs/performance.md,
"Architecture step").

    arch-step.py SCENARIO ADDR COUNT [--zero PID] [--dump PID]

Sends COUNT requests of SCENARIO, one at a time over one connection, to the
petreld at ADDR ("127.0.0.1:port"), checks every answer and prints
`requests=N seconds=S rate=R`. With --zero/--dump (a petreld running under
valgrind --tool=callgrind) a warm-up of WARMUP requests goes first, then
callgrind's counters are zeroed, the COUNT requests sent and the counters
dumped, so the dump holds the measured requests' instructions alone.

Scenarios (the same requests on every run, so instruction counts compare):
  health    GET /api/backend/health (backend-api, no token)
  dict      POST /api/backend/dict/d/lookup of shared/bench/<i> (memory dict,
            KEYS keys written first through /set)
  auth      VERIFY of user p<i> with its PLAIN password (auth, passwd-file,
            cache on: answered on the event loop after the first pass)
  director  LOOKUP user<i>@bench.example on the ring port (director; the
            first pass assigns, later ones are sticky)
"""
import http.client
import json
import socket
import subprocess
import sys
import time

WARMUP = 200
SCENARIO = "?"
KEYS = 100
USERS = 100


def callgrind(action, pid):
    subprocess.run(["callgrind_control", action, str(pid)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Http:
    def __init__(self, addr):
        host, port = addr.rsplit(":", 1)
        self.conn = http.client.HTTPConnection(host, int(port), timeout=120)

    def call(self, method, path, body=None):
        headers = {"Content-Type": "application/json"} if body is not None else {}
        self.conn.request(method, path, body=body, headers=headers)
        r = self.conn.getresponse()
        data = r.read()
        if r.status != 200:
            sys.exit(f"arch-step: {method} {path}: {r.status} {data[:200]!r}")
        return data


class Lines:
    def __init__(self, addr):
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=120)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def line(self):
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                sys.exit(f"arch-step {SCENARIO}: connection closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line


def health(addr):
    c = Http(addr)

    def one(i):
        c.call("GET", "/api/backend/health")
    return one


def dict_lookup(addr):
    c = Http(addr)
    value = "UGV0cmVs" * 11
    for k in range(KEYS):
        c.call("POST", "/api/backend/dict/d/set",
               json.dumps({"key": f"shared/bench/{k}", "value": value}))

    def one(i):
        body = c.call("POST", "/api/backend/dict/d/lookup",
                      json.dumps({"key": f"shared/bench/{i % KEYS}"}))
        if not json.loads(body)["found"]:
            sys.exit("arch-step: dict lookup not found")
    return one


def auth(addr):
    c = Lines(addr)

    def one(i):
        u = i % USERS + 1
        c.send(f"VERIFY\t{i}\tp{u}\tpw-{u}\tservice=bench\n".encode())
        line = c.line()
        if not line.startswith(f"OK\t{i}\t".encode()):
            sys.exit(f"arch-step: auth answered {line[:200]!r}")
    return one


def director(addr):
    c = Lines(addr)
    c.send(b"VERSION\tpetrel-ring\t1\t1\nHELLO\tlogin\tarch-step\n")
    while c.line() != b"DONE":
        pass

    def one(i):
        c.send(f"LOOKUP\t{i}\tuser{i % USERS}@bench.example\n".encode())
        line = c.line()
        if not line.startswith(f"LOOKUP-OK\t{i}\t".encode()):
            sys.exit(f"arch-step: director answered {line[:200]!r}")
    return one


SCENARIOS = {"health": health, "dict": dict_lookup, "auth": auth, "director": director}


def main():
    args = sys.argv[1:]
    zero = dump = None
    if "--zero" in args:
        zero = args[args.index("--zero") + 1]
    if "--dump" in args:
        dump = args[args.index("--dump") + 1]
    global SCENARIO
    scenario, addr, count = args[0], args[1], int(args[2])
    SCENARIO = scenario
    one = SCENARIOS[scenario](addr)
    i = 0
    if zero is not None:
        for _ in range(WARMUP):
            one(i)
            i += 1
        callgrind("-z", zero)
    start = time.monotonic()
    for _ in range(count):
        one(i)
        i += 1
    seconds = time.monotonic() - start
    if dump is not None:
        callgrind("--dump=window", dump)
    print(f"requests={count} seconds={seconds:.3f} rate={count / seconds:.0f}")


if __name__ == "__main__":
    main()
