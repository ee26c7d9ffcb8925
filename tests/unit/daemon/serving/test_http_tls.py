"""HTTPS on the daemon's port: real sockets and real certificates (openssl), TLS 1.2+, a certificate reloaded
when its files change (a bad one is not taken), plain HTTP refused, a trickled handshake cut at the request
deadline, keep-alive and an 8 MB answer over TLS."""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitops_sync.daemon.runtime.auth import Decision
from gitops_sync.daemon.serving.http import HttpServer, Limits
from gitops_sync.daemon.serving.tls import Certificates, TlsError
from tests.reliability.http_target import stand_in


def make_cert(directory: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (its own CA), and its key."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "tls.crt", directory / "tls.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-subj", f"/CN={name}", "-addext", "subjectAltName=IP:127.0.0.1", "-days", "1",
         "-keyout", str(key), "-out", str(cert)],
        capture_output=True, check=True, timeout=30,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[HttpServer, Path]]:
    """An HTTPS server whose certificate lives in tmp_path/live (rotated by replacing the files)."""
    cert, key = make_cert(tmp_path / "live", "first")
    srv = HttpServer(
        "127.0.0.1:0",
        stand_in(),
        limits=Limits(request_timeout=1, idle_timeout=5),
        certificates=Certificates(cert, key),
    ).start()
    try:
        yield srv, tmp_path / "live"
    finally:
        srv.stop()


def client(cafile: Path, maximum: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(cafile))
    if maximum is not None:
        ctx.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
        ctx.maximum_version = maximum
    return ctx


def get(port: int, cafile: Path, path: str = "/healthz") -> tuple[int, bytes, str]:
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=client(cafile), timeout=10)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        sock = conn.sock
        assert isinstance(sock, ssl.SSLSocket)
        subject = dict(x[0] for x in sock.getpeercert()["subject"])["commonName"]  # type: ignore[index,misc]
        return r.status, r.read(), str(subject)
    finally:
        conn.close()


def test_serves_https_with_the_certificate(served: tuple[HttpServer, Path]) -> None:
    srv, live = served
    status, body, subject = get(srv.port, live / "tls.crt")
    assert (status, body, subject) == (200, b"ok\n", "first")


def test_keep_alive_and_a_large_answer_over_tls(served: tuple[HttpServer, Path]) -> None:
    """~8 MB, more than socket buffers hold: the sends that OpenSSL cannot finish at once are retried."""
    srv, live = served
    conn = http.client.HTTPSConnection("127.0.0.1", srv.port, context=client(live / "tls.crt"), timeout=30)
    try:
        for _ in range(2):
            conn.request("GET", "/status?history=all")
            r = conn.getresponse()
            assert r.status == 200
            assert len(json.loads(r.read())["objects"]) == 8000
        conn.request("GET", "/healthz")
        assert conn.getresponse().read() == b"ok\n"
    finally:
        conn.close()


def test_tls_below_1_2_is_refused(served: tuple[HttpServer, Path]) -> None:
    srv, live = served
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as raw:
        old = client(live / "tls.crt", maximum=ssl.TLSVersion.TLSv1_1)
        old.set_ciphers("ALL:@SECLEVEL=0")
        with pytest.raises(ssl.SSLError):
            old.wrap_socket(raw, server_hostname="127.0.0.1")
    tls12 = client(live / "tls.crt", maximum=ssl.TLSVersion.TLSv1_2)
    with (
        socket.create_connection(("127.0.0.1", srv.port), timeout=5) as raw,
        tls12.wrap_socket(raw, server_hostname="127.0.0.1") as s,
    ):
        assert s.version() == "TLSv1.2"


def test_plain_http_on_the_tls_port_gets_no_http_answer(served: tuple[HttpServer, Path]) -> None:
    srv, _ = served
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        try:
            while chunk := s.recv(4096):
                data += chunk
        except ConnectionResetError:
            pass
    assert not data.startswith(b"HTTP/"), data
    assert get(srv.port, served[1] / "tls.crt")[0] == 200  # and the server goes on


