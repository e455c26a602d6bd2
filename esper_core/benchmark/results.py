"""The benchmark's results: each pair's search, menu and oracle, and each policy's scores.

:func:`score_rows` turns the pairs' evaluation values into the rows of results.md and
results.json (:mod:`esper_core.benchmark.scores` has the formulas): per policy under
test, the normalized score over the pairs where growth pays, and the extra training
FLOPs and metric lost over the pairs where it does not, each pooled over pairs x
evaluation seeds and per pair.
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
from esper_core.compare.tuning_results import ArmTuning

SCHEMA_VERSION = 1
NORMALIZED, EXTRA_FLOPS, METRIC_LOST = "normalized", "extra_flops", "metric_lost"


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
    schema_version: int = SCHEMA_VERSION


def _values(arm: ArmValues | None, seeds: Sequence[int], field: str) -> dict[int, float]:
    if arm is None:
        return {}
    column = arm.metric if field == "metric" else arm.train_flops
    return {s: float(v) for s, v in zip(seeds, column) if v is not None}


def _unit(pair: PairResult) -> str:
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


def score_rows(
    pairs: Sequence[PairResult],
    policies: Sequence[str],
    seeds: Sequence[int],
    settings: tuple[float, int, int],
) -> list[ScoreRow]:
    """Per policy: the normalized score where growth pays; where the oracle is wait, the
    extra training FLOPs and the metric lost (one row per metric kind: accuracy points
    and loss are not pooled together). ``settings``: confidence, resamples, bootstrap seed."""
    rows: list[ScoreRow] = []
    for policy in policies:
        paying: list[tuple[str, dict[int, float]]] = []
        flops: list[tuple[str, dict[int, float]]] = []
        lost: dict[str, list[tuple[str, dict[int, float]]]] = {}
        for pair in pairs:
            if pair.growth_pays is None:
                continue
            wait = pair.arm("wait")
            mine = pair.arm(policy)
            metric_w, metric_p = _values(wait, seeds, "metric"), _values(mine, seeds, "metric")
            if pair.growth_pays:
                oracle = _values(pair.arm("oracle"), seeds, "metric")
                found = scores.normalized(metric_p, metric_w, oracle, pair.higher_is_better)
                paying.append((pair.label, found or {}))
            else:
                flops_w, flops_p = _values(wait, seeds, "flops"), _values(mine, seeds, "flops")
                flops.append((pair.label, scores.extra_flops(flops_p, flops_w)))
                lost.setdefault(_unit(pair), []).append(
                    (pair.label, scores.metric_lost(metric_p, metric_w, pair.higher_is_better))
                )
        if paying:
            rows.append(
                _row(policy, NORMALIZED, "fraction of the oracle's gain", paying, seeds, settings)
            )
        if flops:
            rows.append(
                _row(policy, EXTRA_FLOPS, "fraction of wait's FLOPs", flops, seeds, settings)
            )
        for unit, kind in lost.items():
            rows.append(_row(policy, METRIC_LOST, unit, kind, seeds, settings))
    return rows


def unscored(pairs: Sequence[PairResult]) -> list[str]:
    """Pairs where growth pays on validation but whose oracle did not beat wait on the
    evaluation seeds: no normalized score there (the lines results.md shows)."""
    return [
        f"{p.label}: the oracle ({p.oracle}) did not beat wait on the evaluation seeds "
        f"(mean gap {p.gap:+.4g}); no normalized score on this pair"
        for p in pairs
        if p.growth_pays and p.gap is not None and not (math.isfinite(p.gap) and p.gap > 0)
    ]
