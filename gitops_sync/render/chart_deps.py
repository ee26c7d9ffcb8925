"""`Chart.yaml` dependencies of a chart in Git, put in place before `helm template` (issue 24).

Instead of `helm dependency build` in the checkout (which writes into files that must never change, and would
fetch with helm's own repository config and no bounds), each dependency missing from `charts/` is fetched like a
chart from a repository (charts.py: resolved, verified, bounded, cached by digest, credentials from the
operator's file) and copied, unpacked, into `charts/<name>/` of a private copy of the chart; `file://`
dependencies are copied from the repository (they must stay inside it). `Chart.lock` (or `requirements.lock`)
is honoured as `helm dependency build` honours it: its versions are the ones fetched, and a lock that no longer
matches the dependencies is an error. helm then renders the copy with conditions, tags, aliases and
import-values as usual. The walker (_render.py) marks the objects with what was pulled, for reports.
"""

from __future__ import annotations

import glob
import shutil
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gitops_sync.errors import RenderError
from gitops_sync.render import _semver, chart_pull, charts
from gitops_sync.render._chart_archive import check_subchart_archives
from gitops_sync.render._yaml import load_config

_LOCKS = ("Chart.lock", "requirements.lock")


@dataclass(frozen=True)
class Dependency:
    name: str
    version: str
    repository: str


@dataclass(frozen=True)
class Vendored:
    """The private copy to render, and the charts pulled into it (for reports)."""

    directory: Path
    pulled: list[dict[str, str]]


def vendor(
    chart: Path,
    rel: str,
    boundary: Path,
    scratch: Path,
    access: Callable[[], list[charts.RepositoryAccess]],
    cache: Path,
    helm: str,
    allow: tuple[str, ...] = (),
) -> Vendored | None:
    """The chart with every dependency in `charts/`, or None when nothing is missing (rendered as it is).
    `rel` names the chart directory in messages; `boundary` is the repository's top (file:// stays inside);
    `access` reads the operator's credentials, only when something is fetched (a chart without dependencies
    never depends on that file); `allow`: the operator's --allow-chart-repository prefixes."""
    check_subchart_archives(chart, charts.ChartLimits(), _error(rel, "charts/"))
    deps = _declared(chart, rel)
    missing = [d for d in deps if not _present(chart, d)]
    if not missing:
        return None
    locked = _locked(chart, rel, deps)
    copy = scratch / chart.resolve().name
    shutil.copytree(chart, copy, symlinks=False, ignore=shutil.ignore_patterns(".git"))
    (copy / "charts").mkdir(exist_ok=True)
    pulled = []
    entries = access() if any(d.repository.startswith(("https://", "http://", "oci://")) for d in missing) else []
    for dep in missing:
        where = f"{rel}/Chart.yaml" if rel else "Chart.yaml"
        label = f"{where}, dependency {dep.name} of chart {chart.name}"
        target = copy / "charts" / dep.name
        if dep.repository.startswith("file://"):
            source = _file_dependency(chart, dep, boundary, label)
            shutil.copytree(source, target, symlinks=False, ignore=shutil.ignore_patterns(".git"))
            continue
        if not dep.repository.startswith(("https://", "http://", "oci://")):
            raise RenderError(
                f"repository {dep.repository or '(none)'!r} cannot be fetched: give the dependency's repository "
                "as an https:// or oci:// URL (helm's repository names like @stable need its own config), or "
                "vendor it in charts/",
                file=label,
            )
        version = locked.get(dep.name, dep.version)
        spec = charts.ChartSpec(dep.repository.rstrip("/"), dep.name, version, dep.name, None, (), {})
        got = chart_pull.pull(spec, label, charts.access_for(spec.repo, entries, allow), cache, helm)
        shutil.copytree(got.directory, target, symlinks=False)
        pulled.append(got.report())
    return Vendored(copy, pulled)


