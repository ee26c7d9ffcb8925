"""A tenant GitSync never fetches with the controller's Git credentials, on the real API server and Git servers.

The controller holds credentials for private repositories the ways an operator gives them: a credential
helper in its global git configuration with ~/.git-credentials (HTTPS) and an ssh-agent holding a key the SSH
server accepts (SSH_AUTH_SOCK). GitSyncs without serviceAccountName use them (docs/private-repositories.md);
a tenant GitSync without spec.secretRef fails with an authentication failure, and one whose Secret holds a key
the server refuses is not rescued by the agent. A tenant that loses its Secret applies and prunes nothing.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gitops_sync.daemon.fleet.credentials import cache_scope
from gitops_sync.source.checkout import repository_key
from tests.conftest import KubeCluster
from tests.gitservers import SshGitServer, bare_repository, commit_to, https_server, keypair, ssh_server
from tests.integration.daemon_support import Daemon, configmap, wait_until
from tests.integration.test_fleet import condition, crd, tenant_account
from tests.integration.test_private_repositories_fleet import (
    PASSWORD,
    Servers,
    allow_secrets,
    daemon_env,
    fleet,
    gitsync,
    secret,
    servers,
)

pytestmark = pytest.mark.cluster
__all__ = ["crd", "https_server", "servers", "ssh_server"]  # module-scoped fixtures, shared


@pytest.fixture
def agent(tmp_path: Path, ssh_server: SshGitServer) -> Iterator[str]:
    """An ssh-agent holding the key the SSH server accepts: the controller's own SSH credential."""
    sock = tmp_path / "agent.sock"
    proc = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if sock.exists():
                break
            time.sleep(0.05)
        env = {"SSH_AUTH_SOCK": str(sock), "PATH": "/usr/bin:/bin"}
        subprocess.run(["ssh-add", str(ssh_server.client_key)], env=env, check=True, capture_output=True)
        yield str(sock)
    finally:
        proc.terminate()
        proc.wait(10)


def controller_env(kube: KubeCluster, tmp_path: Path, servers: Servers, agent: str) -> dict[str, str]:
    """The controller's environment: its HOME with a credential helper and ~/.git-credentials for the HTTPS
    server, its agent for SSH, and the known_hosts and CA it trusts."""
    https_server, ssh_server = servers
    env = daemon_env(kube, tmp_path)
    home = Path(env["HOME"])
    (home / ".gitconfig").write_text("[credential]\n\thelper = store\n")
    (home / ".git-credentials").write_text(f"https://deploy:{PASSWORD}@127.0.0.1:{https_server.port}\n")
    (tmp_path / "known_hosts").write_text(ssh_server.known_hosts)
    return {
        **env,
        "SSH_AUTH_SOCK": agent,
        "GIT_SSH_COMMAND": f"ssh -o UserKnownHostsFile={tmp_path / 'known_hosts'}",
        "GIT_SSL_CAINFO": str(https_server.ca),
    }


def uid(kube: KubeCluster, namespace: str, name: str) -> str:
    doc = kube.find("configmap", name, namespace)
    return str(doc["metadata"]["uid"]) if doc else ""


def test_a_tenant_without_a_secret_never_uses_the_controllers_credentials(
    kube: KubeCluster, crd: None, namespace: str, tmp_path: Path, servers: Servers, agent: str
) -> None:
    https_server, ssh_server = servers
    h_url = https_server.url(bare_repository(https_server.repos, f"{namespace}-h", {"a.yaml": configmap("h-cm", {})}))
    s_url = ssh_server.url(bare_repository(ssh_server.repos, f"{namespace}-s", {"a.yaml": configmap("s-cm", {})}))
    t_repo = bare_repository(https_server.repos, f"{namespace}-t", {"t.yaml": configmap("t-cm", {"v": "1"})})
    refused_key = keypair(tmp_path / "refused")  # known to no server
    tenant_account(kube, namespace)
    allow_secrets(kube, namespace, "t-creds", "bad-key")
    tenant = {"serviceAccountName": "tenant"}
    docs = [
        gitsync("admin-h", namespace, h_url),  # the controller's own GitSyncs: its credentials
        gitsync("admin-s", namespace, s_url),
        gitsync("tenant-h", namespace, h_url, **tenant),  # tenants without a Secret
        gitsync("tenant-s", namespace, s_url, **tenant),
        secret("bad-key", namespace, {"identity": refused_key.read_text(), "known_hosts": ssh_server.known_hosts}),
        gitsync("tenant-k", namespace, s_url, secretRef={"name": "bad-key"}, **tenant),
        secret("t-creds", namespace, {"username": "deploy", "password": PASSWORD}),
        gitsync("t", namespace, https_server.url(t_repo), prune=True, secretRef={"name": "t-creds"}, **tenant),
    ]
    kube.kubectl("apply", "-f", "-", input="---\n".join(docs))
    log_path = tmp_path / "fleet.log"
    with Daemon(fleet(namespace, tmp_path), controller_env(kube, tmp_path, servers, agent), log_path) as d:
        d.wait_ready(60)

        for name in ("admin-h", "admin-s", "t"):
            assert settled(kube, namespace, name)["status"] == "True", condition(kube, namespace, name, "Ready")
        h = settled(kube, namespace, "tenant-h")
        assert h["status"] == "False" and "authentication failed for https://127.0.0.1" in h["message"], h
        s = settled(kube, namespace, "tenant-s")
        assert s["status"] == "False" and s["reason"] == "CredentialsUnavailable", s
        assert "authentication failed for ssh://" in s["message"] and "no spec.secretRef" in s["message"], s
        k = settled(kube, namespace, "tenant-k")  # the agent's good key is never offered for it
        assert k["status"] == "False" and "authentication failed" in k["message"], k
        assert uid(kube, namespace, "h-cm") and uid(kube, namespace, "s-cm")  # applied by the admin GitSyncs

        # The tenant loses its Secret while Git drops t-cm: it fetches nothing, so applies and prunes nothing.
        before = uid(kube, namespace, "t-cm")
        commit_to(t_repo, {"t.yaml": configmap("t-new", {"v": "2"})})
        kube.kubectl("patch", "gitsync", "t", "-n", namespace, "--type=json", "-p", REMOVE_SECRET_REF)

        def refused() -> bool:
            c = condition(kube, namespace, "t", "Ready")
            return c.get("status") == "False" and "authentication failed" in str(c.get("message"))

        wait_until("t refused", refused, 90, interval=0.3)
        time.sleep(5)  # two more polls of its 2s interval
        assert refused() and uid(kube, namespace, "t-cm") == before and uid(kube, namespace, "t-new") == ""
        status = d.get("/status")[1].decode()
    texts = [log_path.read_text(), status, json.dumps(kube.list("events", namespace))]
    assert not [t for t in texts if PASSWORD in t]
    caches = {p.name for p in (tmp_path / "cache").iterdir() if (p / "repo.git").is_dir()}
    tenant_scope = cache_scope(namespace, f"system:serviceaccount:{namespace}:tenant", "")
    assert {repository_key(h_url, ""), repository_key(h_url, tenant_scope)} <= caches  # a clone each


REMOVE_SECRET_REF = json.dumps([{"op": "remove", "path": "/spec/secretRef"}])


def settled(kube: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    """The Ready condition of `name` once it is True or False."""
    found: dict[str, Any] = {}

    def seen() -> bool:
        c = condition(kube, namespace, name, "Ready")
        found.update(c if c.get("status") in ("True", "False") else {})
        return bool(found)

    wait_until(f"gitsync/{name} Ready True or False", seen, 90, interval=0.3)
    return found
