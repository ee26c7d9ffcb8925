"""listkeys.py: which lists merge by key fields, as sets, or whole, and how an item is named."""

from __future__ import annotations

from typing import Any

import pytest

from gitops_sync.plan.fieldpath.listkeys import SET, item_key, list_keys
from gitops_sync.plan.fieldpath.notation import parse


@pytest.mark.parametrize(
    ("path", "items", "kind", "keys"),
    [
        (".spec.template.spec.containers", [{"name": "a"}], "Deployment", ("name",)),
        (".spec.initContainers", [{"name": "a"}], "Pod", ("name",)),
        ('.spec.containers[name="a"].env', [{"name": "X"}], "Pod", ("name",)),
        (".spec.volumes", [{"name": "v"}], "Pod", ("name",)),
        ('.spec.containers[name="a"].volumeMounts', [{"mountPath": "/d", "name": "v"}], "Pod", ("mountPath",)),
        ('.spec.containers[name="a"].ports', [{"containerPort": 80}], "Pod", ("containerPort", "protocol")),
        (".spec.ports", [{"port": 80}], "Service", ("port", "protocol")),
        (".spec.ports", [{"port": 80}], None, ("port", "protocol")),
        (".spec.ports", [{"port": 80}], "Other", None),
        (".spec.imagePullSecrets", [{"name": "reg"}], "Pod", ("name",)),
        (".spec.tolerations", [{"key": "k", "operator": "Exists"}], "Pod", None),
        ('.spec.containers[name="a"].envFrom', [{"configMapRef": {"name": "c"}}], "Pod", None),
        (".metadata.finalizers", ["a", "b"], "Pod", SET),
        (".metadata.finalizers", ["a", "a"], "Pod", None),
        (".spec.finalizers", ["kubernetes"], "Namespace", None),
        (".metadata.ownerReferences", [{"uid": "u", "name": "x"}], "Pod", ("uid",)),
        (".status.conditions", [{"type": "Ready"}], "Pod", ("type",)),
        (".spec.hostAliases", [{"ip": "1.2.3.4"}], "Pod", ("ip",)),
        (
            ".spec.topologySpreadConstraints",
            [{"topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule"}],
            "Pod",
            ("topologyKey", "whenUnsatisfiable"),
        ),
        (".spec.rules", [{"name": "a"}, {"name": "b"}], "Custom", ("name",)),
        (".spec.rules", [{"name": "a"}, {"name": "a"}], "Custom", None),  # not unique: atomic
        (".spec.rules", [{"name": "a"}, {"host": "b"}], "Custom", None),
        (".spec.containers", [{"image": "no-name"}], "Pod", None),  # key missing: atomic
        (".spec.args", ["a"], "Pod", None),
        (".spec.hosts", ["a", "b"], "Custom", None),
    ],
)
def test_list_keys(path: str, items: list[Any], kind: str | None, keys: Any) -> None:
    assert list_keys(parse(path), items, kind) == keys


def test_item_key_defaults_protocol() -> None:
    assert (
        item_key({"containerPort": 80}, ("containerPort", "protocol")).format() == '[containerPort=80,protocol="TCP"]'
    )
    assert item_key({"port": 53, "protocol": "UDP"}, ("port", "protocol")).format() == '[port=53,protocol="UDP"]'
