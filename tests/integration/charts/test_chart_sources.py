"""Charts from repositories declared in Git (helm-chart.yaml), against the real registries on loopback.

Each test writes a repository with `apps/web/helm-chart.yaml` and runs `gitops-sync render` as a user would,
with the chart credentials file in GITOPS_SYNC_CHART_CREDENTIALS and helm from the local-cluster build on PATH.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import git
import pytest
from chart_registries import CHARTS, Published, Registries, render_cli, sha256_of

from tests.conftest import KubeCluster

pytestmark = pytest.mark.timeout(300)


def _repo(tmp_path: Path, spec: dict[str, object], values: str | None = "greeting: from-values-file\n") -> Path:
    repo = tmp_path / "repo"
    web = repo / "apps" / "web"
    web.mkdir(parents=True)
    (web / "helm-chart.yaml").write_text(json.dumps({"helmChart": spec}))
    if values is not None:
        (web / "helm-values.yaml").write_text(values)
    return repo


def test_chart_from_https_repository_range_resolves_to_one_version(
    registries: Registries, published: Published, tmp_path: Path
) -> None:
    """A range picks the highest release it allows (not the pre-release, not 1.0.0); values file and inline
    values both reach helm, inline last; the report names version and the archive's digest."""
    spec = {
        "repo": published.https,
        "chartName": "hello",
        "chartVersion": ">=0.1.0 <1.0.0",
        "releaseName": "web",
        "namespace": "apps",
        "values": {"replicas": 3},
    }
    repo = _repo(tmp_path, spec)
    r = render_cli(registries, repo, tmp_path, registries.credentials_file(tmp_path / "creds.json"))
    assert r.returncode == 0, r.stderr
    digest = sha256_of(published.archives["0.2.0"])
    assert f"# chart: hello 0.2.0 from {published.https} ({digest})" in r.stdout
    assert 'greeting: "from-values-file"' in r.stdout or "greeting: from-values-file" in r.stdout
    assert "replicas: 3" in r.stdout
    assert "name: web-config" in r.stdout  # the release name
    assert registries.password not in r.stdout + r.stderr


def test_chart_from_oci_registry(registries: Registries, published: Published, tmp_path: Path) -> None:
    spec = {"repo": published.oci, "chartName": "hello", "chartVersion": "~0.1", "releaseName": "web"}
    repo = _repo(tmp_path, spec, values=None)
    r = render_cli(registries, repo, tmp_path, registries.credentials_file(tmp_path / "creds.json"))
    assert r.returncode == 0, r.stderr
    assert f"# chart: hello 0.1.0 from {published.oci} ({sha256_of(published.archives['0.1.0'])})" in r.stdout
    assert "kind: Deployment" in r.stdout
    assert registries.password not in r.stdout + r.stderr


def test_a_cached_chart_is_not_pulled_again(registries: Registries, published: Published, tmp_path: Path) -> None:
    """The second render finds the archive in the clone cache by the digest the index announces: it renders
    even though the archive has been taken off the repository (only index.yaml is read)."""
    archive = registries.package(CHARTS / "hello", "0.4.0", tmp_path / "pkg")
    url = registries.publish_https(archive, "cachetest")
    repo = _repo(tmp_path, {"repo": url, "chartName": "hello", "chartVersion": "0.4.0"})
    creds = registries.credentials_file(tmp_path / "creds.json")
    before = len(registries.chart_repo_requests())
    first = render_cli(registries, repo, tmp_path, creds)
    assert first.returncode == 0, first.stderr
    after_first = registries.chart_repo_requests()[before:]
    assert after_first == ["/cachetest/index.yaml", f"/cachetest/{archive.name}"]
    second = render_cli(registries, repo, tmp_path, creds)
    assert second.returncode == 0, second.stderr
    assert second.stdout == first.stdout
    assert registries.chart_repo_requests()[before + 2 :] == ["/cachetest/index.yaml"]  # the index check only
    (registries.chart_dir / "cachetest" / archive.name).unlink()
    third = render_cli(registries, repo, tmp_path, creds)
    assert third.returncode == 0 and third.stdout == first.stdout, third.stderr
    # and without the cache the missing archive is an error: the pull really is skipped above
    (tmp_path / "cache").rename(tmp_path / "old-cache")
    fourth = render_cli(registries, repo, tmp_path, creds)
    assert fourth.returncode == 2
    assert "chart hello from" in fourth.stderr


