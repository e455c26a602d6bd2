"""One policy against another on the same pairs and seeds: the paired difference of their
normalized scores, on hand-made results."""

from __future__ import annotations

import pytest

from esper_core.benchmark.paired import difference, paired_differences
from esper_core.benchmark.results import BenchmarkResults, PairResult, score_rows
from esper_core.benchmark.suite import RunsGroup
from esper_core.benchmark.tables import to_markdown
from esper_core.compare.crossed_bootstrap import crossed_interval
from esper_core.converter import structure, unstructure
from tests.core.benchmark.test_scores import result

SEEDS = [0, 1, 2]
SETTINGS = (0.95, 500, 0)
FLOPS = [100.0, 100.0, 100.0]
# wait 80 and the oracle 90 on every seed: a point is 0.1 of the oracle's gain
A = {"p1": [85.0, 88.0, 84.0], "p2": [83.0, 90.0, 86.0]}
B = {"p1": [82.0, 88.0, 81.0], "p2": [84.0, 85.0, 86.0]}


def _pair(label: str, a: list[float | None], b: list[float | None]) -> PairResult:
    arms = {
        "wait": ([80.0] * 3, FLOPS),
        "oracle": ([90.0] * 3, FLOPS),
        "a": (a, FLOPS),
        "b": (b, FLOPS),
        "still": ([80.0] * 3, FLOPS),
    }
    return result(label, True, True, arms)  # type: ignore[arg-type]


def _flat() -> PairResult:
    arms = {"wait": ([95.0] * 3, FLOPS), "a": ([94.0] * 3, FLOPS), "b": ([95.0] * 3, FLOPS)}
    return result("flat", False, True, arms)


PAIRS = [_pair("p1", A["p1"], B["p1"]), _pair("p2", A["p2"], B["p2"]), _flat()]


def test_the_difference_is_the_crossed_iqm_of_the_cell_by_cell_table() -> None:
    got = difference("a", "b", PAIRS, SEEDS, SETTINGS)
    rows = [[(x - y) / 10.0 for x, y in zip(A[p], B[p])] for p in ("p1", "p2")]
    expected = crossed_interval(rows, *SETTINGS)
    assert got.pairs == ["p1", "p2"] and got.seeds == SEEDS  # the flat pair has no score
    assert (got.estimate, got.low, got.high) == (
        pytest.approx(expected.estimate),
        pytest.approx(expected.low),
        pytest.approx(expected.high),
    )
    # cells: +0.3, 0, +0.3 on p1; -0.1, +0.5, 0 on p2
    assert (got.wins, got.ties, got.losses) == (3, 2, 1)


def test_a_policy_that_never_grows_leaves_the_other_policys_own_score() -> None:
    """Against a policy whose runs are wait's, the difference is the normalized score."""
    got = difference("a", "still", PAIRS, SEEDS, SETTINGS)
    (row,) = [r for r in score_rows(PAIRS, ["a"], SEEDS, SETTINGS) if r.score == "normalized"]
    assert got.estimate == pytest.approx(row.estimate)
    assert (got.low, got.high) == (pytest.approx(row.low), pytest.approx(row.high))


def test_a_seed_either_policy_lacks_is_cut_from_every_pair() -> None:
    pairs = [_pair("p1", A["p1"], [B["p1"][0], None, B["p1"][2]]), _pair("p2", A["p2"], B["p2"])]
    got = difference("a", "b", pairs, SEEDS, SETTINGS)
    assert got.pairs == ["p1", "p2"] and got.seeds == [0, 2]
    assert got.wins + got.ties + got.losses == 4


def test_every_policy_meets_every_later_one_wait_and_training_runs_aside() -> None:
    policies = ["wait", "a", "run-1", "run-2", "b", "still"]
    group = RunsGroup("ctl", ("run-1", "run-2"))
    got = paired_differences(PAIRS, policies, [group], SEEDS, SETTINGS)
    assert [(d.policy, d.against) for d in got] == [("a", "b"), ("a", "still"), ("b", "still")]


def test_results_carry_the_differences_in_markdown_and_json() -> None:
    policies = ["wait", "a", "b"]
    rows = score_rows(PAIRS, policies, SEEDS, SETTINGS)
    paired = paired_differences(PAIRS, policies, [], SEEDS, SETTINGS)
    done = BenchmarkResults("evaluation", SEEDS, [100], [0.5], policies, PAIRS, rows, paired=paired)
    text = to_markdown(done)
    section = text.split("## Paired differences where growth pays")[1].split("## Pairs")[0]
    estimate = paired[0].estimate
    assert estimate is not None
    assert f"| a | b | {estimate:+.3f} |" in section and "| 3/2/1 | 2 | 3 |" in section
    data = unstructure(done)
    assert data["schema_version"] == 7 and data["paired"][0]["against"] == "b"
    assert structure(data, BenchmarkResults) == done
    plain = BenchmarkResults("evaluation", SEEDS, [100], [0.5], policies, PAIRS, rows)
    assert "Paired differences" not in to_markdown(plain)
