"""Golden values per family, computed by hand (the arithmetic is in each test), and the
sign and timing rules: the loss family's sign, sparse's silence before the last step."""

from __future__ import annotations

import math

import pytest
from esper_rewards.loss import LossReward
from esper_rewards.pbrs import PBRSReward
from esper_rewards.shaped import ShapedReward
from esper_rewards.simplified import SimplifiedReward
from esper_rewards.sparse import SparseReward
from hypothesis import given
from hypothesis import strategies as st

from esper_core.lifecycle.actions import LifecycleOp
from esper_core.lifecycle.stages import Stage
from tests.plugins.esper_rewards.builders import FAMILIES, ctx, dormant, family, snap

GAMMA = 0.99

# One transition several goldens share (γ = 0.99, w = 0.3):
#   before: r0c0 TRAINING 3 epochs  -> 2 + 0.9 = 2.9
#           r0c1 DORMANT            -> 0
#           r0c2 FOSSILIZED 10 ep.  -> 7.5 + min(3.0, 1) = 8.5
#   after:  r0c0 BLENDING 1 epoch   -> 3.5 + 0.3 = 3.8; r0c1 0; r0c2 FOSSILIZED 11 -> 8.5
#   Φ(s) = 11.4, Φ(s') = 12.3; shaping = 0.3·(0.99·12.3 − 11.4) = 0.3·0.777 = 0.2331
#   rent: the seeds that touch the output after the step (r0c0 BLENDING, r0c2 the
#   fossil, 1000 parameters each) against a 10000-parameter host:
#   0.01·0.5·ln(1 + 2000/10000) = 0.005·ln 1.2
BEFORE = (
    snap("r0c0", Stage.TRAINING, 3, params=1000),
    snap("r0c1", Stage.DORMANT),
    snap("r0c2", Stage.FOSSILIZED, 10, contribution=2.0, params=1000, gain=3.0),
)
AFTER = (
    snap("r0c0", Stage.BLENDING, 1, contribution=0.5, params=1000, gain=0.5),
    snap("r0c1", Stage.DORMANT),
    snap("r0c2", Stage.FOSSILIZED, 11, contribution=2.0, params=1000, gain=3.0),
)
SHAPING = 0.2331
RENT = -0.005 * math.log(1.2)
# accuracy: 0.1·(0.99·83.5 − 80.0) = 0.1·2.665
ACCURACY = 0.2665


def advance_step(**overrides: object):
    values = dict(
        op=LifecycleOp.ADVANCE,
        slot=0,
        slots_before=BEFORE,
        slots_after=AFTER,
        seed_params=2000,
        fossil_params=1000,
        val_acc_prev=80.0,
        val_acc=83.5,
        val_loss_prev=0.50,
        val_loss=0.45,
    )
    values.update(overrides)
    return ctx(**values)


@pytest.mark.parametrize("cls", FAMILIES, ids=lambda c: c.name)
def test_components_are_the_declared_names(cls: type) -> None:
    reward = family(cls, gamma=GAMMA)
    for step in (advance_step(), advance_step(epoch=30), advance_step(applied=False), ctx()):
        breakdown = reward.compute(step)
        assert tuple(breakdown.components) == cls.components
        assert breakdown.total == pytest.approx(math.fsum(breakdown.components.values()))


# ---------------------------------------------------------------- pbrs


def test_pbrs_golden_mid_episode() -> None:
    b = family(PBRSReward, gamma=GAMMA).compute(advance_step())
    assert b.components == pytest.approx(
        {"accuracy": ACCURACY, "shaping": SHAPING, "rent": RENT, "terminal": 0.0, "refused": 0.0}
    )
    assert b.total == pytest.approx(ACCURACY + SHAPING + RENT)


def test_pbrs_golden_last_step() -> None:
    step = ctx(epoch=30, max_epochs=30, val_acc_prev=91.0, val_acc=92.0)
    b = family(PBRSReward, gamma=GAMMA).compute(step)
    # accuracy 0.1·(0.99·92 − 91) = 0.008; Φ = 0 before and after; no seeds: no rent;
    # terminal 1.0·92/100
    assert b.components == pytest.approx(
        {"accuracy": 0.008, "shaping": 0.0, "rent": 0.0, "terminal": 0.92, "refused": 0.0}
    )
    assert b.total == pytest.approx(0.928)


