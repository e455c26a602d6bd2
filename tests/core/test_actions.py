"""Action masks and refusals (DOMAIN §5), checked against the stage rules and the slots."""

from __future__ import annotations

import copy
from typing import Any

import attrs
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from esper_core.lifecycle.actions import (
    OPS,
    WAIT,
    Action,
    ActionSpace,
    LifecycleOp,
    MaskRules,
    compute_masks,
    refusal_reason,
)
from esper_core.lifecycle.rules import ADVANCE_TARGET, LIVE_STAGES, SEED_STAGES, LifecycleError
from esper_core.lifecycle.slot import SeedSlot
from esper_core.lifecycle.slot_state import SlotReport
from esper_core.lifecycle.stages import STAGES, Stage
from tests.core.lifecycle_helpers import drive_to, make_slot
from tests.fakes import RES, RES_RANDOM

SPACE = ActionSpace(
    slot_ids=("r0c0", "r0c1", "r0c2"),
    blueprints=("cnn/res", "cnn/res_random"),
    styles=("linear_add", "sigmoid_add", "linear_multiply", "gated"),
    tempos=(3, 5, 8),
    alpha_targets=(0.5, 0.7, 1.0),
)
RULES = MaskRules(max_seeds=3, min_prune_age=1)
Op = LifecycleOp


def report(
    stage: Stage,
    slot_id: str = "r0c0",
    *,
    epochs_total: int = 5,
    alpha: float | None = None,
    alpha_target: float | None = None,
) -> SlotReport:
    if alpha is None:
        alpha = (
            1.0
            if stage in (Stage.HOLDING, Stage.FOSSILIZED)
            else (0.4 if stage == Stage.BLENDING else 0.0)
        )
    if alpha_target is None:
        alpha_target = 1.0 if stage == Stage.BLENDING else alpha
    has_seed = stage in SEED_STAGES
    return SlotReport(
        slot_id=slot_id,
        stage=stage,
        seed_id="s" if has_seed else None,
        blueprint="cnn/res" if has_seed else None,
        style="linear_add" if has_seed else None,
        alpha=alpha,
        alpha_target=alpha_target,
        epochs_in_stage=1,
        epochs_total=epochs_total,
        contribution=None,
        contribution_velocity=0.0,
        gradient_health=None,
        grad_ratio=None,
        seed_params=20 if has_seed else 0,
        acc_at_stage_start=0.0,
        acc_at_germination=0.0,
        cooldown_left=0,
    )


def reports(*stages: Stage, **kw: object) -> list[SlotReport]:
    return [report(stage, SPACE.slot_ids[i], **kw) for i, stage in enumerate(stages)]  # type: ignore[arg-type]


def legal_slots(masks, op: LifecycleOp) -> list[int]:  # type: ignore[no-untyped-def]
    return [i for i in range(len(SPACE.slot_ids)) if bool(masks.slot[op, i])]


def test_shapes_and_dtypes() -> None:
    masks = compute_masks(reports(Stage.DORMANT, Stage.DORMANT, Stage.DORMANT), SPACE, RULES)
    assert masks.op.shape == (len(OPS),) and masks.op.dtype == torch.bool
    assert masks.slot.shape == (len(OPS), 3)
    assert masks.alpha_target.shape == (3, 3)
    assert masks.blueprint.shape == (3, 2) and masks.style.shape == (4,)
    assert masks.tempo.shape == (3,)
    assert SPACE.head_sizes == {
        "op": 6,
        "slot": 3,
        "blueprint": 2,
        "style": 4,
        "tempo": 3,
        "alpha_target": 3,
    }


STAGE_LISTS = st.lists(st.sampled_from(STAGES), min_size=3, max_size=3)


