"""helm-chart.yaml sources in the daemon: `run --repo` and GitSyncs render them as the CLI does, report chart,
version and digest in /status, the GitSync status and `gitops-sync get -o json`, keep the render keyed by the
resolved digest (a re-sync of the same commit asks the repository for its index only: counted in its access log),
surface a re-pushed version as the source's error, and fetch only from repositories the operator allows.
Real registries on loopback, the real local control plane.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from chart_registries import CHARTS, Published, Registries, sha256_of

from tests.conftest import KubeCluster
from tests.integration.daemon_support import Daemon, GitRepo, wait_established, wait_until
from tests.integration.test_fleet import CRD, condition, fleet_args, gitsync, gs_status, wait_ready

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]


def _chart_file(url: str, version: str = "0.1.0") -> str:
    spec = {"repo": url, "chartName": "hello", "chartVersion": version, "releaseName": "web"}
    return json.dumps({"helmChart": spec}) + "\n"


def _env(kube: KubeCluster, registries: Registries, **more: str) -> dict[str, str]:
    env = {k: v for k, v in kube.env.items() if not k.startswith(("HELM_", "GITOPS_SYNC_"))}
    env["PATH"] = f"{registries.bin_dir}{os.pathsep}{env['PATH']}"
    env.update(more)
    return env


def _greeting(kube: KubeCluster, namespace: str) -> str | None:
    doc = kube.find("configmap", "web-config", namespace)
    return None if doc is None else str((doc.get("data") or {}).get("greeting"))


def test_run_repo_reports_the_chart_and_a_resync_reads_only_the_index(
    registries: Registries, published: Published, kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    """A pinned commit holding helm-chart.yaml: applied, /status names repository, chart, resolved version and
    digest; every later poll re-renders from the render cache keyed by the resolved digest, so the chart
    repository sees index.yaml and nothing else (no archive, no helm template run); then the same version is
    re-pushed with other content: the source fails with the re-push named, the objects stay as they were."""
    url = registries.publish_https(published.archives["0.1.0"], "daemon")
    repo = GitRepo(tmp_path / "repo", {"apps/web/helm-chart.yaml": _chart_file(url, "^0.1")})
    branch = repo.repo.active_branch.name
    creds = registries.credentials_file(tmp_path / "creds.json")
    env = _env(kube, registries, GITOPS_SYNC_CHART_CREDENTIALS=str(creds))
    args = ["--repo", str(repo.path), "--revision", branch, "-n", namespace, "--interval", "0.5"]
    args += ["--cache-dir", str(tmp_path / "cache")]
    with Daemon(args, env, tmp_path / "daemon.log") as d:
        d.wait_ready(90)
        wait_until("the chart applied", lambda: _greeting(kube, namespace) == "hello", 60)
        digest = sha256_of(published.archives["0.1.0"])
        want = {"repository": url, "chart": "hello", "version": "0.1.0", "digest": digest}
        assert d.status()["daemon"]["source"]["charts"] == [want]
        served = len(d.logged("render cache: served"))
        asked = len(registries.chart_repo_asked())
        wait_until(
            "three re-syncs from the render cache", lambda: len(d.logged("render cache: served")) >= served + 3, 30
        )
        since = registries.chart_repo_asked()[asked:]
        print(f"chart repository requests during {len(d.logged('render cache: served')) - served} re-syncs: {since}")
        assert since and set(since) == {"/daemon/index.yaml"}, since
        assert not d.logged("chart pulled")[1:]  # pulled once, at the first render

        # The same version re-pushed with other content: refused, named, the objects kept.
        other = tmp_path / "other" / "hello"
        shutil.copytree(CHARTS / "hello", other)
        (other / "values.yaml").write_text(
            (other / "values.yaml").read_text().replace("greeting: hello", "greeting: x")
        )
        again = registries.package(other, "0.1.0", tmp_path / "repushed")
        registries.publish_https(again, "daemon")

        def failed() -> str:
            return str(d.status()["daemon"]["source"]["error"])

        wait_until("the re-push reported", lambda: "re-pushed" in failed(), 30)
        assert "apps/web/helm-chart.yaml" in failed() and sha256_of(again) in failed()
        assert _greeting(kube, namespace) == "hello"
        assert registries.password not in Path(tmp_path / "daemon.log").read_text()


def _gs_cli(kube: KubeCluster, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "gitops_sync", *args, "--kubeconfig", str(kube.kubeconfig)]
    return subprocess.run(cmd, env=kube.env, capture_output=True, text=True, timeout=120, check=False)


def test_gitsyncs_render_charts_from_allowed_repositories_only(
    registries: Registries, published: Published, kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    """The controller's --allow-chart-repository decides (a tenant cannot widen it; GitSyncs get no credentials
    file): the public repository's chart is applied and reported in the GitSync status and `get -o json`; a
    GitSync naming another repository is Ready=False, reason ChartRepositoryNotAllowed, naming file and URL,
    and nothing is asked of that repository."""
    public = registries.publish_https(published.archives["0.1.0"], "public")
    ok = GitRepo(tmp_path / "ok", {"apps/web/helm-chart.yaml": _chart_file(public)})
    bad = GitRepo(tmp_path / "bad", {"apps/web/helm-chart.yaml": _chart_file(published.https)})
    manifests = [gitsync("ok", namespace, ok.path), gitsync("bad", namespace, bad.path)]
    # The CRD as this tree ships it (with status.charts): the cluster is shared with other test sessions.
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    wait_established(kube.env, "gitsyncs.gitops-sync.io", 60)
    kube.kubectl("apply", "-f", "-", input="---\n".join(manifests))
    env = _env(kube, registries, SSL_CERT_FILE=str(registries.ca_file))
    # Even with a credentials file in its environment, the fleet reads none (a tenant must not borrow them).
    env["GITOPS_SYNC_CHART_CREDENTIALS"] = str(registries.credentials_file(tmp_path / "creds.json"))
    asked = len(registries.chart_repo_asked())
    args = fleet_args(namespace, tmp_path, "--allow-chart-repository", public, "--cache-dir", str(tmp_path / "cache"))
    with Daemon(args, env, tmp_path / "fleet.log") as d:
        d.wait_ready(90)
        wait_ready(kube, namespace, "ok", timeout=90)
        assert _greeting(kube, namespace) == "hello"
        want = {
            "repository": public,
            "chart": "hello",
            "version": "0.1.0",
            "digest": sha256_of(published.archives["0.1.0"]),
        }
        assert gs_status(kube, namespace, "ok")["charts"] == [want]
        rows = {r["name"]: r for r in json.loads(_gs_cli(kube, "get", "-n", namespace, "-o", "json").stdout)}
        assert rows["ok"]["charts"] == [want]

        def refused() -> dict[str, Any]:
            return condition(kube, namespace, "bad", "Ready")

        wait_until("bad refused", lambda: refused().get("reason") == "ChartRepositoryNotAllowed", 60)
        message = refused()["message"]
        assert refused()["status"] == "False"
        assert "apps/web/helm-chart.yaml" in message and published.https in message, message
        assert not [p for p in registries.chart_repo_asked()[asked:] if not p.startswith("/public/")]
        docs = {doc["daemon"]["gitsync"]["name"]: doc for doc in d.status()["sources"]}
        assert docs[f"{namespace}/ok"]["daemon"]["source"]["charts"] == [want]


def test_sync_reports_name_the_chart_in_json_table_and_markdown(
    registries: Registries, published: Published, kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    """The text report had only the objects' origins: it now has one line per chart pulled, digest in full."""
    url = published.https
    repo = GitRepo(tmp_path / "repo", {"apps/web/helm-chart.yaml": _chart_file(url)})
    env = _env(kube, registries, GITOPS_SYNC_CHART_CREDENTIALS=str(registries.credentials_file(tmp_path / "c.json")))
    base = [sys.executable, "-m", "gitops_sync", "sync", "--repo", str(repo.path), "-n", namespace]
    base += ["--cache-dir", str(tmp_path / "cache"), "--name", f"t-{namespace}"]
    digest = sha256_of(published.archives["0.1.0"])
    line = f"chart hello 0.1.0 from {url} ({digest})"
    outputs = {}
    for fmt in ("json", "table", "markdown"):
        r = subprocess.run([*base, "-o", fmt], env=env, capture_output=True, text=True, timeout=180, check=False)
        assert r.returncode == 0, r.stderr + r.stdout
        outputs[fmt] = r.stdout
    doc = json.loads(outputs["json"])
    assert doc["charts"] == [{"repository": url, "chart": "hello", "version": "0.1.0", "digest": digest}]
    assert line in outputs["table"] and line in outputs["markdown"], outputs
