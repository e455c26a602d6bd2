"""Alpha curves, schedules and blend operators (DOMAIN §2)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from esper_core.lifecycle.alpha import (
    CURVES,
    STYLES,
    AlphaSchedule,
    BlendGate,
    blend_add,
    blend_gated,
    blend_multiply,
    cosine,
    curve_value,
    linear,
    sigmoid,
)

STEEPNESS = [0.01, 0.5, 1.0, 10.0, 37.5, 200.0, 5000.0]


@pytest.mark.parametrize("curve", CURVES)
@pytest.mark.parametrize("steepness", STEEPNESS)
def test_curves_hit_zero_and_one_exactly(curve: str, steepness: float) -> None:
    assert curve_value(curve, 0.0, steepness) == 0.0
    assert curve_value(curve, 1.0, steepness) == 1.0


def test_curve_formulas() -> None:
    assert linear(0.3) == 0.3
    assert cosine(0.5) == pytest.approx(0.5)
    assert cosine(0.25) == pytest.approx((1 - math.cos(math.pi / 4)) / 2)
    assert sigmoid(0.5, 10.0) == pytest.approx(0.5)
    # The logistic curve itself, rescaled from [lo, hi] to [0, 1].
    k, t = 6.0, 0.3
    lo, hi = 1 / (1 + math.exp(k / 2)), 1 / (1 + math.exp(-k / 2))
    assert sigmoid(t, k) == pytest.approx((1 / (1 + math.exp(-k * (t - 0.5))) - lo) / (hi - lo))
    # Steeper curves start slower.
    assert sigmoid(0.2, 20.0) < sigmoid(0.2, 5.0) < linear(0.2)


def test_unknown_curve_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown alpha curve 'square'"):
        curve_value("square", 0.5, 10.0)


@settings(max_examples=200, deadline=None)
@given(
    curve=st.sampled_from(CURVES),
    steepness=st.floats(0.01, 5000.0),
    t1=st.floats(0.0, 1.0),
    t2=st.floats(0.0, 1.0),
)
def test_curves_are_monotone_within_unit_interval(
    curve: str, steepness: float, t1: float, t2: float
) -> None:
    lo, hi = sorted((t1, t2))
    a, b = curve_value(curve, lo, steepness), curve_value(curve, hi, steepness)
    assert 0.0 <= a <= b <= 1.0


def _trajectory(schedule: AlphaSchedule, extra: int = 3) -> list[float]:
    values = [schedule.value]
    for _ in range(schedule.ticks + extra):
        values.append(schedule.tick())
    return values


def _assert_ramp(values: list[float], start: float, target: float, ticks: int) -> None:
    lo, hi = sorted((start, target))
    assert all(lo <= v <= hi for v in values), values  # never overshoots
    steps = list(itertools.pairwise(values))
    if target >= start:
        assert all(b >= a for a, b in steps), values
    else:
        assert all(b <= a for a, b in steps), values
    assert values[ticks] == target  # exactly the target on the last tick
    assert all(v == target for v in values[ticks:])


UNIT = st.floats(0.0, 1.0)


@settings(max_examples=200, deadline=None)
@given(
    curve=st.sampled_from(CURVES),
    start=UNIT,
    target=UNIT,
    ticks=st.integers(1, 12),
    steepness=st.floats(0.1, 100.0),
)
def test_schedule_is_monotone_and_lands_exactly_on_target(
    curve: str, start: float, target: float, ticks: int, steepness: float
) -> None:
    schedule = AlphaSchedule(
        curve=curve, start=start, target=target, ticks=ticks, steepness=steepness
    )
    assert schedule.value == start
    values = _trajectory(schedule)
    if curve == "linear" and ticks > 1 and abs(target - start) > 1e-6:
        assert values[1] != target  # a ramp over ``ticks`` epochs, not a jump
    _assert_ramp(values, start, target, ticks)
    assert schedule.done


@settings(max_examples=200, deadline=None)
@given(
    curve=st.sampled_from(CURVES),
    target=UNIT,
    new_target=UNIT,
    ticks=st.integers(1, 8),
    new_ticks=st.integers(1, 8),
    when=st.integers(0, 8),
)
def test_retarget_ramps_from_the_current_value(
    curve: str, target: float, new_target: float, ticks: int, new_ticks: int, when: int
) -> None:
    schedule = AlphaSchedule(curve=curve, start=0.0, target=target, ticks=ticks)
    for _ in range(when):
        schedule.tick()
    current = schedule.value
    schedule.retarget(new_target, new_ticks)
    assert schedule.value == current and not schedule.done
    _assert_ramp(_trajectory(schedule), current, new_target, new_ticks)


def test_zero_tick_schedule_is_already_at_target() -> None:
    schedule = AlphaSchedule(start=0.0, target=0.7, ticks=0)
    assert schedule.done and schedule.value == 0.7 and schedule.tick() == 0.7


# ---------------------------------------------------------------- blend operators


def _tensors(shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    h = torch.randn(shape, generator=g)
    s = torch.randn(shape, generator=g) * 3
    seed_input = torch.randn(shape, generator=g)
    return h, s, seed_input


SHAPES = [(4, 3, 5, 5), (4, 7, 6)]


@pytest.mark.parametrize("shape", SHAPES, ids=["cnn", "transformer"])
def test_operators_are_exactly_the_identity_at_alpha_zero(shape: tuple[int, ...]) -> None:
    h, s, x = _tensors(shape)
    per_sample = torch.zeros(shape[0]).view(-1, *([1] * (len(shape) - 1)))
    gate = BlendGate(
        shape[-1] if len(shape) == 3 else shape[1], "transformer" if len(shape) == 3 else "cnn"
    )
    with torch.no_grad():
        gate.proj.weight.normal_()  # a gate that is not 0.5 everywhere
    for alpha in (torch.zeros(()), per_sample):
        assert torch.equal(blend_add(h, s, alpha, x), h)
        assert torch.equal(blend_multiply(h, s, alpha, x), h)
        assert torch.equal(blend_gated(h, s, alpha, gate(x)), h)


def test_add_is_lerp_and_reaches_the_seed_at_alpha_one() -> None:
    h, s, x = _tensors((2, 3, 4, 4))
    assert torch.equal(blend_add(h, s, torch.ones(()), x), s)
    assert torch.allclose(blend_add(h, s, torch.tensor(0.3), x), 0.7 * h + 0.3 * s, atol=1e-6)


def test_multiply_and_gate_formulas() -> None:
    h, s, x = _tensors((2, 3, 4, 4))
    a = torch.tensor(0.4)
    assert torch.allclose(blend_multiply(h, s, a, x), h * (1 + 0.4 * torch.tanh(s - x)))
    g = torch.full((2, 1, 1, 1), 0.5)
    assert torch.allclose(blend_gated(h, s, a, g), torch.lerp(h, s, torch.tensor(0.2)))


def test_blend_gate_starts_at_one_half_with_the_right_shape() -> None:
    cnn = BlendGate(3, "cnn")
    assert torch.equal(cnn(torch.randn(5, 3, 4, 4)), torch.full((5, 1, 1, 1), 0.5))
    seq = BlendGate(6, "transformer")
    assert torch.equal(seq(torch.randn(2, 7, 6)), torch.full((2, 7, 1), 0.5))


def test_styles_pair_curves_with_operators() -> None:
    for name in ("linear_add", "sigmoid_add", "linear_multiply", "gated"):
        assert name in STYLES and STYLES[name].name == name
    assert {s.curve for s in STYLES.values()} <= set(CURVES)
    assert {s.operator for s in STYLES.values()} == {"add", "multiply", "gate"}
    assert (STYLES["sigmoid_add"].curve, STYLES["sigmoid_add"].operator) == ("sigmoid", "add")
    assert (STYLES["linear_multiply"].curve, STYLES["linear_multiply"].operator) == (
        "linear",
        "multiply",
    )
    assert STYLES["gated"].operator == "gate"