@settings(max_examples=150, deadline=None)
@given(
    stages=STAGE_LISTS,
    ages=st.lists(st.integers(0, 3), min_size=3, max_size=3),
    max_seeds=st.integers(0, 4),
    min_age=st.integers(0, 3),
)
def test_masks_follow_the_domain_rules(
    stages: list[Stage], ages: list[int], max_seeds: int, min_age: int
) -> None:
    rs = [report(stage, SPACE.slot_ids[i], epochs_total=ages[i]) for i, stage in enumerate(stages)]
    masks = compute_masks(rs, SPACE, MaskRules(max_seeds=max_seeds, min_prune_age=min_age))
    assert bool(masks.op[Op.WAIT])  # WAIT is always legal
    assert refusal_reason(WAIT, masks, SPACE) is None
    seeds = sum(1 for s in stages if s in SEED_STAGES)
    incubating = any(s in (Stage.GERMINATED, Stage.TRAINING) for s in stages)
    for i, stage in enumerate(stages):
        assert bool(masks.slot[Op.GERMINATE, i]) == (
            stage == Stage.DORMANT and seeds < max_seeds and not incubating
        )
        assert bool(masks.slot[Op.FOSSILIZE, i]) == (stage == Stage.HOLDING)
        assert bool(masks.slot[Op.ADVANCE, i]) == (stage in ADVANCE_TARGET)
        assert bool(masks.slot[Op.PRUNE, i]) == (stage in LIVE_STAGES and ages[i] >= min_age)
        assert bool(masks.slot[Op.SET_ALPHA_TARGET, i]) == (
            stage in (Stage.BLENDING, Stage.HOLDING)
        )
    for op in OPS:
        if op != Op.WAIT:
            assert bool(masks.op[op]) == bool(masks.slot[op].any())


def test_germinate_needs_an_empty_slot() -> None:
    for stage in STAGES:
        masks = compute_masks(
            reports(stage, Stage.FOSSILIZED, Stage.FOSSILIZED), SPACE, MaskRules(max_seeds=9)
        )
        assert bool(masks.slot[Op.GERMINATE, 0]) == (stage == Stage.DORMANT), stage


def test_germinate_respects_the_seed_cap_counting_fossils() -> None:
    at_cap = compute_masks(
        reports(Stage.DORMANT, Stage.FOSSILIZED, Stage.HOLDING), SPACE, MaskRules(max_seeds=2)
    )
    assert not bool(at_cap.op[Op.GERMINATE])
    below = compute_masks(
        reports(Stage.DORMANT, Stage.FOSSILIZED, Stage.HOLDING), SPACE, MaskRules(max_seeds=3)
    )
    assert legal_slots(below, Op.GERMINATE) == [0]
    # A slot cooling down after a prune holds no seed and does not count.
    cooling = compute_masks(
        reports(Stage.DORMANT, Stage.PRUNED, Stage.EMBARGOED), SPACE, MaskRules(max_seeds=1)
    )
    assert legal_slots(cooling, Op.GERMINATE) == [0]


@pytest.mark.parametrize("other", [Stage.GERMINATED, Stage.TRAINING])
def test_germinate_waits_for_an_incubating_seed(other: Stage) -> None:
    masks = compute_masks(reports(Stage.DORMANT, other, Stage.DORMANT), SPACE, RULES)
    assert not bool(masks.op[Op.GERMINATE])
    reason = refusal_reason(SPACE.germinate("r0c0", "res"), masks, SPACE)
    assert reason == "GERMINATE is not legal in any slot now"


def test_blending_seed_does_not_block_germination() -> None:
    masks = compute_masks(reports(Stage.DORMANT, Stage.BLENDING, Stage.DORMANT), SPACE, RULES)
    assert legal_slots(masks, Op.GERMINATE) == [0, 2]


def test_prune_needs_a_prunable_stage_and_minimum_age() -> None:
    rules = MaskRules(min_prune_age=2)
    young = compute_masks([report(Stage.TRAINING, "r0c0", epochs_total=1)], SPACE, rules)
    assert not bool(young.slot[Op.PRUNE, 0])
    old = compute_masks([report(Stage.TRAINING, "r0c0", epochs_total=2)], SPACE, rules)
    assert bool(old.slot[Op.PRUNE, 0])
    for stage in (Stage.FOSSILIZED, Stage.DORMANT, Stage.PRUNED, Stage.EMBARGOED, Stage.RESETTING):
        masks = compute_masks([report(stage, "r0c0", epochs_total=50)], SPACE, rules)
        assert not bool(masks.slot[Op.PRUNE, 0]), stage


PROTECT = MaskRules(
    min_prune_age=1, protect_healthy=True, min_training_epochs=10, min_gradient_health=0.7
)


def judged(stage: Stage, epochs_in_stage: int = 1, **kw: Any) -> SlotReport:
    return attrs.evolve(
        report(stage, "r0c0", epochs_total=20), epochs_in_stage=epochs_in_stage, **kw
    )


def may_prune(r: SlotReport, rules: MaskRules = PROTECT) -> bool:
    return bool(compute_masks([r], SPACE, rules).slot[Op.PRUNE, 0])


