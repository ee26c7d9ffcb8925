"""Private repositories through GitSync spec.secretRef, on the real API server and real Git servers.

A tenant's GitSyncs fetch private HTTPS repositories (basic auth, a bearer token, the server's CA from the Secret) and a
private SSH repository (key and known_hosts from the Secret), reading each Secret as the tenant's
ServiceAccount; rotated credentials are used by the next poll without a restart; a Secret the
ServiceAccount may not read (or that does not exist) is refused with reason CredentialsUnavailable; no
credential reaches the status, Events, the log, /status, the page, the clone cache or a file left behind.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import KubeCluster
from tests.gitservers import HttpsGitServer, SshGitServer, bare_repository, commit_to, https_server, keypair, ssh_server
from tests.integration.daemon_support import Daemon, configmap, wait_established, wait_until
from tests.integration.test_fleet import CRD, cm_data, condition, crd, gs_status, tenant_account
from tests.integration.test_fleet_tenant import _pages
from tests.integration.test_private_repositories_cli import cmdlines_during

pytestmark = pytest.mark.cluster
__all__ = ["crd", "https_server", "ssh_server"]  # module-scoped fixtures, shared

PASSWORD = "fleet-pw-3f9a1c7e55"
ROTATED = "fleet-pw-rotated-b81d0e42"
TOKEN = "fleet-bearer-6e0d2b97c4"


def secret(name: str, namespace: str, data: dict[str, str]) -> str:
    doc = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace}}
    return json.dumps({**doc, "type": "Opaque", "stringData": data}) + "\n"


def gitsync(name: str, namespace: str, repository: str, **spec: Any) -> str:
    doc = {
        "apiVersion": "gitops-sync.io/v1alpha1",
        "kind": "GitSync",
        "metadata": {"name": name, "namespace": namespace},
    }
    return json.dumps({**doc, "spec": {"repository": repository, "interval": "2s", **spec}}) + "\n"


def allow_secrets(kube: KubeCluster, namespace: str, *names: str) -> None:
    """ServiceAccount tenant may `get` these Secrets of its namespace, and no other."""
    kube.kubectl(
        "create",
        "role",
        "tenant-git",
        "-n",
        namespace,
        "--verb=get",
        "--resource=secrets",
        *(f"--resource-name={n}" for n in names),
    )
    kube.kubectl(
        "create",
        "rolebinding",
        "tenant-git",
        "-n",
        namespace,
        "--role=tenant-git",
        f"--serviceaccount={namespace}:tenant",
    )


Servers = tuple[HttpsGitServer, SshGitServer]


@pytest.fixture
def servers(https_server: HttpsGitServer, ssh_server: SshGitServer) -> Servers:
    """Both servers, as a test starts: the HTTPS one wants PASSWORD for deploy, sshd the client key."""
    https_server.users, https_server.tokens = {"deploy": PASSWORD}, set()
    ssh_server.authorize(ssh_server.client_key)
    return https_server, ssh_server


class Kept:
    """GitSyncs whose spec.secretRef is applied again whenever it went. The shared cluster's CRD is
    cluster-wide: another branch's tests applying theirs (without spec.secretRef) prune the field; this
    branch's CRD and the GitSyncs (never the Secrets: a test may have rotated them) are then applied again."""

    def __init__(self, kube: KubeCluster, namespace: str, docs: list[str]) -> None:
        self.kube, self.namespace = kube, namespace
        self.gitsyncs = [d for d in docs if '"GitSync"' in d and "secretRef" in d]
        kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
        kube.kubectl("apply", "-f", "-", input="---\n".join(docs))
        wait_until("GitSyncs stored with spec.secretRef", self._restored, 60, interval=1)

    def _kept(self) -> bool:
        names = [json.loads(d)["metadata"]["name"] for d in self.gitsyncs]
        return all("secretRef" in self.kube.get("gitsync", n, self.namespace)["spec"] for n in names)

    def _restored(self) -> bool:
        if self._kept():
            return True
        self.kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
        wait_established(self.kube.env, "gitsyncs.gitops-sync.io", 60)
        self.kube.kubectl("apply", "-f", "-", input="---\n".join(self.gitsyncs))
        return self._kept()

    def until(self, what: str, check: Callable[[], object], timeout: float = 90) -> None:
        """wait_until, spec.secretRef restored before each look."""
        wait_until(what, lambda: self._restored() and check(), timeout, interval=0.3)

    def ready(self, name: str, timeout: float = 90) -> None:
        self.until(f"gitsync/{name} Ready", lambda: ready(self.kube, self.namespace, name), timeout)


def ready(kube: KubeCluster, namespace: str, name: str) -> bool:
    return condition(kube, namespace, name, "Ready").get("status") == "True"


