"""Git submodules are never rendered as an empty directory (issue 20, item 5).

gitops-sync does not fetch submodules: a materialised commit (a URL, a --revision of a local repository)
has an empty directory where the submodule is, so every submodule of it is a hole the render refuses
(exit 2, naming it); a work tree renders a checked-out submodule as it is and refuses one not checked out.
Real repositories: a library repository added with `git submodule add` (file transport allowed for it).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import git
import pytest

from gitops_sync.engine import SourceOptions, load
from gitops_sync.errors import RenderError
from gitops_sync.source import fetch
from gitops_sync.source.checkout import gitlinks
from tests.unit.source.test_source import commit

CM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n"


def run_git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "protocol.file.allow=always", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def superproject(tmp_path: Path) -> tuple[git.Repo, str]:
    """A work tree with `top.yaml` and the submodule `vendor/lib` (a ConfigMap `from-sub`) checked out, pushed
    to a bare remote; returns the work tree and the remote's file:// URL."""
    lib = git.Repo.init(tmp_path / "lib", initial_branch="main")
    commit(lib, {"cm.yaml": CM.format(name="from-sub")})
    work = git.Repo.init(tmp_path / "work", initial_branch="main")
    top = Path(work.working_tree_dir or "")
    run_git(top, "submodule", "add", "-q", str(tmp_path / "lib"), "vendor/lib")
    commit(work, {"top.yaml": CM.format(name="top"), "apps/app.yaml": CM.format(name="app")})
    bare = git.Repo.init(tmp_path / "remote.git", bare=True, initial_branch="main")
    work.create_remote("origin", str(bare.git_dir))
    work.git.push("origin", "main")
    return work, f"file://{bare.git_dir}"


def names(source: SourceOptions) -> set[str]:
    return {o.manifest["metadata"]["name"] for o in load(source)[1]}


def test_gitlinks_are_read_from_ls_tree_and_ls_files_records() -> None:
    tree = "100644 blob aa\ttop.yaml\x00160000 commit bb\tvendor/lib\x00160000 commit cc\tapps/sub\x00"
    assert gitlinks(tree) == ("apps/sub", "vendor/lib")
    assert gitlinks(tree, "vendor") == ("lib",)
    assert gitlinks(tree, "vend") == ()  # a prefix of a name is no directory
    index = "100644 aa 0\ttop.yaml\x00160000 bb 0\tvendor/lib\x00"
    assert gitlinks(index) == ("vendor/lib",)
    assert gitlinks("") == ()


@pytest.mark.parametrize("how", ["url", "revision"])
def test_a_fetched_commit_with_a_submodule_fails_naming_it(tmp_path: Path, how: str) -> None:
    work, url = superproject(tmp_path)
    repo, revision = (url, None) if how == "url" else (str(work.working_tree_dir), "main")
    checkout = fetch(repo, revision, cache_dir=tmp_path / "cache")
    assert checkout.holes == ("vendor/lib",)
    assert (checkout.root / "vendor" / "lib").is_dir() and not any((checkout.root / "vendor" / "lib").iterdir())
    with pytest.raises(RenderError, match=r"Git submodule vendor/lib: its files are not in this checkout") as err:
        load(SourceOptions(repo=repo, revision=revision, cache_dir=tmp_path / "cache"))
    assert "refusing to render it as an empty directory" in str(err.value)


def test_a_fetched_commit_renders_a_path_without_the_submodule(tmp_path: Path) -> None:
    _, url = superproject(tmp_path)
    assert names(SourceOptions(repo=url, path="apps", cache_dir=tmp_path / "cache")) == {"app"}


def test_a_submodule_under_the_path_of_a_local_revision_is_relative_to_it(tmp_path: Path) -> None:
    work, _ = superproject(tmp_path)
    checkout = fetch(str(Path(work.working_tree_dir or "") / "vendor"), "main", cache_dir=tmp_path / "cache")
    assert checkout.holes == ("lib",)


