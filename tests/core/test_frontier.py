"""The size-sweep frontier on numbers whose answer is known: which sizes are on it, the
interpolation between them, and the verdict on a dominated policy, a policy on the
frontier and a policy better at equal FLOPs (issue 24)."""

from __future__ import annotations

import math

import pytest

from esper_core.compare.experiment import Arm, Experiment, SweepArm
from esper_core.compare.frontier import (
    dominators,
    frontier,
    frontier_curve,
    frontier_gap,
    frontier_value,
)
from esper_core.compare.frontier_results import frontier_section
from esper_core.compare.results import CellResult
from esper_core.config import RunConfig

SEEDS = range(8)
# Three static sizes: 10x the parameters and FLOPs each, +10 then +5 points of accuracy.
SIZES = {"sweep.s": (1e3, 1e9, 80.0), "sweep.m": (1e4, 1e10, 90.0), "sweep.l": (1e5, 1e11, 95.0)}


def noise(seed: int) -> float:
    """A per-seed offset shared by every run of the seed (same data, same init)."""
    return [-1.0, 0.5, 1.5, -0.5, 0.0, 1.0, -1.5, 0.25][seed]


def jitter(seed: int) -> float:
    """A small zero-mean run-to-run difference."""
    return [0.1, -0.1, 0.05, -0.05, 0.02, -0.02, 0.08, -0.08][seed]


def test_the_frontier_keeps_what_no_other_size_matches_for_less() -> None:
    points = {
        "a": (10.0, 80.0),
        "b": (100.0, 90.0),
        "c": (1000.0, 85.0),  # bigger and worse than b: off the frontier
        "d": (100.0, 90.0),  # identical to b: kept once
        "z": (0.0, 99.0),  # a cost not recorded: no place on it
    }
    assert frontier(points) == ["a", "b"]
    assert dominators(points["c"], points) == ["b", "d"]
    assert dominators(points["b"], points) == []  # a tie dominates nothing
    # Loss: lower is better, so the same numbers read the other way round.
    assert frontier(points, higher_is_better=False) == ["a"]
    assert dominators((100.0, 1.0), {"x": (50.0, 1.5)}, higher_is_better=False) == []
    assert dominators((100.0, 2.0), {"x": (50.0, 1.5)}, higher_is_better=False) == ["x"]


def test_the_frontier_is_interpolated_in_log_cost_and_not_extrapolated() -> None:
    curve = frontier_curve({"a": (10.0, 80.0), "b": (1000.0, 90.0)})
    assert frontier_value(curve, 100.0) == pytest.approx(85.0)  # halfway in log cost
    assert frontier_value(curve, 10.0) == 80.0 and frontier_value(curve, 1000.0) == 90.0
    assert frontier_value(curve, 1000.0 * (1 + 1e-12)) == 90.0  # float noise is no gap
    assert frontier_value(curve, 9.0) is None and frontier_value(curve, 2000.0) is None
    assert frontier_value([(10.0, 80.0)], 10.0) == 80.0
    assert frontier_value([], 10.0) is None and frontier_value(curve, 0.0) is None
    # A larger size that did worse is off the frontier but still spans the sweep's costs:
    # up to it the frontier holds the best value reached for less.
    noisy = frontier_curve({"a": (10.0, 80.0), "b": (100.0, 90.0), "c": (1000.0, 85.0)})
    assert noisy == [(10.0, 80.0), (100.0, 90.0), (1000.0, 90.0)]
    assert frontier_value(noisy, 500.0) == 90.0 and frontier_value(noisy, 2000.0) is None


def test_the_gap_is_paired_by_seed_and_bootstrapped_over_seeds() -> None:
    sweep = {s: {n: (p, acc + noise(s)) for n, (p, _f, acc) in SIZES.items()} for s in SEEDS}
    # 10^4.5 parameters: the frontier is at 92.5 + the seed's offset.
    on = frontier_gap({s: (10**4.5, 92.5 + noise(s) + jitter(s)) for s in SEEDS}, sweep)
    assert (on.n, on.outside) == (8, 0)
    assert on.low is not None and on.high is not None and on.low < 0 < on.high
    assert on.mean == pytest.approx(sum(jitter(s) for s in SEEDS) / 8)
    assert (on.better, on.ties, on.worse) == (4, 0, 4)
    worse = frontier_gap({s: (1e4, 85.0 + noise(s)) for s in SEEDS}, sweep)
    assert worse.iqm == pytest.approx(-5.0) and worse.high == pytest.approx(-5.0)
    assert worse.worse == 8
    # The per-seed offset cancels: a pooled frontier would give a far wider interval.
    beyond = frontier_gap({s: (2e5, 99.0) for s in SEEDS}, sweep)
    assert (beyond.n, beyond.outside, beyond.iqm) == (0, 8, None)
    # Loss: a run below the frontier is better.
    losses = {s: {n: (c, -v) for n, (c, v) in sizes.items()} for s, sizes in sweep.items()}
    lower = frontier_gap({s: (1e4, -(85.0 + noise(s))) for s in SEEDS}, losses, False)
    assert lower.iqm == pytest.approx(5.0) and lower.worse == 8 and lower.better == 0


