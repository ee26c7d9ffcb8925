"""might_be_repository: a "no" must be final (GitPython agrees), a "yes" may be a maybe."""

from __future__ import annotations

import subprocess
from pathlib import Path

import git
import pytest

from gitops_sync.source.gitdir import might_be_repository


def _gitpython_finds(path: Path) -> bool:
    try:
        git.Repo(path, search_parent_directories=True).close()
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return False
    return True


def test_plain_directory_is_no_repository(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    assert not might_be_repository(tmp_path / "a" / "b")
    assert not _gitpython_finds(tmp_path / "a" / "b")


def test_work_tree_and_its_sub_directories(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "apps" / "web").mkdir(parents=True)
    for where in (tmp_path, tmp_path / "apps", tmp_path / "apps" / "web"):
        assert might_be_repository(where)
        assert _gitpython_finds(where)


def test_bare_repository(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", "--bare", str(tmp_path / "r.git")], check=True)
    assert might_be_repository(tmp_path / "r.git")
    assert _gitpython_finds(tmp_path / "r.git")


def test_gitfile_of_a_linked_work_tree(tmp_path: Path) -> None:
    main = tmp_path / "main"
    subprocess.run(["git", "init", "-q", "-b", "main", str(main)], check=True)
    (main / "f").write_text("x")
    ident = ["-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run(["git", "-C", str(main), "add", "f"], check=True)
    subprocess.run(["git", "-C", str(main), *ident, "commit", "-qm", "x"], check=True)
    subprocess.run(["git", "-C", str(main), "worktree", "add", "-q", str(tmp_path / "linked")], check=True)
    assert (tmp_path / "linked" / ".git").is_file()
    assert might_be_repository(tmp_path / "linked")


@pytest.mark.parametrize("through", ["link-to-sub", "sub-via-link"])
def test_symlinks_either_way(tmp_path: Path, through: str) -> None:
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "sub").mkdir()
    if through == "link-to-sub":  # a link outside the repository pointing into it
        (tmp_path / "link").symlink_to(repo / "sub")
        target = tmp_path / "link"
    else:  # a repository reached through a linked parent
        (tmp_path / "alias").symlink_to(repo)
        target = tmp_path / "alias" / "sub"
    assert might_be_repository(target)
