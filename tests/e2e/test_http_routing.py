"""Routing on every HTTP surface (docs/api.md "Errors"): a 405 lists every
method of the path in its Allow header, and each request of a pipelined
keep-alive connection is routed, allowed or refused on its own, however the
previous one was routed. The route is looked up once per request head and
that answer serves the allow-list, the body limit and the dispatch, so a
lookup carried over from the previous request, or an Allow header built
from the one route found, would show here.

One real petreld with the backend API, the director API and telemetry, raw
sockets for the pipelined and trickled requests."""

import socket

from conftest import free_port, http_request, read_response

BTOK = "routing-backend-token"
DTOK = "routing-director-token"


def start(petreld):
    return petreld({"components": ["backend-api", "director"],
                    "director": {"api": {"listen": f"127.0.0.1:{free_port()}"},
                                 "ring": {"listen": f"127.0.0.1:{free_port()}",
                                          "allow_unauthenticated": True}}},
                   env={"BACKEND_API_TOKEN": BTOK, "DIRECTOR_API_TOKEN": DTOK})


def connect(addr):
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10)
    return s, s.makefile("rb")


def request(method, path, token=None, body=None):
    head = f"{method} {path} HTTP/1.1\r\nHost: petrel\r\n"
    if token:
        head += f"Authorization: Bearer {token}\r\n"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return (head + "\r\n").encode() + (body or b"")


def test_405_allow_lists_every_method_of_the_path(petreld):
    d = start(petreld)
    director = d.config["director"]["api"]["listen"]
    cases = [
        # (address, method, path, token, Allow in registration order)
        (d.telemetry, "DELETE", "/debug/loglevel", None, "GET, HEAD, POST"),
        (d.telemetry, "POST", "/metrics", None, "GET, HEAD"),
        (director, "PUT", "/api/director/ring", DTOK, "GET, HEAD, POST, DELETE"),
        (director, "GET", "/api/director/backends/10.0.0.1", DTOK, "PATCH, DELETE"),
        (director, "PUT", "/api/director/backends", DTOK, "GET, HEAD, POST"),
        (d.backend, "DELETE", "/api/backend/dict/drivers", BTOK, "GET, HEAD"),
        (d.backend, "GET", "/api/backend/dict/drivers/lookup", BTOK, "POST"),
    ]
    for addr, method, path, token, allow in cases:
        r = http_request(addr, method, path, token=token)
        assert r.status == 405, (method, path, r)
        assert r.headers.get("allow") == allow, (method, path, r.headers)


def test_wrong_method_on_a_public_route_is_405_without_credentials(petreld):
    # The public routes answer a wrong method like the right one: 405, not
    # 401 (backend API token) or 403 (telemetry allow-list); the token
    # route next to them still asks for the token.
    d = start(petreld)
    d.stop()
    cfg = d.config
    cfg["telemetry"]["allowed_nets"] = ["10.0.0.0/8"]
    d.write_config(cfg)
    d.start()
    r = http_request(d.backend, "DELETE", "/api/backend/health")
    assert r.status == 405 and r.headers.get("allow") == "GET, HEAD", r
    assert http_request(d.backend, "DELETE", "/api/backend/version").status == 401
    r = http_request(d.telemetry, "POST", "/healthz", body=b"")
    assert r.status == 405 and r.headers.get("allow") == "GET, HEAD", r
    assert http_request(d.telemetry, "POST", "/metrics", body=b"").status == 403


def test_pipelined_requests_are_each_routed_and_authorised_on_their_own(petreld):
    d = start(petreld)
    director = d.config["director"]["api"]["listen"]
    # Backend API: a public route, then token routes without and with the
    # token, a 405, a 404, a parameter route whose dict name is the literal
    # of a sibling route, and HEAD on a GET route, all in one write.
    seq = [
        (request("GET", "/api/backend/health"), 200, False),
        (request("GET", "/api/backend/version"), 401, False),
        (request("GET", "/api/backend/version", BTOK), 200, False),
        (request("POST", "/api/backend/health", BTOK, b"{}"), 405, False),
        (request("GET", "/api/backend/health/x", BTOK), 404, False),
        (request("GET", "/api/backend/dict/drivers", BTOK), 200, False),
        (request("POST", "/api/backend/dict/drivers/lookup", BTOK, b'{"key":"k"}'), 404, False),
        (request("HEAD", "/api/backend/version", BTOK), 200, True),
        (request("GET", "/api/backend/health"), 200, False),
    ]
    s, f = connect(d.backend)
    with s:
        s.sendall(b"".join(raw for raw, _, _ in seq))
        got = []
        for raw, want, head_only in seq:
            r = read_head_only(f) if head_only else read_response(f)
            got.append(r.status)
        assert got == [want for _, want, _ in seq], got
    # Director API: parameter routes that differ only in the last segment
    # or the method, alternating with refusals.
    s, f = connect(director)
    with s:
        add = b'{"ip":"10.0.0.7","port":143}'
        seq = [
            (request("POST", "/api/director/backends", DTOK, add), 200),
            (request("POST", "/api/director/backends/10.0.0.7/down", DTOK, b""), 200),
            (request("POST", "/api/director/backends/10.0.0.7/up"), 401),
            (request("GET", "/api/director/backends/10.0.0.7", DTOK), 405),
            (request("POST", "/api/director/backends/10.0.0.8/up", DTOK, b""), 404),
            (request("POST", "/api/director/backends/10.0.0.7/up", DTOK, b""), 200),
            (request("GET", "/api/director/status", DTOK), 200),
        ]
        s.sendall(b"".join(raw for raw, _ in seq))
        answers = [read_response(f) for _ in seq]
        assert [a.status for a in answers] == [want for _, want in seq], answers
        backends = answers[-1].json()["backends"]
        assert [(b["ip"], b["up"]) for b in backends] == [("10.0.0.7", True)], backends


def test_a_head_trickled_in_pieces_is_routed_like_a_whole_one(petreld):
    d = start(petreld)
    s, f = connect(d.backend)
    with s:
        for raw, want in ((request("GET", "/api/backend/version"), 401),
                          (request("GET", "/api/backend/health"), 200),
                          (request("GET", "/api/backend/version", BTOK), 200)):
            for i in range(0, len(raw), 5):
                s.sendall(raw[i:i + 5])
            assert read_response(f).status == want


def read_head_only(f):
    """A response to HEAD: the head, and no body whatever Content-Length says."""
    line = f.readline()
    status = int(line.split(b" ")[1])
    headers = {}
    while True:
        line = f.readline()
        assert line, "connection closed inside the response head"
        if line in (b"\r\n", b"\n"):
            break
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()

    class Head:
        pass
    r = Head()
    r.status, r.headers = status, headers
    return r
