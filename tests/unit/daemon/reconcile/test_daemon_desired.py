"""The quiet-period check of a live work tree (daemon/desired.py): a render is acted on only once confirmed."""

from __future__ import annotations

import time
from pathlib import Path

from gitops_sync.daemon.reconcile.desired import DesiredSource
from gitops_sync.engine import SourceOptions


def test_a_new_render_of_a_work_tree_is_settling_until_its_second_look(tmp_path: Path) -> None:
    desired = DesiredSource(SourceOptions(repo=str(tmp_path)), debounce=0.05)
    assert desired.live_tree and not desired.settling
    assert desired.wait_before_acting("d1") > 0
    assert desired.settling  # fleet: a pass now answers no reconcile request (it still holds the old state)
    time.sleep(0.06)
    assert desired.wait_before_acting("d1") == 0.0
    assert not desired.settling
    assert desired.wait_before_acting("d2") > 0 and desired.settling
    assert not desired.unchanged("d2") and desired.settling  # nothing held yet: still waiting


def test_a_remote_commit_never_settles(tmp_path: Path) -> None:
    desired = DesiredSource(SourceOptions(repo="https://git.example/team/deploy.git"), debounce=1)
    assert desired.wait_before_acting("d1") == 0.0 and not desired.settling
