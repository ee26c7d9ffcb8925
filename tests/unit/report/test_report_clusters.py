"""The report of one pass per cluster (`sync --context a --context b`): grouped by cluster, in every format."""

from __future__ import annotations

import io
import json
from typing import Any

from gitops_sync import report
from gitops_sync.plan.changeset import Action, ChangeSet, Entry
from gitops_sync.resource import ObjectKey

SHA = "3f2c9a1b7d4e5f60718293a4b5c6d7e8f9a0b1c2"


def groups() -> list[tuple[dict[str, Any], ChangeSet]]:
    updated = ChangeSet(revision=SHA, source="apps", dry_run=True)
    updated.entries = [Entry(ObjectKey("", "ConfigMap", "team", "web"), "v1", Action.UPDATE)]
    failed = ChangeSet(revision="", source="apps", errors=["context down: API server 127.0.0.1:9 unreachable"])
    return [
        ({"context": "eu", "server": "https://10.0.0.1:6443", "clusterId": "uid-eu", "exitCode": 1}, updated),
        ({"context": "down", "server": "", "clusterId": "", "exitCode": 2}, failed),
    ]


def test_json_is_one_document_with_a_report_per_cluster_and_the_worst_exit_code() -> None:
    out = io.StringIO()
    report.write_clusters(groups(), "json", out, exit_code=2)
    doc = json.loads(out.getvalue())
    assert doc["exitCode"] == 2
    eu, down = doc["clusters"]
    assert (eu["context"], eu["server"], eu["clusterId"], eu["exitCode"]) == (
        "eu",
        "https://10.0.0.1:6443",
        "uid-eu",
        1,
    )
    assert eu["report"]["objects"][0]["name"] == "web" and eu["report"]["revision"] == SHA
    assert down["report"]["errors"] == ["context down: API server 127.0.0.1:9 unreachable"]


def test_table_and_markdown_head_each_cluster_and_the_table_ends_with_the_exit_code() -> None:
    out = io.StringIO()
    report.write_clusters(groups(), "table", out, exit_code=2, color=False, terminal=False)
    text = out.getvalue()
    eu_head = "== cluster eu at https://10.0.0.1:6443 (kube-system uid uid-eu): exit 1 =="
    down_head = "== cluster down (not reached): exit 2 =="
    assert text.index(eu_head) < text.index("web") < text.index(down_head) < text.index("unreachable")
    assert text.rstrip().endswith("exit 2 (the worst of: eu 1, down 2)")
    md = io.StringIO()
    report.write_clusters(groups(), "markdown", md, exit_code=2)
    assert md.getvalue().count("## Cluster ") == 2 and "## Cluster down (not reached): exit 2" in md.getvalue()
