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
import hashlib
import re
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from gitops_sync.errors import SourceError
from gitops_sync.gnupg import private_home
from gitops_sync.source.checkout import Checkout, short_revision
from gitops_sync.source.safegit import safe_env


class VerificationFailed(SourceError):
    """The head commit is unsigned, or not signed by a trusted key (`Ready=False reason=VerificationFailed`)."""

    reason = "VerificationFailed"
    revision = ""  # the commit refused (set by verify_checkout): the GitSync's status names it


@dataclass(frozen=True)
class TrustedKeys:
    """Who may sign: an SSH allowed-signers file's content and armored OpenPGP public keys."""

    allowed_signers: bytes = field(default=b"", repr=False)
    pgp_public_keys: tuple[bytes, ...] = field(default=(), repr=False)
    timeout: float = 60.0
    commits: bool = True  # the commit rendered must be signed (Flux's HEAD mode)
    tags: bool = False  # the tag --revision names must be signed (Flux's Tag mode; both: TagAndHEAD)
    # How messages name the check and the revision it reads: the CLI's flags, or a GitSync's spec fields.
    names: tuple[str, str] = ("--verify-tag", "--revision")

    def __bool__(self) -> bool:
        return bool(self.allowed_signers.strip() or self.pgp_public_keys)

    @property
    def digest(self) -> str:
        """What is trusted, as one SHA-256 (the keys are public material)."""
        h = hashlib.sha256()
        for part in (self.allowed_signers, *self.pgp_public_keys):
            h.update(hashlib.sha256(part).digest())
        return h.hexdigest()


def from_cli(
    allowed_signers: Path | None, pgp_public_keys: Sequence[Path], *, commits: bool = True, tags: bool = False
) -> TrustedKeys:
    """The CLI's trusted keys, read now (a missing file fails before any fetch)."""
    signers = _read(allowed_signers, "SSH allowed-signers file") if allowed_signers else b""
    pgp = tuple(_read(p, "OpenPGP public key file") for p in pgp_public_keys)
    keys = TrustedKeys(signers, pgp, commits=commits, tags=tags)
    if not keys:
        raise SourceError(
            "--verify-commits and --verify-tag need trusted keys: --allowed-signers FILE (SSH) and/or "
            "--trusted-pgp-keys FILE"
        )
    return keys


def from_secret(data: Mapping[str, bytes], *, commits: bool = True, tags: bool = False) -> TrustedKeys:
    """Trusted keys from a Kubernetes Secret's (decoded) data, for a GitSync's `spec.verify.secretRef` once
    the fleet passes it: `allowed_signers` (SSH, ssh-keygen(1) format) and every `*.asc` (armored OpenPGP
    public keys, Flux's layout)."""
    pgp = tuple(data[name] for name in sorted(data) if name.endswith(".asc"))
    names = ("spec.verify (mode Tag)", "spec.revision")
    return TrustedKeys(data.get("allowed_signers", b""), pgp, commits=commits, tags=tags, names=names)


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


def verify_checkout(checkout: Checkout, keys: TrustedKeys) -> str:
    """Who signed what `keys` asks to verify (the commit, the tag, or both), for the report; raises
    VerificationFailed naming the commit or tag and the signer found. Only the files of a commit can be
    verified (not a work tree as it is)."""
    if checkout.git_dir is None or not checkout.revision or checkout.revision.endswith("-dirty"):
        verb = "pass" if keys.names[1].startswith("--") else "set"  # a CLI flag, or a GitSync's spec field
        raise VerificationFailed(
            f"--verify-commits/--verify-tag/spec.verify: {checkout.repo} is rendered as a directory, not as the files "
            f"of a commit; {verb} {keys.names[1]} (a branch, tag or commit) so the verified commit is what is rendered"
        )
    memo = _VERIFIED.get((checkout.revision, keys.digest)) if keys.commits and not keys.tags else None
    if memo is not None and _clock() - memo[1] < VERIFIED_TTL:
        return memo[0]
    found = []
    try:
        if keys.tags:
            found.append(f"tag {checkout.ref}: " + verify_tag(checkout.git_dir, checkout.ref, checkout.revision, keys))
        if keys.commits:
            found.append(verify_commit(checkout.git_dir, checkout.revision, keys).describe())
    except VerificationFailed as exc:
        exc.revision = checkout.revision
        raise
    if keys.commits and not keys.tags:  # a commit is immutable: its signature checks out the same with the same keys
        _remember((checkout.revision, keys.digest), "; ".join(found))
    return "; ".join(found)


# Commits verified (HEAD mode) by (commit, digest of the keys): a daemon polling an unchanged commit does not
# run gpg/ssh-keygen again (0.16-0.32 s each) until VERIFIED_TTL passes (an expired or revoked key counts then)
# or the keys change (a rotated Secret: another digest). Only successes; a tag is always checked (it can move).
_VERIFIED: dict[tuple[str, str], tuple[str, float]] = {}
_VERIFIED_LOCK = threading.Lock()
VERIFIED_TTL = 600.0
_clock = time.monotonic
_VERIFIED_MAX = 4096


