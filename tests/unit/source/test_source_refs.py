"""source/refs.py: a poll of a remote that has not moved is one `git ls-remote`, no `git fetch`; any move of
a branch, tag or HEAD (a new commit, a force-push, a deleted branch, a branch put back) is fetched.

Real git against file:// remotes built in tmp_path; the git commands are recorded where the code runs them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import git
import pytest

from gitops_sync.source import checkout, fetch, refs
from tests.unit.source.test_source import commit, read, remote, work

__all__ = ["remote", "work"]  # fixtures


@pytest.fixture
def commands(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The git subcommand of every remote call (`fetch`, `ls-remote`), in order."""
    seen: list[str] = []

    def recording(real: Any) -> Any:
        def run(repo: git.Repo, timeout: float, url: str, remote: Any, *args: str) -> str:
            seen.append(next(a for a in args if a in ("fetch", "ls-remote")))
            return str(real(repo, timeout, url, remote, *args))

        return run

    monkeypatch.setattr(checkout, "run_remote", recording(checkout.run_remote))
    monkeypatch.setattr(refs, "run_remote", recording(refs.run_remote))
    return seen


@pytest.mark.parametrize("revision", [None, "main"])
def test_an_unchanged_remote_costs_one_ls_remote_and_no_fetch(
    remote: tuple[str, git.Repo], tmp_path: Path, commands: list[str], revision: str | None
) -> None:
    url, work = remote
    work.create_tag("v1", message="annotated")  # its peeled line must not look like a difference
    work.git.push("origin", "v1")
    first = fetch(url, revision, cache_dir=tmp_path / "cache")
    assert commands == ["fetch"], "an empty clone is fetched at once (a cold start pays no ls-remote)"
    again = fetch(url, revision, cache_dir=tmp_path / "cache")
    assert commands == ["fetch", "ls-remote"]
    assert (again.revision, again.root) == (first.revision, first.root)


def test_a_new_commit_a_deleted_branch_and_a_branch_put_back_are_each_fetched(
    remote: tuple[str, git.Repo], tmp_path: Path, commands: list[str]
) -> None:
    url, work = remote
    cache = tmp_path / "cache"
    first = fetch(url, cache_dir=cache).revision
    second = commit(work, {"app/cm.yaml": "kind: Second\n"}, "second")
    work.git.push("origin", "main")
    got = fetch(url, cache_dir=cache)
    assert got.revision == second and read(got, "app/cm.yaml") == "kind: Second\n"
    work.git.push("origin", "main:extra")
    fetch(url, cache_dir=cache)
    work.git.push("origin", "--delete", "extra")
    fetch(url, cache_dir=cache)
    bare = git.Repo(url.removeprefix("file://"))
    assert "extra" not in [h.name for h in git.Repo(next(cache.glob("*/repo.git"))).heads], "pruned"
    # Put back where it was: the clone holds `second`, the remote `first` again: fetched, not skipped.
    work.git.push("--force", "origin", f"{first}:main")
    assert fetch(url, cache_dir=cache).revision == first
    assert commands.count("fetch") == 5 and commands.count("ls-remote") == 4, commands
    assert bare.heads.main.commit.hexsha == first
