"""Is the clone cache already at what the remote advertises? Then a poll needs no `git fetch`.

One `git ls-remote` (protocol v0: the ref advertisement is the whole answer, one HTTP request for smart
HTTP) against the bare clone's own refs (`git for-each-ref`, no network). The fetch mirrors branches and
tags (`--prune`) and the remote's HEAD, so after it the two agree; when they still agree at the next poll
nothing moved and the fetch is skipped. Any difference, or an answer that cannot be read, fetches as before.
The refs compared are read from the clone itself, never remembered from an earlier answer: a branch pushed
back to where it was between a look and a fetch is still seen.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from gitops_sync.source.giterrors import run_remote
from gitops_sync.source.remote import Remote

if TYPE_CHECKING:
    import git

_PREFIXES = ("refs/heads/", "refs/tags/")


def advertised(repo: git.Repo, timeout: float, url: str, remote: Remote, *, head: bool) -> dict[str, str]:
    """The remote's branches and tags (and HEAD when `head`): {ref: sha}. Raises SourceError as a fetch would."""
    out = run_remote(repo, timeout, url, remote, "-c", "protocol.version=0", "ls-remote", "--", remote.url)
    refs: dict[str, str] = {}
    for line in out.splitlines():
        sha, _, ref = line.partition("\t")
        if ref.endswith("^{}"):
            continue  # the commit an annotated tag points at: the tag's own object is what a fetch stores
        if ref.startswith(_PREFIXES) or (head and ref == "HEAD"):
            refs[ref] = sha.strip()
    return refs


def held(repo: git.Repo, timeout: float, remote_head: str | None) -> dict[str, str]:
    """The clone's branches and tags (and `remote_head`, named HEAD), in `advertised`'s shape."""
    patterns = [*(p.rstrip("/") for p in _PREFIXES), *([remote_head] if remote_head else [])]
    out: str = repo.git.execute(
        ["git", "for-each-ref", "--format=%(objectname)\t%(refname)", *patterns], kill_after_timeout=timeout
    )
    refs: dict[str, str] = {}
    for line in out.splitlines():
        sha, _, ref = line.partition("\t")
        refs["HEAD" if ref == remote_head else ref] = sha.strip()
    return refs


def up_to_date(repo: git.Repo, timeout: float, url: str, remote: Remote, remote_head: str | None) -> bool:
    """True when the remote advertises exactly what the clone holds (`remote_head`: where the clone keeps
    the remote's HEAD, None when HEAD is not wanted). An empty clone is never up to date."""
    if not _holds_refs(Path(repo.git_dir)):
        return False  # a first fetch: nothing to compare, and no process or request spent finding that out
    theirs = advertised(repo, timeout, url, remote, head=remote_head is not None)
    ours = held(repo, timeout, remote_head)
    return bool(ours) and theirs == ours


def _holds_refs(git_dir: Path) -> bool:
    """Whether the clone has any ref yet (packed or loose), read from its files: no `git` process."""
    packed = git_dir / "packed-refs"
    if packed.is_file() and packed.stat().st_size > 0:
        return True
    return any(p.is_file() for p in (git_dir / "refs").rglob("*"))


__all__ = ["advertised", "held", "up_to_date"]