@pytest.mark.parametrize("kind", ["https", "oci"])
@pytest.mark.parametrize("case", ["missing", "wrong"])
def test_bad_credentials_exit_2_naming_chart_and_repository_without_the_secret(
    registries: Registries, published: Published, tmp_path: Path, kind: str, case: str
) -> None:
    url = published.https if kind == "https" else published.oci
    repo = _repo(tmp_path, {"repo": url, "chartName": "hello", "chartVersion": "0.1.0"})
    wrong = "Wr0ng-pa55word-xyzzy"
    if case == "missing":  # trust is configured (the CA), credentials are not
        creds = tmp_path / "trust-only.json"
        creds.write_text(json.dumps({"repositories": [{"url": url, "caFile": str(registries.ca_file)}]}))
    else:
        creds = registries.credentials_file(tmp_path / "c.json", password=wrong)
    r = render_cli(registries, repo, tmp_path, creds)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"chart hello from {url}" in r.stderr and "apps/web/helm-chart.yaml" in r.stderr
    if case == "missing":
        assert "requires credentials" in r.stderr and "none are configured" in r.stderr
    else:
        assert "refused the configured credentials" in r.stderr
    assert wrong not in r.stdout + r.stderr
    assert registries.password not in r.stdout + r.stderr


def test_untrusted_tls_is_refused(registries: Registries, published: Published, tmp_path: Path) -> None:
    """Right credentials but no caFile: the loopback CA is not trusted, so nothing is sent."""
    repo = _repo(tmp_path, {"repo": published.https, "chartName": "hello", "chartVersion": "0.1.0"})
    creds = registries.credentials_file(tmp_path / "creds.json")
    doc = json.loads(creds.read_text())
    for entry in doc["repositories"]:
        del entry["caFile"]
    creds.write_text(json.dumps(doc))
    r = render_cli(registries, repo, tmp_path, creds)
    assert r.returncode == 2
    assert "TLS verification failed" in r.stderr and "caFile" in r.stderr


def test_plain_http_is_refused_unless_allowed(registries: Registries, tmp_path: Path) -> None:
    repo = _repo(tmp_path, {"repo": "http://127.0.0.1:9/charts", "chartName": "hello", "chartVersion": "0.1.0"})
    r = render_cli(registries, repo, tmp_path, None)
    assert r.returncode == 2
    assert "plain http:// is refused" in r.stderr and "allowHTTP" in r.stderr


def test_hostile_archive_is_refused_before_helm_reads_it(registries: Registries, tmp_path: Path) -> None:
    """A chart archive with a symlink to /etc/passwd, published with `helm repo index` (which accepts it):
    refused by the bounds check, so `helm template` never sees it and nothing is unpacked outside."""
    good = registries.package(CHARTS / "hello", "0.9.0", tmp_path / "pkg")
    hostile = tmp_path / "hostile" / good.name
    hostile.parent.mkdir()
    with tarfile.open(good, "r:gz") as src, tarfile.open(hostile, "w:gz") as out:
        for member in src:
            out.addfile(member, src.extractfile(member) if member.isfile() else None)
        link = tarfile.TarInfo("hello/templates/passwd.yaml")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        out.addfile(link)
    url = registries.publish_https(hostile, "hostile")
    repo = _repo(tmp_path, {"repo": url, "chartName": "hello", "chartVersion": "0.9.0"})
    r = render_cli(registries, repo, tmp_path, registries.credentials_file(tmp_path / "creds.json"))
    assert r.returncode == 2, r.stdout
    assert "holds a link" in r.stderr and "hello/templates/passwd.yaml" in r.stderr
    assert "root:" not in r.stdout
    assert not list((tmp_path / "cache").glob("charts/sha256-*"))  # nothing cached


