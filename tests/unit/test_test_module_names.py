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