def test_pbrs_accuracy_is_not_clipped_and_refusals_are_penalised() -> None:
    reward = family(PBRSReward, gamma=GAMMA)
    # the first epochs of a fresh host: 0.1·(0.99·80 − 10) = 6.92, not clipped (a clip
    # would break the sum over the episode)
    assert reward.compute(ctx(val_acc_prev=10.0, val_acc=80.0)).components[
        "accuracy"
    ] == pytest.approx(6.92)
    assert reward.compute(ctx(val_acc_prev=80.0, val_acc=10.0)).components[
        "accuracy"
    ] == pytest.approx(0.1 * (0.99 * 10.0 - 80.0))
    assert reward.compute(ctx(val_acc_prev=math.nan, val_acc=10.0)).components["accuracy"] == 0.0
    refused = reward.compute(ctx(op=LifecycleOp.ADVANCE, applied=False))
    assert refused.components["refused"] == -0.05
    assert (
        family(PBRSReward, refused_penalty=0.0)
        .compute(ctx(op=LifecycleOp.ADVANCE, applied=False))
        .components["refused"]
        == 0.0
    )


def test_pbrs_rent_only_for_seeds_that_touch_the_output() -> None:
    reward = family(PBRSReward, gamma=GAMMA)
    incubating = (
        snap("r0c0", Stage.GERMINATED, 1, params=10**6),
        snap("r0c1", Stage.TRAINING, 4, params=10**6),
        snap("r0c2", Stage.PRUNED, 0, params=0),
    )
    # a million parameters in GERMINATED and TRAINING: the output is the host's, no rent
    assert reward.compute(ctx(slots_after=incubating)).components["rent"] == 0.0
    for stage in (Stage.BLENDING, Stage.HOLDING, Stage.FOSSILIZED):
        slots = (snap("r0c0", stage, 1, params=5000), *dormant(2))
        # 0.01·0.5·ln(1 + 5000/10000)
        assert reward.compute(ctx(slots_after=slots)).components["rent"] == pytest.approx(
            -0.005 * math.log(1.5)
        )


@pytest.mark.parametrize("cls", [PBRSReward, ShapedReward, LossReward])
def test_the_rent_families_add_the_compute_rent_to_the_parameter_rent(cls: type) -> None:
    slots = (snap("r0c0", Stage.FOSSILIZED, 1, params=5000), *dormant(2))
    unpriced = family(cls, gamma=GAMMA).compute(ctx(slots_after=slots, train_flops_ratio=3.0))
    priced = family(cls, gamma=GAMMA, flops_rent_weight=0.2)
    both = priced.compute(ctx(slots_after=slots, train_flops_ratio=3.0))
    # 0.2·0.5·ln 3 on top of the parameter rent, and nothing else changes
    assert both.components["rent"] == pytest.approx(
        unpriced.components["rent"] - 0.1 * math.log(3.0)
    )
    assert both.total == pytest.approx(unpriced.total - 0.1 * math.log(3.0))
    host_only = priced.compute(ctx(slots_after=slots, train_flops_ratio=1.0))
    assert host_only.components["rent"] == unpriced.components["rent"]


def test_families_never_add_the_governor_penalty() -> None:
    # The env adds governor_penalty itself on a rollback; a family must not.
    for cls in FAMILIES:
        reward = family(cls, gamma=GAMMA)
        rolled = reward.compute(ctx(rolled_back=True))
        assert "governor_penalty" not in rolled.components
        # with no seed (Φ = Ψ = 0) a rollback step is worth what the same step is without it
        assert rolled.total == reward.compute(ctx()).total


# ---------------------------------------------------------------- shaped


def test_shaped_golden_fossilize_with_a_harmful_neighbour() -> None:
    before = (
        snap("r0c0", Stage.BLENDING, 2, gain=-2.0, params=500),  # Φ 3.5 + 0.6; Ψ 0.02·−2
        snap("r0c1", Stage.HOLDING, 2, gain=3.0, params=1000),  # Φ 5.5 + 0.6; Ψ 0.02·3
        snap("r0c2", Stage.FOSSILIZED, 11, gain=-5.0, params=1500),  # Φ 7.5 + 1; Ψ 0.05·−5
    )
    after = (
        snap("r0c0", Stage.BLENDING, 3, gain=-3.0, params=500),  # Φ 4.4; Ψ 0.02·−3
        snap("r0c1", Stage.FOSSILIZED, 1, gain=4.0, params=1000),  # Φ 7.8; Ψ 0.05·4
        snap("r0c2", Stage.FOSSILIZED, 12, gain=-5.0, params=1500),  # Φ 8.5; Ψ 0.05·−5
    )
    step = ctx(op=LifecycleOp.FOSSILIZE, slot=1, slots_before=before, slots_after=after)
    b = family(ShapedReward, gamma=GAMMA).compute(step)
    # Φ(s) = 18.7, Φ(s') = 20.7: shaping 0.3·(0.99·20.7 − 18.7) = 0.5379
    # Ψ(s) = −0.04 + 0.06 − 0.25 = −0.23, Ψ(s') = −0.06 + 0.2 − 0.25 = −0.11:
    # attribution 0.99·(−0.11) + 0.23 = 0.1211
    # accuracy 0.1·(0.99·80 − 80) = −0.08; rent 0.005·ln(1 + 3000/10000); intervention −0.01
    assert b.components == pytest.approx(
        {
            "accuracy": -0.08,
            "shaping": 0.5379,
            "rent": -0.005 * math.log(1.3),
            "terminal": 0.0,
            "refused": 0.0,
            "attribution": 0.1211,
            "intervention": -0.01,
        }
    )


