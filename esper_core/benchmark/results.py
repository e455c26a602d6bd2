"""The benchmark's results: each pair's search, menu and oracle, and each policy's scores.

:func:`score_rows` turns the pairs' evaluation values into the rows of results.md and
results.json (:mod:`esper_core.benchmark.scores` has the formulas): per policy under
test, the normalized score over the pairs where growth pays, and the extra training
FLOPs and metric lost over the pairs where it does not, each pooled over pairs x
evaluation seeds and per pair. A controller trained in several runs
(``[training_runs]``) is pooled over its runs too (:class:`RunsResult`, computed in
:mod:`esper_core.benchmark.pooled_runs`), and each policy meets every later one in a
paired difference (:class:`PolicyDifference`, :mod:`esper_core.benchmark.paired`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import attrs
from attrs import frozen

from esper_core.benchmark import scores
from esper_core.benchmark.oracle import RULE as ORACLE_RULE
from esper_core.compare.tuning_choice import RULE as TUNING_RULE
from esper_core.compare.tuning_choice import edge_line
from esper_core.compare.tuning_results import ArmTuning

SCHEMA_VERSION = 7  # 2: training_runs; 3: within_noise; 4: no_baseline; 5: paired;
# 6: tuning.edges (wait's rate at an end of its grid); 7: wait_stalled
NORMALIZED, EXTRA_FLOPS, METRIC_LOST = "normalized", "extra_flops", "metric_lost"
GAIN_UNIT, FLOPS_UNIT = "fraction of the oracle's gain", "fraction of wait's FLOPs"


@frozen
class MenuRecord:
    """A menu entry and its validation values on the tuning seeds (tuning-seed order)."""

    label: str
    policy: str
    options: dict[str, Any]
    operator: str
    at: float | None
    values: list[float | None] = attrs.field(factory=list)
    mean: float | None = None
    failed: list[int] = attrs.field(factory=list)  # tuning seeds it did not train on


@frozen
class ArmValues:
    """One evaluation arm on the evaluation seeds (seed order; None: no finished run)."""

    arm: str
    metric: list[float | None]
    train_flops: list[float | None]


@frozen
class PairResult:
    label: str
    task: str
    split: str
    metric: str  # the CellResult field: final_test_acc | final_test_loss
    higher_is_better: bool
    lr_grid: list[float]
    lr: float | None  # wait's chosen rate, used by every arm; None: search unfinished
    tuning: ArmTuning | None = None
    menu: list[MenuRecord] = attrs.field(factory=list)
    left_out: list[str] = attrs.field(factory=list)  # operators the host refused, and why
    oracle: str | None = None  # the chosen entry's label; None: selection unfinished
    growth_pays: bool | None = None  # the oracle is not wait
    # the best entry's gain over wait on the tuning seeds was within their noise
    within_noise: str | None = None
    # wait did not train on a tuning seed at its rate: no baseline, the pair is not scored
    no_baseline: str | None = None
    # wait did not train on an evaluation seed at its rate: no claim against it, the pair
    # is not scored either
    wait_stalled: str | None = None
    gap: float | None = None  # mean oracle - wait on the evaluation seeds (higher better)
    evaluation: list[ArmValues] = attrs.field(factory=list)
    failures: list[str] = attrs.field(factory=list)  # cells that failed, one line each

    def arm(self, label: str) -> ArmValues | None:
        return next((a for a in self.evaluation if a.arm == label), None)


@frozen
class PairScore:
    pair: str
    n: int
    estimate: float
    low: float | None = None
    high: float | None = None


@frozen
class ScoreRow:
    """One policy's score of one kind over the pairs it applies to."""

    policy: str
    score: str  # normalized | extra_flops | metric_lost
    unit: str
    pairs: list[str]
    estimate: float | None
    low: float | None = None
    high: float | None = None
    per_pair: list[PairScore] = attrs.field(factory=list)


@frozen
class RunsScore:
    """A controller's score of one kind pooled over its training runs x pairs x
    evaluation seeds (``seeds``: those every run finished on every pair in ``pairs``)."""

    score: str  # normalized | extra_flops | metric_lost
    unit: str
    pairs: list[str]
    seeds: list[int]
    estimate: float | None
    low: float | None = None
    high: float | None = None


@frozen
class RunsDifference:
    """The controller's normalized score less another policy's on the same pair and seed,
    per (run, pair, seed) cell: one crossed table; wins counted over its cells."""

    against: str
    pairs: list[str]
    seeds: list[int]
    estimate: float | None
    low: float | None = None
    high: float | None = None
    wins: int = 0
    ties: int = 0
    losses: int = 0


@frozen
class PolicyDifference:
    """``policy`` less ``against`` on the normalized score, per (pair, seed) cell both
    finished (:mod:`esper_core.benchmark.paired`); ``seeds``: those every pair in
    ``pairs`` has for both; wins counted over the cells."""

    policy: str
    against: str
    pairs: list[str]
    seeds: list[int]
    estimate: float | None
    low: float | None = None
    high: float | None = None
    wins: int = 0
    ties: int = 0
    losses: int = 0


@frozen
class RunsResult:
    """One ``[training_runs]`` group: the controller pooled over its training runs."""

    group: str
    runs: list[str]
    scores: list[RunsScore] = attrs.field(factory=list)
    differences: list[RunsDifference] = attrs.field(factory=list)


