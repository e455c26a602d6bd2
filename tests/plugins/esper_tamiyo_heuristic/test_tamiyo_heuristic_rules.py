"""Each rule of the heuristic policy on hand-built observations (a capacity
trigger, judgement by measured gain against the parameters, lifecycle-aware germination)."""

from __future__ import annotations

import math
import re

import pytest
from esper_tamiyo_heuristic.heuristic import (
    EnvMemory,
    HeuristicOptions,
    HeuristicPolicy,
    resolve_blueprint_order,
)
from esper_tamiyo_heuristic.signals import (
    Baseline,
    baseline_of,
    capacity_limited,
    relative_gain,
    required_gain,
    slope,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from esper_core.converter import structure
from esper_core.errors import ConfigError
from esper_core.lifecycle.actions import Action, LifecycleOp, refusal_reason
from esper_core.lifecycle.stages import Stage

ORDER = ["conv_heavy", "conv_light", "norm"]
CHANCE = 2.3  # the builders' chance-level loss
UNDERFIT = (2.28, 2.27, 2.26)  # near chance and flat: a capacity limit
FITTING = (1.8, 0.6, 0.2)  # far below chance and falling fast: none


def policy(build, **options) -> HeuristicPolicy:
    # The capacity trigger and the gain judgement: the rules these tests pin (the
    # defaults are the expansion trigger and the contribution judgement).
    # The seed rules alone: no host growth, no fit gate (tested in their own files).
    base = {
        "min_epoch": 2,
        "prune_cooldown": 5,
        "blueprint_order": ORDER,
        "host_growth": "off",
        "fit_loss_ratio": 0.0,
    }
    base |= {"trigger": "capacity", "judge": "gain"}
    return HeuristicPolicy(HeuristicOptions(**{**base, **options}), build.context())


def feed(p: HeuristicPolicy, build, losses, *, env_index: int = 0, slots=None, **kw):  # type: ignore[no-untyped-def]
    """One decision per epoch 1..n with these training losses; the last decision."""
    decision = None
    for epoch, loss in enumerate(losses, start=1):
        obs = build.obs(slots, env_index=env_index, epoch=epoch, train_loss=loss, **kw)
        decision = p.decide(obs)
    assert decision is not None
    return decision


def underfit_memory(epoch: int = 9) -> EnvMemory:
    return EnvMemory(train_losses=list(UNDERFIT), last_epoch=epoch)


def germinate_key(build, action: Action) -> str:
    assert action.op == LifecycleOp.GERMINATE
    return build.space.blueprints[action.blueprint]


# ---------------------------------------------------------------- signals


def test_capacity_limit_needs_a_high_and_flat_training_loss() -> None:
    kw = {"loss_ratio": 0.8, "window": 2, "max_drop": 0.05}
    assert capacity_limited(UNDERFIT, CHANCE, **kw)
    assert not capacity_limited(UNDERFIT[1:], CHANCE, **kw)  # too few epochs to tell
    assert not capacity_limited(FITTING, CHANCE, **kw)  # a host that fits its data
    assert not capacity_limited((0.003, 0.003, 0.003), CHANCE, **kw)  # flat, but fitted
    assert not capacity_limited((2.3, 2.1, 1.9), CHANCE, **kw)  # near chance, learning fast
    assert capacity_limited((2.3, 2.1, 1.9), CHANCE, **{**kw, "max_drop": 0.1})


def test_slope_and_baseline() -> None:
    assert slope([3.0, 2.0, 1.0]) == pytest.approx(-1.0)
    assert slope([1.0]) == 0.0
    base = baseline_of([2.0, 1.9, 1.8, 1.7], epoch=6, window=2)
    assert base == Baseline(epoch=6, level=pytest.approx(1.75), trend=pytest.approx(-0.1))
    assert baseline_of([1.0, 1.2, 1.4], epoch=3, window=2).trend == 0.0  # never upward
    assert baseline_of([], epoch=3, window=2) is None


def test_gain_discounts_what_the_host_would_have_learnt_anyway() -> None:
    base = Baseline(epoch=6, level=2.0, trend=-0.1)
    # Four epochs later the host alone would be near 1.6: matching that is no gain.
    assert relative_gain(base, [1.65, 1.55], epoch=10, window=2) == pytest.approx(0.0)
    assert relative_gain(base, [1.0, 1.0], epoch=10, window=2) == pytest.approx(0.3)
    assert relative_gain(base, [1.9, 1.9], epoch=10, window=2) < 0
    assert relative_gain(base, [math.nan], epoch=10, window=2) == -math.inf


def test_the_price_grows_with_every_doubling_of_the_parameters() -> None:
    assert required_gain(0.05, 0.02, 1000, 1000) == pytest.approx(0.05)
    assert required_gain(0.05, 0.02, 1000, 2000) == pytest.approx(0.07)
    assert required_gain(0.05, 0.02, 1000, 8000) == pytest.approx(0.11)


# ---------------------------------------------------------------- germination


def test_germinates_on_a_capacity_limit(build) -> None:
    p = policy(build)
    decision = feed(p, build, UNDERFIT)
    assert decision.rule == "germinate"
    action = decision.action
    assert action.slot == 0  # the first empty slot
    assert germinate_key(build, action) == "cnn/conv_heavy"
    assert build.space.styles[action.style] == "linear_add"
    assert build.space.tempos[action.tempo] == 5


def test_the_slowdown_trigger_grows_a_host_whose_validation_loss_stalls(build) -> None:
    # A host that fits its data never shows a capacity limit; the compute-aware trigger
    # grows it once its validation loss falls by less than slowdown_drop per epoch.
    fitting = [1.8, 0.6, 0.2, 0.1]
    p = policy(build, trigger="slowdown", slowdown_drop=0.02)
    for epoch, val in enumerate([1.5, 1.0, 0.8, 0.7], start=1):
        history = [1.5, 1.0, 0.8, 0.7][:epoch]
        obs = build.obs(epoch=epoch, train_loss=fitting[epoch - 1], loss_history=history)
        assert p.decide(obs).action.op == LifecycleOp.WAIT, val  # still learning fast
    stalled = build.obs(epoch=5, train_loss=0.05, loss_history=[1.0, 0.8, 0.7, 0.7, 0.69])
    decision = p.decide(stalled)
    assert decision.rule == "germinate", decision.reason
    assert "slowed down" in decision.reason
    # The same stall under the default trigger: the host fits its data, nothing grows.
    default = policy(build)
    assert default.decide(stalled).action.op == LifecycleOp.WAIT


def test_the_slowdown_trigger_uses_slowdown_drop_not_flat_max_drop(build) -> None:
    # A validation loss falling 3 %/epoch: still learning by slowdown_drop = 2 % (the
    # capacity trigger's flat_max_drop, 5 %, would call it stalled), stalled by 4 %.
    falling = [1.0, 0.97, 0.94]
    obs = build.obs(epoch=3, train_loss=0.05, loss_history=falling)
    learning = policy(build, trigger="slowdown", slowdown_drop=0.02, flat_max_drop=0.05)
    assert learning.decide(obs).action.op == LifecycleOp.WAIT
    stalled = policy(build, trigger="slowdown", slowdown_drop=0.04, flat_max_drop=0.01)
    decision = stalled.decide(obs)
    assert decision.rule == "germinate" and "slowed down" in decision.reason, decision.reason


def test_the_flops_price_counts_from_the_model_before_this_seed(build) -> None:
    # A model already training at 4x the host's FLOPs (an earlier fossil) that a seed
    # takes to 8x doubles its cost once: the seed pays one doubling, not three.
    p = policy(build, price="flops")
    decision = feed(p, build, UNDERFIT, train_flops_ratio=4.0)
    assert decision.rule == "germinate", decision.reason
    holding = build.report("r0c0", Stage.HOLDING, epochs_in_stage=1)
    obs = build.obs(build.with_slot(holding), train_flops_ratio=8.0)
    o = p.options
    need = p.price(p.memory[0], obs, holding)
    assert need == pytest.approx(o.min_gain + o.gain_per_doubling), need


def test_the_flops_price_charges_each_doubling_of_the_training_flops(build) -> None:
    assert required_gain(0.05, 0.02, 1.0, 1.0) == pytest.approx(0.05)
    assert required_gain(0.05, 0.02, 1.5, 3.0) == pytest.approx(0.07)
    once = {"max_holding_epochs": 1, "price": "flops"}
    # A 10% gain: it pays for a seed that doubles the FLOPs (0.07), not for one that
    # multiplies them by 16 (0.13), however few parameters either seed has.
    cheap = blend_then_hold(
        policy(build, **once), build, [2.0] * 4, [1.9, 1.8], host_params=10, flops=2.0
    )
    assert cheap.rule == "fossilize", cheap.reason
    dear = blend_then_hold(
        policy(build, **once), build, [2.0] * 4, [1.9, 1.8], host_params=100_000, flops=16.0
    )
    assert dear.rule == "prune_gain", dear.reason


def test_never_grows_a_host_that_fits_its_training_data(build) -> None:
    p = policy(build)
    losses = [1.8, 0.6, 0.2, 0.1, 0.05, *[0.003] * 20]  # the base digits host: flat near 0
    for epoch, loss in enumerate(losses, start=1):
        assert p.decide(build.obs(epoch=epoch, train_loss=loss)).action.op == LifecycleOp.WAIT


def test_never_germinates_before_min_epoch(build) -> None:
    p = policy(build, min_epoch=5)
    assert feed(p, build, [*UNDERFIT, 2.26]).action.op == LifecycleOp.WAIT  # epoch 4
    assert p.decide(build.obs(epoch=5, train_loss=2.25)).action.op == LifecycleOp.GERMINATE


def test_cooldown_after_a_prune(build) -> None:
    for since, op in [(1, LifecycleOp.WAIT), (4, LifecycleOp.WAIT), (5, LifecycleOp.GERMINATE)]:
        p = policy(build)
        assert feed(p, build, UNDERFIT, epochs_since_prune=since).action.op == op


@pytest.mark.parametrize(
    ("epoch", "before_blending", "op"),
    [
        (24, 0, LifecycleOp.GERMINATE),  # blend 5 epochs + 1 HOLDING: judged at 30
        (25, 0, LifecycleOp.WAIT),
        (13, 11, LifecycleOp.GERMINATE),  # isolated: 1 GERMINATED + 10 TRAINING first
        (14, 11, LifecycleOp.WAIT),
    ],
)
def test_never_germinates_a_seed_that_cannot_finish_its_lifecycle(
    build, epoch: int, before_blending: int, op: LifecycleOp
) -> None:
    p = policy(build)
    p.memory[0] = underfit_memory(epoch - 1)
    bb = [before_blending] * len(build.space.blueprints)
    obs = build.obs(epoch=epoch, train_loss=2.25, epochs_before_blending=bb)
    assert p.decide(obs).action.op == op


def test_style_and_tempo_come_from_the_options(build) -> None:
    p = policy(build, style="gated", tempo=3)
    action = feed(p, build, UNDERFIT).action
    assert build.space.styles[action.style] == "gated"
    assert build.space.tempos[action.tempo] == 3


def test_blueprints_rotate_in_the_configured_order(build) -> None:
    p = policy(build)
    keys = []
    for i in range(4):
        p.memory.setdefault(0, EnvMemory()).train_losses = list(UNDERFIT)
        keys.append(germinate_key(build, p.decide(build.obs(epoch=10 + i, train_loss=2.25)).action))
    assert keys == ["cnn/conv_heavy", "cnn/conv_light", "cnn/norm", "cnn/conv_heavy"]


def test_a_pruned_blueprint_is_skipped_for_the_penalty_epochs(build) -> None:
    p = policy(build, blueprint_penalty_epochs=10, prune_cooldown=0)
    training = build.report(
        "r0c0", Stage.TRAINING, seed_id="r0c0-s1", blueprint="cnn/conv_heavy", epochs_in_stage=2
    )
    p.memory[0] = underfit_memory(8)
    first = p.decide(build.obs(build.with_slot(training), epoch=9, passed=False, train_loss=2.25))
    assert first.action.op == LifecycleOp.WAIT  # the seed incubates: no second germination
    # Next epoch the seed is gone (pruned): its slot cools down.
    embargoed = build.report(
        "r0c0", Stage.EMBARGOED, seed_id="r0c0-s1", blueprint="cnn/conv_heavy", cooldown_left=5
    )
    decision = p.decide(build.obs(build.with_slot(embargoed), epoch=10, train_loss=2.25))
    assert germinate_key(build, decision.action) == "cnn/conv_light"
    assert decision.action.slot == 1  # r0c0 is cooling down
    # Still penalised at epoch 19; allowed again at 20 (= 10 + penalty).
    p.memory[0].rotation = 0
    obs = build.obs(epoch=19, train_loss=2.25)
    assert germinate_key(build, p.decide(obs).action) == "cnn/conv_light"
    p.memory[0].rotation = 0
    obs = build.obs(epoch=20, train_loss=2.25)
    assert germinate_key(build, p.decide(obs).action) == "cnn/conv_heavy"


def test_when_every_blueprint_is_penalised_it_waits(build) -> None:
    p = policy(build, blueprint_order=["conv_heavy"], prune_cooldown=0)
    training = build.report("r0c0", Stage.TRAINING, blueprint="cnn/conv_heavy", epochs_in_stage=2)
    p.memory[0] = underfit_memory(8)
    p.decide(build.obs(build.with_slot(training), epoch=9, train_loss=2.25))
    embargoed = build.report("r0c0", Stage.EMBARGOED, blueprint="cnn/conv_heavy")
    obs = build.obs(build.with_slot(embargoed), epoch=10, train_loss=2.25)
    assert p.decide(obs).action.op == LifecycleOp.WAIT


@pytest.mark.parametrize("stage", [Stage.BLENDING, Stage.HOLDING])
def test_one_seed_is_judged_at_a_time(build, stage: Stage) -> None:
    # A live seed elsewhere (not incubating: masks allow germination) blocks a second one.
    p = policy(build)
    p.memory[0] = underfit_memory()
    live = build.report(
        "r0c1", stage, epochs_in_stage=0, alpha=0.4 if stage == Stage.BLENDING else None
    )
    obs = build.obs(build.with_slot(live), passed=False, train_loss=2.25)
    assert bool(obs.masks.op[LifecycleOp.GERMINATE])
    assert p.decide(obs).action.op == LifecycleOp.WAIT
    fossil = build.report("r0c1", Stage.FOSSILIZED, epochs_in_stage=1)
    obs = build.obs(build.with_slot(fossil), train_loss=2.25, epoch=11)
    assert p.decide(obs).action.op == LifecycleOp.GERMINATE  # a fossil is judged already


def test_germination_respects_the_masks(build) -> None:
    p = policy(build)
    # A seed still TRAINING elsewhere blocks germination (mask), whatever the capacity.
    training = build.report("r0c1", Stage.TRAINING, epochs_in_stage=1, acc_at_stage_start=80.0)
    p.memory[0] = underfit_memory()
    obs = build.obs(build.with_slot(training), passed=False, train_loss=2.25)
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


# ---------------------------------------------------------------- regression and stall


def test_prunes_a_blending_seed_whose_stage_regressed(build) -> None:
    p = policy(build)
    regressed = build.report(
        "r0c2", Stage.BLENDING, epochs_in_stage=5, acc_at_stage_start=80.0, alpha=0.5
    )
    decision = p.decide(build.obs(build.with_slot(regressed), val_acc=77.9, passed=False))
    assert decision.rule == "prune_regression"
    assert decision.action == Action(LifecycleOp.PRUNE, slot=2)


def test_a_training_seed_is_never_pruned_for_host_noise(build) -> None:
    # In TRAINING a seed cannot change the output: an accuracy drop is the host's own.
    p = policy(build)
    report = build.report("r0c2", Stage.TRAINING, epochs_in_stage=9, acc_at_stage_start=80.0)
    obs = build.obs(build.with_slot(report), val_acc=60.0, passed=False)
    assert p.decide(obs).action.op == LifecycleOp.WAIT


@pytest.mark.parametrize(("epochs", "val_acc"), [(4, 70.0), (5, 78.5), (9, 78.0)])
def test_keeps_a_seed_within_the_regression_bounds(build, epochs: int, val_acc: float) -> None:
    p = policy(build)
    report = build.report(
        "r0c2", Stage.BLENDING, epochs_in_stage=epochs, acc_at_stage_start=80.0, alpha=0.5
    )
    obs = build.obs(build.with_slot(report), val_acc=val_acc, passed=False)
    assert p.decide(obs).action.op == LifecycleOp.WAIT


def test_regression_beats_an_open_gate(build) -> None:
    p = policy(build)
    report = build.report(
        "r0c0", Stage.BLENDING, epochs_in_stage=6, acc_at_stage_start=90.0, alpha=1.0
    )
    obs = build.obs(build.with_slot(report), val_acc=80.0, passed=True)
    assert p.decide(obs).rule == "prune_regression"


def test_prunes_a_stalled_seed(build) -> None:
    p = policy(build, stall_epochs=20)
    report = build.report("r0c0", Stage.TRAINING, epochs_in_stage=20, acc_at_stage_start=80.0)
    obs = build.obs(build.with_slot(report), val_acc=85.0, passed=False)
    assert p.decide(obs).rule == "prune_stall"


# ---------------------------------------------------------------- judging by gain


def blend_then_hold(p, build, pre, during, *, host_params=1000, passed=True, flops=1.0):  # type: ignore[no-untyped-def]
    """A 100-parameter seed seen one epoch into BLENDING (validation losses ``pre`` before
    it, then ``during[0]``), then in HOLDING after ``during[1:]``: the last decision."""
    blending = build.report("r0c1", Stage.BLENDING, epochs_in_stage=1, alpha=0.2)
    history = [*pre, during[0]]
    epoch = 10
    decision = p.decide(
        build.obs(
            build.with_slot(blending),
            epoch=epoch,
            loss_history=history[-5:],
            host_params=host_params,
            passed=False,
        )
    )
    for loss in during[1:]:
        epoch += 1
        history.append(loss)
        holding = build.report("r0c1", Stage.HOLDING, epochs_in_stage=1, contribution=5.0)
        decision = p.decide(
            build.obs(
                build.with_slot(holding),
                epoch=epoch,
                loss_history=history[-5:],
                host_params=host_params,
                passed=passed,
                train_flops_ratio=flops,
            )
        )
    return decision


def test_fossilizes_a_seed_whose_gain_pays_for_its_parameters(build) -> None:
    p = policy(build)
    decision = blend_then_hold(p, build, [2.2, 2.2, 2.2, 2.2], [1.8, 1.2])
    assert decision.rule == "fossilize", decision.reason
    assert decision.action == Action(LifecycleOp.FOSSILIZE, slot=1)


def test_prunes_a_seed_the_model_merely_relies_on(build) -> None:
    # The counterfactual contribution is large (5 points), but the validation loss is
    # where the host alone was heading: no gain, so the seed goes (judged once: no wait).
    p = policy(build, max_holding_epochs=1)
    decision = blend_then_hold(p, build, [2.3, 2.2, 2.1, 2.0], [1.9, 1.8])
    assert decision.rule == "prune_gain", decision.reason
    assert decision.action == Action(LifecycleOp.PRUNE, slot=1)


def test_a_bigger_seed_must_gain_more(build) -> None:
    once = {"max_holding_epochs": 1}
    cheap = blend_then_hold(
        policy(build, **once), build, [2.0] * 4, [1.9, 1.8], host_params=100_000
    )
    assert cheap.rule == "fossilize", cheap.reason  # +0.1% params: a 10% gain pays
    dear = blend_then_hold(policy(build, **once), build, [2.0] * 4, [1.9, 1.8], host_params=10)
    assert dear.rule == "prune_gain", dear.reason  # 10 -> 110 params: 3.5 doublings


def test_a_seed_whose_gain_still_rises_gets_until_max_holding_to_pay(build) -> None:
    p = policy(build, max_holding_epochs=3)
    first = blend_then_hold(p, build, [2.0] * 4, [1.95, 1.9])  # gain 0.05 < 0.07: rising
    assert first.action.op == LifecycleOp.WAIT
    history = [2.0, 2.0, 1.95, 1.9, 1.6]
    holding = build.report("r0c1", Stage.HOLDING, epochs_in_stage=2, contribution=5.0)
    obs = build.obs(build.with_slot(holding), epoch=12, loss_history=history, passed=True)
    assert p.decide(obs).rule == "fossilize"  # it paid in time


def test_a_seed_whose_gain_stalls_short_of_its_price_is_pruned(build) -> None:
    p = policy(build, max_holding_epochs=3)
    assert blend_then_hold(p, build, [2.0] * 4, [1.95, 1.9]).action.op == LifecycleOp.WAIT
    holding = build.report("r0c1", Stage.HOLDING, epochs_in_stage=2, contribution=5.0)
    obs = build.obs(build.with_slot(holding), epoch=12, loss_history=[2.0, 2.0, 1.95, 1.9, 1.95])
    assert p.decide(obs).rule == "prune_gain"  # no longer rising


def test_a_paying_seed_whose_gate_fails_is_pruned_after_max_holding(build) -> None:
    p = policy(build, max_holding_epochs=2)
    first = blend_then_hold(p, build, [2.2] * 4, [1.5, 1.0], passed=False)
    assert first.action.op == LifecycleOp.WAIT
    holding = build.report("r0c1", Stage.HOLDING, epochs_in_stage=2, contribution=5.0)
    obs = build.obs(
        build.with_slot(holding), epoch=12, loss_history=[2.2, 2.2, 1.5, 1.0, 1.0], passed=False
    )
    assert p.decide(obs).rule == "prune_gate"


def test_a_seed_without_a_measurable_baseline_is_pruned(build) -> None:
    p = policy(build)
    holding = build.report("r0c0", Stage.HOLDING, epochs_in_stage=1, contribution=9.0)
    decision = p.decide(build.obs(build.with_slot(holding), passed=True))
    assert decision.rule == "prune_gain" and "not measurable" in decision.reason


def test_judging_comes_first(build) -> None:
    p = policy(build)
    blend_then_hold(p, build, [2.2] * 4, [1.8], passed=False)  # baseline noted for r0c1
    slots = [
        build.report("r0c0", Stage.GERMINATED, epochs_in_stage=0),
        build.report("r0c1", Stage.HOLDING, epochs_in_stage=1, contribution=2.0),
        build.report("r0c2"),
    ]
    obs = build.obs(slots, passed=True, epoch=11, loss_history=[2.2, 2.2, 2.2, 1.8, 1.2])
    assert p.decide(obs).action == Action(LifecycleOp.FOSSILIZE, slot=1)


# ---------------------------------------------------------------- memory and options


def test_memory_is_per_env_and_reset_forgets(build) -> None:
    p = policy(build, prune_cooldown=0)

    def grow(env_index: int, epoch: int) -> str:
        memory = p.memory.setdefault(env_index, EnvMemory())
        memory.train_losses = list(UNDERFIT)
        obs = build.obs(env_index=env_index, epoch=epoch, train_loss=2.25)
        return germinate_key(build, p.decide(obs).action)

    assert grow(0, 10) == "cnn/conv_heavy"
    assert grow(1, 10) == "cnn/conv_heavy"
    assert grow(0, 11) == "cnn/conv_light"
    p.reset([0])
    assert grow(0, 12) == "cnn/conv_heavy"
    assert grow(1, 11) == "cnn/conv_light"


def test_act_is_batched_over_envs(build) -> None:
    p = policy(build)
    p.memory[1] = underfit_memory()
    actions = p.act(
        [
            build.obs(env_index=0, epoch=10, train_loss=0.1),
            build.obs(env_index=1, epoch=10, train_loss=2.25),
        ]
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


def test_style_tempo_or_gain_window_outside_the_run_is_a_config_error(build) -> None:
    with pytest.raises(ConfigError, match=r"style.*cosine_add.*lifecycle\.styles"):
        HeuristicPolicy(HeuristicOptions(style="cosine_add"), build.context())
    with pytest.raises(ConfigError, match=r"tempo.*4.*lifecycle\.tempos"):
        HeuristicPolicy(HeuristicOptions(tempo=4), build.context())
    with pytest.raises(ConfigError, match=r"gain_window.*history_length >= 6"):
        HeuristicPolicy(HeuristicOptions(gain_window=5), build.context())


def test_options_are_validated() -> None:
    with pytest.raises(ConfigError, match="underfit_loss_ratio"):
        structure({"underfit_loss_ratio": -1}, HeuristicOptions, path="policies.heuristic")
    with pytest.raises(ConfigError, match="max_holding_epochs"):
        structure({"min_holding_epochs": 4, "max_holding_epochs": 2}, HeuristicOptions)
    with pytest.raises(ConfigError, match="unknown key"):
        structure({"plateau_epochs": 3}, HeuristicOptions)
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
    p = policy(build, min_epoch=0, prune_cooldown=0)
    for epoch in range(4):
        obs = build.obs(
            data.draw(slot_states(build)),
            passed=data.draw(st.lists(st.booleans(), min_size=3, max_size=3)),
            epoch=10 + epoch,
            val_acc=data.draw(st.floats(0, 100)),
            train_loss=data.draw(st.floats(0.01, 3.0)),
            loss_history=data.draw(st.lists(st.floats(0.01, 3.0), min_size=1, max_size=5)),
            epochs_since_prune=data.draw(st.integers(0, 10)),
        )
        action = p.decide(obs).action
        assert refusal_reason(action, obs.masks, build.space) is None, build.space.describe(action)


def test_why_no_growth_names_a_trigger_too_late_for_the_episode(build) -> None:
    p = policy(build)
    assert p.why_no_growth(0) is None  # no decision yet: nothing to say
    p.memory[0] = underfit_memory(24)
    assert p.decide(build.obs(epoch=25, train_loss=2.25)).action.op == LifecycleOp.WAIT
    assert p.decide(build.obs(epoch=26, train_loss=2.25)).action.op == LifecycleOp.WAIT
    why = p.why_no_growth(0)
    assert why is not None
    assert "trigger first fired at epoch 25 with 5 epochs left" in why
    assert "a seed needs 6 to blend and be judged: raise env.max_epochs" in why


def test_why_no_growth_names_a_trigger_that_never_fired_or_was_never_asked(build) -> None:
    fits = policy(build)
    for epoch, loss in enumerate([1.8, 0.6, 0.2, 0.1], start=1):
        fits.decide(build.obs(epoch=epoch, train_loss=loss))
    assert "trigger never fired: the host showed no capacity limit" in (fits.why_no_growth(0) or "")
    short = policy(build, min_epoch=5)
    for epoch in (1, 2, 3):  # episodes of 3 epochs end before min_epoch
        short.decide(build.obs(epoch=epoch, max_epochs=3, train_loss=2.25))
    assert "episode ended before the heuristic could germinate (it waits for min_epoch=5" in (
        short.why_no_growth(0) or ""
    )


def test_a_gain_decision_names_its_unit_and_never_reads_x_below_x(build) -> None:
    """A decision read ``gain +0.055 < 0.055``, with no unit."""
    from esper_tamiyo_heuristic.signals import gain_text

    shown = gain_text(0.055004, "<", 0.055049)
    assert shown == "gain +5.500% of val loss < 5.505% needed", shown
    assert gain_text(0.05, ">=", 0.05) == "gain +5.00% of val loss >= 5.00% needed"
    once = {"max_holding_epochs": 1}
    dear = blend_then_hold(policy(build, **once), build, [2.0] * 4, [1.9, 1.8], host_params=10)
    assert dear.rule == "prune_gain" and "% of val loss < " in dear.reason, dear.reason
    number = re.findall(r"[\d.]+%", dear.reason)
    assert len(number) == 2 and number[0] != number[1], dear.reason
