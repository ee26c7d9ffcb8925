"""A pass that does not complete, on the shared cluster (nothing here stops or freezes the API server):
an apply whose answer is lost, a pass that fails on one object (what the inventory records as attempted
and as applied), and what `diff` says when it cannot plan an object.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import git
import pytest

from gitops_sync.cluster.client import Client
from gitops_sync.engine import Engine, PassOptions, SourceOptions, default_inventory_name, load
from gitops_sync.errors import ApiTimeoutError
from gitops_sync.plan.changeset import Action
from tests.conftest import KubeCluster
from tests.reliability.conftest import Recorder

pytestmark = pytest.mark.cluster
ACTOR = git.Actor("Test", "test@example.invalid")


def _cm(name: str, value: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": value}})


class LostAnswerClient(Client):
    """Sends every apply (so the server really applies it, or not) and then reports a read timeout."""

    def __init__(self, *args: Any, send: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.send = send
        self.lost = 0

    def request_status(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        query = kwargs.get("query") or {}
        if method == "PATCH" and "/configmaps/lost-" in path and not query.get("dryRun"):
            self.lost += 1
            if self.send:
                super().request_status(method, path, **kwargs)
            raise ApiTimeoutError(f"API server {self.server} unreachable: no answer to PATCH within 30s")
        return super().request_status(method, path, **kwargs)


@pytest.mark.parametrize("sent", [True, False], ids=["applied", "not-applied"])
def test_an_apply_whose_answer_is_lost_is_re_read(
    kube: KubeCluster, namespace: str, tmp_path: Path, reliability: Recorder, sent: bool
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    for i in range(3):
        (repo / f"lost-{i}.json").write_text(_cm(f"lost-{i}", "1"))
    (repo / "fine.json").write_text(_cm("fine", "1"))
    checkout, objects = load(SourceOptions(repo=str(repo)))
    opts = PassOptions(namespace=namespace, name=f"t-{namespace}")
    with LostAnswerClient(kube.kubeconfig, send=sent) as client:
        engine = Engine(client)
        cs = engine.run(checkout, engine.resolve(objects, opts), opts, apply=True)
        lost = client.lost
    by_name = {e.key.name: e for e in cs.entries}
    assert lost == 3
    assert by_name["fine"].action is Action.CREATE
    exists = kube.find("configmap", "lost-0", namespace) is not None
    assert exists is sent
    for i in range(3):
        e = by_name[f"lost-{i}"]
        if sent:  # the server applied it: re-read, our intent is live, so it is reported as done
            assert e.action is Action.CREATE and "a re-read shows it applied" in e.message, e
        else:
            assert e.action is Action.ERROR and "outcome unknown" in e.message, e
            assert "re-read does not show this intent" in e.message, e
    assert cs.has_errors is not sent
    reliability.record(
        area="API server",
        fault="the answer to an apply is lost (read timeout after the request was sent; "
        + ("the server applied it" if sent else "the server never got it")
        + ")",
        outcome="re-read before reporting: "
        + ("reported 'created' (our intent hash is live)" if sent else "reported 'outcome unknown', exit 2"),
        checked="the report matches the live object (exists: " + str(exists).lower() + ")",
        figures="3 lost answers, 1 normal apply",
    )


def _gs(kube: KubeCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gitops_sync", *args], env=kube.env, capture_output=True, text=True, timeout=180
    )


def _parent(kube: KubeCluster, namespace: str, name: str) -> dict[str, str]:
    doc = kube.get("configmap", name, namespace)
    return dict(doc["metadata"].get("annotations") or {})


def test_a_failed_pass_records_the_attempted_revision_apart_from_the_applied_one(
    kube: KubeCluster, namespace: str, tmp_path: Path, reliability: Recorder
) -> None:
    repo = git.Repo.init(tmp_path / "repo", initial_branch="main")
    top = Path(repo.working_tree_dir or "")

    def commit(files: dict[str, str | None]) -> str:
        for name, text in files.items():
            if text is None:
                (top / name).unlink()
            else:
                (top / name).write_text(text)
        repo.git.add("--all")
        return repo.index.commit("change", author=ACTOR, committer=ACTOR).hexsha

    name = default_inventory_name(str(top), None)
    args = ["--repo", str(top), "-n", namespace, "-o", "json"]
    good = commit({"a.json": _cm("a", "1"), "old.json": _cm("old", "1")})
    r = _gs(kube, "sync", "--prune", *args)
    assert r.returncode == 0, r.stderr
    ann = _parent(kube, namespace, name)
    assert ann["gitops-sync.io/attempted-revision"] == ann["gitops-sync.io/applied-revision"] == good

    # A commit the API server rejects one object of (an invalid name): the pass fails, nothing is pruned.
    bad = commit({"a.json": _cm("a", "2"), "bad.json": _cm("Not_Valid", "1"), "old.json": None})
    r = _gs(kube, "sync", "--prune", *args)
    assert r.returncode == 2, r.stderr
    ann = _parent(kube, namespace, name)
    assert ann["gitops-sync.io/attempted-revision"] == bad, ann
    assert ann["gitops-sync.io/applied-revision"] == good, ann
    assert kube.find("configmap", "old", namespace) is not None

    d = _gs(kube, "diff", "--prune", *args)
    assert d.returncode == 2, d.stderr
    errors = json.loads(d.stdout)["errors"]
    assert any("prune not evaluated: some objects could not be planned" in e for e in errors), errors
    assert not any("failed to apply" in e for e in errors), errors

    fixed = commit({"bad.json": None})
    r = _gs(kube, "sync", "--prune", *args)
    assert r.returncode == 0, r.stderr
    ann = _parent(kube, namespace, name)
    assert ann["gitops-sync.io/attempted-revision"] == ann["gitops-sync.io/applied-revision"] == fixed, ann
    assert kube.find("configmap", "old", namespace) is None

    again = _gs(kube, "sync", "--prune", *args, "--log-level", "info", "--log-format", "json")
    assert again.returncode == 0, again.stderr
    stats = [json.loads(line) for line in again.stderr.splitlines() if '"requests"' in line]
    assert stats and stats[-1]["writes"] == 0, again.stderr
    reliability.record(
        area="API server",
        fault="a commit with one object the API server rejects, synced with --prune",
        outcome="exit 2; the inventory records it as attempted-revision, applied-revision stays the last clean "
        "one; diff says 'prune not evaluated'",
        checked="nothing pruned on the failed pass; the next clean pass records both and prunes; a no-op pass "
        "writes nothing",
        figures=f"no-op pass: {stats[-1]['writes']} writes",
    )
