"""The package re-exports every name the single module had, as the same objects its modules define."""

from __future__ import annotations

import importlib

import pytest

from gitops_sync.plan import fieldpath

# (name, defining module): every public name of the former gitops_sync/plan/fieldpath.py, plus the codec.
NAMES = [
    ("ATOMIC_LISTS", "listkeys"),
    ("MERGE_KEYS", "listkeys"),
    ("MISSING", "walk"),
    ("SET", "listkeys"),
    ("Field", "element"),
    ("Index", "element"),
    ("Key", "element"),
    ("Missing", "walk"),
    ("Path", "element"),
    ("PathElement", "element"),
    ("Step", "walk"),
    ("Value", "element"),
    ("canonical_json", "element"),
    ("format_path", "notation"),
    ("get", "walk"),
    ("go_unquote", "notation"),
    ("item_key", "listkeys"),
    ("leaf_paths", "walk"),
    ("leaves", "walk"),
    ("list_keys", "listkeys"),
    ("parse", "notation"),
    ("parse_fields_v1", "fieldsv1"),
    ("remove", "walk"),
    ("resolve", "walk"),
]


@pytest.mark.parametrize(("name", "module"), NAMES)
def test_public_name_re_exported(name: str, module: str) -> None:
    defining = importlib.import_module(f"gitops_sync.plan.fieldpath.{module}")
    assert getattr(fieldpath, name) is getattr(defining, name)
    assert name in fieldpath.__all__
    assert name in defining.__all__


def test_all_lists_exactly_these_names() -> None:
    assert sorted(fieldpath.__all__) == sorted(name for name, _ in NAMES)
