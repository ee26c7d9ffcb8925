"""Real Git servers on loopback for the private-repository tests: sshd and `git http-backend` over HTTPS.

`SshGitServer`: Debian's OpenSSH `sshd`, run in the foreground on a free port with a throwaway host key;
the current user logs in with a throwaway client key listed in its own AuthorizedKeysFile (no password
login), and git runs `git-upload-pack` over it. `HttpsGitServer`: `git http-backend` (CGI) behind a small
Python HTTPS server that wants basic auth or a bearer token (changeable while it runs: a rotated
credential), its certificate signed by a throwaway CA. Both serve the bare repositories made by
`bare_repository`. By hand: `python -m tests.gitservers DIR` starts both and prints how to fetch.
"""

from __future__ import annotations

import base64
import getpass
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
ACTOR_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str, log: Path, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited ({proc.returncode}): {log.read_text()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port} within {timeout}s: {log.read_text()[-2000:]}")


def _git(*args: str, cwd: Path | None = None) -> str:
    env = {**os.environ, **ACTOR_ENV}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def bare_repository(root: Path, name: str, files: dict[str, str]) -> Path:
    """A bare repository `root/<name>.git` whose branch main holds `files`; `commit_to` adds more."""
    work = root / f".work-{name}"
    work.mkdir(parents=True)
    _git("init", "-q", "-b", "main", str(work))
    bare = root / f"{name}.git"
    _git("init", "-q", "--bare", "-b", "main", str(bare))
    _git("remote", "add", "origin", str(bare), cwd=work)
    commit_to(bare, files, "initial")
    return bare


def commit_to(bare: Path, files: dict[str, str], message: str = "change") -> str:
    """Commit `files` on main of `bare` (through its work tree beside it) and push; returns the SHA."""
    work = bare.parent / f".work-{bare.name.removesuffix('.git')}"
    for rel, text in files.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    _git("add", "--all", cwd=work)
    _git("commit", "-q", "-m", message, cwd=work)
    _git("push", "-q", "origin", "main", cwd=work)
    return _git("rev-parse", "HEAD", cwd=work).strip()


