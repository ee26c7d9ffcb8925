"""Turn `--repo/--revision/--path` into a directory to render and the commit it came from.

Remote repositories are fetched into a bare cache repository and each commit is materialised once into
its own directory (clonecache.py), under the cache's flock (cachelock.py), so concurrent readers never see
a half-updated tree and the user's own work tree is never touched. A local work tree is rendered in place,
its revision `-dirty` when it differs from HEAD. The `Checkout` goes to the render (and the render cache)
next; its revision appears in every report.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from gitops_sync.errors import SourceError
from gitops_sync.source.cachelock import STALE_LOCK_AGE, clear_stale_locks, locked
from gitops_sync.source.clonecache import cache_root, materialise, open_bare
from gitops_sync.source.credentials import GitCredentials, authenticated
from gitops_sync.source.gitdir import might_be_repository
from gitops_sync.source.giterrors import run_remote, stderr_tail
from gitops_sync.source.identity import SourceIdentity, identify
from gitops_sync.source.refs import up_to_date
from gitops_sync.source.remote import Remote, is_remote, mask_url
from gitops_sync.source.revisions import DIRTY, is_ancestor, knows_commit, short_revision
from gitops_sync.source.safegit import run_git, safe_env
from gitops_sync.source.submodules import commit_gitlinks, gitlinks, work_tree_submodules
from gitops_sync.source.worktree import is_dirty

if TYPE_CHECKING:
    import git

    from gitops_sync.source.allow import LocalRepositories

# What other modules import from here (most of it lives next door now).
__all__ = [
    "DIRTY",
    "STALE_LOCK_AGE",
    "Checkout",
    "cache_root",
    "clear_stale_locks",
    "fetch",
    "gitlinks",
    "is_ancestor",
    "is_remote",
    "knows_commit",
    "mask_url",
    "short_revision",
]

_REMOTE_HEAD = "refs/gitops-sync/remote-head"


@dataclass(frozen=True)
class Checkout:
    """The directory to render and where it came from (the revision appears in every report)."""

    root: Path  # directory to render (repo work tree joined with --path)
    revision: str  # full commit SHA; HEAD SHA + "-dirty" for a modified local work tree; "" for a plain dir
    repo: str  # the URL or path as given
    ref: str  # the revision as asked (branch/tag/sha) or ""
    # The top of the repository as given (root without --path): the boundary symlinks may not leave and
    # the base of relative values-file paths. None only when built by hand; then `root` serves.
    repo_root: Path | None = None
    # Which source this is, however `repo` was spelled (names the inventory); set by `fetch`.
    identity: SourceIdentity | None = field(default=None, compare=False)
    # The files of a commit (materialised in the cache, never edited): the repository's git directory and the
    # rendered root's path inside the commit ("" for its top), so the render cache can key on the Git tree.
    # None for a plain directory or a work tree, whose files may differ from any commit.
    git_dir: Path | None = field(default=None, compare=False)
    git_path: str | None = field(default=None, compare=False)
    # Git submodules under repo_root whose files are not here (posix, relative to repo_root): every submodule
    # of a materialised commit (its gitlink is an empty directory: submodules are never fetched), one not
    # checked out in a work tree. The render refuses to read one (RenderOptions.holes).
    holes: tuple[str, ...] = field(default=(), compare=False)
    # Charts the render pulled from repositories (helm-chart.yaml, Chart.yaml dependencies): one
    # {repository, chart, version, digest} each, set by engine.load after the render, for every report and /status.
    charts: tuple[dict[str, str], ...] = field(default=(), compare=False)
    # Helm hooks of the render (objects annotated helm.sh/hook, DesiredObjects): run by a pass as phases around
    # the apply (engine/hooks.py), never applied as objects; set by engine.load.
    hooks: tuple[object, ...] = field(default=(), compare=False)
    # Who signed the commit (or tag), when --verify-commits / --verify-tag checked (source/verify.py); reported.
    signer: str = field(default="", compare=False)


def fetch(
    repo: str,
    revision: str | None = None,
    path: str | None = None,
    *,
    cache_dir: Path | None = None,
    timeout: float = 60,
    local_policy: LocalRepositories | None = None,
    credentials: GitCredentials | None = None,
) -> Checkout:
    """Resolve the source to a directory on disk and the commit it shows.

    `cache_dir` holds one sub-directory per repository (default `$XDG_CACHE_HOME/gitops-sync/repos`).
    Remote repositories are looked at on every call so that a force-pushed branch is followed: fetched unless
    the remote advertises exactly the refs the clone holds (source/refs.py).
    `local_policy` (the fleet's): a local path or `file://` URL it refuses raises RepositoryNotAllowed before
    anything reads it; checked on every fetch, so a path turned into a symlink since the last one is caught,
    and the directory it resolved to is the one read. `credentials`: for a remote, on top of the URL's own
    (source/credentials.py); a local repository needs none.
    """
    target = repo
    real = local_policy.check(repo) if local_policy is not None else None
    if real is not None:
        # What was checked is what is read: a symlink swapped since the check leads nowhere new.
        target = f"file://{quote(str(real))}" if is_remote(repo) else str(real)
    if revision is not None and revision.strip() in ("", "HEAD"):
        revision = None
    if revision is not None and revision.startswith("-"):
        raise SourceError(f"invalid revision {revision!r} for {mask_url(repo)}")
    cache = cache_root(cache_dir)
    if is_remote(target):
        checkout = _fetch_remote(target, revision, path, cache, timeout, credentials)
    else:
        checkout = _fetch_local(target, revision, path, cache, timeout)
    return replace(checkout, repo=repo, identity=identify(repo, path))


def _fetch_remote(
    url: str, revision: str | None, path: str | None, cache: Path, timeout: float, creds: GitCredentials | None
) -> Checkout:
    masked = mask_url(url)
    with authenticated(url, creds) as remote:
        repo_cache = cache / repository_key(remote.url, creds.cache_scope if creds is not None else "")
        return _fetch_with(url, remote, masked, revision, path, repo_cache, timeout)


def repository_key(url: str, scope: str) -> str:
    """The clone cache's directory of `url` (without credentials) fetched by `scope`, never a credential: a
    rotated token keeps its cache. Each tenant scope has its own: a tenant never reads objects fetched with
    the controller's or another tenant's credentials (a commit its own could not fetch)."""
    key = url.rstrip("/") + (f"\0{scope}" if scope else "")
    return hashlib.sha256(key.encode()).hexdigest()[:24]


def _fetch_with(
    url: str, remote: Remote, masked: str, revision: str | None, path: str | None, repo_cache: Path, timeout: float
) -> Checkout:
    with locked(repo_cache):
        bare = open_bare(repo_cache / "repo.git", masked)
        clear_stale_locks(repo_cache / "repo.git")
        refspecs = ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"]
        if revision is None:
            refspecs.append(f"+HEAD:{_REMOTE_HEAD}")
        # Submodules are never fetched: their gitlinks are holes (submodules.py).
        fetch_args = ("fetch", "--no-write-fetch-head", "--no-recurse-submodules")
        # A poll of a remote that has not moved: one ls-remote (one request) instead of a fetch (two or more).
        if not up_to_date(bare, timeout, url, remote, _REMOTE_HEAD if revision is None else None):
            run_remote(bare, timeout, url, remote, *fetch_args, "--prune", "--force", "--", remote.url, *refspecs)
        sha = _resolve(bare, revision or _REMOTE_HEAD, masked, timeout)
        if sha is None and revision is not None and re.fullmatch(r"[0-9a-fA-F]{40}", revision):
            # A commit no branch or tag points at: servers that allow it hand it out by SHA.
            with contextlib.suppress(SourceError):
                run_remote(bare, timeout, url, remote, *fetch_args, "--", remote.url, revision)
            sha = _resolve(bare, revision, masked, timeout)
        if sha is None:
            raise SourceError(f"unknown revision {revision!r} in {masked} (not a branch, tag or commit)")
        tree = materialise(bare, sha, repo_cache / "trees", masked, timeout)
        holes = commit_gitlinks(bare, sha, "", masked, timeout)
    root = _sub_path(tree, path, masked)
    return Checkout(
        root, sha, url, revision or "", tree, git_dir=Path(bare.git_dir), git_path=_inside(root, tree), holes=holes
    )


def _fetch_local(repo: str, revision: str | None, path: str | None, cache: Path, timeout: float) -> Checkout:
    given = Path(repo).expanduser()
    if not given.exists():
        raise SourceError(f"{repo}: no such file or directory")
    if not given.is_dir():
        raise SourceError(f"{repo}: not a directory")
    given = given.resolve()
    if not os.access(given, os.R_OK | os.X_OK):
        raise SourceError(f"{repo}: permission denied (this process, uid {os.getuid()}, cannot read it)")
    if not might_be_repository(given):
        return _plain_directory(repo, revision, path, given)
    import git
    from git.exc import InvalidGitRepositoryError, NoSuchPathError

    try:
        local = git.Repo(given, search_parent_directories=True)
    except (InvalidGitRepositoryError, NoSuchPathError):
        return _plain_directory(repo, revision, path, given)
    local.git.update_environment(**safe_env())  # no command its own configuration names runs (safegit.py)
    with local:
        if revision is None and not local.bare:
            root = _sub_path(given, path, repo)
            holes = work_tree_submodules(local, given, repo, timeout)[1]
            revision = _work_tree_revision(local, root, repo, timeout)
            return Checkout(root, revision, repo, "", given, holes=holes)
        # A revision of a local repository: materialise it in the cache, the user's tree stays as it is.
        sha = _resolve(local, revision or "HEAD", repo, timeout)
        if sha is None:
            what = f"unknown revision {revision!r}" if revision else "no commit at HEAD"
            raise SourceError(f"{what} in {repo}")
        top = Path(local.working_tree_dir or local.git_dir).resolve()
        repo_cache = cache / hashlib.sha256(str(top).encode()).hexdigest()[:24]
        inside = given.relative_to(top).as_posix() if given.is_relative_to(top) else ""
        with locked(repo_cache):
            tree = materialise(local, sha, repo_cache / "trees", repo, timeout)
        holes = commit_gitlinks(local, sha, "" if inside == "." else inside, repo, timeout)
    base = tree / given.relative_to(top) if given.is_relative_to(top) else tree
    if not base.is_dir():
        raise SourceError(f"{repo}: directory {given.relative_to(top)} does not exist at revision {sha}")
    root = _sub_path(base, path, repo)
    return Checkout(
        root, sha, repo, revision or "", base, git_dir=Path(local.git_dir), git_path=_inside(root, tree), holes=holes
    )


def _plain_directory(repo: str, revision: str | None, path: str | None, given: Path) -> Checkout:
    """A directory outside any Git repository: rendered as it is, with no revision."""
    if revision is not None:
        raise SourceError(f"{repo}: revision {revision!r} asked, but this is no Git repository")
    return Checkout(_sub_path(given, path, repo), "", repo, "", given)


def _inside(root: Path, tree: Path) -> str | None:
    """`root`'s path inside the materialised commit `tree` (posix, "" for the top); None if it left it."""
    real, top = root.resolve(), tree.resolve()
    if not real.is_relative_to(top):
        return None
    rel = real.relative_to(top).as_posix()
    return "" if rel == "." else rel


def _work_tree_revision(local: git.Repo, root: Path, name: str, timeout: float) -> str:
    """HEAD's SHA, `-dirty` when what we render differs from it (untracked files count: we render them; so do
    those inside a checked-out submodule), told by worktree.py without running what the repository configures."""
    sha = _resolve(local, "HEAD", name, timeout)  # not GitPython's: it reads the object with no timeout
    if sha is None:  # no commit yet
        return ""
    top = Path(local.working_tree_dir or ".").resolve()
    scope = str(root.relative_to(top)) if root.is_relative_to(top) else None
    return f"{sha}{DIRTY}" if is_dirty(top, scope, name, timeout) else sha


def _sub_path(base: Path, path: str | None, name: str) -> Path:
    """`--path` inside the repository: it must exist and must not lead out of it (`..`, symlinks)."""
    if not path or path in (".", "./"):
        return base
    if Path(path).is_absolute():
        raise SourceError(f"{mask_url(name)}: --path {path!r} must be relative to the repository")
    top = base.resolve()
    target = (base / path).resolve()
    # Lexically (`../x` even when it comes back in) and after symlinks: both must stay inside.
    if posixpath.normpath(path.replace("\\", "/")).startswith("..") or not target.is_relative_to(top):
        raise SourceError(f"{mask_url(name)}: --path {path!r} leads outside the repository")
    if not target.is_dir():
        raise SourceError(f"{mask_url(name)}: --path {path!r} does not exist or is not a directory")
    return target


def _resolve(repo: git.Repo, revision: str, name: str, timeout: float) -> str | None:
    """Full SHA of a branch, tag (peeled), full or abbreviated SHA; None when nothing matches. A git that
    hangs (a stalled file system) ends in a SourceError naming the repository, never in "unknown revision"."""
    env = {**os.environ, **repo.git.environment(), "LC_ALL": "C"}
    argv = ["git", f"--git-dir={repo.git_dir}", "rev-parse", "--verify", "--end-of-options", f"{revision}^{{commit}}"]
    where = mask_url(name)
    done = run_git(argv, env, timeout, prefix=f"{where}: cannot resolve {revision!r}: ", ok=(0, 128))
    if done.returncode != 0:
        stderr = done.stderr.decode(errors="replace")
        if "ambiguous" in stderr:
            raise SourceError(f"revision {revision!r} is ambiguous in {where}: {stderr_tail(stderr)}") from None
        return None
    return done.stdout.decode().strip() or None
