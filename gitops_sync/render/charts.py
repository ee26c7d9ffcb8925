"""Charts from Helm repositories and OCI registries, declared in Git by a `helm-chart.yaml` file: what is pulled
(ChartSpec), with which credentials and trust (RepositoryAccess), within which bounds (ChartLimits).

A directory holding `helm-chart.yaml` (Kluctl's file name and shape, see docs/charts.md) names a repository
(`https://` chart repository or `oci://` registry), a chart, a version or semver range, a release name and
namespace, values files beside it and inline values. chart_pull.py resolves, pulls, checks (_chart_archive.py)
and caches it by digest and renders it with `helm template`; the walker (_render.py) turns the output into
objects whose origin names chart, version and digest, which reach every report.

Credentials and trust are the operator's, never the repository's: a file (path in $GITOPS_SYNC_CHART_CREDENTIALS
or RenderOptions.chart_credentials) lists repositories by URL prefix with user, password (inline, from a file
or an environment variable), CA bundle and the two explicit opt-outs (`allowHTTP`, `insecureSkipTLSVerify`).
No password appears in argv, logs, errors, the render cache key or the objects' origins.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gitops_sync.errors import RenderError
from gitops_sync.render import _semver
from gitops_sync.render._kustomize import KUSTOMIZATION_FILES
from gitops_sync.render._yaml import load_config

CHART_SOURCE_FILE = "helm-chart.yaml"
DEFAULT_VALUES_FILE = "helm-values.yaml"  # used when `valuesFiles` is not given and it exists (Kluctl's rule)
CREDENTIALS_ENV = "GITOPS_SYNC_CHART_CREDENTIALS"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
_RELEASE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,51}[a-z0-9])?$")
_SPEC_KEYS = {"repo", "chartName", "chartVersion", "chartDigest", "releaseName", "namespace", "valuesFiles", "values"}


@dataclass(frozen=True)
class ChartLimits:
    """Bounds on what a repository sends, checked before helm reads any of it."""

    max_archive_bytes: int = 20 * 1024 * 1024
    max_files: int = 5_000
    max_unpacked_bytes: int = 100 * 1024 * 1024  # Helm's own limit for a loaded chart
    max_index_bytes: int = 64 * 1024 * 1024  # index.yaml of a large public repository is tens of MB
    request_timeout: float = 30.0  # one index, tags or manifest request
    pull_timeout: float = 120.0  # one `helm pull`


@dataclass(frozen=True)
class ChartSpec:
    """What `helm-chart.yaml` declares (validated)."""

    repo: str
    chart: str
    version: str
    release: str
    namespace: str | None
    values_files: tuple[str, ...]
    values: dict[str, Any]
    digest: str | None = None  # `chartDigest`: the archive's sha256 the resolved version must have


@dataclass(frozen=True)
class RepositoryAccess:
    """The operator's settings for repositories whose URL starts with `url`."""

    url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_file: Path | None = None
    insecure_skip_tls_verify: bool = False
    allow_http: bool = False
    # The operator allows fetching from this repository (an entry of the credentials file, or a prefix given
    # with --allow-chart-repository); the client refuses any other before a request is sent.
    allowed: bool = False
    # A CA bundle given as text (a GitSync's Secret `ca.crt`), trusted like `ca_file`; never in a repr.
    ca_data: str | None = field(default=None, repr=False)
    # Where these settings come from, for errors ("" = the operator's credentials file); and whether a
    # matching entry allows the repository: the operator's file does, a tenant's Secret (spec.chartCredentials)
    # never widens the controller's --allow-chart-repository.
    origin: str = ""
    allows: bool = True

    def matches(self, repo: str) -> bool:
        return under_prefix(repo, self.url)


def under_prefix(repo: str, prefix: str) -> bool:
    """`repo` is `prefix` or below it on a path boundary (`https://h/a` covers `https://h/a/b`, not `https://h/ab`)."""
    prefix = prefix.rstrip("/")
    return repo.rstrip("/") == prefix or repo.startswith(prefix + "/")


