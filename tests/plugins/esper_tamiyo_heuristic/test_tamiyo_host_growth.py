"""The heuristic's growth of the host itself (``host_growth``): it asks once per
episode, at the first epoch of its window where the validation loss has slowed down, only
when the env says the growth can start (``host_growth_ready``), holds germination back
until then, and remembers across a checkpoint that it has asked."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
from esper_tamiyo_heuristic.heuristic import HeuristicOptions, HeuristicPolicy
from esper_tamiyo_heuristic.memory import Decision

from esper_core.components.policy import DepthGrowthSpec, WidthGrowthSpec
from esper_core.converter import structure
from esper_core.errors import ConfigError
from esper_core.lifecycle.actions import LifecycleOp
from esper_core.lifecycle.rules import SEED_STAGES
from esper_core.lifecycle.stages import Stage
from tests.plugins.esper_tamiyo_heuristic.test_tamiyo_policy_state import through_checkpoint

MAX_EPOCHS = 20  # window: epochs round(0.2 x 20) = 4 .. round(0.6 x 20) = 12
UNDERFIT = 2.28  # a training loss near chance: the seed trigger (capacity) fires


def _losses() -> list[float]:
    """Validation losses after 0..19 epochs: flat (the trigger fires, but before the
    window), falling 20 % an epoch, then 1 %: with a window of 2 epochs and a drop of 5 %,
    the trigger first fires in the window at epoch 9."""
    out = [3.0] * 4
    while len(out) < 8:
        out.append(out[-1] * 0.8)
    while len(out) < MAX_EPOCHS:
        out.append(out[-1] * 0.99)
    return out


def policy(build, **options) -> HeuristicPolicy:  # type: ignore[no-untyped-def]
    base = {"host_growth": "widen", "host_growth_drop": 0.05, "blueprint_order": ["conv_heavy"]}
    base |= {"trigger": "capacity", "judge": "gain"}  # hand-made observations carry no scores
    base |= {"fit_loss_ratio": 0.0}  # its gate has a test of its own
    return HeuristicPolicy(HeuristicOptions(**{**base, **options}), build.context())


def episode(
    p: HeuristicPolicy, build, losses, slots=None, start=0, train_loss=0.5, ready=None, **kw
):  # type: ignore[no-untyped-def]
    """One decision per epoch from ``start`` on; the history is the last five losses.
    ``ready``: what the env says of the declared growth each epoch (None: it can start
    while no slot holds a seed, as a widening of every stage)."""
    decisions: list[Decision] = []
    for epoch in range(start, len(losses)):
        history = losses[max(0, epoch - 4) : epoch + 1]
        obs = build.obs(
            slots,
            epoch=epoch,
            max_epochs=MAX_EPOCHS,
            loss_history=history,
            train_loss=train_loss,
            **kw,
        )
        can = not any(r.stage in SEED_STAGES for r in obs.slots) if ready is None else ready
        decisions.append(p.decide(attrs.evolve(obs, host_growth_ready=(can,))))
    return decisions


def grown(decisions: list[Decision], start: int = 0) -> list[int]:
    return [i + start for i, d in enumerate(decisions) if d.action.host_growth is not None]


def test_it_grows_once_at_the_first_epoch_of_its_window_where_the_loss_slowed(build) -> None:
    p = policy(build)
    decisions = episode(p, build, _losses())
    assert grown(decisions) == [9]  # flat at 2-3 (before the window), never again after 9
    d = decisions[9]
    assert d.rule == "host_growth" and d.action.op == LifecycleOp.WAIT
    assert d.action.host_growth == WidthGrowthSpec(at=9 / 20, factor=2.0, tempo=5)
    assert d.action.host_growth.epoch(MAX_EPOCHS) == 9
    assert "slowed down" in d.action.reason and "window 4-12" in d.action.reason
    assert "no host growth before epoch 4" in decisions[3].action.reason
    assert "still learning" in decisions[8].action.reason
    # The episode grew (the host), so the run's summary gives no reason it did not.
    assert p.why_no_growth(0) is None
    p.reset([0])
    episode(p, build, [3.0 * 0.8**e for e in range(MAX_EPOCHS)])  # never slows down
    assert p.why_no_growth(0) is not None
    # A lower threshold waits for a slower loss: the 1 % epochs do not qualify at 0.5 %.
    assert grown(episode(policy(build, host_growth_drop=0.005), build, _losses())) == []


def test_the_window_bounds_the_moment(build) -> None:
    # A later start of the window moves the growth; a window that closes first stops it.
    assert grown(episode(policy(build, host_growth_min_at=0.55), build, _losses())) == [11]
    assert grown(episode(policy(build, host_growth_max_at=0.4), build, _losses())) == []
    # Flat from the start: the first epoch of the window.
    assert grown(episode(policy(build), build, [3.0] * MAX_EPOCHS)) == [4]


def test_deepen_asks_for_a_whole_stack(build) -> None:
    p = policy(build, host_growth="deepen", host_growth_mode="identity", host_growth_tempo=3)
    (d,) = [d for d in episode(p, build, _losses()) if d.action.host_growth is not None]
    assert d.action.host_growth == DepthGrowthSpec(at=9 / 20, mode="identity", factor=2, tempo=3)
    assert p.online_host_growths() == [DepthGrowthSpec(at=0.0, mode="identity", tempo=3)]


def test_it_grows_only_when_the_env_says_the_growth_can_start(build) -> None:
    for stage, held in ((Stage.TRAINING, "holds a live seed"), (Stage.FOSSILIZED, "a kept one")):
        slots = build.with_slot(build.report("r0c1", stage, epochs_in_stage=1))
        decisions = episode(policy(build), build, _losses(), slots=slots, passed=False)
        assert grown(decisions) == []
        assert f"cannot start now (r0c1 {held})" in decisions[9].action.reason
    # A fossil the growth can keep (a deepening) is not in its way: the env says so.
    fossil = build.with_slot(build.report("r0c1", Stage.FOSSILIZED, epochs_in_stage=1))
    decisions = episode(policy(build), build, _losses(), slots=fossil, ready=True)
    assert grown(decisions) == [9]
    # Nothing in the way the policy can see, but the env says no (a growth in flight).
    decisions = episode(policy(build), build, _losses(), ready=False)
    assert grown(decisions) == []
    assert decisions[9].action.reason.endswith("the env says it cannot start now")


def test_germination_waits_for_the_host_growth_then_resumes(build) -> None:
    p = policy(build, host_growth_max_at=0.5)  # window 4 .. 10
    losses = [3.0 * 0.8**e for e in range(MAX_EPOCHS)]  # never slows: no growth
    decisions = episode(p, build, losses, train_loss=UNDERFIT)
    ops = [d.action.op for d in decisions]
    assert LifecycleOp.GERMINATE not in ops[:11]
    assert "no germination before the host grows" in decisions[10].action.reason
    assert ops[11] == LifecycleOp.GERMINATE  # the window closed: seeds again
    # After the growth, seeds may germinate at once.
    p = policy(build)
    decisions = episode(p, build, _losses(), train_loss=UNDERFIT)
    assert grown(decisions) == [9] and decisions[10].action.op == LifecycleOp.GERMINATE
    assert LifecycleOp.GERMINATE not in [d.action.op for d in decisions[:10]]


def test_off_changes_nothing(build) -> None:
    """Off, the host_growth_* options are never read: the same decisions as the defaults,
    none asking for a growth, and nothing declared to the session."""
    same = {"blueprint_order": ["conv_heavy"], "trigger": "capacity", "judge": "gain"}
    default = HeuristicPolicy(
        HeuristicOptions(**same, host_growth="off", fit_loss_ratio=0.0), build.context()
    )
    off = policy(build, host_growth="off", host_growth_drop=10.0, host_growth_min_at=0.0)
    for train_loss in (0.5, UNDERFIT):
        a = episode(default, build, _losses(), train_loss=train_loss)
        b = episode(off, build, _losses(), train_loss=train_loss)
        assert [(d.action, d.rule, d.action.reason) for d in a] == [
            (d.action, d.rule, d.action.reason) for d in b
        ]
        assert grown(b) == []
        default.reset([0])
        off.reset([0])
    assert off.online_host_growths() == []
    assert policy(build).online_host_growths() == [WidthGrowthSpec(at=0.0)]


@pytest.mark.parametrize("cut", [5, 12])  # before and after the growth
def test_its_memory_survives_a_checkpoint(build, tmp_path: Path, cut: int) -> None:
    losses = _losses()
    straight = episode(policy(build), build, losses)
    first = policy(build)
    got = episode(first, build, losses[:cut])
    resumed = policy(build)
    resumed.load_state_dict(through_checkpoint(first.state_dict(), tmp_path))
    got += episode(resumed, build, losses, start=cut)
    assert [d.action for d in got] == [d.action for d in straight]
    assert grown(got) == [9]


def test_its_options_are_checked(build) -> None:
    with pytest.raises(ConfigError, match=r"host_growth_max_at .* at least host_growth_min_at"):
        structure({"host_growth_min_at": 0.5, "host_growth_max_at": 0.3}, HeuristicOptions)
    with pytest.raises(ConfigError, match=r"whole number of times as deep, 2 to 8; got 2\.5"):
        structure({"host_growth": "deepen", "host_growth_factor": 2.5}, HeuristicOptions)
    with pytest.raises(ConfigError, match="host_growth"):
        structure({"host_growth": "wider"}, HeuristicOptions)
    with pytest.raises(ConfigError, match=r"host_growth_window: 5 needs env.history_length >= 6"):
        policy(build, host_growth_window=5)
    policy(build, host_growth="off", host_growth_window=5)  # off: never read


def test_a_host_that_fits_its_training_data_is_not_grown_and_says_why(build) -> None:
    """fit_loss_ratio closes the host's growth while the training loss is below that
    fraction of chance (2.3 here): at 0.1, a training loss of 0.2 (< 0.23) holds it back,
    0.3 lets the same curve grow at the same epoch as without the gate."""
    fits = episode(policy(build, fit_loss_ratio=0.1), build, _losses(), train_loss=0.2)
    assert grown(fits) == []
    assert "fits its training data: training loss 0.200 < fit_loss_ratio=0.1" in fits[9].reason
    assert grown(episode(policy(build, fit_loss_ratio=0.1), build, _losses(), train_loss=0.3)) == [
        9
    ]


def test_at_once_it_says_the_host_still_underfits_not_how_fast_the_loss_falls(build) -> None:
    # host_growth_drop 1 fires on any falling loss, so "falls 20%/epoch < 100%" would
    # say nothing: the reason is the open fit gate, with the numbers a user can compare.
    p = policy(build, host_growth_drop=1.0, fit_loss_ratio=0.15)
    decisions = episode(p, build, [3.0 * 0.8**e for e in range(MAX_EPOCHS)], train_loss=1.2)
    assert grown(decisions) == [4]
    reason = decisions[4].action.reason
    assert reason == (
        "epoch 4 in its window 4-12: at once (host_growth_drop 1): the host still underfits: "
        "training loss 1.200 >= fit_loss_ratio=0.15 x chance 2.300"
    ), reason
    p = policy(build, host_growth_drop=1.0)  # fit_loss_ratio 0: no gate to quote
    reason = episode(p, build, [3.0] * MAX_EPOCHS)[4].action.reason
    assert reason.endswith("at once (host_growth_drop 1): no fit gate (fit_loss_ratio 0)")


def test_a_validation_loss_standing_in_for_the_training_loss_is_named_so(build) -> None:
    # A Grower's env sees no training batch: its observation's train_loss is validation's.
    p = policy(build, host_growth_drop=1.0, fit_loss_ratio=0.15)
    obs = build.obs(None, epoch=4, max_epochs=MAX_EPOCHS, loss_history=(3.0, 2.9, 2.8))
    obs = attrs.evolve(obs, train_loss=1.2, train_measured=False, host_growth_ready=(True,))
    reason = p.decide(obs).action.reason
    assert "underfits: validation loss (no training loss seen) 1.200 >= " in reason, reason


def _auto_decision(
    build, expansion, kinds=("width", "depth"), ready=None, topology="cnn", **options
):  # type: ignore[no-untyped-def]
    p = policy(build, host_growth="auto", host_growth_drop=1.0, **options)
    obs = build.obs(None, epoch=4, max_epochs=MAX_EPOCHS, loss_history=(3.0, 2.9, 2.8))
    ready = tuple(True for _ in kinds) if ready is None else ready
    obs = attrs.evolve(
        obs,
        expansion=expansion,
        host_growth_kinds=kinds,
        host_growth_ready=ready,
        train_loss=UNDERFIT,
        topology=topology,
    )
    return p, p.decide(obs)


def test_auto_deepens_where_the_expansion_score_says_depth_is_the_bottleneck(build) -> None:
    p, d = _auto_decision(build, expansion=(0.05, 0.47))  # the best slot's score counts
    assert isinstance(d.action.host_growth, DepthGrowthSpec)
    assert d.action.reason.endswith(
        "; auto: deepen: expansion score 0.47 >= depth_expansion_ratio=0.2"
    )
    # It may ask for either, so it declares both; a host without one declares the other.
    assert [type(g) for g in p.online_host_growths()] == [WidthGrowthSpec, DepthGrowthSpec]
    _, d = _auto_decision(build, expansion=(0.05, 0.10))
    assert isinstance(d.action.host_growth, WidthGrowthSpec)
    assert d.action.reason.endswith(
        "; auto: widen: expansion score 0.10 < depth_expansion_ratio=0.2"
    )
    _, d = _auto_decision(build, expansion=(0.9, 0.9), kinds=("width",))
    assert isinstance(d.action.host_growth, WidthGrowthSpec)
    assert d.action.reason.endswith("; auto: widen (the host cannot deepen)")
    _, d = _auto_decision(build, expansion=())
    assert d.action.reason.endswith(
        "auto: widen (no expansion score: set env.expansion_batches > 0)"
    )


def test_auto_deepens_only_the_model_families_it_is_told_to(build) -> None:
    # The same high score deepens a transformer by default and widens it when
    # depth_topologies leaves transformers out; a CNN still deepens.
    _, d = _auto_decision(build, expansion=(0.9,), topology="transformer")
    assert isinstance(d.action.host_growth, DepthGrowthSpec)
    only_cnn = {"depth_topologies": ["cnn"]}
    _, d = _auto_decision(build, expansion=(0.9,), topology="transformer", **only_cnn)
    assert isinstance(d.action.host_growth, WidthGrowthSpec)
    assert d.action.reason.endswith("; auto: widen (depth_topologies leaves out transformer hosts)")
    _, d = _auto_decision(build, expansion=(0.9,), topology="cnn", **only_cnn)
    assert isinstance(d.action.host_growth, DepthGrowthSpec)


def test_auto_waits_for_the_growth_it_chose_not_the_other(build) -> None:
    # Depth chosen but not ready now: nothing starts, and the reason says the env's word.
    _, d = _auto_decision(build, expansion=(0.9,), ready=(True, False))
    assert d.action.host_growth is None
    assert "no host growth: the env says it cannot start now" in d.action.reason
