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

GAMMA = 0.9

# One transition several goldens share (γ = 0.9, w = 0.3):
#   before: r0c0 TRAINING 3 epochs  -> 2 + 0.9 = 2.9
#           r0c1 DORMANT            -> 0
#           r0c2 FOSSILIZED 10 ep.  -> 6 + min(3.0, 2) = 8
#   after:  r0c0 BLENDING 1 epoch   -> 3.5 + 0.3 = 3.8; r0c1 0; r0c2 FOSSILIZED 11 -> 8
#   Φ(s) = 10.9, Φ(s') = 11.8; shaping = 0.3·(0.9·11.8 − 10.9) = 0.3·(−0.28) = −0.084
#   rent (2000 seed params, 10000 host): 0.1·0.5·ln(1 + 0.2) = 0.05·ln 1.2
BEFORE = (
    snap("r0c0", Stage.TRAINING, 3),
    snap("r0c1", Stage.DORMANT),
    snap("r0c2", Stage.FOSSILIZED, 10, contribution=2.0),
)
AFTER = (
    snap("r0c0", Stage.BLENDING, 1, contribution=0.5),
    snap("r0c1", Stage.DORMANT),
    snap("r0c2", Stage.FOSSILIZED, 11, contribution=2.0),
)
SHAPING = -0.084
RENT = -0.05 * math.log(1.2)


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
    # accuracy: 0.1 per point · (83.5 − 80.0) = 0.35
    assert b.components == pytest.approx(
        {"accuracy": 0.35, "shaping": SHAPING, "rent": RENT, "terminal": 0.0, "refused": 0.0}
    )
    assert b.total == pytest.approx(0.35 - 0.084 - 0.05 * math.log(1.2))  # 0.25688...


def test_pbrs_golden_last_step() -> None:
    step = ctx(epoch=30, max_epochs=30, val_acc_prev=91.0, val_acc=92.0)
    b = family(PBRSReward, gamma=GAMMA).compute(step)
    # accuracy 0.1·1 = 0.1; Φ = 0 before and after; no seeds: no rent; terminal 1.0·92/100
    assert b.components == pytest.approx(
        {"accuracy": 0.1, "shaping": 0.0, "rent": 0.0, "terminal": 0.92, "refused": 0.0}
    )
    assert b.total == pytest.approx(1.02)


def test_pbrs_clips_the_accuracy_change_and_penalises_refusals() -> None:
    reward = family(PBRSReward, gamma=GAMMA)
    # 70 points clipped to 10 → 0.1·10 = 1.0 (the first epochs of a fresh host)
    assert reward.compute(ctx(val_acc_prev=10.0, val_acc=80.0)).components["accuracy"] == 1.0
    assert reward.compute(ctx(val_acc_prev=80.0, val_acc=10.0)).components["accuracy"] == -1.0
    refused = reward.compute(ctx(op=LifecycleOp.ADVANCE, applied=False))
    assert refused.components["refused"] == -0.05 and refused.total == pytest.approx(-0.05)
    assert (
        family(PBRSReward, refused_penalty=0.0)
        .compute(ctx(op=LifecycleOp.ADVANCE, applied=False))
        .total
        == 0.0
    )


def test_families_never_add_the_governor_penalty() -> None:
    # The env adds governor_penalty itself on a rollback; a family must not.
    for cls in FAMILIES:
        quiet = family(cls, gamma=GAMMA).compute(ctx(rolled_back=True))
        assert "governor_penalty" not in quiet.components
        assert quiet.total == 0.0


# ---------------------------------------------------------------- shaped


def test_shaped_golden_fossilize_with_a_harmful_neighbour() -> None:
    before = (
        snap("r0c0", Stage.BLENDING, 2, contribution=-2.0),  # 3.5 + 0.6 = 4.1
        snap("r0c1", Stage.HOLDING, 2, contribution=3.0),  # 5.5 + 0.6 = 6.1
        snap("r0c2", Stage.FOSSILIZED, 11, contribution=-5.0),  # 6 + 2 = 8
    )
    after = (
        snap("r0c0", Stage.BLENDING, 3, contribution=-3.0),  # 3.5 + 0.9 = 4.4
        snap("r0c1", Stage.FOSSILIZED, 1, contribution=4.0),  # 6 + 0.3 = 6.3
        snap("r0c2", Stage.FOSSILIZED, 12, contribution=-5.0),  # 8
    )
    step = ctx(
        op=LifecycleOp.FOSSILIZE,
        slot=1,
        slots_before=before,
        slots_after=after,
        fossilized_contribution=4.0,
        seed_params=3000,
    )
    b = family(ShapedReward, gamma=GAMMA).compute(step)
    # Φ(s) = 18.2, Φ(s') = 18.7: shaping 0.3·(0.9·18.7 − 18.2) = 0.3·(−1.37) = −0.411
    # rent 0.05·ln 1.3; harmful: only the LIVE seed r0c0 counts (fossils cannot be
    # pruned): 0.05·(−3) = −0.15; fossilize credit 0.1·4.0 = 0.4; intervention −0.01
    assert b.components == pytest.approx(
        {
            "accuracy": 0.0,
            "shaping": -0.411,
            "rent": -0.05 * math.log(1.3),
            "terminal": 0.0,
            "refused": 0.0,
            "harmful_seeds": -0.15,
            "fossilize_credit": 0.4,
            "prune_useful": 0.0,
            "intervention": -0.01,
        }
    )
    assert b.total == pytest.approx(-0.411 - 0.05 * math.log(1.3) - 0.15 + 0.4 - 0.01)


