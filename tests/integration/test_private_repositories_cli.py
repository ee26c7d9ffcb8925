"""Private repositories from the CLI, against real servers on loopback: sshd and `git http-backend` over HTTPS.

Right, wrong and missing credentials of each kind, host keys refused when unknown or changed; a secret
never reaches a command line (/proc/*/cmdline read while a fetch runs), the output, an error or the clone
cache (its key is the URL alone: a rotated credential keeps it).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import KubeCluster
from tests.gitservers import HttpsGitServer, SshGitServer, bare_repository, commit_to, https_server, keypair, ssh_server
from tests.integration.daemon_support import Daemon, configmap, wait_until
from tests.integration.test_fleet import cm_data

__all__ = ["https_server", "ssh_server"]  # the module-scoped fixtures

PASSWORD = "pw-9c1e77f0d2-never-shown"
TOKEN = "tok-5be3a0c4e1-never-shown"
FILES = {"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: private-cm}\ndata: {a: '1'}\n"}


def gitops(*args: str, env: dict[str, str], home: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`gitops-sync ARGS` with a HOME of its own (no ~/.ssh of the machine's) and `env` on top."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GITOPS_SYNC_", "GIT_", "SSH_"))}
    return subprocess.run(
        [sys.executable, "-m", "gitops_sync", *args],
        env={**base, "HOME": str(home), **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


@pytest.fixture
def https_repo(https_server: HttpsGitServer, tmp_path: Path) -> Iterator[str]:
    https_server.users = {"deploy": PASSWORD}
    https_server.tokens = {TOKEN}
    yield https_server.url(bare_repository(https_server.repos, tmp_path.name, FILES))


@pytest.fixture
def ssh_repo(ssh_server: SshGitServer, tmp_path: Path) -> Iterator[str]:
    ssh_server.authorize(ssh_server.client_key)
    yield ssh_server.url(bare_repository(ssh_server.repos, tmp_path.name, FILES))


def render(repo: str, tmp_path: Path, home: Path, env: dict[str, str], *flags: str) -> subprocess.CompletedProcess[str]:
    return gitops("render", "--repo", repo, "--cache-dir", str(tmp_path / "cache"), *flags, env=env, home=home)


def ca_env(server: HttpsGitServer) -> dict[str, str]:
    return {"GIT_SSL_CAINFO": str(server.ca)}


# -- HTTPS -------------------------------------------------------------------------------------------


def test_https_basic_auth_from_the_environment_and_from_a_file(
    https_server: HttpsGitServer, https_repo: str, tmp_path: Path, home: Path
) -> None:
    env = {**ca_env(https_server), "GITOPS_SYNC_GIT_USERNAME": "deploy", "GITOPS_SYNC_GIT_PASSWORD": PASSWORD}
    r = render(https_repo, tmp_path, home, env)
    assert r.returncode == 0, r.stderr
    assert "private-cm" in r.stdout
    secret_file = tmp_path / "password"
    secret_file.write_text(PASSWORD + "\n")
    r = render(
        https_repo, tmp_path, home, ca_env(https_server), "--git-username=deploy", f"--git-password-file={secret_file}"
    )
    assert r.returncode == 0, r.stderr
    assert "private-cm" in r.stdout


@pytest.mark.parametrize("password", ["wrong-password", None])
def test_https_wrong_or_missing_password_is_refused_and_never_shown(
    https_server: HttpsGitServer, https_repo: str, tmp_path: Path, home: Path, password: str | None
) -> None:
    env = {**ca_env(https_server), "GITOPS_SYNC_GIT_USERNAME": "deploy"}
    if password:
        env["GITOPS_SYNC_GIT_PASSWORD"] = password
    r = render(https_repo, tmp_path, home, env)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "authentication failed" in r.stderr and "127.0.0.1" in r.stderr, r.stderr
    assert password is None or password not in r.stdout + r.stderr


def test_https_bearer_token(https_server: HttpsGitServer, https_repo: str, tmp_path: Path, home: Path) -> None:
    before = https_server.seen_auth.get("bearer", 0)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    r = render(https_repo, tmp_path, home, ca_env(https_server), f"--git-bearer-token-file={token_file}")
    assert r.returncode == 0, r.stderr
    assert https_server.seen_auth.get("bearer", 0) > before  # sent as a bearer token, not basic auth
    r = render(https_repo, tmp_path, home, {**ca_env(https_server), "GITOPS_SYNC_GIT_BEARER_TOKEN": "not-" + TOKEN})
    assert r.returncode == 2 and "authentication failed" in r.stderr, r.stderr
    assert TOKEN not in r.stdout + r.stderr


def test_an_https_server_whose_certificate_no_trusted_ca_signed_is_refused(
    https_repo: str, tmp_path: Path, home: Path
) -> None:
    r = render(https_repo, tmp_path, home, {"GITOPS_SYNC_GIT_USERNAME": "deploy", "GITOPS_SYNC_GIT_PASSWORD": PASSWORD})
    assert r.returncode == 2 and "certificate" in r.stderr.lower(), r.stderr
    assert PASSWORD not in r.stdout + r.stderr


def cmdlines_during(run: Callable[[], object]) -> list[str]:
    """Every command line seen in /proc while `run` runs (read as fast as the machine lets us)."""
    seen: set[str] = set()
    thread = threading.Thread(target=run)
    thread.start()
    while thread.is_alive():
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    seen.add((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
    thread.join()
    return sorted(seen)


def test_a_secret_is_in_no_command_line_output_or_cache_and_a_rotated_one_keeps_the_cache(
    https_server: HttpsGitServer, https_repo: str, tmp_path: Path, home: Path
) -> None:
    https_server.delay = 0.5  # each request waits: git's processes live long enough to be seen
    results: list[subprocess.CompletedProcess[str]] = []
    env = {**ca_env(https_server), "GITOPS_SYNC_GIT_USERNAME": "deploy", "GITOPS_SYNC_GIT_PASSWORD": PASSWORD}
    try:
        lines = cmdlines_during(lambda: results.append(render(https_repo, tmp_path, home, env)))
    finally:
        https_server.delay = 0
    assert results[0].returncode == 0, results[0].stderr
    fetches = [ln for ln in lines if "remote-https" in ln or ("git" in ln and " fetch " in ln)]
    assert fetches, "no git fetch was seen running: the check below would prove nothing"
    assert not [ln for ln in lines if PASSWORD in ln], "the password reached a command line"
    cache = tmp_path / "cache"
    for path in cache.rglob("*"):
        if path.is_file():
            assert PASSWORD.encode() not in path.read_bytes(), f"the password is in {path}"
    keyed = hashlib.sha256(https_repo.encode()).hexdigest()[:24]
    assert (cache / keyed).is_dir(), sorted(p.name for p in cache.iterdir())
    # Rotated: the server now wants another password, the next fetch uses it, in the same cache entry.
    https_server.users = {"deploy": PASSWORD + "-2"}
    more = {"more.yaml": FILES["cm.yaml"].replace("private-cm", "more-cm")}
    commit_to(https_server.repos / f"{tmp_path.name}.git", more)
    r = render(https_repo, tmp_path, home, {**env, "GITOPS_SYNC_GIT_PASSWORD": PASSWORD + "-2"})
    assert r.returncode == 0 and "more-cm" in r.stdout, r.stderr
    assert sorted(p.name for p in cache.iterdir() if p.name != "renders") == [keyed]


# -- SSH ---------------------------------------------------------------------------------------------


def known_hosts_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "known_hosts"
    path.write_text(text)
    return path


def test_ssh_key_and_known_hosts_from_files(
    ssh_server: SshGitServer, ssh_repo: str, tmp_path: Path, home: Path
) -> None:
    kh = known_hosts_file(tmp_path, ssh_server.known_hosts)
    r = render(ssh_repo, tmp_path, home, {}, f"--ssh-key-file={ssh_server.client_key}", f"--known-hosts={kh}")
    assert r.returncode == 0, r.stderr
    assert "private-cm" in r.stdout
    # The same from the environment.
    env = {"GITOPS_SYNC_SSH_KEY_FILE": str(ssh_server.client_key), "GITOPS_SYNC_KNOWN_HOSTS": str(kh)}
    r = render(ssh_repo, tmp_path, home, env)
    assert r.returncode == 0, r.stderr


def test_ssh_wrong_or_missing_key_is_refused(
    ssh_server: SshGitServer, ssh_repo: str, tmp_path: Path, home: Path
) -> None:
    kh = known_hosts_file(tmp_path, ssh_server.known_hosts)
    other = keypair(tmp_path / "other_key")
    r = render(ssh_repo, tmp_path, home, {}, f"--ssh-key-file={other}", f"--known-hosts={kh}")
    assert r.returncode == 2 and "authentication failed" in r.stderr, r.stderr
    r = render(ssh_repo, tmp_path, home, {}, f"--known-hosts={kh}")  # no key at all (HOME has no ~/.ssh)
    assert r.returncode == 2 and "authentication failed" in r.stderr, r.stderr


def test_ssh_host_key_mismatch_and_unknown_host_are_refused(
    ssh_server: SshGitServer, ssh_repo: str, tmp_path: Path, home: Path
) -> None:
    impostor = keypair(tmp_path / "impostor")
    line = f"[127.0.0.1]:{ssh_server.port} {' '.join(impostor.with_suffix('.pub').read_text().split()[:2])}\n"
    kh = known_hosts_file(tmp_path, line)
    r = render(ssh_repo, tmp_path, home, {}, f"--ssh-key-file={ssh_server.client_key}", f"--known-hosts={kh}")
    assert r.returncode == 2, r.stderr
    assert "host key mismatch" in r.stderr and "127.0.0.1" in r.stderr, r.stderr
    kh.write_text("")
    r = render(ssh_repo, tmp_path, home, {}, f"--ssh-key-file={ssh_server.client_key}", f"--known-hosts={kh}")
    assert r.returncode == 2 and "unknown SSH host key" in r.stderr, r.stderr
    # Without --known-hosts: ~/.ssh/known_hosts, empty here; the host is refused, never added.
    r = render(ssh_repo, tmp_path, home, {}, f"--ssh-key-file={ssh_server.client_key}")
    assert r.returncode == 2 and "unknown SSH host key" in r.stderr, r.stderr
    assert not (home / ".ssh" / "known_hosts").exists() or not (home / ".ssh" / "known_hosts").read_text()


def test_ssh_key_never_in_a_command_line(ssh_server: SshGitServer, ssh_repo: str, tmp_path: Path, home: Path) -> None:
    ssh_server.authorize(ssh_server.client_key, delay=1)
    kh = known_hosts_file(tmp_path, ssh_server.known_hosts)
    key_text = ssh_server.client_key.read_text().splitlines()[1]  # a line of the private key itself
    results: list[subprocess.CompletedProcess[str]] = []
    flags = (f"--ssh-key-file={ssh_server.client_key}", f"--known-hosts={kh}")
    lines = cmdlines_during(lambda: results.append(render(ssh_repo, tmp_path, home, {}, *flags)))
    assert results[0].returncode == 0, results[0].stderr
    assert [ln for ln in lines if ln.startswith("ssh ") and "StrictHostKeyChecking=yes" in ln], "no ssh seen"
    assert not [ln for ln in lines if key_text in ln]
    assert not [ln for ln in lines if "StrictHostKeyChecking=no" in ln]


# -- run --repo ------------------------------------------------------------------------------------


@pytest.mark.cluster
def test_run_repo_follows_a_rotated_password_file_without_a_restart(
    kube: KubeCluster, namespace: str, https_server: HttpsGitServer, tmp_path: Path, home: Path
) -> None:
    https_server.users = {"deploy": PASSWORD}
    bare = bare_repository(https_server.repos, f"run-{namespace}", {"cm.yaml": configmap("run-cm", {"v": "1"})})
    secret_file = tmp_path / "password"
    secret_file.write_text(PASSWORD)
    flags = ["--git-username", "deploy", "--git-password-file", str(secret_file), "--interval", "1"]
    env = {**kube.env, "GIT_SSL_CAINFO": str(https_server.ca), "HOME": str(home)}
    log = tmp_path / "run.log"
    with Daemon(
        ["--repo", https_server.url(bare), "-n", namespace, "--cache-dir", str(tmp_path / "c"), *flags], env, log
    ) as d:
        d.wait_ready(60)
        wait_until("applied", lambda: cm_data(kube, namespace, "run-cm") == {"v": "1"}, 30)
        https_server.users = {"deploy": PASSWORD + "-2"}  # rotated on the server, then in the file
        secret_file.write_text(PASSWORD + "-2")
        commit_to(bare, {"cm.yaml": configmap("run-cm", {"v": "2"})})
        wait_until(
            "the new commit, fetched with the new password",
            lambda: cm_data(kube, namespace, "run-cm") == {"v": "2"},
            30,
        )
        status = d.get("/status")[1].decode()
    assert PASSWORD not in log.read_text() + status


def test_the_fleet_refuses_credential_flags(tmp_path: Path, home: Path) -> None:
    key = keypair(tmp_path / "k")
    r = gitops("run", "--ssh-key-file", str(key), env={}, home=home)
    assert r.returncode == 2 and "spec.secretRef" in r.stderr, r.stderr
