"""RenderOptions.holes: a submodule whose files are not there is an error wherever the render would read it
(walked into, reached by a symlink, named by a kustomization, inside a kustomize or helm tree), never an
empty directory; a hole the render does not reach changes nothing. No tool runs: the check comes first."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitops_sync.errors import RenderError
from gitops_sync.render import RenderOptions, render
from gitops_sync.render.snapshot import read
from tests.unit.render.test_render import CM, write

HOLE = r"Git submodule vendor/lib: its files are not in this checkout"


def repository(tmp_path: Path, files: dict[str, str]) -> Path:
    top = write(tmp_path / "repo", files)
    (top / "vendor" / "lib").mkdir(parents=True)  # what checkout-index leaves for a gitlink
    return top


def opts(top: Path) -> RenderOptions:
    return RenderOptions(repo_root=top, holes=("vendor/lib",), kubectl="/nonexistent/kubectl", helm="/nonexistent")


def test_walking_into_a_hole_fails_naming_it(tmp_path: Path) -> None:
    top = repository(tmp_path, {"a.yaml": CM.format(name="a")})
    with pytest.raises(RenderError, match=f"^{HOLE}"):
        render(top, opts(top))
    with pytest.raises(RenderError, match=f"^{HOLE}"):
        render(top / "vendor", opts(top))
    assert [o.origin for o in render(top, RenderOptions(repo_root=top))] == ["a.yaml#1"]  # no holes: as before


def test_a_hole_from_a_snapshot_fails_too(tmp_path: Path) -> None:
    top = repository(tmp_path, {"a.yaml": CM.format(name="a")})
    taken = read(top, max_bytes=1 << 20, max_files=100)
    assert taken is not None and taken.plain
    with pytest.raises(RenderError, match=f"^{HOLE}"):
        render(top, opts(top), snapshot=taken)


def test_a_hole_out_of_the_rendered_path_is_fine_until_something_reaches_it(tmp_path: Path) -> None:
    top = repository(tmp_path, {"apps/a.yaml": CM.format(name="a")})
    assert [o.origin for o in render(top / "apps", opts(top))] == ["a.yaml#1"]
    (top / "apps" / "lib").symlink_to("../vendor/lib")
    with pytest.raises(RenderError, match=f"^lib: {HOLE}"):
        render(top / "apps", opts(top))
    (top / "apps" / "lib").unlink()
    (top / "apps" / "cm.yaml").symlink_to("../vendor/lib/cm.yaml")  # into it: broken, but the hole is named
    with pytest.raises(RenderError, match=f"^cm.yaml: {HOLE}"):
        render(top / "apps", opts(top))


def test_a_kustomization_naming_a_hole_fails_before_kustomize_runs(tmp_path: Path) -> None:
    top = repository(tmp_path, {"apps/kustomization.yaml": "resources:\n- ../vendor/lib\n"})
    with pytest.raises(RenderError, match=f"^apps/kustomization.yaml: {HOLE}"):
        render(top / "apps", opts(top))


@pytest.mark.parametrize("tool", ["kustomization.yaml", "Chart.yaml"])
def test_a_hole_inside_a_tool_tree_fails_before_the_tool_runs(tmp_path: Path, tool: str) -> None:
    top = repository(tmp_path, {tool: "resources: []\n" if tool != "Chart.yaml" else "name: c\nversion: 1.0.0\n"})
    with pytest.raises(RenderError, match=f"^vendor/lib: {HOLE}"):
        render(top, opts(top))