def test_a_chart_with_a_dependency_from_oci(registries: Registries, tmp_path: Path) -> None:
    """An umbrella chart packaged with its dependency (`helm dependency build`, then `helm package`), pushed
    to the registry: both charts' objects render, inline values reach the sub-chart."""
    work = tmp_path / "charts"
    shutil.copytree(CHARTS, work)
    registries.helm("dependency", "build", str(work / "umbrella"))
    archive = registries.package(work / "umbrella", "0.1.0", tmp_path / "pkg")
    url = registries.push_oci(archive, "umbrellas")
    spec = {"repo": url, "chartName": "umbrella", "chartVersion": "0.1.0", "values": {"hello": {"greeting": "hi"}}}
    repo = _repo(tmp_path, spec, values=None)
    r = render_cli(registries, repo, tmp_path, registries.credentials_file(tmp_path / "creds.json"))
    assert r.returncode == 0, r.stderr
    assert f"# chart: umbrella 0.1.0 from {url} ({sha256_of(archive)})" in r.stdout
    assert "name: umbrella-umbrella" in r.stdout and "motd: from-umbrella" in r.stdout.replace('"', "")
    assert "name: umbrella-config" in r.stdout and "greeting: hi" in r.stdout.replace('"', "")


def test_a_repushed_version_is_refused_until_accepted(registries: Registries, tmp_path: Path) -> None:
    """The same tag pushed again with other content: the next pass names both digests and renders nothing;
    deleting the record it names accepts the new content."""
    work = tmp_path / "charts"
    shutil.copytree(CHARTS / "hello", work / "hello")
    first = registries.package(work / "hello", "0.5.0", tmp_path / "pkg1")
    url = registries.push_oci(first, "repush")
    repo = _repo(tmp_path, {"repo": url, "chartName": "hello", "chartVersion": "0.5.0"}, values=None)
    creds = registries.credentials_file(tmp_path / "creds.json")
    r = render_cli(registries, repo, tmp_path, creds)
    assert r.returncode == 0 and sha256_of(first) in r.stdout, r.stderr
    (work / "hello" / "values.yaml").write_text("replicas: 1\nimage: registry.invalid/hello:1.0.0\ngreeting: changed\n")
    second = registries.package(work / "hello", "0.5.0", tmp_path / "pkg2")
    assert sha256_of(second) != sha256_of(first)
    registries.push_oci(second, "repush")
    r = render_cli(registries, repo, tmp_path, creds)
    assert r.returncode == 2, r.stdout
    assert "re-pushed" in r.stderr and sha256_of(second) in r.stderr and sha256_of(first) in r.stderr
    record = re.search(r"delete (\S+\.json)", r.stderr)
    assert record is not None
    Path(record.group(1)).unlink()
    r = render_cli(registries, repo, tmp_path, creds)
    assert r.returncode == 0 and sha256_of(second) in r.stdout and "greeting: changed" in r.stdout.replace('"', "")


