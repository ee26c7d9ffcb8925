"""`engine.load` with keys that a GitSync reads from its Secret: asked again before every fetch (a rotated Secret
counts at once), the signer of a verified commit on the checkout, a refused commit named on the error.

Real git and ssh-keygen signatures, no cluster (the GitSync end to end: tests/integration/test_fleet_verify.py).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gitops_sync.engine import SourceOptions
from gitops_sync.engine.loading import load
from gitops_sync.source.verify import TrustedKeys, VerificationFailed

CM = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {a: '1'}\n"
ACTOR = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **ACTOR, "GIT_CONFIG_GLOBAL": "/dev/null"}
    return subprocess.run(["git", "-C", str(repo), *args], env=env, check=True, capture_output=True, text=True).stdout


def signer(tmp_path: Path, name: str) -> tuple[Path, bytes]:
    key = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True)
    return key, f"{name}@example.com {Path(f'{key}.pub').read_text().strip()}\n".encode()


def test_keys_are_read_at_every_load_and_a_refused_commit_is_named(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    (repo / "cm.yaml").write_text(CM)
    git(repo, "add", "-A")
    alice, alice_line = signer(tmp_path, "alice")
    git(repo, "-c", "gpg.format=ssh", "-c", f"user.signingkey={alice}", "commit", "-q", "-S", "-m", "signed")
    reads: list[bytes] = []
    trusted = [alice_line]

    def from_secret() -> TrustedKeys:
        reads.append(trusted[0])
        return TrustedKeys(allowed_signers=trusted[0])

    source = SourceOptions(repo=str(repo), revision="main", cache_dir=tmp_path / "cache", verify=from_secret)
    checkout, objects = load(source)
    assert "alice@example.com" in checkout.signer and [o.key.name for o in objects] == ["cm"]
    mallory, mallory_line = signer(tmp_path, "mallory")
    git(
        repo,
        "-c",
        "gpg.format=ssh",
        "-c",
        f"user.signingkey={mallory}",
        "commit",
        "-q",
        "-S",
        "--allow-empty",
        "-m",
        "m",
    )
    head = git(repo, "rev-parse", "HEAD").strip()
    with pytest.raises(VerificationFailed, match=f"commit {head[:12]}") as err:
        load(source)
    assert err.value.revision == head and err.value.reason == "VerificationFailed"
    trusted[0] = alice_line + mallory_line  # the Secret rotated: the next load trusts mallory
    assert "mallory@example.com" in load(source)[0].signer
    assert len(reads) == 3


def test_a_commit_verified_once_is_not_checked_again_until_the_keys_change_or_time_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A poll of an unchanged commit runs no gpg or ssh-keygen (0.16-0.32 s measured per check); other keys, or
    VERIFIED_TTL later, it is checked again."""
    from gitops_sync.source import verify

    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    alice, alice_line = signer(tmp_path, "alice")
    git(
        repo, "-c", "gpg.format=ssh", "-c", f"user.signingkey={alice}", "commit", "-q", "-S", "--allow-empty", "-m", "s"
    )
    keys = [TrustedKeys(allowed_signers=alice_line)]
    source = SourceOptions(repo=str(repo), revision="main", cache_dir=tmp_path / "cache", verify=lambda: keys[0])
    checks: list[str] = []
    real = verify.verify_commit
    monkeypatch.setattr(verify, "verify_commit", lambda *a: checks.append("git") or real(*a))
    signed = load(source)[0].signer
    assert load(source)[0].signer == signed and checks == ["git"]  # the second: remembered
    _, other_line = signer(tmp_path, "other")
    keys[0] = TrustedKeys(allowed_signers=other_line)  # alice no longer trusted: checked again, refused
    with pytest.raises(VerificationFailed):
        load(source)
    keys[0] = TrustedKeys(allowed_signers=alice_line)
    now = [1e9]
    monkeypatch.setattr(verify, "_clock", lambda: now[0])
    load(source)
    now[0] += verify.VERIFIED_TTL + 1
    load(source)
    assert len(checks) == 4


def test_a_gitsyncs_tag_check_names_its_spec_fields(tmp_path: Path) -> None:
    from gitops_sync.source.verify import from_secret

    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    git(repo, "commit", "-q", "--allow-empty", "-m", "x")
    keys = from_secret({"allowed_signers": signer(tmp_path, "alice")[1]}, commits=False, tags=True)
    source = SourceOptions(repo=str(repo), revision="main", cache_dir=tmp_path / "cache", verify=lambda: keys)
    with pytest.raises(VerificationFailed, match=r"spec\.verify \(mode Tag\): spec\.revision main is not a tag"):
        load(source)
