"""Fixtures of the chart tests: `registries` (session) and `published` (module), from chart_registries.py."""

from chart_registries import published, registries  # noqa: F401  (fixtures, used by name)
