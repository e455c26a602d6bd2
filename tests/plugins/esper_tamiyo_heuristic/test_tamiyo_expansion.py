"""``trigger = expansion`` (grow where the slots' expansion scores say new capacity
pays, at the best slot) and ``judge = contribution`` (keep a seed the model is measurably
better with)."""

from __future__ import annotations

import math

from attrs import evolve
from esper_tamiyo_heuristic.heuristic import HeuristicOptions, HeuristicPolicy

from esper_core.lifecycle.actions import Action, LifecycleOp
from esper_core.lifecycle.stages import Stage


def policy(build, **options) -> HeuristicPolicy:  # type: ignore[no-untyped-def]
    # The seed rules alone: no host growth, no fit gate (tested in their own files).
    base = {
        "min_epoch": 2,
        "prune_cooldown": 5,
        "blueprint_order": ["conv_heavy"],
        "host_growth": "off",
        "fit_loss_ratio": 0.0,
    }
    return HeuristicPolicy(HeuristicOptions(**{**base, **options}), build.context())


def test_the_expansion_trigger_grows_at_the_slot_with_the_highest_score(build) -> None:
    p = policy(build, trigger="expansion", expansion_ratio=1.5)
    obs = evolve(build.obs(epoch=4), expansion=(1.2, 2.5, 1.9))
    decision = p.decide(obs)
    assert decision.rule == "germinate", decision.reason
    assert decision.action.op == LifecycleOp.GERMINATE and decision.action.slot == 1
    assert "expansion score 2.50 x the host's at r0c1 >= 1.5" in decision.reason


def test_the_expansion_trigger_waits_below_its_ratio_and_says_why(build) -> None:
    p = policy(build, trigger="expansion", expansion_ratio=1.5)
    obs = evolve(build.obs(epoch=4), expansion=(1.2, 1.4, math.nan))
    decision = p.decide(obs)
    assert decision.action.op == LifecycleOp.WAIT
    assert "no bottleneck: expansion score 1.40 x the host's at r0c1 < 1.5" in decision.reason


def test_the_expansion_trigger_reads_only_slots_that_may_take_a_seed(build) -> None:
    """A fossil's slot scores highest, but only the free slots are candidates."""
    fossil = build.report("r0c0", Stage.FOSSILIZED)
    p = policy(build, trigger="expansion", expansion_ratio=1.5)
    obs = evolve(build.obs(build.with_slot(fossil), epoch=4), expansion=(9.0, 1.0, 1.7))
    decision = p.decide(obs)
    assert decision.action.op == LifecycleOp.GERMINATE and decision.action.slot == 2


def test_the_expansion_trigger_without_scores_names_the_setting(build) -> None:
    p = policy(build, trigger="expansion")
    decision = p.decide(build.obs(epoch=4))
    assert decision.action.op == LifecycleOp.WAIT
    assert "env.expansion_batches" in decision.reason


def _holding(build, p, contribution, epochs=1, passed=True):  # type: ignore[no-untyped-def]
    seed = build.report("r0c1", Stage.HOLDING, epochs_in_stage=epochs, contribution=contribution)
    return p.decide(build.obs(build.with_slot(seed), epoch=12, passed=passed))


def test_judge_by_contribution_keeps_a_seed_the_model_is_better_with(build) -> None:
    p = policy(build, judge="contribution", min_contribution=1.0)
    decision = _holding(build, p, contribution=4.0)
    assert decision.rule == "fossilize", decision.reason
    assert decision.action == Action(LifecycleOp.FOSSILIZE, slot=1)


def test_judge_by_contribution_prunes_one_short_of_it_after_max_holding(build) -> None:
    p = policy(build, judge="contribution", min_contribution=1.0, max_holding_epochs=3)
    waiting = _holding(build, p, contribution=0.5, epochs=1)
    assert waiting.action.op == LifecycleOp.WAIT
    assert "contribution +0.50 points < 1 needed (1 of 3 epochs in HOLDING)" in waiting.reason
    pruned = _holding(build, p, contribution=0.5, epochs=3)
    assert pruned.rule == "prune_contribution", pruned.reason
    assert pruned.action == Action(LifecycleOp.PRUNE, slot=1)


def test_judge_by_contribution_waits_for_a_failing_gate_then_prunes(build) -> None:
    p = policy(build, judge="contribution", max_holding_epochs=2)
    waits = _holding(build, p, contribution=4.0, epochs=1, passed=False)
    assert waits.action.op == LifecycleOp.WAIT and "waiting for its gate" in waits.reason
    pruned = _holding(build, p, contribution=4.0, epochs=2, passed=False)
    assert pruned.rule == "prune_gate", pruned.reason


def test_expansion_patience_waits_for_consecutive_readings_over_the_ratio(build) -> None:
    """With expansion_patience = 3 one high reading, or two, or three with a low one
    between, do not germinate; three in a row do."""
    p = policy(build, trigger="expansion", expansion_ratio=1.5, expansion_patience=3)
    readings = [(4, 2.5), (5, 2.5), (6, 1.0), (7, 2.5), (8, 2.5)]
    for epoch, score in readings:
        decision = p.decide(evolve(build.obs(epoch=epoch), expansion=(score, 1.0, 1.0)))
        assert decision.action.op == LifecycleOp.WAIT, (epoch, decision.reason)
    assert "at 2 of 3 decisions in a row (expansion_patience)" in decision.reason
    decision = p.decide(evolve(build.obs(epoch=9), expansion=(2.5, 1.0, 1.0)))
    assert decision.rule == "germinate", decision.reason
    assert decision.action.slot == 0


def test_expansion_patience_counts_only_consecutive_epochs(build) -> None:
    """A gap in the decisions (an epoch the trigger was not asked) starts the run anew."""
    p = policy(build, trigger="expansion", expansion_ratio=1.5, expansion_patience=2)
    first = p.decide(evolve(build.obs(epoch=4), expansion=(2.5, 1.0, 1.0)))
    assert first.action.op == LifecycleOp.WAIT
    after_gap = p.decide(evolve(build.obs(epoch=6), expansion=(2.5, 1.0, 1.0)))
    assert after_gap.action.op == LifecycleOp.WAIT, after_gap.reason
    assert "at 1 of 2 decisions in a row" in after_gap.reason
    assert p.decide(evolve(build.obs(epoch=7), expansion=(2.5, 1.0, 1.0))).rule == "germinate"


def test_no_trigger_germinates_while_the_host_fits_its_training_data(build) -> None:
    for trigger in ("expansion", "slowdown", "capacity"):
        p = policy(build, trigger=trigger, expansion_ratio=1.5, fit_loss_ratio=0.1)
        obs = evolve(build.obs(epoch=4, train_loss=0.2), expansion=(1.2, 2.5, 1.9))
        decision = p.decide(obs)
        assert decision.action.op == LifecycleOp.WAIT, trigger
        assert "fits its training data" in decision.reason, trigger
    # Above the gate the expansion trigger grows as before.
    p = policy(build, trigger="expansion", expansion_ratio=1.5, fit_loss_ratio=0.1)
    obs = evolve(build.obs(epoch=4, train_loss=0.3), expansion=(1.2, 2.5, 1.9))
    assert p.decide(obs).action.op == LifecycleOp.GERMINATE
