"""A file rewritten while a directory is rendered never leaves a short render under the complete tree's key.

The interleaving is made certain: `loading.render` is wrapped so that, once the cache has read and keyed the
tree, the wrapper rewrites a file in place (truncate, and the same bytes written back only after the render
returns) or regenerates a directory (removed, and written back afterwards) — what an editor or a generator
does. The tree is byte-identical before and after, so a later load is served the stored entry: it must
hold every object. Before render/snapshot.py the render read the disk again and the entry lacked them.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from gitops_sync import engine
from gitops_sync.engine import SourceOptions, load, loading
from gitops_sync.render import RenderOptions
from gitops_sync.resource import DesiredObject
from tests.unit.render.test_render_cache import make_repo

N = 300


def configmap(n: int) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{n:03d}"}}) + "\n"


@contextmanager
def truncated(path: Path) -> Iterator[None]:
    """The file emptied in place (same inode, as `open(path, "w")` does), then the same bytes back."""
    data = path.read_bytes()
    with path.open("r+b") as handle:
        handle.truncate(0)
    try:
        yield
    finally:
        with path.open("r+b") as handle:
            handle.write(data)


@contextmanager
def regenerated(directory: Path) -> Iterator[None]:
    """The directory removed (a generator's `rm -rf out/`), then written again with the same files."""
    saved = {p.relative_to(directory): p.read_bytes() for p in directory.rglob("*") if p.is_file()}
    shutil.rmtree(directory)
    try:
        yield
    finally:
        for rel, data in saved.items():
            (directory / rel).parent.mkdir(parents=True, exist_ok=True)
            (directory / rel).write_bytes(data)


def interleave(monkeypatch: pytest.MonkeyPatch, during: Callable[[], Any]) -> list[int]:
    """loading.render wrapped: the first call renders while `during()` (a context manager) holds."""
    real = loading.render
    calls: list[int] = []

    def wrapped(root: Path, opts: RenderOptions, **kw: Any) -> list[DesiredObject]:
        calls.append(1)
        if len(calls) > 1:
            return real(root, opts, **kw)
        with during():
            return real(root, opts, **kw)

    monkeypatch.setattr(loading, "render", wrapped)
    return calls


def names(objects: list[DesiredObject]) -> set[str]:
    return {o.manifest["metadata"]["name"] for o in objects}


def work_tree(tmp_path: Path, files: dict[str, str]) -> SourceOptions:
    repo = make_repo(tmp_path, files)
    return SourceOptions(repo=str(repo), cache_dir=tmp_path / "cache")  # the work tree as it is


@pytest.mark.parametrize("fault", ["truncated in place", "directory regenerated"])
def test_a_file_rewritten_mid_render_is_not_missing_from_the_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    files = {f"cm/cm-{n:03d}.json": configmap(n) for n in range(N)} | {"gen/g.json": configmap(999)}
    src = work_tree(tmp_path, files)
    repo = Path(src.repo)
    if fault == "truncated in place":
        calls = interleave(monkeypatch, lambda: truncated(repo / "cm" / "cm-150.json"))
        victim = "cm-150"
    else:
        calls = interleave(monkeypatch, lambda: regenerated(repo / "gen"))
        victim = "cm-999"
    _, first = load(src, engine.disk_render_cache(src))
    assert all((repo / name).read_text() == text for name, text in files.items())  # byte-identical again
    _, second = load(src, engine.disk_render_cache(src))  # the same tree: served from the entry
    assert len(calls) == 1, "the second load must be a cache hit for this test to mean anything"
    assert victim in names(second) and len(second) == N + 1
    assert victim in names(first)  # the keyed bytes were rendered, not the disk mid-write


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl (kustomize) on PATH")
def test_a_kustomization_resource_rewritten_mid_render_is_not_missing_from_the_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kustomize reads the directory itself: it renders a private copy of the snapshot (an empty resource
    file is silently nothing to kustomize, so the live tree would have given a short render)."""
    files = {f"cm-{n:03d}.json": configmap(n) for n in range(20)}
    files["kustomization.yaml"] = "resources:\n" + "".join(f"- {name}\n" for name in sorted(files))
    src = work_tree(tmp_path, files)
    calls = interleave(monkeypatch, lambda: truncated(Path(src.repo) / "cm-007.json"))
    _, first = load(src, engine.disk_render_cache(src))
    _, second = load(src, engine.disk_render_cache(src))
    assert len(calls) == 1
    assert "cm-007" in names(first) and "cm-007" in names(second) and len(second) == 20


@pytest.mark.parametrize("link", ["relative", "absolute"])
def test_a_symlink_target_rewritten_mid_render_is_not_missing_from_the_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, link: str
) -> None:
    """--path apps with a symlink into ../base: the whole top is read once and rendered from a private copy
    (an absolute link into the repository leads into the copy, never back to the file being rewritten)."""
    src = work_tree(tmp_path, {"base/cm.json": configmap(1), "apps/own.json": configmap(2)})
    top = Path(src.repo)
    (top / "apps" / "link.json").symlink_to("../base/cm.json" if link == "relative" else top / "base" / "cm.json")
    src = SourceOptions(repo=str(top), path="apps", cache_dir=tmp_path / "cache")
    calls = interleave(monkeypatch, lambda: truncated(top / "base" / "cm.json"))
    _, first = load(src, engine.disk_render_cache(src))
    _, second = load(src, engine.disk_render_cache(src))
    assert len(calls) == 1
    assert names(first) == names(second) == {"cm-001", "cm-002"}