def _remember(key: tuple[str, str], signer: str) -> None:
    with _VERIFIED_LOCK:
        if len(_VERIFIED) >= _VERIFIED_MAX:
            _VERIFIED.clear()
        _VERIFIED[key] = (signer, _clock())


@contextlib.contextmanager
def _trusting(git_dir: Path, keys: TrustedKeys) -> Iterator[tuple[list[str], dict[str, str]]]:
    """git's argv (up to the command) and environment that trust `keys` only, in a directory (0700) made for
    this check; no user or system setting changes what is trusted."""
    with private_home("gitops-sync-verify-") as home:
        signers = home.path / "allowed_signers"
        signers.write_bytes(keys.allowed_signers)
        # The git dir may be a local repository's: safegit's environment keeps its gpg.program & co. from running.
        env = {**home.env, **safe_env(inherit=False), "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}
        for armored in keys.pgp_public_keys:
            _trust(home.import_keys(armored, "--trusted-pgp-keys", SourceError, keys.timeout), env, keys.timeout)
        config = ["-c", f"gpg.ssh.allowedSignersFile={signers}", "-c", "gpg.minTrustLevel=fully"]
        yield ["git", f"--git-dir={git_dir}", *config], env


def verify_commit(git_dir: Path, commit: str, keys: TrustedKeys) -> Signature:
    """`git verify-commit` of `commit` against `keys`; `git show --format=%G?…` says who signed."""
    with _trusting(git_dir, keys) as (git, env):
        shown = _run([*git, "show", "-s", "--format=%G?%x00%GS%x00%GK%x00%GF", commit, "--"], env, keys.timeout)
        verified = _run([*git, "verify-commit", commit], env, keys.timeout)
    if shown.returncode != 0:
        raise SourceError(f"cannot read commit {commit} to verify its signature: git show failed")
    status, signer, key, fingerprint = [*shown.stdout.rstrip("\n").split("\x00"), "", "", ""][:4]
    found = Signature(status.strip(), signer.strip(), key.strip(), fingerprint.strip())
    if verified.returncode == 0 and found.status == "G":
        return found
    raise VerificationFailed(f"commit {short_revision(commit)} ({commit}) {_refusal(found)}")


def verify_tag(git_dir: Path, tag: str, commit: str, keys: TrustedKeys) -> str:
    """`git verify-tag` of the annotated tag `tag`, which must point at `commit` (the one rendered); who
    signed, from git's own report (`--raw`: gpg's status lines, or ssh-keygen's verdict)."""
    ref = f"refs/tags/{tag}"
    with _trusting(git_dir, keys) as (git, env):
        kind = _run([*git, "cat-file", "-t", ref], env, keys.timeout).stdout.strip() if tag else ""
        target = _run([*git, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], env, keys.timeout)
        verified = _run([*git, "verify-tag", "--raw", ref], env, keys.timeout) if kind == "tag" else None
    if kind not in ("tag", "commit"):
        check, revision = keys.names
        raise VerificationFailed(f"{check}: {revision} {tag or '(none)'} is not a tag of {git_dir.name}")
    if target.stdout.strip() != commit:
        raise VerificationFailed(f"{keys.names[0]}: tag {tag} does not point at the rendered commit {commit}")
    if verified is None:
        raise VerificationFailed(f"tag {tag} (commit {commit}) is a lightweight tag: it cannot be signed")
    found = _tag_signature(verified.stderr)
    if verified.returncode == 0 and found.status == "G":
        return found.describe()
    if found.status == "G":  # a good signature git still refused: below gpg.minTrustLevel
        found = replace(found, status="U")
    raise VerificationFailed(f"tag {tag} (commit {commit}) {_refusal(found)}")


def _tag_signature(report: str) -> Signature:
    """A Signature from `git verify-tag --raw`'s stderr: gpg's machine-readable status lines (GOODSIG,
    VALIDSIG, BADSIG, ERRSIG, …) or ssh-keygen's one-line verdict, as git itself reads them for commits."""
    status: dict[str, list[str]] = {}
    for line in report.splitlines():
        if line.startswith("[GNUPG:] "):
            word, *rest = line[9:].split(" ", 1)
            status.setdefault(word, rest)
    if status:
        good, valid = status.get("GOODSIG"), status.get("VALIDSIG")
        keyid, _, uid = (good or status.get("BADSIG") or status.get("ERRSIG") or [""])[0].partition(" ")
        fpr = (valid or [""])[0].split(" ", 1)[0]
        letter = "G" if good else "B" if "BADSIG" in status else "E" if "ERRSIG" in status else "N"
        return Signature(letter, uid, keyid, fpr)
    ssh = re.search(r'Good "git" signature (?:for (\S+) )?with \S+ key (SHA256:\S+)', report)
    if ssh:
        return Signature("G" if ssh.group(1) else "U", ssh.group(1) or "", ssh.group(2), ssh.group(2))
    return Signature("N" if "no signature found" in report else "B", "", "", "")


def _refusal(found: Signature) -> str:
    what = _STATUS.get(found.status, f"signature status {found.status or '?'}")
    by = f" by {found.describe()}" if found.key else ""
    return f"is not signed by a trusted key: git found {what}{by}; nothing is rendered or applied from it"


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
