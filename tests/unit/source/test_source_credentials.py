"""Source hardening: credentials never on git's command line nor in a masked URL; --cache-dir
relative or behind a symlink works.

The credential test serves a real repository over loopback HTTP (`git http-backend` behind Basic auth)
and puts a logging wrapper named `git` first on PATH, so every git process's argv is on record.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import git
import pytest

from gitops_sync.errors import SourceError
from gitops_sync.source import fetch, mask_url
from gitops_sync.source.remote import Remote
from tests.gitservers import HttpsGitServer, bare_repository

ACTOR = git.Actor("Test", "test@example.invalid")
USER, PASSWORD = "alice", "p@ss:w/rd-S3cret"  # '@', ':' and '/' as a real token may have them


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("https://user:p@ss@host/r.git", "https://***@host/r.git"),
        ("https://user:p@ss@word@host:8443/r.git", "https://***@host:8443/r.git"),
        ("'https://u:a@b@h/x' failed", "'https://***@h/x' failed"),
        ("https://user:pw@host/x.git", "https://***@host/x.git"),
        ("https://host/x.git", "https://host/x.git"),
        ("see https://a:b@h/x and ssh://u:p@h2/y", "see https://***@h/x and ssh://***@h2/y"),
        ("fatal: unable to access 'https://h/r.git/': error for bob@example.com", None),
    ],
)
def test_mask_url_hides_the_whole_userinfo(text: str, masked: str | None) -> None:
    assert mask_url(text) == (text if masked is None else masked)


@pytest.mark.parametrize(
    ("url", "clean", "user", "password"),
    [
        ("https://alice:p%40ss@h/r.git", "https://h/r.git", "alice", "p@ss"),
        ("https://alice:p@ss@h/r.git", "https://h/r.git", "alice", "p@ss"),
        ("http://token@h:8080/r.git", "http://h:8080/r.git", "token", ""),
        ("ssh://git:pw@h/r.git", "ssh://git@h/r.git", None, None),
        ("https://h/r.git", "https://h/r.git", None, None),
        ("git@h:org/r.git", "git@h:org/r.git", None, None),
    ],
)
def test_remote_url_and_credentials_are_split(url: str, clean: str, user: str | None, password: str | None) -> None:
    remote = Remote.of(url)
    assert remote.url == clean
    assert remote.env.get("GITOPS_SYNC_CREDENTIAL_USERNAME") == user
    assert remote.env.get("GITOPS_SYNC_CREDENTIAL_PASSWORD") == password
    assert all(password not in v for k, v in remote.env.items() if password and "PASSWORD" not in k)


def test_existing_git_config_env_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.quotePath")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "false")
    env = Remote.of("https://a:b@h/r.git").environment()
    assert env["GIT_CONFIG_COUNT"] == "3" and env["GIT_CONFIG_KEY_0"] == "core.quotePath"
    assert env["GIT_CONFIG_KEY_1"] == env["GIT_CONFIG_KEY_2"] == "credential.helper"


# --- a real HTTP remote with Basic auth ---------------------------------------------------------------


@pytest.fixture
def http_remote(tmp_path: Path) -> Iterator[str]:
    server = HttpsGitServer(tmp_path / "served", tls=False).start()
    server.users = {USER: PASSWORD}
    try:
        yield server.url(bare_repository(server.repos, "repo", {"cm.yaml": "kind: ConfigMap\n"}))
    finally:
        server.stop()


@pytest.fixture
def argv_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `git` first on PATH that appends its argv (and its parent's, for helpers) to a log, then runs git."""
    real = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True, check=True).stdout.strip()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "argv.log"
    wrapper = bin_dir / "git"
    wrapper.write_text(f'#!/bin/sh\nprintf "%s\\n" "git $*" >> {log}\nexec {real} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.delenv("http_proxy", raising=False)
    monkeypatch.delenv("HTTP_PROXY", raising=False)
    return log


def test_credentials_reach_git_through_the_environment_only(http_remote: str, argv_log: Path, tmp_path: Path) -> None:
    authed = http_remote.replace("http://", f"http://{USER}:{PASSWORD.replace('/', '%2F')}@")
    out = fetch(authed, cache_dir=tmp_path / "cache", timeout=30)
    assert (out.root / "cm.yaml").read_text() == "kind: ConfigMap\n"
    argv = argv_log.read_text()
    assert "git fetch" in argv and http_remote in argv  # the wrapper really saw git's command lines
    assert "S3cret" not in argv and "%2F" not in argv
    assert not any("S3cret" in p.name for p in (tmp_path / "cache").rglob("*"))
    # Nothing of the password in the cache's git config either (it lives in the environment only).
    assert not any("S3cret" in p.read_text(errors="replace") for p in (tmp_path / "cache").rglob("config"))


def test_wrong_credentials_fail_masked_and_without_a_prompt(http_remote: str, argv_log: Path, tmp_path: Path) -> None:
    authed = http_remote.replace("http://", f"http://{USER}:wr@ng-S3cret@")
    with pytest.raises(SourceError, match=r"authentication failed for http://\*\*\*@127\.0\.0\.1") as err:
        fetch(authed, cache_dir=tmp_path / "cache", timeout=30)
    assert "S3cret" not in str(err.value) and "ng-" not in str(err.value)
    assert "S3cret" not in argv_log.read_text()


def test_no_credentials_get_a_401_not_a_hang(http_remote: str, argv_log: Path, tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="authentication failed"):
        fetch(http_remote, cache_dir=tmp_path / "cache", timeout=30)


# --- --cache-dir ---------------------------------------------------------------------------------------


@pytest.fixture
def file_remote(tmp_path: Path) -> str:
    work = git.Repo.init(tmp_path / "work", initial_branch="main")
    (tmp_path / "work" / "app").mkdir()
    (tmp_path / "work" / "app" / "cm.yaml").write_text("kind: ConfigMap\n")
    work.git.add("--all")
    work.index.commit("first", author=ACTOR, committer=ACTOR)
    bare = git.Repo.clone_from(str(tmp_path / "work"), tmp_path / "remote.git", bare=True)
    return f"file://{bare.git_dir}"


def test_relative_cache_dir_works(file_remote: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    out = fetch(file_remote, path="app", cache_dir=Path("cache/repos"))
    assert out.root.is_absolute()
    assert out.root.is_relative_to((tmp_path / "here" / "cache" / "repos").resolve())
    assert (out.root / "cm.yaml").is_file()
    assert fetch(file_remote, path="app", cache_dir=Path("cache/repos")).root == out.root  # and again, cached


def test_cache_dir_under_a_symlink_works(file_remote: str, tmp_path: Path) -> None:
    (tmp_path / "real-cache").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real-cache")
    out = fetch(file_remote, cache_dir=tmp_path / "link" / "repos")
    assert out.root.is_relative_to((tmp_path / "real-cache").resolve())
    assert (out.root / "app" / "cm.yaml").is_file()


def test_local_revision_with_a_relative_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = git.Repo.init(tmp_path / "work", initial_branch="main")
    (tmp_path / "work" / "cm.yaml").write_text("kind: ConfigMap\n")
    work.git.add("--all")
    sha = work.index.commit("first", author=ACTOR, committer=ACTOR).hexsha
    monkeypatch.chdir(tmp_path)
    out = fetch(str(tmp_path / "work"), "main", cache_dir=Path("rel-cache"))
    assert out.revision == sha and (out.root / "cm.yaml").is_file() and out.root.is_absolute()
