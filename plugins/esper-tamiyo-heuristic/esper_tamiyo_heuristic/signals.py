"""The numbers the heuristic decides on: a capacity limit, a seed's measured gain and
its price. Plain functions of loss histories, so each rule is testable on its own."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from attrs import frozen

if TYPE_CHECKING:
    from esper_core.env.observation import Observation


@frozen
class Trigger:
    """Whether the growth trigger fires, and why (or why not) in the user's terms."""

    fired: bool
    why: str


def capacity_check(
    train_losses: Sequence[float],
    chance_loss: float,
    *,
    loss_ratio: float,
    window: int,
    max_drop: float,
    signal: str = "loss",
    limit: str = "capacity limit",
) -> Trigger:
    """The host underfits and barely learns: its training loss is still at least
    ``loss_ratio`` x the chance-level loss, and over the last ``window`` epochs it fell
    by less than ``max_drop`` (a fraction of itself) per epoch. ``signal`` names the
    losses and ``limit`` what a firing trigger means in :attr:`Trigger.why`.

    A host that fits its training data (loss far below chance) never qualifies, however
    flat its curve: a plateau near 100% training accuracy is not a capacity limit.
    """
    if len(train_losses) < window + 1 or chance_loss <= 0:
        return Trigger(False, f"{signal} seen for {len(train_losses)} of {window + 1} epochs")
    now, then = train_losses[-1], train_losses[-1 - window]
    if not (math.isfinite(now) and math.isfinite(then)) or then <= 0:
        return Trigger(False, f"{signal} not finite or zero ({then:.3g} -> {now:.3g})")
    drop_per_epoch = (then - now) / then / window
    if now < loss_ratio * chance_loss:
        return Trigger(
            False,
            f"no capacity limit: {signal} {now:.3f} < {loss_ratio:g} x chance {chance_loss:.3f}",
        )
    falling = f"{signal} {now:.3f} falls {drop_per_epoch:.1%}/epoch"
    if drop_per_epoch >= max_drop:
        return Trigger(False, f"still learning: {falling} >= {max_drop:.1%}")
    return Trigger(True, f"{limit}: {falling} < {max_drop:.1%}, chance {chance_loss:.3f}")


def fit_gate(
    train_loss: float | None, chance_loss: float, ratio: float, signal: str = "training loss"
) -> Trigger | None:
    """A closed gate (a Trigger that did not fire, saying why) while the host fits its
    training data: its training loss below ``ratio`` x the chance-level loss. A host
    that already fits what it is shown has no capacity limit for growth to lift. None
    when the gate is open (``ratio`` 0, no loss yet, or the host still underfits).
    ``signal`` names the loss in the reason (see :func:`train_signal`)."""
    if ratio <= 0 or train_loss is None or chance_loss <= 0 or not math.isfinite(train_loss):
        return None
    if train_loss >= ratio * chance_loss:
        return None
    return Trigger(
        False,
        f"fits its training data: {signal} {train_loss:.3f} < fit_loss_ratio={ratio:g} "
        f"x chance {chance_loss:.3f}",
    )


def train_signal(obs: Observation) -> str:
    """What ``obs.train_loss`` is: the training loss, or validation's where the env saw no
    training batch (a Grower, whose user's loop trains), so a reason never calls a
    validation loss a training loss."""
    return "training loss" if obs.train_measured else "validation loss (no training loss seen)"


