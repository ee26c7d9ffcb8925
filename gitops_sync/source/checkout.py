"""Turn `--repo/--revision/--path` into a directory to render and the commit it came from.

Remote repositories are fetched into a bare cache repository and each commit is materialised once into
its own directory (written aside, then renamed into place), so concurrent readers never see a
half-updated tree and the user's own work tree is never touched.

Every git command on a cache runs under our own per-repository flock (`<cache>/<repo>/lock`). A git
`*.lock` file found in the cache while we hold that flock was left by a git process that died (an OOM
kill, a timeout): once it is a few seconds old it is removed, and the removal is logged.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import posixpath
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote, urlsplit

from gitops_sync.errors import SourceError
from gitops_sync.formatting import last_lines
from gitops_sync.log import get_logger
from gitops_sync.source.gitdir import might_be_repository
from gitops_sync.source.identity import SourceIdentity, identify

if TYPE_CHECKING:
    import git

    from gitops_sync.source.allow import LocalRepositories

log = get_logger(__name__)

_REMOTE_SCHEMES = ("https://", "http://", "ssh://", "git://", "file://", "git+ssh://", "ssh+git://")
_SCP_LIKE = re.compile(r"^[\w.-]+@[\w.-]+:(?!//)")  # git@github.com:org/repo.git
# Userinfo runs to the LAST `@` of the URL's token: `https://user:p@ss@host` must hide all of `p@ss`.
# (An `@` in a path makes this hide more than needed, never less.)
_USERINFO = re.compile(r"(?<=://)[^\s'\"<>]*@")
_REMOTE_HEAD = "refs/gitops-sync/remote-head"
DIRTY = "-dirty"  # suffix of the revision of a work tree with uncommitted changes
_KEEP_TREES = 8  # materialised commits kept per repository; older ones are removed on the next fetch
# A git lock file this old, found while we hold the cache's flock, belongs to no live git process of ours.
STALE_LOCK_AGE = 5.0
# Never prompt: a sync in CI must fail on bad credentials rather than hang on a password prompt.
_GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GCM_INTERACTIVE": "never", "GIT_ASKPASS": "true"}
# Credentials from a URL reach git through the environment only, never its command line (`ps` shows that
# to every user): a credential helper, configured by GIT_CONFIG_* variables, prints these two variables.
_USER_VAR, _PASSWORD_VAR = "GITOPS_SYNC_CREDENTIAL_USERNAME", "GITOPS_SYNC_CREDENTIAL_PASSWORD"
_HELPER = f'!f() {{ test "$1" = get || exit 0; echo "username=${_USER_VAR}"; echo "password=${_PASSWORD_VAR}"; }}; f'


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
    # Who signed the commit, when --verify-commits checked it (source/verify.py); shown in the report.
    signer: str = field(default="", compare=False)


def mask_url(text: str) -> str:
    """Hide `user:password@` in URLs: tokens embedded in a repo URL must never reach logs or reports."""
    return _USERINFO.sub("***@", text)


@dataclass(frozen=True)
class _Remote:
    """A remote URL split for git: what goes on the command line and what goes in the environment."""

    url: str  # without a password (and, for http(s), without any userinfo)
    env: dict[str, str]

    @classmethod
    def of(cls, url: str) -> _Remote:
        scheme, sep, rest = url.partition("://")
        authority, slash, path = rest.partition("/")
        userinfo, at, host = authority.rpartition("@")
        if not sep or not at:
            return cls(url, {})
        user, _, password = userinfo.partition(":")
        if scheme.lower() not in ("http", "https"):
            # ssh and the others: a user name is no secret and ssh needs it; a password cannot work anyway.
            return cls(f"{scheme}://{user + '@' if user else ''}{host}{slash}{path}", {})
        count = int(os.environ.get("GIT_CONFIG_COUNT", "0") or 0)  # keep whatever the caller configured
        env = {
            "GIT_CONFIG_COUNT": str(count + 2),
            f"GIT_CONFIG_KEY_{count}": "credential.helper",
            f"GIT_CONFIG_VALUE_{count}": "",  # an empty helper clears the list: the URL's credentials win
            f"GIT_CONFIG_KEY_{count + 1}": "credential.helper",
            f"GIT_CONFIG_VALUE_{count + 1}": _HELPER,
            _USER_VAR: unquote(user),
            _PASSWORD_VAR: unquote(password),
        }
        return cls(f"{scheme}://{host}{slash}{path}", env)


def short_revision(revision: str, length: int = 12) -> str:
    """`3f2c…(12)` with the `-dirty` marker kept: shortened first, then the suffix, so a report never
    names a clean commit for uncommitted files."""
    sha, dirty, _ = revision.partition(DIRTY)
    return sha[:length] + (DIRTY if dirty else "")


def is_remote(repo: str) -> bool:
    """URLs and scp-like `user@host:path` are remote; anything else is a local path."""
    return repo.startswith(_REMOTE_SCHEMES) or bool(_SCP_LIKE.match(repo))


def fetch(
    repo: str,
    revision: str | None = None,
    path: str | None = None,
    *,
    cache_dir: Path | None = None,
    timeout: float = 60,
    local_policy: LocalRepositories | None = None,
) -> Checkout:
    """Resolve the source to a directory on disk and the commit it shows.

    `cache_dir` holds one sub-directory per repository (default `$XDG_CACHE_HOME/gitops-sync/repos`).
    Remote repositories are fetched on every call so that a force-pushed branch is followed.
    `local_policy` (the fleet's): a local path or `file://` URL it refuses raises RepositoryNotAllowed before
    anything reads it; checked on every fetch, so a path turned into a symlink since the last one is caught,
    and the directory it resolved to is the one read.
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
    # Absolute and without symlinks: git runs in the cache's own directories, where a relative path
    # would mean something else.
    cache = (cache_dir if cache_dir is not None else _default_cache_dir()).expanduser().resolve()
    if is_remote(target):
        checkout = _fetch_remote(target, revision, path, cache, timeout)
    else:
        checkout = _fetch_local(target, revision, path, cache, timeout)
    return replace(checkout, repo=repo, identity=identify(repo, path))


def knows_commit(repo: str, sha: str) -> bool:
    """Whether commit `sha` exists in the local repository `repo`: evidence that a record made from a
    relative `--repo` spelling was made from this very repository. Never true for a remote URL."""
    if is_remote(repo) or not re.fullmatch(r"[0-9a-f]{40}", sha) or not might_be_repository(Path(repo)):
        return False
    import git  # GitPython: only for sources that are Git repositories (~30 ms to import)
    from git.exc import GitCommandError, InvalidGitRepositoryError, NoSuchPathError

    try:
        local = git.Repo(Path(repo).expanduser(), search_parent_directories=True)
    except (InvalidGitRepositoryError, NoSuchPathError, OSError):
        return False
    with local:
        try:
            local.git.execute(["git", "cat-file", "-e", f"{sha}^{{commit}}"])
        except GitCommandError:
            return False
    return True


def is_ancestor(checkout: Checkout, older: str, newer: str) -> bool | None:
    """Whether commit `older` comes strictly before `newer` in the history of `checkout`'s repository.

    None when that cannot be told: a plain directory, a revision that is not a commit, a commit this clone
    or work tree does not have (a shallow CI checkout). A work tree's `-dirty` marker is ignored."""
    a, b = older.removesuffix(DIRTY), newer.removesuffix(DIRTY)
    if not (re.fullmatch(r"[0-9a-f]{40}", a) and re.fullmatch(r"[0-9a-f]{40}", b)):
        return None
    if a == b:
        return False
    where = checkout.git_dir or checkout.repo_root or checkout.root
    if checkout.git_dir is None and not might_be_repository(where):
        return None
    import git
    from git.exc import GitCommandError, InvalidGitRepositoryError, NoSuchPathError

    try:
        repo = git.Repo(where, search_parent_directories=True)
    except (InvalidGitRepositoryError, NoSuchPathError, OSError):
        return None
    with repo:
        try:
            repo.git.execute(["git", "merge-base", "--is-ancestor", a, b])
        except GitCommandError as exc:
            return False if exc.status == 1 else None  # 1: not an ancestor; else a commit it does not have
    return True


def cache_root(cache_dir: Path | None) -> Path:
    """The clone cache's directory: `cache_dir` or `$XDG_CACHE_HOME/gitops-sync/repos` (the render cache
    keeps its entries in a sub-directory of it)."""
    return (cache_dir if cache_dir is not None else _default_cache_dir()).expanduser().resolve()


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gitops-sync" / "repos"


def _fetch_remote(url: str, revision: str | None, path: str | None, cache: Path, timeout: float) -> Checkout:
    masked = mask_url(url)
    remote = _Remote.of(url)
    # Keyed without credentials: a rotated token keeps its cache.
    repo_cache = cache / hashlib.sha256(remote.url.rstrip("/").encode()).hexdigest()[:24]
    with _locked(repo_cache):
        bare = _open_bare(repo_cache / "repo.git", masked)
        clear_stale_locks(repo_cache / "repo.git")
        refspecs = ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"]
        if revision is None:
            refspecs.append(f"+HEAD:{_REMOTE_HEAD}")
        _run(
            bare,
            timeout,
            url,
            remote.env,
            "fetch",
            "--prune",
            "--force",
            "--no-write-fetch-head",
            "--",
            remote.url,
            *refspecs,
        )
        sha = _resolve(bare, revision or _REMOTE_HEAD, masked, timeout)
        if sha is None and revision is not None and re.fullmatch(r"[0-9a-fA-F]{40}", revision):
            # A commit no branch or tag points at: servers that allow it hand it out by SHA.
            with contextlib.suppress(SourceError):
                _run(bare, timeout, url, remote.env, "fetch", "--no-write-fetch-head", "--", remote.url, revision)
            sha = _resolve(bare, revision, masked, timeout)
        if sha is None:
            raise SourceError(f"unknown revision {revision!r} in {masked} (not a branch, tag or commit)")
        tree = _materialise(bare, sha, repo_cache / "trees", masked, timeout)
        holes = _commit_gitlinks(bare, sha, "", masked, timeout)
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
    local.git.update_environment(**_GIT_ENV)
    with local:
        if revision is None and not local.bare:
            root = _sub_path(given, path, repo)
            submodules, holes = _work_tree_submodules(local, given, repo)
            revision = _work_tree_revision(local, root, repo, submodules=bool(submodules))
            return Checkout(root, revision, repo, "", given, holes=holes)
        # A revision of a local repository: materialise it in the cache, the user's tree stays as it is.
        sha = _resolve(local, revision or "HEAD", repo, timeout)
        if sha is None:
            what = f"unknown revision {revision!r}" if revision else "no commit at HEAD"
            raise SourceError(f"{what} in {repo}")
        top = Path(local.working_tree_dir or local.git_dir).resolve()
        repo_cache = cache / hashlib.sha256(str(top).encode()).hexdigest()[:24]
        inside = given.relative_to(top).as_posix() if given.is_relative_to(top) else ""
        with _locked(repo_cache):
            tree = _materialise(local, sha, repo_cache / "trees", repo, timeout)
        holes = _commit_gitlinks(local, sha, "" if inside == "." else inside, repo, timeout)
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


# A submodule's record in `git ls-tree -r -z` / `git ls-files -s -z` output starts with its mode: a commit of
# another repository. Then `<type> <sha>` or `<sha> <stage>`, a tab and the path.
_GITLINK = "\x00160000 "


def gitlinks(listing: str, under: str = "") -> tuple[str, ...]:
    """The submodule paths in NUL-separated `git ls-tree -r -z` / `git ls-files -s -z` output, those under
    `under` only and relative to it (posix). str.find, not a per-record split: 20,000 files take ~1 ms."""
    prefix = f"{under}/" if under else ""
    text = "\0" + listing
    found = []
    start = text.find(_GITLINK)
    while start != -1:
        tab = text.find("\t", start)
        end = text.find("\0", tab)
        path = text[tab + 1 : end if end != -1 else len(text)]
        if tab != -1 and path.startswith(prefix):
            found.append(path[len(prefix) :])
        start = text.find(_GITLINK, start + 1) if end != -1 else -1
    return tuple(sorted(found))


def _commit_gitlinks(repo: git.Repo, sha: str, under: str, name: str, timeout: float) -> tuple[str, ...]:
    """Every submodule of commit `sha` under `under`: none of them has its files in the materialised tree."""
    from git.exc import GitCommandError

    try:
        listing: str = repo.git.execute(["git", "ls-tree", "-r", "-z", "--full-tree", sha], kill_after_timeout=timeout)
    except GitCommandError as err:
        raise SourceError(f"{mask_url(name)}: cannot list the files of {sha}: {_tail(err.stderr)}") from None
    return gitlinks(listing, under)


def _work_tree_submodules(local: git.Repo, given: Path, name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The submodules of the work tree under `given` (those of checked-out submodules too, read from their own
    index), and those of them not checked out (their directory holds no `.git`: `git submodule update --init`
    was never run, or `deinit` was), relative to `given`."""
    top = Path(local.working_tree_dir or ".").resolve()
    inside = given.relative_to(top).as_posix() if given.is_relative_to(top) else ""
    pending = list(gitlinks(_index(local, top, name), "" if inside == "." else inside))
    found: list[str] = []
    holes: list[str] = []
    while pending:
        path = pending.pop()
        found.append(path)
        if not os.path.lexists(given / path / ".git"):
            holes.append(path)
            continue
        pending += [f"{path}/{inner}" for inner in gitlinks(_index(local, given / path, name))]
    return tuple(sorted(found)), tuple(sorted(holes))


def _index(local: git.Repo, directory: Path, name: str) -> str:
    """`git ls-files -s -z` of the repository whose work tree `directory` is the top of."""
    from git.exc import GitCommandError

    try:
        listing: str = local.git.execute(["git", "-C", str(directory), "ls-files", "-s", "-z", "--full-name"])
    except GitCommandError as err:
        raise SourceError(f"{name}: cannot read the Git index of {directory}: {_tail(err.stderr)}") from None
    return listing


def _work_tree_revision(local: git.Repo, root: Path, name: str, *, submodules: bool = False) -> str:
    """HEAD's SHA, `-dirty` when what we render differs from it (untracked files count: we render them; so do
    those inside a checked-out submodule, which `is_dirty` does not see, hence `git status` with `submodules`)."""
    from git.exc import GitCommandError

    try:
        sha = local.head.commit.hexsha
    except ValueError:  # no commit yet
        return ""
    top = Path(local.working_tree_dir or ".").resolve()
    scope = str(root.relative_to(top)) if root.is_relative_to(top) else None
    try:
        dirty = local.is_dirty(untracked_files=True, path=scope)
        if not dirty and submodules:
            dirty = bool(local.git.execute(["git", "status", "--porcelain", "--", scope or "."]).strip())
    except GitCommandError as err:
        raise SourceError(f"{name}: cannot read the Git status: {_tail(err.stderr)}") from None
    return f"{sha}{DIRTY}" if dirty else sha


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


def _open_bare(git_dir: Path, name: str) -> git.Repo:
    import git
    from git.exc import GitCommandError, InvalidGitRepositoryError, NoSuchPathError

    try:
        bare = git.Repo(git_dir) if (git_dir / "HEAD").exists() else git.Repo.init(git_dir, bare=True)
    except (InvalidGitRepositoryError, NoSuchPathError, GitCommandError):
        # A cache broken by an interrupted first clone: start again rather than fail for ever.
        shutil.rmtree(git_dir, ignore_errors=True)
        try:
            bare = git.Repo.init(git_dir, bare=True)
        except GitCommandError as err:
            raise SourceError(f"{name}: cannot create the cache at {git_dir}: {_tail(err.stderr)}") from None
    bare.git.update_environment(**_GIT_ENV)
    if not os.environ.get("GIT_SSH_COMMAND") and not os.environ.get("GIT_SSH"):
        bare.git.update_environment(GIT_SSH_COMMAND="ssh -o BatchMode=yes")
    return bare


def _run(repo: git.Repo, timeout: float, url: str, env: dict[str, str], *args: str) -> str:
    """Run a git command against `url` (credentials in `env`), translating failures into a SourceError
    naming the host."""
    from git.exc import GitCommandError, GitCommandNotFound

    try:
        out: str = repo.git.execute(["git", *args], kill_after_timeout=timeout, env=env)
    except GitCommandNotFound:
        raise SourceError("the `git` command is not installed (GitPython needs it on PATH)") from None
    except GitCommandError as err:
        raise SourceError(_explain(url, str(err.stderr or ""), timeout)) from None
    return out


def _explain(url: str, stderr: str, timeout: float) -> str:
    """A one-line reason a user can act on: which host, and whether it is network, auth or a wrong URL."""
    masked = mask_url(url)
    host = _host(url)
    detail = mask_url(_tail(stderr)).replace(url, masked)
    low = stderr.lower()
    if "timeout: the command" in low or "timed out" in low:
        return f"cannot reach {host}: no answer within {timeout:g}s fetching {masked}"
    network = (
        "could not resolve host",
        "could not resolve hostname",
        "name or service not known",
        "connection refused",
        "failed to connect",
        "network is unreachable",
        "no route to host",
        "connection reset",
        "could not read from remote repository",
    )
    auth = (
        "authentication failed",
        "could not read username",
        "could not read password",
        "permission denied",
        "terminal prompts disabled",
        "host key verification failed",
    )
    if ".lock': file exists" in low or ("unable to create" in low and ".lock" in low):
        return (
            f"a git lock file in the clone cache blocks fetching {masked} (another git process, or one that "
            f"died; removed automatically once older than {STALE_LOCK_AGE:g}s): {detail}"
        )
    if "does not appear to be a git repository" in low:
        denied = _permission_problem(url)
        if denied:
            return f"permission denied reading {masked}: {denied}"
    if any(m in low for m in ("does not appear to be a git repository", "repository not found", "404")):
        return f"no Git repository at {masked}: {detail}"
    if any(a in low for a in auth) or re.search(r"\b40[13]\b", low):
        return f"authentication failed for {masked} (host {host}): {detail}"
    if any(n in low for n in network):
        return f"cannot reach {host} fetching {masked}: {detail}"
    return f"git failed fetching {masked}: {detail}"


def _permission_problem(url: str) -> str:
    """For a file:// or path remote git calls "not a git repository": is it really unreadable to us?

    git runs as this process's user, so `os.access` answers what git could do. "" when readable or remote.
    """
    if url.startswith("file://"):
        path = Path(unquote(urlsplit(url).path))
    elif not is_remote(url):
        path = Path(url).expanduser()
    else:
        return ""
    uid = os.getuid()
    for p in [*reversed(path.parents), path]:
        try:
            p.stat()
        except PermissionError:
            return f"uid {uid} may not read {p}"
        except OSError:
            return ""  # missing: git's own message is right
        if p.is_dir() and not os.access(p, os.X_OK | (os.R_OK if p == path else 0)):
            return f"uid {uid} may not read {p}"
    for inner in (path / "HEAD", path / ".git" / "HEAD", path / "objects", path / ".git" / "objects"):
        if inner.exists() and not os.access(inner, os.R_OK):
            return f"uid {uid} may not read {inner}"
    return ""


def _host(url: str) -> str:
    """The host to name in errors (the path for file:// and local repositories)."""
    if url.startswith("file://"):
        return urlsplit(url).path or url
    if "://" in url:
        return urlsplit(url).hostname or mask_url(url)
    match = _SCP_LIKE.match(url)
    return match.group(0).split("@", 1)[1].rstrip(":") if match else url


def _resolve(repo: git.Repo, revision: str, name: str, timeout: float) -> str | None:
    """Full SHA of a branch, tag (peeled), full or abbreviated SHA; None when nothing matches."""
    from git.exc import GitCommandError

    try:
        sha: str = repo.git.execute(
            ["git", "rev-parse", "--verify", "--end-of-options", f"{revision}^{{commit}}"],
            kill_after_timeout=timeout,
        )
    except GitCommandError as err:
        stderr = str(err.stderr or "")
        if "ambiguous" in stderr:
            where = mask_url(name)
            raise SourceError(f"revision {revision!r} is ambiguous in {where}: {_tail(stderr)}") from None
        return None
    return sha.strip() or None


def _materialise(repo: git.Repo, sha: str, trees: Path, name: str, timeout: float) -> Path:
    """The files of commit `sha` in `trees/<sha>`, written aside and renamed into place (atomic)."""
    from git.exc import GitCommandError

    final = trees / sha
    if final.is_dir():
        os.utime(final)  # mark as recently used, so pruning keeps it
        return final
    trees.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".tmp-{sha[:12]}-", dir=trees))
    index = staging.with_suffix(".index")
    # A private index and work tree: the repository's own index, HEAD and work tree are never touched.
    env = {"GIT_INDEX_FILE": str(index)}
    try:
        for args in (["read-tree", sha], ["checkout-index", "--all", "--force"]):
            repo.git.execute(["git", f"--work-tree={staging}", *args], env=env, kill_after_timeout=timeout)
        os.rename(staging, final)
    except GitCommandError as err:
        raise SourceError(f"{mask_url(name)}: cannot check out {sha}: {_tail(err.stderr)}") from None
    except OSError:
        if not final.is_dir():  # someone else renamed the same commit into place first: theirs serves
            raise
    finally:
        index.unlink(missing_ok=True)
        shutil.rmtree(staging, ignore_errors=True)
    _prune_trees(trees, keep=final)
    return final


