"""pytest imports test modules outside packages by their basename (rootdir `prepend` mode): two files of one
name in tests/unit and tests/integration stop the whole run at collection ("import file mismatch")."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_test_modules_outside_packages_have_unique_basenames() -> None:
    loose = [p for p in TESTS.rglob("test_*.py") if not (p.parent / "__init__.py").exists()]
    twice = [name for name, n in Counter(p.name for p in loose).items() if n > 1]
    assert not twice, f"test modules sharing a basename (pytest collects only one): {twice}"


def test_no_test_imports_conftest_by_its_bare_name() -> None:
    """Every conftest.py is imported as `conftest` in prepend mode, the last one loaded winning: with more than
    one (tests/, tests/integration/charts/), `from conftest import X` reads whichever came last and the
    whole run stops at collection. `from tests.conftest import X` names the one meant."""
    bare = [
        str(p.relative_to(TESTS))
        for p in TESTS.rglob("*.py")
        if any(line.startswith(("from conftest import", "import conftest")) for line in p.read_text().splitlines())
    ]
    assert not bare, f"import conftest by its package path (tests.conftest) in: {bare}"
