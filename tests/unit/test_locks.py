"""requirements/*.lock agree with pyproject.toml: every declared requirement is pinned within its range, the
runtime lock holds exactly the closure of pyproject's dependencies (no more, no less), the three locks never
disagree on a version, and every pin is hashed. `make lock` repairs what fails here."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LOCKS = ROOT / "requirements"
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==([^\s;\\]+)\s*(?:;\s*([^\\]+?))?\s*\\?$")


def _lock(name: str) -> dict[str, tuple[str, bool]]:
    """name -> (version, applies here: the entry's marker on this interpreter); each pin followed by hashes."""
    lines = (LOCKS / name).read_text().splitlines()
    pins: dict[str, tuple[str, bool]] = {}
    for i, line in enumerate(lines):
        m = PIN.match(line)
        if not m:
            continue
        assert lines[i + 1].strip().startswith("--hash=sha256:"), f"{name}: {m[1]} is not hashed"
        marker = m[3]
        applies = Requirement(f"x; {marker}").marker.evaluate() if marker else True  # type: ignore[union-attr]
        pins[canonicalize_name(m[1])] = (m[2], applies)
    assert pins, f"{name}: no pins read"
    return pins


def _pyproject() -> dict[str, list[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {"": project["dependencies"], **project["optional-dependencies"]}


def _build_in() -> list[str]:
    lines = (LOCKS / "build.in").read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]


def _within(requirements: list[str], pins: dict[str, tuple[str, bool]], where: str) -> None:
    for text in requirements:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        assert name in pins, f"{text} (pyproject.toml) is not in {where}: run `make lock`"
        assert req.specifier.contains(pins[name][0], prereleases=True), f"{where} pins {name}=={pins[name][0]}: {text}"


def test_each_requirement_is_pinned_within_its_range() -> None:
    declared = _pyproject()
    _within(declared[""], _lock("runtime.lock"), "runtime.lock")
    _within(declared[""] + declared["dev"] + _build_in(), _lock("dev.lock"), "dev.lock")
    _within(_build_in(), _lock("build.lock"), "build.lock")


def test_the_locks_never_disagree() -> None:
    dev = _lock("dev.lock")
    for name in ("runtime.lock", "build.lock"):
        for pkg, (version, _) in _lock(name).items():
            assert dev.get(pkg, ("absent", True))[0] == version, f"{name} pins {pkg}=={version}, dev.lock does not"


def _closure(roots: list[str]) -> dict[str, str]:
    """The installed distributions `roots` need on this interpreter, following each one's own requirements."""
    env: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
    seen: dict[str, str] = {}
    todo = [Requirement(r) for r in roots]
    while todo:
        req = todo.pop()
        extras = req.extras or {""}
        if req.marker and not any(req.marker.evaluate({**env, "extra": e}) for e in extras):
            continue
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        dist = metadata.distribution(name)
        seen[name] = dist.version
        for sub in dist.requires or []:
            child = Requirement(sub)
            if child.marker is None or any(child.marker.evaluate({**env, "extra": e}) for e in extras):
                child.marker = None  # decided here, for the extras asked of its parent
                todo.append(child)
    return seen


def test_runtime_lock_is_exactly_the_closure_of_the_dependencies() -> None:
    """Read from the installed distributions (`make venv` installs dev.lock): a dependency added to pyproject
    without `make lock`, or a pin nothing needs any more, fails here."""
    closure = _closure(_pyproject()[""])
    applicable = {name: version for name, (version, applies) in _lock("runtime.lock").items() if applies}
    assert sorted(applicable) == sorted(closure)
    stale = {name: (version, closure[name]) for name, version in applicable.items() if closure[name] != version}
    assert not stale, f"installed versions differ from runtime.lock (lock, installed): {stale}; run `make venv`"
