"""A repository with a Git submodule, synced with `--prune` from a work tree and by URL (issue 20, item 5).

A work tree with the submodule checked out and the same repository by URL are one source (one inventory,
from the work tree's `origin`). gitops-sync does not fetch submodules: before, a fetched commit was
materialised with the submodule as an empty directory, rendered as such, and `sync --prune` by URL deleted
every object the submodule holds. Now the URL sync fails with exit 2 naming the submodule and prunes
nothing, and so does the work tree once the submodule is no longer checked out (`git submodule deinit`).
Real repositories (`git submodule add` of a local repository, file transport allowed for that), real
control plane (the shared one; a namespace of its own). No `--name`: the inventory is the source's own.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import git
import pytest

from tests.integration.daemon_support import ACTOR
from tests.integration.test_sync import gs, report
from tests.reliability.workload import configmap_files, live_objects, no_traceback

if TYPE_CHECKING:
    from tests.conftest import KubeCluster
    from tests.reliability.conftest import Recorder

pytestmark = pytest.mark.cluster

SUB = 5  # ConfigMaps in the submodule
TOP = 5  # and in the superproject itself


def git_run(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "protocol.file.allow=always", *args], cwd=cwd, check=True, capture_output=True)


def commit(repo: git.Repo, files: dict[str, str | None]) -> None:
    top = Path(repo.working_tree_dir or "")
    for name, text in files.items():
        (top / name).parent.mkdir(parents=True, exist_ok=True)
        (top / name).write_text(text or "")
    repo.git.add("--all")
    repo.index.commit("change", author=ACTOR, committer=ACTOR)


def sync(kube: KubeCluster, repo: str, ns: str, cache: Path) -> tuple[int, dict[str, Any], str]:
    done = gs(kube, "sync", "--repo", repo, "-n", ns, "--prune", "-o", "json", "--cache-dir", str(cache), timeout=300)
    assert no_traceback(done.stderr), done.stderr[-2000:]
    return done.returncode, report(done), done.stderr


def test_a_submodule_is_never_pruned_by_a_sync_that_does_not_have_its_files(
    kube: KubeCluster, namespace: str, tmp_path: Path, reliability: Recorder
) -> None:
    env, ns, cache = kube.env, namespace, tmp_path / "cache"
    lib = git.Repo.init(tmp_path / "lib", initial_branch="main")
    commit(lib, configmap_files(SUB, "v1", prefix="sub"))
    work = git.Repo.init(tmp_path / "work", initial_branch="main")
    top = Path(work.working_tree_dir or "")
    git_run(top, "submodule", "add", "-q", str(tmp_path / "lib"), "vendor/lib")
    commit(work, configmap_files(TOP, "v1", prefix="top"))
    bare = git.Repo.init(tmp_path / "remote.git", bare=True, initial_branch="main")
    work.create_remote("origin", str(bare.git_dir))
    work.git.push("origin", "main")
    url = f"file://{bare.git_dir}"

    code, report, err = sync(kube, str(top), ns, cache)
    assert code == 0 and report["summary"]["create"] == SUB + TOP, err[-2000:]
    inventory = report.get("inventory")
    uids = {name: o.uid for (_, name), o in live_objects(env, ns, "configmaps").items()}
    assert {f"sub-{i:03d}" for i in range(SUB)} <= set(uids)

    code, report, err = sync(kube, url, ns, cache)  # the same source by URL: the commit has no submodule files
    after = {name: o.uid for (_, name), o in live_objects(env, ns, "configmaps").items()}
    assert after == uids, f"changed or pruned: {sorted(set(uids) ^ set(after))}"
    assert code == 2, err[-2000:]
    assert "Git submodule vendor/lib" in err and "refusing to render it as an empty directory" in err, err[-2000:]
    url_message = next(line for line in err.splitlines() if line.startswith("error:"))

    git_run(top, "submodule", "deinit", "-q", "-f", "vendor/lib")  # the work tree: not checked out any more
    code, report, err = sync(kube, str(top), ns, cache)
    assert code == 2 and "Git submodule vendor/lib" in err and "git submodule update --init" in err, err[-2000:]
    assert {name: o.uid for (_, name), o in live_objects(env, ns, "configmaps").items()} == uids

    git_run(top, "submodule", "update", "-q", "--init")  # checked out again: the same source, in sync
    code, report, err = sync(kube, str(top), ns, cache)
    assert code == 0 and report.get("inventory") == inventory, err[-2000:]
    assert report["summary"].get("prune", 0) == 0 and report["summary"].get("create", 0) == 0
    assert {name: o.uid for (_, name), o in live_objects(env, ns, "configmaps").items()} == uids

    reliability.record(
        area="Git (sync)",
        fault=f"a repository with a Git submodule ({SUB} ConfigMaps; {TOP} more outside it): synced with --prune "
        "from a work tree with it checked out, then by file:// URL (same source, same inventory), then from the "
        "work tree after `git submodule deinit`",
        outcome="URL: exit 2 naming the submodule (gitops-sync does not fetch submodules); deinit: exit 2 "
        "naming it with `git submodule update --init`; checked out again: exit 0, nothing to do",
        checked=f"all {SUB + TOP} ConfigMaps kept their uid: nothing of the submodule pruned (before, the URL "
        f"sync deleted all {SUB})",
        figures=f"exit 0 / 2 / 2 / 0; 0 of {SUB} submodule objects pruned; message {url_message[:64]!r}…",
    )
