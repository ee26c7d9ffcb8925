"""GitSync spec.chartCredentials on the real registries (basic auth, their own CA) and the real API server.

A tenant's GitSyncs (serviceAccountName: tenant) pull a chart from the private HTTPS chart repository and from the
OCI registry, and apply an OCI artifact, with the username, password and ca.crt of a Secret of their namespace read
as the ServiceAccount; wrong credentials and none at all are refused by the repository (Ready=False naming the
Secret, or saying none is configured), even though the controller's environment holds a credentials file with the
right ones (a tenant never gets the operator's); a Secret the ServiceAccount may not read is CredentialsUnavailable
and nothing is asked of the repository with it; a Secret of another namespace cannot be named at all (the API
server refuses the field); a rotated Secret is used by the next pass. No password reaches the status, Events, the
log or /status.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from chart_registries import Published, Registries
from test_artifact_source import push_artifact

from tests.conftest import KubeCluster
from tests.integration.daemon_support import Daemon, GitRepo, configmap, wait_established, wait_until
from tests.integration.test_fleet import CRD, condition, fleet_args
from tests.integration.test_private_repositories_fleet import gitsync, secret

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]

WRONG = "not-the-password-5e1f"


def _gitsync(name: str, namespace: str, repository: str, **spec: Any) -> str:
    return gitsync(name, namespace, repository, serviceAccountName="tenant", prune=True, **spec)


def _chart_file(url: str, release: str) -> str:
    return json.dumps(
        {"helmChart": {"repo": url, "chartName": "hello", "chartVersion": "^0.1", "releaseName": release}}
    )


def _tenant(kube: KubeCluster, namespace: str, secrets: tuple[str, ...]) -> None:
    """ServiceAccount tenant: ConfigMaps and Deployments of `namespace`, and `get` on these Secrets only."""
    kube.kubectl("create", "serviceaccount", "tenant", "-n", namespace)
    kube.kubectl(
        "create", "role", "tenant", "-n", namespace, "--verb=get,list,watch,create,update,patch,delete",
        "--resource=configmaps,deployments.apps",
    )  # fmt: skip
    kube.kubectl(
        "create", "role", "tenant-secrets", "-n", namespace, "--verb=get", "--resource=secrets",
        *(f"--resource-name={s}" for s in secrets),
    )  # fmt: skip
    for role in ("tenant", "tenant-secrets"):
        kube.kubectl(
            "create", "rolebinding", role, "-n", namespace, f"--role={role}", f"--serviceaccount={namespace}:tenant"
        )


def _creds(url: str, secret: str) -> list[dict[str, Any]]:
    return [{"url": url, "secretRef": {"name": secret}}]


def test_gitsyncs_pull_private_charts_with_the_credentials_of_their_own_secrets(
    registries: Registries, published: Published, kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    https, oci = registries.chart_repo, f"oci://{registries.oci}"
    ca = registries.ca_file.read_text()
    right = {"username": registries.username, "password": registries.password, "ca.crt": ca}
    artifact = push_artifact(
        registries, "artifacts/tenant", "live", {"cm.yaml": configmap("from-artifact", {"k": "v"})}
    )
    repos = {
        name: GitRepo(tmp_path / name, {"apps/web/helm-chart.yaml": _chart_file(url, name)})
        for name, url in (
            ("right", published.https),
            ("oci", published.oci),
            ("wrong", published.https),
            ("missing", published.https),
            ("untrusted", published.https),
            ("forbidden", published.https),
        )
    }
    _tenant(kube, namespace, ("charts", "charts-wrong", "charts-ca"))
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    wait_established(kube.env, "gitsyncs.gitops-sync.io", 60)
    docs = [
        secret("charts", namespace, right),
        secret("charts-wrong", namespace, {**right, "password": WRONG}),
        secret("charts-forbidden", namespace, right),  # the tenant may not get it
        secret("charts-ca", namespace, {"ca.crt": ca}),  # the CA alone: trusted, but no credentials
        _gitsync("right", namespace, str(repos["right"].path), chartCredentials=_creds(https, "charts")),
        _gitsync("oci", namespace, str(repos["oci"].path), chartCredentials=_creds(oci, "charts")),
        _gitsync("artifact", namespace, f"{oci}/artifacts/tenant:live", chartCredentials=_creds(oci, "charts")),
        _gitsync("wrong", namespace, str(repos["wrong"].path), chartCredentials=_creds(https, "charts-wrong")),
        _gitsync("missing", namespace, str(repos["missing"].path), chartCredentials=_creds(https, "charts-ca")),
        _gitsync("untrusted", namespace, str(repos["untrusted"].path)),  # no entry: not even the CA
        _gitsync(
            "forbidden", namespace, str(repos["forbidden"].path), chartCredentials=_creds(https, "charts-forbidden")
        ),
    ]
    kube.kubectl("apply", "-f", "-", input="---\n".join(docs))
    # Another namespace's Secret cannot even be named: the field has no namespace (strict field validation).
    elsewhere = json.loads(_gitsync("elsewhere", namespace, str(repos["right"].path)))
    elsewhere["spec"]["chartCredentials"] = [
        {"url": https, "secretRef": {"name": "charts", "namespace": "kube-system"}}
    ]
    refused = kube.kubectl("apply", "-f", "-", input=json.dumps(elsewhere), check=False)
    assert refused.returncode != 0 and 'unknown field "spec.chartCredentials[0].secretRef.namespace"' in refused.stderr

    env = {k: v for k, v in kube.env.items() if not k.startswith(("HELM_", "GITOPS_SYNC_", "SSL_CERT"))}
    env["PATH"] = f"{registries.bin_dir}{os.pathsep}{env['PATH']}"
    # The operator's file with the right credentials and CA: a GitSync must not get them.
    env["GITOPS_SYNC_CHART_CREDENTIALS"] = str(registries.credentials_file(tmp_path / "operator.json"))
    args = fleet_args(namespace, tmp_path, "--cache-dir", str(tmp_path / "cache"))
    args += ["--allow-chart-repository", https, "--allow-chart-repository", oci]
    log = tmp_path / "fleet.log"
    with Daemon(args, env, log) as d:
        d.wait_ready(90)

        def ready(name: str) -> bool:
            return condition(kube, namespace, name, "Ready").get("status") == "True"

        def reason(name: str) -> dict[str, Any]:
            return condition(kube, namespace, name, "Ready")

        for name in ("right", "oci", "artifact"):
            wait_until(f"{name} Ready", lambda n=name: ready(n), 120)
        assert kube.find("configmap", "right-config", namespace) and kube.find("configmap", "oci-config", namespace)
        assert kube.find("configmap", "from-artifact", namespace)
        assert kube.get("gitsync", "artifact", namespace)["status"]["lastAppliedRevision"] == artifact

        wait_until(
            "wrong refused", lambda: "refused the configured credentials" in reason("wrong").get("message", ""), 60
        )
        assert (
            f"Secret {namespace}/charts-wrong" in reason("wrong")["message"]
            and "HTTP 401" in reason("wrong")["message"]
        )
        wait_until("missing refused", lambda: "none are configured" in reason("missing").get("message", ""), 60)
        wait_until("untrusted refused", lambda: "TLS verification failed" in reason("untrusted").get("message", ""), 60)
        assert "a GitSync: `ca.crt` in a Secret of spec.chartCredentials" in reason("untrusted")["message"]
        wait_until("forbidden refused", lambda: reason("forbidden").get("reason") == "CredentialsUnavailable", 60)
        message = reason("forbidden")["message"]
        assert f"Secret {namespace}/charts-forbidden" in message and "may not get it (403 Forbidden)" in message
        for name in ("wrong", "missing", "untrusted", "forbidden"):
            assert kube.find("configmap", f"{name}-config", namespace) is None

        # Rotation: the wrong Secret now holds the right password; the next pass uses it, no restart.
        kube.kubectl("apply", "-f", "-", input=secret("charts-wrong", namespace, right))
        wait_until("wrong Ready after the rotation", lambda: ready("wrong"), 60)
        assert kube.find("configmap", "wrong-config", namespace)

        seen = json.dumps(d.status()) + log.read_text()
        seen += json.dumps([kube.get("gitsync", n, namespace).get("status") for n in repos])
        seen += kube.kubectl("get", "events", "-n", namespace, "-o", "json").stdout
        for value in (registries.password, WRONG):
            assert value not in seen


def _pull_secret(kube: KubeCluster, name: str, namespace: str, server: str, login: tuple[str, str], ca: str) -> str:
    """A Secret of type kubernetes.io/dockerconfigjson as users have them for image pulls (made by `kubectl create
    secret docker-registry`), with the registry's CA beside it."""
    made = kube.kubectl(
        "create", "secret", "docker-registry", name, "-n", namespace, f"--docker-server={server}",
        f"--docker-username={login[0]}", f"--docker-password={login[1]}", "--dry-run=client", "-o", "json",
    )  # fmt: skip
    doc = json.loads(made.stdout)
    assert doc["type"] == "kubernetes.io/dockerconfigjson"
    return json.dumps({**doc, "stringData": {"ca.crt": ca}}) + "\n"


