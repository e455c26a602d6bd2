"""Potential-based shaping telescopes over an episode (Ng et al., 1999).

For s_0 .. s_T, the discounted sum of the per-step shaping terms
``Σ_t γ^t · w·(γ·Φ(s_{t+1}) − Φ(s_t))`` equals ``w·(γ^T·Φ(s_T) − Φ(s_0))``.
Φ is recomputed here from the DOMAIN §6 table, independently of the plugin.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from esper_core.components.reward import SlotSnapshot
from esper_core.lifecycle.actions import LifecycleOp
from esper_core.lifecycle.stages import Stage
from tests.plugins.esper_rewards.builders import SHAPING_FAMILIES, SLOT_IDS, ctx, family, snap

SPEC_POTENTIAL = {
    Stage.DORMANT: 0.0,
    Stage.GERMINATED: 1.0,
    Stage.TRAINING: 2.0,
    Stage.BLENDING: 3.5,
    Stage.HOLDING: 5.5,
    Stage.FOSSILIZED: 6.0,
    Stage.PRUNED: 0.0,
    Stage.EMBARGOED: 0.0,
    Stage.RESETTING: 0.0,
}
SEED_HOLDING = {Stage.GERMINATED, Stage.TRAINING, Stage.BLENDING, Stage.HOLDING, Stage.FOSSILIZED}
W = 0.3


def reference_phi(slots: tuple[SlotSnapshot, ...]) -> float:
    total = 0.0
    for s in slots:
        total += SPEC_POTENTIAL[s.stage]
        if s.stage in SEED_HOLDING:
            total += min(0.3 * s.epochs_in_stage, 2.0)
    return total


@st.composite
def trajectories(draw: st.DrawFn) -> list[tuple[SlotSnapshot, ...]]:
    """T+1 random multi-slot states: any stage and epochs_in_stage in every slot."""
    n_slots = draw(st.integers(min_value=1, max_value=len(SLOT_IDS)))
    length = draw(st.integers(min_value=1, max_value=40))
    slot_state = st.tuples(st.sampled_from(list(Stage)), st.integers(min_value=0, max_value=25))
    states = []
    for _ in range(length + 1):
        drawn = draw(st.lists(slot_state, min_size=n_slots, max_size=n_slots))
        states.append(
            tuple(snap(SLOT_IDS[i], stage, epochs) for i, (stage, epochs) in enumerate(drawn))
        )
    return states


def episode_contexts(states: list[tuple[SlotSnapshot, ...]], ops: list[LifecycleOp]) -> list:
    T = len(states) - 1
    return [
        ctx(
            op=ops[t % len(ops)],
            epoch=t + 1,
            max_epochs=T,
            slots_before=states[t],
            slots_after=states[t + 1],
        )
        for t in range(T)
    ]


gammas = st.one_of(
    st.sampled_from([0.5, 0.9, 0.99, 0.995, 1.0]),
    st.floats(min_value=0.01, max_value=1.0, allow_nan=False),
)
ops = st.lists(st.sampled_from(list(LifecycleOp)), min_size=1, max_size=6)


@settings(max_examples=150, deadline=None)
@given(states=trajectories(), gamma=gammas, op_cycle=ops)
def test_discounted_shaping_telescopes(states, gamma: float, op_cycle) -> None:
    T = len(states) - 1
    expected = W * (gamma**T * reference_phi(states[-1]) - reference_phi(states[0]))
    steps = episode_contexts(states, op_cycle)
    for cls in SHAPING_FAMILIES:
        reward = family(cls, gamma=gamma)
        discounted = math.fsum(
            gamma**t * reward.compute(step).components["shaping"] for t, step in enumerate(steps)
        )
        assert abs(discounted - expected) <= 1e-9, (cls.name, discounted, expected)


@settings(max_examples=60, deadline=None)
@given(states=trajectories(), gamma=gammas)
def test_zero_terminal_potential_telescopes_to_minus_phi0(states, gamma: float) -> None:
    steps = episode_contexts(states, [LifecycleOp.WAIT])
    reward = family(SHAPING_FAMILIES[0], gamma=gamma, zero_terminal_potential=True)
    discounted = math.fsum(
        gamma**t * reward.compute(step).components["shaping"] for t, step in enumerate(steps)
    )
    assert abs(discounted - (-W * reference_phi(states[0]))) <= 1e-9


@settings(max_examples=60, deadline=None)
@given(
    states=trajectories(),
    g1=st.floats(min_value=0.05, max_value=1.0),
    g2=st.floats(min_value=0.05, max_value=1.0),
)
def test_gamma_changes_the_shaping(states, g1: float, g2: float) -> None:
    # Each step's shaping moves by exactly w·(γ1 − γ2)·Φ(s′) when gamma changes.
    step = episode_contexts(states, [LifecycleOp.WAIT])[0]
    phi_after = reference_phi(step.slots_after)
    a = family(SHAPING_FAMILIES[0], gamma=g1).compute(step).components["shaping"]
    b = family(SHAPING_FAMILIES[0], gamma=g2).compute(step).components["shaping"]
    assert abs((a - b) - W * (g1 - g2) * phi_after) <= 1e-9
    if abs(g1 - g2) > 1e-6 and phi_after > 0:
        assert a != b