def test_shaped_includes_pbrs_exactly() -> None:
    step = advance_step()
    pbrs = family(PBRSReward, gamma=GAMMA).compute(step).components
    shaped = family(ShapedReward, gamma=GAMMA).compute(step).components
    assert {k: shaped[k] for k in pbrs} == pbrs
    # Ψ(s) = 0.05·3 (the fossil), Ψ(s') = 0.02·0.5 + 0.05·3: 0.99·0.16 − 0.15
    assert shaped["attribution"] == pytest.approx(0.99 * 0.16 - 0.15)
    assert shaped["intervention"] == -0.01


def one_slot(stage: Stage, gain: float | None, epochs: int = 1) -> tuple:
    return (snap("r0c0", stage, epochs, gain=gain, params=100), *dormant(2))


@pytest.mark.parametrize(
    ("gain", "expected"),
    [(30.0, -0.02 * 20.0), (5.0, -0.1), (0.0, 0.0), (-4.0, 0.08)],  # gain clipped at ±20
)
def test_shaped_pruning_costs_the_gain_it_throws_away(gain: float, expected: float) -> None:
    step = ctx(
        op=LifecycleOp.PRUNE,
        slots_before=one_slot(Stage.BLENDING, gain),
        slots_after=one_slot(Stage.PRUNED, None, 0),
    )
    b = family(ShapedReward, gamma=GAMMA).compute(step)
    assert b.components["attribution"] == pytest.approx(expected)
    assert b.components["intervention"] == -0.01


@pytest.mark.parametrize("gain", [-6.0, 0.0, 1.0, 12.0])
def test_shaped_fossilizing_earns_the_gain_and_pays_a_loss(gain: float) -> None:
    step = ctx(
        op=LifecycleOp.FOSSILIZE,
        slots_before=one_slot(Stage.HOLDING, gain),
        slots_after=one_slot(Stage.FOSSILIZED, gain),
    )
    value = family(ShapedReward, gamma=GAMMA).compute(step).components["attribution"]
    assert value == pytest.approx((0.99 * 0.05 - 0.02) * gain)
    assert (value > 0) == (gain > 0) and (value < 0) == (gain < 0)


def test_shaped_a_falling_gain_costs_on_wait_for_every_live_slot() -> None:
    before = (
        snap("r0c0", Stage.BLENDING, 1, gain=-2.0),
        snap("r0c1", Stage.HOLDING, 1, gain=-1.0),
        snap("r0c2", Stage.TRAINING, 1),
    )
    after = (
        snap("r0c0", Stage.BLENDING, 2, gain=-3.0),
        snap("r0c1", Stage.HOLDING, 2, gain=-4.0),
        snap("r0c2", Stage.TRAINING, 2, gain=None),
    )
    b = family(ShapedReward, gamma=1.0).compute(ctx(slots_before=before, slots_after=after))
    # γ = 1: 0.02·((−3 − 4) − (−2 − 1)) = −0.08
    assert b.components["attribution"] == pytest.approx(-0.08)
    assert b.components["intervention"] == 0.0


def test_shaped_attribution_is_zero_at_the_last_step_for_a_useless_fossil() -> None:
    # A fossil whose gain came from the host's own progress is paid back at the end:
    # Ψ(s_T) = 0, so over an episode the attribution sums to −Ψ(s_0) = 0.
    fossil = one_slot(Stage.FOSSILIZED, 15.0, 10)
    last = ctx(epoch=30, max_epochs=30, slots_before=fossil, slots_after=fossil)
    assert family(ShapedReward, gamma=GAMMA).compute(last).components[
        "attribution"
    ] == pytest.approx(-0.05 * 15.0)