def keypair(path: Path, comment: str = "gitops-sync-test") -> Path:
    """A passphrase-less ed25519 key `path` (and `path.pub`)."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True, capture_output=True
    )
    return path


class SshGitServer:
    """sshd on 127.0.0.1:<port>, key auth only, for the current user; repositories under `repos`."""

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.repos = self.dir / "repos"
        self.repos.mkdir(exist_ok=True)
        self.port = free_port()
        self.user = getpass.getuser()
        self.host_key = keypair(self.dir / "host_key", "host")
        self.client_key = keypair(self.dir / "client_key", "client")
        self.authorized = self.dir / "authorized_keys"
        self.authorize(self.client_key)
        self.log = self.dir / "sshd.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def authorize(self, *keys: Path, delay: float = 0) -> None:
        """Exactly these keys may log in from now on (sshd reads the file at each login); `delay`: each git
        command waits that long first (a fetch slow enough to look at while it runs)."""
        opts = "restrict" + (f',command="sleep {delay:g}; exec sh -c \\"$SSH_ORIGINAL_COMMAND\\""' if delay else "")
        lines = [f"{opts} {k.with_suffix('.pub').read_text().strip()}" for k in keys]
        self.authorized.write_text("\n".join(lines) + "\n")

    @property
    def known_hosts(self) -> str:
        """The known_hosts line of this server (`[127.0.0.1]:port` and its host key)."""
        key = " ".join((self.host_key.with_suffix(".pub")).read_text().split()[:2])
        return f"[127.0.0.1]:{self.port} {key}\n"

    def url(self, bare: Path) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}{bare}"

    def start(self) -> SshGitServer:
        config = self.dir / "sshd_config"
        config.write_text(
            "\n".join(
                [
                    f"Port {self.port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {self.host_key}",
                    f"PidFile {self.dir / 'sshd.pid'}",
                    f"AuthorizedKeysFile {self.authorized}",
                    "StrictModes no",  # the test's directory lies under /tmp (world-writable)
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PubkeyAuthentication yes",
                    "UsePAM no",
                    "PermitRootLogin prohibit-password",
                    "LogLevel VERBOSE",
                    "",
                ]
            )
        )
        if os.getuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        with self.log.open("wb") as out:
            self._proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=out, stderr=out)
        _wait_port(self.port, self._proc, "sshd", self.log)
        return self

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_tls(workdir: Path) -> tuple[Path, Path, Path]:
    """(ca.crt, server.crt, server.key): a throwaway CA and a certificate for 127.0.0.1 and localhost."""
    ca_key, ca, key, csr, crt = (workdir / n for n in ("ca.key", "ca.crt", "server.key", "server.csr", "server.crt"))
    _openssl(
        *("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"),
        *("-subj", "/CN=gitops-sync test CA", "-keyout", str(ca_key), "-out", str(ca)),
    )
    _openssl(
        *("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"),
        *("-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(csr)),
    )
    ext = workdir / "server.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    _openssl(
        *("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial"),
        *("-days", "2", "-extfile", str(ext), "-out", str(crt)),
    )
    return ca, crt, key


class HttpsGitServer:
    """`git http-backend` behind HTTPS on 127.0.0.1:<port>: basic auth (`users`) or a bearer token (`tokens`)
    required; both may be changed while it runs. `seen_auth` counts the schemes of accepted requests.
    `tls=False`: plain HTTP (for tests of what git is handed, where TLS is beside the point)."""

    def __init__(self, workdir: Path, *, tls: bool = True) -> None:
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.repos = self.dir / "repos"
        self.repos.mkdir(exist_ok=True)
        self.users: dict[str, str] = {}
        self.tokens: set[str] = set()
        self.seen_auth: dict[str, int] = {}
        self.delay = 0.0  # seconds each request waits first (a fetch slow enough to look at while it runs)
        self.tls = tls
        self.ca, self._crt, self._key = make_tls(self.dir) if tls else (Path(), Path(), Path())
        self._server: ThreadingHTTPServer | None = None
        self.port = 0

    def url(self, bare: Path) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/{bare.relative_to(self.repos)}"

    def _allowed(self, header: str) -> str:
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer" and value.strip() in self.tokens:
            return "bearer"
        if scheme.lower() == "basic":
            try:
                user, _, password = base64.b64decode(value.strip()).decode().partition(":")
            except ValueError:
                return ""
            if user in self.users and self.users[user] == password:
                return "basic"
        return ""

    def start(self) -> HttpsGitServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:  # quiet: tests read no access log
                pass

            def do_GET(self) -> None:
                self._serve()

            def do_POST(self) -> None:
                self._serve()

            def _serve(self) -> None:
                time.sleep(server.delay)
                scheme = server._allowed(self.headers.get("Authorization") or "")
                if not scheme:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="git"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                server.seen_auth[scheme] = server.seen_auth.get(scheme, 0) + 1
                path, _, query = self.path.partition("?")
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                env = {
                    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                    "GIT_PROJECT_ROOT": str(server.repos),
                    "GIT_HTTP_EXPORT_ALL": "1",
                    "PATH_INFO": path,
                    "QUERY_STRING": query,
                    "REQUEST_METHOD": self.command,
                    "CONTENT_TYPE": self.headers.get("Content-Type") or "",
                    "CONTENT_LENGTH": str(len(body)),
                    "REMOTE_USER": "git",
                    "REMOTE_ADDR": "127.0.0.1",
                    "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding") or "",
                    "GIT_PROTOCOL": self.headers.get("Git-Protocol") or "",
                    "GIT_HTTP_MAX_REQUEST_BUFFER": "100M",
                }
                out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True).stdout
                head, _, payload = out.partition(b"\r\n\r\n")
                status, headers = 200, []
                for line in head.decode("latin-1").split("\r\n"):
                    name, _, value = line.partition(":")
                    if name.lower() == "status":
                        status = int(value.strip().split()[0])
                    elif name:
                        headers.append((name, value.strip()))
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if self.tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(self._crt, self._key)
            httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
        self.port = int(httpd.server_address[1])
        self._server = httpd
        threading.Thread(target=httpd.serve_forever, name="https-git", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


@pytest.fixture(scope="module")
def ssh_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshGitServer]:
    """sshd on loopback for the module's tests (skipped only where Debian's openssh-server is missing)."""
    if not Path(SSHD).exists():
        pytest.fail(f"{SSHD} is missing: install Debian's openssh-server (.ci/run does)")
    server = SshGitServer(tmp_path_factory.mktemp("sshd")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def https_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpsGitServer]:
    server = HttpsGitServer(tmp_path_factory.mktemp("https-git")).start()
    yield server
    server.stop()


def main(argv: list[str]) -> int:
    """Start both servers with one repository each, print how to fetch them, serve until interrupted."""
    root = Path(argv[0] if argv else "gitservers").resolve()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stop sshd on SIGTERM too (the `finally` below)
    ssh, https = SshGitServer(root / "ssh").start(), HttpsGitServer(root / "https").start()
    https.users["user"] = "secret"
    files = {"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: private}\ndata: {a: '1'}\n"}
    s_repo, h_repo = bare_repository(ssh.repos, "demo", files), bare_repository(https.repos, "demo", files)
    (root / "known_hosts").write_text(ssh.known_hosts)
    print(f"ssh:   {ssh.url(s_repo)}  key {ssh.client_key}  known_hosts {root / 'known_hosts'}")
    print(f"https: {https.url(h_repo)}  user/secret  CA {https.ca} (GIT_SSL_CAINFO)")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    finally:
        ssh.stop()
        https.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
