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
"""

from __future__ import annotations

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
        "GIT_NO_LAZY_FETCH": "1",  # git >= 2.44; older ones find no protocol allowed
    }
