"""Internal TLS on the backend-plane API (spec document 1, "Authentication"
item 3): mutual TLS with the cluster's internal CA, and start-up failures that
name the file at fault."""

import socket
import ssl

import pytest

from conftest import default_config, http_request, merge, run_petrelctl, run_petreld, to_yaml

TOKEN = "tls-token"


def tls_section(pki, **extra):
    section = {
        "enabled": True,
        "cert_file": str(pki / "server.pem"),
        "key_file": str(pki / "server.key"),
        "ca_file": str(pki / "ca.pem"),
    }
    section.update(extra)
    return section


def client_context(pki, with_cert):
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if with_cert:
        ctx.load_cert_chain(str(pki / "client.pem"), str(pki / "client.key"))
    return ctx


@pytest.fixture
def mtls(petreld, pki):
    return petreld({"internal_tls": tls_section(pki)}, env={"BACKEND_API_TOKEN": TOKEN})


def test_client_with_certificate_gets_200(mtls, pki):
    ctx = client_context(pki, with_cert=True)
    r = http_request(mtls.backend, "GET", "/api/backend/health", context=ctx)
    assert r.status == 200, r
    assert r.json() == {"status": "ok"}
    r = http_request(mtls.backend, "GET", "/api/backend/version", token=TOKEN, context=ctx)
    assert r.status == 200, r
    # TLS does not replace the bearer token.
    r = http_request(mtls.backend, "GET", "/api/backend/version", context=ctx)
    assert r.status == 401, r


def test_client_without_certificate_is_refused(mtls, pki):
    ctx = client_context(pki, with_cert=False)
    # With TLS 1.3 the server's verdict on the (absent) client certificate may
    # arrive after the client's side of the handshake: either way no HTTP answer.
    with pytest.raises((ssl.SSLError, ConnectionError)):
        http_request(mtls.backend, "GET", "/api/backend/health", context=ctx, timeout=10)


def test_client_certificate_from_another_ca_is_refused(mtls, pki, tmp_path):
    import subprocess
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                    "rogue.key", "-out", "rogue.pem", "-days", "1", "-subj", "/CN=rogue"],
                   cwd=tmp_path, check=True, capture_output=True)
    ctx = client_context(pki, with_cert=False)
    ctx.load_cert_chain(str(tmp_path / "rogue.pem"), str(tmp_path / "rogue.key"))
    with pytest.raises((ssl.SSLError, ConnectionError)):
        http_request(mtls.backend, "GET", "/api/backend/health", context=ctx, timeout=10)


def test_plain_http_to_tls_port_gets_no_http_answer(mtls):
    host, port = mtls.backend.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"GET /api/backend/health HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        try:
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        except ConnectionError:
            pass
    assert not data.startswith(b"HTTP/"), data


def test_readiness_passes_against_mtls_listener(mtls, pki):
    # The listener check completes the handshake with the server's own
    # certificate as a client certificate.
    r = mtls.get("telemetry", "/readyz")
    assert r.status == 200, r
    checks = {c["name"]: c for c in r.json()["checks"]}
    assert checks["backend-api-listener"]["ok"] is True


def test_petrelctl_over_mtls(mtls, pki):
    url = f"https://{mtls.backend}"
    ok = run_petrelctl(["--backend-url", url, "--backend-token", TOKEN, "--cacert",
                        str(pki / "ca.pem"), "--cert", str(pki / "client.pem"), "--key",
                        str(pki / "client.key"), "backend", "version"])
    assert ok.returncode == 0, ok.stderr
    assert "version:" in ok.stdout
    no_cert = run_petrelctl(["--backend-url", url, "--backend-token", TOKEN, "--cacert",
                             str(pki / "ca.pem"), "backend", "version"])
    assert no_cert.returncode != 0, no_cert.stdout
    assert no_cert.stderr.strip(), "petrelctl failed without saying why"


def start_expecting_failure(tmp_path, overrides):
    cfg = merge(default_config(), overrides)
    path = tmp_path / "bad-tls.yaml"
    path.write_text(to_yaml(cfg) + "\n")
    proc = run_petreld(["-c", str(path)])
    return proc


@pytest.mark.parametrize("which", ["cert_file", "key_file", "ca_file"])
def test_missing_tls_file_stops_startup_naming_it(tmp_path, pki, which):
    missing = str(tmp_path / f"no-such-{which}.pem")
    proc = start_expecting_failure(tmp_path, {"internal_tls": tls_section(pki, **{which: missing})})
    assert proc.returncode != 0, proc.stderr
    assert missing in proc.stderr, proc.stderr


def test_garbage_certificate_stops_startup_naming_it(tmp_path, pki):
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("-----BEGIN CERTIFICATE-----\nnot base64 at all\n"
                       "-----END CERTIFICATE-----\n")
    proc = start_expecting_failure(tmp_path, {"internal_tls": tls_section(pki, cert_file=str(garbage))})
    assert proc.returncode != 0, proc.stderr
    assert str(garbage) in proc.stderr, proc.stderr


def test_key_not_matching_certificate_stops_startup(tmp_path, pki):
    proc = start_expecting_failure(tmp_path, {"internal_tls": tls_section(
        pki, key_file=str(pki / "client.key"))})
    assert proc.returncode != 0, proc.stderr
    assert str(pki / "client.key") in proc.stderr, proc.stderr


def test_enabled_without_files_is_a_config_error(tmp_path):
    proc = start_expecting_failure(tmp_path, {"internal_tls": {"enabled": True}})
    assert proc.returncode == 2, proc.stderr
    assert "internal_tls" in proc.stderr and "cert_file" in proc.stderr, proc.stderr