def daemon_env(kube: KubeCluster, tmp_path: Path) -> dict[str, str]:
    """The controller's environment: a HOME without ~/.ssh and a TMPDIR of its own (to see what it leaves)."""
    (tmp_path / "home").mkdir()
    (tmp_path / "tmp").mkdir()
    return {**kube.env, "HOME": str(tmp_path / "home"), "TMPDIR": str(tmp_path / "tmp")}


def fleet(namespace: str, tmp_path: Path) -> list[str]:
    return ["--watch-namespace", namespace, "--cache-dir", str(tmp_path / "cache")]


def test_private_https_and_ssh_repositories_with_rotated_credentials(
    kube: KubeCluster, crd: None, namespace: str, tmp_path: Path, servers: Servers
) -> None:
    https_server, ssh_server = servers
    https_server.tokens = {TOKEN}
    h_repo = bare_repository(https_server.repos, f"{namespace}-h", {"cm.yaml": configmap("https-cm", {"v": "1"})})
    t_repo = bare_repository(https_server.repos, f"{namespace}-t", {"cm.yaml": configmap("token-cm", {"v": "1"})})
    s_repo = bare_repository(ssh_server.repos, f"{namespace}-s", {"cm.yaml": configmap("ssh-cm", {"v": "1"})})
    key_text = ssh_server.client_key.read_text()
    tenant_account(kube, namespace)
    allow_secrets(kube, namespace, "https-creds", "ssh-creds", "token-creds")
    kept = Kept(
        kube,
        namespace,
        (
            [
                secret(
                    "https-creds",
                    namespace,
                    {"username": "deploy", "password": PASSWORD, "ca.crt": https_server.ca.read_text()},
                ),
                secret("ssh-creds", namespace, {"identity": key_text, "known_hosts": ssh_server.known_hosts}),
                secret("token-creds", namespace, {"bearerToken": TOKEN, "ca.crt": https_server.ca.read_text()}),
                *(
                    gitsync(name, namespace, url, serviceAccountName="tenant", secretRef={"name": ref})
                    for name, url, ref in (
                        ("web", https_server.url(h_repo), "https-creds"),
                        ("tok", https_server.url(t_repo), "token-creds"),
                        ("api", ssh_server.url(s_repo), "ssh-creds"),
                    )
                ),
            ]
        ),
    )
    log_path = tmp_path / "fleet.log"
    with Daemon(fleet(namespace, tmp_path), daemon_env(kube, tmp_path), log_path) as d:
        d.wait_ready(60)
        for name in ("web", "api", "tok"):
            kept.ready(name)
        assert cm_data(kube, namespace, "token-cm") == {"v": "1"}  # a bearer token from the Secret
        assert cm_data(kube, namespace, "https-cm") == {"v": "1"}
        assert cm_data(kube, namespace, "ssh-cm") == {"v": "1"}
        pid = d.proc.pid
        # The controller's own fetches, looked at while they run (each request slowed): no secret in argv.
        https_server.delay = 0.4
        try:
            lines = cmdlines_during(lambda: time.sleep(5))  # two polls or more of each GitSync
        finally:
            https_server.delay = 0
        assert [ln for ln in lines if "remote-https" in ln], "no fetch of the controller was seen"
        assert [ln for ln in lines if ln.startswith("ssh ") and "IdentitiesOnly=yes" in ln], "no ssh was seen"
        key_body = key_text.splitlines()[1]
        assert not [ln for ln in lines if PASSWORD in ln or TOKEN in ln or key_body in ln]

        # Rotation: the servers now want new credentials; the Secrets are updated; the next poll uses them.
        https_server.users = {"deploy": ROTATED}
        new_key = keypair(tmp_path / "rotated_key")
        ssh_server.authorize(new_key)
        commit_to(h_repo, {"cm.yaml": configmap("https-cm", {"v": "2"})})
        commit_to(s_repo, {"cm.yaml": configmap("ssh-cm", {"v": "2"})})
        kept.until(
            "web fails with the old password",
            lambda: "authentication failed" in condition(kube, namespace, "web", "Ready").get("message", ""),
        )
        kube.kubectl(
            "apply",
            "-f",
            "-",
            input="---\n".join(
                [
                    secret(
                        "https-creds",
                        namespace,
                        {"username": "deploy", "password": ROTATED, "ca.crt": https_server.ca.read_text()},
                    ),
                    secret(
                        "ssh-creds", namespace, {"identity": new_key.read_text(), "known_hosts": ssh_server.known_hosts}
                    ),
                ]
            ),
        )
        kept.until("the rotated password is used", lambda: cm_data(kube, namespace, "https-cm") == {"v": "2"})
        kept.until("the rotated key is used", lambda: cm_data(kube, namespace, "ssh-cm") == {"v": "2"})
        assert d.proc.pid == pid and d.proc.poll() is None  # no restart
        places = {
            "GitSync web": json.dumps(gs_status(kube, namespace, "web")),
            "GitSync api": json.dumps(gs_status(kube, namespace, "api")),
            "/status": d.get("/status")[1].decode(),
            **{f"page {p}": html for p, html in _pages(d).items()},
        }
    places["daemon log"] = log_path.read_text()
    places["Events"] = json.dumps(kube.list("events", namespace))
    for path in (tmp_path / "cache").rglob("*"):
        if path.is_file():
            places[f"cache {path}"] = path.read_bytes().decode(errors="replace")
    key_lines = [ln for text in (key_text, new_key.read_text()) for ln in text.splitlines() if "PRIVATE KEY" not in ln]
    for where, text in places.items():
        for value in (PASSWORD, ROTATED, TOKEN, *key_lines):
            assert value not in text, f"a credential leaked into {where}"
    assert "https-cm" in places["/status"]  # the places looked at are the right ones
    assert not os.listdir(tmp_path / "tmp"), "a key or CA file was left behind"


