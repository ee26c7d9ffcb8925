"""docs/private-repositories.md: its examples run as written, against the real servers and cluster.

Only the placeholders change: git.example.com becomes the loopback servers, team-a the test's namespace,
`gitops-sync` this checkout's CLI, the token and key the servers' own.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import KubeCluster
from tests.gitservers import HttpsGitServer, SshGitServer, bare_repository, https_server, ssh_server
from tests.integration.daemon_support import Daemon, configmap, wait_until
from tests.integration.test_fleet import cm_data, condition, crd
from tests.integration.test_private_repositories_fleet import Kept, Servers, daemon_env, fleet, servers

pytestmark = pytest.mark.cluster
__all__ = ["crd", "https_server", "servers", "ssh_server"]

DOC = Path(__file__).resolve().parents[2] / "docs" / "private-repositories.md"
HTTPS_URL, SSH_URL = "https://git.example.com/team/deploy.git", "ssh://git@git.example.com/team/deploy.git"
TOKEN = "doc-token-0c5e2a91"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(), re.S)


def test_the_cli_examples_run(
    https_server: HttpsGitServer, ssh_server: SshGitServer, tmp_path: Path, kube: KubeCluster
) -> None:
    https_server.users = {"deploy": TOKEN}
    ssh_server.authorize(ssh_server.client_key)
    h_url = https_server.url(
        bare_repository(https_server.repos, f"doc-{tmp_path.name}", {"a.yaml": configmap("h", {})})
    )
    s_url = ssh_server.url(bare_repository(ssh_server.repos, f"doc-{tmp_path.name}", {"a.yaml": configmap("s", {})}))
    (tmp_path / "token").write_text(TOKEN)
    (tmp_path / "deploy_key").write_bytes(ssh_server.client_key.read_bytes())
    (tmp_path / "deploy_key").chmod(0o600)
    script = (
        blocks("sh")[0]
        .replace(HTTPS_URL, h_url)
        .replace(SSH_URL, s_url)
        .replace("ssh-keyscan -p 22 git.example.com", f"ssh-keyscan -t ed25519 -p {ssh_server.port} 127.0.0.1")
        .replace("gitops-sync ", f"{sys.executable} -m gitops_sync ")
    )
    env = {**kube.env, "GIT_SSL_CAINFO": str(https_server.ca), "HOME": str(tmp_path), "PYTHONPATH": str(DOC.parents[1])}
    r = subprocess.run(["bash", "-euc", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "name: h" in r.stdout and "name: s" in r.stdout, r.stdout
    assert "127.0.0.1" in (tmp_path / "known_hosts").read_text()


def test_the_gitsync_examples_run(
    kube: KubeCluster, crd: None, namespace: str, tmp_path: Path, servers: Servers
) -> None:
    https_server, ssh_server = servers
    https_server.users = {"deploy": TOKEN}
    h_repo = bare_repository(https_server.repos, f"doc-{namespace}", {"a.yaml": configmap("from-https", {})})
    s_repo = bare_repository(ssh_server.repos, f"doc-{namespace}", {"a.yaml": configmap("from-ssh", {})})
    docs = [
        json.dumps(d) + "\n"
        for d in yaml.safe_load_all(
            blocks("yaml")[0]
            .replace("team-a", namespace)
            .replace(HTTPS_URL, https_server.url(h_repo))
            .replace("<personal access token>", TOKEN)
        )
    ]
    secret = json.loads(docs[0])
    secret["stringData"]["ca.crt"] = https_server.ca.read_text()  # the test server's own CA
    docs[0] = json.dumps(secret) + "\n"
    kube.kubectl("create", "serviceaccount", "deployer", "-n", namespace)
    kube.kubectl(
        "create",
        "role",
        "deploys",
        "-n",
        namespace,
        "--verb=get,list,watch,create,patch,update,delete",
        "--resource=configmaps",
    )
    kube.kubectl(
        "create", "rolebinding", "deploys", "-n", namespace, "--role=deploys", f"--serviceaccount={namespace}:deployer"
    )
    kept = Kept(kube, namespace, docs)
    with Daemon(fleet(namespace, tmp_path), daemon_env(kube, tmp_path), tmp_path / "fleet.log") as d:
        d.wait_ready(60)
        kept.ready("app")
        assert cm_data(kube, namespace, "from-https") is not None
        # The SSH example: a Secret from files and a second GitSync reading it.
        (tmp_path / "deploy_key").write_bytes(ssh_server.client_key.read_bytes())
        (tmp_path / "known_hosts").write_text(ssh_server.known_hosts)
        script = blocks("sh")[1].replace("team-a", namespace).replace(SSH_URL, ssh_server.url(s_repo))
        r = subprocess.run(
            ["bash", "-euc", script], cwd=tmp_path, env=kube.env, capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0, r.stderr
        heredoc = script.split("<<'EOF'\n", 1)[1].split("\nEOF", 1)[0]
        Kept(kube, namespace, [json.dumps(yaml.safe_load(heredoc)) + "\n"]).ready("app-ssh")
        assert cm_data(kube, namespace, "from-ssh") is not None
    # The table's tenant rule: the same two GitSyncs without spec.secretRef fetch with no credentials. The
    # controller trusts the test server's CA as it would a public one (not before: ca.crt above is the Secret's).
    unauthenticated = [json.loads(docs[1]), yaml.safe_load(heredoc)]
    for gs in unauthenticated:
        del gs["spec"]["secretRef"]
        gs["metadata"]["name"] += "-none"
    kube.kubectl("apply", "-f", "-", input="---\n".join(json.dumps(gs) for gs in unauthenticated))
    (tmp_path / "again").mkdir()
    env = {**daemon_env(kube, tmp_path / "again"), "GIT_SSL_CAINFO": str(https_server.ca)}
    with Daemon(fleet(namespace, tmp_path), env, tmp_path / "fleet-again.log") as d:
        d.wait_ready(60)
        wait_until("both refused", lambda: all(failed(kube, namespace, gs) for gs in unauthenticated), 90, 0.3)
        https, ssh = (condition(kube, namespace, gs["metadata"]["name"], "Ready") for gs in unauthenticated)
        assert https["reason"] == "SourceFailed" and https["message"].startswith("authentication failed for "), https
        assert ssh["reason"] == "CredentialsUnavailable" and "it has no spec.secretRef" in ssh["message"], ssh


def failed(kube: KubeCluster, namespace: str, gs: dict[str, Any]) -> bool:
    return condition(kube, namespace, gs["metadata"]["name"], "Ready").get("status") == "False"
