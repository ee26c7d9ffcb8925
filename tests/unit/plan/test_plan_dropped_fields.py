"""The fast path and the fields the API server accepts but does not store.

kube-prometheus's grafana and prometheus-adapter Deployments set `readOnly: false` on their volume mounts
(and grafana `env: []`); the server drops both, so the live object never "holds" them and every re-sync
sent a PATCH that changed nothing. What the server dropped is read from its own record: our Apply entry in
managedFields still owns such a path (it lists what the apply set); a write that removed the field since
would have taken it out of that entry. The real API server's side of this is in
tests/reliability/test_real_manifests.py (and the managedFields rule itself is checked there too).
"""

from __future__ import annotations

import copy
from typing import Any

from gitops_sync.plan import bookkeeping, planner
from gitops_sync.plan.diff import diff_intent
from tests.unit.fakes import StaticDiscovery, objs

MANAGER = "gitops-sync"
MOUNT = '.spec.template.spec.containers[name="app"].volumeMounts[mountPath="/data"].readOnly'


def deployment(read_only: bool, env: list[Any] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "app",
        "image": "registry.example/app:1",
        "volumeMounts": [{"mountPath": "/data", "name": "data", "readOnly": read_only}],
    }
    if env is not None:
        container["env"] = env
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [container], "volumes": [{"name": "data", "emptyDir": {}}]},
            },
        },
    }


def ours(read_only_owned: bool) -> dict[str, Any]:
    """Our Apply entry as the server records it: `f:readOnly` kept even when the value is not stored."""
    mount: dict[str, Any] = {".": {}, "f:mountPath": {}, "f:name": {}}
    if read_only_owned:
        mount["f:readOnly"] = {}
    container = {".": {}, "f:name": {}, "f:image": {}, "f:volumeMounts": {'k:{"mountPath":"/data"}': mount}}
    fields = {"f:spec": {"f:template": {"f:spec": {"f:containers": {'k:{"name":"app"}': container}}}}}
    return {"manager": MANAGER, "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": fields}


def planned(manifest: dict[str, Any]) -> tuple[planner.Target, dict[str, Any]]:
    """The target and the live object as the server stores it: `readOnly: false` and `env: []` left out."""
    (t,) = planner.resolve(objs(manifest), StaticDiscovery(), "ns")
    bookkeeping.finalize(t, None, "applyset-x-v1")
    live = copy.deepcopy(t.manifest)
    container = live["spec"]["template"]["spec"]["containers"][0]
    if container.get("env") == []:
        del container["env"]
    for mount in container["volumeMounts"]:
        if mount.get("readOnly") is False:
            del mount["readOnly"]
    return t, live


def test_read_only_false_the_server_dropped_from_our_apply_is_unchanged() -> None:
    t, live = planned(deployment(read_only=False))
    live["metadata"]["managedFields"] = [ours(read_only_owned=True)]
    assert planner.is_unchanged(t, live, MANAGER)


def test_a_field_absent_and_not_owned_by_our_apply_goes_to_the_server() -> None:
    # Without the record (never applied by us, or a write removed it since and took it from our entry).
    t, live = planned(deployment(read_only=False))
    live["metadata"]["managedFields"] = [ours(read_only_owned=False)]
    assert not planner.is_unchanged(t, live, MANAGER)
    live["metadata"]["managedFields"] = []
    assert not planner.is_unchanged(t, live, MANAGER)
    live["metadata"]["managedFields"] = [ours(read_only_owned=True)]
    assert not planner.is_unchanged(t, live, "another-field-manager")  # owned, but not by this --field-manager


def test_a_stored_value_someone_removed_is_drift() -> None:
    # readOnly: true is stored; absent live, a write removed it, and that took it out of our entry.
    t, live = planned(deployment(read_only=True))
    del live["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["readOnly"]
    live["metadata"]["managedFields"] = [ours(read_only_owned=False)]
    assert not planner.is_unchanged(t, live, MANAGER)


def test_a_changed_value_is_drift_whoever_owns_it() -> None:
    t, live = planned(deployment(read_only=True))
    live["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["readOnly"] = False
    live["metadata"]["managedFields"] = [ours(read_only_owned=True)]
    assert not planner.is_unchanged(t, live, MANAGER)
    assert planner.dropped_by_server([], live, MANAGER)  # nothing differs: nothing to explain


def test_an_empty_env_list_the_server_dropped_is_unchanged() -> None:
    # The server records no field for an empty list (no `f:env`): an absent list is what `[]` is stored as.
    t, live = planned(deployment(read_only=True, env=[]))
    live["metadata"]["managedFields"] = [ours(read_only_owned=True)]
    assert "env" not in live["spec"]["template"]["spec"]["containers"][0]
    assert planner.is_unchanged(t, live, MANAGER)


def test_the_dropped_path_is_the_one_the_server_records() -> None:
    t, live = planned(deployment(read_only=False))
    live["metadata"]["managedFields"] = [ours(read_only_owned=True)]
    assert [d.path for d in diff_intent(t.manifest, live, prepared=True)] == [MOUNT]