def _prune_trees(trees: Path, keep: Path) -> None:
    """Drop all but the most recently used checkouts (renamed away first so no reader sees a partial tree).

    Leftovers of an interrupted run (`.tmp-*`, `.trash-*`) older than an hour go too.
    """
    entries: list[Path] = []
    for entry in trees.iterdir():
        if entry.name.startswith("."):
            if time.time() - entry.lstat().st_mtime > 3600:
                _remove(entry)
        elif entry.is_dir() and entry != keep:
            entries.append(entry)
    entries.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    for old in entries[_KEEP_TREES - 1 :]:
        trash = trees / f".trash-{old.name}-{os.getpid()}-{time.monotonic_ns()}"
        with contextlib.suppress(OSError):
            os.rename(old, trash)
            _remove(trash)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def clear_stale_locks(git_dir: Path, min_age: float = STALE_LOCK_AGE) -> list[Path]:
    """Remove git lock files left in a cache repository by a git process that died; call only under `_locked`.

    Holding our flock means no fetch or checkout of ours runs on this repository, so a lock file older than
    `min_age` is stale (the age spares a git process someone started by hand a moment ago). Returns what went.
    """
    candidates = [*git_dir.glob("*.lock"), *git_dir.glob("refs/**/*.lock"), *git_dir.glob("objects/info/*.lock")]
    removed: list[Path] = []
    now = time.time()
    for lock in candidates:
        try:
            age = now - lock.lstat().st_mtime
            if age < min_age:
                log.info("git lock file left in place: too recent to be stale", path=str(lock), age_s=round(age, 1))
                continue
            lock.unlink()
        except OSError:
            continue
        removed.append(lock)
        log.warning("removed a stale git lock file from the clone cache", path=str(lock), age_s=round(age, 1))
    return removed


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """One fetch per repository cache at a time (git itself fails on concurrent ref updates)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        handle = open(directory / "lock", "a+")  # noqa: SIM115 - held for the whole block
    except OSError as err:
        raise SourceError(f"cannot use the cache directory {directory}: {err.strerror}") from None
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _tail(text: object, lines: int = 5, key_lines: int = 6) -> str:
    """Where git says why, credentials masked: its `fatal:`/`error:` lines and any naming a lock file (up to
    `key_lines`), plus the last `lines` lines, in git's order. GitPython wraps stderr as `stderr: '...'`."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    body = str(text or "").strip()
    if body.startswith("stderr:"):
        body = body.removeprefix("stderr:").strip()
        body = body[1:-1] if len(body) > 1 and body[0] == body[-1] == "'" else body
    chosen = last_lines(body, lines, keep=_names_cause, keep_most=key_lines)
    return mask_url(" | ".join(ln.strip() for ln in chosen))


def _names_cause(line: str) -> bool:
    line = line.strip()
    return line.lower().startswith(("fatal:", "error:")) or ".lock" in line