def test_a_healthy_seed_is_pruned_only_after_its_stage_trial() -> None:
    assert not may_prune(judged(Stage.GERMINATED, 3))
    assert not may_prune(judged(Stage.TRAINING, 9, gradient_health=0.9))
    assert may_prune(judged(Stage.TRAINING, 10, gradient_health=0.9))
    assert not may_prune(judged(Stage.BLENDING, 2, alpha=0.4, alpha_target=1.0))
    assert may_prune(judged(Stage.BLENDING, 5, alpha=1.0, alpha_target=1.0))
    assert may_prune(judged(Stage.BLENDING, 3, alpha=0.7, alpha_target=0.7))  # retargeted
    assert may_prune(judged(Stage.HOLDING, 0))
    # without the protection: from min_prune_age on, whatever the stage
    assert may_prune(judged(Stage.GERMINATED, 3), RULES)
    assert may_prune(judged(Stage.TRAINING, 1), RULES)


def test_a_seed_in_trouble_can_always_be_pruned() -> None:
    assert may_prune(judged(Stage.TRAINING, 2, gradient_health=0.2))
    assert may_prune(judged(Stage.TRAINING, 2, gradient_health=0.9, exploding=True))
    assert may_prune(judged(Stage.BLENDING, 1, alpha=0.2, gradient_health=0.5))
    # ... but never below the minimum age, and never a fossil
    young = attrs.evolve(judged(Stage.TRAINING, 0, gradient_health=0.1), epochs_total=0)
    assert not may_prune(young)
    assert not may_prune(judged(Stage.FOSSILIZED, 50, gradient_health=0.1))


def test_gated_advance_opens_advance_and_fossilize_only_when_the_gate_passes() -> None:
    from esper_core.lifecycle.gates import GateResult

    rules = attrs.evolve(RULES, gated_advance=True)
    shut = GateResult(gate="G2", target=Stage.BLENDING, passed=False, failed=("epochs",))
    open_ = GateResult(gate="G2", target=Stage.BLENDING, passed=True)
    for stage in (Stage.GERMINATED, Stage.TRAINING, Stage.BLENDING, Stage.HOLDING):
        op = Op.FOSSILIZE if stage == Stage.HOLDING else Op.ADVANCE
        r = [report(stage, "r0c0")]
        assert not bool(compute_masks(r, SPACE, rules, [shut]).slot[op, 0]), stage
        assert bool(compute_masks(r, SPACE, rules, [open_]).slot[op, 0]), stage
        assert not bool(compute_masks(r, SPACE, rules, [None]).slot[op, 0]), stage
        # off (or no gates handed over): the stage alone decides, as before
        assert bool(compute_masks(r, SPACE, RULES, [shut]).slot[op, 0]), stage
        assert bool(compute_masks(r, SPACE, rules).slot[op, 0]), stage


def test_alpha_target_rules() -> None:
    blending = compute_masks(
        [report(Stage.BLENDING, "r0c0", alpha=0.4, alpha_target=0.7)], SPACE, RULES
    )
    assert blending.alpha_target[0].tolist() == [True, False, True]  # not the current target
    holding = compute_masks([report(Stage.HOLDING, "r0c0")], SPACE, RULES)
    assert holding.alpha_target[0].tolist() == [True, True, False]  # only below 1
    for stage in STAGES:
        if stage not in (Stage.BLENDING, Stage.HOLDING):
            masks = compute_masks([report(stage, "r0c0")], SPACE, RULES)
            assert not bool(masks.alpha_target[0].any()) and not bool(
                masks.slot[Op.SET_ALPHA_TARGET, 0]
            )
    action = SPACE.on_slot(Op.SET_ALPHA_TARGET, "r0c0", 1.0)
    assert refusal_reason(action, holding, SPACE) == "alpha target 1.0 is not legal for slot r0c0"
    assert refusal_reason(SPACE.on_slot(Op.SET_ALPHA_TARGET, "r0c0", 0.5), holding, SPACE) is None


# ---------------------------------------------------------------- refusals

MIXED = reports(Stage.DORMANT, Stage.HOLDING, Stage.BLENDING)


