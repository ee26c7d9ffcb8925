"""git on a repository someone else may write: nothing its own configuration says may run a command.

A local repository (`--repo PATH`, a GitSync's `spec.repository: /path` under `--allow-local-repository`) is
read with the controller's rights, and git honours that repository's `.git/config` (and whatever it includes)
and `.gitattributes`: `core.fsmonitor` runs a command on `git status`, a `filter.<name>.smudge`/`clean` on a
checkout or a status, `core.hooksPath` hooks, a promisor remote's `uploadpack`/`ext::` URL on a lazy fetch,
`gpg.program` on `verify-commit`. Every git gitops-sync starts on such a repository gets `SAFE_ENV`:
configuration handed over as GIT_CONFIG_* (command-line configuration, which wins over the repository's) that
switches the command-running keys off, and GIT_ALLOW_PROTOCOL allowing no transport at all (it overrides any
`protocol.*.allow`), so no object is fetched from anywhere. Filter drivers cannot be switched off by name
(the repository chooses the names), so gitops-sync never runs a git command that applies them: a commit is
written from its blobs (clonecache.py) and a work tree compared with raw hashes (worktree.py).
`run_git` is the one runner of those local gits (beside giterrors.run_remote, for a remote).
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from gitops_sync.errors import SourceError
from gitops_sync.source.giterrors import spawn_git, stderr_tail
from gitops_sync.source.remote import GIT_ENV, git_config_env

SAFE_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("core.sshCommand", "false"),
    ("core.gitProxy", ""),
    ("core.askPass", "true"),
    ("credential.helper", ""),
    ("diff.external", ""),
    ("uploadpack.packObjectsHook", ""),
    ("gpg.program", "gpg"),
    ("gpg.openpgp.program", "gpg"),
    ("gpg.x509.program", "gpgsm"),
    ("gpg.ssh.program", "ssh-keygen"),
    ("protocol.allow", "never"),
)
# GIT_ALLOW_PROTOCOL names the only transports allowed, overriding every protocol.<name>.allow: none here.
NO_PROTOCOL = "gitops-sync-none"


def safe_env(*, inherit: bool = True) -> dict[str, str]:
    """Variables for every git run on a repository gitops-sync does not own (computed per call: with
    `inherit`, it keeps whatever GIT_CONFIG_* this process's environment holds, ours come after and win;
    without, for an environment that holds none of this process's)."""
    return {
        **GIT_ENV,
        **git_config_env(SAFE_CONFIG, inherit=inherit),
        "GIT_ALLOW_PROTOCOL": NO_PROTOCOL,
        "GIT_NO_LAZY_FETCH": "1",  # git >= 2.44 and 2.39.4+; older ones find no protocol allowed
    }


def run_git(
    argv: Sequence[str], env: dict[str, str], timeout: float, *, prefix: str = "", ok: tuple[int, ...] = (0,)
) -> subprocess.CompletedProcess[bytes]:
    """Run a local `git` (argv[0]) to its end; a SourceError `prefix` + why when it cannot start, runs past
    `timeout` (the whole process group is killed; the subcommand is named) or exits with a status not in
    `ok` (git's `fatal:` lines and last line on stderr). `prefix` says what was being done, e.g.
    "repo: cannot read the Git status: "."""
    code, out, err, timed_out = spawn_git(argv, env, timeout, prefix=prefix)
    if timed_out:
        raise SourceError(f"{prefix}git {subcommand(argv)} timed out after {timeout:g}s")
    if code not in ok:
        raise SourceError(prefix + failure(err, timeout, code))
    return subprocess.CompletedProcess(list(argv), code, out, err)


def subcommand(argv: Sequence[str]) -> str:
    """The git subcommand of `argv` (`git -C dir --git-dir=x ls-tree …` -> `ls-tree`)."""
    words = iter(argv[1:])
    for word in words:
        if word in ("-C", "-c"):
            next(words, None)
        elif not word.startswith("-"):
            return word
    return "(no subcommand)"


def failure(stderr: bytes, timeout: float, code: int) -> str:
    """Why a git that exited with `code` failed: its `fatal:`/`error:` lines and its last line on stderr, else
    what the status says."""
    if said := stderr_tail(stderr, lines=1):
        return said
    if code < 0:
        return f"git was stopped by signal {-code} (timeout {timeout:g}s?)"
    return f"git exited with status {code}"
