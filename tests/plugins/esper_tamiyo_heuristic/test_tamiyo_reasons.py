"""Every action a built-in policy returns says why: the reason travels
on ``Action.reason``, WAIT included, in the numbers the rule read."""

from __future__ import annotations

from esper_tamiyo_heuristic.heuristic import HeuristicOptions, HeuristicPolicy
from esper_tamiyo_heuristic.random_policy import RandomOptions, RandomPolicy
from esper_tamiyo_heuristic.signals import capacity_check
from esper_tamiyo_heuristic.static import StaticOptions, StaticPolicy
from esper_tamiyo_heuristic.wait import WaitOptions, WaitPolicy

from esper_core.lifecycle.actions import WAIT, Action, LifecycleOp
from esper_core.lifecycle.stages import Stage

CHANCE = 2.3
UNDERFIT = (2.28, 2.27, 2.26)


def heuristic(build, **options) -> HeuristicPolicy:  # type: ignore[no-untyped-def]
    # Reasons of the capacity trigger and the gain judgement (not the defaults).
    # The seed rules alone: no host growth, no fit gate (tested in their own files).
    base = {
        "min_epoch": 2,
        "prune_cooldown": 5,
        "trigger": "capacity",
        "judge": "gain",
        "host_growth": "off",
        "fit_loss_ratio": 0.0,
    }
    return HeuristicPolicy(HeuristicOptions(**{**base, **options}), build.context())


def act(p, build, losses, **kw) -> Action:  # type: ignore[no-untyped-def]
    """The policy's action (through the protocol's ``act``) after these training losses."""
    action = WAIT
    for epoch, loss in enumerate(losses, start=1):
        action = p.act([build.obs(epoch=epoch, train_loss=loss, **kw)])[0]
    return action


def test_a_reason_does_not_change_the_action() -> None:
    # Equal and hashed alike: masks, sets of actions and PPO's indices ignore the reason.
    why = WAIT.because("no capacity limit")
    assert why == WAIT and hash(why) == hash(WAIT) and {why, WAIT} == {WAIT}
    assert why.reason == "no capacity limit" and WAIT.reason == ""
    assert Action.from_indices(why.as_indices()) == why and repr(why) == repr(WAIT)


def test_the_capacity_check_says_which_condition_held_it_back() -> None:
    kw = {"loss_ratio": 0.8, "window": 2, "max_drop": 0.05}
    assert capacity_check(UNDERFIT, CHANCE, **kw).why.startswith("capacity limit: loss 2.260")
    fitted = capacity_check((1.8, 0.6, 0.2), CHANCE, **kw)
    assert not fitted.fired and fitted.why == "no capacity limit: loss 0.200 < 0.8 x chance 2.300"
    learning = capacity_check((2.3, 2.1, 1.9), CHANCE, **kw)
    assert not learning.fired and learning.why.startswith("still learning: loss 1.900 falls")
    early = capacity_check((2.3,), CHANCE, **kw)
    assert not early.fired and early.why == "loss seen for 1 of 3 epochs"


def test_the_heuristic_says_why_it_waits_and_why_it_grows(build) -> None:
    fitted = act(heuristic(build), build, (1.8, 0.6, 0.2))
    assert fitted.op == LifecycleOp.WAIT
    assert fitted.reason == "no capacity limit: loss 0.200 < 0.8 x chance 2.300"
    assert act(heuristic(build, min_epoch=5), build, UNDERFIT).reason == (
        "no germination before epoch 5 (min_epoch)"
    )
    grown = act(heuristic(build), build, UNDERFIT)
    assert grown.op == LifecycleOp.GERMINATE
    assert grown.reason.startswith("r0c0: cnn/") and "capacity limit: loss 2.260" in grown.reason
    late = act(heuristic(build), build, UNDERFIT, max_epochs=4)
    assert late.op == LifecycleOp.WAIT and "epoch(s) left <" in late.reason


def test_a_waiting_heuristic_names_the_live_seed_it_waits_on(build) -> None:
    training = build.report("r0c0", Stage.TRAINING, epochs_in_stage=2)
    obs = build.obs(build.with_slot(training), epoch=9, passed=False, train_loss=2.25)
    action = heuristic(build).act([obs])[0]
    assert action.op == LifecycleOp.WAIT
    assert action.reason.startswith("r0c0: TRAINING for 2 epoch(s)"), action.reason


def test_the_other_built_in_policies_give_reasons(build) -> None:
    obs = build.obs(epoch=3)
    context = build.context()
    for policy, words in [
        (WaitPolicy(WaitOptions(), context), "never grows"),
        (StaticPolicy(StaticOptions(), context), "fixed at birth"),
        (
            StaticPolicy(StaticOptions(widen_at=0.25), context),
            "seeds were fixed at birth, and the host widens at 0.25 of the run",
        ),
        (RandomPolicy(RandomOptions(), context), "random legal action"),
    ]:
        assert words in policy.act([obs])[0].reason