@pytest.mark.parametrize(
    ("action", "reason"),
    [
        (Action(Op.PRUNE, slot=3), "slot index 3 out of range [0, 3)"),
        (Action(Op.ADVANCE, slot=-1), "slot index -1 out of range [0, 3)"),
        (Action(Op.GERMINATE, slot=0, blueprint=2), "blueprint index 2 out of range [0, 2)"),
        (Action(Op.GERMINATE, slot=0, style=4), "style index 4 out of range [0, 4)"),
        (Action(Op.GERMINATE, slot=0, tempo=-1), "tempo index -1 out of range [0, 3)"),
        (
            Action(Op.SET_ALPHA_TARGET, slot=2, alpha_target=3),
            "alpha_target index 3 out of range [0, 3)",
        ),
        (Action(7, slot=0), "op index 7 out of range [0, 6)"),  # type: ignore[arg-type]
        (Action(-1, slot=1), "op index -1 out of range [0, 6)"),  # type: ignore[arg-type]
        (Action(Op.FOSSILIZE, slot=2), "FOSSILIZE is not legal in slot r0c2 now"),
        (Action(Op.GERMINATE, slot=1), "GERMINATE is not legal in slot r0c1 now"),
        (Action(Op.PRUNE, slot=0), "PRUNE is not legal in slot r0c0 now"),
    ],
)
def test_refusal_reasons(action: Action, reason: str) -> None:
    masks = compute_masks(MIXED, SPACE, RULES)
    assert refusal_reason(action, masks, SPACE) == reason


def test_heads_an_op_does_not_read_are_not_checked() -> None:
    masks = compute_masks(MIXED, SPACE, RULES)
    assert (
        refusal_reason(Action(Op.WAIT, slot=99, blueprint=-5, alpha_target=42), masks, SPACE)
        is None
    )
    assert (
        refusal_reason(Action(Op.FOSSILIZE, slot=1, blueprint=99, tempo=99), masks, SPACE) is None
    )


def test_op_with_no_legal_slot_is_refused() -> None:
    masks = compute_masks(reports(Stage.DORMANT, Stage.DORMANT, Stage.DORMANT), SPACE, RULES)
    assert (
        refusal_reason(Action(Op.FOSSILIZE, slot=0), masks, SPACE)
        == "FOSSILIZE is not legal in any slot now"
    )


def test_action_space_helpers() -> None:
    action = SPACE.germinate("r0c1", "res_random", "gated", 8)
    assert action == Action(Op.GERMINATE, slot=1, blueprint=1, style=3, tempo=2)
    assert SPACE.germinate("r0c0", "cnn/res").tempo == 1  # the middle tempo by default
    assert SPACE.describe(action) == "GERMINATE r0c1 cnn/res_random gated tempo=8"
    assert (
        SPACE.describe(SPACE.on_slot(Op.SET_ALPHA_TARGET, "r0c2", 0.7))
        == "SET_ALPHA_TARGET r0c2 0.7"
    )
    assert SPACE.describe(WAIT) == "WAIT"
    assert Action.from_indices(action.as_indices()) == action
    with pytest.raises(ValueError, match="unknown blueprint 'nope'"):
        SPACE.germinate("r0c0", "nope")


# ---------------------------------------------------------------- masks agree with the slots


def _apply(slot: SeedSlot, op: LifecycleOp, target: float) -> None:
    if op == Op.GERMINATE:
        slot.germinate("s", RES, "linear_add")
    elif op == Op.ADVANCE:
        slot.advance()  # may fail its gate, but must not be an illegal transition
    elif op == Op.SET_ALPHA_TARGET:
        slot.set_alpha_target(target)
    elif op == Op.PRUNE:
        slot.prune()
    elif op == Op.FOSSILIZE:
        slot.fossilize()


@pytest.mark.parametrize("stage", STAGES)
def test_every_unmasked_action_is_accepted_by_the_slot_and_every_masked_one_refused(
    stage: Stage,
) -> None:
    slot = drive_to(make_slot(), stage, blueprint=RES_RANDOM, tempo=3)
    slot.state.epochs_total = max(slot.state.epochs_total, RULES.min_prune_age)
    space = ActionSpace(
        ("r0c0",), SPACE.blueprints, SPACE.styles, SPACE.tempos, SPACE.alpha_targets
    )
    masks = compute_masks(
        [slot.report()], space, MaskRules(max_seeds=3, min_prune_age=RULES.min_prune_age)
    )
    for op in OPS:
        if op == Op.WAIT:
            continue
        targets = range(len(SPACE.alpha_targets)) if op == Op.SET_ALPHA_TARGET else [0]
        for t in targets:
            legal = bool(masks.slot[op, 0]) and (
                op != Op.SET_ALPHA_TARGET or bool(masks.alpha_target[0, t])
            )
            trial = copy.deepcopy(slot)
            if legal:
                _apply(trial, op, SPACE.alpha_targets[t])
            elif op != Op.SET_ALPHA_TARGET or not bool(masks.slot[op, 0]):
                with pytest.raises(LifecycleError):
                    _apply(trial, op, SPACE.alpha_targets[t])
