"""Commit signature verification: the head commit must be signed by a trusted key, checked by git itself.

`git verify-commit` decides (SSH signatures through `gpg.ssh.allowedSignersFile`, OpenPGP ones through gpg
with the trusted public keys imported into a GNUPGHOME made for this one check); `git show --format=%G?…`
says who signed, for the message and the report. Nothing here parses a signature. The trusted keys are
values in memory (`TrustedKeys`), so the CLI (files named by flags, `from_cli`) and, later, a GitSync (a
Secret's data) give the same input; they are written (public material only) to a 0700 directory that is
removed after the check.

Where the result goes: `engine.load` calls `verify_checkout` after the fetch and before the render, so an
unsigned or wrongly signed commit is never rendered, applied or pruned from (a SourceError: exit 2); the
signer it returns goes into the pass's report (ChangeSet.signer).
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gitops_sync.errors import SourceError
from gitops_sync.gnupg import private_home
from gitops_sync.source.checkout import Checkout, short_revision


class VerificationFailed(SourceError):
    """The head commit is unsigned, or not signed by a trusted key (`Ready=False reason=VerificationFailed`)."""

    reason = "VerificationFailed"


@dataclass(frozen=True)
class TrustedKeys:
    """Who may sign: an SSH allowed-signers file's content and armored OpenPGP public keys."""

    allowed_signers: bytes = field(default=b"", repr=False)
    pgp_public_keys: tuple[bytes, ...] = field(default=(), repr=False)
    timeout: float = 60.0

    def __bool__(self) -> bool:
        return bool(self.allowed_signers.strip() or self.pgp_public_keys)


def from_cli(allowed_signers: Path | None, pgp_public_keys: Sequence[Path]) -> TrustedKeys:
    """The CLI's trusted keys, read now (a missing file fails before any fetch)."""
    signers = _read(allowed_signers, "SSH allowed-signers file") if allowed_signers else b""
    keys = TrustedKeys(signers, tuple(_read(p, "OpenPGP public key file") for p in pgp_public_keys))
    if not keys:
        raise SourceError(
            "--verify-commits needs trusted keys: --allowed-signers FILE (SSH) and/or --trusted-pgp-keys FILE"
        )
    return keys


def _read(path: Path, what: str) -> bytes:
    try:
        return path.expanduser().read_bytes()
    except OSError as err:
        raise SourceError(f"cannot read the {what} {path}: {err.strerror or type(err).__name__}") from None


@dataclass(frozen=True)
class Signature:
    """What git says about a commit's signature: `%G?` status, signer (SSH principal or OpenPGP user id),
    key (SSH fingerprint or OpenPGP key id) and primary key fingerprint."""

    status: str
    signer: str
    key: str
    fingerprint: str

    def describe(self) -> str:
        """`alice@example.com (SSH key SHA256:…)`; what a report shows."""
        kind = "SSH key" if self.key.startswith("SHA256:") else "OpenPGP key"
        who = self.signer or "unknown signer"
        return f"{who} ({kind} {self.fingerprint or self.key})" if self.key else who


# `%G?` letters (git-log(1)); only G (good, trusted) passes.
_STATUS = {
    "B": "a bad signature (the commit was changed after signing)",
    "U": "a good signature by a key that is not trusted",
    "X": "a good signature that has expired",
    "Y": "a good signature by an expired key",
    "R": "a good signature by a revoked key",
    "E": "a signature that cannot be checked (its key is not among the trusted keys)",
    "N": "no signature",
}


def verify_checkout(checkout: Checkout, keys: TrustedKeys) -> Signature:
    """The signature of the checkout's commit when a trusted key made it; raises VerificationFailed naming
    the commit and the signer found. Only the files of a commit can be verified (not a work tree as it is)."""
    if checkout.git_dir is None or not checkout.revision or checkout.revision.endswith("-dirty"):
        raise VerificationFailed(
            f"--verify-commits: {checkout.repo} is rendered as a directory, not as the files of a commit; pass "
            "--revision (a branch, tag or commit) so the verified commit is what is rendered"
        )
    return verify_commit(checkout.git_dir, checkout.revision, keys)


def verify_commit(git_dir: Path, commit: str, keys: TrustedKeys) -> Signature:
    """`git verify-commit` of `commit` against `keys`, in a directory (0700) made for this check."""
    with private_home("gitops-sync-verify-") as home:
        signers = home.path / "allowed_signers"
        signers.write_bytes(keys.allowed_signers)
        # No user or system setting changes what is trusted.
        env = {**home.env, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}
        for armored in keys.pgp_public_keys:
            fingerprints = home.import_keys(armored, "--trusted-pgp-keys", SourceError, keys.timeout)
            _trust(fingerprints, env, keys.timeout)
        config = ["-c", f"gpg.ssh.allowedSignersFile={signers}", "-c", "gpg.minTrustLevel=fully"]
        git = ["git", f"--git-dir={git_dir}", *config]
        shown = _run([*git, "show", "-s", "--format=%G?%x00%GS%x00%GK%x00%GF", commit, "--"], env, keys.timeout)
        verified = _run([*git, "verify-commit", commit], env, keys.timeout)
    if shown.returncode != 0:
        raise SourceError(f"cannot read commit {commit} to verify its signature: git show failed")
    status, signer, key, fingerprint = [*shown.stdout.rstrip("\n").split("\x00"), "", "", ""][:4]
    found = Signature(status.strip(), signer.strip(), key.strip(), fingerprint.strip())
    if verified.returncode == 0 and found.status == "G":
        return found
    what = _STATUS.get(found.status, f"signature status {found.status or '?'}")
    by = f" by {found.describe()}" if found.key else ""
    raise VerificationFailed(
        f"commit {short_revision(commit)} ({commit}) is not signed by a trusted key: git found {what}{by}; "
        "nothing is rendered or applied from it"
    )


def _trust(fingerprints: list[str], env: dict[str, str], timeout: float) -> None:
    """The keys the user listed are trusted (ultimately: a key valid by itself), in this GNUPGHOME only."""
    trust = "".join(f"{fp}:6:\n" for fp in fingerprints).encode()
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(
            ["gpg", "--batch", "--import-ownertrust"],
            input=trust,
            env=env,
            capture_output=True,
            timeout=timeout,
            check=False,
        )


def _run(argv: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise SourceError(f"`{' '.join(argv[3:5])}` did not finish within {timeout:g}s") from None
