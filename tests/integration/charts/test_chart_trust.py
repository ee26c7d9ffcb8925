"""Which chart repositories a repository may make gitops-sync fetch from: only those the operator allows
(--allow-chart-repository prefixes, entries of the credentials file), against the real registries on loopback.

The repository's helm-chart.yaml (and Chart.yaml dependencies) are untrusted input; a refused repository is exit 2
naming the file and the URL, and the access log shows that no request reached it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from chart_registries import CHARTS, Published, Registries, render_cli, sha256_of

pytestmark = pytest.mark.timeout(300)


def _repo(tmp_path: Path, url: str, version: str = "0.1.0") -> Path:
    repo = tmp_path / "repo"
    web = repo / "apps" / "web"
    web.mkdir(parents=True)
    spec = {"repo": url, "chartName": "hello", "chartVersion": version, "releaseName": "web"}
    (web / "helm-chart.yaml").write_text(json.dumps({"helmChart": spec}))
    return repo


@pytest.fixture(scope="module")
def public(registries: Registries, published: Published, tmp_path_factory: pytest.TempPathFactory) -> str:
    """hello 0.1.0 in the chart repository's `public/` directory (served without credentials)."""
    return registries.publish_https(published.archives["0.1.0"], "public")


@pytest.mark.parametrize("kind", ["https", "oci"])
def test_a_repository_nobody_allowed_is_refused_before_any_request(
    registries: Registries, published: Published, tmp_path: Path, kind: str
) -> None:
    url = published.https if kind == "https" else published.oci
    repo = _repo(tmp_path, url)
    asked = len(registries.chart_repo_asked())
    r = render_cli(registries, repo, tmp_path, None)
    assert r.returncode == 2, r.stdout
    assert "apps/web/helm-chart.yaml" in r.stderr and f"chart hello from {url}" in r.stderr
    assert "chart repository not allowed" in r.stderr and "--allow-chart-repository" in r.stderr
    assert len(registries.chart_repo_asked()) == asked  # not even the index was asked for


def test_an_allowed_prefix_fetches_without_credentials(registries: Registries, public: str, tmp_path: Path) -> None:
    """A public repository (no credentials file at all), allowed by prefix; its CA trusted the system's way."""
    repo = _repo(tmp_path, public)
    env = {"SSL_CERT_FILE": str(registries.ca_file)}
    r = render_cli(registries, repo, tmp_path, None, "--allow-chart-repository", public, env_extra=env)
    assert r.returncode == 0, r.stderr
    assert f"# chart: hello 0.1.0 from {public} (" in r.stdout and "name: web-config" in r.stdout
    # The same prefix from the environment (space-separated, as for every repeatable flag).
    r = render_cli(
        registries, repo, tmp_path, None, env_extra={**env, "GITOPS_SYNC_ALLOW_CHART_REPOSITORY": f"oci://x {public}"}
    )
    assert r.returncode == 0, r.stderr


def test_a_prefix_allows_on_a_path_boundary_only(registries: Registries, public: str, tmp_path: Path) -> None:
    repo = _repo(tmp_path, public)
    env = {"SSL_CERT_FILE": str(registries.ca_file)}
    r = render_cli(registries, repo, tmp_path, None, "--allow-chart-repository", public[:-2], env_extra=env)
    assert r.returncode == 2 and "chart repository not allowed" in r.stderr, r.stderr
    r = render_cli(registries, repo, tmp_path, None, "--allow-chart-repository", registries.chart_repo, env_extra=env)
    assert r.returncode == 0, r.stderr  # the whole server


def test_the_credentials_file_allows_its_entries_only(
    registries: Registries, published: Published, tmp_path: Path
) -> None:
    """An entry for the chart repository does not open the OCI registry."""
    creds = registries.credentials_file(tmp_path / "creds.json", url=published.https)
    r = render_cli(registries, _repo(tmp_path, published.oci), tmp_path, creds)
    assert r.returncode == 2 and "chart repository not allowed" in r.stderr, r.stderr
    shutil.rmtree(tmp_path / "repo")
    r = render_cli(registries, _repo(tmp_path, published.https), tmp_path, creds)
    assert r.returncode == 0, r.stderr
    assert sha256_of(published.archives["0.1.0"]) in r.stdout


def test_a_chart_yaml_dependency_is_held_to_the_same_list(
    registries: Registries, published: Published, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    chart = repo / "apps" / "umbrella"
    shutil.copytree(CHARTS / "umbrella", chart)
    meta = (chart / "Chart.yaml").read_text()
    (chart / "Chart.yaml").write_text(meta.replace("repository: file://../hello", f"repository: {published.https}"))
    asked = len(registries.chart_repo_asked())
    r = render_cli(registries, repo, tmp_path, None)
    assert r.returncode == 2, r.stdout
    assert "dependency hello of chart umbrella" in r.stderr and "chart repository not allowed" in r.stderr
    assert published.https in r.stderr
    assert len(registries.chart_repo_asked()) == asked
