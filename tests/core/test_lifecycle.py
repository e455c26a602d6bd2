"""Seed lifecycle: the transition table, slot transitions, cooldowns and the quality gates."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from esper_core.lifecycle.alpha import STYLES
from esper_core.lifecycle.gates import GateInputs, GateThresholds, evaluate_gate
from esper_core.lifecycle.rules import (
    ADVANCE_TARGET,
    BLENDED_STAGES,
    COOLDOWN_STAGES,
    ISOLATION_MODES,
    LIVE_STAGES,
    SEED_STAGES,
    TRANSITIONS,
    LifecycleError,
    check_transition,
)
from esper_core.lifecycle.slot import SeedSlot
from esper_core.lifecycle.slot_state import SlotSettings
from esper_core.lifecycle.stages import STAGES, Stage
from tests.core.lifecycle_helpers import STAGED, drive_to, healthy, make_slot
from tests.fakes import RES, RES_RANDOM

S = Stage

# DOMAIN §2, written out independently of the implementation's table.
LEGAL = {
    (S.DORMANT, S.GERMINATED),
    (S.GERMINATED, S.TRAINING),
    (S.GERMINATED, S.BLENDING),  # a seed without isolation blends from germination
    (S.GERMINATED, S.PRUNED),
    (S.TRAINING, S.BLENDING),
    (S.TRAINING, S.PRUNED),
    (S.BLENDING, S.HOLDING),
    (S.BLENDING, S.PRUNED),
    (S.HOLDING, S.FOSSILIZED),
    (S.HOLDING, S.BLENDING),
    (S.HOLDING, S.PRUNED),
    (S.PRUNED, S.EMBARGOED),
    (S.EMBARGOED, S.RESETTING),
    (S.RESETTING, S.DORMANT),
}
ALL_PAIRS = list(itertools.product(STAGES, STAGES))
# Stages a test can put a slot in with the default cooldown (every stage).
REACHABLE = list(STAGES)


def test_transition_table_is_the_domain_table() -> None:
    assert {(src, dst) for src, dsts in TRANSITIONS.items() for dst in dsts} == LEGAL
    assert set(TRANSITIONS) == set(STAGES)
    assert TRANSITIONS[S.FOSSILIZED] == frozenset()


@pytest.mark.parametrize(
    ("src", "dst"), ALL_PAIRS, ids=[f"{a.value}->{b.value}" for a, b in ALL_PAIRS]
)
def test_check_transition_accepts_legal_and_names_both_stages_otherwise(
    src: Stage, dst: Stage
) -> None:
    if (src, dst) in LEGAL:
        check_transition(src, dst, "r0c0")
        return
    with pytest.raises(LifecycleError) as info:
        check_transition(src, dst, "r0c0")
    message = str(info.value)
    assert f"{src.value} -> {dst.value}" in message
    assert "r0c0" in message
    assert (info.value.src, info.value.dst, info.value.slot) == (src, dst, "r0c0")


def test_lifecycle_error_names_the_terminal_stage() -> None:
    with pytest.raises(LifecycleError, match=r"FOSSILIZED -> PRUNED.*none \(terminal\)"):
        check_transition(S.FOSSILIZED, S.PRUNED)


# ---------------------------------------------------------------- slot transitions


def test_full_legal_walk_through_every_forward_stage() -> None:
    slot = make_slot()
    slot.germinate("s1", RES_RANDOM, "linear_add", tempo=2, epoch=3, accuracy=40.0)
    assert slot.stage == S.GERMINATED and slot.has_seed
    assert slot.state.germinated_epoch == 3 and slot.state.acc_at_germination == 40.0
    assert slot.advance(accuracy=41.0).passed and slot.stage == S.TRAINING
    assert slot.state.acc_at_stage_start == 41.0
    slot.end_epoch()
    healthy(slot)
    assert slot.advance(accuracy=42.0).passed and slot.stage == S.BLENDING
    assert slot.state.alpha == pytest.approx(0.5)
    slot.end_epoch()
    assert slot.state.alpha == 1.0
    assert slot.advance().passed and slot.stage == S.HOLDING
    slot.set_alpha_target(0.5)  # HOLDING -> BLENDING (retarget below 1)
    assert slot.stage == S.BLENDING and slot.state.alpha_schedule.target == 0.5
    slot.set_alpha_target(1.0)
    while not slot.state.alpha_schedule.done:
        slot.end_epoch()
    assert slot.advance().passed and slot.stage == S.HOLDING
    slot.state.record_contribution(1.5)
    assert slot.fossilize(accuracy=50.0).passed and slot.stage == S.FOSSILIZED
    assert [stage for stage, _ in slot.state.history] == [
        "GERMINATED",
        "TRAINING",
        "BLENDING",
        "HOLDING",
        "BLENDING",
        "HOLDING",
        "FOSSILIZED",
    ]


@pytest.mark.parametrize("stage", sorted(LIVE_STAGES))
def test_every_live_stage_can_be_pruned(stage: Stage) -> None:
    slot = drive_to(make_slot(), stage)
    version = slot.param_version
    slot.prune()
    assert slot.stage == S.PRUNED
    assert slot.seed is None and slot.gate is None and slot.seed_parameters() == []
    assert slot.param_version > version
    assert slot.state.alpha == 0.0 and float(slot.alpha_tensor) == 0.0


def _calls(slot: SeedSlot) -> dict[str, object]:
    return {
        "germinate": lambda: slot.germinate("again", RES, "linear_add"),
        "advance": slot.advance,
        "set_alpha_target": lambda: slot.set_alpha_target(0.5),
        "prune": slot.prune,
        "fossilize": slot.fossilize,
    }


# For each slot method: the stages from which it is a legal call.
LEGAL_FROM = {
    "germinate": {S.DORMANT},
    "advance": set(ADVANCE_TARGET),
    "set_alpha_target": {S.BLENDING, S.HOLDING},
    "prune": set(LIVE_STAGES),
    "fossilize": {S.HOLDING},
}
ILLEGAL_CALLS = [
    (stage, name) for stage in REACHABLE for name in LEGAL_FROM if stage not in LEGAL_FROM[name]
]


@pytest.mark.parametrize(
    ("stage", "call"),
    ILLEGAL_CALLS,
    ids=[f"{name}-from-{stage.value}" for stage, name in ILLEGAL_CALLS],
)
def test_illegal_slot_calls_raise_and_change_nothing(stage: Stage, call: str) -> None:
    slot = drive_to(make_slot(), stage)
    state_before = repr(slot.state)
    version, seed = slot.param_version, slot.seed
    with pytest.raises(LifecycleError) as info:
        _calls(slot)[call]()  # type: ignore[operator]
    message = str(info.value)
    assert stage.value in message and info.value.src == stage
    if info.value.dst is None:
        # No stage follows from here through this call: the message names the call.
        assert f"{call}()" in message and info.value.detail in message, message
    else:
        assert info.value.dst.value in message
    if info.value.dst in TRANSITIONS[stage]:
        # The table allows this transition, so the message must say why this call may not.
        assert info.value.detail and info.value.detail in message, message
    assert repr(slot.state) == state_before
    assert slot.param_version == version and slot.seed is seed


@pytest.mark.parametrize("stage", [S.DORMANT, S.FOSSILIZED, S.PRUNED, S.EMBARGOED, S.RESETTING])
def test_advance_without_a_next_stage_names_no_made_up_transition(stage: Stage) -> None:
    slot = drive_to(make_slot(), stage)
    with pytest.raises(LifecycleError) as info:
        slot.advance()
    message = str(info.value)
    assert info.value.dst is None
    assert f"advance() is illegal from {stage.value}" in message
    assert "->" not in message, message  # no transition such as DORMANT -> FOSSILIZED
    if stage == S.DORMANT:
        assert "germinate one first" in message


def test_advance_from_holding_points_to_fossilize() -> None:
    slot = drive_to(make_slot(), S.HOLDING)
    with pytest.raises(LifecycleError, match="fossilize"):
        slot.advance()


def test_holding_cannot_retarget_to_full_alpha() -> None:
    slot = drive_to(make_slot(), S.HOLDING)
    with pytest.raises(ValueError, match="retarget below 1"):
        slot.set_alpha_target(1.0)
    assert slot.stage == S.HOLDING


@pytest.mark.parametrize("target", [-0.1, 1.5, math.nan])
def test_alpha_target_outside_unit_interval_is_refused(target: float) -> None:
    slot = drive_to(make_slot(), S.BLENDING, tempo=4)
    before = repr(slot.state)
    with pytest.raises(ValueError, match=r"alpha target"):
        slot.set_alpha_target(target)
    assert repr(slot.state) == before


def test_fossil_is_never_pruned_and_stays_fossilized() -> None:
    slot = drive_to(make_slot(), S.FOSSILIZED)
    for _ in range(20):
        with pytest.raises(LifecycleError, match="FOSSILIZED -> PRUNED"):
            slot.prune()
        slot.end_epoch()
    assert slot.stage == S.FOSSILIZED and slot.has_seed and slot.state.alpha == 1.0


def test_counters_advance_once_per_epoch() -> None:
    slot = make_slot()
    slot.end_epoch()  # an empty slot has no counters to advance
    assert (slot.state.epochs_in_stage, slot.state.epochs_total) == (0, 0)
    slot.germinate("s", RES, accuracy=10.0)
    for _ in range(3):
        slot.end_epoch()
    assert (slot.state.epochs_in_stage, slot.state.epochs_total) == (3, 3)
    slot.advance(accuracy=20.0)
    slot.end_epoch()
    assert (slot.state.epochs_in_stage, slot.state.epochs_total) == (1, 4)
    assert slot.state.acc_at_germination == 10.0 and slot.state.acc_at_stage_start == 20.0
    assert slot.state.history == [("GERMINATED", 0), ("TRAINING", 3)]


def test_stage_history_is_bounded() -> None:
    slot = make_slot(
        SlotSettings(
            **STAGED,
            gates=GateThresholds(min_training_epochs=0),
            stage_history=3,
            embargo_epochs=0,
        )
    )
    for _ in range(5):
        drive_to(slot, S.TRAINING)
        slot.prune()
        while slot.stage != S.DORMANT:
            slot.end_epoch()
        assert len(slot.state.history) <= 3
    assert [stage for stage, _ in slot.state.history] == ["EMBARGOED", "RESETTING", "DORMANT"]


def test_failed_gate_changes_nothing() -> None:
    slot = make_slot(SlotSettings(**STAGED))  # G2 needs 10 TRAINING epochs
    drive_to(slot, S.TRAINING)
    before = repr(slot.state)
    result = slot.advance()
    assert not result.passed and result.gate == "G2"
    assert repr(slot.state) == before


COOLDOWNS = [(0, 0), (0, 1), (1, 0), (1, 1), (5, 1), (2, 3), (0, 4)]


@pytest.mark.parametrize(("embargo", "resetting"), COOLDOWNS)
def test_pruned_slot_is_reusable_after_exactly_the_cooldown(embargo: int, resetting: int) -> None:
    settings = SlotSettings(
        **STAGED,
        gates=GateThresholds(min_training_epochs=0),
        embargo_epochs=embargo,
        resetting_epochs=resetting,
    )
    assert settings.cooldown_epochs == 1 + embargo + resetting
    slot = drive_to(make_slot(settings), S.BLENDING)
    slot.prune()
    stages = [slot.stage]
    for _ in range(settings.cooldown_epochs - 1):
        slot.end_epoch()
        stages.append(slot.stage)
        assert slot.stage in COOLDOWN_STAGES
        with pytest.raises(LifecycleError, match="-> GERMINATED"):
            slot.germinate("too-early", RES, "linear_add")
    slot.end_epoch()
    assert slot.stage == S.DORMANT and slot.state.cooldown_left == 0
    expected = [S.PRUNED] + [S.EMBARGOED] * embargo + [S.RESETTING] * resetting
    assert stages == expected
    # Zero-length stages are still passed through, in order, in the history.
    assert [s for s, _ in slot.state.history][-4:] == [
        "PRUNED",
        "EMBARGOED",
        "RESETTING",
        "DORMANT",
    ]
    slot.germinate("next", RES, "gated")
    assert slot.stage == S.GERMINATED and slot.state.seed_id == "next" and slot.gate is not None


# ---------------------------------------------------------------- gates


def inputs(stage: Stage, **kw: object) -> GateInputs:
    base: dict[str, object] = dict(
        stage=stage,
        epochs_in_stage=20,
        alpha=1.0,
        alpha_target=1.0,
        gradient_health=0.9,
        exploding=False,
        grad_ratio=0.5,
        contribution=2.0,
        loss_finite=True,
    )
    base.update(kw)
    return GateInputs(**base)  # type: ignore[arg-type]


PERMISSIVE_T = GateThresholds(strict=False)
STRICT_T = GateThresholds(strict=True)
MODES = [pytest.param(PERMISSIVE_T, id="permissive"), pytest.param(STRICT_T, id="strict")]


@pytest.mark.parametrize("t", MODES)
def test_g1(t: GateThresholds) -> None:
    ok = evaluate_gate(S.TRAINING, inputs(S.GERMINATED, epochs_in_stage=0), t)
    assert ok.passed and ok.gate == "G1" and ok.failed == () and ok.reason == "G1 passed"
    bad = evaluate_gate(S.TRAINING, inputs(S.TRAINING), t)
    assert not bad.passed and bad.failed == ("stage is TRAINING, not GERMINATED",)
    assert bad.reason == "G1 failed: stage is TRAINING, not GERMINATED"


@pytest.mark.parametrize("t", MODES)
def test_g2_safety_checks_in_both_modes(t: GateThresholds) -> None:
    assert evaluate_gate(S.BLENDING, inputs(S.TRAINING), t).passed
    cases = {
        "9 epochs in TRAINING < 10": dict(epochs_in_stage=9),
        "gradient health not measured": dict(gradient_health=None),
        "gradient health 0.50 < 0.70": dict(gradient_health=0.5),
        "exploding gradient": dict(exploding=True),
    }
    for reason, kw in cases.items():
        result = evaluate_gate(S.BLENDING, inputs(S.TRAINING, **kw), t)
        assert result.gate == "G2" and not result.passed
        assert result.failed == (reason,), result.failed
    everything = evaluate_gate(
        S.BLENDING, inputs(S.TRAINING, epochs_in_stage=0, gradient_health=0.1, exploding=True), t
    )
    assert len(everything.failed) == 3  # every failed check is named, not only the first


def test_g2_gradient_ratio_is_strict_only() -> None:
    low = inputs(S.TRAINING, grad_ratio=0.05)
    assert evaluate_gate(S.BLENDING, low, PERMISSIVE_T).passed
    result = evaluate_gate(S.BLENDING, low, STRICT_T)
    assert result.failed == ("seed/host gradient ratio 0.050 < 0.10",)
    unmeasured = evaluate_gate(S.BLENDING, inputs(S.TRAINING, grad_ratio=None), STRICT_T)
    assert unmeasured.failed == ("seed/host gradient ratio unmeasured < 0.10",)


@pytest.mark.parametrize("t", MODES)
def test_g3_needs_full_alpha(t: GateThresholds) -> None:
    assert evaluate_gate(S.HOLDING, inputs(S.BLENDING), t).passed
    ramping = evaluate_gate(S.HOLDING, inputs(S.BLENDING, alpha=0.6), t)
    assert ramping.gate == "G3" and ramping.failed == ("alpha 0.600 has not reached target 1.0",)
    partial_target = evaluate_gate(S.HOLDING, inputs(S.BLENDING, alpha=0.5, alpha_target=0.5), t)
    assert not partial_target.passed
    wrong_stage = evaluate_gate(S.HOLDING, inputs(S.TRAINING), t)
    assert "stage is TRAINING, not BLENDING" in wrong_stage.failed


def test_g3_blending_time_is_strict_only() -> None:
    short = inputs(S.BLENDING, epochs_in_stage=3)
    assert evaluate_gate(S.HOLDING, short, PERMISSIVE_T).passed
    assert evaluate_gate(S.HOLDING, short, STRICT_T).failed == ("3 epochs in BLENDING < 10",)


@pytest.mark.parametrize("t", MODES)
def test_g5_health_check_can_fail(t: GateThresholds) -> None:
    assert evaluate_gate(S.FOSSILIZED, inputs(S.HOLDING), t).passed
    cases = {
        "no counterfactual contribution measured this epoch": dict(contribution=None),
        "loss is not finite": dict(loss_finite=False),
        "gradient health 0.20 < 0.70": dict(gradient_health=0.2),
        "gradient health not measured": dict(gradient_health=None),
        "exploding gradient": dict(exploding=True),
    }
    for reason, kw in cases.items():
        result = evaluate_gate(S.FOSSILIZED, inputs(S.HOLDING, **kw), t)
        assert result.gate == "G5" and not result.passed
        assert result.failed == (reason,), result.failed
    nan = evaluate_gate(S.FOSSILIZED, inputs(S.HOLDING, contribution=math.nan), t)
    assert "no counterfactual contribution measured this epoch" in nan.failed
    assert (
        "stage is BLENDING, not HOLDING"
        in evaluate_gate(S.FOSSILIZED, inputs(S.BLENDING), t).failed
    )


def test_g5_contribution_threshold_is_strict_only() -> None:
    small = inputs(S.HOLDING, contribution=0.5)
    assert evaluate_gate(S.FOSSILIZED, small, PERMISSIVE_T).passed
    assert evaluate_gate(S.FOSSILIZED, small, STRICT_T).failed == (
        "contribution 0.50 points < 1.00",
    )


def test_no_gate_between_unrelated_stages() -> None:
    result = evaluate_gate(S.BLENDING, inputs(S.DORMANT), PERMISSIVE_T)
    assert not result.passed and result.gate == "no gate"


@pytest.mark.parametrize("strict", [False, True], ids=["permissive", "strict"])
def test_g5_through_the_slot_uses_real_measurements(strict: bool) -> None:
    settings = SlotSettings(
        **STAGED,
        gates=GateThresholds(strict=strict, min_training_epochs=0, strict_min_blending_epochs=0),
    )
    slot = drive_to(make_slot(settings), S.HOLDING)
    healthy(slot)
    # A contribution measured in an earlier epoch does not count.
    slot.state.record_contribution(3.0)
    slot.state.record_contribution(None)
    assert slot.fossilize().failed == ("no counterfactual contribution measured this epoch",)
    slot.state.record_contribution(3.0, loss_finite=False)
    assert slot.fossilize().failed == ("loss is not finite",)
    slot.state.record_contribution(3.0)
    slot.state.record_gradients(0.3, False, 1.0, 1.0)
    assert slot.fossilize().failed == ("gradient health 0.30 < 0.70",)
    slot.state.record_gradients(0.9, True, 1.0, 1.0)
    assert slot.fossilize().failed == ("exploding gradient",)
    assert slot.stage == S.HOLDING
    assert slot.next_gate() is not None and slot.next_gate().gate == "G5"  # type: ignore[union-attr]
    healthy(slot)
    assert slot.fossilize().passed and slot.stage == S.FOSSILIZED
    assert slot.next_gate() is None


def test_next_gate_reports_the_advance_gate() -> None:
    slot = make_slot(SlotSettings(**STAGED))
    assert slot.next_gate() is None
    slot.germinate("s", RES)
    assert slot.next_gate().gate == "G1"  # type: ignore[union-attr]
    slot.advance()
    gate = slot.next_gate()
    assert gate is not None and gate.gate == "G2" and "0 epochs in TRAINING < 10" in gate.failed


# ---------------------------------------------------------------- property test

PARAMS = {
    "germinate": st.tuples(
        st.just("germinate"), st.sampled_from(sorted(STYLES)), st.integers(1, 4)
    ),
    "advance": st.tuples(st.just("advance"), st.sampled_from([0.7, 1.0, 1.0, 1.0, 1.0, 1.0])),
    "set_alpha_target": st.tuples(
        st.just("set_alpha_target"), st.sampled_from([0.0, 0.3, 0.7, 1.0, 1.0, 1.0])
    ),
    "prune": st.just(("prune",)),
    "fossilize": st.just(("fossilize",)),
    "end_epoch": st.just(("end_epoch",)),
    "healthy": st.just(("gradients", 1.0, False, 1.0)),
    "gradients": st.tuples(
        st.just("gradients"),
        st.one_of(st.none(), st.floats(0, 1)),
        st.booleans(),
        st.one_of(st.none(), st.floats(0, 2)),
    ),
    "good_contribution": st.tuples(st.just("contribution"), st.floats(0, 5), st.just(True)),
    "contribution": st.tuples(
        st.just("contribution"),
        st.one_of(st.none(), st.just(math.nan), st.floats(-5, 5)),
        st.booleans(),
    ),
}


def _actions(weights: dict[str, int]) -> st.SearchStrategy[list[tuple]]:  # type: ignore[type-arg]
    names = [name for name, w in weights.items() for _ in range(w)]
    return st.lists(st.sampled_from(names).flatmap(PARAMS.__getitem__), min_size=40, max_size=100)


# Draw weights: forward-moving actions dominate, so most sequences reach BLENDING,
# HOLDING and FOSSILIZED instead of dithering near DORMANT; the second profile never
# prunes, which lets long sequences reach the late stages and stay there.
MIXED = {
    "germinate": 2,
    "advance": 4,
    "end_epoch": 5,
    "healthy": 3,
    "good_contribution": 3,
    "fossilize": 3,
    "prune": 1,
    "set_alpha_target": 1,
    "gradients": 1,
    "contribution": 1,
}
FORWARD = {**MIXED, "prune": 0, "end_epoch": 6, "advance": 5}
ACTIONS = st.one_of(_actions(MIXED), _actions(FORWARD))
SETTINGS = st.builds(
    SlotSettings,
    gates=st.builds(
        GateThresholds,
        strict=st.booleans(),
        min_training_epochs=st.integers(0, 3),
        strict_min_blending_epochs=st.integers(0, 3),
        strict_min_contribution=st.floats(-1, 2),
    ),
    embargo_epochs=st.integers(0, 3),
    resetting_epochs=st.integers(0, 2),
    stage_history=st.integers(1, 6),
    isolation=st.sampled_from(ISOLATION_MODES),
    isolation_non_identity=st.sampled_from(ISOLATION_MODES),
    short_training_epochs=st.integers(1, 3),
    blend_host_gradient=st.sampled_from(["scaled", "full"]),
)


def _check_invariants(slot: SeedSlot, fossilized_before: bool) -> None:
    s = slot.state
    holds_seed = s.stage in SEED_STAGES
    assert slot.has_seed == holds_seed
    assert (slot.gate is not None) == (holds_seed and STYLES[s.style or ""].operator == "gate")
    expected_params = [] if not holds_seed else list(slot.seed.parameters())  # type: ignore[union-attr]
    if slot.gate is not None:
        expected_params += list(slot.gate.parameters())
    assert [id(p) for p in slot.seed_parameters()] == [id(p) for p in expected_params]
    assert 0.0 <= s.alpha <= 1.0
    assert float(slot.alpha_tensor) == pytest.approx(s.alpha, abs=1e-6)
    if s.stage not in BLENDED_STAGES:
        assert s.alpha == 0.0
    if s.stage in (S.HOLDING, S.FOSSILIZED):
        assert s.alpha == 1.0
    assert len(s.history) <= slot.settings.stage_history
    for (a, _), (b, _) in itertools.pairwise(s.history):
        assert S(b) in TRANSITIONS[S(a)], s.history
    if s.history:
        assert s.history[-1][0] == s.stage.value
    if fossilized_before:
        assert s.stage == S.FOSSILIZED
    assert s.cooldown_left >= 0 and s.epochs_in_stage >= 0
    assert (s.cooldown_left > 0) == (s.stage in COOLDOWN_STAGES)


def _apply(slot: SeedSlot, action: tuple, ticks_since_prune: int | None) -> int | None:  # type: ignore[type-arg]
    """Apply one action, checking it against the DOMAIN rules; returns the cooldown tick count."""
    name, *args = action
    stage = slot.stage
    before = repr(slot.state)
    if name in ("gradients", "contribution"):
        if name == "gradients":
            slot.state.record_gradients(args[0], args[1], args[2], None)
        else:
            slot.state.record_contribution(args[0], loss_finite=args[1])
        return ticks_since_prune
    if name == "end_epoch":
        slot.end_epoch()
        if ticks_since_prune is None:
            assert slot.stage == stage  # only a cooldown moves a slot on its own
            return None
        ticks_since_prune += 1
        assert (slot.stage == S.DORMANT) == (ticks_since_prune == slot.settings.cooldown_epochs)
        return None if slot.stage == S.DORMANT else ticks_since_prune
    if name == "set_alpha_target":
        legal = stage == S.BLENDING or (stage == S.HOLDING and args[0] < 1.0)
    else:
        legal = (
            stage
            in {
                "germinate": {S.DORMANT},
                "advance": set(ADVANCE_TARGET),
                "prune": set(LIVE_STAGES),
                "fossilize": {S.HOLDING},
            }[name]
        )
    if not legal:
        error = ValueError if name == "set_alpha_target" and stage == S.HOLDING else LifecycleError
        with pytest.raises(error):
            if name == "germinate":
                slot.germinate("s", RES_RANDOM, args[0], tempo=args[1])
            elif name == "advance":
                slot.advance(alpha_target=args[0])
            elif name == "set_alpha_target":
                slot.set_alpha_target(args[0])
            else:
                getattr(slot, name)()
        assert repr(slot.state) == before
        return ticks_since_prune
    if name == "germinate":
        version = slot.param_version
        slot.germinate("s", RES_RANDOM, args[0], tempo=args[1])
        # RES_RANDOM is not the identity at birth: without isolation it blends at once.
        blends = slot.settings.isolation_non_identity == "none"
        assert slot.stage == (S.BLENDING if blends else S.GERMINATED)
        assert slot.param_version != version
    elif name == "advance":
        expected = evaluate_gate(ADVANCE_TARGET[stage], slot.gate_inputs(), slot.settings.gates)
        result = slot.advance(alpha_target=args[0])
        assert result == expected
        assert slot.stage == (ADVANCE_TARGET[stage] if result.passed else stage)
        if not result.passed:
            assert repr(slot.state) == before
    elif name == "set_alpha_target":
        slot.set_alpha_target(args[0])
        assert slot.stage == S.BLENDING and slot.state.alpha_schedule.target == args[0]
    elif name == "prune":
        slot.prune()
        assert slot.stage == S.PRUNED
        return 0
    else:
        expected = evaluate_gate(S.FOSSILIZED, slot.gate_inputs(), slot.settings.gates)
        result = slot.fossilize()
        assert result == expected
        assert slot.stage == (S.FOSSILIZED if result.passed else S.HOLDING)
    return ticks_since_prune


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(slot_settings=SETTINGS, actions=ACTIONS)
def test_random_action_sequences_never_reach_an_illegal_state(
    slot_settings: SlotSettings,
    actions: list[tuple],  # type: ignore[type-arg]
) -> None:
    slot = make_slot(slot_settings)
    ticks_since_prune: int | None = None
    fossilized = False
    for action in actions:
        ticks_since_prune = _apply(slot, action, ticks_since_prune)
        _check_invariants(slot, fossilized)
        fossilized = slot.stage == S.FOSSILIZED