def _replace(live: Path, source: Path) -> None:
    """As a Secret volume rotates: the new files appear at the same paths at once (os.replace)."""
    for name in ("tls.crt", "tls.key"):
        tmp = live / f".{name}.new"
        tmp.write_bytes((source / name).read_bytes())
        os.replace(tmp, live / name)


def _until(check: object, timeout: float = 6.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():  # type: ignore[operator]
                return True
        except ssl.SSLCertVerificationError:  # the client trusts only the new certificate: not served yet
            pass
        time.sleep(0.2)
    return False


def test_a_rotated_certificate_serves_the_next_connection(served: tuple[HttpServer, Path], tmp_path: Path) -> None:
    srv, live = served
    make_cert(tmp_path / "second", "second")
    _replace(live, tmp_path / "second")
    assert _until(lambda: get(srv.port, live / "tls.crt")[2] == "second")


def test_a_broken_certificate_is_not_taken(served: tuple[HttpServer, Path], tmp_path: Path) -> None:
    """A half-written rotation keeps the old certificate; the completed one is then taken."""
    srv, live = served
    first = (live / "tls.crt").read_bytes()
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "tls.crt").write_bytes(b"-----BEGIN CERTIFICATE-----\nMIIB\n")
    (tmp_path / "broken" / "tls.key").write_bytes((live / "tls.key").read_bytes())
    _replace(live, tmp_path / "broken")
    time.sleep(1.5)  # past a reload check
    (live / "first.crt").write_bytes(first)
    assert get(srv.port, live / "first.crt")[2] == "first"
    make_cert(tmp_path / "third", "third")
    _replace(live, tmp_path / "third")
    assert _until(lambda: get(srv.port, live / "tls.crt")[2] == "third")


def _closed_by_server(s: socket.socket, wait: float) -> bool:
    s.settimeout(wait)
    try:
        return s.recv(1) == b""
    except (TimeoutError, BlockingIOError):
        return False
    except ConnectionResetError:
        return True


def test_a_trickled_or_silent_handshake_is_cut_at_the_request_deadline(served: tuple[HttpServer, Path]) -> None:
    """request_timeout 1 s, idle_timeout 5 s: a client that connects and sends half a ClientHello, or
    nothing, is closed at the request deadline, not left to the idle timeout."""
    srv, _ = served
    t0 = time.monotonic()
    with (
        socket.create_connection(("127.0.0.1", srv.port)) as trickled,
        socket.create_connection(("127.0.0.1", srv.port)) as silent,
    ):
        trickled.sendall(b"\x16\x03\x01\x00")  # the first bytes of a TLS record
        assert _closed_by_server(trickled, 4) and _closed_by_server(silent, 4)
    assert time.monotonic() - t0 < 4


def test_missing_files_fail_at_start_naming_them(tmp_path: Path) -> None:
    with pytest.raises(TlsError, match=r"cannot load the TLS certificate .*nope\.crt"):
        Certificates(tmp_path / "nope.crt", tmp_path / "nope.key")


def test_the_sign_in_cookie_is_secure_over_tls(tmp_path: Path) -> None:
    """The page's token cookie carries `Secure` when the port is HTTPS (a browser never sends it in clear)."""
    cert, key = make_cert(tmp_path, "signin")
    srv = HttpServer(
        "127.0.0.1:0", stand_in(), auth=lambda _path, _header: Decision(200, "ok"), certificates=Certificates(cert, key)
    ).start()
    try:
        conn = http.client.HTTPSConnection("127.0.0.1", srv.port, context=client(cert), timeout=10)
        body = "token=abc.def-ghi"
        conn.request("POST", "/login", body, {"Content-Type": "application/x-www-form-urlencoded"})
        r = conn.getresponse()
        assert r.status == 303
        assert r.getheader("Set-Cookie", "").endswith("; HttpOnly; SameSite=Strict; Secure")
        conn.close()
    finally:
        srv.stop()
