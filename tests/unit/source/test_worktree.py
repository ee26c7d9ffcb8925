"""What worktree.py tells when git cannot: the repository, what was being done and why. Real git."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gitops_sync.errors import SourceError
from gitops_sync.source.worktree import is_dirty
from tests.unit.source.test_safegit import hanging_repository


def test_a_git_that_hangs_names_the_repository_the_status_and_the_subcommand(tmp_path: Path) -> None:
    top, _ = hanging_repository(tmp_path)
    with pytest.raises(SourceError) as caught:
        is_dirty(top, None, "my-repo", timeout=1)
    assert str(caught.value) == "my-repo: cannot read the Git status: git diff-index timed out after 1s"


def test_a_git_that_fails_names_the_repository_and_git_s_own_words(tmp_path: Path) -> None:
    top, _ = hanging_repository(tmp_path)
    os.unlink(top / ".git" / "objects" / "info" / "alternates")
    (top / ".git" / "HEAD").write_text("ref: refs/heads/gone\n")  # a branch with no commit yet
    with pytest.raises(SourceError) as caught:
        is_dirty(top, None, "my-repo", timeout=30)
    assert str(caught.value).startswith("my-repo: cannot read the Git status: fatal: ambiguous argument 'HEAD'")