def _error(rel: str, what: str) -> Any:
    def error(problem: str) -> RenderError:
        return RenderError(problem, file=f"{rel}/{what}" if rel else what)

    return error


def _declared(chart: Path, rel: str) -> list[Dependency]:
    """Chart.yaml's `dependencies` (apiVersion v2), else requirements.yaml's (v1)."""
    name = f"{rel}/Chart.yaml" if rel else "Chart.yaml"
    meta = load_config(chart / "Chart.yaml", name, "Chart.yaml") or {}
    entries = meta.get("dependencies")
    if entries is None and (chart / "requirements.yaml").is_file():
        name = f"{rel}/requirements.yaml" if rel else "requirements.yaml"
        entries = (load_config(chart / "requirements.yaml", name, "requirements.yaml") or {}).get("dependencies")
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise RenderError("dependencies must be a list", file=name)
    out = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise RenderError(f"dependencies[{index}] needs a name", file=name)
        version = entry.get("version")
        out.append(
            Dependency(entry["name"], str(version) if version is not None else "*", str(entry.get("repository") or ""))
        )
    return out


def _present(chart: Path, dep: Dependency) -> bool:
    """Vendored already: `charts/<name>/Chart.yaml` or `charts/<name>-<version>.tgz` (what helm looks for)."""
    charts_dir = chart / "charts"
    return (charts_dir / dep.name / "Chart.yaml").is_file() or any(charts_dir.glob(f"{glob.escape(dep.name)}-*.tgz"))


def _locked(chart: Path, rel: str, deps: list[Dependency]) -> dict[str, str]:
    """The lock's version of each dependency; an error when the lock no longer matches Chart.yaml (names,
    repositories, or a locked version outside the declared range), as `helm dependency build` refuses it."""
    lock = next((chart / n for n in _LOCKS if (chart / n).is_file()), None)
    if lock is None:
        return {}
    name = f"{rel}/{lock.name}" if rel else lock.name
    doc = load_config(lock, name, lock.name) or {}
    entries = doc.get("dependencies") or []
    if not isinstance(entries, list):
        raise RenderError("dependencies must be a list", file=name)
    locked = {
        str(e.get("name")): (str(e.get("version")), str(e.get("repository") or ""))
        for e in entries
        if isinstance(e, dict)
    }
    for dep in deps:
        got = locked.get(dep.name)
        stale = got is None or got[1].rstrip("/") != dep.repository.rstrip("/")
        if not stale and got is not None:
            version = _semver.Version.parse(got[0])
            stale = version is None or not _allows(dep.version, version)
        if stale:
            raise RenderError(
                f"the lock is out of sync with the dependencies (dependency {dep.name}): run "
                "`helm dependency update` and commit the new lock",
                file=name,
            )
    return {n: v for n, (v, _) in locked.items()}


def _allows(text: str, version: _semver.Version) -> bool:
    try:
        rng = _semver.Range.parse(text)
    except _semver.RangeError:
        return False
    return rng.allows(version)


def _file_dependency(chart: Path, dep: Dependency, boundary: Path, label: str) -> Path:
    """A `file://` dependency: a chart directory inside the repository whose version the range allows."""
    path = urllib.parse.unquote(dep.repository[len("file://") :])
    source = (chart / path).resolve() if not Path(path).is_absolute() else Path(path).resolve()
    if not source.is_relative_to(boundary):
        raise RenderError(f"repository {dep.repository} leads outside the repository", file=label)
    if not (source / "Chart.yaml").is_file():
        raise RenderError(f"repository {dep.repository} holds no Chart.yaml", file=label)
    meta = load_config(source / "Chart.yaml", f"{dep.repository}/Chart.yaml", "Chart.yaml") or {}
    version = _semver.Version.parse(str(meta.get("version", "")))
    if version is None or not _allows(dep.version, version):
        raise RenderError(
            f"repository {dep.repository} holds version {meta.get('version')!r}, not one {dep.version!r} allows",
            file=label,
        )
    return source
