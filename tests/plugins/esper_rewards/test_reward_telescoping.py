"""Potential-based terms telescope over an episode (Ng et al., 1999).

For s_0 .. s_T, the discounted sum of the per-step shaping terms
``Σ_t γ^t · w·(γ·Φ(s_{t+1}) − Φ(s_t))`` equals ``w·(γ^T·Φ(s_T) − Φ(s_0))``, and
``−w·Φ(s_0)`` with ``zero_terminal_potential`` (the default: Φ(s_T) = 0). Φ is
recomputed here from the stage table (DOMAIN §6's, fossil 7.5, bonus cap 1), independently of the plugin. The same holds
for shaped's attribution Ψ (by measured gain), and the accuracy and loss terms sum to
the discounted final accuracy / loss: what an episode earns depends on where it ends.
"""

from __future__ import annotations

import math

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from esper_core.components.reward import SlotSnapshot
from esper_core.lifecycle.actions import LifecycleOp
from esper_core.lifecycle.rules import BLENDED_STAGES, FOSSIL_STAGES
from esper_core.lifecycle.stages import Stage
from tests.plugins.esper_rewards.builders import SHAPING_FAMILIES, SLOT_IDS, ctx, family, snap

SPEC_POTENTIAL = {
    Stage.DORMANT: 0.0,
    Stage.GERMINATED: 1.0,
    Stage.TRAINING: 2.0,
    Stage.BLENDING: 3.5,
    Stage.HOLDING: 5.5,
    Stage.FOSSILIZED: 7.5,
    Stage.PRUNED: 0.0,
    Stage.EMBARGOED: 0.0,
    Stage.RESETTING: 0.0,
}
SEED_HOLDING = {Stage.GERMINATED, Stage.TRAINING, Stage.BLENDING, Stage.HOLDING, Stage.FOSSILIZED}
W = 0.3


def reference_psi(slots: tuple[SlotSnapshot, ...]) -> float:
    """shaped's attribution potential: 0.05/point for a fossil, 0.02 for a blended seed."""
    total = 0.0
    for s in slots:
        if s.stage in BLENDED_STAGES and s.gain is not None:
            weight = 0.05 if s.stage in FOSSIL_STAGES else 0.02
            total += weight * max(-20.0, min(20.0, s.gain))
    return total


def reference_phi(slots: tuple[SlotSnapshot, ...]) -> float:
    total = 0.0
    for s in slots:
        total += SPEC_POTENTIAL[s.stage]
        if s.stage in SEED_HOLDING:
            total += min(0.3 * s.epochs_in_stage, 1.0)
    return total


@st.composite
def trajectories(draw: st.DrawFn) -> list[tuple[SlotSnapshot, ...]]:
    """T+1 random multi-slot states: any stage and epochs_in_stage in every slot."""
    n_slots = draw(st.integers(min_value=1, max_value=len(SLOT_IDS)))
    length = draw(st.integers(min_value=1, max_value=40))
    gains = st.one_of(st.none(), st.floats(min_value=-40, max_value=40))
    slot_state = st.tuples(
        st.sampled_from(list(Stage)), st.integers(min_value=0, max_value=25), gains
    )
    states = []
    for _ in range(length + 1):
        drawn = draw(st.lists(slot_state, min_size=n_slots, max_size=n_slots))
        states.append(
            tuple(
                snap(SLOT_IDS[i], stage, epochs, gain=gain)
                for i, (stage, epochs, gain) in enumerate(drawn)
            )
        )
    return states


def episode_contexts(
    states: list[tuple[SlotSnapshot, ...]],
    ops: list[LifecycleOp],
    accuracies: list[float] | None = None,
    losses: list[float] | None = None,
) -> list:
    T = len(states) - 1
    acc = accuracies or [80.0] * (T + 1)
    loss = losses or [0.5] * (T + 1)
    return [
        ctx(
            op=ops[t % len(ops)],
            epoch=t + 1,
            max_epochs=T,
            slots_before=states[t],
            slots_after=states[t + 1],
            val_acc_prev=acc[t],
            val_acc=acc[t + 1],
            val_loss_prev=loss[t],
            val_loss=loss[t + 1],
        )
        for t in range(T)
    ]


gammas = st.one_of(
    st.sampled_from([0.5, 0.9, 0.99, 0.995, 1.0]),
    st.floats(min_value=0.01, max_value=1.0, allow_nan=False),
)
ops = st.lists(st.sampled_from(list(LifecycleOp)), min_size=1, max_size=6)


def discounted(reward: object, steps: list, component: str, gamma: float) -> float:
    return math.fsum(
        gamma**t * reward.compute(step).components[component]  # type: ignore[attr-defined]
        for t, step in enumerate(steps)
    )


