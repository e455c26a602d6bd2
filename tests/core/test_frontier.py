"""The size-sweep frontier on numbers whose answer is known: which sizes are on it, the
interpolation between them, and the verdict on a dominated policy, a policy on the
frontier and a policy better at equal FLOPs; the frontier is the monotone hull,
which a size below the chord or a dominated size cannot lower."""

from __future__ import annotations

import math
from itertools import pairwise

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esper_core.compare.cell_result import CellResult
from esper_core.compare.experiment import Arm, Experiment
from esper_core.compare.frontier import (
    dominators,
    frontier,
    frontier_curve,
    frontier_gap,
    frontier_value,
)
from esper_core.compare.frontier_results import frontier_section
from esper_core.compare.sweep_spec import SweepArm
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


def test_a_size_below_the_chord_of_its_neighbours_lowers_nothing() -> None:
    # b is non-dominated (more cost, more value than a) but below the chord from a to c:
    # the frontier passes over it, so at b's cost it is 85, not b's 82.
    sweep = {"a": (10.0, 80.0), "b": (100.0, 82.0), "c": (1000.0, 90.0)}
    assert frontier(sweep) == ["a", "c"]
    curve = frontier_curve(sweep)
    assert curve == [(10.0, 80.0), (1000.0, 90.0)]
    assert frontier_value(curve, 100.0) == pytest.approx(85.0)
    # Above the chord it is a vertex and raises the frontier around it.
    above = {**sweep, "b": (100.0, 88.0)}
    assert frontier(above) == ["a", "b", "c"]
    assert frontier_value(frontier_curve(above), 10**1.5) == pytest.approx(84.0)
    # Exactly on the chord the frontier passes through it: it is on it, changing nothing.
    on = {**sweep, "b": (100.0, 85.0)}
    assert frontier(on) == ["a", "b", "c"]
    assert frontier_value(frontier_curve(on), 10**1.5) == pytest.approx(82.5)


def test_the_loss_hull_is_convex_and_falls_with_the_cost() -> None:
    # Test loss, lower is better: e would lower the frontier were it joined to d and f
    # (above their chord), g is bigger and worse than f.
    sweep = {
        "d": (1e3, 3.0),
        "e": (1e4, 2.8),  # the chord from d to f is at 2.5 here
        "f": (1e5, 2.0),
        "g": (1e6, 2.4),
    }
    assert frontier(sweep, higher_is_better=False) == ["d", "f"]
    curve = frontier_curve(sweep, higher_is_better=False)
    assert curve == [(1e3, 3.0), (1e5, 2.0), (1e6, 2.0)]
    assert frontier_value(curve, 1e4) == pytest.approx(2.5)
    assert frontier_value(curve, 10**5.5) == 2.0  # g lowers nothing: flat at f's loss
    assert frontier_value(curve, 2e6) is None  # past the sweep: no extrapolation
    # Convex in log cost: the slopes between vertices rise (towards 0).
    bent = {"p": (1e2, 4.0), "q": (1e3, 3.0), "r": (1e4, 2.6), "s": (1e5, 2.5)}
    assert frontier(bent, higher_is_better=False) == ["p", "q", "r", "s"]
    slopes = [b[1] - a[1] for a, b in pairwise(frontier_curve(bent, False))]
    assert slopes == sorted(slopes) and all(d < 0 for d in slopes)


def test_the_readme_charlm_means_keep_their_gap_when_a_size_below_the_chord_is_added() -> None:
    """The README's charlm means (test loss at parameters): small-deep is non-dominated but
    above the chord from small to base. Joining the non-dominated sizes turned the
    heuristic's gap at equal parameters from +0.0118 (worse) to -0.0187 (better) when
    small-deep was added; on the hull it is +0.0118 with or without it."""
    sweep = {"small": (114_304.0, 2.8930), "base": (821_760.0, 2.7058)}
    deep = {**sweep, "small-deep": (214_272.0, 2.8863)}
    heuristic = {0: (164_288.0, 2.8704)}
    gaps = [frontier_gap(heuristic, {0: s}, higher_is_better=False) for s in (sweep, deep)]
    assert gaps[0].iqm == pytest.approx(0.0118, abs=5e-5) and gaps[0].worse == 1
    assert gaps[1] == gaps[0]
    assert frontier(deep, higher_is_better=False) == ["small", "base"]


POINT = st.tuples(
    st.floats(1.0, 1e9, allow_nan=False),  # cost
    st.floats(-1e3, 1e3, allow_nan=False),  # value
)


