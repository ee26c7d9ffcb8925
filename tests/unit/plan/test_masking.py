from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from gitops_sync.plan.diff import FieldDiff, diff_objects
from gitops_sync.plan.fieldpath import MISSING
from gitops_sync.plan.masking import MASK, is_secret, mask_diff, mask_secret
from gitops_sync.resource import ObjectKey

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
SECRET: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {
        "name": "db",
        "namespace": "prod",
        "labels": {"app": "db"},
        "annotations": {LAST_APPLIED: json.dumps({"data": {"password": "aHVudGVyMg=="}}), "team": "a"},
    },
    "type": "Opaque",
    "data": {"password": "aHVudGVyMg==", "empty": None},
    "stringData": {"user": "admin"},
}
PLAINTEXTS = ("aHVudGVyMg==", "admin", "hunter2")


def leaks(value: Any) -> bool:
    text = json.dumps(value, default=repr)
    return any(p in text for p in PLAINTEXTS)


@pytest.mark.parametrize(
    ("what", "secret"),
    [
        (ObjectKey("", "Secret", "prod", "db"), True),
        (ObjectKey("example.com", "Secret", "prod", "db"), False),
        (ObjectKey("", "ConfigMap", "prod", "db"), False),
        ("Secret", True),
        ("ConfigMap", False),
        ("Secret.example.com", False),
        ({"apiVersion": "v1", "kind": "Secret"}, True),
        ({"apiVersion": "example.com/v1", "kind": "Secret"}, False),
    ],
)
def test_is_secret(what: Any, secret: bool) -> None:
    assert is_secret(what) is secret


def test_mask_secret() -> None:
    before = copy.deepcopy(SECRET)
    out = mask_secret(SECRET)
    assert out["data"] == {"password": MASK, "empty": None}
    assert out["stringData"] == {"user": MASK}
    assert out["metadata"]["annotations"] == {LAST_APPLIED: MASK, "team": "a"}
    assert out["metadata"]["labels"] == {"app": "db"}
    assert out["type"] == "Opaque"
    assert not leaks(out)
    assert before == SECRET


def test_mask_secret_leaves_other_kinds_alone() -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"password": "visible"}}
    assert mask_secret(cm) is cm
    crd_secret = {"apiVersion": "example.com/v1", "kind": "Secret", "data": {"a": "visible"}}
    assert mask_secret(crd_secret) == crd_secret


@pytest.mark.parametrize(
    ("diff", "masked"),
    [
        (FieldDiff(".data.password", "aHVudGVyMg==", "b3RoZXI="), FieldDiff(".data.password", MASK, MASK)),
        (FieldDiff(".data.password", "aHVudGVyMg==", MISSING), FieldDiff(".data.password", MASK, MISSING)),
        (FieldDiff(".stringData.user", "admin", None), FieldDiff(".stringData.user", MASK, None)),
        (FieldDiff(".data", {"password": "aHVudGVyMg=="}, MISSING), FieldDiff(".data", {"password": MASK}, MISSING)),
        (FieldDiff(".data", "weird", MISSING), FieldDiff(".data", MASK, MISSING)),
        (
            FieldDiff(f".metadata.annotations.{LAST_APPLIED}", '{"data":{"password":"aHVudGVyMg=="}}', MISSING),
            FieldDiff(f".metadata.annotations.{LAST_APPLIED}", MASK, MISSING),
        ),
        (
            FieldDiff(".metadata.annotations", {LAST_APPLIED: "hunter2", "a": "b"}, MISSING),
            FieldDiff(".metadata.annotations", {LAST_APPLIED: MASK, "a": "b"}, MISSING),
        ),
        (
            FieldDiff(".metadata", {"annotations": {LAST_APPLIED: "hunter2"}}, MISSING),
            FieldDiff(".metadata", {"annotations": {LAST_APPLIED: MASK}}, MISSING),
        ),
        (FieldDiff(".metadata.labels.app", "db", "cache"), FieldDiff(".metadata.labels.app", "db", "cache")),
        (FieldDiff(".type", "Opaque", "kubernetes.io/tls"), FieldDiff(".type", "Opaque", "kubernetes.io/tls")),
    ],
)
def test_mask_diff(diff: FieldDiff, masked: FieldDiff) -> None:
    assert mask_diff("Secret", [diff]) == [masked]


def test_mask_diff_whole_object() -> None:
    [masked] = mask_diff(ObjectKey("", "Secret", "prod", "db"), [FieldDiff("", SECRET, MISSING)])
    assert masked.desired["data"]["password"] == MASK
    assert masked.live is MISSING
    assert not leaks(masked.desired)


def test_mask_diff_end_to_end_never_leaks() -> None:
    live = copy.deepcopy(SECRET)
    live["data"] = {"password": "b3RoZXI=", "extra": "aHVudGVyMg=="}
    del live["stringData"]
    diffs = mask_diff("Secret", diff_objects(SECRET, live))
    assert diffs  # differences stay visible...
    assert all(not leaks(d.desired) and not leaks(d.live) for d in diffs)  # ...their values do not
    assert {d.path for d in diffs} >= {".data.password", ".data.extra", ".stringData"}


def test_mask_diff_non_secret_unchanged() -> None:
    diffs = [FieldDiff(".data.password", "visible", "other")]
    assert mask_diff("ConfigMap", diffs) == diffs
    assert mask_diff(ObjectKey("example.com", "Secret", "", "x"), diffs) == diffs