@settings(max_examples=150, deadline=None)
@given(states=trajectories(), gamma=gammas, op_cycle=ops)
def test_discounted_shaping_telescopes(states, gamma: float, op_cycle) -> None:
    T = len(states) - 1
    expected = W * (gamma**T * reference_phi(states[-1]) - reference_phi(states[0]))
    steps = episode_contexts(states, op_cycle)
    for cls in SHAPING_FAMILIES:
        reward = family(cls, gamma=gamma, zero_terminal_potential=False)
        total = discounted(reward, steps, "shaping", gamma)
        assert abs(total - expected) <= 1e-9, (cls.name, total, expected)


@settings(max_examples=100, deadline=None)
@given(states=trajectories(), gamma=gammas, op_cycle=ops)
def test_default_shaping_sums_to_minus_phi0_whatever_the_policy_did(
    states, gamma: float, op_cycle
) -> None:
    # The default zeroes Φ at the last step: parking a seed, fossilizing a useless one
    # or ending with seeds anywhere earns nothing from the shaping over an episode.
    steps = episode_contexts(states, op_cycle)
    for cls in SHAPING_FAMILIES:
        total = discounted(family(cls, gamma=gamma), steps, "shaping", gamma)
        assert abs(total - (-W * reference_phi(states[0]))) <= 1e-9, cls.name


@settings(max_examples=100, deadline=None)
@given(states=trajectories(), gamma=gammas, op_cycle=ops, zero=st.booleans())
def test_shaped_attribution_telescopes(states, gamma: float, op_cycle, zero: bool) -> None:
    from esper_rewards.shaped import ShapedReward

    T = len(states) - 1
    end = 0.0 if zero else gamma**T * reference_psi(states[-1])
    steps = episode_contexts(states, op_cycle)
    reward = family(ShapedReward, gamma=gamma, zero_terminal_potential=zero)
    total = discounted(reward, steps, "attribution", gamma)
    assert abs(total - (end - reference_psi(states[0]))) <= 1e-9


accuracy_paths = st.lists(st.floats(min_value=0, max_value=100), min_size=2, max_size=41)


@settings(max_examples=100, deadline=None)
@given(path=accuracy_paths, gamma=gammas)
def test_accuracy_term_sums_to_the_discounted_final_accuracy(
    path: list[float], gamma: float
) -> None:
    from esper_rewards.pbrs import PBRSReward

    T = len(path) - 1
    states = [(snap(SLOT_IDS[0], Stage.DORMANT),)] * (T + 1)
    steps = episode_contexts(states, [LifecycleOp.WAIT], accuracies=path)
    total = discounted(family(PBRSReward, gamma=gamma), steps, "accuracy", gamma)
    assert abs(total - 0.1 * (gamma**T * path[-1] - path[0])) <= 1e-9


@settings(max_examples=100, deadline=None)
@given(
    path=st.lists(
        st.one_of(st.floats(min_value=0, max_value=30), st.just(math.inf), st.just(math.nan)),
        min_size=2,
        max_size=41,
    ),
    gamma=gammas,
)
def test_loss_term_sums_to_the_discounted_final_loss(path: list[float], gamma: float) -> None:
    from esper_rewards.loss import LossReward

    T = len(path) - 1
    cap = 3.0 * math.log(10)
    capped = [min(v, cap) if math.isfinite(v) else cap for v in path]
    states = [(snap(SLOT_IDS[0], Stage.DORMANT),)] * (T + 1)
    steps = episode_contexts(states, [LifecycleOp.WAIT], losses=path)
    total = discounted(family(LossReward, gamma=gamma), steps, "loss", gamma)
    expected = (capped[0] - gamma**T * capped[-1]) / (0.05 * math.log(10))
    assert abs(total - expected) <= 1e-8


@settings(max_examples=60, deadline=None)
@given(
    states=trajectories(),
    g1=st.floats(min_value=0.05, max_value=1.0),
    g2=st.floats(min_value=0.05, max_value=1.0),
)
def test_gamma_changes_the_shaping(states, g1: float, g2: float) -> None:
    # Each step's shaping moves by exactly w·(γ1 − γ2)·Φ(s′) when gamma changes.
    # A mid-episode step (the last step's Φ(s′) is zeroed by default).
    step = attrs.evolve(episode_contexts(states, [LifecycleOp.WAIT])[0], max_epochs=1000)
    phi_after = reference_phi(step.slots_after)
    a = family(SHAPING_FAMILIES[0], gamma=g1).compute(step).components["shaping"]
    b = family(SHAPING_FAMILIES[0], gamma=g2).compute(step).components["shaping"]
    assert abs((a - b) - W * (g1 - g2) * phi_after) <= 1e-9
    if abs(g1 - g2) > 1e-6 and phi_after > 0:
        assert a != b