@pytest.mark.cluster
def test_sync_applies_a_chart_from_a_repository_and_reports_version_and_digest(
    registries: Registries, published: Published, kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    """`sync` of a Git commit holding helm-chart.yaml: the objects are applied, the report names chart, version
    and digest for each, and a second sync changes nothing and reads only index.yaml."""
    repo = _repo(
        tmp_path, {"repo": published.https, "chartName": "hello", "chartVersion": "^0.1", "releaseName": "web"}
    )
    git_repo = git.Repo.init(repo)
    git_repo.index.add(["apps/web/helm-chart.yaml", "apps/web/helm-values.yaml"])
    git_repo.index.commit("chart from a repository")
    env = dict(kube.env)
    env["GITOPS_SYNC_CHART_CREDENTIALS"] = str(registries.credentials_file(tmp_path / "creds.json"))
    cmd = [sys.executable, "-m", "gitops_sync", "sync", "--repo", str(repo), "-n", namespace, "-o", "json"]
    cmd += ["--cache-dir", str(tmp_path / "cache"), "--name", f"t-{namespace}"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert r.returncode == 0, r.stderr + r.stdout
    digest = sha256_of(published.archives["0.1.0"])
    assert f"chart hello 0.1.0 from {published.https}, {digest[:19]}" in r.stdout
    cm = json.loads(kube.kubectl("get", "configmap", "web-config", "-n", namespace, "-o", "json").stdout)
    assert cm["data"]["greeting"] == "from-values-file"
    before = len(registries.chart_repo_requests())
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert again.returncode == 0, again.stderr
    assert registries.chart_repo_requests()[before:] == ["/stable/index.yaml"]
    assert registries.password not in r.stdout + r.stderr + again.stdout + again.stderr


def test_an_unchanged_chart_source_is_not_templated_again(
    registries: Registries, published: Published, tmp_path: Path
) -> None:
    """helm's output for (digest, release, namespace, values bytes, helm binary) is kept in the cache: a re-render
    runs no helm at all (counted by a logging wrapper around the real helm); new values run it again."""
    wrapper_dir = tmp_path / "bin"
    wrapper_dir.mkdir()
    calls = tmp_path / "helm-calls.log"
    wrapper = wrapper_dir / "helm"
    wrapper.write_text(f'#!/bin/sh\necho "$1" >> {calls}\nexec {registries.helm_bin} "$@"\n')
    wrapper.chmod(0o755)
    reg = dataclasses.replace(registries, bin_dir=wrapper_dir)
    repo = _repo(tmp_path, {"repo": published.https, "chartName": "hello", "chartVersion": "0.1.0"})
    creds = registries.credentials_file(tmp_path / "creds.json")
    first = render_cli(reg, repo, tmp_path, creds)
    assert first.returncode == 0, first.stderr
    assert calls.read_text().split() == ["pull", "template"]
    second = render_cli(reg, repo, tmp_path, creds)
    assert second.returncode == 0 and second.stdout == first.stdout, second.stderr
    assert calls.read_text().split() == ["pull", "template"]  # nothing more: served by digest and values
    (repo / "apps" / "web" / "helm-values.yaml").write_text("greeting: changed\n")
    third = render_cli(reg, repo, tmp_path, creds)
    assert third.returncode == 0 and "greeting: changed" in third.stdout.replace('"', ""), third.stderr
    assert calls.read_text().split() == ["pull", "template", "template"]


def test_helm_values_flags_apply_last(registries: Registries, published: Published, tmp_path: Path) -> None:
    """--helm-values (the user's, for every chart) go after the file's values files and inline values."""
    spec = {"repo": published.https, "chartName": "hello", "chartVersion": "0.1.0", "values": {"replicas": 3}}
    repo = _repo(tmp_path, spec, values="replicas: 2\ngreeting: from-git\n")
    mine = tmp_path / "mine.yaml"
    mine.write_text("replicas: 5\n")
    creds = registries.credentials_file(tmp_path / "creds.json")
    r = render_cli(registries, repo, tmp_path, creds, "--helm-values", str(mine))
    assert r.returncode == 0, r.stderr
    assert "replicas: 5" in r.stdout and "greeting: from-git" in r.stdout
    r = render_cli(registries, repo, tmp_path, creds)
    assert "replicas: 3" in r.stdout


@pytest.mark.parametrize("kind", ["https", "oci"])
def test_a_chart_digest_pinned_in_git(registries: Registries, published: Published, tmp_path: Path, kind: str) -> None:
    """`chartDigest` pins the content: the resolved version must have it, else exit 2 naming both digests."""
    url = published.https if kind == "https" else published.oci
    right = sha256_of(published.archives["0.2.0"])
    wrong = sha256_of(published.archives["0.1.0"])
    creds = registries.credentials_file(tmp_path / "creds.json")
    spec = {"repo": url, "chartName": "hello", "chartVersion": "~0.2", "chartDigest": right}
    r = render_cli(registries, _repo(tmp_path / "a", spec), tmp_path, creds)
    assert r.returncode == 0 and f"hello 0.2.0 from {url} ({right})" in r.stdout, r.stderr
    r = render_cli(registries, _repo(tmp_path / "b", {**spec, "chartDigest": wrong}), tmp_path, creds)
    assert r.returncode == 2
    assert f"version 0.2.0 has digest {right}, not the chartDigest {wrong} pinned in Git" in r.stderr
