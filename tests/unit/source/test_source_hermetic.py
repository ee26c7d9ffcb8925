"""A tenant's fetch is hermetic: nothing of the controller's Git credentials reaches it, on a real HTTP server.

Each case gives the controller (this process) access to a private repository one way git really reads (a
credential helper of its global configuration, ~/.netrc, GIT_CONFIG_* variables, an insteadOf rewrite, the
XDG configuration); the controller's own fetch works (so the case is real), and a fetch with a tenant's empty
`isolated` credentials fails with an authentication failure. The clone cache of a tenant scope never serves a
commit fetched with other credentials.
"""

from __future__ import annotations

import base64
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gitops_sync.errors import CredentialsUnavailable, SourceError
from gitops_sync.source import fetch
from gitops_sync.source.checkout import repository_key
from gitops_sync.source.credentials import GitCredentials, authenticated
from gitops_sync.source.remote import HERMETIC_SSH
from tests.gitservers import HttpsGitServer, _git, bare_repository, commit_to

USER, PASSWORD = "controller", "ctl-pw-7d1e0f9a"
TENANT = GitCredentials(isolated=True, cache_scope="team-a|system:serviceaccount:team-a:tenant|")


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HttpsGitServer]:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    for var in ("http_proxy", "HTTP_PROXY", "GIT_CONFIG_COUNT", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_GLOBAL"):
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "controller-home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    srv = HttpsGitServer(tmp_path / "served", tls=False).start()
    srv.users = {USER: PASSWORD}
    try:
        yield srv
    finally:
        srv.stop()


def _helper_store(home: Path, base: str, mp: pytest.MonkeyPatch) -> None:
    (home / ".gitconfig").write_text("[credential]\n\thelper = store\n")
    (home / ".git-credentials").write_text(f"http://{USER}:{PASSWORD}@{base.removeprefix('http://')}\n")


def _netrc(home: Path, base: str, mp: pytest.MonkeyPatch) -> None:
    (home / ".netrc").write_text(f"machine 127.0.0.1 login {USER} password {PASSWORD}\n")
    (home / ".netrc").chmod(0o600)


def _config_env(home: Path, base: str, mp: pytest.MonkeyPatch) -> None:
    basic = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    mp.setenv("GIT_CONFIG_COUNT", "1")
    mp.setenv("GIT_CONFIG_KEY_0", "http.extraHeader")
    mp.setenv("GIT_CONFIG_VALUE_0", f"Authorization: Basic {basic}")


def _insteadof(home: Path, base: str, mp: pytest.MonkeyPatch) -> None:
    authed = base.replace("http://", f"http://{USER}:{PASSWORD}@")
    (home / ".gitconfig").write_text(f'[url "{authed}/"]\n\tinsteadOf = {base}/\n')


def _xdg_helper(home: Path, base: str, mp: pytest.MonkeyPatch) -> None:
    (home / ".config" / "git").mkdir(parents=True)
    helper = f"!f() {{ echo username={USER}; echo password={PASSWORD}; }}; f"
    (home / ".config" / "git" / "config").write_text(f'[credential]\n\thelper = "{helper}"\n')


Grant = Callable[[Path, str, pytest.MonkeyPatch], None]


@pytest.mark.parametrize("grant", [_helper_store, _netrc, _config_env, _insteadof, _xdg_helper])
def test_the_controllers_credentials_never_reach_a_tenants_fetch(
    server: HttpsGitServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, grant: Grant
) -> None:
    url = server.url(bare_repository(server.repos, "private", {"cm.yaml": "kind: ConfigMap\n"}))
    grant(tmp_path / "controller-home", f"http://127.0.0.1:{server.port}", monkeypatch)
    mine = fetch(url, cache_dir=tmp_path / "cache", timeout=30)  # the controller's own: its credentials work
    assert (mine.root / "cm.yaml").is_file()
    with pytest.raises(SourceError, match="authentication failed") as err:
        fetch(url, cache_dir=tmp_path / "cache", timeout=30, credentials=TENANT)
    assert PASSWORD not in str(err.value)


def test_a_tenants_environment_holds_nothing_of_the_controllers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSH_AUTH_SOCK", "/tmp/agent.sock")
    monkeypatch.setenv("GIT_SSH_COMMAND", "ssh -i /root/.ssh/deploy")
    monkeypatch.setenv("GIT_ASKPASS", "/usr/local/bin/askpass")
    monkeypatch.setenv("SSH_ASKPASS", "/usr/local/bin/askpass")
    monkeypatch.setenv("GIT_SSL_KEY", "/etc/client.key")
    monkeypatch.setenv("GITOPS_SYNC_GIT_PASSWORD", "x")
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "credential.helper")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "store")
    monkeypatch.setenv("GIT_SSL_CAINFO", "/etc/ssl/corporate.pem")
    with authenticated("https://git.example/r.git", TENANT) as remote:
        env = remote.environment()
        home = Path(env["HOME"])
        assert home.is_dir() and not any(home.iterdir()) and stat.S_IMODE(home.stat().st_mode) == 0o700
        assert env["GIT_CONFIG_GLOBAL"] == "/dev/null" and env["GIT_CONFIG_NOSYSTEM"] == "1"
        assert env["GIT_TERMINAL_PROMPT"] == "0" and env["GIT_ASKPASS"] == "true"
        assert env["GIT_SSH_COMMAND"] == HERMETIC_SSH and "IdentityAgent=none" in HERMETIC_SSH
        assert "SSH_AUTH_SOCK" not in env and "SSH_ASKPASS" not in env and "GIT_SSL_KEY" not in env
        assert not [k for k in env if k.startswith("GITOPS_SYNC_")]
        # only our own configuration: an empty helper clears any list, nothing inherited
        assert env["GIT_CONFIG_COUNT"] == "1" and env["GIT_CONFIG_VALUE_0"] == ""
        assert env["GIT_SSL_CAINFO"] == "/etc/ssl/corporate.pem"  # CA trust is no credential
    assert not home.exists()
    with authenticated("https://git.example/r.git", None) as remote:  # the controller's own, as before
        assert remote.environment()["SSH_AUTH_SOCK"] == "/tmp/agent.sock"