def test_a_tenant_cannot_use_a_secret_its_service_account_may_not_read(
    kube: KubeCluster, crd: None, namespace: str, tmp_path: Path, servers: Servers
) -> None:
    https_server, ssh_server = servers
    repo = bare_repository(https_server.repos, f"{namespace}-b", {"cm.yaml": configmap("borrowed-cm", {"v": "1"})})
    url = https_server.url(repo)
    s_url = ssh_server.url(bare_repository(ssh_server.repos, f"{namespace}-m", {"cm.yaml": configmap("mitm-cm", {})}))
    impostor = keypair(tmp_path / "impostor")
    wrong_host = f"[127.0.0.1]:{ssh_server.port} {' '.join(impostor.with_suffix('.pub').read_text().split()[:2])}\n"
    tenant_account(kube, namespace)
    allow_secrets(kube, namespace, "tenant-creds", "mitm-creds")
    admin = {"username": "deploy", "password": PASSWORD, "ca.crt": https_server.ca.read_text()}
    mitm = {"identity": ssh_server.client_key.read_text(), "known_hosts": wrong_host}
    kept = Kept(
        kube,
        namespace,
        (
            [
                secret("admin-creds", namespace, admin),  # the admin's, in the tenant's own namespace
                gitsync("borrow", namespace, url, serviceAccountName="tenant", secretRef={"name": "admin-creds"}),
                gitsync("missing", namespace, url, serviceAccountName="tenant", secretRef={"name": "tenant-creds"}),
                secret("mitm-creds", namespace, mitm),  # known_hosts lists another key than the server's
                gitsync("mitm", namespace, s_url, serviceAccountName="tenant", secretRef={"name": "mitm-creds"}),
            ]
        ),
    )
    # Another namespace's Secret cannot even be named: the schema has no namespace there.
    other = gitsync("other", namespace, url, secretRef={"name": "x", "namespace": "kube-system"})
    r = kube.kubectl("apply", "-f", "-", input=other, check=False)
    assert r.returncode != 0 and "namespace" in r.stderr, r.stderr
    log_path = tmp_path / "fleet.log"
    with Daemon(fleet(namespace, tmp_path), daemon_env(kube, tmp_path), log_path) as d:
        d.wait_ready(60)

        def refused(name: str) -> dict[str, Any]:
            c = condition(kube, namespace, name, "Ready")
            return c if c.get("reason") == "CredentialsUnavailable" else {}

        kept.until("borrow refused", lambda: refused("borrow"))
        borrow = refused("borrow")
        assert borrow["status"] == "False"
        assert f"Secret {namespace}/admin-creds" in borrow["message"], borrow
        assert f"ServiceAccount {namespace}/tenant may not get it" in borrow["message"], borrow
        kept.until("missing refused", lambda: refused("missing"))
        missing = refused("missing")
        assert f"Secret {namespace}/tenant-creds (spec.secretRef) not found" in missing["message"], missing
        assert cm_data(kube, namespace, "borrowed-cm") is None  # nothing fetched, nothing applied

        def mismatch() -> bool:
            return "host key mismatch" in condition(kube, namespace, "mitm", "Ready").get("message", "")

        kept.until("mitm refused for its host key", mismatch)
        assert cm_data(kube, namespace, "mitm-cm") is None
        status = d.get("/status")[1].decode()
    texts = [json.dumps(gs_status(kube, namespace, "borrow")), status, log_path.read_text()]
    texts.append(json.dumps(kube.list("events", namespace)))
    assert "CredentialsUnavailable" in texts[-1]
    assert not [t for t in texts if PASSWORD in t]
