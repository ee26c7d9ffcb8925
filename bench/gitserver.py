"""A Git server on loopback over the smart HTTP protocol: `git http-backend` behind a small threaded HTTP server.

The fleet-vs-Flux case (bench/fleet_flux.py) serves every source repository from here, so gitops-sync (the
`git` binary) and Flux's source-controller (go-git) fetch over the same real protocol; Flux accepts only
http(s) and ssh URLs, which rules out `git daemon`. Each request runs one `git http-backend` (CGI), as
Apache or nginx would; the repositories are bare, under one root directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit


class _Handler(BaseHTTPRequestHandler):
    server: GitHTTPServer
    protocol_version = "HTTP/1.0"  # one request per connection: the CGI output is streamed until EOF

    def do_GET(self) -> None:
        self._cgi()

    def do_POST(self) -> None:
        self._cgi()

    def log_message(self, format: str, *args: object) -> None:
        pass  # thousands of fetches: no line each

    def _cgi(self) -> None:
        url = urlsplit(self.path)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.server.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": url.path,
            "QUERY_STRING": url.query,
            "REMOTE_ADDR": self.client_address[0],
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
            "HTTP_GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
        }
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if not length and self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = self._read_chunked()
        env["CONTENT_LENGTH"] = str(len(body))
        proc = subprocess.run([self.server.backend, "http-backend"], input=body, env=env, capture_output=True)
        head, _, payload = proc.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = proc.stdout.partition(b"\n\n")
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.strip().split()[0])
            elif key:
                headers.append((key, value.strip()))
        if proc.returncode != 0 and not proc.stdout:
            status = 500
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _read_chunked(self) -> bytes:
        out = bytearray()
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                self.rfile.readline()
                return bytes(out)
            out += self.rfile.read(size)
            self.rfile.readline()


class GitHTTPServer(ThreadingHTTPServer):
    """Serves the bare repositories under `root` at http://127.0.0.1:<port>/<name>.git until `stop`."""

    daemon_threads = True
    request_queue_size = 256

    def __init__(self, root: Path) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root = root
        self.backend = shutil.which("git") or "git"
        self.requests = 0
        self._thread = threading.Thread(target=self.serve_forever, name="git-http", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def url(self, name: str) -> str:
        return f"{self.base_url}/{name}.git"

    def start(self) -> GitHTTPServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    def finish_request(self, request: object, client_address: object) -> None:
        self.requests += 1
        super().finish_request(request, client_address)  # type: ignore[arg-type]
