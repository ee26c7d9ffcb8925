"""docs/install.md's "Install in a cluster" blocks marked as run by this test, run as written (bash, in order)
against the local control plane: the chart installed and upgraded, the manifests' overlay applied with a
server-side dry run."""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest

from gitops_sync import __version__
from tests.conftest import KubeCluster

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
MARK = "<!-- run by tests/integration/test_install_doc.py -->"


def _blocks() -> list[str]:
    text = (ROOT / "docs" / "install.md").read_text()
    return re.findall(re.escape(MARK) + r"\n```sh\n(.*?)```", text, flags=re.S)


def _run(script: str, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, f"{script}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done.stdout


def test_the_install_examples_run(kube: KubeCluster, namespace: str, tmp_path: Path) -> None:
    install, manifests, upgrade = _blocks()  # chart, manifests, upgrade: in the order the page gives them
    (tmp_path / "deploy").symlink_to(ROOT / "deploy")
    release = f"doc{uuid.uuid4().hex[:6]}"
    env = {**kube.env, "NS": namespace, "RELEASE": release, "REGISTRY": "registry.test", "TAG": __version__}
    env["KUBECONFIG"] = str(kube.kubeconfig)
    env["PATH"] = f"{kube.bin_dir}{os.pathsep}{env['PATH']}"
    try:
        out = _run(install, tmp_path, env)
        assert f"{release}-gitops-sync" in out
        dep = kube.get("Deployment", f"{release}-gitops-sync", namespace)
        container = dep["spec"]["template"]["spec"]["containers"][0]
        assert container["image"] == f"registry.test/gitops-sync:{__version__}"
        assert {"name": "GITOPS_SYNC_REPO", "value": "https://git.example.com/platform/deploy.git"} in container["env"]
        # TLS on by default: the chart made the Secret the container mounts.
        secret = kube.get("Secret", f"{release}-gitops-sync-tls", namespace)
        assert (
            secret["type"] == "kubernetes.io/tls"
            and "--tls-cert-file=/etc/gitops-sync/tls/tls.crt" in container["args"]
        )

        dry = manifests.replace(
            "kubectl apply --server-side -k overlay", "kubectl apply --server-side --dry-run=server -k overlay"
        )
        assert dry != manifests
        out = _run(dry, tmp_path, env)
        applied = [line for line in out.splitlines() if line.endswith("serverside-applied (server dry run)")]
        assert "deployment.apps/gitops-sync serverside-applied (server dry run)" in applied, out
        assert len(applied) == len(kube.kubectl("kustomize", str(tmp_path / "overlay")).stdout.split("\n---\n")), out
        rendered = kube.kubectl("kustomize", str(tmp_path / "overlay")).stdout
        assert f"image: registry.test/gitops-sync:{__version__}" in rendered and f"namespace: {namespace}" in rendered

        out = _run(upgrade, tmp_path, env)
        assert out.strip().endswith(f"registry.test/gitops-sync:{__version__}-next"), out
        kept = kube.get("Secret", f"{release}-gitops-sync-tls", namespace)
        assert kept["data"]["tls.crt"] == secret["data"]["tls.crt"]  # the upgrade keeps the certificate (lookup)
        assert kube.helm("history", release, "-n", namespace).stdout.count("\n") == 3  # header, install, upgrade
    finally:
        kube.helm("uninstall", release, "-n", namespace, check=False)
