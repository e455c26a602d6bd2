"""A controller trained in several runs (``[training_runs]``): the suite key, its checks,
and the scores pooled over runs x pairs x evaluation seeds, on hand-made results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from esper_core.benchmark.pooled_runs import runs_results
from esper_core.benchmark.results import (
    EXTRA_FLOPS,
    METRIC_LOST,
    NORMALIZED,
    BenchmarkResults,
    PairResult,
    score_rows,
)
from esper_core.benchmark.suite import (
    RunsGroup,
    SuiteError,
    SuiteFile,
    build_suite,
    load_suite_file,
)
from esper_core.benchmark.tables import to_markdown
from esper_core.compare.crossed_nd import crossed_interval_nd
from esper_core.compare.experiment import PolicyEntry
from esper_core.config import RunConfig
from esper_core.converter import structure, unstructure
from tests.core.benchmark.helpers import pair
from tests.core.benchmark.test_scores import result

SEEDS = [0, 1, 2]
SETTINGS = (0.95, 500, 0)
FLOPS = [100.0, 100.0, 100.0]
RUNS = ("run-1", "run-2", "run-3")
GROUP = RunsGroup("ctl", RUNS)
POLICIES = ["wait", *RUNS, "h"]
# heuristic's accuracy per pair and seed; wait is 80 and the oracle 90 on every seed,
# so the gap is 10 points and a point is 0.1 of the oracle's gain
HEURISTIC = {"acc-1": [83.0, 85.0, 86.0], "acc-2": [81.0, 88.0, 84.0]}
SHIFTS = (1.0, 2.0, 3.0)  # run k is the heuristic plus SHIFTS[k] points


def _paying(label: str, runs: dict[str, list[Any]] | None = None) -> PairResult:
    h = HEURISTIC[label]
    arms = {"wait": ([80.0] * 3, FLOPS), "oracle": ([90.0] * 3, FLOPS), "h": (h, FLOPS)}
    for run, shift in zip(RUNS, SHIFTS):
        arms[run] = ((runs or {}).get(run, [v + shift for v in h]), FLOPS)
    return result(label, True, True, arms)


def _flat() -> PairResult:
    arms = {"wait": ([95.0] * 3, FLOPS), "h": ([95.0] * 3, FLOPS)}
    for k, run in enumerate(RUNS):
        arms[run] = ([94.0 - k] * 3, [110.0 + 10 * k] * 3)
    return result("flat", False, True, arms)


def test_a_group_runs_normalized_score_is_the_crossed_iqm_of_runs_x_pairs_x_seeds() -> None:
    (got,) = runs_results([_paying("acc-1"), _paying("acc-2")], [GROUP], POLICIES, SEEDS, SETTINGS)
    assert got.group == "ctl" and got.runs == list(RUNS)
    (normalized,) = got.scores
    assert normalized.score == NORMALIZED and normalized.pairs == ["acc-1", "acc-2"]
    assert normalized.seeds == SEEDS
    table = np.array(
        [[[(v + shift - 80.0) / 10.0 for v in HEURISTIC[p]] for p in HEURISTIC] for shift in SHIFTS]
    )
    expected = crossed_interval_nd(table, *SETTINGS)
    assert (normalized.estimate, normalized.low, normalized.high) == (
        expected.estimate,
        expected.low,
        expected.high,
    )


def test_runs_that_are_the_heuristic_plus_a_constant_differ_from_it_by_that_constant() -> None:
    """Run k is the heuristic plus k points on every pair and seed: the difference table
    is 0.1, 0.2, 0.3 per run (6 cells each), its IQM the middle run's 0.2, and every cell
    a win; the interval is that of the one crossed table ``run - heuristic``."""
    (got,) = runs_results([_paying("acc-1"), _paying("acc-2")], [GROUP], POLICIES, SEEDS, SETTINGS)
    (difference,) = got.differences
    assert difference.against == "h" and difference.pairs == ["acc-1", "acc-2"]
    assert difference.estimate == pytest.approx(0.2)
    assert (difference.wins, difference.ties, difference.losses) == (18, 0, 0)
    shifts = np.array(SHIFTS)[:, None, None] / 10.0
    expected = crossed_interval_nd(np.broadcast_to(shifts, (3, 2, 3)), *SETTINGS)
    assert difference.low == pytest.approx(expected.low)
    assert difference.high == pytest.approx(expected.high)
    assert difference.low is not None and difference.high is not None
    assert difference.low < 0.2 < difference.high


def test_a_missing_cell_cuts_its_seed_and_a_pair_a_run_lacks_is_left_out() -> None:
    h1 = HEURISTIC["acc-1"]
    gap_seed = _paying("acc-1", {"run-2": [h1[0], h1[1], None]})
    (got,) = runs_results([gap_seed, _paying("acc-2")], [GROUP], POLICIES, SEEDS, SETTINGS)
    assert got.scores[0].pairs == ["acc-1", "acc-2"] and got.scores[0].seeds == [0, 1]
    unfinished = _paying("acc-1", {"run-3": [None, None, None]})
    (got,) = runs_results([unfinished, _paying("acc-2")], [GROUP], POLICIES, SEEDS, SETTINGS)
    assert got.scores[0].pairs == ["acc-2"] and got.scores[0].seeds == SEEDS


def test_where_growth_does_not_pay_the_price_is_pooled_over_runs_too() -> None:
    """One such pair: an estimate, no interval (a single pair says nothing of hosts)."""
    pairs = [_paying("acc-1"), _paying("acc-2"), _flat()]
    (got,) = runs_results(pairs, [GROUP], POLICIES, SEEDS, SETTINGS)
    kinds = {s.score: s for s in got.scores}
    assert list(kinds) == [NORMALIZED, EXTRA_FLOPS, METRIC_LOST]
    flops, lost = kinds[EXTRA_FLOPS], kinds[METRIC_LOST]
    assert flops.pairs == ["flat"] and flops.estimate == pytest.approx(0.2)
    assert flops.low is None and flops.high is None
    # lost: 1, 2 and 3 points for the three runs, on every seed: the IQM of the nine
    # values 1, 1, 1, 2, 2, 2, 3, 3, 3 is the mean of 1, 2, 2, 2, 3
    assert lost.unit == "accuracy points" and lost.estimate == pytest.approx(2.0)


def test_results_without_groups_are_unchanged_and_with_one_carry_its_section() -> None:
    pairs = [_paying("acc-1"), _paying("acc-2")]
    rows = score_rows(pairs, POLICIES, SEEDS, SETTINGS)
    plain = BenchmarkResults("evaluation", SEEDS, [100], [0.5], POLICIES, pairs, rows)
    assert "Pooled over training runs" not in to_markdown(plain)
    pooled = runs_results(pairs, [GROUP], POLICIES, SEEDS, SETTINGS)
    grouped = BenchmarkResults(
        "evaluation", SEEDS, [100], [0.5], POLICIES, pairs, rows, training_runs=pooled
    )
    text = to_markdown(grouped)
    before = to_markdown(plain).split("## Pairs")[0].rstrip("\n")
    assert text.startswith(before + "\n\n## Pooled over training runs\n")
    section = text.split("## Pooled over training runs")[1].split("## Pairs")[0]
    assert "ctl = run-1, run-2, run-3" in section
    assert "| ctl | normalized | fraction of the oracle's gain |" in section
    assert "| ctl | h | +0.200 |" in section and "| 18/0/0 | 2 |" in section
    data = unstructure(grouped)
    assert data["schema_version"] == 7 and data["training_runs"][0]["group"] == "ctl"
    assert structure(data, BenchmarkResults) == grouped


def _suite(groups: dict[str, list[str]]) -> None:
    spec = SuiteFile(
        pairs=[pair("a", "digits")],
        policies=[PolicyEntry(name="wait")]
        + [PolicyEntry(name="heuristic", label=label) for label in RUNS]
        + [PolicyEntry(name="heuristic")],
        training_runs=groups,
    )
    build_suite(spec, structure(spec.config, RunConfig))


@pytest.mark.parametrize(
    ("groups", "problem"),
    [
        (
            {"ctl": ["run-1", "ppo-9"]},
            "training_runs.ctl: 'ppo-9' is not a policy under test; list labels from "
            "policies (run-1, run-2, run-3, heuristic)",
        ),
        (
            {"ctl": ["run-1"]},
            "training_runs.ctl: 1 training run(s); a group needs at least 2 (one run says "
            "nothing of the training procedure)",
        ),
        (
            {"ctl": ["run-1", "run-2"], "other": ["run-2", "run-3"]},
            "training_runs.other: 'run-2' is already in group 'ctl'; a training run "
            "belongs to one group only",
        ),
        (
            {"heuristic": ["run-1", "run-2"]},
            "training_runs.heuristic: 'heuristic' is a policy's label; name the group "
            "something else",
        ),
        (
            {"ctl": ["run-1", "run-2", "run-1"]},
            "training_runs.ctl: 'run-1' is listed twice; list each run once",
        ),
        (
            {"ctl": ["run-1", "wait"]},
            "training_runs.ctl: 'wait' is not a policy under test; list labels from "
            "policies (run-1, run-2, run-3, heuristic)",
        ),
    ],
)
def test_a_bad_group_is_refused_with_one_line(groups: dict[str, list[str]], problem: str) -> None:
    with pytest.raises(SuiteError) as caught:
        _suite(groups)
    assert caught.value.problems == [problem]


SUITE = """
seeds = 2
policies = ["wait", {{ name = "heuristic", label = "run-1" }},
            {{ name = "heuristic", label = "run-2" }}, "heuristic"]

[training_runs]
{groups}

[[pairs]]
label = "a"
task = "digits"
split = "evaluation"
lr = [0.1]
"""


def test_the_suite_file_declares_its_groups(tmp_path: Path, invoke: Any) -> None:
    path = tmp_path / "suite.toml"
    path.write_text(SUITE.format(groups='ctl = ["run-1", "run-2"]'), encoding="utf-8")
    spec = load_suite_file(path)
    found = build_suite(spec, structure(spec.config, RunConfig))
    assert found.training_runs == (RunsGroup("ctl", ("run-1", "run-2")),)
    path.write_text(SUITE.format(groups='ctl = ["run-1", "run-9"]'), encoding="utf-8")
    done = invoke("benchmark", str(path), "--dry-run")
    assert done.exit_code == 2
    assert "training_runs.ctl: 'run-9' is not a policy under test" in done.output
