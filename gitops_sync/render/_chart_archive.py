"""Checks of a chart archive before helm reads it, and its unpacking (charts.py's bounds, ChartLimits).

chart_pull.py unpacks each pulled archive here into the chart cache; chart_deps.py checks the sub-chart
archives a chart in Git vendors in `charts/`. Messages name the offending entry (quoted, cut at 120
characters), never the content.
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from gitops_sync.errors import RenderError
from gitops_sync.render.charts import ChartLimits


def unpack(archive: Path, dest: Path, limits: ChartLimits, error: Any = RenderError, _depth: int = 0) -> str:
    """Unpack a chart archive into `dest` after checking it: size, members, unpacked bytes, one top-level
    directory, only regular files and directories (no links, devices), no absolute or `..` path. Returns the
    top-level directory's name. Members are written with O_EXCL|O_NOFOLLOW, so nothing lands outside."""
    top = unpack_tree(archive, dest, limits, error, single_top=True)
    if top is None or not (dest / top / "Chart.yaml").is_file():
        raise error("the chart archive has no <chart>/Chart.yaml")
    check_subchart_archives(dest / top, limits, error, _depth)
    return top


def unpack_tree(
    archive: Path,
    dest: Path,
    limits: ChartLimits,
    error: Any = RenderError,
    *,
    single_top: bool = False,
    what: str = "the chart archive",
) -> str | None:
    """Check and unpack a .tar.gz into `dest` (the checks of `unpack`; one top-level directory only with
    `single_top`): a chart, or an OCI artifact's manifests (render/artifact.py). Returns the first top-level
    name. `what` names the archive in messages."""
    size = archive.stat().st_size
    if size > limits.max_archive_bytes:
        raise error(f"{what} is {size} bytes, over the {limits.max_archive_bytes}-byte limit")
    top: str | None = None
    count = 0
    total = 0
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            for member in tar:
                count += 1
                if count > limits.max_files:
                    raise error(f"{what} has more than {limits.max_files} entries")
                name = member.name
                parts = [p for p in name.split("/") if p not in ("", ".")]
                if not parts and member.isdir() and not single_top and name in (".", "./"):
                    continue  # the artifact's own top directory (`tar -C dir .`)
                if name.startswith("/") or "\\" in name or "\0" in name or not parts:
                    raise error(f"{what} holds an absolute or malformed path ({_shown(name)})")
                if ".." in parts:
                    raise error(f"{what} holds a path leaving its directory ({_shown(name)})")
                if not (member.isfile() or member.isdir()):
                    kind = "a link" if member.issym() or member.islnk() else "a special file"
                    raise error(f"{what} holds {kind} ({_shown(name)}): refused")
                if top is None:
                    top = parts[0]
                elif parts[0] != top and single_top:
                    raise error(f"{what} has more than one top-level directory")
                total += member.size
                if total > limits.max_unpacked_bytes:
                    raise error(f"{what} unpacks to more than {limits.max_unpacked_bytes} bytes")
                target = dest.joinpath(*parts)
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                _write(tar, member, target, lambda: error(f"{what}'s entry is longer than its header says"))
    except (tarfile.TarError, EOFError, OSError, ValueError) as err:
        if isinstance(err, FileExistsError):
            raise error(f"{what} holds one path twice") from None
        raise error(f"{what} cannot be read ({type(err).__name__})") from None
    return top


def _write(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path, too_long: Any) -> None:
    """One regular file, created (O_EXCL|O_NOFOLLOW: never through a link, never twice), no longer than its
    header says (`too_long()` is the error raised)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    source = tar.extractfile(member)
    assert source is not None  # a regular file
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as out:
        written = 0
        while chunk := source.read(1 << 16):
            written += len(chunk)
            if written > member.size:
                raise too_long()
            out.write(chunk)


def check_subchart_archives(chart: Path, limits: ChartLimits, error: Any = RenderError, _depth: int = 0) -> None:
    """helm also loads the archives in `charts/` (sub-charts, vendored or from `helm dependency build`): each
    gets the same checks, unpacked into a scratch directory that is then removed, down to 10 levels."""
    archives = sorted((chart / "charts").glob("*.tgz")) if (chart / "charts").is_dir() else []
    if archives and _depth >= 10:
        raise error("sub-chart archives are nested more than 10 levels deep")
    for nested in archives:
        inner = f"charts/{nested.name}"

        def nested_error(problem: str, inner: str = inner) -> Exception:
            return error(f"sub-chart archive {inner}: {problem}")  # type: ignore[no-any-return]

        with tempfile.TemporaryDirectory(prefix="gitops-sync-subchart-") as scratch:
            unpack(nested, Path(scratch), limits, nested_error, _depth + 1)


def _shown(name: str) -> str:
    return json.dumps(name[:120])


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()
