"""`is_ancestor`: whether one commit of a source comes before another (a real git repository, no cluster)."""

from __future__ import annotations

import os
from pathlib import Path

import git
import pytest

from gitops_sync.errors import SourceError
from gitops_sync.source.checkout import Checkout, is_ancestor, knows_commit
from tests.unit.source.test_safegit import hanging_repository


def _commit(repo: git.Repo, text: str) -> str:
    (Path(repo.working_dir) / "a.yaml").write_text(text)
    repo.index.add(["a.yaml"])
    return repo.index.commit(text).hexsha


def test_ancestors_descendants_diverged_unknown_and_dirty(tmp_path: Path) -> None:
    repo = git.Repo.init(tmp_path / "repo", initial_branch="main")
    with repo.config_writer() as w:
        w.set_value("user", "name", "t")
        w.set_value("user", "email", "t@example.invalid")
    base = _commit(repo, "a: 1\n")
    main = _commit(repo, "a: 2\n")
    repo.git.checkout("-b", "other", base)
    other = _commit(repo, "a: 3\n")
    checkout = Checkout(root=tmp_path / "repo", revision=base, repo=str(tmp_path / "repo"), ref="", repo_root=None)
    assert is_ancestor(checkout, base, main) is True
    assert is_ancestor(checkout, main, base) is False
    assert is_ancestor(checkout, main, other) is False, "diverged: neither is older"
    assert is_ancestor(checkout, base, base) is False, "the same commit is not older"
    assert is_ancestor(checkout, f"{base}-dirty", main) is True, "a dirty work tree of an older commit"
    assert is_ancestor(checkout, main, f"{main}-dirty") is False
    assert is_ancestor(checkout, base, "e" * 40) is None, "a commit this clone does not have"
    assert is_ancestor(checkout, base, "HEAD") is None, "only commits are compared"


def test_a_plain_directory_cannot_tell(tmp_path: Path) -> None:
    checkout = Checkout(root=tmp_path, revision="", repo=str(tmp_path), ref="")
    assert is_ancestor(checkout, "a" * 40, "b" * 40) is None


def test_a_git_that_hangs_ends_the_question_naming_it(tmp_path: Path) -> None:
    """Before, GitPython ran these with no timeout: a stalled repository hung the pass for ever."""
    top, sha = hanging_repository(tmp_path)
    checkout = Checkout(root=top, revision=sha, repo=str(top), ref="", repo_root=None)
    with pytest.raises(SourceError) as caught:
        is_ancestor(checkout, sha, "e" * 40, timeout=1)
    assert (
        str(caught.value)
        == f"{top}: cannot tell whether {sha[:12]} comes before eeeeeeeeeeee: git merge-base timed out after 1s"
    )
    with pytest.raises(SourceError) as caught:
        knows_commit(str(top), sha, timeout=1)
    assert str(caught.value) == f"{top}: cannot look for commit {sha[:12]}: git cat-file timed out after 1s"
    os.unlink(top / ".git" / "objects" / "info" / "alternates")
    assert knows_commit(str(top), sha) is True and knows_commit(str(top), "e" * 40) is False