@frozen
class BenchmarkResults:
    split: str
    seeds: list[int]
    tuning_seeds: list[int]
    moments: list[float]
    policies: list[str]
    pairs: list[PairResult]
    rows: list[ScoreRow] = attrs.field(factory=list)
    confidence: float = 0.95
    tuning_rule: str = TUNING_RULE
    oracle_rule: str = ORACLE_RULE
    training_runs: list[RunsResult] = attrs.field(factory=list)
    paired: list[PolicyDifference] = attrs.field(factory=list)
    schema_version: int = SCHEMA_VERSION


def arm_values(arm: ArmValues | None, seeds: Sequence[int], field: str) -> dict[int, float]:
    if arm is None:
        return {}
    column = arm.metric if field == "metric" else arm.train_flops
    return {s: float(v) for s, v in zip(seeds, column) if v is not None}


def metric_unit(pair: PairResult) -> str:
    return "accuracy points" if pair.higher_is_better else "loss"


def _row(
    policy: str,
    kind: str,
    unit: str,
    per_pair: list[tuple[str, dict[int, float]]],
    seeds: Sequence[int],
    settings: tuple[float, int, int],
) -> ScoreRow:
    confidence, resamples, boot = settings
    found = [(p, v) for p, v in per_pair if v]
    pooled = scores.pooled([v for _, v in found], seeds, confidence, resamples, boot)
    shown = []
    for pair, values in found:
        one = scores.one_pair(values, confidence, resamples, boot)
        if one is not None:
            shown.append(PairScore(pair, len(values), one.estimate, one.low, one.high))
    return ScoreRow(
        policy,
        kind,
        unit,
        [p for p, _ in found],
        None if pooled is None else pooled.estimate,
        None if pooled is None else pooled.low,
        None if pooled is None else pooled.high,
        shown,
    )


def pair_scores(
    pair: PairResult, policy: str, seeds: Sequence[int]
) -> list[tuple[str, str, dict[int, float]]]:
    """The policy's per-seed scores on a pair whose oracle is chosen, as (kind, unit,
    values): the normalized score where growth pays (no values where the oracle did not
    beat wait on the evaluation seeds), else the extra FLOPs and the metric lost."""
    wait, mine = pair.arm("wait"), pair.arm(policy)
    metric_w, metric_p = arm_values(wait, seeds, "metric"), arm_values(mine, seeds, "metric")
    if pair.growth_pays:
        oracle = arm_values(pair.arm("oracle"), seeds, "metric")
        found = scores.normalized(metric_p, metric_w, oracle, pair.higher_is_better)
        return [(NORMALIZED, GAIN_UNIT, found or {})]
    flops_w, flops_p = arm_values(wait, seeds, "flops"), arm_values(mine, seeds, "flops")
    return [
        (EXTRA_FLOPS, FLOPS_UNIT, scores.extra_flops(flops_p, flops_w)),
        (
            METRIC_LOST,
            metric_unit(pair),
            scores.metric_lost(metric_p, metric_w, pair.higher_is_better),
        ),
    ]


def by_kind(
    pairs: Sequence[PairResult], policy: str, seeds: Sequence[int]
) -> dict[tuple[str, str], list[tuple[str, dict[int, float]]]]:
    """Per (kind, unit), each scored pair's per-seed values: normalized first, then
    extra FLOPs, then the metric lost per unit (accuracy points and loss apart)."""
    found: dict[tuple[str, str], list[tuple[str, dict[int, float]]]] = {}
    for pair in pairs:
        if pair.growth_pays is None or pair.no_baseline or pair.wait_stalled:
            continue
        for kind, unit, values in pair_scores(pair, policy, seeds):
            found.setdefault((kind, unit), []).append((pair.label, values))
    order = (NORMALIZED, EXTRA_FLOPS, METRIC_LOST)
    return dict(sorted(found.items(), key=lambda item: order.index(item[0][0])))


def score_rows(
    pairs: Sequence[PairResult],
    policies: Sequence[str],
    seeds: Sequence[int],
    settings: tuple[float, int, int],
) -> list[ScoreRow]:
    """Per policy: the normalized score where growth pays; where the oracle is wait, the
    extra training FLOPs and the metric lost (one row per metric kind: accuracy points
    and loss are not pooled together). ``settings``: confidence, resamples, bootstrap seed."""
    return [
        _row(policy, kind, unit, per_pair, seeds, settings)
        for policy in policies
        for (kind, unit), per_pair in by_kind(pairs, policy, seeds).items()
    ]


def at_grid_edge(pairs: Sequence[PairResult]) -> list[str]:
    """Pairs whose wait rate is an end of its grid, one line each: a baseline that may be
    trained below its best rate, so what growth gains there may be partly the rate's."""
    return [
        f"{p.label}: wait's {edge_line(key, p.lr, end)}"
        for p in pairs
        if p.tuning is not None and p.lr is not None
        for key, end in p.tuning.edges.items()
    ]


def unscored(pairs: Sequence[PairResult]) -> list[str]:
    """Pairs left out of every score, one line each (what results.md shows): those whose
    wait did not train on a tuning seed or on an evaluation seed, and those where growth
    pays on validation but whose oracle did not beat wait on the evaluation seeds (no
    normalized score)."""
    no_wait = [(p, p.no_baseline or p.wait_stalled) for p in pairs]
    return [f"{p.label}: {why}" for p, why in no_wait if why] + [
        f"{p.label}: the oracle ({p.oracle}) did not beat wait on the evaluation seeds "
        f"(mean gap {p.gap:+.4g}); no normalized score on this pair"
        for p, why in no_wait
        if p.growth_pays
        and not why
        and p.gap is not None
        and not (math.isfinite(p.gap) and p.gap > 0)
    ]
