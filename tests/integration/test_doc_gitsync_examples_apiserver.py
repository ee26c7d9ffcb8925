"""Every GitSync example of README.md and docs/*.md (tests/doc_examples.py) admitted by the real API server with
the shipped CRD: `kubectl apply --dry-run=server --validate=strict`, so an unknown or misspelt field, a wrong
type or enum, and the CRD's CEL rules (which the unit test's walk of the schema does not evaluate) refuse it.
Only the namespace changes (to the test's). Each field the example sets is still there after the server's
pruning and defaulting (a preserved unknown field would pass strict validation silently)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import KubeCluster
from tests.doc_examples import Example, all_gitsync_examples
from tests.integration.test_fleet import crd

pytestmark = pytest.mark.cluster
__all__ = ["crd"]
EXAMPLES = all_gitsync_examples()


def _contains(live: Any, written: Any) -> bool:
    if isinstance(written, dict):
        return isinstance(live, dict) and all(k in live and _contains(live[k], v) for k, v in written.items())
    if isinstance(written, list):
        return isinstance(live, list) and len(live) == len(written) and all(map(_contains, live, written))
    return bool(live == written)


def test_every_example_is_admitted_by_the_api_server(kube: KubeCluster, crd: None, namespace: str) -> None:
    assert len(EXAMPLES) >= 6, [str(ex) for ex in EXAMPLES]
    refused = []
    for ex in EXAMPLES:
        obj: dict[str, Any] = json.loads(json.dumps(ex.obj))
        obj["metadata"]["namespace"] = namespace
        done = kube.kubectl(
            "apply",
            "--dry-run=server",
            "--validate=strict",
            "-o",
            "json",
            "-f",
            "-",
            input=json.dumps(obj),
            check=False,
        )
        if done.returncode != 0:
            refused.append(f"{ex}: {done.stderr.strip()}")
        elif not _contains(json.loads(done.stdout)["spec"], obj["spec"]):
            refused.append(f"{ex}: the server dropped part of its spec: {done.stdout}")
    assert refused == []


def test_a_misspelt_field_is_refused(kube: KubeCluster, crd: None, namespace: str) -> None:
    """The check above can fail: strict validation refuses a field the CRD does not declare."""
    ex: Example = next(e for e in EXAMPLES if "decryption" in e.obj["spec"])
    obj: dict[str, Any] = json.loads(json.dumps(ex.obj))
    obj["metadata"]["namespace"] = namespace
    obj["spec"]["decryption"]["secretRef"]["namespace"] = "elsewhere"
    done = kube.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-", input=json.dumps(obj), check=False)
    assert done.returncode != 0 and "unknown field" in done.stderr, done.stderr