def expansion_check(obs: Observation, ratio: float) -> Trigger:
    """A free slot where new capacity buys more than the host's own next step: its
    expansion score (``Observation.expansion``) is at least ``ratio`` x the host's.
    Free: GERMINATE is legal there now."""
    from esper_core.lifecycle.actions import LifecycleOp

    if not obs.expansion:
        return Trigger(False, "no expansion scores: set env.expansion_batches > 0")
    legal = obs.masks.slot[LifecycleOp.GERMINATE].tolist()
    scores = {
        obs.slots[i].slot_id: value
        for i, (value, ok) in enumerate(zip(obs.expansion, legal))
        if ok and math.isfinite(value)
    }
    if not scores:
        return Trigger(False, "no expansion score measured at a free slot")
    slot_id = max(scores, key=lambda s: scores[s])
    best = scores[slot_id]
    at = f"expansion score {best:.2f} x the host's at {slot_id}"
    if best < ratio:
        return Trigger(False, f"no bottleneck: {at} < {ratio:g}")
    return Trigger(True, f"bottleneck: {at} >= {ratio:g}")


def capacity_limited(
    train_losses: Sequence[float],
    chance_loss: float,
    *,
    loss_ratio: float,
    window: int,
    max_drop: float,
) -> bool:
    """Whether :func:`capacity_check` fires."""
    check = capacity_check(
        train_losses, chance_loss, loss_ratio=loss_ratio, window=window, max_drop=max_drop
    )
    return check.fired


def slope(values: Sequence[float]) -> float:
    """Least-squares slope per step of ``values`` (0 for fewer than two)."""
    n = len(values)
    if n < 2:
        return 0.0
    mean_x, mean_y = (n - 1) / 2, sum(values) / n
    num = sum((i - mean_x) * (v - mean_y) for i, v in enumerate(values))
    den = sum((i - mean_x) ** 2 for i in range(n))
    return num / den


@frozen
class Baseline:
    """Validation loss just before a seed touched the output, and the host's own trend."""

    epoch: int  # the last epoch trained without the seed in the output
    level: float  # mean validation loss of the last ``window`` such epochs
    trend: float  # validation loss change per epoch then (never positive)


def baseline_of(pre_seed_losses: Sequence[float], epoch: int, window: int) -> Baseline | None:
    """The baseline from the validation losses of the epochs before the seed blended
    (oldest first, the last one at ``epoch``); None when there are none."""
    losses = [v for v in pre_seed_losses if math.isfinite(v)]
    if not losses:
        return None
    level = sum(losses[-window:]) / len(losses[-window:])
    return Baseline(epoch=epoch, level=level, trend=min(0.0, slope(losses)))


def relative_gain(base: Baseline, losses: Sequence[float], epoch: int, window: int) -> float:
    """How much lower the validation loss is now than the host alone was heading for,
    as a fraction of the baseline level: the seed's measured gain, not its reliance.

    The host's trend before the seed is extrapolated to ``epoch`` (the last entry of
    ``losses``), so progress the host would have made anyway is not credited to the seed.
    """
    recent = [v for v in losses[-window:] if math.isfinite(v)]
    if not recent or base.level <= 0:
        return -math.inf
    expected = max(0.0, base.level + base.trend * (epoch - base.epoch))
    return (expected - sum(recent) / len(recent)) / base.level


def required_gain(min_gain: float, per_doubling: float, before: float, after: float) -> float:
    """The gain a seed must show to pay for itself: ``min_gain`` plus ``per_doubling``
    for every doubling of the model's cost it causes (parameters, or training FLOPs)."""
    growth = max(after, 1) / max(before, 1)
    return min_gain + per_doubling * math.log2(max(growth, 1.0))


def gain_text(gain: float | None, op: str, need: float) -> str:
    """``gain +5.52% of val loss < 5.50% needed``: the gain and its price in percent of the
    validation loss (their unit), with as many digits as it takes for two different
    numbers to read differently (a decision read ``gain +0.055 < 0.055`` before)."""
    if gain is None:
        return f"gain not measurable {op} {100 * need:.2f}% of val loss needed"
    digits = 2
    while digits < 6 and gain != need and f"{100 * gain:.{digits}f}" == f"{100 * need:.{digits}f}":
        digits += 1
    return f"gain {100 * gain:+.{digits}f}% of val loss {op} {100 * need:.{digits}f}% needed"