def cell(policy: str, seed: int, params: float, flops: float, acc: float) -> CellResult:
    return CellResult(
        task="toy",
        policy=policy,
        seed=seed,
        final_test_acc=acc,
        params_added=0.0,
        seeds_fossilized=0,
        seeds_pruned=0,
        wall_time=1.0,
        run_dir="",
        final_test_loss=(100.0 - acc) / 50,  # a loss that falls as the accuracy rises
        params_forward=params,
        params_held=params,
        train_flops=flops,
    )


def synthetic_results() -> list[CellResult]:
    cells = [
        cell(label, s, p, f, acc + noise(s)) for label, (p, f, acc) in SIZES.items() for s in SEEDS
    ]
    for s in SEEDS:
        # Dominated: more parameters and FLOPs than sweep.m, and worse.
        cells.append(cell("bloated", s, 2e4, 2e10, 85.0 + noise(s)))
        # On the frontier: exactly where the sweep's line is, give or take run noise.
        cells.append(cell("onfront", s, 10**4.5, 10**10.5, 92.5 + noise(s) + jitter(s)))
        # Grown: the parameters of the largest size, its accuracy, a twentieth of its FLOPs.
        cells.append(cell("grown", s, 1e5, 5e9, 95.0 + noise(s)))
    return cells


def experiment() -> Experiment:
    return Experiment(
        policies=tuple(Arm(p, p, p) for p in ("bloated", "onfront", "grown")),
        tasks=(Arm("toy", "tiny", "tiny"),),
        seeds=tuple(SEEDS),
        base=RunConfig(),
        sweep=tuple(SweepArm(label) for label in SIZES),
        resamples=1000,
    )


@pytest.mark.parametrize("metric", ["final_test_acc", "final_test_loss"])
def test_verdicts_on_a_synthetic_result_set(metric: str) -> None:
    policies = ["bloated", "onfront", "grown", *SIZES]
    (task,) = frontier_section(experiment(), synthetic_results(), policies, {"toy": metric})
    assert task.metric == metric and task.higher_is_better is (metric == "final_test_acc")
    for axis in task.axes:  # every size is on both frontiers
        assert [(p.label, p.on_frontier) for p in axis.points] == [(n, True) for n in SIZES]
    scale = 1.0 if metric == "final_test_acc" else -1 / 50  # accuracy points -> loss

    bloated = task.verdict("bloated", "params_forward")
    assert bloated is not None and bloated.dominated and bloated.dominated_by == ["sweep.m"]
    gap = bloated.gap
    expected = scale * (85.0 - (90.0 + 5.0 * math.log10(2)))
    assert gap.iqm == pytest.approx(expected) and gap.low == pytest.approx(expected)
    assert gap.worse == 8 and gap.better == 0

    # No size beats it on either axis; on FLOPs the grown policy does.
    for axis, dominated_by in (("params_forward", []), ("train_flops", ["grown"])):
        onfront = task.verdict("onfront", axis)
        assert onfront is not None and onfront.dominated_by == dominated_by
        assert onfront.gap.low is not None and onfront.gap.high is not None
        assert onfront.gap.low < 0 < onfront.gap.high  # no difference from the frontier

    by_params = task.verdict("grown", "params_forward")
    by_flops = task.verdict("grown", "train_flops")
    assert by_params is not None and by_flops is not None
    assert not by_params.dominated and not by_flops.dominated
    # At equal parameters it is the largest size; at equal FLOPs (5e9) the frontier is at
    # 80 + 10 log10(5) = 87.0 points, so it is 8 points better with the whole CI above 0.
    assert (by_params.gap.iqm, by_params.gap.ties) == (pytest.approx(0.0), 8)  # sweep.l's twin
    assert by_flops.gap.iqm == pytest.approx(scale * (95.0 - 80.0 - 10 * math.log10(5)), abs=0.1)
    low, high = by_flops.gap.low, by_flops.gap.high
    assert low is not None and high is not None and min(low / scale, high / scale) > 7.5
    assert by_flops.gap.better == 8


def test_no_sweep_no_frontier() -> None:
    plain = Experiment(
        policies=(Arm("grown", "grown", "grown"),),
        tasks=(Arm("toy", "tiny", "tiny"),),
        seeds=(0,),
        base=RunConfig(),
    )
    assert frontier_section(plain, synthetic_results(), ["grown"]) == []
