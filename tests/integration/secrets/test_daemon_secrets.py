"""`run --repo` with SOPS and --verify-commits: the daemon applies a signed commit's encrypted Secret (its value
in the cluster only: not in /status, the log or the page), shows the signer on /status, and keeps the last
verified state when an unsigned commit arrives (nothing applied, nothing pruned)."""

from __future__ import annotations

import base64
import json
import os
import uuid
from pathlib import Path

from secret_tools import MARKS, Repo, SecretTools, secret_tools_fixture, ssh_signing  # noqa: F401  (the fixture `secret_tools`)
from test_signed_commits import configmap

from tests.conftest import KubeCluster
from tests.integration.daemon_support import Daemon, wait_until

pytestmark = MARKS


def test_daemon_applies_a_signed_encrypted_secret_and_keeps_it_through_an_unsigned_commit(
    kube: KubeCluster, namespace: str, tmp_path: Path, secret_tools: SecretTools
) -> None:
    age_key, recipient = secret_tools.age_key("daemon")
    ssh, signers = secret_tools.signer("signer")
    value = f"daemon-s3cr3t-{uuid.uuid4().hex}"
    plain = tmp_path / "plain.yaml"
    plain.write_text(f"apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  password: {value}\n")
    repo = Repo(tmp_path / "repo")
    secret_tools.encrypt(plain, tmp_path / "secret.enc.yaml", age=recipient)
    plain.unlink()
    good = repo.commit(
        {"secret.yaml": (tmp_path / "secret.enc.yaml").read_text(), "keep.yaml": configmap("keep", "v1")},
        signing=ssh_signing(ssh),
    )
    env = {
        **kube.env,
        "PATH": f"{secret_tools.bin_dir}{os.pathsep}{kube.env['PATH']}",
        "SOPS_AGE_KEY_FILE": str(age_key),
    }
    args = ["--repo", f"file://{repo.root}", "-n", namespace, "--prune", "--interval", "1"]
    args += ["--cache-dir", str(tmp_path / "cache"), "--verify-commits", "--allowed-signers", str(signers)]
    with Daemon(args, env, tmp_path / "daemon.log") as d:
        d.wait_ready(timeout=60)
        live = json.loads(kube.kubectl("get", "secret", "db", "-n", namespace, "-o", "json").stdout)
        assert base64.b64decode(live["data"]["password"]).decode() == value
        status = d.status()
        assert status["revision"] == good and status.get("signedBy", "").startswith("signer@example.com (SSH key")
        unsigned = repo.commit({"keep.yaml": None})

        def refused() -> bool:
            return f"commit {unsigned[:12]} ({unsigned}) is not signed" in d.status()["daemon"]["source"]["error"]

        wait_until("the unsigned commit refused on /status", refused, 20.0)
        doc = d.status()
        assert doc["daemon"]["appliedRevision"] == good
        assert "is not signed by a trusted key" in doc["daemon"]["source"]["error"]
        assert kube.kubectl("get", "configmap", "keep", "-n", namespace, check=False).returncode == 0
        page = d.get("/")[1].decode(errors="replace")
        texts = [json.dumps(doc), page, d.log_path.read_text()]
        assert d.stop() == 0
    encoded = base64.b64encode(value.encode()).decode()
    identity = next(ln for ln in age_key.read_text().splitlines() if ln.startswith("AGE-SECRET-KEY-"))
    for text in texts:
        assert value not in text and encoded not in text and identity not in text