# ---------------------------------------------------------------- simplified


def test_simplified_golden_last_step() -> None:
    before = (
        snap("r0c0", Stage.FOSSILIZED, 20, gain=4.0),  # Φ 7.5 + 1 = 8.5
        snap("r0c1", Stage.FOSSILIZED, 5, gain=0.5),  # Φ 7.5 + min(1.5, 1) = 8.5
        snap("r0c2", Stage.DORMANT),
    )
    after = (
        snap("r0c0", Stage.FOSSILIZED, 21, gain=4.0),
        snap("r0c1", Stage.FOSSILIZED, 6, gain=0.5),
        snap("r0c2", Stage.GERMINATED, 1),  # 1.3
    )
    step = ctx(
        op=LifecycleOp.GERMINATE,
        slot=2,
        epoch=30,
        max_epochs=30,
        val_acc=90.0,
        slots_before=before,
        slots_after=after,
    )
    b = family(SimplifiedReward, gamma=GAMMA).compute(step)
    # the last step: Φ(s′) = 0 (zero_terminal_potential): 0.3·(0 − 17.0) = −5.1
    # −0.01 (GERMINATE); terminal 3·90/100 = 2.7; no fossil bonus by default
    assert b.components == pytest.approx(
        {
            "shaping": -5.1,
            "intervention": -0.01,
            "terminal_accuracy": 2.7,
            "terminal_fossils": 0.0,
        }
    )
    # with a bonus: only the fossil whose gain reaches useful_gain (1 point) counts
    bonus = family(SimplifiedReward, gamma=GAMMA, terminal_fossil_bonus=2.0).compute(step)
    assert bonus.components["terminal_fossils"] == 2.0
    mid = family(SimplifiedReward, gamma=GAMMA, terminal_fossil_bonus=2.0).compute(
        ctx(epoch=29, max_epochs=30, val_acc=90.0, slots_before=before, slots_after=before)
    )
    # Not the last step: no terminal terms; WAIT: no cost; Φ = 17.0 both sides:
    # 0.3·(0.99 − 1)·17.0 = −0.051
    assert mid.components == pytest.approx(
        {
            "shaping": -0.051,
            "intervention": 0.0,
            "terminal_accuracy": 0.0,
            "terminal_fossils": 0.0,
        }
    )


# ---------------------------------------------------------------- sparse


def last(**overrides: object):
    values: dict[str, object] = dict(epoch=30, max_epochs=30, val_acc=90.0, host_params=10_000)
    values.update(overrides)
    return ctx(**values)


def test_sparse_golden_terminal_values() -> None:
    default = family(SparseReward)
    fossil = (snap("r0c0", Stage.FOSSILIZED, 5, params=5000), *dormant(2))
    # 90/100 − 0.01·ln(1 + 5000/10000)
    assert default.compute(last(slots_after=fossil)).total == pytest.approx(
        0.9 - 0.01 * math.log(1.5)
    )
    # absolute budget: 0.9 − 0.01·ln(1 + 5000/1000)
    absolute = family(SparseReward, budget_params=1000)
    assert absolute.compute(last(slots_after=fossil)).total == pytest.approx(
        0.9 - 0.01 * math.log(6)
    )
    # relative budget 0.25·10000 = 2500: 0.9 − 0.01·ln 3
    relative = family(SparseReward, budget_host_fraction=0.25)
    assert relative.compute(last(slots_after=fossil)).total == pytest.approx(
        0.9 - 0.01 * math.log(3)
    )
    # clipped to ±1
    assert default.compute(last(val_acc=100.0)).total == 1.0
    assert family(SparseReward, param_weight=1.0).compute(
        last(val_acc=50.0, slots_after=(snap("r0c0", Stage.FOSSILIZED, 5, params=10**7),))
    ).total == pytest.approx(-1.0)
    assert family(SparseReward, clip=0.5).compute(last(val_acc=100.0)).total == 0.5


def test_sparse_charges_every_seed_in_the_final_output_and_no_other() -> None:
    default = family(SparseReward)
    never_blended = (snap("r0c0", Stage.TRAINING, 9, params=10**6), *dormant(2))
    assert default.compute(last(slots_after=never_blended)).total == pytest.approx(0.9)
    held = (snap("r0c0", Stage.HOLDING, 3, params=10_000), *dormant(2))
    assert default.compute(last(slots_after=held)).total == pytest.approx(0.9 - 0.01 * math.log(2))


