"""What `authenticated` hands git for explicit credentials: the environment only, key files for one fetch.

The fetches themselves, against real servers, are in tests/integration/test_private_repositories_cli.py.
"""

from __future__ import annotations

import shlex
import stat
from pathlib import Path

import pytest

from gitops_sync.errors import SourceError
from gitops_sync.source.credentials import GitCredentials, authenticated
from gitops_sync.source.remote import Remote

KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA-not-a-real-key\n-----END OPENSSH PRIVATE KEY-----"
KNOWN = "[git.example]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDummy\n"


def _config(remote: Remote) -> dict[str, str]:
    """GIT_CONFIG_KEY_n/VALUE_n of git's environment as {key: last value}."""
    env = remote.environment()
    n = int(env["GIT_CONFIG_COUNT"])
    return {env[f"GIT_CONFIG_KEY_{i}"]: env[f"GIT_CONFIG_VALUE_{i}"] for i in range(n) if f"GIT_CONFIG_KEY_{i}" in env}


def test_a_secrets_ssh_key_is_a_0600_file_for_the_fetch_only_and_host_keys_are_strict() -> None:
    creds = GitCredentials(origin="Secret a/b", identity=KEY, known_hosts=KNOWN, isolated=True)
    with authenticated("ssh://git@git.example:2222/r.git", creds) as remote:
        argv = shlex.split(remote.env["GIT_SSH_COMMAND"])
        key = Path(argv[argv.index("-i") + 1])
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
        assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
        assert key.read_text() == KEY + "\n"
        assert "StrictHostKeyChecking=yes" in argv and "BatchMode=yes" in argv
        assert "StrictHostKeyChecking=no" not in argv
        # nothing of the controller's own: its ssh config, agent and system known_hosts
        assert argv[argv.index("-F") + 1] == "/dev/null"
        assert "IdentityAgent=none" in argv and "GlobalKnownHostsFile=/dev/null" in argv
        known = Path(next(a for a in argv if a.startswith("UserKnownHostsFile=")).split("=", 1)[1])
        assert known.read_text() == KNOWN
        assert KEY not in remote.env["GIT_SSH_COMMAND"] and remote.url == "ssh://git@git.example:2222/r.git"
    assert not key.exists() and not key.parent.exists()


def test_the_key_file_is_removed_when_the_fetch_fails() -> None:
    creds = GitCredentials(identity=KEY, known_hosts=KNOWN, isolated=True)
    with pytest.raises(RuntimeError), authenticated("git@git.example:r.git", creds) as remote:
        argv = shlex.split(remote.env["GIT_SSH_COMMAND"])
        key = Path(argv[argv.index("-i") + 1])
        raise RuntimeError("fetch failed")
    assert not key.exists()


def test_a_bearer_token_is_a_header_in_the_environment_and_no_helper_is_asked() -> None:
    creds = GitCredentials(bearer_token="tok-123456", isolated=True)
    with authenticated("https://user:old@git.example/r.git", creds) as remote:
        assert remote.url == "https://git.example/r.git"
        config = _config(remote)
        assert config["http.extraHeader"] == "Authorization: Bearer tok-123456"
        assert config["credential.helper"] == ""
        assert remote.secrets == ("tok-123456",)
        assert "old" not in remote.env.values()


def test_given_credentials_win_over_the_urls_and_a_ca_is_a_file_for_the_fetch() -> None:
    creds = GitCredentials(username="deploy", password="new-pw", ca_cert="-----BEGIN CERTIFICATE-----\n")
    with authenticated("https://user:old-pw@git.example/r.git", creds) as remote:
        assert remote.env["GITOPS_SYNC_CREDENTIAL_USERNAME"] == "deploy"
        assert remote.env["GITOPS_SYNC_CREDENTIAL_PASSWORD"] == "new-pw"
        ca = Path(remote.env["GIT_SSL_CAINFO"])
        assert ca.is_file()
    assert not ca.exists()


def test_a_tenants_https_fetch_without_a_password_asks_no_helper_of_the_controller() -> None:
    creds = GitCredentials(identity=KEY, known_hosts=KNOWN, isolated=True)
    with pytest.raises(SourceError, match="not an SSH URL"), authenticated("https://g/r.git", creds):
        pass
    only_hosts = GitCredentials(known_hosts=KNOWN, isolated=True)  # ssh would offer the controller's own keys
    with pytest.raises(SourceError, match="no SSH identity"), authenticated("git@g:r.git", only_hosts):
        pass
    with authenticated("https://g/r.git", GitCredentials(ca_cert="x", isolated=True)) as remote:
        assert _config(remote)["credential.helper"] == ""


@pytest.mark.parametrize(
    ("creds", "problem"),
    [
        (GitCredentials(origin="Secret a/b", password="p"), "Secret a/b: a password needs a username"),
        (GitCredentials(origin="Secret a/b", username="u", password="p", bearer_token="t"), "not both"),
        (GitCredentials(origin="Secret a/b", identity=KEY, isolated=True), "needs known_hosts"),
    ],
)
def test_unusable_credentials_are_refused_naming_where_they_came_from(creds: GitCredentials, problem: str) -> None:
    with pytest.raises(SourceError, match=problem) as err, authenticated("ssh://g/r.git", creds):
        pass
    assert KEY not in str(err.value)


def test_no_credentials_leave_the_remote_as_the_url_makes_it() -> None:
    with authenticated("https://a:b@g/r.git", None) as remote:
        assert remote.url == "https://g/r.git" and remote.secrets == ("b",)
        assert "GIT_SSH_COMMAND" not in remote.env
