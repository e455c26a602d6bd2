"""``esper benchmark --until menu`` stops before the evaluation seeds: a pair whose oracle
grows has then no wait or oracle arm to measure its gap on, and scoring must say nothing
of it rather than fail."""

from __future__ import annotations

from pathlib import Path

from esper_core.benchmark.results import PairResult, score_rows
from esper_core.benchmark.run_suite import _evaluated
from esper_core.compare.stalls import StallRule


def chosen(pays: bool) -> PairResult:
    return PairResult(
        "digits-shallow",
        "digits",
        "training",
        "final_test_acc",
        True,
        [0.4, 0.8],
        0.8,
        oracle="deepen-at0.1" if pays else "wait",
        growth_pays=pays,
    )


def test_a_pair_whose_oracle_grows_is_left_unscored_without_evaluation_cells(
    tmp_path: Path,
) -> None:
    done = [
        _evaluated(chosen(pays), [], tmp_path, [7600, 7601], [], StallRule())
        for pays in (True, False)
    ]
    assert [(r.evaluation, r.gap, r.failures) for r in done] == [([], None, [])] * 2
    rows = score_rows(done, ["wait", "heuristic"], [7600, 7601], (0.95, 100, 0))
    assert rows and all(row.pairs == [] and row.estimate is None for row in rows)
