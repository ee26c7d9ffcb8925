"""Whether a directory can be inside a Git repository, answered from the file system alone.

GitPython costs ~30 ms to import; a plain directory of manifests (a CI job's generated output, the
benchmarks) must not pay for it. This is the same walk `git.Repo(path, search_parent_directories=True)`
makes, without opening anything: a `.git` entry (directory or gitfile) in the directory or a parent, or a
bare repository's own layout. A "yes" is only a maybe (GitPython decides); a "no" is final.
"""

from __future__ import annotations

from pathlib import Path


def might_be_repository(path: Path) -> bool:
    """False only when neither `path` nor any parent holds `.git` or is a bare repository (followed both as
    spelt and with symlinks resolved, so either way GitPython may walk is covered)."""
    spelt = path.expanduser().absolute()
    chains = {spelt, *spelt.parents, *(real := spelt.resolve()).parents, real}
    return any((directory / ".git").exists() or is_bare(directory) for directory in chains)


def is_bare(directory: Path) -> bool:
    return (directory / "HEAD").is_file() and (directory / "objects").is_dir() and (directory / "refs").is_dir()
