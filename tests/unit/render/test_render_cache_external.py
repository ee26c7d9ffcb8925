"""A render that may read outside the commit (`--kustomize-allow-external`) is never served from the cache.

Remote bases and paths outside the repository change without a new commit: a cached render of the same
tree could lack an object applied since from a fresh render, and a prune would then delete it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gitops_sync import engine, rendercache
from gitops_sync.engine import load
from gitops_sync.render import RenderOptions
from tests.unit.render.test_render_cache import CM, Counting, make_repo, source


def test_an_external_kustomization_is_rendered_every_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path, {"kustomization.yaml": "resources: [cm.yaml]\n", "cm.yaml": CM.format(name="a")})
    counting = Counting(monkeypatch, fake=True)
    monkeypatch.setattr(rendercache, "_version", lambda argv: "v1")
    src = source(repo, tmp_path, render=RenderOptions(kustomize_allow_external=True))
    load(src, engine.disk_render_cache(src))
    load(src, engine.disk_render_cache(src))
    assert counting.calls == 2


def test_a_plain_directory_with_the_flag_is_still_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path, {"cm.yaml": CM.format(name="a")})
    counting = Counting(monkeypatch)
    src = source(repo, tmp_path, render=RenderOptions(kustomize_allow_external=True))
    load(src, engine.disk_render_cache(src))
    load(src, engine.disk_render_cache(src))
    assert counting.calls == 1
