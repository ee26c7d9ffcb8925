"""gitops_sync.source.allow: which local paths a fleet source may name (real directories, clones, symlinks).

The attack these guard against: tenant A's GitSync fetches a private repository into the clone cache at a
predictable path; tenant B names that path (or a file:// URL, a symlink, `..`, a `.git` file or alternates
leading to it) as its own spec.repository and would get A's manifests applied into B's namespace.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import git
import pytest

from gitops_sync.errors import RepositoryNotAllowed, SourceError
from gitops_sync.source import fetch
from gitops_sync.source.allow import LocalRepositories, local_path_of, real_path

ACTOR = git.Actor("Test", "test@example.invalid")
SECRET = "kind: Secret\napiVersion: v1\nmetadata: {name: a-private}\nstringData: {token: tenant-a-only}\n"


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path, str]:
    """(allowed directory, clone cache, URL of tenant A's repository) with A's repository cloned into the
    cache by a fetch, as the fleet does for A's GitSync."""
    allowed, cache = tmp_path / "repos", tmp_path / "cache"
    allowed.mkdir()
    origin = git.Repo.init(tmp_path / "tenant-a.git", bare=True, initial_branch="main")
    work = git.Repo.init(tmp_path / "a-work", initial_branch="main")
    (tmp_path / "a-work" / "secret.yaml").write_text(SECRET)
    work.git.add("--all")
    work.index.commit("a", author=ACTOR, committer=ACTOR)
    work.create_remote("origin", str(origin.git_dir)).push("main")
    url = f"file://{origin.git_dir}"
    fetch(url, cache_dir=cache)  # A's clone: <cache>/<sha256(url)[:24]>/repo.git and trees/<sha>
    return allowed, cache, url


def clone_of(cache: Path, url: str) -> Path:
    return cache / hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:24]


def policy(allowed: Path, cache: Path, *more: Path) -> LocalRepositories:
    return LocalRepositories.of([allowed, *more], cache)


# --- what counts as local ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("repo", "path"),
    [
        ("https://git.example/a.git", None),
        ("ssh://git@git.example/a.git", None),
        ("git@git.example:org/a.git", None),
        ("/srv/repos/a", "/srv/repos/a"),
        ("relative/dir", "relative/dir"),
        ("file:///srv/repos/a", "/srv/repos/a"),
        ("FILE:///srv/repos/a", "/srv/repos/a"),
        ("file://any-host/srv/x", "/srv/x"),  # git drops the authority
        ("file:///srv/sr%76/x", "/srv/srv/x"),  # and percent-decodes
        ("file:///srv/a#/../../cache", "/srv/a#/../../cache"),  # `#` and `?` are part of git's path
    ],
)
def test_local_path_of_reads_paths_and_file_urls_as_git_does(repo: str, path: str | None) -> None:
    assert local_path_of(repo) == path


def test_remote_urls_are_not_checked(layout: tuple[Path, Path, str]) -> None:
    _, cache, _ = layout
    assert LocalRepositories.of([], cache).check("https://git.example/org/deploy.git") is None


# --- the allow-list ------------------------------------------------------------------------------------


def test_a_local_path_is_refused_without_an_allow_list(layout: tuple[Path, Path, str]) -> None:
    allowed, cache, _ = layout
    (allowed / "b").mkdir()
    with pytest.raises(RepositoryNotAllowed) as err:
        LocalRepositories.of([], cache).check(str(allowed / "b"))
    assert str(allowed / "b") in str(err.value) and "--allow-local-repository" in str(err.value)
    assert "(allowed: none)" in str(err.value)


def test_a_local_path_under_an_allowed_directory_is_accepted(layout: tuple[Path, Path, str]) -> None:
    allowed, cache, _ = layout
    (allowed / "b" / "apps").mkdir(parents=True)
    assert policy(allowed, cache).check(str(allowed / "b" / "apps")) == (allowed / "b" / "apps").resolve()
    assert policy(allowed, cache).check(f"file://{allowed / 'b'}") == (allowed / "b").resolve()


def test_a_local_path_beside_the_allowed_directory_is_refused(layout: tuple[Path, Path, str], tmp_path: Path) -> None:
    allowed, cache, _ = layout
    (tmp_path / "repos-other").mkdir()  # a prefix of the allowed name is not inside it
    for repo in (str(tmp_path / "repos-other"), str(allowed / ".." / "repos-other"), str(tmp_path)):
        with pytest.raises(RepositoryNotAllowed, match="not allowed"):
            policy(allowed, cache).check(repo)


# --- the clone cache: never, even under an allowed parent ----------------------------------------------


def test_every_path_into_the_clone_cache_is_refused(layout: tuple[Path, Path, str], tmp_path: Path) -> None:
    allowed, cache, url = layout
    clone = clone_of(cache, url)
    (tree,) = (clone / "trees").iterdir()
    assert (tree / "secret.yaml").read_text() == SECRET  # what tenant B is after
    (allowed / "link").symlink_to(clone)
    # tmp_path holds both the allowed directory and the cache: allowed, the cache below it is still refused.
    rule = policy(allowed, cache, tmp_path)
    for repo in (
        str(clone / "repo.git"),  # the bare clone
        str(tree),  # a materialised commit, a plain directory
        str(cache),
        str(clone),
        f"file://{clone / 'repo.git'}",
        f"file://localhost{clone / 'repo.git'}",
        "file://" + str(clone / "repo.git").replace("/repo.git", "/rep%6f.git"),
        str(allowed / "link" / "repo.git"),  # through a symlink
        str(allowed / ".." / "cache" / clone.name / "repo.git"),  # through `..`
        str(tmp_path),  # a directory that holds the cache: a render would walk into it
    ):
        with pytest.raises(RepositoryNotAllowed, match="clone cache") as err:
            rule.check(repo)
        assert str(cache.resolve()) in str(err.value)


