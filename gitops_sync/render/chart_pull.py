"""Resolve, pull, check and cache a chart from a repository, and keep helm's output for it (charts.py has
what is pulled: ChartSpec, and with which credentials: RepositoryAccess).

Per pass: the client (_chart_client.py) resolves the version and the digest the repository announces; a cache
entry `<cache>/charts/sha256-<hex>/` (archive + unpacked chart, renamed into place whole) serves it, else
`helm pull` fetches it and _chart_archive.py checks and unpacks it. The first digest seen for a version is
recorded (`charts/versions/`), so a re-pushed version is refused; `charts/renders/` keeps helm's output by
everything that decides it. The walker (_render.py) and chart_deps.py call `pull`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from gitops_sync.log import get_logger
from gitops_sync.render import _tools
from gitops_sync.render._chart_archive import sha256_file, unpack
from gitops_sync.render._chart_client import Client
from gitops_sync.render.charts import ChartLimits, ChartSpec, PulledChart, RepositoryAccess

log = get_logger(__name__)


def pull(
    spec: ChartSpec,
    label: str,
    access: RepositoryAccess,
    cache: Path,
    helm: str,
    limits: ChartLimits | None = None,
) -> PulledChart:
    """Resolve `spec` to one version and digest, and return its unpacked chart from the cache (pulling it
    when missing). `label` (the helm-chart.yaml file) starts every error."""
    limits = limits or ChartLimits()
    client = Client(spec, access, label, limits)
    version, digest = _resolve(client, cache)
    entry = cache / "charts" / digest.replace(":", "-")
    chart_dir = _cached(entry)
    if chart_dir is None:
        chart_dir = _fetch(client, version, digest, entry, helm, limits)
        log.info("chart pulled", chart=spec.chart, version=version, digest=digest, repository=spec.repo)
    else:
        log.info("chart served from cache", chart=spec.chart, version=version, digest=digest)
    return PulledChart(chart_dir, spec.repo, spec.chart, version, digest)


def resolve(spec: ChartSpec, label: str, access: RepositoryAccess, cache: Path) -> tuple[str, str]:
    """The version and archive digest `spec` resolves to now (the index/tag request only, nothing pulled), with
    every check `pull` makes of them (pinned digest, size, re-pushed version): what keys a cached render."""
    return _resolve(Client(spec, access, label, ChartLimits()), cache)


def _resolve(client: Client, cache: Path) -> tuple[str, str]:
    spec, limits = client.spec, client.limits
    if spec.repo.startswith("oci://"):
        version, digest, size = client.resolve_oci()
    else:
        version, digest, size = client.resolve_index()
    if spec.digest is not None and digest != spec.digest:
        raise client.error(f"version {version} has digest {digest}, not the chartDigest {spec.digest} pinned in Git")
    if size is not None and size > limits.max_archive_bytes:
        raise client.error(f"the chart archive is {size} bytes, over the {limits.max_archive_bytes}-byte limit")
    _check_repushed(client, cache, version, digest)
    return version, digest


_TEMPLATE_FORMAT = 1  # bump when the `helm template` command line (_tools.helm_template) changes


def memo_template(
    cache: Path | None,
    pulled: PulledChart,
    release: str,
    namespace: str,
    values: list[Path],
    helm: str,
    run: Callable[[], str],
) -> str:
    """`run()` (helm template of a pulled chart), kept under <cache>/charts/renders/ by everything that decides
    its output: the archive's digest, release, namespace, the bytes of every values file and the helm binary
    (path, size, mtime). A re-sync of an unchanged chart source then costs the index/tag check only.
    No cache (a direct render() without one): run every time."""
    found = shutil.which(helm)
    if cache is None or found is None:
        return run()
    binary = os.path.realpath(found)
    stat = os.stat(binary)
    h = hashlib.sha256(
        json.dumps(
            [_TEMPLATE_FORMAT, pulled.digest, release, namespace, binary, stat.st_size, stat.st_mtime_ns]
        ).encode()
    )
    for path in values:
        h.update(hashlib.sha256(path.read_bytes()).digest())
    memo = cache / "charts" / "renders" / f"{h.hexdigest()[:40]}.yaml"
    with contextlib.suppress(OSError):
        return memo.read_text()
    output = run()
    with contextlib.suppress(OSError):
        memo.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=memo.parent, prefix=".render-")
        with os.fdopen(fd, "w") as f:
            f.write(output)
        os.replace(tmp, memo)
    return output


def _check_repushed(client: Client, cache: Path, version: str, digest: str) -> None:
    """The first digest seen for (repository, chart, version) is recorded in the cache; a different one later
    (a re-pushed version or tag) is an error, never used silently. Deleting the record accepts the new one."""
    spec = client.spec
    key = hashlib.sha256(f"{spec.repo}\0{spec.chart}\0{version}".encode()).hexdigest()[:40]
    record = cache / "charts" / "versions" / f"{key}.json"
    with contextlib.suppress(OSError, ValueError):
        seen = json.loads(record.read_text()).get("digest")
        if seen and seen != digest:
            raise client.error(
                f"version {version} now has digest {digest}, not the {seen} it had when first pulled here "
                f"(re-pushed): refusing it; to accept the new content delete {record}"
            )
        if seen == digest:
            return
    record.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=record.parent, prefix=".version-")
    with os.fdopen(fd, "w") as f:
        json.dump({"repository": spec.repo, "chart": spec.chart, "version": version, "digest": digest}, f)
    os.replace(tmp, record)


def _cached(entry: Path) -> Path | None:
    """The unpacked chart of a complete cache entry (written once, renamed into place whole)."""
    marker = entry / "chart-dir"
    with contextlib.suppress(OSError):
        name = marker.read_text().strip()
        if name and (entry / "unpacked" / name / "Chart.yaml").is_file():
            return entry / "unpacked" / name
    return None


def _fetch(client: Client, version: str, digest: str, entry: Path, helm: str, limits: ChartLimits) -> Path:
    entry.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".pull-", dir=entry.parent))
    try:
        os.chmod(work, 0o700)  # holds the helm config files with credentials while helm runs
        archive = client.helm_pull(version, work, helm, limits)
        actual = "sha256:" + sha256_file(archive)
        if actual != digest:
            raise client.error(
                f"the pulled archive of {version} has digest {actual[:19]}…, not the {digest[:19]}… the "
                "repository announced: refusing it"
            )
        staged = work / "entry"
        unpacked = staged / "unpacked"
        unpacked.mkdir(parents=True)
        name = unpack(archive, unpacked, limits, client.error)
        shutil.move(str(archive), staged / "chart.tgz")
        (staged / "chart-dir").write_text(name + "\n")
        try:
            os.rename(staged, entry)
        except OSError:
            if _cached(entry) is None:  # not a concurrent pull of the same digest: a real failure
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    found = _cached(entry)
    if found is None:
        raise client.error("the chart cache entry is incomplete after the pull")
    return found


def render_source(
    spec: ChartSpec,
    file_rel: str,
    where: str,
    values: tuple[list[Path], list[Path]],
    access: RepositoryAccess,
    cache: Path | None,
    helm: str,
    namespace: str,
    limits: _tools.Limits,
    check: Callable[[Path, str], None],
    *,
    keep: bool = True,
) -> tuple[str, PulledChart, str]:
    """helm's output for a helm-chart.yaml (`file_rel`, in directory `where`), the chart pulled for it and the
    label its objects carry (`where (chart NAME VERSION from REPO, sha256:…)`). `check` bounds the chart's own
    YAML (the walker's, as for charts in Git). `values`: the spec's files, then its inline values, then the
    user's --helm-values files (last, as for every chart). No cache: a scratch directory, nothing
    reused. `keep` False (values decrypted from SOPS files): helm's output is never kept on disk."""
    with tempfile.TemporaryDirectory(prefix="gitops-sync-chart-") as scratch:
        pulled = pull(spec, file_rel, access, cache or Path(scratch), helm)
        check(pulled.directory, f"{file_rel} ({pulled.chart} {pulled.version})")
        files, users = values
        if spec.values:
            inline = Path(scratch) / "inline-values.json"
            inline.write_text(json.dumps(spec.values))  # JSON is YAML; after the files, as Flux's `values`
            files = [*files, inline]
        files = [*files, *users]
        label = f"{where} ({pulled.describe()})"
        output = memo_template(
            cache if keep else None,
            pulled,
            spec.release,
            namespace,
            files,
            helm,
            lambda: _tools.helm_template(helm, pulled.directory, spec.release, namespace, files, label, limits),
        )
    return output, pulled, label