@dataclass(frozen=True)
class PulledChart:
    """A resolved, verified and unpacked chart: where it is and what it is (for reports)."""

    directory: Path
    repo: str
    chart: str
    version: str
    digest: str  # sha256:<hex> of the chart archive (index.yaml's digest, the OCI chart layer's digest)

    def describe(self) -> str:
        return f"chart {self.chart} {self.version} from {self.repo}, {self.digest[:19]}"

    def report(self) -> dict[str, str]:
        return {"repository": self.repo, "chart": self.chart, "version": self.version, "digest": self.digest}


def load_spec(path: Path, rel: str) -> ChartSpec:
    """Read and validate a `helm-chart.yaml`; errors name the file and the field, never a value. Its directory
    is rendered by it alone: a Chart.yaml or kustomization beside it is an error."""
    clash = next((n for n in ("Chart.yaml", *KUSTOMIZATION_FILES) if (path.parent / n).exists()), None)
    if clash:
        raise RenderError(f"a directory with {CHART_SOURCE_FILE} must not also hold {clash}", file=rel)
    doc = load_config(path, rel, CHART_SOURCE_FILE) or {}
    unknown = sorted(set(doc) - {"helmChart"})
    body = doc.get("helmChart")
    if unknown or not isinstance(body, dict):
        raise RenderError(
            "expected one mapping `helmChart:` (repo, chartName, chartVersion, releaseName, namespace, "
            "valuesFiles, values)" + (f"; unknown top-level keys: {', '.join(map(str, unknown))}" if unknown else ""),
            file=rel,
        )
    extra = sorted(str(k) for k in set(body) - _SPEC_KEYS)
    if extra:
        raise RenderError(f"unknown field(s) helmChart.{', helmChart.'.join(extra)}", file=rel)
    problems = []
    for key in ("repo", "chartName", "chartVersion"):
        if not isinstance(body.get(key), str) or not body[key].strip():
            hint = ' (quote a version such as "1.0" so YAML reads it as text)' if key == "chartVersion" else ""
            problems.append(f"helmChart.{key} must be a non-empty string{hint}")
    if problems:
        raise RenderError("; ".join(problems), file=rel)
    repo, chart, version = body["repo"].strip(), body["chartName"].strip(), body["chartVersion"].strip()
    _check_repo(repo, rel)
    if not _NAME.match(chart):
        raise RenderError("helmChart.chartName must be a chart name (letters, digits, `.`, `_`, `-`)", file=rel)
    try:
        _semver.Range.parse(version)
    except _semver.RangeError as err:
        raise RenderError(f"helmChart.chartVersion: {err}", file=rel) from None
    release = body.get("releaseName", chart)
    if not isinstance(release, str) or not _RELEASE.match(release):
        raise RenderError("helmChart.releaseName must be a DNS label of at most 53 characters", file=rel)
    namespace = body.get("namespace")
    if namespace is not None and (not isinstance(namespace, str) or not _RELEASE.match(namespace)):
        raise RenderError("helmChart.namespace must be a namespace name", file=rel)
    files = body.get("valuesFiles")
    if files is None:
        files = [DEFAULT_VALUES_FILE] if (path.parent / DEFAULT_VALUES_FILE).is_file() else []
    if not isinstance(files, list) or not all(isinstance(f, str) and f for f in files):
        raise RenderError("helmChart.valuesFiles must be a list of paths", file=rel)
    values = body.get("values") or {}
    if not isinstance(values, dict):
        raise RenderError("helmChart.values must be a mapping", file=rel)
    digest = body.get("chartDigest")
    if digest is not None and (not isinstance(digest, str) or not re.fullmatch(r"sha256:[0-9a-f]{64}", digest)):
        raise RenderError("helmChart.chartDigest must be sha256:<64 hex digits> (the chart archive's digest)", file=rel)
    return ChartSpec(repo.rstrip("/"), chart, version, release, namespace, tuple(files), values, digest)


