"""Size limits that keep the package readable: no module over 500 lines, no function over 60.

Today's offenders are listed with their size (a ratchet): a listed one may not grow, and once it is within
the limit it must leave the list, so the list only shrinks. Read with `ast`: a function's size runs from
its `def` line to its last line (a nested function counts in its parent's size and on its own too).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "gitops_sync"

MODULE_LIMIT = 500
FUNCTION_LIMIT = 60

# Modules over the limit today (path under gitops_sync/: lines). Only ever lower a number or drop a row.
MODULES_OVER: dict[str, int] = {}

# Functions over the limit today (path:qualified name: lines).
FUNCTIONS_OVER: dict[str, int] = {}


def module_sizes(package: Path) -> dict[str, int]:
    """Lines of every module of `package`, by path under it."""
    return {p.relative_to(package).as_posix(): len(p.read_text().splitlines()) for p in package.rglob("*.py")}


def function_sizes(package: Path) -> dict[str, int]:
    """Lines of every function and method of `package`, as `path:Class.method` (`path:outer.inner` nested)."""
    sizes: dict[str, int] = {}

    def visit(node: ast.AST, where: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{where}:{prefix}{child.name}"
                end = child.end_lineno or child.lineno
                sizes[name] = max(sizes.get(name, 0), end - child.lineno + 1)
                visit(child, where, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, where, f"{prefix}{child.name}.")
            else:
                visit(child, where, prefix)

    for path in package.rglob("*.py"):
        visit(ast.parse(path.read_text(), str(path)), path.relative_to(package).as_posix(), "")
    return sizes


def ratchet(sizes: Mapping[str, int], limit: int, allowed: Mapping[str, int]) -> list[str]:
    """What breaks the limit or the list: a new offender, a listed one grown, a listed one no longer over."""
    problems = []
    for name, size in sorted(sizes.items()):
        if size > limit and name not in allowed:
            problems.append(f"{name}: {size} lines, over the limit of {limit}: split it by concern")
        elif name in allowed and size > allowed[name]:
            problems.append(f"{name}: grew from {allowed[name]} to {size} lines (limit {limit}): shrink it")
    for name, listed in sorted(allowed.items()):
        size = sizes.get(name)
        if size is None or size <= limit:
            now = "gone" if size is None else f"{size} lines"
            problems.append(f"{name}: within the limit of {limit} now ({now}, listed {listed}): drop it from the list")
    return problems


def test_no_module_over_500_lines() -> None:
    assert ratchet(module_sizes(PACKAGE), MODULE_LIMIT, MODULES_OVER) == []


def test_no_function_over_60_lines() -> None:
    assert ratchet(function_sizes(PACKAGE), FUNCTION_LIMIT, FUNCTIONS_OVER) == []


def _fake_package(tmp_path: Path) -> Path:
    """A package with a 7-line module and a 4-line function inside a 5-line method's class."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "sub" / "mod.py").write_text(
        "class C:\n    def method(self) -> None:\n        def inner() -> None:\n            pass\n\n"
        "        inner()\n        return None\n"
    )
    return package


def test_sizes_are_read_per_module_and_per_function(tmp_path: Path) -> None:
    package = _fake_package(tmp_path)
    assert module_sizes(package) == {"sub/mod.py": 7}
    assert function_sizes(package) == {"sub/mod.py:C.method": 6, "sub/mod.py:C.method.inner": 2}


@pytest.mark.parametrize(
    ("allowed", "expected"),
    [
        ({}, "sub/mod.py: 7 lines, over the limit of 5: split it by concern"),
        ({"sub/mod.py": 6}, "sub/mod.py: grew from 6 to 7 lines (limit 5): shrink it"),
        ({"sub/mod.py": 7, "sub/gone.py": 9}, "sub/gone.py: within the limit of 5 now (gone, listed 9)"),
    ],
    ids=["new offender", "listed one grew", "listed one is gone"],
)
def test_the_ratchet_fails_on_a_new_offender_a_grown_one_and_a_stale_row(
    tmp_path: Path, allowed: dict[str, int], expected: str
) -> None:
    problems = ratchet(module_sizes(_fake_package(tmp_path)), 5, allowed)
    assert len(problems) == 1 and problems[0].startswith(expected), problems


def test_a_listed_one_within_the_limit_must_leave_the_list(tmp_path: Path) -> None:
    sizes = function_sizes(_fake_package(tmp_path))
    assert ratchet(sizes, 6, {"sub/mod.py:C.method": 8}) == [
        "sub/mod.py:C.method: within the limit of 6 now (6 lines, listed 8): drop it from the list"
    ]
    assert ratchet(sizes, 5, {"sub/mod.py:C.method": 6}) == [], "listed at its size: passes"