def test_a_tenants_ssh_url_without_a_key_is_refused_before_ssh_runs() -> None:
    refused = pytest.raises(
        CredentialsUnavailable, match=r"authentication failed for ssh://git@h/r\.git: it has no spec"
    )
    with refused, authenticated("ssh://git@h/r.git", TENANT):
        pass


def test_a_tenant_never_reads_a_commit_fetched_with_other_credentials(server: HttpsGitServer, tmp_path: Path) -> None:
    """The controller fetched commit X (a branch since deleted, and collected on the server); a tenant allowed
    the repository asks for X by SHA. With one shared clone (before) it got X, which its own credentials could
    not fetch; its own clone lacks X."""
    server.users["tenant"] = "tenant-pw"
    bare = bare_repository(server.repos, "shared", {"cm.yaml": "kind: ConfigMap\n"})
    url = server.url(bare)
    work = bare.parent / ".work-shared"
    _git("checkout", "-q", "-b", "hidden", cwd=work)
    hidden = commit_to(bare, {"secret.yaml": "kind: Secret\n"}, "hidden")  # pushes main: push hidden too
    _git("push", "-q", "origin", "hidden", cwd=work)
    controller = GitCredentials(username=USER, password=PASSWORD)
    assert fetch(url, "hidden", cache_dir=tmp_path / "cache", timeout=30, credentials=controller).revision == hidden
    _git("push", "-q", "origin", "--delete", "hidden", cwd=work)
    _git("-C", str(bare), "gc", "-q", "--prune=now")  # gone from the server: nobody can fetch it any more
    tenant = GitCredentials(username="tenant", password="tenant-pw", isolated=True, cache_scope=TENANT.cache_scope)
    assert fetch(url, cache_dir=tmp_path / "cache", timeout=30, credentials=tenant).revision != hidden
    with pytest.raises(SourceError, match="unknown revision"):
        fetch(url, hidden, cache_dir=tmp_path / "cache", timeout=30, credentials=tenant)
    clones = sorted(p.name for p in (tmp_path / "cache").iterdir() if (p / "repo.git").is_dir())
    assert clones == sorted({repository_key(url, ""), repository_key(url, TENANT.cache_scope)})