def test_an_image_pull_secret_pulls_an_oci_chart(
    registries: Registries, published: Published, kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    """The OCI registry's login in a `.dockerconfigjson` Secret: the entry of the chart URL's host is used; one
    for another host only is CredentialsUnavailable naming the hosts; a wrong password is refused by the
    registry. No password in the status, Events, the log or /status."""
    oci, ca = f"oci://{registries.oci}", registries.ca_file.read_text()
    right, other = (registries.username, registries.password), ("someone", WRONG)
    repos = {name: GitRepo(tmp_path / name, {"apps/web/helm-chart.yaml": _chart_file(published.oci, name)})
             for name in ("pull", "elsewhere", "pull-wrong")}  # fmt: skip
    _tenant(kube, namespace, ("pull", "elsewhere", "pull-wrong"))
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    wait_established(kube.env, "gitsyncs.gitops-sync.io", 60)
    docs = [
        _pull_secret(kube, "pull", namespace, registries.oci, right, ca),
        _pull_secret(kube, "elsewhere", namespace, "registry.example:5000", right, ca),
        _pull_secret(kube, "pull-wrong", namespace, f"https://{registries.oci}/v1/", other, ca),
        *(_gitsync(n, namespace, str(r.path), chartCredentials=_creds(oci, n)) for n, r in repos.items()),
    ]
    kube.kubectl("apply", "-f", "-", input="---\n".join(docs))
    env = {k: v for k, v in kube.env.items() if not k.startswith(("HELM_", "GITOPS_SYNC_", "SSL_CERT"))}
    env["PATH"] = f"{registries.bin_dir}{os.pathsep}{env['PATH']}"
    args = fleet_args(namespace, tmp_path, "--cache-dir", str(tmp_path / "cache"), "--allow-chart-repository", oci)
    log = tmp_path / "fleet.log"
    with Daemon(args, env, log) as d:
        d.wait_ready(90)

        def reason(name: str) -> dict[str, Any]:
            return condition(kube, namespace, name, "Ready")

        wait_until("pull Ready", lambda: reason("pull").get("status") == "True", 120)
        assert kube.find("configmap", "pull-config", namespace)
        wait_until("elsewhere refused", lambda: reason("elsewhere").get("reason") == "CredentialsUnavailable", 60)
        message = reason("elsewhere")["message"]
        assert f"Secret {namespace}/elsewhere (spec.chartCredentials[0])" in message
        assert f"has no entry for {registries.oci} (it has: registry.example:5000)" in message
        wait_until(
            "pull-wrong refused",
            lambda: "refused the configured credentials" in reason("pull-wrong").get("message", ""),
            60,
        )
        assert f"Secret {namespace}/pull-wrong" in reason("pull-wrong")["message"]
        for name in ("elsewhere", "pull-wrong"):
            assert kube.find("configmap", f"{name}-config", namespace) is None
        seen = json.dumps(d.status()) + log.read_text()
        seen += json.dumps([kube.get("gitsync", n, namespace).get("status") for n in repos])
        seen += kube.kubectl("get", "events", "-n", namespace, "-o", "json").stdout
        for value in (registries.password, WRONG):
            assert value not in seen
