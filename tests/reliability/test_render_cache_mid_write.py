"""A file rewritten in place while `render` reads a work tree, then `sync --prune` of the same tree: nothing pruned.

Issue 20, item 4, as it was reproduced: a 300-file work tree, `gitops-sync render` (which fills the render
cache) while an editor or generator rewrites one file in place (truncate, then the same bytes), then
`sync --prune` of the byte-identical tree with the same cache. The interleaving is certain: the `render`
process runs the real CLI with `loading.render` wrapped so the file is empty for exactly as long as the
render runs. The sync is served the cached entry (its log says so); that entry must hold every object, or
the prune deletes the one the render missed. Real control plane (the shared one; a namespace of its own).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.integration.daemon_support import REPO_ROOT, GitRepo
from tests.reliability.workload import configmap_files, live_objects, no_traceback, run_sync

if TYPE_CHECKING:
    from tests.conftest import KubeCluster
    from tests.reliability.conftest import Recorder

pytestmark = pytest.mark.cluster

N = 300
VICTIM = "cm/cm-150.json"

# The real CLI, with the render wrapped: the victim file is emptied in place (same inode, as an editor's or a
# generator's `open(path, "w")`) when the render starts and gets its bytes back when the render returns.
RUNNER = """
import sys
from pathlib import Path
from gitops_sync.engine import loading
from gitops_sync.cli import main

victim = Path(sys.argv[1])
real = loading.render

def render(root, opts, **kw):
    data = victim.read_bytes()
    with victim.open("r+b") as handle:
        handle.truncate(0)
    try:
        return real(root, opts, **kw)
    finally:
        with victim.open("r+b") as handle:
            handle.write(data)

loading.render = render
sys.argv[0] = "gitops-sync"
del sys.argv[1]
main()
"""


def test_a_file_rewritten_while_render_reads_is_never_pruned_by_a_later_sync(
    kube: KubeCluster, namespace: str, tmp_path: Path, reliability: Recorder
) -> None:
    env, ns = kube.env, namespace
    files = configmap_files(N, "v1")
    tree = GitRepo(tmp_path / "work", {k: v for k, v in files.items() if v is not None})
    repo = str(tree.path)
    first = run_sync(env, repo, ns, "--prune", cache=tmp_path / "cache-a")
    assert first.code == 0 and first.summary.get("create") == N, first.stderr[-2000:]
    before = {name: o.uid for (_, name), o in live_objects(env, ns, "configmaps").items() if name != "fault-inv"}
    assert len(before) == N

    cache = tmp_path / "cache-b"
    started = time.monotonic()
    rendered = subprocess.run(
        [
            sys.executable,
            "-c",
            RUNNER,
            str(tree.path / VICTIM),
            "render",
            "--repo",
            repo,
            "-n",
            ns,
            "--cache-dir",
            str(cache),
        ],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    render_seconds = time.monotonic() - started
    assert rendered.returncode == 0 and no_traceback(rendered.stderr), rendered.stderr[-2000:]
    assert all((tree.path / name).read_text() == text for name, text in files.items()), "the tree is not the same"
    assert not tree.repo.is_dirty(untracked_files=True)

    second = run_sync(env, repo, ns, "--prune", cache=cache)
    assert no_traceback(second.stderr), second.stderr[-2000:]
    after = {name: o.uid for (_, name), o in live_objects(env, ns, "configmaps").items() if name != "fault-inv"}
    assert after == before, f"changed or pruned: {sorted(set(before) ^ set(after))}"
    assert second.code == 0 and second.summary.get("prune", 0) == 0, second.report.get("summary")
    served = [d for d in second.logs if d.get("event") == "render cache: served"]
    assert served and served[0].get("objects") == N, "the sync must be served the entry `render` stored"
    assert "cm-150" in rendered.stdout

    reliability.record(
        area="render cache",
        fault=f"a file of a {N}-file work tree emptied in place for exactly as long as `render` ran (then the "
        "same bytes back), then `sync --prune` of the byte-identical tree with the same cache",
        outcome="`render` printed every object (it rendered the snapshot it keyed, not the file mid-write); the "
        "sync was served that entry and exited 0",
        checked=f"all {N} ConfigMaps kept their uid: 0 pruned (before the fix the entry lacked the file's object "
        "and the sync deleted it)",
        figures=f"render {render_seconds:.2f} s (cache miss), sync {second.seconds:.2f} s (cache hit of "
        f"{served[0].get('objects')} objects), prune 0",
    )
