"""docs/secrets.md's GitSync examples, run as written against the real control plane, sops, gpg and ssh-keygen:
`spec.decryption` (the key Secret with an age identity and an OpenPGP key, and the GitSync reading it as its
ServiceAccount) and `spec.verify` (the GitSync, and the `kubectl create secret` line making its key Secret).

Only the placeholders change: team-a becomes the test's namespace, the repository URL a local repository the
controller is allowed to read, `AGE-SECRET-KEY-1…` and the `-----BEGIN PGP PRIVATE KEY BLOCK-----` / `…` lines
real keys. The ServiceAccount's RBAC (which the doc does not show) is made by the test. A docs/secrets.md
without the blocks fails the test.
"""

from __future__ import annotations

import base64
import re
import subprocess
import uuid
from pathlib import Path

import yaml
from secret_tools import MARKS, SecretTools, secret_tools_fixture  # noqa: F401  (the fixture `secret_tools`)

from gitops_sync.conventions import RECONCILE_REQUESTED
from tests.conftest import KubeCluster
from tests.integration.daemon_support import Daemon, configmap, wait_until
from tests.integration.secrets.test_fleet_secrets import encrypted, env_of, ready, tenant
from tests.integration.test_fleet import cm_data, crd, fleet_args, gs_status
from tests.integration.test_fleet_verify import Repo, ssh_signing

pytestmark = MARKS
__all__ = ["crd"]
DOC = Path(__file__).resolve().parents[3] / "docs" / "secrets.md"


def section_block(heading: str, lang: str, nth: int = 0) -> str:
    """The `nth` ```lang block of the section under `heading` (up to the next heading)."""
    text = DOC.read_text()
    start = text.find(f"\n{heading}\n")
    assert start >= 0, f"docs/secrets.md has no heading {heading!r}"
    section = re.split(r"\n#+ ", text[start + len(heading) + 2 :], maxsplit=1)[0]
    found = re.findall(rf"^```{lang}\n(.*?)^```", section, re.S | re.M)
    assert len(found) > nth, f"docs/secrets.md {heading!r} has no ```{lang} block #{nth + 1}"
    return str(found[nth])


def apply_as_written(kube: KubeCluster, text: str) -> None:
    kube.kubectl("apply", "--validate=strict", "-f", "-", input=text)


def test_the_spec_decryption_example_runs_as_written(
    kube: KubeCluster, crd: None, namespace: str, tmp_path: Path, secret_tools: SecretTools
) -> None:
    age_file, recipient = secret_tools.age_key("team")
    pgp = secret_tools.pgp_key("ops")
    identity = next(ln for ln in age_file.read_text().splitlines() if ln.startswith("AGE-SECRET-KEY-1"))
    by_age, by_pgp = (f"{w}-s3cr3t-{uuid.uuid4().hex}" for w in ("age", "pgp"))
    repos = tmp_path / "repos"
    repo = Repo(repos / "deploy")
    repo.commit(
        {
            "age-secret.yaml": encrypted(secret_tools, "db-age", by_age, age=recipient),
            "pgp-secret.yaml": encrypted(secret_tools, "db-pgp", by_pgp, pgp=pgp),
        }
    )
    block = section_block("## A GitSync's keys (`spec.decryption`)", "yaml")
    armored = "\n".join(f"    {ln}" for ln in pgp.private.read_text().strip().splitlines())
    assert "AGE-SECRET-KEY-1…" in block and "    -----BEGIN PGP PRIVATE KEY BLOCK-----\n    …\n" in block
    text = (
        block.replace("https://git.example.com/team-a/deploy.git", str(repo.root))
        .replace("team-a", namespace)
        .replace("AGE-SECRET-KEY-1…", identity)
        .replace("    -----BEGIN PGP PRIVATE KEY BLOCK-----\n    …\n", armored + "\n")
    )
    tenant(kube, namespace, "web-deployer", "configmaps,secrets")  # its inventory; the key Secret; the two it applies
    apply_as_written(kube, text)
    args = [*fleet_args(namespace, repos), "--cache-dir", str(tmp_path / "cache")]
    with Daemon(args, env_of(kube, secret_tools, tmp_path), tmp_path / "fleet.log") as d:
        d.wait_ready(60)
        wait_until("web Ready", lambda: ready(kube, namespace, "web").get("status") == "True", 120, 0.3)
    for name, value in (("db-age", by_age), ("db-pgp", by_pgp)):
        live = kube.get("secret", name, namespace)
        assert base64.b64decode(live["data"]["password"]).decode() == value  # both keys of the doc's Secret work
    log = (tmp_path / "fleet.log").read_text()
    assert by_age not in log and by_pgp not in log and identity not in log


def test_the_spec_verify_example_runs_as_written(
    kube: KubeCluster, crd: None, namespace: str, tmp_path: Path, secret_tools: SecretTools
) -> None:
    alice, signers = secret_tools.signer("alice")
    alice_pgp = secret_tools.pgp_key("alice")
    repos = tmp_path / "repos"
    repo = Repo(repos / "deploy")
    signed = repo.commit({"a.yaml": configmap("signed", {"v": "1"})}, ssh_signing(alice))
    work = tmp_path / "work"  # the directory the doc's command runs in: its two files
    work.mkdir()
    (work / "alice.pub.asc").write_bytes(alice_pgp.public.read_bytes())
    (work / "allowed_signers").write_bytes(signers.read_bytes())
    tenant(kube, namespace, "deployer", "configmaps,secrets")
    script = section_block("### For a GitSync: `spec.verify`", "sh").replace("team-a", namespace)
    done = subprocess.run(["bash", "-euc", script], cwd=work, env=kube.env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    block = section_block("### For a GitSync: `spec.verify`", "yaml")
    text = block.replace("team-a", namespace).replace("https://git.example.com/team/deploy.git", str(repo.root))
    gs = yaml.safe_load(text)
    assert gs["spec"]["verify"] == {"mode": "HEAD", "secretRef": {"name": "signers"}}, "the doc's example changed"
    apply_as_written(kube, text)
    args = [*fleet_args(namespace, repos), "--cache-dir", str(tmp_path / "cache")]
    with Daemon(args, kube.env, tmp_path / "fleet.log") as d:
        d.wait_ready(60)
        wait_until("app Ready", lambda: ready(kube, namespace, "app").get("status") == "True", 120, 0.3)
        assert cm_data(kube, namespace, "signed") == {"v": "1"}
        assert "alice@example.com" in gs_status(kube, namespace, "app")["signedBy"]
        assert "alice@example.com" in d.get("/status")[1].decode()
        # The doc's refusal: an unsigned commit on top is VerificationFailed, the message as the doc quotes it.
        unsigned = repo.commit({"a.yaml": configmap("signed", {"v": "2"})})
        # The doc's GitSync polls every minute (the default interval): ask for a pass now, as `reconcile` does.
        kube.kubectl("annotate", "--overwrite", "gitsync/app", "-n", namespace, f"{RECONCILE_REQUESTED}={unsigned}")
        wait_until("refused", lambda: ready(kube, namespace, "app").get("reason") == "VerificationFailed", 90, 0.3)
        message = ready(kube, namespace, "app")["message"]
        assert unsigned in message and "is not signed by a trusted key: git found no signature" in message
        attempted = gs_status(kube, namespace, "app")["lastAttemptedRevision"]
        assert signed in attempted and unsigned not in attempted, attempted  # stays the verified one
        assert cm_data(kube, namespace, "signed") == {"v": "1"}
