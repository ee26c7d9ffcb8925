"""The `kube` fixture under pytest-xdist: the workers of one run share one cluster (tests/conftest.py).

The launcher is replaced by a recorder: what is checked is who starts and who stops, not a control plane."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import conftest


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []

    def launcher(*args: str) -> str:
        calls.append(args[2])  # ("--dir", state, "up" | "down", ...)
        return ""

    monkeypatch.setattr(conftest, "_launcher", launcher)
    return calls


def test_the_first_worker_starts_the_cluster_the_others_reuse_it_and_the_last_one_out_stops_it(
    tmp_path: Path, launches: list[str]
) -> None:
    state = tmp_path / "xdist-1a2b"
    first, second = conftest._xdist_cluster(state), conftest._xdist_cluster(state)
    a = next(first)
    assert launches == ["up"]
    b = next(second)
    assert launches == ["up"], "a second worker reuses the running cluster"
    assert a.kubeconfig == b.kubeconfig == state / "kubeconfig" and a.started_here
    assert next(first, None) is None
    assert launches == ["up"], "stopped while a worker still uses it"
    assert next(second, None) is None
    assert launches == ["up", "down"]
    assert not state.with_suffix(".users").exists()

    # a worker that comes after every other left starts a new one
    third = conftest._xdist_cluster(state)
    next(third)
    assert launches == ["up", "down", "up"]
    assert next(third, None) is None
    assert launches == ["up", "down", "up", "down"]


def test_a_worker_whose_start_failed_is_not_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def launcher(*args: str) -> str:
        calls.append(args[2])
        if len(calls) == 1:
            pytest.fail("cluster.py up failed", pytrace=False)
        return ""

    monkeypatch.setattr(conftest, "_launcher", launcher)
    state = tmp_path / "xdist-3c4d"
    with pytest.raises(pytest.fail.Exception):
        next(conftest._xdist_cluster(state))
    retry = conftest._xdist_cluster(state)
    next(retry)
    assert calls == ["up", "up"], "the next worker starts it again"
    assert next(retry, None) is None
    assert calls == ["up", "up", "down"]