def test_shaped_includes_pbrs_exactly() -> None:
    step = advance_step()
    pbrs = family(PBRSReward, gamma=GAMMA).compute(step).components
    shaped = family(ShapedReward, gamma=GAMMA).compute(step).components
    assert {k: shaped[k] for k in pbrs} == pbrs
    # ADVANCE is an intervention; no fossilize/prune; r0c0's contribution 0.5 is not harmful
    assert shaped["intervention"] == -0.01 and shaped["harmful_seeds"] == 0.0


@pytest.mark.parametrize(
    ("contribution", "expected"),
    [
        (12.0, -1.0),  # 0.1·12 = 1.2, capped at 1.0
        (5.0, -0.5),  # 0.1·5
        (1.0, -0.1),  # exactly useful
        (0.5, 0.0),  # not useful: pruning it costs nothing
        (-4.0, 0.0),
    ],
)
def test_shaped_pruning_a_useful_seed_is_punished(contribution: float, expected: float) -> None:
    step = ctx(op=LifecycleOp.PRUNE, slot=0, pruned_contribution=contribution)
    b = family(ShapedReward, gamma=GAMMA).compute(step)
    assert b.components["prune_useful"] == pytest.approx(expected)
    assert b.components["intervention"] == -0.01


@pytest.mark.parametrize(("contribution", "expected"), [(0.8, 0.0), (1.0, 0.1), (25.0, 1.0)])
def test_shaped_fossilize_credit_needs_a_useful_seed(contribution: float, expected: float) -> None:
    step = ctx(op=LifecycleOp.FOSSILIZE, slot=0, fossilized_contribution=contribution)
    assert family(ShapedReward).compute(step).components["fossilize_credit"] == pytest.approx(
        expected
    )


def test_shaped_refused_fossilize_earns_no_credit() -> None:
    step = ctx(op=LifecycleOp.FOSSILIZE, slot=0, applied=False, fossilized_contribution=None)
    b = family(ShapedReward).compute(step).components
    assert b["fossilize_credit"] == 0.0 and b["refused"] == -0.05 and b["intervention"] == -0.01


def test_shaped_harmful_seeds_cover_every_live_slot_on_wait_and_are_capped() -> None:
    after = (
        snap("r0c0", Stage.BLENDING, 1, contribution=-2.0),
        snap("r0c1", Stage.HOLDING, 1, contribution=-4.0),
        snap("r0c2", Stage.TRAINING, 1, contribution=None),
    )
    # WAIT keeps both harmful seeds: 0.05·(−2 − 4) = −0.3
    b = family(ShapedReward).compute(ctx(slots_before=after, slots_after=after))
    assert b.components["harmful_seeds"] == pytest.approx(-0.3)
    assert b.components["intervention"] == 0.0
    very = tuple(snap(f"r0c{i}", Stage.HOLDING, 1, contribution=-10.0) for i in range(3))
    # 0.05·(−30) = −1.5, capped at −1.0
    capped = family(ShapedReward).compute(ctx(slots_before=very, slots_after=very))
    assert capped.components["harmful_seeds"] == pytest.approx(-1.0)


# ---------------------------------------------------------------- simplified


