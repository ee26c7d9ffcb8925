"""gitops_sync.source.watch: debounced callbacks on real file-system events (inotify on Linux)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import git
import pytest

from gitops_sync.source.watch import Watch, watch

ACTOR = git.Actor("Test", "test@example.invalid")
SETTLE = 0.6  # comfortably more than the debounce below, for slow CI machines


class Calls:
    """Counts callbacks; `wait_for(n)` blocks until n calls happened (or a timeout)."""

    def __init__(self) -> None:
        self.count = 0
        self._cond = threading.Condition()

    def __call__(self) -> None:
        with self._cond:
            self.count += 1
            self._cond.notify_all()

    def wait_for(self, n: int, timeout: float = 5) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.count >= n, timeout)

    def quiet_for(self, seconds: float) -> int:
        time.sleep(seconds)
        return self.count


@pytest.fixture
def repo(tmp_path: Path) -> git.Repo:
    repo = git.Repo.init(tmp_path / "repo", initial_branch="main")
    (tmp_path / "repo" / "app").mkdir()
    (tmp_path / "repo" / "app" / "cm.yaml").write_text("a: 1\n")
    repo.git.add("--all")
    repo.index.commit("first", author=ACTOR, committer=ACTOR)
    return repo


@pytest.fixture
def start(request: pytest.FixtureRequest) -> Iterator[Callable[[Path], tuple[Watch, Calls]]]:
    started: list[Watch] = []

    def run(root: Path) -> tuple[Watch, Calls]:
        calls = Calls()
        handle = watch(root, calls, debounce=0.1)
        started.append(handle)
        time.sleep(0.1)  # let the observer register its inotify watches
        return handle, calls

    yield run
    for handle in started:
        handle.stop()


def test_a_burst_of_writes_gives_one_callback(tmp_path: Path, start: Callable[[Path], tuple[Watch, Calls]]) -> None:
    _, calls = start(tmp_path)
    for i in range(10):
        (tmp_path / f"f{i}.yaml").write_text("x: 1\n")
    assert calls.wait_for(1)
    assert calls.quiet_for(SETTLE) == 1


def test_each_settled_change_gives_a_callback(tmp_path: Path, start: Callable[[Path], tuple[Watch, Calls]]) -> None:
    _, calls = start(tmp_path)
    (tmp_path / "sub").mkdir()
    assert calls.wait_for(1)
    calls.quiet_for(SETTLE)
    (tmp_path / "sub" / "a.yaml").write_text("x: 1\n")
    assert calls.wait_for(2)
    (tmp_path / "sub" / "a.yaml").unlink()
    assert calls.wait_for(3)


def test_hidden_files_and_editor_backups_do_not_trigger(
    tmp_path: Path, start: Callable[[Path], tuple[Watch, Calls]]
) -> None:
    (tmp_path / ".cache").mkdir()
    _, calls = start(tmp_path)
    (tmp_path / ".deploy.yaml.swp").write_text("x")
    (tmp_path / "deploy.yaml~").write_text("x")
    (tmp_path / ".cache" / "x.yaml").write_text("x")
    assert calls.quiet_for(SETTLE) == 0
    (tmp_path / "deploy.yaml").write_text("x")  # and the watch is alive
    assert calls.wait_for(1)


@pytest.mark.parametrize("where", ["top", "sub-directory"])
def test_a_commit_triggers_but_object_writes_do_not(
    repo: git.Repo, start: Callable[[Path], tuple[Watch, Calls]], where: str
) -> None:
    top = Path(repo.working_tree_dir or "")
    blob = top / "blob.txt"
    blob.write_text("payload")
    _, calls = start(top if where == "top" else top / "app")  # a sub-directory: .git is watched aside
    base = calls.quiet_for(SETTLE)
    repo.git.hash_object("-w", str(blob))  # writes .git/objects only
    assert calls.quiet_for(SETTLE) == base
    repo.git.commit("--allow-empty", "-m", "empty", f"--author={ACTOR.name} <{ACTOR.email}>")
    assert calls.wait_for(base + 1)


def test_checkout_of_another_branch_triggers(repo: git.Repo, start: Callable[[Path], tuple[Watch, Calls]]) -> None:
    repo.git.branch("other")
    top = Path(repo.working_tree_dir or "")
    _, calls = start(top / "app")
    repo.git.symbolic_ref("HEAD", "refs/heads/other")  # HEAD alone changes
    assert calls.wait_for(1)


def test_stop_ends_callbacks(tmp_path: Path) -> None:
    calls = Calls()
    with watch(tmp_path, calls, debounce=0.1):
        time.sleep(0.1)
        (tmp_path / "a.yaml").write_text("x")
        assert calls.wait_for(1)
    (tmp_path / "b.yaml").write_text("x")
    assert calls.quiet_for(SETTLE) == 1


def test_a_failing_callback_does_not_stop_the_watch(tmp_path: Path) -> None:
    seen = Calls()

    def boom() -> None:
        seen()
        raise RuntimeError("sync failed")

    with watch(tmp_path, boom, debounce=0.1):
        time.sleep(0.1)
        (tmp_path / "a.yaml").write_text("x")
        assert seen.wait_for(1)
        time.sleep(SETTLE)
        (tmp_path / "b.yaml").write_text("x")
        assert seen.wait_for(2)