def test_a_work_tree_renders_a_checked_out_submodule_and_refuses_one_that_is_not(tmp_path: Path) -> None:
    work, _ = superproject(tmp_path)
    top = Path(work.working_tree_dir or "")
    source = SourceOptions(repo=str(top), cache_dir=tmp_path / "cache")
    assert fetch(str(top)).holes == ()
    assert names(source) == {"top", "app", "from-sub"}
    run_git(top, "submodule", "deinit", "-q", "-f", "vendor/lib")  # the directory stays, empty
    assert (top / "vendor" / "lib").is_dir() and not any((top / "vendor" / "lib").iterdir())
    assert fetch(str(top)).holes == ("vendor/lib",)
    with pytest.raises(RenderError, match=r"Git submodule vendor/lib: .*git submodule update --init"):
        load(source)
    assert names(SourceOptions(repo=str(top), path="apps", cache_dir=tmp_path / "cache")) == {"app"}
    run_git(top, "submodule", "update", "-q", "--init")
    assert names(source) == {"top", "app", "from-sub"}


def test_a_checked_out_submodule_that_differs_from_the_commit_makes_the_revision_dirty(tmp_path: Path) -> None:
    """What the work tree renders of a submodule must be what HEAD records, or the revision says `-dirty`."""
    work, _ = superproject(tmp_path)
    top = Path(work.working_tree_dir or "")
    head = work.head.commit.hexsha
    assert fetch(str(top)).revision == head
    (top / "vendor" / "lib" / "new.yaml").write_text(CM.format(name="untracked"))  # git's `is_dirty` misses it
    assert fetch(str(top)).revision == f"{head}-dirty"
    assert fetch(str(top), path="apps").revision == head  # not under the rendered path
    (top / "vendor" / "lib" / "new.yaml").unlink()
    sub = git.Repo(top / "vendor" / "lib")
    commit(sub, {"cm.yaml": CM.format(name="moved")})  # the submodule at another commit
    assert fetch(str(top)).revision == f"{head}-dirty"


def test_a_submodule_of_a_checked_out_submodule_that_is_not_checked_out_is_refused(tmp_path: Path) -> None:
    """The superproject's index does not list a submodule's own submodules: they are read from its index."""
    work, _ = superproject(tmp_path)
    top = Path(work.working_tree_dir or "")
    deep = git.Repo.init(tmp_path / "deep", initial_branch="main")
    commit(deep, {"d.yaml": CM.format(name="deep")})
    lib = top / "vendor" / "lib"
    run_git(lib, "submodule", "add", "-q", str(tmp_path / "deep"), "deep")
    commit(git.Repo(lib), {})
    assert fetch(str(top)).holes == ()
    assert "deep" in names(SourceOptions(repo=str(top), cache_dir=tmp_path / "cache"))
    run_git(lib, "submodule", "deinit", "-q", "-f", "deep")
    assert fetch(str(top)).holes == ("vendor/lib/deep",)
    with pytest.raises(RenderError, match="Git submodule vendor/lib/deep"):
        load(SourceOptions(repo=str(top), cache_dir=tmp_path / "cache"))


def test_a_fresh_clone_without_submodule_init_is_refused(tmp_path: Path) -> None:
    """`git clone` without --recurse-submodules: the gitlink is in the index, its directory empty."""
    _, url = superproject(tmp_path)
    run_git(tmp_path, "clone", "-q", url, "clone")
    with pytest.raises(RenderError, match="Git submodule vendor/lib"):
        load(SourceOptions(repo=str(tmp_path / "clone"), cache_dir=tmp_path / "cache"))


def test_a_work_tree_without_submodules_lists_none(tmp_path: Path) -> None:
    repo = git.Repo.init(tmp_path / "w", initial_branch="main")
    commit(repo, {"a.yaml": CM.format(name="a")})
    assert fetch(str(tmp_path / "w")).holes == ()