@given(
    epoch=st.integers(min_value=1, max_value=29),
    op=st.sampled_from(list(LifecycleOp)),
    applied=st.booleans(),
    acc=st.floats(min_value=0, max_value=100),
    prev=st.floats(min_value=0, max_value=100),
    fossils=st.integers(min_value=0, max_value=10**6),
    rolled_back=st.booleans(),
)
def test_sparse_is_exactly_zero_before_the_last_step(
    epoch: int,
    op: LifecycleOp,
    applied: bool,
    acc: float,
    prev: float,
    fossils: int,
    rolled_back: bool,
) -> None:
    step = ctx(
        op=op,
        applied=applied,
        epoch=epoch,
        max_epochs=30,
        val_acc=acc,
        val_acc_prev=prev,
        fossil_params=fossils,
        seed_params=fossils,
        rolled_back=rolled_back,
        slots_before=(snap("r0c0", Stage.TRAINING, 2), *dormant(2)),
        slots_after=(snap("r0c0", Stage.BLENDING, 1), *dormant(2)),
    )
    b = family(SparseReward).compute(step)
    assert b.total == 0.0 and b.components == {"terminal": 0.0}


# ---------------------------------------------------------------- loss

TYPICAL = 0.05 * math.log(10)


def test_loss_golden() -> None:
    b = family(LossReward, gamma=GAMMA).compute(advance_step())
    # (0.50 − 0.99·0.45) / (0.05·ln 10)
    loss = (0.50 - 0.99 * 0.45) / TYPICAL
    assert b.components == pytest.approx(
        {"loss": loss, "shaping": SHAPING, "rent": RENT, "refused": 0.0}
    )


def test_loss_lower_validation_loss_is_positive() -> None:
    reward = family(LossReward, gamma=1.0)
    better = reward.compute(ctx(val_loss_prev=0.50, val_loss=0.45))
    worse = reward.compute(ctx(val_loss_prev=0.45, val_loss=0.50))
    same = reward.compute(ctx(val_loss_prev=0.45, val_loss=0.45))
    assert better.components["loss"] > 0 and better.total > 0
    assert worse.components["loss"] < 0 and worse.total < 0
    assert same.components["loss"] == 0.0
    assert better.components["loss"] == pytest.approx(-worse.components["loss"])


@given(
    prev=st.floats(min_value=0.0, max_value=20.0),
    cur=st.floats(min_value=0.0, max_value=20.0),
    gamma=st.floats(min_value=0.5, max_value=1.0),
)
def test_loss_sign_follows_the_discounted_improvement(
    prev: float, cur: float, gamma: float
) -> None:
    step = ctx(val_loss_prev=prev, val_loss=cur)
    value = family(LossReward, gamma=gamma).compute(step).components["loss"]
    cap = 3.0 * math.log(10)
    assert abs(value) <= cap / TYPICAL + 1e-9
    before, after = min(prev, cap), min(cur, cap)
    if gamma * after < before:
        assert value > 0
    elif gamma * after > before:
        assert value < 0


def test_loss_caps_and_handles_divergence() -> None:
    reward = family(LossReward, gamma=1.0)
    cap = 3.0 * math.log(10)
    # a diverged loss counts as the cap: a large but bounded cost...
    assert reward.compute(ctx(val_loss_prev=0.3, val_loss=math.inf)).components[
        "loss"
    ] == pytest.approx((0.3 - cap) / TYPICAL)
    assert reward.compute(ctx(val_loss_prev=0.3, val_loss=math.nan)).components[
        "loss"
    ] == pytest.approx((0.3 - cap) / TYPICAL)
    assert reward.compute(ctx(val_loss_prev=0.3, val_loss=50.0)).components[
        "loss"
    ] == pytest.approx((0.3 - cap) / TYPICAL)
    # ...that the recovery pays back, so the sum over the episode still telescopes
    assert reward.compute(ctx(val_loss_prev=math.nan, val_loss=0.3)).components[
        "loss"
    ] == pytest.approx((cap - 0.3) / TYPICAL)
    # normalised by the task's chance loss: the same delta counts more on a 2-class task
    two = reward.compute(ctx(val_loss_prev=0.50, val_loss=0.49, chance_loss=math.log(2)))
    ten = reward.compute(ctx(val_loss_prev=0.50, val_loss=0.49, chance_loss=math.log(10)))
    assert two.components["loss"] == pytest.approx(0.01 / (0.05 * math.log(2)))
    assert ten.components["loss"] == pytest.approx(0.01 / TYPICAL)
