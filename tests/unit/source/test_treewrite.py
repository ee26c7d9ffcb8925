"""A commit written from its blobs (treewrite.py) looks as `checkout-index` left it: regular and executable
files, symlinks, an empty directory per submodule; a crafted tree cannot write outside. Real git."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import git
import pytest

from gitops_sync.errors import SourceError
from gitops_sync.source.clonecache import materialise
from gitops_sync.source.treewrite import write_commit
from tests.unit.source.test_source import commit


def _git(cwd: Path, *args: str, stdin: bytes = b"") -> str:
    done = subprocess.run(["git", *args], cwd=cwd, input=stdin, capture_output=True, check=True)
    return done.stdout.decode().strip()


def test_files_modes_symlinks_and_submodules_are_written_as_checkout_index_would(tmp_path: Path) -> None:
    repo = git.Repo.init(tmp_path / "work", initial_branch="main")
    top = Path(repo.working_tree_dir or "")
    (top / "bin").mkdir()
    (top / "bin" / "run.sh").write_text("#!/bin/sh\n")
    (top / "bin" / "run.sh").chmod(0o755)
    (top / "link.yaml").symlink_to("app/cm.yaml")
    (top / "up").symlink_to("../outside")
    sha = commit(repo, {"app/cm.yaml": "kind: ConfigMap\n", "bin/data": b"\x00\xff".decode("latin-1")})
    # a submodule's gitlink, recorded without the submodule itself
    _git(top, "update-index", "--add", "--cacheinfo", f"160000,{sha},vendor/lib")
    sha = repo.index.commit("gitlink").hexsha
    tree = materialise(repo, sha, tmp_path / "trees", "work", 60)
    assert (tree / "app" / "cm.yaml").read_text() == "kind: ConfigMap\n"
    assert (tree / "bin" / "data").read_bytes() == b"\x00\xc3\xbf"  # the blob's bytes as committed
    assert os.stat(tree / "bin" / "run.sh").st_mode & stat.S_IXUSR
    assert not os.stat(tree / "app" / "cm.yaml").st_mode & stat.S_IXUSR
    assert os.readlink(tree / "link.yaml") == "app/cm.yaml" and os.readlink(tree / "up") == "../outside"
    assert (tree / "vendor" / "lib").is_dir() and not any((tree / "vendor" / "lib").iterdir())
    assert sorted(p.name for p in tree.iterdir()) == ["app", "bin", "link.yaml", "up", "vendor"]


@pytest.mark.parametrize("name", ["..", ".git", ".GIT"])
def test_a_crafted_tree_with_a_path_git_refuses_is_refused(tmp_path: Path, name: str) -> None:
    repo = git.Repo.init(tmp_path / "work", initial_branch="main")
    top = Path(repo.working_tree_dir or "")
    blob = _git(top, "hash-object", "-w", "--stdin", stdin=b"kind: ConfigMap\n")
    inner = _git(top, "mktree", "--missing", stdin=f"100644 blob {blob}\tevil.yaml\n".encode())
    # `git mktree` refuses such names: write the tree object by hand
    entry = f"40000 {name}\0".encode() + bytes.fromhex(inner)
    crafted = _git(top, "hash-object", "-w", "-t", "tree", "--literally", "--stdin", stdin=entry)
    staging = tmp_path / "staging"
    staging.mkdir()
    with pytest.raises(SourceError, match="refuses"):
        write_commit(Path(repo.git_dir), crafted, staging, 60)
    assert not (tmp_path / "evil.yaml").exists()


def test_the_same_path_twice_is_refused(tmp_path: Path) -> None:
    repo = git.Repo.init(tmp_path / "work", initial_branch="main")
    top = Path(repo.working_tree_dir or "")
    blob = _git(top, "hash-object", "-w", "--stdin", stdin=b"x\n")
    link = _git(top, "hash-object", "-w", "--stdin", stdin=str(tmp_path).encode())
    inner = _git(top, "mktree", stdin=f"100644 blob {blob}\tescaped\n".encode())
    raw = bytes.fromhex
    entries = b"120000 a\0" + raw(link) + b"40000 a\0" + raw(inner)
    crafted = _git(top, "hash-object", "-w", "-t", "tree", "--literally", "--stdin", stdin=entries)
    staging = tmp_path / "staging"
    staging.mkdir()
    with pytest.raises(SourceError, match="twice"):
        write_commit(Path(repo.git_dir), crafted, staging, 60)
    assert not (tmp_path / "escaped").exists()


def test_a_missing_blob_fails_naming_it_without_waiting(tmp_path: Path) -> None:
    """A repository missing an object (a partial clone, a broken one): an error, never a fetch or a hang."""
    repo = git.Repo.init(tmp_path / "work", initial_branch="main")
    top = Path(repo.working_tree_dir or "")
    blob = _git(top, "hash-object", "-w", "--stdin", stdin=b"here\n")
    gone = "1" * 40
    tree = _git(top, "mktree", "--missing", stdin=f"100644 blob {blob}\ta\n100644 blob {gone}\tb\n".encode())
    staging = tmp_path / "staging"
    staging.mkdir()
    with pytest.raises(SourceError, match=f"cannot read blob {gone} of b"):
        write_commit(Path(repo.git_dir), tree, staging, 60)


def test_a_git_that_hangs_ends_the_checkout_with_the_subcommand_and_the_timeout(tmp_path: Path) -> None:
    from tests.unit.source.test_safegit import hanging_repository

    top, sha = hanging_repository(tmp_path)
    repo = git.Repo(top)
    with pytest.raises(SourceError) as caught:
        materialise(repo, sha, tmp_path / "trees", "work", 1)
    assert str(caught.value) == f"work: cannot check out {sha}: git ls-tree timed out after 1s"
    assert [p.name for p in (tmp_path / "trees").iterdir()] == []  # nothing half-written left
