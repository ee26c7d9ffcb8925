"""`--verify-commits` end to end: commits signed with real SSH keys (ssh-keygen) and OpenPGP keys (gpg),
unsigned and wrongly signed ones, verified by git itself; `sync` against the real control plane applies a
verified commit and shows its signer, and refuses the others with exit 2 naming the commit and the signer,
nothing applied and nothing pruned."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from secret_tools import (  # noqa: F401  (the fixture `secret_tools`)
    MARKS,
    PgpKey,
    Repo,
    SecretTools,
    pgp_signing,
    secret_tools_fixture,
    ssh_signing,
)

from tests.conftest import KubeCluster

pytestmark = MARKS


def configmap(name: str, value: str) -> str:
    return f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  setting: {value}\n"


def gs(kube: KubeCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gitops_sync", *args],
        env=kube.env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def data_of(kube: KubeCluster, namespace: str, name: str) -> dict[str, Any] | None:
    r = kube.kubectl("get", "configmap", name, "-n", namespace, "-o", "json", check=False)
    return json.loads(r.stdout)["data"] if r.returncode == 0 else None


def test_ssh_signed_commits_apply_and_unsigned_or_wrong_signer_refused(
    kube: KubeCluster, namespace: str, tmp_path: Path, secret_tools: SecretTools
) -> None:
    alice, signers = secret_tools.signer("alice")
    mallory, _ = secret_tools.ssh_key("mallory")
    alice_fp = secret_tools.run("ssh-keygen", "-lf", f"{alice}.pub").decode().split()[1]
    mallory_fp = secret_tools.run("ssh-keygen", "-lf", f"{mallory}.pub").decode().split()[1]
    repo = Repo(tmp_path / "repo")
    good = repo.commit(
        {"keep.yaml": configmap("keep", "v1"), "app.yaml": configmap("app", "v1")}, signing=ssh_signing(alice)
    )
    # As a remote (file://): the commit is verified in the clone cache's bare repository.
    src = ["--repo", f"file://{repo.root}", "-n", namespace, "--cache-dir", str(tmp_path / "cache")]
    verify = ["--verify-commits", "--allowed-signers", str(signers)]
    synced = gs(kube, "sync", *src, *verify, "--prune", "-o", "json")
    assert synced.returncode == 0, synced.stderr
    assert json.loads(synced.stdout)["signedBy"] == f"alice@example.com (SSH key {alice_fp})"
    assert data_of(kube, namespace, "app") == {"setting": "v1"}

    # Signed by a key not in the allowed signers, then not signed at all: each removes `keep` and changes `app`.
    wrong = repo.commit({"keep.yaml": None, "app.yaml": configmap("app", "v2")}, signing=ssh_signing(mallory))
    for command in ("sync", "diff", "render"):
        extra = ["--prune"] if command != "render" else []
        r = gs(kube, command, *src, *verify, *extra)
        assert r.returncode == 2, (command, r.stdout, r.stderr)
        assert f"commit {wrong[:12]} ({wrong}) is not signed by a trusted key" in r.stderr, r.stderr
        assert f"a good signature by a key that is not trusted by unknown signer (SSH key {mallory_fp})" in r.stderr
        assert "app" not in r.stdout  # nothing rendered
    unsigned = repo.commit({"app.yaml": configmap("app", "v3")})
    r = gs(kube, "sync", *src, *verify, "--prune")
    assert r.returncode == 2 and f"commit {unsigned[:12]} ({unsigned})" in r.stderr, r.stderr
    assert "git found no signature" in r.stderr
    assert data_of(kube, namespace, "keep") == {"setting": "v1"}  # nothing pruned
    assert data_of(kube, namespace, "app") == {"setting": "v1"}  # nothing applied
    # Without --verify-commits the same commit applies (the refusal above was the verification's).
    assert gs(kube, "sync", *src, "--prune").returncode == 0
    assert data_of(kube, namespace, "app") == {"setting": "v3"} and data_of(kube, namespace, "keep") is None
    assert good != wrong


def test_openpgp_signed_commit_verified_and_untrusted_key_refused(
    kube: KubeCluster, namespace: str, tmp_path: Path, secret_tools: SecretTools
) -> None:
    trusted, stranger = secret_tools.pgp_key("release"), secret_tools.pgp_key("stranger")
    repo = Repo(tmp_path / "repo")
    config, env = pgp_signing(trusted)
    repo.commit({"app.yaml": configmap("app", "v1")}, signing=config, env=env)
    src = ["--repo", str(repo.root), "--revision", "main", "-n", namespace, "--cache-dir", str(tmp_path / "cache")]
    verify = ["--verify-commits", "--trusted-pgp-keys", str(trusted.public)]
    synced = gs(kube, "sync", *src, *verify, "-o", "json")
    assert synced.returncode == 0, synced.stderr
    assert json.loads(synced.stdout)["signedBy"] == f"{trusted.uid} (OpenPGP key {trusted.fingerprint})"
    config, env = pgp_signing(stranger)
    wrong = repo.commit({"app.yaml": configmap("app", "v2")}, signing=config, env=env)
    r = gs(kube, "sync", *src, *verify)
    assert r.returncode == 2 and f"commit {wrong[:12]} ({wrong}) is not signed by a trusted key" in r.stderr, r.stderr
    assert "cannot be checked (its key is not among the trusted keys)" in r.stderr
    assert stranger.fingerprint[-16:] in r.stderr  # the key id git reports
    assert data_of(kube, namespace, "app") == {"setting": "v1"}


def test_a_work_tree_as_it_is_cannot_be_verified(kube: KubeCluster, tmp_path: Path, secret_tools: SecretTools) -> None:
    key, signers = secret_tools.signer("dev")
    repo = Repo(tmp_path / "repo")
    repo.commit({"app.yaml": configmap("app", "v1")}, signing=ssh_signing(key))
    verify = ["--verify-commits", "--allowed-signers", str(signers)]
    r = gs(kube, "render", "--repo", str(repo.root), *verify)
    assert r.returncode == 2 and "pass --revision" in r.stderr, r.stderr
    assert gs(kube, "render", "--repo", str(repo.root), "--revision", "main", *verify).returncode == 0
    r = gs(kube, "render", "--repo", str(repo.root), "--verify-commits")
    assert r.returncode == 2 and "--verify-commits and --verify-tag need trusted keys" in r.stderr, r.stderr


def test_signed_tags_ssh_and_openpgp(
    kube: KubeCluster, namespace: str, tmp_path: Path, secret_tools: SecretTools
) -> None:
    """--verify-tag: the annotated tag --revision names must be signed by a trusted key (Flux's Tag mode);
    with --verify-commits too, its commit as well (TagAndHEAD)."""
    alice, signers = secret_tools.signer("alice")
    mallory, _ = secret_tools.ssh_key("mallory")
    release = secret_tools.pgp_key("release")
    repo = Repo(tmp_path / "repo")
    commit = repo.commit({"app.yaml": configmap("app", "v1")})  # the commit itself is not signed

    def tag(name: str, *config: str, kind: str = "-s", env: dict[str, str] | None = None) -> None:
        """`git tag`: signed (-s, with `config` naming the key), annotated (-a) or lightweight ("")."""
        argv = ["git", *config, "tag", kind, name, "-m", name] if kind else ["git", "tag", name]
        subprocess.run(argv, cwd=repo.root, env={**os.environ, **(env or {})}, check=True, capture_output=True)

    tag("v1", "-c", "gpg.format=ssh", "-c", f"user.signingkey={alice}")
    tag("v2", "-c", "gpg.format=ssh", "-c", f"user.signingkey={mallory}")
    tag("v3", kind="")
    tag("v4", kind="-a")
    tag("v5", "-c", f"user.signingkey={release.fingerprint}", env={"GNUPGHOME": str(release.home)})
    keys = ["--allowed-signers", str(signers), "--trusted-pgp-keys", str(release.public)]

    def run(revision: str, *flags: str) -> subprocess.CompletedProcess[str]:
        src = ["--repo", f"file://{repo.root}", "--revision", revision, "-n", namespace]
        return gs(kube, "diff", *src, "--cache-dir", str(tmp_path / "cache"), *flags, *keys, "-o", "json")

    ok = run("v1", "--verify-tag")
    assert ok.returncode == 1, ok.stderr  # 1: the ConfigMap would be created
    alice_fp = secret_tools.run("ssh-keygen", "-lf", f"{alice}.pub").decode().split()[1]
    assert json.loads(ok.stdout)["signedBy"] == f"tag v1: alice@example.com (SSH key {alice_fp})"
    pgp = run("v5", "--verify-tag")
    assert pgp.returncode == 1, pgp.stderr
    assert json.loads(pgp.stdout)["signedBy"] == f"tag v5: {release.uid} (OpenPGP key {release.fingerprint})"
    refused = {
        (
            "v1",
            "--verify-commits",
        ): f"commit {commit[:12]} ({commit}) is not signed by a trusted key: git found no signature",
        (
            "v2",
        ): f"tag v2 (commit {commit}) is not signed by a trusted key: git found a good signature by a key that is "
        "not trusted by unknown signer (SSH key SHA256:",
        ("v3",): f"tag v3 (commit {commit}) is a lightweight tag: it cannot be signed",
        ("v4",): f"tag v4 (commit {commit}) is not signed by a trusted key: git found no signature",
        ("main",): "--verify-tag: --revision main is not a tag",
    }
    for (revision, *more), message in refused.items():
        r = run(revision, "--verify-tag", *more)
        assert r.returncode == 2 and message in r.stderr, (revision, r.stderr)
    assert data_of(kube, namespace, "app") is None  # diff applies nothing, and nothing got further than that