def _check_repo(repo: str, rel: str) -> None:
    """An https://, http:// or oci:// URL with a host, and no credentials, query or fragment in it."""
    parsed = urllib.parse.urlsplit(repo)
    if parsed.scheme not in ("https", "http", "oci") or not parsed.hostname:
        raise RenderError(
            "helmChart.repo must be an https:// (or http://) chart repository or an oci:// registry", file=rel
        )
    if parsed.username or parsed.password:
        raise RenderError(
            f"helmChart.repo must not carry credentials: give them in the credentials file (${CREDENTIALS_ENV})",
            file=rel,
        )
    if parsed.query or parsed.fragment:
        raise RenderError("helmChart.repo must not have a query or fragment", file=rel)


def load_access(
    path: Path | None, *, env: bool = True, extra: Sequence[RepositoryAccess] = ()
) -> list[RepositoryAccess]:
    """The operator's credentials file (YAML or JSON, `repositories:` list): `path`, else (when `env`) the one
    $GITOPS_SYNC_CHART_CREDENTIALS names, else none; then `extra` (a GitSync's Secrets, read for this pass).
    Its errors name the file and the entry, never a value."""
    if path is None and env:
        named = os.environ.get(CREDENTIALS_ENV)
        path = Path(named) if named else None
    if path is None:
        return list(extra)
    where = f"chart credentials file {path}"
    if not path.is_file():
        raise RenderError(f"{where} does not exist")
    doc = load_config(path, str(path), "the chart credentials file") or {}
    entries = doc.get("repositories")
    if not isinstance(entries, list):
        raise RenderError(f"{where}: expected `repositories:` with a list of entries")
    out = []
    for index, entry in enumerate(entries):
        at = f"{where}, repositories[{index}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("url"), str):
            raise RenderError(f"{at}: each entry needs a `url`")
        password = entry.get("password")
        if entry.get("passwordFile"):
            try:
                password = Path(str(entry["passwordFile"])).expanduser().read_text().rstrip("\r\n")
            except OSError as err:
                raise RenderError(f"{at}: cannot read passwordFile: {err.strerror}") from None
        elif entry.get("passwordEnv"):
            password = os.environ.get(str(entry["passwordEnv"]))
            if password is None:
                raise RenderError(f"{at}: environment variable {entry['passwordEnv']} is not set")
        ca = entry.get("caFile")
        if ca is not None and not Path(str(ca)).expanduser().is_file():
            raise RenderError(f"{at}: caFile {ca} does not exist")
        out.append(
            RepositoryAccess(
                url=entry["url"],
                username=str(entry["username"]) if entry.get("username") is not None else None,
                password=str(password) if password is not None else None,
                ca_file=Path(str(ca)).expanduser() if ca is not None else None,
                insecure_skip_tls_verify=entry.get("insecureSkipTLSVerify") is True,
                allow_http=entry.get("allowHTTP") is True,
            )
        )
    return [*out, *extra]


def access_for(repo: str, entries: list[RepositoryAccess], allow: tuple[str, ...] = ()) -> RepositoryAccess:
    """The most specific entry for `repo` (longest URL prefix), or no credentials and default trust; allowed
    when an entry matches or `repo` is under one of the operator's `allow` prefixes (--allow-chart-repository)."""
    found = [e for e in entries if e.matches(repo)]
    allowed = any(e.allows for e in found) or any(under_prefix(repo, p) for p in allow)
    best = max(found, key=lambda e: len(e.url)) if found else RepositoryAccess(url=repo)
    return replace(best, allowed=allowed)


# ---------------------------------------------------------------------------------------------- resolve + pull


def values_paths(spec: ChartSpec, directory: Path, file_rel: str, boundary: Path) -> list[Path]:
    """The spec's values files, beside it (`directory`): each must exist and stay inside the repository."""
    out = []
    for given in spec.values_files:
        path = directory / given
        if Path(given).is_absolute() or not path.resolve().is_relative_to(boundary):
            raise RenderError(f"values file {given} leads outside the repository", file=file_rel)
        if not path.is_file():
            raise RenderError(f"values file {given} does not exist", file=file_rel)
        out.append(path)
    return out