def test_the_default_clone_cache_is_refused_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gitops_sync.source.checkout import cache_root

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cache = cache_root(None)
    (cache / "abc" / "repo.git").mkdir(parents=True)
    with pytest.raises(RepositoryNotAllowed, match="clone cache"):
        LocalRepositories.of([tmp_path], cache).check(str(cache / "abc" / "repo.git"))


def test_an_allowed_directory_inside_the_cache_is_a_start_up_error(layout: tuple[Path, Path, str]) -> None:
    allowed, cache, url = layout
    with pytest.raises(ValueError, match="inside the clone cache"):
        LocalRepositories.of([clone_of(cache, url)], cache)
    with pytest.raises(ValueError, match="inside the clone cache"):
        LocalRepositories.of([cache], cache)
    with pytest.raises(ValueError, match="no such directory"):
        LocalRepositories.of([allowed / "missing"], cache)


def test_git_data_in_the_cache_is_refused(layout: tuple[Path, Path, str]) -> None:
    """A repository in an allowed directory whose Git data is a clone's: a `.git` file, a bare layout whose
    alternates borrow a clone's objects (a commit of A's then resolves by SHA)."""
    allowed, cache, url = layout
    clone = clone_of(cache, url)
    gitfile = allowed / "gitfile"
    gitfile.mkdir()
    (gitfile / ".git").write_text(f"gitdir: {clone / 'repo.git'}\n")
    borrower = git.Repo.init(allowed / "borrower.git", bare=True)
    (Path(borrower.git_dir) / "objects" / "info" / "alternates").write_text(f"{clone / 'repo.git' / 'objects'}\n")
    chained = git.Repo.init(allowed / "chained.git", bare=True)
    (Path(chained.git_dir) / "objects" / "info" / "alternates").write_text(
        os.path.relpath(Path(borrower.git_dir) / "objects", Path(chained.git_dir) / "objects") + "\n"
    )
    for repo in (gitfile, gitfile / "sub-never-made", allowed / "borrower.git", allowed / "chained.git"):
        with pytest.raises(RepositoryNotAllowed, match="Git data"):
            policy(allowed, cache).check(str(repo))
    fine = git.Repo.init(allowed / "fine", initial_branch="main")
    assert policy(allowed, cache).check(str(fine.working_tree_dir)) == real_path(str(fine.working_tree_dir))


# --- through fetch: the fleet's path, and the CLI's unchanged ------------------------------------------


def test_fetch_with_the_policy_refuses_before_reading(layout: tuple[Path, Path, str]) -> None:
    allowed, cache, url = layout
    clone = clone_of(cache, url) / "repo.git"
    before = sorted(p.name for p in cache.iterdir())
    with pytest.raises(RepositoryNotAllowed, match="clone cache"):
        fetch(str(clone), cache_dir=cache, local_policy=policy(allowed, cache))
    with pytest.raises(RepositoryNotAllowed, match="--allow-local-repository"):
        fetch(url, cache_dir=cache, local_policy=LocalRepositories.of([], cache))
    assert sorted(p.name for p in cache.iterdir()) == before  # nothing new reached the clone cache


def test_the_cli_without_a_policy_still_reads_any_local_path(layout: tuple[Path, Path, str]) -> None:
    """The operator running `sync`/`diff` owns the file system: no policy, the cached clone reads as before
    (which is exactly what a GitSync could do before this check)."""
    _, cache, url = layout
    out = fetch(str(clone_of(cache, url) / "repo.git"), "main", cache_dir=cache)
    assert (out.root / "secret.yaml").read_text() == SECRET
    (tree,) = (clone_of(cache, url) / "trees").iterdir()
    assert (fetch(str(tree), cache_dir=cache).root / "secret.yaml").read_text() == SECRET


def test_spec_path_cannot_lead_from_an_allowed_repository_into_the_cache(layout: tuple[Path, Path, str]) -> None:
    allowed, cache, url = layout
    (allowed / "b").mkdir()
    (allowed / "b" / "into").symlink_to(clone_of(cache, url) / "trees")
    rule = policy(allowed, cache)
    with pytest.raises(SourceError, match="leads outside the repository"):
        fetch(str(allowed / "b"), path="into", cache_dir=cache, local_policy=rule)
    with pytest.raises(SourceError, match="leads outside the repository"):
        fetch(str(allowed / "b"), path="../../cache", cache_dir=cache, local_policy=rule)


def test_fetch_reads_the_directory_it_checked_not_the_name_again(
    layout: tuple[Path, Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A symlink swapped into the cache between the check and the read (made certain by swapping it inside
    the check) changes nothing: the fetch opens the directory the check resolved."""
    allowed, cache, url = layout
    (tree,) = (clone_of(cache, url) / "trees").iterdir()
    own = allowed / "b-real"
    own.mkdir()
    (own / "cm.yaml").write_text("kind: ConfigMap\n")
    link = allowed / "b"
    link.symlink_to(own)
    checked = LocalRepositories.check

    def check_then_swap(self: LocalRepositories, repo: str) -> Path | None:
        real = checked(self, repo)
        (allowed / "swap").symlink_to(tree)
        os.replace(allowed / "swap", link)  # atomic: `b` now leads into the clone cache
        return real

    monkeypatch.setattr(LocalRepositories, "check", check_then_swap)
    out = fetch(str(link), cache_dir=cache, local_policy=policy(allowed, cache))
    assert out.root == own.resolve() and out.repo == str(link)
    assert sorted(p.name for p in out.root.iterdir()) == ["cm.yaml"]