@settings(max_examples=300, deadline=None)
@given(
    points=st.lists(POINT, min_size=1, max_size=8),
    extra=POINT,
    higher=st.booleans(),
    probes=st.lists(st.floats(1.0, 1e9, allow_nan=False), min_size=1, max_size=8),
)
def test_adding_any_point_never_worsens_the_frontier(
    points: list[tuple[float, float]],
    extra: tuple[float, float],
    higher: bool,
    probes: list[float],
) -> None:
    sweep = {f"p{i}": p for i, p in enumerate(points)}
    before = frontier_curve(sweep, higher)
    after = frontier_curve({**sweep, "extra": extra}, higher)
    sign = 1.0 if higher else -1.0
    tolerance = 1e-9 * max(1.0, *(abs(v) for _, v in [*points, extra]))
    for cost in [*probes, *(c for c, _ in points), extra[0]]:
        old, new = frontier_value(before, cost), frontier_value(after, cost)
        if old is not None:
            assert new is not None and sign * (new - old) >= -tolerance
    # Every point is at or under the frontier (over it for loss) wherever it is defined,
    # and the frontier never gets worse with the cost.
    for cost, value in [*points, extra]:
        reached = frontier_value(after, cost)
        assert reached is not None and sign * (reached - value) >= -tolerance
    values = [sign * v for _, v in after]
    assert all(b >= a - tolerance for a, b in pairwise(values))
    # Concave (convex for loss) in log cost: no vertex below the chord of its neighbours.
    logs = [math.log(c) for c, _ in after]
    for i in range(1, len(after) - 1):
        t = (logs[i] - logs[i - 1]) / (logs[i + 1] - logs[i - 1])
        assert values[i] >= values[i - 1] + t * (values[i + 1] - values[i - 1]) - tolerance


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


def cell(
    policy: str, seed: int, params: float, flops: float, acc: float, val: float | None = None
) -> CellResult:
    """A run whose validation accuracy is ``val`` (default: its test accuracy)."""
    val = acc if val is None else val
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
        final_val_acc=val,
        final_val_loss=(100.0 - val) / 50,
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


def test_a_size_below_the_chord_or_dominated_changes_no_verdict() -> None:
    """Two more sizes on every seed: one below the chord from sweep.s to sweep.m, one that
    sweep.m dominates. Neither is on the frontier, and every policy's gap is unchanged."""
    policies = ["bloated", "onfront", "grown", *SIZES]
    (plain,) = frontier_section(experiment(), synthetic_results(), policies)
    extra = {"sweep.mid": (10**3.5, 10**9.5, 84.0), "sweep.fat": (2e4, 2e10, 88.0)}
    cells = synthetic_results() + [
        cell(label, s, p, f, acc + noise(s)) for label, (p, f, acc) in extra.items() for s in SEEDS
    ]
    swept = attrs.evolve(experiment(), sweep=tuple(SweepArm(label) for label in [*SIZES, *extra]))
    (more,) = frontier_section(swept, cells, [*policies, *extra])
    for axis in more.axes:
        assert {p.label for p in axis.points if p.on_frontier} == set(SIZES)
    assert [(v.policy, v.axis, v.gap) for v in more.verdicts] == [
        (v.policy, v.axis, v.gap) for v in plain.verdicts
    ]
    # The joined non-dominated sizes would have put sweep.mid on the frontier and made the
    # policy between sweep.s and sweep.m look better than it is.
    mid = {"s": (1e3, 80.0), "mid": (10**3.5, 84.0), "m": (1e4, 90.0)}
    assert frontier(mid) == ["s", "m"]


def test_no_sweep_no_frontier() -> None:
    plain = Experiment(
        policies=(Arm("grown", "grown", "grown"),),
        tasks=(Arm("toy", "tiny", "tiny"),),
        seeds=(0,),
        base=RunConfig(),
    )
    assert frontier_section(plain, synthetic_results(), ["grown"]) == []


@pytest.mark.parametrize("metric", ["final_test_acc", "final_test_loss"])
def test_the_frontier_is_chosen_by_validation_and_drawn_at_test_values(metric: str) -> None:
    """A frontier drawn through each seed's best test values picks the frontier
    with the metric it judges. Here ``sweep.m`` is lucky on test (99) but below the chord
    of its neighbours on validation (91 < 92.5): a researcher choosing by validation skips
    it, so it is off the frontier, and a policy at its cost is judged against the line
    from ``sweep.s`` to ``sweep.l`` at their test values (92.5), not against 99."""
    sizes = {
        "sweep.s": (1e3, 90.0, 90.0),
        "sweep.m": (1e4, 99.0, 91.0),
        "sweep.l": (1e5, 95.0, 95.0),
    }
    cells = [
        cell(label, s, p, p * 1e5, acc, val)
        for label, (p, acc, val) in sizes.items()
        for s in SEEDS
    ]
    cells += [cell("grown", s, 1e4, 1e9, 93.0) for s in SEEDS]
    exp = Experiment(
        policies=(Arm("grown", "grown", "grown"),),
        tasks=(Arm("toy", "tiny", "tiny"),),
        seeds=tuple(SEEDS),
        base=RunConfig(),
        sweep=tuple(SweepArm(label) for label in sizes),
        resamples=200,
    )
    (task,) = frontier_section(exp, cells, ["grown", *sizes], {"toy": metric})
    for axis in task.axes:
        marks = {p.label: (p.value, p.on_frontier) for p in axis.points}
        m_test = 99.0 if metric == "final_test_acc" else (100.0 - 99.0) / 50
        assert marks["sweep.m"] == pytest.approx((m_test, False))
        assert marks["sweep.s"][1] and marks["sweep.l"][1]
    scale = 1.0 if metric == "final_test_acc" else -1 / 50
    gap = task.verdict("grown", "params_forward")
    assert gap is not None and gap.gap.iqm == pytest.approx(scale * (93.0 - 92.5))
