"""Each rule of the heuristic policy on hand-built observations (DOMAIN §7)."""

from __future__ import annotations

import pytest
from esper_tamiyo_heuristic.heuristic import (
    HeuristicOptions,
    HeuristicPolicy,
    resolve_blueprint_order,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from esper_core.converter import structure
from esper_core.errors import ConfigError
from esper_core.lifecycle.actions import Action, LifecycleOp, refusal_reason
from esper_core.lifecycle.stages import Stage

ORDER = ["conv_heavy", "conv_light", "norm"]


def policy(build, **options) -> HeuristicPolicy:
    base = {"plateau_epochs": 3, "min_epoch": 5, "prune_cooldown": 5, "blueprint_order": ORDER}
    return HeuristicPolicy(HeuristicOptions(**{**base, **options}), build.context())


def germinate_key(build, action: Action) -> str:
    assert action.op == LifecycleOp.GERMINATE
    return build.space.blueprints[action.blueprint]


# ---------------------------------------------------------------- germination


def test_germinates_only_after_the_plateau_window(build) -> None:
    p = policy(build)
    assert p.decide(build.obs(plateau_epochs=2)).action.op == LifecycleOp.WAIT
    decision = p.decide(build.obs(plateau_epochs=3))
    assert decision.rule == "germinate"
    action = decision.action
    assert action.slot == 0  # the first empty slot
    assert germinate_key(build, action) == "cnn/conv_heavy"
    assert build.space.styles[action.style] == "linear_add"
    assert build.space.tempos[action.tempo] == 5


def test_never_germinates_before_min_epoch(build) -> None:
    p = policy(build)
    assert p.decide(build.obs(epoch=4, plateau_epochs=10)).action.op == LifecycleOp.WAIT
    assert p.decide(build.obs(epoch=5, plateau_epochs=10)).action.op == LifecycleOp.GERMINATE


def test_cooldown_after_a_prune(build) -> None:
    p = policy(build)
    for since in (1, 4):
        assert (
            p.decide(build.obs(plateau_epochs=5, epochs_since_prune=since)).action.op
            == LifecycleOp.WAIT
        )
    assert (
        p.decide(build.obs(plateau_epochs=5, epochs_since_prune=5)).action.op
        == LifecycleOp.GERMINATE
    )


def test_no_germination_when_too_few_epochs_remain(build) -> None:
    p = policy(build, min_epochs_left=16)
    assert (
        p.decide(build.obs(plateau_epochs=5, epoch=15, max_epochs=30)).action.op == LifecycleOp.WAIT
    )
    assert (
        p.decide(build.obs(plateau_epochs=5, epoch=14, max_epochs=30)).action.op
        == LifecycleOp.GERMINATE
    )


def test_style_and_tempo_come_from_the_options(build) -> None:
    p = policy(build, style="gated", tempo=3)
    action = p.decide(build.obs(plateau_epochs=5)).action
    assert build.space.styles[action.style] == "gated"
    assert build.space.tempos[action.tempo] == 3


def test_blueprints_rotate_in_the_configured_order(build) -> None:
    p = policy(build)
    keys = [
        germinate_key(build, p.decide(build.obs(plateau_epochs=5, epoch=10 + i)).action)
        for i in range(4)
    ]
    assert keys == ["cnn/conv_heavy", "cnn/conv_light", "cnn/norm", "cnn/conv_heavy"]


def test_a_pruned_blueprint_is_skipped_for_the_penalty_epochs(build) -> None:
    p = policy(build, blueprint_penalty_epochs=10, prune_cooldown=0)
    training = build.report(
        "r0c0",
        Stage.TRAINING,
        seed_id="r0c0-s1",
        blueprint="cnn/conv_heavy",
        epochs_in_stage=2,
        acc_at_stage_start=80.0,
    )
    first = p.decide(build.obs(build.with_slot(training), epoch=9, passed=False))
    assert first.action.op == LifecycleOp.WAIT  # the seed incubates: no second germination
    # Next epoch the seed is gone (pruned): its slot cools down.
    embargoed = build.report(
        "r0c0", Stage.EMBARGOED, seed_id="r0c0-s1", blueprint="cnn/conv_heavy", cooldown_left=5
    )
    obs = build.obs(build.with_slot(embargoed), epoch=10, plateau_epochs=5)
    decision = p.decide(obs)
    assert germinate_key(build, decision.action) == "cnn/conv_light"
    assert decision.action.slot == 1  # r0c0 is cooling down
    # Still penalised at epoch 19; allowed again at 20 (= 10 + penalty).
    p.memory[0].rotation = 0
    assert (
        germinate_key(build, p.decide(build.obs(epoch=19, plateau_epochs=5)).action)
        == "cnn/conv_light"
    )
    p.memory[0].rotation = 0
    assert (
        germinate_key(build, p.decide(build.obs(epoch=20, plateau_epochs=5)).action)
        == "cnn/conv_heavy"
    )


def test_a_fossilized_seed_is_not_penalised(build) -> None:
    p = policy(build, prune_cooldown=0)
    holding = build.report(
        "r0c0", Stage.HOLDING, blueprint="cnn/conv_heavy", epochs_in_stage=1, contribution=3.0
    )
    assert p.decide(build.obs(build.with_slot(holding), epoch=9)).rule == "fossilize"
    fossil = build.report("r0c0", Stage.FOSSILIZED, blueprint="cnn/conv_heavy", epochs_in_stage=1)
    p.decide(build.obs(build.with_slot(fossil), epoch=10))
    assert p.memory[0].penalties == {}


def test_when_every_blueprint_is_penalised_it_waits(build) -> None:
    p = policy(build, blueprint_order=["conv_heavy"], prune_cooldown=0)
    training = build.report("r0c0", Stage.TRAINING, blueprint="cnn/conv_heavy", epochs_in_stage=2)
    p.decide(build.obs(build.with_slot(training), epoch=9))
    embargoed = build.report("r0c0", Stage.EMBARGOED, blueprint="cnn/conv_heavy")
    assert (
        p.decide(build.obs(build.with_slot(embargoed), epoch=10, plateau_epochs=5)).action.op
        == LifecycleOp.WAIT
    )


def test_germination_respects_the_masks(build) -> None:
    p = policy(build)
    # A seed still TRAINING elsewhere blocks germination (mask), whatever the plateau.
    training = build.report("r0c1", Stage.TRAINING, epochs_in_stage=1, acc_at_stage_start=80.0)
    obs = build.obs(build.with_slot(training), plateau_epochs=10, passed=False)
    assert not bool(obs.masks.op[LifecycleOp.GERMINATE])
    assert p.decide(obs).action.op == LifecycleOp.WAIT


# ---------------------------------------------------------------- advancing


@pytest.mark.parametrize("stage", [Stage.GERMINATED, Stage.TRAINING, Stage.BLENDING])
def test_advances_when_the_gate_passes(build, stage: Stage) -> None:
    p = policy(build)
    report = build.report(
        "r0c1",
        stage,
        epochs_in_stage=1,
        acc_at_stage_start=80.0,
        alpha=1.0 if stage == Stage.BLENDING else None,
    )
    decision = p.decide(build.obs(build.with_slot(report), passed=True))
    assert decision.action == Action(LifecycleOp.ADVANCE, slot=1)
    assert p.decide(build.obs(build.with_slot(report), passed=False)).action.op == LifecycleOp.WAIT


# ---------------------------------------------------------------- pruning a regression


def test_prunes_a_seed_whose_stage_regressed(build) -> None:
    p = policy(build)
    regressed = build.report("r0c2", Stage.TRAINING, epochs_in_stage=5, acc_at_stage_start=80.0)
    decision = p.decide(build.obs(build.with_slot(regressed), val_acc=77.9, passed=False))
    assert decision.rule == "prune_regression"
    assert decision.action == Action(LifecycleOp.PRUNE, slot=2)


@pytest.mark.parametrize(("epochs", "val_acc"), [(4, 70.0), (5, 78.5), (9, 78.0)])
def test_keeps_a_seed_within_the_regression_bounds(build, epochs: int, val_acc: float) -> None:
    p = policy(build)
    report = build.report("r0c2", Stage.TRAINING, epochs_in_stage=epochs, acc_at_stage_start=80.0)
    assert (
        p.decide(build.obs(build.with_slot(report), val_acc=val_acc, passed=False)).action.op
        == LifecycleOp.WAIT
    )


def test_regression_beats_an_open_gate(build) -> None:
    p = policy(build)
    report = build.report(
        "r0c0", Stage.BLENDING, epochs_in_stage=6, acc_at_stage_start=90.0, alpha=1.0
    )
    assert (
        p.decide(build.obs(build.with_slot(report), val_acc=80.0, passed=True)).rule
        == "prune_regression"
    )


def test_prunes_a_stalled_seed(build) -> None:
    p = policy(build, stall_epochs=20)
    report = build.report("r0c0", Stage.TRAINING, epochs_in_stage=20, acc_at_stage_start=80.0)
    assert (
        p.decide(build.obs(build.with_slot(report), val_acc=85.0, passed=False)).rule
        == "prune_stall"
    )


# ---------------------------------------------------------------- HOLDING


@pytest.mark.parametrize(
    ("contribution", "rule", "op"),
    [
        (0.6, "fossilize", LifecycleOp.FOSSILIZE),
        (5.0, "fossilize", LifecycleOp.FOSSILIZE),
        (0.5, "prune_holding", LifecycleOp.PRUNE),
        (0.1, "prune_holding", LifecycleOp.PRUNE),
        (-3.0, "prune_holding", LifecycleOp.PRUNE),
    ],
)
def test_holding_fossilizes_contributors_and_prunes_the_rest(build, contribution, rule, op) -> None:
    p = policy(build)
    holding = build.report("r0c1", Stage.HOLDING, epochs_in_stage=1, contribution=contribution)
    decision = p.decide(build.obs(build.with_slot(holding), passed=True))
    assert decision.rule == rule
    assert decision.action == Action(op, slot=1)


def test_holding_waits_for_a_failing_fossilize_gate_then_prunes(build) -> None:
    p = policy(build, max_holding_epochs=3)
    for epochs, expected in [(1, LifecycleOp.WAIT), (2, LifecycleOp.WAIT), (3, LifecycleOp.PRUNE)]:
        holding = build.report("r0c0", Stage.HOLDING, epochs_in_stage=epochs, contribution=4.0)
        assert p.decide(build.obs(build.with_slot(holding), passed=False)).action.op == expected


def test_holding_waits_until_a_contribution_is_measured(build) -> None:
    p = policy(build)
    holding = build.report("r0c0", Stage.HOLDING, epochs_in_stage=1, contribution=None)
    assert p.decide(build.obs(build.with_slot(holding), passed=False)).action.op == LifecycleOp.WAIT


def test_holding_decision_comes_first(build) -> None:
    p = policy(build)
    slots = [
        build.report("r0c0", Stage.GERMINATED, epochs_in_stage=0),
        build.report("r0c1", Stage.HOLDING, epochs_in_stage=1, contribution=2.0),
        build.report("r0c2"),
    ]
    assert p.decide(build.obs(slots, passed=True, plateau_epochs=9)).action == Action(
        LifecycleOp.FOSSILIZE, slot=1
    )


# ---------------------------------------------------------------- memory and options


def test_memory_is_per_env_and_reset_forgets(build) -> None:
    p = policy(build)
    assert (
        germinate_key(build, p.decide(build.obs(env_index=0, plateau_epochs=5)).action)
        == "cnn/conv_heavy"
    )
    assert (
        germinate_key(build, p.decide(build.obs(env_index=1, plateau_epochs=5)).action)
        == "cnn/conv_heavy"
    )
    assert (
        germinate_key(build, p.decide(build.obs(env_index=0, plateau_epochs=5)).action)
        == "cnn/conv_light"
    )
    p.reset([0])
    assert (
        germinate_key(build, p.decide(build.obs(env_index=0, plateau_epochs=5)).action)
        == "cnn/conv_heavy"
    )
    assert (
        germinate_key(build, p.decide(build.obs(env_index=1, plateau_epochs=5)).action)
        == "cnn/conv_light"
    )


def test_act_is_batched_over_envs(build) -> None:
    p = policy(build)
    actions = p.act(
        [build.obs(env_index=0, plateau_epochs=0), build.obs(env_index=1, plateau_epochs=5)]
    )
    assert [a.op for a in actions] == [LifecycleOp.WAIT, LifecycleOp.GERMINATE]


def test_blueprint_order_resolution() -> None:
    available = ("cnn/attention", "cnn/conv_light", "cnn/norm")
    assert resolve_blueprint_order(
        ["conv_light", "transformer/lora", "cnn/norm", "norm"], available
    ) == (
        "cnn/conv_light",
        "cnn/norm",
    )
    # Nothing of the order is available: every blueprint, in the action space's order.
    assert resolve_blueprint_order(["lora"], available) == available


def test_style_or_tempo_outside_the_run_is_a_config_error(build) -> None:
    with pytest.raises(ConfigError, match=r"style.*cosine_add.*lifecycle\.styles"):
        HeuristicPolicy(HeuristicOptions(style="cosine_add"), build.context())
    with pytest.raises(ConfigError, match=r"tempo.*4.*lifecycle\.tempos"):
        HeuristicPolicy(HeuristicOptions(tempo=4), build.context())


def test_options_are_validated() -> None:
    with pytest.raises(ConfigError, match="plateau_epochs"):
        structure({"plateau_epochs": -1}, HeuristicOptions, path="policies.heuristic")
    with pytest.raises(ConfigError, match="max_holding_epochs"):
        structure({"min_holding_epochs": 4, "max_holding_epochs": 2}, HeuristicOptions)
    with pytest.raises(ConfigError, match="unknown key"):
        structure({"plateau": 3}, HeuristicOptions)
    with pytest.raises(ConfigError, match="blueprint_order"):
        structure({"blueprint_order": []}, HeuristicOptions)
    assert structure({}, HeuristicOptions) == HeuristicOptions()


# ---------------------------------------------------------------- legality, always

STAGES_WITH_SEED = [
    Stage.GERMINATED,
    Stage.TRAINING,
    Stage.BLENDING,
    Stage.HOLDING,
    Stage.FOSSILIZED,
]
COOLDOWN = [Stage.PRUNED, Stage.EMBARGOED, Stage.RESETTING]


@st.composite
def slot_states(draw, build):
    reports = []
    for sid in build.space.slot_ids:
        stage = draw(st.sampled_from([Stage.DORMANT, *STAGES_WITH_SEED, *COOLDOWN]))
        reports.append(
            build.report(
                sid,
                stage,
                epochs_in_stage=draw(st.integers(0, 30)),
                contribution=draw(st.none() | st.floats(-20, 20)),
                acc_at_stage_start=draw(st.floats(0, 100)),
                blueprint=draw(st.sampled_from(build.space.blueprints))
                if stage in STAGES_WITH_SEED
                else None,
                alpha=draw(st.sampled_from([0.2, 0.5, 1.0])) if stage == Stage.BLENDING else None,
            )
        )
    return reports


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_the_heuristic_only_chooses_legal_actions(build, data) -> None:
    options = {"plateau_epochs": data.draw(st.integers(0, 3)), "min_epoch": 0, "prune_cooldown": 0}
    p = policy(build, **options)
    for epoch in range(3):
        obs = build.obs(
            data.draw(slot_states(build)),
            passed=data.draw(st.lists(st.booleans(), min_size=3, max_size=3)),
            epoch=10 + epoch,
            val_acc=data.draw(st.floats(0, 100)),
            plateau_epochs=data.draw(st.integers(0, 5)),
            epochs_since_prune=data.draw(st.integers(0, 10)),
        )
        action = p.decide(obs).action
        assert refusal_reason(action, obs.masks, build.space) is None, build.space.describe(action)
