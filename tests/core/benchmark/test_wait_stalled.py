"""A pair whose ``wait`` did not train on an evaluation seed at its tuned rate has no
baseline there: the benchmark names it and scores nothing against it, as ``esper
compare`` does for an arm that stalled (the tuning rule, docs/growth.md)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from esper_core.benchmark.results import BenchmarkResults, PairResult, score_rows, unscored
from esper_core.benchmark.run_suite import _evaluated, wait_stalled
from esper_core.benchmark.tables import to_markdown
from esper_core.compare.experiment import Cell
from esper_core.compare.stalls import StallRule
from esper_core.config import RunConfig
from esper_core.converter import structure
from tests.core.benchmark.helpers import finished

SEEDS = [7700, 7701, 7702, 7703]
SETTINGS = (0.95, 200, 0)


def chosen() -> PairResult:
    return PairResult(
        "glyphs-small",
        "glyphs",
        "evaluation",
        "final_test_acc",
        True,
        [0.1, 0.2, 0.4],
        0.2,
        oracle="widen-at0.1",
        growth_pays=True,
    )


def evaluated(tmp_path: Path, wait_val: list[float]) -> PairResult:
    """The pair with wait and the oracle finished on every seed (oracle +5 points)."""
    config = structure({}, RunConfig)
    cells = []
    for arm, shift in (("wait", 0.0), ("oracle", 5.0)):
        for seed, val in zip(SEEDS, wait_val):
            cell = Cell("glyphs-small", arm, seed, config)
            finished(cell.directory(tmp_path), val + shift, val + shift)
            cells.append(cell)
    return _evaluated(chosen(), cells, tmp_path, SEEDS, [], StallRule())


def test_a_wait_that_stalls_on_an_evaluation_seed_leaves_the_pair_unscored(
    tmp_path: Path,
) -> None:
    pair = evaluated(tmp_path, [75.0, 76.0, 61.6, 74.5])
    assert pair.wait_stalled is not None
    assert "evaluation seed(s) 7702 (61.6) at its rate 0.2 (median of its runs 74.75)" in (
        pair.wait_stalled
    )
    rows = score_rows([pair], ["oracle"], SEEDS, SETTINGS)
    assert all(row.pairs == [] and row.estimate is None for row in rows)
    assert unscored([pair]) == [f"glyphs-small: {pair.wait_stalled}"]
    page = to_markdown(BenchmarkResults("evaluation", SEEDS, [100], [0.1], ["wait"], [pair], []))
    assert f"- not scored: {pair.wait_stalled}" in page


def test_a_wait_that_trains_on_every_evaluation_seed_is_scored(tmp_path: Path) -> None:
    pair = evaluated(tmp_path, [75.0, 76.0, 71.6, 74.5])  # 3.15 below the median: noise
    assert pair.wait_stalled is None
    (row,) = score_rows([pair], ["oracle"], SEEDS, SETTINGS)
    assert row.pairs == ["glyphs-small"] and row.estimate == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("values", "higher", "named"),
    [
        # a loss more than 10 % above the median, and a run that diverged
        ({1: 1.40, 2: 1.38, 3: 1.39, 4: 1.77, 5: None}, False, "4 (1.77), 5 (not finite)"),
        ({1: 1.40, 2: 1.38, 3: 1.45}, False, None),  # 4 % above: noise
        ({1: 80.0, 2: math.nan, 3: 81.0}, True, "2 (not finite)"),
        ({1: 80.0, 2: 40.0}, True, None),  # of two runs either may be the odd one
    ],
)
def test_the_stall_rule_is_the_comparisons(
    values: dict[int, float | None], higher: bool, named: str | None
) -> None:
    why = wait_stalled(values, higher, 0.1, StallRule())
    if named is None:
        assert why is None
    else:
        assert why is not None and named in why and "not scored" in why
