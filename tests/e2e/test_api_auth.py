"""The backend-plane API's front door (spec document 1, "Authentication",
"Errors", "Limits"): the allow-list before the bearer token, JSON error
bodies, the 1 MiB body limit, routing errors and keep-alive."""

import json
import socket

import pytest

from conftest import read_response

TOKEN = "e2e-secret-token"


@pytest.fixture
def api(petreld):
    return petreld(env={"BACKEND_API_TOKEN": TOKEN})


def assert_json_error(resp, status):
    assert resp.status == status, resp
    assert resp.headers.get("content-type", "").startswith("application/json"), resp.headers
    body = resp.json()
    assert isinstance(body, dict) and set(body) == {"error"}, body
    assert isinstance(body["error"], str) and body["error"], body
    return body["error"]


def test_token_required_for_version(api):
    assert_json_error(api.get("backend", "/api/backend/version"), 401)


def test_wrong_token_is_401(api):
    r = api.get("backend", "/api/backend/version", token=TOKEN + "x")
    assert_json_error(r, 401)
    assert r.headers.get("www-authenticate", "").startswith("Bearer")
    # A prefix of the right token is just as wrong.
    assert_json_error(api.get("backend", "/api/backend/version", token=TOKEN[:-1]), 401)
    # So is the right token under another scheme.
    r = api.get("backend", "/api/backend/version", headers={"Authorization": f"Basic {TOKEN}"})
    assert_json_error(r, 401)


def test_right_token_is_200(api):
    r = api.get("backend", "/api/backend/version", token=TOKEN)
    assert r.status == 200, r
    body = r.json()
    assert body["version"] and body["api"] == 1, body


def test_health_needs_no_token(api):
    r = api.get("backend", "/api/backend/health")
    assert r.status == 200, r
    assert r.json() == {"status": "ok"}


def test_empty_token_disables_auth_with_a_warning(petreld):
    d = petreld(env={"BACKEND_API_TOKEN": ""})
    assert d.get("backend", "/api/backend/version").status == 200
    assert "authentication disabled" in d.stderr()


@pytest.fixture
def walled(petreld):
    """A listener that only admits 10.0.0.0/8; the tests connect from 127.0.0.1."""
    return petreld({"backend_api": {"allowed_nets": ["10.0.0.0/8"]}},
                   env={"BACKEND_API_TOKEN": TOKEN})


def test_outside_allowed_nets_is_403_even_with_token(walled):
    msg = assert_json_error(walled.get("backend", "/api/backend/version", token=TOKEN), 403)
    assert "127.0.0.1" in msg


def test_allow_list_is_checked_before_token(walled):
    # No token and outside the networks: the answer is 403, not 401.
    assert_json_error(walled.get("backend", "/api/backend/version"), 403)
    assert_json_error(walled.get("backend", "/api/backend/version", token="wrong"), 403)


def test_inside_allowed_nets_token_still_required(petreld):
    d = petreld({"backend_api": {"allowed_nets": ["10.0.0.0/8", "127.0.0.0/8"]}},
                env={"BACKEND_API_TOKEN": TOKEN})
    assert_json_error(d.get("backend", "/api/backend/version"), 401)
    assert d.get("backend", "/api/backend/version", token=TOKEN).status == 200


def test_unknown_path_is_404(api):
    msg = assert_json_error(api.get("backend", "/api/backend/nope", token=TOKEN), 404)
    assert "/api/backend/nope" in msg


def test_wrong_method_is_405_with_allow(api):
    r = api.post("backend", "/api/backend/version", body={}, token=TOKEN)
    assert_json_error(r, 405)
    allow = {m.strip() for m in r.headers.get("allow", "").split(",")}
    assert "GET" in allow, r.headers
    assert "POST" not in allow, r.headers


def _raw_connect(addr):
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10)
    return s


def _send_ignoring_reset(sock, data):
    """A client that keeps uploading after the server answered: the server may
    reset the rest, but the answer must already be on its way."""
    try:
        sock.sendall(data)
    except (ConnectionResetError, BrokenPipeError):
        pass


OVERSIZED = b'{"blob": "' + b"a" * ((1 << 20) + 16) + b'"}'


def test_body_over_1mib_content_length_is_413(api):
    s = _raw_connect(api.backend)
    with s:
        head = (f"POST /api/backend/version HTTP/1.1\r\nHost: petrel\r\n"
                f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(OVERSIZED)}\r\n\r\n").encode()
        _send_ignoring_reset(s, head + OVERSIZED)
        r = read_response(s.makefile("rb"))
    msg = assert_json_error(r, 413)
    assert "1048576" in msg


