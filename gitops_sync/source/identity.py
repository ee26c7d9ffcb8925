"""Which source is this? One normalised identity per repository and sub-directory, however it is spelled.

The identity names the inventory (ApplySet) a source owns: two different sources must never share one
(the second one's prune would delete the first one's objects), and one source spelled differently
(`--repo .` in a clone, the remote URL in CI, `./` or `.git` or credentials in the URL) must always get
the same one (else objects move between inventories and are released or orphaned). The engine records
the identity on the inventory parent and refuses a parent recorded for another source; the daemon
derives its Lease from the inventory name.

Rules:
- a Git URL: host (lower case, default port dropped) and path (`.git`, trailing and doubled slashes
  removed), without scheme or credentials: `https://tok@github.com/org/deploy.git`,
  `ssh://git@github.com/org/deploy` and `git@github.com:org/deploy` are one repository;
  `file://` URLs and local remote paths are their real absolute path;
- a local Git work tree (or bare repository) with a remote (`origin`, else its only remote): that
  remote's URL, as above, plus where in the work tree `--repo` points;
- a local Git repository without a usable remote: its real absolute top directory;
- a plain directory: its real absolute path (with `--path` joined in);
- plus `--path`, normalised (`./apps/` is `apps`). The revision is not part of it: CI on `main` and a
  pull request's `diff` on a branch look at one inventory.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from gitops_sync.source.gitdir import might_be_repository

_SCHEMES = ("https", "http", "ssh", "git", "git+ssh", "ssh+git")
_DEFAULT_PORTS = {"https": 443, "http": 80, "ssh": 22, "git+ssh": 22, "ssh+git": 22, "git": 9418}
_SCP_LIKE = re.compile(r"^(?:[^@/\s]+@)?(?P<host>[\w.-]+):(?!//)(?P<path>.*)$")
PREFIX = "gitops-sync"
_HASH_LEN = 10  # hex digits: 40 bits; a collision is still caught by the identity recorded on the parent
MAX_NAME = 57  # so `<name>-lease` (the daemon's Lease) still fits the 63 characters of a label value


@dataclass(frozen=True)
class SourceIdentity:
    """`repo`: normalised repository (`host/org/repo` or an absolute path); `path`: sub-directory or ""."""

    repo: str
    path: str = ""

    @property
    def text(self) -> str:
        """`repo//path`, the kustomize spelling; recorded on the inventory parent and shown in errors."""
        return f"{self.repo}//{self.path}" if self.path else self.repo

    @property
    def digest(self) -> str:
        # JSON of the two parts: `deploy` + `apps/web` and `deploy-apps` + `web` (or `deploy/apps` + `web`)
        # can never hash alike, whatever the characters.
        return hashlib.sha256(json.dumps([self.repo, self.path]).encode()).hexdigest()

    def inventory_name(self) -> str:
        """`gitops-sync-<readable part>-<hash>`: DNS-safe, at most MAX_NAME characters, unique per source."""
        repo = [e for e in self.repo.split("/") if e][-2:]
        elements = [_dns(e) for e in [*repo[:-1], re.sub(r"\.git$", "", repo[-1]) if repo else ""]]
        elements = [e for e in elements + [_dns(e) for e in self.path.split("/")] if e]
        room = MAX_NAME - len(PREFIX) - _HASH_LEN - 2
        # The last elements tell sources apart best (repository, then --path): drop whole ones from the front.
        while len(elements) > 1 and len("-".join(elements)) > room:
            elements.pop(0)
        slug = "-".join(elements)[:room].strip("-") or "source"
        return f"{PREFIX}-{slug}-{self.digest[:_HASH_LEN]}"


def normalize_url(url: str, base: Path | None = None) -> str:
    """A Git URL as `host[:port]/path`, or a real absolute path for `file://` and local remotes.

    Credentials, scheme, default ports, `.git` and trailing/doubled slashes are dropped; the host is
    lower-cased; the path keeps its case (many servers are case-sensitive). `base` anchors a relative
    local remote (as Git does, from the repository's top).
    """
    text = url.strip()
    scheme, sep, _rest = text.partition("://")
    if sep and scheme.lower() == "file":
        return _local(unquote(urlsplit(text).path), base)
    if sep and scheme.lower() in _SCHEMES:
        parts = urlsplit(text)
        host = (parts.hostname or "").lower()
        port = parts.port if parts.port and parts.port != _DEFAULT_PORTS.get(scheme.lower()) else None
        return _join(host + (f":{port}" if port else ""), unquote(parts.path))
    if not sep:
        match = _SCP_LIKE.match(text)
        # `host:path` but not `C:\...`-like single letters, and not a local path that happens to hold ':'
        if match and "@" in text.split(":", 1)[0] and "/" not in text.split(":", 1)[0]:
            return _join(match.group("host").lower(), match.group("path"))
    return _local(text, base)


def identify(repo: str, path: str | None) -> SourceIdentity:
    """The identity of `--repo` + `--path` (reads a local repository's remotes; never the network).

    Works on sources that do not exist (yet): it then falls back to their spelling made absolute, and
    the fetch that follows reports the real problem.
    """
    sub = _clean_sub(path)
    if repo.startswith("oci://"):  # an OCI artifact: its repository, whatever the tag or digest
        host, _, name = repo.removeprefix("oci://").partition("/")
        name = re.split(r"[:@]", name, maxsplit=1)[0]
        return SourceIdentity(f"oci://{host.lower()}/{name}", sub)
    if _is_url(repo):
        return SourceIdentity(normalize_url(repo), sub)
    given = Path(os.path.realpath(Path(repo).expanduser()))
    target = Path(os.path.realpath(given / sub)) if sub else given
    top, remote = _git_top_and_remote(given)
    if top is None:
        return SourceIdentity(target.as_posix(), "")
    inside = target.relative_to(top).as_posix() if target.is_relative_to(top) else ""
    inside = "" if inside == "." else inside
    if remote:
        return SourceIdentity(normalize_url(remote, base=top), inside)
    return SourceIdentity(top.as_posix(), inside)


def label_identity(label: str) -> SourceIdentity | None:
    """The identity of a source label recorded by earlier versions (`repo[//sub][@ref]`), when it can tell.

    Only URLs and absolute paths: a relative path was relative to a working directory nobody knows.
    Several readings are tried (with and without a trailing `@ref`) by `label_identities`.
    """
    repo, sub = _split_label(label)
    if not repo or not (_is_url(repo) or repo.startswith("/")):
        return None
    if _is_url(repo) or not Path(repo).exists():
        return SourceIdentity(normalize_url(repo), _clean_sub(sub))
    return identify(repo, sub or None)


def label_identities(label: str) -> set[SourceIdentity]:
    """Every identity a recorded `repo[//sub][@ref]` label may stand for (the `@ref` is optional)."""
    candidates = {label}
    if "@" in label:
        candidates.add(label.rsplit("@", 1)[0])
    return {i for i in map(label_identity, candidates) if i is not None}


def legacy_inventory_name(repo: str, path: str | None) -> str:
    """The default name of versions before source identities: last repository element and `--path` only.

    Kept to find and take over inventories made by those versions; never used to name a new one.
    """
    base = re.sub(r"\.git$", "", repo.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]) or "source"
    raw = "-".join(p for p in (PREFIX, base, (path or "").strip("/")) if p)
    slug = re.sub(r"[^a-z0-9-]+", "-", raw.lower()).strip("-")
    return re.sub(r"-+", "-", slug)[:63].rstrip("-")


def _is_url(repo: str) -> bool:
    scheme, sep, _ = repo.partition("://")
    if sep:
        return scheme.lower() in (*_SCHEMES, "file")
    head = repo.split(":", 1)[0]
    return ":" in repo and "@" in head and "/" not in head


def _clean_sub(path: str | None) -> str:
    if not path:
        return ""
    sub = posixpath.normpath(path.replace("\\", "/").strip("/"))
    return "" if sub in (".", "") else sub


def _join(host: str, path: str) -> str:
    clean = posixpath.normpath("/" + path.strip()).strip("/")
    clean = re.sub(r"\.git$", "", clean).rstrip("/")
    return f"{host}/{clean}" if clean else host


def _local(path: str, base: Path | None) -> str:
    p = Path(path).expanduser()
    if not p.is_absolute():
        p = (base or Path.cwd()) / p
    if not p.exists() and Path(f"{p}.git").exists():
        p = Path(f"{p}.git")  # `git clone /srv/repo` finds /srv/repo.git and records /srv/repo
    return Path(os.path.realpath(p)).as_posix()


def _dns(text: str) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]+", "-", text.lower())).strip("-")


def _split_label(label: str) -> tuple[str, str]:
    """`https://h/x//apps` -> (`https://h/x`, `apps`); the scheme's own `//` is not the separator."""
    start = label.find("://") + 3 if "://" in label else 0
    if label.startswith("file://"):
        start = len("file://") + 1  # file:///abs: skip the path's leading slash too
    at = label.find("//", start)
    return (label, "") if at < 0 else (label[:at], label[at + 2 :])


def _git_top_and_remote(given: Path) -> tuple[Path | None, str]:
    """The repository's real top directory and its remote URL ("" without one), or (None, "")."""
    if not might_be_repository(given):
        return None, ""
    import git  # GitPython is heavy to import; only local sources need it
    from git.exc import InvalidGitRepositoryError, NoSuchPathError

    try:
        repo = git.Repo(given, search_parent_directories=True)
    except (InvalidGitRepositoryError, NoSuchPathError, OSError):
        return None, ""
    with repo:
        top = Path(os.path.realpath(repo.working_tree_dir or repo.git_dir))
        try:
            remotes = {r.name: r for r in repo.remotes}
            chosen = remotes.get("origin") or (next(iter(remotes.values())) if len(remotes) == 1 else None)
            url = chosen.url if chosen is not None else ""
        except Exception:  # a broken config means no usable remote, not a failed sync
            url = ""
    return top, url


__all__ = [
    "MAX_NAME",
    "SourceIdentity",
    "identify",
    "label_identities",
    "label_identity",
    "legacy_inventory_name",
    "normalize_url",
]
