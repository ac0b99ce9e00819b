#!/usr/bin/env python3
"""LMTP load generator for bench/lmtp.sh (docs/performance.md, "LMTP").

Python's smtplib.LMTP, as the issue asks: `--connections` worker processes
(not threads: the GIL would make one core the client's ceiling), each with
one LMTP connection, send `--messages` messages in all, each of `--size`
bytes to one random user among user1..user<--users> (or to several with
--rcpts). Every message carries a unique Message-ID "<bench-<run>-<n>@...>"
so a later check can prove none was lost or stored twice.

Prints one summary line per run:
  lmtp-client: messages=N connections=C seconds=S rate=R msg/s p50=..ms p99=..ms errors=E
and with --json the same as a JSON object on the last line. Exit status 1
when any recipient did not get a 250.
"""

import argparse
import json
import multiprocessing
import os
import random
import smtplib
import sys
import time


def make_message(run, n, size, rcpt):
    head = (f"From: bench@example.org\r\nTo: {rcpt}\r\n"
            f"Subject: bench message {n}\r\n"
            f"Message-ID: <bench-{run}-{n}@example.org>\r\n"
            f"Date: Sun, 22 Nov 2026 10:00:00 +0000\r\n\r\n").encode()
    line = b"The quick brown fox jumps over the lazy dog 0123456789 .,;:!?\r\n"
    body = bytearray()
    while len(head) + len(body) < size:
        body += line
    return head + bytes(body[: max(0, size - len(head) - 2)]) + b"\r\n"


def worker(args):
    idx, count, opts = args
    rng = random.Random(opts["seed"] * 1000 + idx)
    if opts["socket"]:
        conn = smtplib.LMTP(opts["socket"])
    else:
        conn = smtplib.LMTP(opts["host"], opts["port"])
    conn.ehlo_or_helo_if_needed()
    lat = []
    errors = 0
    sent = []
    for i in range(count):
        n = idx * 1_000_000 + i
        rcpts = [f"user{rng.randint(1, opts['users'])}@{opts['domain']}"
                 for _ in range(opts["rcpts"])]
        msg = make_message(opts["run"], n, opts["size"], rcpts[0])
        t0 = time.perf_counter()
        try:
            refused = conn.sendmail("sender@example.net", rcpts, msg)
            errors += len(refused)
            ok = [r for r in rcpts if r not in refused]
        except smtplib.SMTPException as e:
            errors += len(rcpts)
            ok = []
            if opts["verbose"]:
                print(f"lmtp-client: {e}", file=sys.stderr)
            try:
                conn.rset()
            except smtplib.SMTPException:
                conn = smtplib.LMTP(opts["host"], opts["port"]) if not opts["socket"] \
                    else smtplib.LMTP(opts["socket"])
        lat.append(time.perf_counter() - t0)
        if opts["record"]:
            sent.append((n, ok))
    conn.quit()
    return lat, errors, sent


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=24)
    ap.add_argument("--socket", default="", help="Unix socket path instead of TCP")
    ap.add_argument("--connections", type=int, default=1)
    ap.add_argument("--messages", type=int, default=2000)
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--rcpts", type=int, default=1)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--domain", default="example.org")
    ap.add_argument("--run", default=str(os.getpid()))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--record", default="", help="write the accepted (n, rcpts) list as JSON")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    opts = dict(host=a.host, port=a.port, socket=a.socket, users=a.users, rcpts=a.rcpts,
                size=a.size, domain=a.domain, run=a.run, seed=a.seed, record=bool(a.record),
                verbose=a.verbose)
    per = [a.messages // a.connections + (1 if i < a.messages % a.connections else 0)
           for i in range(a.connections)]
    t0 = time.perf_counter()
    with multiprocessing.Pool(a.connections) as pool:
        results = pool.map(worker, [(i, per[i], opts) for i in range(a.connections)])
    secs = time.perf_counter() - t0
    lat = sorted(x for r in results for x in r[0])
    errors = sum(r[1] for r in results)
    if a.record:
        with open(a.record, "w") as f:
            json.dump([s for r in results for s in r[2]], f)

    def pct(p):
        return lat[min(len(lat) - 1, int(p * len(lat)))] * 1000 if lat else 0.0

    out = dict(messages=a.messages, connections=a.connections, seconds=round(secs, 3),
               rate=round(a.messages / secs, 1), p50_ms=round(pct(0.5), 2),
               p99_ms=round(pct(0.99), 2), errors=errors)
    print(f"lmtp-client: messages={a.messages} connections={a.connections} "
          f"seconds={secs:.2f} rate={out['rate']} msg/s p50={out['p50_ms']}ms "
          f"p99={out['p99_ms']}ms errors={errors}")
    if a.json:
        print(json.dumps(out))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
