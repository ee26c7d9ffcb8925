"""Git fails under `sync` and the daemon: the remote moved away, the branch deleted, history force-pushed
(to an older commit and to a rewritten one), a commit that does not render. A failure must keep the
last good state (no object deleted or replaced: uids survive), report the error and never prune; a
force-push is followed (Git is the truth; `sync` back to an older commit only with --allow-rollback) and
prunes exactly what the new tip no longer has. The remote is a local bare repository served over
file://; the API server is not touched, so the shared cluster serves. Rows go to RELIABILITY.md through
the `reliability` recorder.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import git
import pytest

from tests.integration.daemon_support import ACTOR, Daemon, wait_until
from tests.reliability.workload import cm_version, configmap, drift_configmap, live_objects, no_traceback, run_sync

if TYPE_CHECKING:
    from tests.conftest import KubeCluster
    from tests.reliability.conftest import Recorder

pytestmark = pytest.mark.cluster

BROKEN = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: broken\n data: [unclosed\n"


class Remote:
    """A bare repository (the remote, file://) and a work tree that pushes to it."""

    def __init__(self, root: Path) -> None:
        self.bare = root / "remote.git"
        self.away = root / "remote.git.moved"
        git.Repo.init(self.bare, bare=True, initial_branch="main")
        self.tree = git.Repo.init(root / "work", initial_branch="main")
        self.tree.create_remote("origin", str(self.bare))
        self.url = f"file://{self.bare}"

    def commit(self, files: dict[str, str | None], message: str) -> str:
        root = Path(self.tree.working_tree_dir or ".")
        for name, text in files.items():
            if text is None:
                (root / name).unlink(missing_ok=True)
            else:
                (root / name).write_text(text)
        self.tree.git.add("--all")
        return self.tree.index.commit(message, author=ACTOR, committer=ACTOR).hexsha

    def push(self, force: bool = False) -> None:
        self.tree.git.push(*(["--force"] if force else []), "origin", "main")

    def reset(self, sha: str) -> None:
        self.tree.git.reset("--hard", sha)

    def rewrite(self, base: str, files: dict[str, str | None], message: str) -> str:
        """`base` amended (same parents, other content): history rewritten, as after a rebase."""
        self.reset(base)
        self.commit(files, "to be amended")
        self.tree.git.reset("--soft", base)
        self.tree.git.commit("--amend", "-m", message, f"--author={ACTOR.name} <{ACTOR.email}>")
        return self.tree.head.commit.hexsha

    def move_away(self) -> None:
        self.bare.rename(self.away)

    def move_back(self) -> None:
        self.away.rename(self.bare)

    def delete_branch(self) -> None:
        git.Repo(self.bare).git.update_ref("-d", "refs/heads/main")


def _objects(version: str, names: range) -> dict[str, str | None]:
    return {f"c-{i}.json": configmap(f"c-{i}", version) for i in names}


def _uids(kube: KubeCluster, ns: str) -> dict[str, str]:
    return {name: o.uid for (kind, name), o in live_objects(kube.env, ns, "configmaps").items() if name != "fault-inv"}


def test_git_faults_under_sync(kube: KubeCluster, namespace: str, reliability: Recorder, tmp_path: Path) -> None:
    env, ns, cache = kube.env, namespace, tmp_path / "cache"
    remote = Remote(tmp_path)
    a = remote.commit(_objects("v1", range(6)), "A: c-0..c-5")
    remote.push()

    def sync(*more: str) -> tuple[int, str, dict[str, int], str]:
        r = run_sync(env, remote.url, ns, "--revision", "main", "--prune", *more, cache=cache)
        assert no_traceback(r.stderr), r.stderr[-2000:]
        return r.code, r.report.get("revision", ""), r.summary, r.stderr

    code, rev, _, err = sync()
    assert (code, rev) == (0, a), err[-2000:]
    good = _uids(kube, ns)
    assert len(good) == 6

    # The remote is unreachable (its path moved away).
    remote.move_away()
    code, _, _, err = sync()
    assert code == 2 and "error:" in err and str(remote.bare) in err, err[-2000:]
    assert _uids(kube, ns) == good
    remote.move_back()
    unreachable_msg = _error_line(err)

    # The branch is deleted on the remote.
    remote.delete_branch()
    code, _, _, err = sync()
    assert code == 2 and "main" in err, err[-2000:]
    assert _uids(kube, ns) == good
    branch_msg = _error_line(err)
    remote.push()

    # A commit that fails to render, and that also drops c-5: no prune may follow from it.
    remote.commit({"broken.yaml": BROKEN, "c-5.json": None}, "broken")
    remote.push()
    code, _, _, err = sync()
    assert code == 2 and "broken.yaml" in err, err[-2000:]
    assert _uids(kube, ns) == good, "the broken commit changed or pruned something"
    render_msg = _error_line(err)

    # Fixed: the next sync converges, and now c-5 (gone from Git in a good commit) is pruned.
    fixed = remote.commit({"broken.yaml": configmap("fixed", "v1")}, "fixed")
    remote.push()
    code, rev, summary, err = sync()
    assert (code, rev, summary["prune"], summary["create"]) == (0, fixed, 1, 1), err[-2000:]
    now = _uids(kube, ns)
    assert set(now) == {f"c-{i}" for i in range(5)} | {"fixed"}
    assert all(now[n] == good[n] for n in now if n != "fixed")

    # History force-pushed back to A. From `sync` alone, an older commit cannot be told from an older pipeline
    # finishing last (issue 20, item 1): refused, nothing written, until --allow-rollback says it is meant.
    remote.reset(a)
    remote.push(force=True)
    code, rev, summary, err = sync()
    assert code == 2 and "--allow-rollback" in err, err[-2000:]
    assert _uids(kube, ns) == now, "a refused rollback changed or pruned something"
    # Then followed: exactly what A lacks ("fixed") is pruned, c-5 comes back.
    code, rev, summary, err = sync("--allow-rollback")
    assert (code, rev, summary["prune"]) == (0, a, 1), err[-2000:]
    back = _uids(kube, ns)
    assert set(back) == set(good) and all(back[n] == good[n] for n in good if n != "c-5")

    # History rewritten (A amended: c-0 changes) and force-pushed: followed.
    rewritten = remote.rewrite(a, {"c-0.json": configmap("c-0", "v2")}, "A rewritten: c-0 v2")
    remote.push(force=True)
    code, rev, summary, err = sync()
    assert (code, rev, summary["update"], summary["prune"]) == (0, rewritten, 1, 0), err[-2000:]
    assert _uids(kube, ns) == back
    again = run_sync(env, remote.url, ns, "--revision", "main", "--prune", cache=cache)
    assert again.code == 0 and again.writes == 0

    for fault, msg in (
        ("remote unreachable (bare repository moved away)", unreachable_msg),
        ("branch deleted on the remote", branch_msg),
        ("a commit that fails to render (and drops an object)", render_msg),
    ):
        reliability.record(
            area="Git (sync)",
            fault=f"`sync --prune` from file://: {fault}",
            outcome="exit 2, no traceback; the next sync after the fix exits 0",
            checked="all 6 objects kept their uid: nothing applied from the bad state, nothing pruned",
            figures=f"message: {_short(msg, tmp_path)[:110]!r}",
        )
    reliability.record(
        area="Git (sync)",
        fault="`sync --prune` after a force-push of the branch to an older commit, then to a rewritten one",
        outcome="to an older commit: refused (exit 2, nothing written) until --allow-rollback, then followed; "
        "to a rewritten one: followed (exit 0, the report's revision is the new tip); a further sync writes nothing",
        checked="only what the new tip lacks was pruned (1 object); every other object kept its uid",
        figures="2 force-pushes, 1 prune each time the tip dropped an object, 0 otherwise",
    )


def _error_line(stderr: str) -> str:
    return next((line for line in stderr.splitlines() if line.startswith("error:")), stderr.strip()[-200:])


def _short(msg: str, tmp: Path) -> str:
    """The message as a RELIABILITY.md cell: the test's temporary directory shortened."""
    return msg.replace(f"file://{tmp}/", "file://…/").replace(f"{tmp}/", "…/")


def test_git_faults_under_daemon(kube: KubeCluster, namespace: str, reliability: Recorder, tmp_path: Path) -> None:
    env, ns = kube.env, namespace
    remote = Remote(tmp_path)
    a = remote.commit(_objects("v1", range(6)), "A: c-0..c-5")
    remote.push()
    args = [
        "--repo",
        remote.url,
        "--revision",
        "main",
        "-n",
        ns,
        "--name",
        "fault-inv",
        "--prune",
        "--interval",
        "1",
        "--cache-dir",
        str(tmp_path / "cache"),
    ]
    rows: list[tuple[str, str, str]] = []
    with Daemon(args, env, tmp_path / "daemon.log") as d:
        d.wait_ready(60)
        good = _uids(kube, ns)
        assert len(good) == 6

        def failing(what: str, drifted: str) -> tuple[str, float]:
            t0 = time.monotonic()
            wait_until(f"/status to report {what}", lambda: bool(d.status()["daemon"]["source"]["error"]), 30, 0.1)
            took = time.monotonic() - t0
            assert d.metric("gitops_sync_source_healthy") == 0
            assert d.get("/healthz")[0] == 200
            # The last good state is still enforced: drift is corrected while the source is broken.
            drift_configmap(env, ns, drifted)  # another object each time: 3 edits of one field are a fight
            wait_until(
                "drift corrected while the source is broken", lambda: cm_version(env, ns, drifted) == "v1", 20, 0.1
            )
            time.sleep(2)  # a few more polls of the broken source
            assert _uids(kube, ns) == good, f"{what}: something was deleted or replaced"
            return str(d.status()["daemon"]["source"]["error"]), took

        def healthy_again(rev: str) -> float:
            return wait_until(
                "the source healthy again",
                lambda: not d.status()["daemon"]["source"]["error"] and d.status()["daemon"]["appliedRevision"] == rev,
                30,
                0.1,
            )

        remote.move_away()
        msg, took = failing("the unreachable remote", "c-1")
        remote.move_back()
        rows.append(
            (
                "remote unreachable (bare repository moved away)",
                msg,
                f"reported in {took:.1f} s; recovered in {healthy_again(a):.1f} s",
            )
        )

        remote.delete_branch()
        msg, took = failing("the deleted branch", "c-2")
        remote.push()
        rows.append(
            ("branch deleted on the remote", msg, f"reported in {took:.1f} s; recovered in {healthy_again(a):.1f} s")
        )

        bad = remote.commit({"broken.yaml": BROKEN, "c-5.json": None}, "broken")
        remote.push()
        msg, took = failing("the broken commit", "c-3")
        status = d.status()["daemon"]
        assert status["source"]["errorRevision"] == bad and status["appliedRevision"] == a
        assert "broken.yaml" in msg
        fixed = remote.commit({"broken.yaml": configmap("fixed", "v1")}, "fixed")
        remote.push()
        rec = healthy_again(fixed)
        wait_until("c-5 pruned after the fix", lambda: "c-5" not in _uids(kube, ns), 20, 0.1)
        rows.append(
            (
                "a commit that fails to render (and drops an object)",
                msg,
                f"reported in {took:.1f} s; the fix applied (and c-5 pruned) in {rec:.1f} s",
            )
        )
        assert d.logged("pruned") and all("c-5" in p["object"] for p in d.logged("pruned"))

        remote.reset(a)
        remote.push(force=True)
        t_back = healthy_again(a)
        wait_until("the older commit enforced", lambda: set(_uids(kube, ns)) == set(good), 20, 0.1)
        rewritten = remote.rewrite(a, {"c-0.json": configmap("c-0", "v2")}, "A rewritten: c-0 v2")
        remote.push(force=True)
        t_rew = healthy_again(rewritten)
        wait_until("the rewritten commit enforced", lambda: cm_version(env, ns, "c-0") == "v2", 20, 0.1)
        now = _uids(kube, ns)
        assert all(now[n] == good[n] for n in good if n != "c-5")
        assert d.stop() == 0
    log_text = (tmp_path / "daemon.log").read_text()
    assert no_traceback(log_text)

    for fault, msg, figures in rows:
        reliability.record(
            area="Git (daemon)",
            fault=f"`run --prune` polling file:// every 1 s: {fault}",
            outcome="/status source.error and the source-healthy metric report it; /healthz stays 200; "
            "the last good revision stays enforced (drift corrected meanwhile); recovers by itself",
            checked="all objects kept their uid while the source was bad: nothing pruned or replaced",
            figures=f"{figures}; error: {_short(msg, tmp_path)[:90]!r}",
        )
    reliability.record(
        area="Git (daemon)",
        fault="`run --prune`: branch force-pushed to an older commit, then to a rewritten one",
        outcome="followed both: appliedRevision is the new tip, its objects enforced",
        checked="only what the new tip lacks was pruned; the other objects kept their uid",
        figures=f"applied {t_back:.1f} s and {t_rew:.1f} s after the push (1 s polling)",
    )
