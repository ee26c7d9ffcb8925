"""Fixtures of the secret tests: `secret_tools` (the sops tool set, built on demand) and `signing_keys`."""

from secret_tools import secret_tools  # noqa: F401  (a fixture, used by name)
