"""GitSync spec.verify on the real API server: commits signed with real SSH (ssh-keygen) and OpenPGP (gpg) keys,
verified by git itself in the controller.

A signed commit is applied and its signer shown (status.signedBy, /status); an unsigned one and one signed by
a key the Secret does not list are refused with Ready=False reason VerificationFailed naming the commit and the
signer found, the verified revision staying applied and nothing pruned; adding the key to the Secret (rotation)
lets the next poll apply it without a restart; a tenant whose ServiceAccount may not read the key Secret is
refused, and no GitSync can name another namespace's Secret.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import KubeCluster
from tests.integration.daemon_support import Daemon, configmap, wait_until
from tests.integration.secrets.secret_tools import Repo, SecretTools, pgp_signing, ssh_signing
from tests.integration.test_fleet import cm_data, condition, crd, fleet_args, gs_status, tenant_account

pytestmark = pytest.mark.cluster
__all__ = ["crd"]


def fingerprint(public_key: Path) -> str:
    out = subprocess.run(["ssh-keygen", "-lf", str(public_key)], capture_output=True, text=True, check=True).stdout
    return out.split()[1]  # SHA256:...


def keys_secret(namespace: str, data: dict[str, str]) -> str:
    meta = {"name": "keys", "namespace": namespace}
    return json.dumps({"apiVersion": "v1", "kind": "Secret", "metadata": meta, "stringData": data}) + "\n"


def gitsync(name: str, namespace: str, repo: Path, **spec: Any) -> str:
    doc = {
        "apiVersion": "gitops-sync.io/v1alpha1",
        "kind": "GitSync",
        "metadata": {"name": name, "namespace": namespace},
    }
    full = {"repository": str(repo), "revision": "main", "interval": "2s", "prune": True, **spec}
    return json.dumps({**doc, "spec": full}) + "\n"


def ready(kube: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    return condition(kube, namespace, name, "Ready")


def uid(kube: KubeCluster, namespace: str, name: str) -> str:
    doc = kube.find("configmap", name, namespace)
    return str(doc["metadata"]["uid"]) if doc else ""


@pytest.fixture
def tools() -> Iterator[SecretTools]:
    """gpg and ssh-keygen as the system has them (no sops needed). Keys under a short /tmp directory: gpg-agent's
    socket path must stay within 107 bytes, which a pytest tmp_path under xdist exceeds."""
    work = Path(tempfile.mkdtemp(prefix="fleet-verify-", dir="/tmp"))
    tools = SecretTools(Path("/usr/bin"), work)
    yield tools
    tools.stop_agents()
    shutil.rmtree(work, ignore_errors=True)


def test_signed_commits_apply_unsigned_or_unknown_signers_are_refused_and_keys_rotate(
    kube: KubeCluster, crd: None, namespace: str, tmp_path: Path, tools: SecretTools
) -> None:
    alice, alice_signers = tools.signer("alice")  # SSH, trusted
    mallory, mallory_signers = tools.signer("mallory")  # SSH, not trusted until the Secret lists it
    bob = tools.pgp_key("bob")  # OpenPGP, trusted
    repos = tmp_path / "repos"
    s_repo, p_repo = Repo(repos / "ssh"), Repo(repos / "pgp")
    first = s_repo.commit(
        {"a.yaml": configmap("s-cm", {"v": "1"}), "b.yaml": configmap("s-old", {})}, ssh_signing(alice)
    )
    signing, env = pgp_signing(bob)
    p_repo.commit({"a.yaml": configmap("p-cm", {"v": "1"})}, signing, env)
    tenant_account(kube, namespace)  # may not get Secret keys
    trusted = {"allowed_signers": alice_signers.read_text(), "bob.asc": bob.public.read_text()}
    verify = {"verify": {"mode": "HEAD", "secretRef": {"name": "keys"}}}
    docs = [
        keys_secret(namespace, trusted),
        gitsync("ssh", namespace, s_repo.root, **verify),
        gitsync("pgp", namespace, p_repo.root, **verify),
        gitsync("tenant", namespace, s_repo.root, serviceAccountName="tenant", **verify),
    ]
    kube.kubectl("apply", "-f", "-", input="---\n".join(docs))
    other = gitsync("other", namespace, s_repo.root, verify={"secretRef": {"name": "keys", "namespace": "kube-system"}})
    r = kube.kubectl("apply", "-f", "-", input=other, check=False)  # another namespace's Secret cannot be named
    assert r.returncode != 0 and "namespace" in r.stderr, r.stderr
    log_path = tmp_path / "fleet.log"
    with Daemon([*fleet_args(namespace, repos), "--cache-dir", str(tmp_path / "cache")], kube.env, log_path) as d:
        d.wait_ready(60)
        for name in ("ssh", "pgp"):
            wait_until(f"{name} Ready", lambda n=name: ready(kube, namespace, n).get("status") == "True", 90, 0.3)
        assert "alice@example.com" in gs_status(kube, namespace, "ssh")["signedBy"]
        assert fingerprint(Path(f"{alice}.pub")) in gs_status(kube, namespace, "ssh")["signedBy"]
        assert "bob@example.com" in gs_status(kube, namespace, "pgp")["signedBy"]
        assert cm_data(kube, namespace, "p-cm") == {"v": "1"}
        status = json.loads(d.get("/status")[1])
        assert "alice@example.com" in json.dumps(status), "the signer is not in /status"
        kept = uid(kube, namespace, "s-old")

        # The tenant's ServiceAccount may not read the key Secret: nothing is fetched, rendered or applied.
        wait_until(
            "tenant refused",
            lambda: ready(kube, namespace, "tenant").get("reason") == "CredentialsUnavailable",
            60,
            0.3,
        )
        t = ready(kube, namespace, "tenant")
        assert t["status"] == "False" and f"ServiceAccount {namespace}/tenant may not get it" in t["message"], t
        assert f"Secret {namespace}/keys (spec.verify.secretRef)" in t["message"], t

        # Unsigned: refused naming the commit; s-cm keeps v1, s-old (dropped by the commit) is not pruned.
        unsigned = s_repo.commit({"a.yaml": configmap("s-cm", {"v": "2"}), "b.yaml": None})
        wait_until("ssh refused", lambda: ready(kube, namespace, "ssh").get("reason") == "VerificationFailed", 60, 0.3)
        c = ready(kube, namespace, "ssh")
        assert c["status"] == "False" and unsigned in c["message"] and "no signature" in c["message"], c
        # Signed by a key the Secret does not list: refused naming the key found.
        wrong = p_repo.commit({"a.yaml": configmap("p-cm", {"v": "2"})}, ssh_signing(mallory))
        wait_until("pgp refused", lambda: ready(kube, namespace, "pgp").get("reason") == "VerificationFailed", 60, 0.3)
        c = ready(kube, namespace, "pgp")
        assert wrong in c["message"] and fingerprint(Path(f"{mallory}.pub")) in c["message"], c
        assert gs_status(kube, namespace, "ssh")["lastAppliedRevision"] == first
        assert gs_status(kube, namespace, "pgp")["lastAttemptedRevision"] != wrong
        assert cm_data(kube, namespace, "s-cm") == {"v": "1"} and uid(kube, namespace, "s-old") == kept
        assert cm_data(kube, namespace, "p-cm") == {"v": "1"}

        # Rotation: the Secret now trusts mallory too; the next poll applies its commit, no restart.
        pid = d.proc.pid
        rotated = {**trusted, "allowed_signers": alice_signers.read_text() + mallory_signers.read_text()}
        kube.kubectl("apply", "-f", "-", input=keys_secret(namespace, rotated))
        wait_until("mallory's commit applied", lambda: cm_data(kube, namespace, "p-cm") == {"v": "2"}, 60, 0.3)
        wait_until("pgp Ready", lambda: ready(kube, namespace, "pgp").get("status") == "True", 60, 0.3)
        assert "mallory@example.com" in gs_status(kube, namespace, "pgp")["signedBy"]
        assert d.proc.pid == pid and d.proc.poll() is None
        assert ready(kube, namespace, "ssh")["reason"] == "VerificationFailed"  # still unsigned
        assert uid(kube, namespace, "s-old") == kept

        # OpenPGP, a key the Secret does not hold: refused naming the key id git found.
        eve = tools.pgp_key("eve")
        eve_signing, eve_env = pgp_signing(eve)
        by_eve = p_repo.commit({"a.yaml": configmap("p-cm", {"v": "3"})}, eve_signing, eve_env)

        def eve_refused() -> bool:
            return by_eve in ready(kube, namespace, "pgp").get("message", "")

        wait_until("eve's commit refused", eve_refused, 60, 0.3)
        c = ready(kube, namespace, "pgp")
        assert c["reason"] == "VerificationFailed" and eve.fingerprint[-16:] in c["message"], c
        assert cm_data(kube, namespace, "p-cm") == {"v": "2"}
    events = json.dumps(kube.list("events", namespace))
    assert "VerificationFailed" in events


def test_tag_mode_verifies_the_signed_tag_spec_revision_names(
    kube: KubeCluster, crd: None, namespace: str, tmp_path: Path, tools: SecretTools
) -> None:
    alice, alice_signers = tools.signer("alice")
    repos = tmp_path / "repos"
    repo = Repo(repos / "tagged")
    repo.commit({"a.yaml": configmap("tag-cm", {"v": "1"})}, ssh_signing(alice))
    sign = ["-c", "gpg.format=ssh", "-c", f"user.signingkey={alice}"]
    repo.git.git.execute(["git", *sign, "tag", "-s", "-m", "release", "v1"])
    repo.commit({"a.yaml": configmap("tag-cm", {"v": "2"})}, ssh_signing(alice))
    repo.git.git.execute(["git", "tag", "v2"])  # lightweight: it cannot be signed
    docs = [
        keys_secret(namespace, {"allowed_signers": alice_signers.read_text()}),
        gitsync(
            "rel", namespace, repo.root, revision="v1", verify={"mode": "TagAndHEAD", "secretRef": {"name": "keys"}}
        ),
    ]
    kube.kubectl("apply", "-f", "-", input="---\n".join(docs))
    args = [*fleet_args(namespace, repos), "--cache-dir", str(tmp_path / "cache")]
    with Daemon(args, kube.env, tmp_path / "fleet.log") as d:
        d.wait_ready(60)
        wait_until("rel Ready", lambda: ready(kube, namespace, "rel").get("status") == "True", 90, 0.3)
        signed_by = gs_status(kube, namespace, "rel")["signedBy"]
        assert signed_by.startswith("tag v1: alice@example.com (SSH key") and signed_by.count("alice@example.com") == 2
        assert cm_data(kube, namespace, "tag-cm") == {"v": "1"}
        kube.kubectl("patch", "gitsync", "rel", "-n", namespace, "--type=merge", "-p", '{"spec":{"revision":"v2"}}')
        wait_until("v2 refused", lambda: ready(kube, namespace, "rel").get("reason") == "VerificationFailed", 60, 0.3)
        assert (
            "tag v2" in ready(kube, namespace, "rel")["message"]
            and "lightweight tag" in ready(kube, namespace, "rel")["message"]
        )
        assert cm_data(kube, namespace, "tag-cm") == {"v": "1"}
