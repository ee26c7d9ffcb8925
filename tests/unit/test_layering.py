"""Low layers never import high ones: the loop's steps stay separable and testable alone.

Read from the source with `ast` (every import, also one inside a function), so a violation fails here
before it becomes an import cycle at run time.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "gitops_sync"

# Lowest first. A module may import its own layer's package and anything of a lower layer, never higher.
# Layers of equal rank are siblings and do not import each other either.
LAYERS: dict[str, int] = {
    "gitops_sync": 0,  # the package root: __version__ only
    "gitops_sync.conventions": 0,
    "gitops_sync.errors": 1,
    "gitops_sync.resource": 1,
    "gitops_sync.log": 1,
    "gitops_sync.gnupg": 1,  # a private HOME/GNUPGHOME for sops (render) and git verify-commit (source)
    "gitops_sync.source": 2,
    "gitops_sync.render": 2,
    "gitops_sync.cluster": 2,
    "gitops_sync.health": 2,
    "gitops_sync.plan": 3,
    "gitops_sync.apply": 4,
    "gitops_sync.report": 4,
    "gitops_sync.rendercache": 4,  # fetch + render results, keyed by Git trees; the engine uses it
    "gitops_sync.web": 4,  # the web page's views and templates; the daemon serves them, cli writes -o html
    "gitops_sync.engine": 5,
    "gitops_sync.options": 6,
    "gitops_sync.daemon": 7,  # the package's docstring only
    "gitops_sync.daemon.runtime": 8,  # queue, watch cache, Events, metrics, token review: nothing of Git
    "gitops_sync.daemon.reconcile": 9,  # one source's reconciler and what it tells people
    "gitops_sync.daemon.serving": 10,  # HTTP: probes, metrics, /status, the page, the webhook
    "gitops_sync.daemon.process": 11,  # options, fenced client, the process both controllers run in
    "gitops_sync.daemon.single": 12,  # run --repo
    "gitops_sync.daemon.fleet": 12,  # GitSync objects; never imports single/ (siblings)
    "gitops_sync.daemon.fleetctl": 13,  # get / reconcile / suspend / resume
    "gitops_sync.daemon.command": 13,  # run
    "gitops_sync.cli": 14,
    "gitops_sync.__main__": 15,
}


def layer_of(module: str) -> str:
    """The longest LAYERS key that is `module` or a parent package of it."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        if name in LAYERS:
            return name
    raise AssertionError(f"{module} belongs to no layer: add it to LAYERS in {__file__}")


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports_of(path: Path) -> set[str]:
    """Every gitops_sync module `path` imports, absolute or relative, at any depth of the file."""
    tree = ast.parse(path.read_text(), str(path))
    this = module_name(path)
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                mod = f"{base}.{node.module}" if node.module else base
            else:
                mod = node.module or ""
            for alias in node.names:
                # `from gitops_sync.apply import inventory` imports the module gitops_sync.apply.inventory.
                sub = f"{mod}.{alias.name}"
                found.add(sub if is_module(sub) else mod)
    return {m for m in found if m == "gitops_sync" or m.startswith("gitops_sync.")}


def violations() -> list[str]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        this = layer_of(module_name(path))
        for imported in sorted(imports_of(path)):
            other = layer_of(imported)
            if other != this and LAYERS[other] >= LAYERS[this]:
                out.append(
                    f"{module_name(path)} ({this}, layer {LAYERS[this]}) imports {imported} (layer {LAYERS[other]})"
                )
    return out


def test_low_layers_never_import_high_ones() -> None:
    assert violations() == []


def test_every_module_has_a_layer() -> None:
    for path in PACKAGE.rglob("*.py"):
        layer_of(module_name(path))


def test_conventions_imports_nothing_of_the_package() -> None:
    assert imports_of(PACKAGE / "conventions.py") == set()


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from gitops_sync.apply import inventory\n", "imports gitops_sync.apply.inventory"),
        (
            "def f():\n    from gitops_sync.daemon.single.controller import Daemon\n",
            "imports gitops_sync.daemon.single.controller",
        ),
        ("from ..apply import manager\n", "imports gitops_sync.apply.manager"),
        ("from gitops_sync import cli\n", "imports gitops_sync.cli"),
    ],
)
def test_a_violation_is_found(tmp_path: Path, source: str, expected: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail: a plan module importing upwards, however it is spelled, is reported."""
    fake = tmp_path / "gitops_sync"
    (fake / "plan").mkdir(parents=True)
    (fake / "apply").mkdir()
    (fake / "apply" / "manager.py").write_text("")
    (fake / "apply" / "inventory.py").write_text("")
    (fake / "cli.py").write_text("")
    (fake / "plan" / "bad.py").write_text(source)
    monkeypatch.setitem(globals(), "PACKAGE", fake)
    found = violations()
    assert len(found) == 1 and expected in found[0], found
