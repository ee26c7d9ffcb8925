from __future__ import annotations

import copy
from typing import Any

import pytest

from gitops_sync.plan.diff import FieldDiff, diff_intent, diff_objects
from gitops_sync.plan.fieldpath import MISSING


def deployment() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "minha-api", "namespace": "default", "labels": {"app": "minha-api"}},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "minha-api"}},
            "template": {
                "metadata": {"labels": {"app": "minha-api"}},
                "spec": {
                    "containers": [
                        {
                            "name": "api",
                            "image": "api:1.0",
                            "args": ["--port", "8080"],
                            "ports": [{"containerPort": 8080, "name": "http"}],
                            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                            "resources": {"limits": {"cpu": "0.5", "memory": "256Mi"}},
                        }
                    ]
                },
            },
        },
    }


def set_at(obj: dict[str, Any], path: str, value: Any) -> None:
    """`spec__template__spec__containers__0__image` -> obj["spec"]["template"]...[0]["image"] = value."""
    node: Any = obj
    *parents, last = path.split("__")
    for name in parents:
        node = node[int(name)] if isinstance(node, list) else node[name]
    node[last] = value


def live_of(obj: dict[str, Any]) -> dict[str, Any]:
    """What the server stores: defaults, bookkeeping and status added."""
    live = copy.deepcopy(obj)
    live["metadata"].update(
        uid="u-1",
        resourceVersion="42",
        generation=2,
        creationTimestamp="2024-05-01T10:00:00Z",
        managedFields=[{"manager": "gitops-sync", "operation": "Apply"}],
        annotations={"deployment.kubernetes.io/revision": "2"},
    )
    container = live["spec"]["template"]["spec"]["containers"][0]
    container["ports"][0]["protocol"] = "TCP"
    container["imagePullPolicy"] = "IfNotPresent"
    container["resources"]["limits"]["cpu"] = "500m"
    live["spec"]["strategy"] = {"type": "RollingUpdate"}
    live["status"] = {"replicas": 3, "readyReplicas": 3}
    return live


API = '.spec.template.spec.containers[name="api"]'


def paths(diffs: list[FieldDiff]) -> list[str]:
    return [d.path for d in diffs]


# --- diff_objects ------------------------------------------------------------------------------------


def test_diff_objects_identical_after_stripping_server_fields() -> None:
    live = live_of(deployment())
    result = copy.deepcopy(live)
    result["metadata"]["resourceVersion"] = "43"
    result["metadata"]["managedFields"] = []
    result["status"] = {}
    assert diff_objects(result, live) == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"spec__replicas": 10}, [FieldDiff(".spec.replicas", 3, 10)]),
        (
            {"metadata__labels": {"app": "minha-api", "tier": "web"}},
            [FieldDiff(".metadata.labels.tier", MISSING, "web")],
        ),
        ({"spec__paused": True}, [FieldDiff(".spec.paused", MISSING, True)]),
        (
            {"spec__template__spec__containers__0__image": "api:2.0"},
            [FieldDiff(f"{API}.image", "api:1.0", "api:2.0")],
        ),
        (
            {"spec__template__spec__containers__0__args": ["--port", "9090"]},  # atomic: whole list
            [FieldDiff(f"{API}.args", ["--port", "8080"], ["--port", "9090"])],
        ),
        (
            {"spec__template__spec__containers__0__env": [{"name": "A", "value": "x"}, {"name": "B", "value": "2"}]},
            [FieldDiff(f'{API}.env[name="A"].value', "1", "x")],
        ),
        (
            {"spec__template__spec__containers__0__env": [{"name": "A", "value": "1"}]},
            [FieldDiff(f'{API}.env[name="B"]', {"name": "B", "value": "2"}, MISSING)],
        ),
        (
            {"spec__template__spec__containers__0__env": [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}]},
            [
                FieldDiff(
                    f"{API}.env",
                    [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}],
                )
            ],
        ),
        (
            {"spec__template__spec__containers__0__ports": [{"containerPort": 8080, "name": "web", "protocol": "TCP"}]},
            [FieldDiff(f'{API}.ports[containerPort=8080,protocol="TCP"].name', "http", "web")],
        ),
        (
            {"spec__template__spec__containers__0__resources": {"limits": {"cpu": "1", "memory": "256Mi"}}},
            [FieldDiff(f"{API}.resources.limits.cpu", "500m", "1")],
        ),
        ({"metadata__finalizers": ["x"]}, [FieldDiff(".metadata.finalizers", MISSING, ["x"])]),
    ],
)
def test_diff_objects_reports_live_changes(change: dict[str, Any], expected: list[FieldDiff]) -> None:
    result = live_of(deployment())
    live = live_of(deployment())
    for path, value in change.items():
        set_at(live, path, value)
    assert diff_objects(result, live) == expected


def test_diff_objects_keyed_items_added_and_removed() -> None:
    result = live_of(deployment())
    live = copy.deepcopy(result)
    sidecar = {"name": "sidecar", "image": "envoy:1"}
    result["spec"]["template"]["spec"]["containers"].append(sidecar)
    assert diff_objects(result, live) == [FieldDiff('.spec.template.spec.containers[name="sidecar"]', sidecar, MISSING)]
    assert diff_objects(live, result) == [FieldDiff('.spec.template.spec.containers[name="sidecar"]', MISSING, sidecar)]


