"""Every memoised function of the package holds a bounded number of entries: the daemon runs all of it.

A `functools.cache` (or `lru_cache(maxsize=None)`) on a function that takes an argument keeps one entry
per distinct argument for the life of the process; in a server the argument may come from a request, as
`/static/<name>` did. Zero-argument functions (one entry) and `cached_property` (one per instance) are fine.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gitops_sync import web

ROOT = Path(__file__).resolve().parents[2] / "gitops_sync"


def _unbounded(decorator: ast.expr) -> bool:
    """`@cache`, `@functools.cache`, `@lru_cache(maxsize=None)`, `@lru_cache(None)`."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
    if name == "cache":
        return True
    if name != "lru_cache" or not isinstance(decorator, ast.Call):
        return False  # bare @lru_cache: maxsize 128
    size = decorator.args[0] if decorator.args else next((k.value for k in decorator.keywords), None)
    return isinstance(size, ast.Constant) and size.value is None


def _takes_arguments(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    a = fn.args
    return bool(a.posonlyargs or a.args or a.kwonlyargs or a.vararg or a.kwarg)


def unbounded_caches(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                and _takes_arguments(node)
                and any(_unbounded(d) for d in node.decorator_list)
            ):
                found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name}")
    return found


def test_no_unbounded_cache_of_an_argument() -> None:
    assert unbounded_caches(ROOT) == []


@pytest.mark.parametrize(
    ("source", "flagged"),
    [
        ("@cache\ndef f(name): ...", True),
        ("@functools.cache\ndef f(name): ...", True),
        ("@lru_cache(maxsize=None)\ndef f(name): ...", True),
        ("@lru_cache(None)\ndef f(name): ...", True),
        ("@cache\ndef f(): ...", False),
        ("@lru_cache(maxsize=3)\ndef f(name): ...", False),
        ("@lru_cache\ndef f(name): ...", False),
    ],
)
def test_the_scan_tells_unbounded_from_bounded(tmp_path: Path, source: str, flagged: bool) -> None:
    (tmp_path / "daemon").mkdir()
    (tmp_path / "daemon" / "m.py").write_text(source + "\n")
    assert bool(unbounded_caches(tmp_path)) is flagged


def test_unknown_static_names_are_404_and_not_remembered() -> None:
    web._static_file.cache_clear()
    for i in range(200):
        assert web.page(f"/static/{i}-" + "x" * 1000, "", lambda **_: {}).status == 404
    assert web._static_file.cache_info().currsize == 0
    for name in ("app.css", "app.js", "favicon.svg", "app.css"):
        assert web.page(f"/static/{name}", "", lambda **_: {}).status == 200
    info = web._static_file.cache_info()
    assert (info.currsize, info.maxsize) == (3, 3)
