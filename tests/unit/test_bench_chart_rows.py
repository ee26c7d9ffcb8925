"""Case 7's row (bench/charts.py `chart_rows`): PASS within 1.2x of plain Git with zero writes and only index.yaml
asked of the chart repository; MISS over the target; ERROR when a run failed, the archive was fetched again, or
there are no figures."""

from __future__ import annotations

from typing import Any

from bench.cases import Measure
from bench.charts import chart_rows
from bench.report import TIMES


def _doc(chart: list[float], plain: list[float], served: list[str], *, ok: bool = True) -> dict[str, Any]:
    def runs(values: list[float]) -> list[dict[str, Any]]:
        return [Measure(seconds=v, exit_code=0, ok=ok, server_writes=0).to_dict() for v in values]

    return {"objects": 100, "runs": {"chart": runs(chart), "plain": runs(plain)}, "served": served, "notes": []}


def test_within_the_target_with_the_index_only_passes() -> None:
    (row,) = chart_rows(_doc([1.1, 1.0, 1.2], [1.0, 1.0, 1.0], ["/bench/index.yaml"] * 3))
    assert (row.result, row.ratio, row.n) == ("PASS", f"1.10{TIMES}", "100")
    assert "0 writes" in row.ours and row.kubectl == "plain Git 1.00 s" and "/bench/index.yaml" in row.note


def test_over_the_target_misses() -> None:
    (row,) = chart_rows(_doc([1.5], [1.0], ["/bench/index.yaml"]))
    assert row.result == "MISS" and row.ratio == f"1.50{TIMES}"


def test_an_archive_fetched_again_a_failed_run_or_no_figures_is_an_error() -> None:
    (row,) = chart_rows(_doc([1.0], [1.0], ["/bench/index.yaml", "/bench/benchchart-1.0.0.tgz"]))
    assert row.result == "ERROR" and "benchchart-1.0.0.tgz" in row.note
    (row,) = chart_rows(_doc([1.0], [1.0], ["/bench/index.yaml"], ok=False))
    assert row.result == "ERROR"
    (row,) = chart_rows({"objects": 100, "runs": {}, "notes": ["cluster.py registry-up failed (exit 1)"]})
    assert row.result == "ERROR" and "registry-up" in row.note
    assert chart_rows(None) == []