def test_body_over_1mib_chunked_is_413(api):
    s = _raw_connect(api.backend)
    with s:
        head = (f"POST /api/backend/version HTTP/1.1\r\nHost: petrel\r\n"
                f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
                f"Transfer-Encoding: chunked\r\n\r\n").encode()
        chunks = b""
        step = 64 * 1024
        for i in range(0, len(OVERSIZED), step):
            part = OVERSIZED[i:i + step]
            chunks += b"%x\r\n" % len(part) + part + b"\r\n"
        chunks += b"0\r\n\r\n"
        _send_ignoring_reset(s, head + chunks)
        r = read_response(s.makefile("rb"))
    assert_json_error(r, 413)


def test_body_of_exactly_1mib_is_not_413(api):
    # The limit is "1 MiB per request": a body of exactly 1 MiB is allowed
    # (the route then answers 405 because version is GET only).
    body = b'{"blob": "' + b"a" * ((1 << 20) - 12) + b'"}'
    assert len(body) == 1 << 20
    r = api.post("backend", "/api/backend/version", body=body, token=TOKEN,
                 headers={"Content-Type": "application/json"})
    assert_json_error(r, 405)


def test_pipelined_keep_alive_requests(api):
    s = _raw_connect(api.backend)
    with s:
        reqs = b"".join(
            (f"GET {path} HTTP/1.1\r\nHost: petrel\r\nAuthorization: Bearer {TOKEN}\r\n\r\n")
            .encode() for path in ("/api/backend/health", "/api/backend/version",
                                   "/api/backend/missing", "/api/backend/health"))
        s.sendall(reqs)  # all four in one write
        f = s.makefile("rb")
        answers = [read_response(f) for _ in range(4)]
        assert [a.status for a in answers] == [200, 200, 404, 200], answers
        assert answers[0].json() == {"status": "ok"}
        assert "version" in answers[1].json()
        assert "error" in answers[2].json()
        # The connection is still open for more.
        s.sendall(b"GET /api/backend/health HTTP/1.1\r\nHost: petrel\r\n\r\n")
        assert read_response(f).status == 200
        # Connection: close is honoured.
        s.sendall(b"GET /api/backend/health HTTP/1.1\r\nHost: petrel\r\nConnection: close\r\n\r\n")
        last = read_response(f)
        assert last.status == 200
        assert last.headers.get("connection", "").lower() == "close"
        assert f.read() == b""


def test_malformed_request_line_is_400_json(api):
    s = _raw_connect(api.backend)
    with s:
        s.sendall(b"THIS IS NOT HTTP\r\n\r\n")
        r = read_response(s.makefile("rb"))
    assert_json_error(r, 400)


def test_error_bodies_are_json_everywhere(api, walled):
    for resp, status in (
        (api.get("backend", "/api/backend/version"), 401),
        (walled.get("backend", "/api/backend/version", token=TOKEN), 403),
        (api.get("backend", "/nope", token=TOKEN), 404),
        (api.post("backend", "/api/backend/health", body="{}", token=TOKEN), 405),
    ):
        assert_json_error(resp, status)
        json.dumps(resp.json())


@pytest.mark.parametrize("framing", [
    b"5\nhello\r\n0\r\n\r\n",      # bare LF after the chunk size
    b"5\r\nhello\n0\r\n\r\n",      # bare LF after the chunk data
    b"5\r\nhello\r\n0\n\r\n",      # bare LF after the last chunk
    b"5\r\nhello\r\n0\r\nX: y\n\r\n",  # bare LF ending a trailer
])
def test_chunked_lines_need_crlf(api, framing):
    """A chunk line ended by a bare LF is 400 (RFC 9112 7.1 requires CRLF):
    a proxy in front that frames the body differently cannot smuggle a
    second request past it. The same body framed with CRLF is taken."""
    def send(body):
        s = _raw_connect(api.backend)
        with s:
            head = (f"POST /api/backend/version HTTP/1.1\r\nHost: petrel\r\n"
                    f"Authorization: Bearer {TOKEN}\r\n"
                    f"Transfer-Encoding: chunked\r\n\r\n").encode()
            _send_ignoring_reset(s, head + body)
            return read_response(s.makefile("rb"))
    assert_json_error(send(framing), 400)
    # version is GET only: a well-framed body reaches the router (405).
    assert_json_error(send(b"5\r\nhello\r\n0\r\n\r\n"), 405)
