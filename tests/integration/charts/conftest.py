"""Fixtures of the chart tests: `registries` (session) and `published` (module), from chart_registries.py."""

import pytest
from chart_registries import published, registries  # noqa: F401  (fixtures, used by name)

from tests.conftest import REGISTRIES


def pytest_itemcollected(item: pytest.Item) -> None:
    """Every chart test on one pytest-xdist worker: the session's registries are then started once, not per
    worker (the group is added here, at collection, before xdist reads it)."""
    item.add_marker(REGISTRIES)