def test_diff_objects_set_and_atomic_edges() -> None:
    a = {"kind": "Pod", "metadata": {"finalizers": ["a", "b"]}, "spec": {"tolerations": [{"key": "k"}], "x": []}}
    b = {"kind": "Pod", "metadata": {"finalizers": ["b", "c"]}, "spec": {"tolerations": [{"key": "j"}], "x": [1]}}
    assert diff_objects(a, b) == [
        FieldDiff('.metadata.finalizers[="a"]', "a", MISSING),
        FieldDiff('.metadata.finalizers[="c"]', MISSING, "c"),
        FieldDiff(".spec.tolerations", [{"key": "k"}], [{"key": "j"}]),
        FieldDiff(".spec.x", [], [1]),
    ]
    # set order is not a difference
    assert diff_objects({"metadata": {"finalizers": ["a", "b"]}}, {"metadata": {"finalizers": ["b", "a"]}}) == []


@pytest.mark.parametrize(
    ("x", "y", "differs"),
    [
        (1, 1.0, False),
        (True, 1, True),
        (0, False, True),
        ("1", 1, True),
        (None, None, False),
        (None, MISSING, True),
        ({"a": [1, {"b": True}]}, {"a": [1, {"b": True}]}, False),
        ({"a": [1, {"b": True}]}, {"a": [1, {"b": 1}]}, True),
    ],
)
def test_diff_objects_json_equality(x: Any, y: Any, differs: bool) -> None:
    a = {"spec": {"v": x}} if x is not MISSING else {"spec": {}}
    b = {"spec": {"v": y}} if y is not MISSING else {"spec": {}}
    assert bool(diff_objects(a, b)) is differs


def test_diff_objects_service_ports_match_defaulted_protocol() -> None:
    result = {"kind": "Service", "spec": {"ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]}}
    live = {"kind": "Service", "spec": {"ports": [{"port": 80, "targetPort": "http", "protocol": "TCP"}]}}
    assert diff_objects(result, live) == [FieldDiff('.spec.ports[port=80,protocol="TCP"].targetPort', 8080, "http")]


def test_field_diff_absent_vs_null() -> None:
    absent = FieldDiff(".a", MISSING, None)
    assert not absent.in_desired and absent.in_live
    assert absent.to_json() == {"path": ".a", "desired": None, "live": None}
    assert FieldDiff(".a", 1, MISSING).to_json() == {"path": ".a", "desired": 1, "live": None}


# --- diff_intent --------------------------------------------------------------------------------------


def test_diff_intent_ignores_server_defaults_and_other_fields() -> None:
    desired = deployment()
    live = live_of(desired)  # protocol TCP, cpu 500m, imagePullPolicy, strategy, status...
    live["metadata"]["labels"]["helm.sh/chart"] = "minha-api-0.1.0"  # another manager's label
    assert diff_intent(desired, live) == []


def test_diff_intent_kubectl_scale_scenario() -> None:
    desired = deployment()
    live = live_of(desired)
    live["spec"]["replicas"] = 10
    live["spec"]["template"]["spec"]["containers"][0]["image"] = "api:hotfix"
    assert diff_intent(desired, live) == [
        FieldDiff(".spec.replicas", 3, 10),
        FieldDiff(f"{API}.image", "api:1.0", "api:hotfix"),
    ]


@pytest.mark.parametrize(
    ("mutate", "expected_path", "desired", "live"),
    [
        (lambda c: c["env"].pop(), f'{API}.env[name="B"].name', "B", MISSING),
        (lambda c: c["env"][0].update(value="9"), f'{API}.env[name="A"].value', "1", "9"),
        (lambda c: c.update(args=["--port"]), f"{API}.args", ["--port", "8080"], ["--port"]),
        (
            lambda c: c["ports"][0].update(protocol="UDP"),
            f'{API}.ports[containerPort=8080,protocol="TCP"].containerPort',
            8080,
            MISSING,
        ),
        (lambda c: c["resources"]["limits"].update(memory="512Mi"), f"{API}.resources.limits.memory", "256Mi", "512Mi"),
    ],
)
def test_diff_intent_each_kind_of_drift(mutate: Any, expected_path: str, desired: Any, live: Any) -> None:
    want = deployment()
    got = live_of(want)
    mutate(got["spec"]["template"]["spec"]["containers"][0])
    diffs = diff_intent(want, got)
    assert diffs[0] == FieldDiff(expected_path, desired, live)


def test_diff_intent_secret_string_data_compares_as_data() -> None:
    desired = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"password": "hunter2"}}
    live: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s", "uid": "u"},
        "data": {"password": "aHVudGVyMg=="},
        "type": "Opaque",
    }
    assert diff_intent(desired, live) == []
    live["data"]["password"] = "b3RoZXI="
    assert diff_intent(desired, live) == [FieldDiff(".data.password", "aHVudGVyMg==", "b3RoZXI=")]


def test_diff_intent_ignores_identity_and_dotted_label_keys_work() -> None:
    desired = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"labels": {"app.kubernetes.io/name": "x"}}}
    live = {"apiVersion": "apps/v1beta2", "kind": "Deployment", "metadata": {"labels": {"app.kubernetes.io/name": "y"}}}
    assert diff_intent(desired, live) == [FieldDiff(".metadata.labels.app.kubernetes.io/name", "x", "y")]


def test_diff_intent_empty_maps_and_nulls() -> None:
    desired = {"kind": "Pod", "metadata": {"labels": {}}, "spec": {"securityContext": {}, "nodeName": None}}
    assert diff_intent(desired, {"kind": "Pod", "spec": {"securityContext": {"runAsUser": 1}}}) == []
    assert diff_intent(desired, {"kind": "Pod", "spec": {"nodeName": "n1"}}) == [
        FieldDiff(".spec.nodeName", None, "n1")
    ]
