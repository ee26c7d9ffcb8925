"""Source identity on the real control plane: one inventory per source, never one for two.

Two teams whose repositories are both called `deploy` keep each other's objects; a clone and its remote
URL, `.` and `./` are one inventory; a parent of another source is refused; inventories of the old naming
are taken over without a prune storm or a leftover; two daemons of two sources elect two leaders.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import git
import pytest
from daemon_support import Daemon, GitRepo, configmap, wait_until

from gitops_sync.apply.inventory import applyset_id
from gitops_sync.cluster.lease import lease_name
from gitops_sync.conventions import ADOPTED, PART_OF, SOURCE, SOURCE_IDENTITY
from gitops_sync.source.identity import legacy_inventory_name
from tests.conftest import KubeCluster

pytestmark = pytest.mark.cluster


def gs(kube: KubeCluster, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gitops_sync", *args],
        env={**kube.env, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def doc(r: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert r.stdout.strip(), f"no report (rc={r.returncode}):\n{r.stderr}"
    out: dict[str, Any] = json.loads(r.stdout)
    return out


def actions(r: subprocess.CompletedProcess[str]) -> dict[str, str]:
    return {o["name"]: o["action"] for o in doc(r)["objects"]}


def get(kube: KubeCluster, ref: str, ns: str) -> dict[str, Any] | None:
    return kube.find(ref, namespace=ns)


def part_of(kube: KubeCluster, ref: str, ns: str) -> str:
    obj = get(kube, ref, ns)
    assert obj is not None, f"{ref} is gone"
    return str(obj["metadata"].get("labels", {}).get(PART_OF, ""))


def work_tree(path: Path, files: dict[str, str]) -> git.Repo:
    repo = GitRepo(path, files).repo
    return repo


def test_two_teams_with_repositories_called_deploy_keep_each_others_objects(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    # team A syncs from its remote URL (CI), team B from a work tree; both repositories are called deploy
    a_work = work_tree(tmp_path / "team-a" / "work", {"apps/a.yaml": configmap("team-a-settings", {"v": "a"})})
    bare = git.Repo.init(tmp_path / "team-a" / "deploy.git", bare=True, initial_branch="main")
    a_work.create_remote("origin", str(bare.git_dir)).push("main")
    url_a = f"file://{bare.git_dir}"
    repo_b = tmp_path / "team-b" / "deploy"
    GitRepo(repo_b, {"apps/b.yaml": configmap("team-b-settings", {"v": "b"})})
    assert legacy_inventory_name(url_a, "apps") == legacy_inventory_name(str(repo_b), "apps"), "the old collision"

    def sync(repo: str) -> subprocess.CompletedProcess[str]:
        return gs(kube, "sync", "--repo", repo, "--path", "apps", "--prune", "-n", namespace, "-o", "json")

    ra = sync(url_a)
    assert ra.returncode == 0 and actions(ra) == {"team-a-settings": "create"}, ra.stdout + ra.stderr
    rb = sync(str(repo_b))
    assert rb.returncode == 0, rb.stdout + rb.stderr
    assert actions(rb) == {"team-b-settings": "create"}, "team B's prune must not touch team A's ConfigMap"
    ra = sync(url_a)
    assert ra.returncode == 0 and actions(ra) == {"team-a-settings": "unchanged"}, ra.stdout
    assert get(kube, "configmap/team-a-settings", namespace) and get(kube, "configmap/team-b-settings", namespace)
    inv_a, inv_b = doc(ra)["inventory"], doc(rb)["inventory"]
    assert inv_a["name"] != inv_b["name"] and inv_a["namespace"] == inv_b["namespace"] == namespace
    assert inv_a["sourceIdentity"] == f"{Path(bare.git_dir).resolve()}//apps"
    assert part_of(kube, "configmap/team-a-settings", namespace) == applyset_id(inv_a["name"], namespace)
    parent = get(kube, f"configmap/{inv_b['name']}", namespace)
    assert parent is not None and parent["metadata"]["annotations"][SOURCE_IDENTITY] == inv_b["sourceIdentity"]
    # every report header names the inventory
    table = gs(kube, "diff", "--repo", str(repo_b), "--path", "apps", "-n", namespace)
    md = gs(kube, "diff", "--repo", str(repo_b), "--path", "apps", "-n", namespace, "-o", "markdown")
    assert table.returncode == md.returncode == 0, table.stdout + table.stderr
    for out in (table.stdout, md.stdout):
        assert f"{namespace}/{inv_b['name']}" in out.replace("\n", ""), out


def test_a_clone_and_its_remote_url_and_dot_spellings_are_one_inventory(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    files = {
        "clusters/prod/keep.yaml": configmap("keep", {"v": "1"}),
        "clusters/prod/drop.yaml": configmap("drop", {"v": "1"}),
    }
    origin = work_tree(tmp_path / "origin-work", files)
    bare = git.Repo.init(tmp_path / "remote.git", bare=True, initial_branch="main")
    origin.create_remote("origin", str(bare.git_dir)).push("main")
    url = f"file://{bare.git_dir}"
    clone_dir = tmp_path / "clone"
    git.Repo.clone_from(str(bare.git_dir), clone_dir)

    r = gs(kube, "sync", "--repo", url, "--path", "clusters/prod", "--prune", "-n", namespace, "-o", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    name = doc(r)["inventory"]["name"]
    # the README's pull-request step in the clone: nothing to do, no "would record ownership" churn
    for spelling in (".", "./", str(clone_dir)):
        d = gs(
            kube, "diff", "--repo", spelling, "--path", "clusters/prod", "-n", namespace, "-o", "json", cwd=clone_dir
        )
        assert d.returncode == 0, f"--repo {spelling}: {d.stdout}{d.stderr}"
        assert doc(d)["inventory"]["name"] == name
        assert set(actions(d).values()) == {"unchanged"}
    d = gs(kube, "diff", "--repo", "./clusters", "--path", "prod", "-n", namespace, "-o", "json", cwd=clone_dir)
    assert d.returncode == 0 and doc(d)["inventory"]["name"] == name, d.stdout + d.stderr

    # a developer removes an object in the clone and syncs from there: pruned (deleted), not released
    (clone_dir / "clusters" / "prod" / "drop.yaml").unlink()
    r = gs(
        kube, "sync", "--repo", ".", "--path", "clusters/prod", "--prune", "-n", namespace, "-o", "json", cwd=clone_dir
    )
    assert r.returncode == 0, r.stdout + r.stderr
    dropped = [o for o in doc(r)["objects"] if o["name"] == "drop"]
    assert dropped and dropped[0]["action"] == "prune" and dropped[0]["message"] == "deleted (left Git)"
    assert get(kube, "configmap/drop", namespace) is None and get(kube, "configmap/keep", namespace)


def test_a_parent_of_another_source_is_refused_naming_both(kube: KubeCluster, namespace: str, tmp_path: Path) -> None:
    repo_a = GitRepo(tmp_path / "a" / "deploy", {"a.yaml": configmap("from-a", {"v": "a"})}).path
    repo_b = GitRepo(tmp_path / "b" / "deploy", {"b.yaml": configmap("from-b", {"v": "b"})}).path
    base = ["-n", namespace, "--name", "shared-name", "--prune", "-o", "json"]
    r = gs(kube, "sync", "--repo", str(repo_a), *base)
    assert r.returncode == 0, r.stdout + r.stderr
    for command in ("sync", "diff"):
        r = gs(kube, command, "--repo", str(repo_b), *base)
        assert r.returncode == 2, r.stdout + r.stderr
        assert str(repo_a.resolve()) in r.stderr and str(repo_b.resolve()) in r.stderr, r.stderr
        assert "--name" in r.stderr and "Traceback" not in r.stderr
        failed = doc(r)  # -o json: the error document still names the inventory and both sources
        assert failed["inventory"] == {
            "name": "shared-name",
            "namespace": namespace,
            "sourceIdentity": str(repo_b.resolve()),
        }
        assert str(repo_a.resolve()) in failed["errors"][0]
    assert get(kube, "configmap/from-a", namespace) is not None, "nothing of A was pruned"
    assert get(kube, "configmap/from-b", namespace) is None, "nothing of B was applied"

    # a parent written before identities existed records none: accepted, and from then on it records B
    kube.kubectl("annotate", "configmap/shared-name", "-n", namespace, f"{SOURCE_IDENTITY}-")
    r = gs(kube, "sync", "--repo", str(repo_b), "-n", namespace, "--name", "shared-name", "-o", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    parent = get(kube, "configmap/shared-name", namespace)
    assert parent is not None and parent["metadata"]["annotations"][SOURCE_IDENTITY] == str(repo_b.resolve())


def _legacy_state(kube: KubeCluster, repo: str, ns: str, cwd: Path, *, prune: bool) -> str:
    """What versions before source identities left behind: the old name and id, no identity recorded, and
    the source label spelled as they spelled it (`repo//path`, also for a local `.`)."""
    legacy = legacy_inventory_name(repo, "apps")
    r = gs(
        kube,
        "sync",
        "--repo",
        repo,
        "--path",
        "apps",
        "-n",
        ns,
        "--name",
        legacy,
        "-o",
        "json",
        *(["--prune"] if prune else []),
        cwd=cwd,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    kube.kubectl(
        "annotate", f"configmap/{legacy}", "-n", ns, f"{SOURCE_IDENTITY}-", f"{SOURCE}={repo}//apps", "--overwrite"
    )
    return legacy


def test_an_inventory_of_the_old_naming_is_taken_over_with_prune(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    kube.kubectl("create", "configmap", "pre-existing", "-n", namespace, "--from-literal=v=1")
    files = {f"apps/{n}.yaml": configmap(n, {"v": "1"}) for n in ("one", "two", "leaves", "pre-existing")}
    work = GitRepo(tmp_path / "deploy", files)
    legacy = _legacy_state(kube, ".", namespace, work.path, prune=True)
    legacy_id = applyset_id(legacy, namespace)
    before = {n: get(kube, f"configmap/{n}", namespace) for n in ("one", "two", "leaves", "pre-existing")}
    assert all(o and o["metadata"]["labels"][PART_OF] == legacy_id for o in before.values())

    work.commit({"apps/leaves.yaml": None, "apps/pre-existing.yaml": None}, "two objects leave Git")
    r = gs(kube, "sync", "--repo", ".", "--path", "apps", "--prune", "-n", namespace, "-o", "json", cwd=work.path)
    assert r.returncode == 0, r.stdout + r.stderr
    name = doc(r)["inventory"]["name"]
    assert name != legacy
    got = actions(r)
    # no prune storm: exactly the two that left Git, the one we created deleted, the adopted one released
    assert got == {"one": "update", "two": "update", "leaves": "prune", "pre-existing": "prune"}, got
    msgs = {o["name"]: o["message"] for o in doc(r)["objects"]}
    assert msgs["leaves"] == "deleted (left Git)" and msgs["pre-existing"].startswith("release")
    new_id = applyset_id(name, namespace)
    for n in ("one", "two"):
        live = get(kube, f"configmap/{n}", namespace)
        assert live and live["metadata"]["uid"] == before[n]["metadata"]["uid"]  # type: ignore[index]
        assert live["metadata"]["labels"][PART_OF] == new_id
        assert ADOPTED not in live["metadata"].get("annotations", {}), "moved, not adopted: prune may delete it"
    assert get(kube, "configmap/leaves", namespace) is None
    kept = get(kube, "configmap/pre-existing", namespace)
    assert kept is not None and PART_OF not in kept["metadata"].get("labels", {})
    assert get(kube, f"configmap/{legacy}", namespace) is None, "the old parent is gone"
    parent = get(kube, f"configmap/{name}", namespace)
    assert parent and parent["metadata"]["annotations"][SOURCE_IDENTITY] == doc(r)["inventory"]["sourceIdentity"]

    r = gs(kube, "diff", "--repo", ".", "--path", "apps", "--prune", "-n", namespace, "-o", "json", cwd=work.path)
    assert r.returncode == 0 and set(actions(r).values()) == {"unchanged"}, r.stdout + r.stderr


def test_an_inventory_of_the_old_naming_is_taken_over_without_prune_and_pruned_later(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    work = GitRepo(tmp_path / "deploy", {f"apps/{n}.yaml": configmap(n, {"v": "1"}) for n in ("stays", "leaves")})
    repo = str(work.path)
    legacy = _legacy_state(kube, repo, namespace, tmp_path, prune=False)
    work.commit({"apps/leaves.yaml": None})
    r = gs(kube, "sync", "--repo", repo, "--path", "apps", "-n", namespace, "-o", "json")
    assert r.returncode == 0 and actions(r) == {"stays": "update"}, r.stdout + r.stderr
    new_id = applyset_id(doc(r)["inventory"]["name"], namespace)
    assert part_of(kube, "configmap/stays", namespace) == new_id
    assert part_of(kube, "configmap/leaves", namespace) == new_id, "left Git under the old id: still ours"
    assert get(kube, f"configmap/{legacy}", namespace) is None
    r = gs(kube, "sync", "--repo", repo, "--path", "apps", "--prune", "-n", namespace, "-o", "json")
    assert r.returncode == 0 and actions(r) == {"stays": "unchanged", "leaves": "prune"}, r.stdout + r.stderr
    assert get(kube, "configmap/leaves", namespace) is None


@pytest.mark.parametrize("spelling", ["absolute", "relative"])
def test_an_old_inventory_of_another_source_is_left_alone(
    kube: KubeCluster, namespace: str, tmp_path: Path, spelling: str
) -> None:
    mine = GitRepo(tmp_path / "mine" / "deploy", {"apps/mine.yaml": configmap("mine", {"v": "1"})}).path
    theirs = GitRepo(tmp_path / "theirs" / "deploy", {"apps/theirs.yaml": configmap("theirs", {"v": "1"})}).path
    # `--repo .` in both: the same old name and the same recorded spelling; their commit is not in my repository
    repo_of = {"absolute": (str(theirs), str(mine)), "relative": (".", ".")}[spelling]
    legacy = _legacy_state(kube, repo_of[0], namespace, theirs, prune=False)
    assert legacy == legacy_inventory_name(repo_of[1], "apps")
    r = gs(kube, "sync", "--repo", repo_of[1], "--path", "apps", "--prune", "-n", namespace, "-o", "json", cwd=mine)
    assert r.returncode == 0 and actions(r) == {"mine": "create"}, r.stdout + r.stderr
    assert part_of(kube, "configmap/theirs", namespace) == applyset_id(legacy, namespace)
    assert get(kube, f"configmap/{legacy}", namespace) is not None


def test_two_daemons_of_two_sources_both_lead_and_converge(kube: KubeCluster, namespace: str, tmp_path: Path) -> None:
    repos = [
        GitRepo(tmp_path / team / "deploy", {"apps/cm.yaml": configmap(f"{team}-cm", {"v": "1"})})
        for team in ("team-a", "team-b")
    ]
    fast = ["--lease-duration", "4", "--renew-deadline", "3", "--retry-period", "0.5", "--interval", "0.5"]
    daemons = [
        Daemon(
            ["--repo", str(r.path), "--path", "apps", "-n", namespace, "--prune", "--leader-elect", *fast],
            kube.env,
            tmp_path / f"d{i}.log",
        )
        for i, r in enumerate(repos)
    ]
    try:
        for d in daemons:
            d.wait_ready(60)
        wait_until("both daemons to lead", lambda: all(d.status()["daemon"]["leader"] for d in daemons), 20, 0.2)
        status = [d.status() for d in daemons]
        names = [s["inventory"]["name"] for s in status]
        assert names[0] != names[1]
        for s, name in zip(status, names, strict=True):
            assert s["inventory"]["namespace"] == namespace
            assert s["daemon"]["lease"] == f"Lease {namespace}/{lease_name(name, namespace, namespace)}"
            held = json.loads(
                kube.kubectl(
                    "get", "lease", lease_name(name, namespace, namespace), "-n", namespace, "-o", "json"
                ).stdout
            )
            assert held["spec"]["holderIdentity"] == s["daemon"]["identity"]
        for team in ("team-a", "team-b"):
            wait_until(f"{team}'s ConfigMap", lambda t=team: get(kube, f"configmap/{t}-cm", namespace), 20, 0.2)
        # each converges on its own change, and neither prunes the other's objects
        for team, repo in zip(("team-a", "team-b"), repos, strict=True):
            repo.commit({"apps/cm.yaml": configmap(f"{team}-cm", {"v": "2"})})
        for team in ("team-a", "team-b"):
            wait_until(
                f"{team}'s change",
                lambda t=team: (get(kube, f"configmap/{t}-cm", namespace) or {}).get("data", {}).get("v") == "2",
                20,
                0.2,
            )
        assert all(not d.logged("pruned") for d in daemons)
    finally:
        for d in daemons:
            d.stop()
