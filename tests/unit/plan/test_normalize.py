from __future__ import annotations

import base64
import copy
from decimal import Decimal
from typing import Any

import pytest

from gitops_sync.errors import RenderError
from gitops_sync.plan.fieldpath import MISSING
from gitops_sync.plan.normalize import (
    equivalent,
    is_quantity_path,
    parse_quantity,
    prepare_desired,
    same_quantity,
    strip_server_fields,
)

LIVE: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {
        "name": "web",
        "namespace": "default",
        "uid": "0c5f1a7e-5d1c-4f83-9d2e-1f0b8c3a9e11",
        "resourceVersion": "48211",
        "generation": 4,
        "creationTimestamp": "2024-05-01T10:00:00Z",
        "selfLink": "/apis/apps/v1/namespaces/default/deployments/web",
        "deletionTimestamp": "2024-05-02T10:00:00Z",
        "deletionGracePeriodSeconds": 0,
        "managedFields": [{"manager": "kubectl"}],
        "labels": {"app": "web"},
        "annotations": {
            "kubectl.kubernetes.io/last-applied-configuration": "{}",
            "deployment.kubernetes.io/revision": "3",
            "team": "a",
        },
    },
    "spec": {"replicas": 2},
    "status": {"replicas": 2},
}


def test_strip_server_fields() -> None:
    before = copy.deepcopy(LIVE)
    out = strip_server_fields(LIVE)
    assert out == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}, "annotations": {"team": "a"}},
        "spec": {"replicas": 2},
    }
    assert before == LIVE


def test_strip_server_fields_drops_annotations_left_empty() -> None:
    obj = {"metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}}}
    assert strip_server_fields(obj) == {"metadata": {}}
    assert strip_server_fields({"kind": "X"}) == {"kind": "X"}


def test_prepare_desired_folds_string_data() -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s", "labels": {}, "annotations": None},
        "data": {"a": base64.b64encode(b"old").decode(), "b": "Yg=="},
        "stringData": {"a": "new", "c": "çé"},
        "status": {},
    }
    before = copy.deepcopy(secret)
    out = prepare_desired(secret)
    assert out == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s"},
        "data": {"a": "bmV3", "b": "Yg==", "c": base64.b64encode("çé".encode()).decode()},
    }
    assert secret == before


def test_prepare_desired_leaves_non_core_secrets_and_other_kinds() -> None:
    other = {"apiVersion": "example.com/v1", "kind": "Secret", "stringData": {"a": "x"}}
    assert prepare_desired(other) == other
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"labels": {"a": "b"}}, "data": {"x": "y"}}
    assert prepare_desired(cm) == cm


def test_prepare_desired_rejects_non_string_values() -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "db", "namespace": "x"},
        "stringData": {"port": 5432},
    }
    with pytest.raises(RenderError, match=r"Secret/x/db: stringData.port must be a string, not int"):
        prepare_desired(secret)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Decimal("0.5")),
        ("0.5", Decimal("0.5")),
        ("1", Decimal(1)),
        (2, Decimal(2)),
        (0.25, Decimal("0.25")),
        ("1Ki", Decimal(1024)),
        ("1Gi", Decimal(1024**3)),
        ("1.5Gi", Decimal(1024**3) * Decimal("1.5")),
        ("1k", Decimal(1000)),
        ("1M", Decimal(10**6)),
        ("1E", Decimal(10**18)),
        ("1Ei", Decimal(1024**6)),
        ("1e3", Decimal(1000)),
        ("1E3", Decimal(1000)),
        ("12e-3", Decimal("0.012")),
        ("100n", Decimal("1E-7")),
        ("-1", Decimal(-1)),
        (".5", Decimal("0.5")),
    ],
)
def test_parse_quantity(text: str | int | float, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("bad", ["", "abc", "1e", "1 Gi", "1gi", "1KiB", "--1", True])
def test_parse_quantity_rejects(bad: Any) -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        parse_quantity(bad)


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("500m", "0.5", True),
        ("1", 1, True),
        ("1000m", "1", True),
        ("1024Mi", "1Gi", True),
        ("1G", "1Gi", False),
        ("128974848", "129e6", False),
        ("129e6", "129M", True),
        ("1", "2", False),
        ("x", "x", False),  # not quantities at all
    ],
)
def test_same_quantity(a: Any, b: Any, same: bool) -> None:
    assert same_quantity(a, b) is same


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ('.spec.template.spec.containers[name="a"].resources.limits.cpu', True),
        ('.spec.containers[name="a"].resources.requests.memory', True),
        (".spec.resources.requests.storage", True),
        (".spec.hard.pods", True),
        ('.spec.volumes[name="v"].emptyDir.sizeLimit', True),
        (".spec.capacity.storage", True),
        (".spec.replicas", False),
        (".metadata.labels.limits", False),
        (".spec.resources", False),
    ],
)
def test_is_quantity_path(path: str, expected: bool) -> None:
    assert is_quantity_path(path) is expected


CPU = '.spec.template.spec.containers[name="a"].resources.limits.cpu'


@pytest.mark.parametrize(
    ("desired", "live", "path", "same"),
    [
        ("500m", "500m", CPU, True),
        ("0.5", "500m", CPU, True),
        (1, "1", CPU, True),
        ("1024Mi", "1Gi", CPU, True),
        ("1", "2", CPU, False),
        ("0.5", "500m", ".spec.x", False),  # outside resources a string is a string
        ("0.5", "500m", (), False),
        ({"limits": {"cpu": "0.5"}}, {"limits": {"cpu": "500m"}}, '.spec.containers[name="a"].resources', True),
        (1, 1.0, ".spec.replicas", True),
        (1, 2, ".spec.replicas", False),
        ("80", 80, ".spec.ports[port=80].targetPort", False),  # intOrString
        (True, 1, ".spec.x", False),
        (True, True, ".spec.x", True),
        (None, MISSING, ".spec.x", True),
        (MISSING, MISSING, ".spec.x", True),
        ({}, MISSING, ".spec.x", True),
        ([], None, ".spec.x", True),
        ({"a": 1}, MISSING, ".spec.x", False),
        ("x", MISSING, ".spec.x", False),
        (None, "x", ".spec.x", False),
        ({"a": 1}, {"a": 1, "defaulted": "y"}, ".spec.x", True),
        ({"a": 1}, {"a": 2}, ".spec.x", False),
        ([{"key": "k"}], [{"key": "k", "operator": "Equal"}], ".spec.tolerations", True),
        (["a", "b"], ["b", "a"], ".spec.args", False),
        (["a"], ["a", "b"], ".spec.args", False),
        ("a", "a", ".x", True),
        ("a", ["a"], ".x", False),
    ],
)
def test_equivalent(desired: Any, live: Any, path: Any, same: bool) -> None:
    assert equivalent(desired, live, path) is same
