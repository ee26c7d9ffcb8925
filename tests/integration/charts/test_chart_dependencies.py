"""`Chart.yaml` dependencies of a chart in Git, fetched from the real registries on loopback before rendering:
range resolved, `Chart.lock` honoured, `file://` from the repository, unreachable ones exit 2 naming chart,
dependency and repository; the checkout is never written to."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from chart_registries import CHARTS, Published, Registries, render_cli, sha256_of

pytestmark = pytest.mark.timeout(300)


def _umbrella(tmp_path: Path, repository: str, version: str, lock: str | None = None) -> Path:
    """A repository with apps/umbrella (the fixture chart, its dependency pointed at `repository`)."""
    repo = tmp_path / "repo"
    chart = repo / "apps" / "umbrella"
    shutil.copytree(CHARTS / "umbrella", chart)
    meta = (chart / "Chart.yaml").read_text()
    meta = meta.replace(
        "version: 0.1.0\n    repository: file://../hello",
        f"version: {json.dumps(version)}\n    repository: {repository}",
    )
    (chart / "Chart.yaml").write_text(meta)
    if lock is not None:
        (chart / "Chart.lock").write_text(lock)
    return repo


def _lock(repository: str, version: str) -> str:
    return (
        f"dependencies:\n- name: hello\n  repository: {repository}\n  version: {version}\n"
        "digest: sha256:0000000000000000000000000000000000000000000000000000000000000000\n"
        'generated: "2026-12-01T00:00:00Z"\n'
    )


@pytest.mark.parametrize("kind", ["https", "oci"])
def test_a_dependency_range_resolves_and_the_checkout_is_not_written(
    registries: Registries, published: Published, tmp_path: Path, kind: str
) -> None:
    url = published.https if kind == "https" else published.oci
    repo = _umbrella(tmp_path, url, ">=0.1.0 <1.0.0")
    before = sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*"))
    r = render_cli(registries, repo, tmp_path, registries.credentials_file(tmp_path / "creds.json"))
    assert r.returncode == 0, r.stderr
    assert "name: umbrella-umbrella" in r.stdout  # the umbrella's own template
    assert "name: umbrella-config" in r.stdout  # the dependency's, with the umbrella's values for it
    assert "greeting: from-umbrella-defaults" in r.stdout.replace('"', "")
    assert sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*")) == before  # no charts/ written
    digest = sha256_of(published.archives["0.2.0"])  # the highest release in the range
    cached = list((tmp_path / "cache" / "charts").glob("sha256-*"))
    assert [c.name for c in cached] == [digest.replace(":", "-")]
    assert registries.password not in r.stdout + r.stderr


def test_the_lock_is_honoured(registries: Registries, published: Published, tmp_path: Path) -> None:
    """Chart.lock says 0.1.0: that is fetched, though the range allows 0.2.0."""
    repo = _umbrella(tmp_path, published.https, ">=0.1.0 <1.0.0", lock=_lock(published.https, "0.1.0"))
    r = render_cli(registries, repo, tmp_path, registries.credentials_file(tmp_path / "creds.json"))
    assert r.returncode == 0, r.stderr
    cached = [c.name for c in (tmp_path / "cache" / "charts").glob("sha256-*")]
    assert cached == [sha256_of(published.archives["0.1.0"]).replace(":", "-")]


def test_a_stale_lock_is_refused(registries: Registries, published: Published, tmp_path: Path) -> None:
    repo = _umbrella(tmp_path, published.https, "^0.2", lock=_lock(published.https, "0.1.0"))
    r = render_cli(registries, repo, tmp_path, registries.credentials_file(tmp_path / "creds.json"))
    assert r.returncode == 2
    assert "apps/umbrella/Chart.lock" in r.stderr and "out of sync" in r.stderr and "hello" in r.stderr


def test_an_unreachable_dependency_is_exit_2_naming_chart_dependency_and_repository(
    registries: Registries, tmp_path: Path
) -> None:
    url = "https://127.0.0.1:9/charts"
    repo = _umbrella(tmp_path, url, "0.1.0")
    r = render_cli(registries, repo, tmp_path, None, "--allow-chart-repository", url)
    assert r.returncode == 2, r.stdout
    assert "dependency hello of chart umbrella" in r.stderr
    assert f"chart hello from {url}" in r.stderr and "cannot reach the repository" in r.stderr


def test_a_dependency_with_wrong_credentials(registries: Registries, published: Published, tmp_path: Path) -> None:
    repo = _umbrella(tmp_path, published.oci, "0.1.0")
    wrong = "n0t-the-Password"
    r = render_cli(registries, repo, tmp_path, registries.credentials_file(tmp_path / "c.json", password=wrong))
    assert r.returncode == 2
    assert "dependency hello of chart umbrella" in r.stderr and "refused the configured credentials" in r.stderr
    assert wrong not in r.stderr + r.stdout


def test_a_file_dependency_inside_the_repository(registries: Registries, tmp_path: Path) -> None:
    """`file://` reaches a chart elsewhere in the repository (outside --path): copied, not built in place."""
    repo = _umbrella(tmp_path, "file://../../lib/hello", "0.1.0")
    shutil.copytree(CHARTS / "hello", repo / "lib" / "hello")
    r = render_cli(registries, repo, tmp_path, None, "--path", "apps/umbrella")
    assert r.returncode == 0, r.stderr
    assert "name: umbrella-config" in r.stdout
    assert not (repo / "apps" / "umbrella" / "charts").exists()


def test_a_file_dependency_leaving_the_repository_is_refused(registries: Registries, tmp_path: Path) -> None:
    shutil.copytree(CHARTS / "hello", tmp_path / "outside-hello")
    repo = _umbrella(tmp_path, "file://../../../outside-hello", "0.1.0")
    r = render_cli(registries, repo, tmp_path, None)
    assert r.returncode == 2
    assert "dependency hello of chart umbrella" in r.stderr and "leads outside the repository" in r.stderr


def test_charts_that_fetch_nothing_never_read_the_credentials_file(registries: Registries, tmp_path: Path) -> None:
    """A chart without dependencies, or with file:// ones only, renders even when the credentials file the
    environment names is missing: only a fetch reads it (and then the error names it)."""
    repo = _umbrella(tmp_path, "file://../../lib/hello", "0.1.0")
    shutil.copytree(CHARTS / "hello", repo / "lib" / "hello")
    missing = tmp_path / "no-such-credentials.yaml"
    r = render_cli(registries, repo, tmp_path, missing)
    assert r.returncode == 0, r.stderr
    assert "name: umbrella-config" in r.stdout and "name: hello-config" in r.stdout  # lib/hello renders too
    fetching = _umbrella(tmp_path / "other", "https://127.0.0.1:9/charts", "0.1.0")
    r = render_cli(registries, fetching, tmp_path, missing)
    assert r.returncode == 2 and f"chart credentials file {missing} does not exist" in r.stderr
