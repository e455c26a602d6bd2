"""``grower.decision`` names what the controller does to the host:
``WIDEN host x2`` and why at the epoch the growth starts, the ramp while it runs, ``FOLD``
at the boundary it is folded, and ``DONE`` after the last epoch (it was None), the same
words as the epoch's event."""

from __future__ import annotations

from typing import Any

import torch

from esper_core.grow.grower import Grower
from esper_core.run.telemetry import EpochCompleted
from tests.integration.own_model_helpers import (
    MLP_SLOTS,
    grower_kwargs,
    mlp,
    tabular_batches,
    train_one_epoch,
)


def _grower(policy: str, overrides: list[str], max_epochs: int = 8) -> tuple[Grower, Any]:
    model = mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    example = tabular_batches(1, 1, size=16)[0][0]
    kwargs = grower_kwargs(overrides=overrides, max_epochs=max_epochs, optimizer=opt)
    return Grower(model, MLP_SLOTS, example_input=example, policy=policy, **kwargs), opt


def _run(grower: Grower, opt: Any, epochs: int) -> list[tuple[str, str]]:
    """Each epoch's decision as the grower shows it, checked against the epoch's event."""
    train, val = tabular_batches(3, 1, size=16), tabular_batches(2, 2, size=16)
    decisions = []
    for _ in range(epochs):
        decision = grower.decision
        decisions.append((decision.action, decision.reason))
        train_one_epoch(grower.module, opt, train)
        result = grower.end_epoch(val)
        (event,) = [e for e in result.events if isinstance(e, EpochCompleted)]
        assert (event.action, event.reason) == (decision.action, decision.reason)
        assert result.reason == decision.reason
    return decisions


STATIC = ["policies.static.widen_at=0.25", "policies.static.widen_tempo=3"]  # epoch 2 of 8


def test_a_scheduled_widening_is_named_from_its_start_to_its_fold_and_the_end_is_done() -> None:
    grower, opt = _grower("static", STATIC)
    decisions = _run(grower, opt, 8)
    assert [action for action, _ in decisions] == [
        "WAIT",
        "WAIT",
        "WIDEN host x2",  # born before epoch 2, its ramp's first tick taken
        "WAIT",
        "FOLD host widening",  # folded at the end of epoch 3: the ramp's third tick
        "WAIT",
        "WAIT",
        "WAIT",
    ]
    why = "policies.static: the seeds were fixed at birth, and the host widens at 0.25 of the run"
    assert decisions[2][1] == f"on schedule; {why}"
    assert decisions[3][1] == f"host widening, ramp 2/3; {why}"
    assert decisions[4][1] == f"ramp 3/3 done, folded into the host; {why}"
    assert decisions[5][1] == why
    done = grower.decision
    assert (done.epoch, done.action) == (8, "DONE") and grower.action == "DONE"
    assert str(done) == "epoch 8: DONE: the 8 planned epochs (max_epochs) are done"


def test_the_decision_mid_ramp_is_the_same_after_a_resume() -> None:
    grower, opt = _grower("static", STATIC)
    _run(grower, opt, 3)  # the decision of epoch 3: the ramp's second tick
    saved = grower.state_dict()
    grower.close()
    resumed, _ = _grower("static", STATIC)
    resumed.load_state_dict(saved)
    assert resumed.decision == grower.decision
    assert resumed.decision.reason.startswith("host widening, ramp 2/3; ")


def test_a_growth_still_ramping_after_the_last_epoch_is_said_so() -> None:
    grower, opt = _grower("static", ["policies.static.widen_at=0.5"], max_epochs=4)
    _run(grower, opt, 4)  # born before epoch 2 with a ramp of 5: 3 ticks taken
    assert grower.decision.action == "DONE"
    assert grower.decision.reason.endswith("the host widening stays at ramp 3/5, alpha 0.60")


def test_the_heuristic_names_its_host_growth_and_the_trigger_that_fired() -> None:
    overrides = [
        'policies.heuristic.host_growth="widen"',
        "policies.heuristic.host_growth_min_at=0.25",
        "policies.heuristic.host_growth_tempo=3",
    ]
    grower, opt = _grower("heuristic", overrides, max_epochs=10)
    decisions = _run(grower, opt, 10)
    actions = [action for action, _ in decisions]
    start = actions.index("WIDEN host x2")
    assert actions[start + 1 : start + 3] == ["WAIT", "FOLD host widening"]
    assert actions.count("WIDEN host x2") == 1
    reason = decisions[start][1]
    # The default grows at once, at the first decision its window and history allow;
    # the user's loop trains, so the loss it quotes is validation's, and says so.
    assert reason.startswith(
        f"epoch {start} in its window 2-6: at once (host_growth_drop 1): "
        "the host still underfits: validation loss (no training loss seen) "
    )
    assert decisions[start + 1][1].startswith("host widening, ramp 2/3; ")
    assert grower.decision.action == "DONE"


def test_auto_widens_a_users_model_which_cannot_deepen_and_says_so() -> None:
    # auto declares a widening and a deepening; the Grower leaves the deepening out (a
    # user's layers cannot deepen) instead of refusing the policy, and the heuristic,
    # told which growths the host took, widens.
    overrides = [
        'policies.heuristic.host_growth="auto"',
        "policies.heuristic.host_growth_min_at=0.25",
        "policies.heuristic.host_growth_tempo=3",
    ]
    grower, opt = _grower("heuristic", overrides, max_epochs=10)
    decisions = _run(grower, opt, 10)
    actions = [action for action, _ in decisions]
    assert actions.count("WIDEN host x2") == 1 and "DEEPEN" not in " ".join(actions)
    reason = decisions[actions.index("WIDEN host x2")][1]
    assert reason.endswith("; auto: widen (the host cannot deepen)"), reason
