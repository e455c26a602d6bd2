"""Normalized scores, extra FLOPs and metric lost, on synthetic evaluation values."""

from __future__ import annotations

import attrs
import pytest

from esper_core.benchmark import scores
from esper_core.benchmark.results import (
    EXTRA_FLOPS,
    METRIC_LOST,
    NORMALIZED,
    ArmValues,
    PairResult,
    score_rows,
    unscored,
)

SEEDS = [0, 1]
SETTINGS = (0.95, 500, 0)


def result(
    label: str, pays: bool, higher: bool, arms: dict[str, tuple[list[float], list[float]]]
) -> PairResult:
    metric = "final_test_acc" if higher else "final_test_loss"
    values = [ArmValues(a, list(m), list(f)) for a, (m, f) in arms.items()]
    return PairResult(
        label,
        "t",
        "evaluation",
        metric,
        higher,
        [0.1],
        0.1,
        oracle="x",
        growth_pays=pays,
        evaluation=values,
    )


FLOPS = [100.0, 100.0]
PAIRS = [
    # accuracy: the oracle gains 10 points; the policy gets 5 on seed 0, 10 on seed 1
    result(
        "acc",
        True,
        True,
        {
            "wait": ([80.0, 82.0], FLOPS),
            "oracle": ([90.0, 92.0], FLOPS),
            "p": ([85.0, 92.0], FLOPS),
        },
    ),
    # loss: the oracle is 0.2 lower; the policy half of it, then nothing
    result(
        "loss",
        True,
        False,
        {
            "wait": ([1.5, 1.5], FLOPS),
            "oracle": ([1.3, 1.3], FLOPS),
            "p": ([1.4, 1.5], FLOPS),
        },
    ),
    # growth does not pay: the policy spends 10 % and 20 % more, loses 1 point on seed 0
    result(
        "flat",
        False,
        True,
        {
            "wait": ([95.0, 96.0], FLOPS),
            "p": ([94.0, 96.0], [110.0, 120.0]),
        },
    ),
]


def test_the_normalized_score_divides_each_seeds_gain_by_the_pairs_mean_gap() -> None:
    got = scores.normalized({0: 85.0, 1: 92.0}, {0: 80.0, 1: 82.0}, {0: 90.0, 1: 92.0}, True)
    assert got == pytest.approx({0: 0.5, 1: 1.0})
    loss = scores.normalized({0: 1.4, 1: 1.5}, {0: 1.5, 1: 1.5}, {0: 1.3, 1: 1.3}, False)
    assert loss == pytest.approx({0: 0.5, 1: 0.0})
    # an oracle that does not beat wait on the evaluation seeds: no score
    assert scores.normalized({0: 1.0}, {0: 1.0}, {0: 0.9}, True) is None


def test_extra_flops_and_metric_lost_are_per_seed_against_wait() -> None:
    assert scores.extra_flops({0: 110.0, 1: 120.0}, {0: 100.0, 1: 100.0}) == pytest.approx(
        {0: 0.1, 1: 0.2}
    )
    assert scores.metric_lost({0: 94.0, 1: 97.0}, {0: 95.0, 1: 96.0}, True) == {0: 1.0, 1: -1.0}
    assert scores.metric_lost({0: 1.6}, {0: 1.5}, False) == pytest.approx({0: 0.1})


def test_rows_pool_pairs_by_kind_with_per_pair_figures() -> None:
    rows = {(r.policy, r.score): r for r in score_rows(PAIRS, ["wait", "p"], SEEDS, SETTINGS)}
    normalized = rows["p", NORMALIZED]
    assert normalized.pairs == ["acc", "loss"]
    # the IQM of 0.5, 1.0, 0.5, 0.0: the middle two
    assert normalized.estimate == pytest.approx(0.5)
    low, high, estimate = normalized.low, normalized.high, normalized.estimate
    assert low is not None and high is not None and estimate is not None
    assert low <= estimate <= high
    assert [s.pair for s in normalized.per_pair] == ["acc", "loss"]
    assert [s.estimate for s in normalized.per_pair] == pytest.approx([0.75, 0.25])
    assert rows["wait", NORMALIZED].estimate == 0.0
    flops = rows["p", EXTRA_FLOPS]
    assert flops.pairs == ["flat"] and flops.estimate == pytest.approx(0.15)
    lost = rows["p", METRIC_LOST]
    assert lost.unit == "accuracy points" and lost.estimate == pytest.approx(0.5)


def test_a_pair_whose_oracle_fails_on_the_evaluation_seeds_is_named_not_scored() -> None:
    bad = result(
        "bad",
        True,
        True,
        {
            "wait": ([90.0, 90.0], FLOPS),
            "oracle": ([89.0, 89.0], FLOPS),
            "p": ([95.0, 95.0], FLOPS),
        },
    )
    bad = attrs.evolve(bad, gap=-1.0)
    rows = score_rows([bad], ["p"], SEEDS, SETTINGS)
    assert rows[0].pairs == [] and rows[0].estimate is None
    assert unscored([bad]) == [
        "bad: the oracle (x) did not beat wait on the evaluation seeds (mean gap -1); "
        "no normalized score on this pair"
    ]


def test_a_pair_whose_wait_did_not_train_on_a_tuning_seed_is_named_not_scored() -> None:
    from esper_core.benchmark.results import MenuRecord
    from esper_core.benchmark.run_suite import no_baseline

    wait = MenuRecord("wait", "wait", {}, "", None, [30.0, 21.6], 25.8, failed=[102])
    why = no_baseline(wait, 0.05)
    assert why is not None and "tuning seed(s) 102 at its rate 0.05" in why
    assert no_baseline(attrs.evolve(wait, failed=[]), 0.05) is None
    flat = attrs.evolve(PAIRS[2], no_baseline=why)
    rows = {(r.policy, r.score): r for r in score_rows([*PAIRS[:2], flat], ["p"], SEEDS, SETTINGS)}
    assert ("p", EXTRA_FLOPS) not in rows and rows["p", NORMALIZED].pairs == ["acc", "loss"]
    assert unscored([flat]) == [f"flat: {why}"]


def test_a_pair_whose_wait_rate_is_an_end_of_its_grid_is_named_on_the_page() -> None:
    from esper_core.benchmark.results import BenchmarkResults, at_grid_edge
    from esper_core.benchmark.tables import to_markdown
    from esper_core.compare.tuning_results import ArmTuning

    def tuned(edges: dict[str, str]) -> ArmTuning:
        chosen = {"training.lr": 0.1}
        return ArmTuning("t", "wait", "val_acc", True, 0, chosen, edges=edges)

    top = attrs.evolve(PAIRS[0], tuning=tuned({"training.lr": "highest"}))
    middle = attrs.evolve(PAIRS[1], tuning=tuned({}))
    assert at_grid_edge([top, middle]) == [
        "acc: wait's training.lr = 0.1 is the highest value of its grid: the best may lie "
        "above it; extend the grid above and run again (docs/growth.md, the tuning rule)"
    ]
    page = to_markdown(
        BenchmarkResults("evaluation", SEEDS, [100], [0.5], ["wait"], [top, middle], [])
    )
    assert f"- {at_grid_edge([top])[0]}" in page.split("## Pairs")[0]
