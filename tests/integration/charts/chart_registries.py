"""The session fixture `registries` (import it into a test module): a real OCI registry (CNCF distribution)
and an HTTPS chart repository on loopback, both with TLS from their own CA and one basic-auth user, started by
deploy/local-cluster/cluster.py (`registry-up`, building the registry from its Go module when needed) and stopped
after the session.

Helpers publish real charts the way users do: `helm package` + `helm repo index` for the chart repository,
`helm push` for the registry. helm runs with private HELM_* homes, so nothing leaks into the user's config.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
LAUNCHER = REPO / "deploy" / "local-cluster" / "cluster.py"
CHARTS = REPO / "tests" / "fixtures" / "charts"


@dataclass(frozen=True)
class Registries:
    oci: str  # host:port of the registry: charts are oci://<oci>/<path>/<chart>
    chart_repo: str  # https://127.0.0.1:<port>: index.yaml and archives
    chart_dir: Path  # what the chart repository serves
    ca_file: Path
    username: str
    password: str
    bin_dir: Path  # holds helm
    home: Path  # private helm homes and scratch space
    logs: Path  # <state>/logs: registry.log and chart-repo.log (one line per request)

    def chart_repo_requests(self) -> list[str]:
        """The paths of the GET requests the chart repository has served (from its access log)."""
        text = (self.logs / "chart-repo.log").read_text(errors="replace")
        return re.findall(r'"GET (\S+) HTTP/[\d.]+" 200', text)

    def chart_repo_asked(self) -> list[str]:
        """The paths of every request the chart repository received, whatever it answered (401 too)."""
        text = (self.logs / "chart-repo.log").read_text(errors="replace")
        return re.findall(r'"[A-Z]+ (\S+) HTTP/[\d.]+" \d+', text)

    @property
    def helm_bin(self) -> str:
        return str(self.bin_dir / "helm")

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
        env.update(
            HELM_CONFIG_HOME=str(self.home / "config"),
            HELM_CACHE_HOME=str(self.home / "cache"),
            HELM_DATA_HOME=str(self.home / "data"),
        )
        r = subprocess.run([self.helm_bin, *args], env=env, capture_output=True, text=True, timeout=120, check=False)
        if check and r.returncode != 0:
            raise AssertionError(f"helm {' '.join(args[:2])} failed ({r.returncode}):\n{r.stderr}{r.stdout}")
        return r

    def package(self, chart: Path, version: str, dest: Path) -> Path:
        """`helm package` of a chart directory at `version` into `dest`; returns the archive."""
        dest.mkdir(parents=True, exist_ok=True)
        self.helm("package", str(chart), "--version", version, "--destination", str(dest))
        name = chart.name
        return dest / f"{name}-{version}.tgz"

    def publish_https(self, archive: Path, subdir: str = "") -> str:
        """Put an archive into the chart repository (under `subdir`) and re-index it with `helm repo index`;
        returns the repository URL."""
        where = self.chart_dir / subdir if subdir else self.chart_dir
        where.mkdir(parents=True, exist_ok=True)
        shutil.copy(archive, where / archive.name)
        url = f"{self.chart_repo}/{subdir}" if subdir else self.chart_repo
        self.helm("repo", "index", str(where), "--url", url)
        return url

    def push_oci(self, archive: Path, path: str) -> str:
        """`helm push` an archive to oci://<registry>/<path>, logged in through a registry config file."""
        config = self.home / "registry-config.json"
        auth = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        config.write_text(json.dumps({"auths": {self.oci: {"auth": auth}}}))
        url = f"oci://{self.oci}/{path}"
        self.helm("push", str(archive), url, "--ca-file", str(self.ca_file), "--registry-config", str(config))
        return url

    def credentials_file(self, path: Path, *, password: str | None = None, url: str | None = None) -> Path:
        """A chart credentials file (GITOPS_SYNC_CHART_CREDENTIALS) for both registries; `password`
        overrides the right one (to test a wrong one), `url` restricts it to one repository."""
        pw_file = path.with_suffix(".password")
        pw_file.write_text((self.password if password is None else password) + "\n")
        urls = [url] if url else [self.chart_repo, f"oci://{self.oci}"]
        entries = [
            {"url": u, "username": self.username, "passwordFile": str(pw_file), "caFile": str(self.ca_file)}
            for u in urls
        ]
        path.write_text(json.dumps({"repositories": entries}))
        return path


def _launcher(*args: str) -> str:
    r = subprocess.run([sys.executable, str(LAUNCHER), *args], stdout=subprocess.PIPE, text=True, check=False)
    if r.returncode != 0:
        pytest.fail(f"cluster.py {' '.join(args)} failed with exit status {r.returncode}", pytrace=False)
    return r.stdout


@pytest.fixture(scope="session")
def registries() -> Iterator[Registries]:
    """Both registries for this test session, on free ports, removed afterwards."""
    sessions = REPO / ".cache" / "local-cluster" / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    state = Path(tempfile.mkdtemp(prefix="registry-", dir=sessions))
    state.rmdir()  # the launcher creates (and registry-down removes) it
    home = Path(tempfile.mkdtemp(prefix="helm-home-"))
    try:
        info = json.loads(_launcher("--dir", str(state), "registry-up", "--auto-ports"))
        bin_dir = Path(_launcher("build").strip().splitlines()[-1])
        yield Registries(
            oci=info["oci"],
            chart_repo=info["chart_repo"],
            chart_dir=Path(info["chart_dir"]),
            ca_file=Path(info["ca_file"]),
            username=info["username"],
            password=Path(info["password_file"]).read_text().strip(),
            bin_dir=bin_dir,
            home=home,
            logs=state / "logs",
        )
    finally:
        _launcher("--dir", str(state), "registry-down")
        shutil.rmtree(home, ignore_errors=True)


@dataclass(frozen=True)
class Published:
    https: str  # chart repository URL
    oci: str  # oci://… path holding the chart
    archives: dict[str, Path]  # version -> archive


@pytest.fixture(scope="module")
def published(registries: Registries, tmp_path_factory: pytest.TempPathFactory) -> Published:
    """hello 0.1.0, 0.2.0, 0.3.0-rc.1 and 1.0.0, packaged from tests/fixtures/charts/hello, in both registries."""
    dest = tmp_path_factory.mktemp("packages")
    archives = {v: registries.package(CHARTS / "hello", v, dest) for v in ("0.1.0", "0.2.0", "0.3.0-rc.1", "1.0.0")}
    https = ""
    for archive in archives.values():
        https = registries.publish_https(archive, "stable")
    oci = ""
    for archive in archives.values():
        oci = registries.push_oci(archive, "charts")
    return Published(https, oci, archives)


def sha256_of(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def render_cli(
    registries: Registries,
    repo: Path,
    tmp_path: Path,
    credentials: Path | None,
    *args: str,
    env_extra: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`gitops-sync render` of `repo` as a user runs it: helm on PATH, the credentials file in the environment
    (plus `env_extra`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HELM_", "GITOPS_SYNC_"))}
    env.update(env_extra or {})
    env["PATH"] = f"{registries.bin_dir}{os.pathsep}{env['PATH']}"
    env["HELM_CONFIG_HOME"] = str(tmp_path / "user-helm")  # the user's own helm config: must not be needed
    if credentials is not None:
        env["GITOPS_SYNC_CHART_CREDENTIALS"] = str(credentials)
    cmd = [sys.executable, "-m", "gitops_sync", "render", "--repo", str(repo), "--cache-dir", str(tmp_path / "cache")]
    cmd += args
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, check=False)
