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


ORACLE = [80.0, 81.0, 80.5, 79.5]  # trains on every seed, about +5 points over wait


def evaluated(tmp_path: Path, wait_val: list[float], oracle_val: list[float]) -> PairResult:
    """The pair with wait and the oracle finished on every seed."""
    config = structure({}, RunConfig)
    cells = []
    for arm, values in (("wait", wait_val), ("oracle", oracle_val)):
        for seed, val in zip(SEEDS, values):
            cell = Cell("glyphs-small", arm, seed, config)
            finished(cell.directory(tmp_path), val, val)
            cells.append(cell)
    return _evaluated(chosen(), cells, tmp_path, SEEDS, [], StallRule())


def test_a_wait_that_stalls_on_an_evaluation_seed_leaves_the_pair_unscored(
    tmp_path: Path,
) -> None:
    pair = evaluated(tmp_path, [75.0, 76.0, 61.6, 74.5], ORACLE)
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
    # 3.15 below the median: noise
    pair = evaluated(tmp_path, [75.0, 76.0, 71.6, 74.5], [v + 5 for v in [75.0, 76.0, 71.6, 74.5]])
    assert pair.wait_stalled is None
    (row,) = score_rows([pair], ["oracle"], SEEDS, SETTINGS)
    assert row.pairs == ["glyphs-small"] and row.estimate == pytest.approx(1.0)


def test_a_seed_hard_for_every_arm_is_no_stall_of_wait(tmp_path: Path) -> None:
    # 7702 costs wait 13.15 points against its median, and the oracle 13.75 against its own:
    # the seed is hard, not wait's rate.
    hard = [80.0, 81.0, 66.6, 79.5]
    assert evaluated(tmp_path / "hard", [75.0, 76.0, 61.6, 74.5], hard).wait_stalled is None
    # The seed cost the oracle 3 points: wait is still 10.15 behind beyond that.
    half = [80.0, 81.0, 76.75, 79.5]
    assert evaluated(tmp_path / "half", [75.0, 76.0, 61.6, 74.5], half).wait_stalled is not None


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