def test_simplified_golden_last_step() -> None:
    before = (
        snap("r0c0", Stage.FOSSILIZED, 20),  # 6 + 2 = 8
        snap("r0c1", Stage.FOSSILIZED, 5),  # 6 + 1.5 = 7.5
        snap("r0c2", Stage.DORMANT),
    )
    after = (
        snap("r0c0", Stage.FOSSILIZED, 21),  # 8
        snap("r0c1", Stage.FOSSILIZED, 6),  # 7.8
        snap("r0c2", Stage.GERMINATED, 1),  # 1.3
    )
    step = ctx(
        op=LifecycleOp.GERMINATE,
        slot=2,
        epoch=30,
        max_epochs=30,
        val_acc=90.0,
        fossils_contributing=2,
        slots_before=before,
        slots_after=after,
    )
    b = family(SimplifiedReward, gamma=GAMMA).compute(step)
    # Φ(s) = 15.5, Φ(s') = 17.1: 0.3·(0.9·17.1 − 15.5) = 0.3·(−0.11) = −0.033
    # −0.01 (GERMINATE); terminal 3·90/100 = 2.7 and 2·2 contributing fossils = 4
    assert b.components == pytest.approx(
        {
            "shaping": -0.033,
            "intervention": -0.01,
            "terminal_accuracy": 2.7,
            "terminal_fossils": 4.0,
        }
    )
    assert b.total == pytest.approx(6.657)
    mid = family(SimplifiedReward, gamma=GAMMA).compute(
        ctx(
            op=LifecycleOp.WAIT,
            epoch=29,
            max_epochs=30,
            val_acc=90.0,
            fossils_contributing=2,
            slots_before=before,
            slots_after=before,
        )
    )
    # Not the last step: no terminal terms; WAIT: no cost; Φ = 15.5 both sides:
    # 0.3·(0.9 − 1)·15.5 = −0.465
    assert mid.components == pytest.approx(
        {"shaping": -0.465, "intervention": 0.0, "terminal_accuracy": 0.0, "terminal_fossils": 0.0}
    )


# ---------------------------------------------------------------- sparse


def last(**overrides: object):
    values: dict[str, object] = dict(epoch=30, max_epochs=30, val_acc=90.0, host_params=10_000)
    values.update(overrides)
    return ctx(**values)


def test_sparse_golden_terminal_values() -> None:
    default = family(SparseReward)
    # 90/100 − 0.1·5000/10000 = 0.9 − 0.05
    assert default.compute(last(fossil_params=5000)).total == pytest.approx(0.85)
    # absolute budget: 0.9 − 0.1·5000/1000 = 0.4
    absolute = family(SparseReward, budget_params=1000)
    assert absolute.compute(last(fossil_params=5000)).total == pytest.approx(0.4)
    # relative budget 0.25·10000 = 2500: 0.9 − 0.1·2 = 0.7
    relative = family(SparseReward, budget_host_fraction=0.25)
    assert relative.compute(last(fossil_params=5000)).total == pytest.approx(0.7)
    # clipped to ±1: 1.0 − 0 = 1.0; 0.5 − 0.1·1000 = −99.5 → −1
    assert default.compute(last(val_acc=100.0)).total == 1.0
    assert default.compute(last(val_acc=50.0, fossil_params=10**7)).total == -1.0
    assert family(SparseReward, clip=0.5).compute(last(val_acc=100.0)).total == 0.5
    # live seeds do not count, only fossils
    assert default.compute(last(seed_params=10**6)).total == pytest.approx(0.9)


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


def test_loss_golden() -> None:
    b = family(LossReward, gamma=GAMMA).compute(advance_step())
    # (0.50 − 0.45) / (0.05·ln 10) = 1/ln 10 = 0.434294...
    assert b.components == pytest.approx(
        {"loss": 1 / math.log(10), "shaping": SHAPING, "rent": RENT, "refused": 0.0}
    )
    assert b.total == pytest.approx(1 / math.log(10) - 0.084 - 0.05 * math.log(1.2))


def test_loss_lower_validation_loss_is_positive() -> None:
    reward = family(LossReward)
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
)
def test_loss_sign_follows_the_improvement(prev: float, cur: float) -> None:
    value = family(LossReward).compute(ctx(val_loss_prev=prev, val_loss=cur)).components["loss"]
    assert -1.0 <= value <= 1.0
    if cur < prev:
        assert value > 0
    elif cur > prev:
        assert value < 0
    else:
        assert value == 0.0


def test_loss_clips_and_handles_divergence() -> None:
    reward = family(LossReward)
    assert reward.compute(ctx(val_loss_prev=2.3, val_loss=0.3)).components["loss"] == 1.0
    assert reward.compute(ctx(val_loss_prev=0.3, val_loss=2.3)).components["loss"] == -1.0
    assert reward.compute(ctx(val_loss_prev=0.3, val_loss=math.inf)).components["loss"] == -1.0
    assert reward.compute(ctx(val_loss_prev=0.3, val_loss=math.nan)).components["loss"] == -1.0
    assert reward.compute(ctx(val_loss_prev=math.nan, val_loss=0.3)).components["loss"] == 0.0
    # normalised by the task's chance loss: the same delta counts more on a 2-class task
    two = reward.compute(ctx(val_loss_prev=0.50, val_loss=0.49, chance_loss=math.log(2)))
    ten = reward.compute(ctx(val_loss_prev=0.50, val_loss=0.49, chance_loss=math.log(10)))
    assert two.components["loss"] == pytest.approx(0.01 / (0.05 * math.log(2)))
    assert ten.components["loss"] == pytest.approx(0.01 / (0.05 * math.log(10)))
