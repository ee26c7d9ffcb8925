"""Fixtures of the chart tests: the session fixture `registries` (chart_registries.py)."""

from chart_registries import registries  # noqa: F401  (a fixture, used by name)
