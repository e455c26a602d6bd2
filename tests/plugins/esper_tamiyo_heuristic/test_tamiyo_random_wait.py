"""The random policy never picks a masked action; wait always waits."""

from __future__ import annotations

import collections
import random

import pytest
from esper_tamiyo_heuristic.legal import legal_choices, sample_legal
from esper_tamiyo_heuristic.random_policy import RandomOptions, RandomPolicy
from esper_tamiyo_heuristic.wait import WaitOptions, WaitPolicy
from hypothesis import given, settings
from hypothesis import strategies as st

from esper_core.converter import structure
from esper_core.errors import CheckpointError, ConfigError
from esper_core.lifecycle.actions import OP_HEADS, WAIT, LifecycleOp, MaskRules, refusal_reason
from esper_core.lifecycle.stages import Stage

ALL_STAGES = list(Stage)


@st.composite
def observations(draw, build):
    reports = []
    for sid in build.space.slot_ids:
        stage = draw(st.sampled_from(ALL_STAGES))
        blending = stage == Stage.BLENDING
        reports.append(
            build.report(
                sid,
                stage,
                epochs_in_stage=draw(st.integers(0, 12)),
                epochs_total=draw(st.integers(0, 30)),
                contribution=draw(st.none() | st.floats(-10, 10)),
                alpha=draw(st.sampled_from([0.2, 0.5, 0.7])) if blending else None,
                alpha_target=draw(st.sampled_from(build.space.alpha_targets)) if blending else None,
            )
        )
    rules = MaskRules(max_seeds=draw(st.integers(0, 4)), min_prune_age=draw(st.integers(0, 3)))
    return build.obs(
        reports, rules=rules, passed=draw(st.lists(st.booleans(), min_size=3, max_size=3))
    )


@settings(max_examples=300, deadline=None)
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_random_never_picks_a_masked_action(build, data, seed) -> None:
    obs = data.draw(observations(build))
    policy = RandomPolicy(RandomOptions(seed=seed), build.context())
    for action in policy.act([obs] * 25):
        assert refusal_reason(action, obs.masks, build.space) is None, build.space.describe(action)
        # Heads the op does not read stay at 0, so the action is canonical.
        unused = [
            h
            for h in ("slot", "blueprint", "style", "tempo", "alpha_target")
            if h not in OP_HEADS[action.op]
        ]
        assert all(getattr(action, h) == 0 for h in unused)


def test_random_is_uniform_over_legal_ops(build) -> None:
    slots = [
        build.report("r0c0", Stage.HOLDING, epochs_in_stage=2),  # prune, fossilize, set alpha
        build.report("r0c1", Stage.TRAINING, epochs_in_stage=2),  # advance, prune
        build.report("r0c2", Stage.DORMANT),  # germinate is masked: r0c1 is incubating
    ]
    obs = build.obs(slots)
    legal = legal_choices(obs.masks, build.space).ops
    assert LifecycleOp.GERMINATE not in legal
    rng = random.Random(7)
    n = 6000
    counts = collections.Counter(sample_legal(rng, obs.masks, build.space).op for _ in range(n))
    assert set(counts) == set(legal)
    expected = n / len(legal)
    assert all(abs(c - expected) < 0.1 * expected for c in counts.values()), counts
    # Given the op, the slot is uniform over its legal slots (PRUNE: r0c0 and r0c1).
    prunes = collections.Counter(
        a.slot
        for a in (sample_legal(rng, obs.masks, build.space) for _ in range(n))
        if a.op == LifecycleOp.PRUNE
    )
    assert set(prunes) == {0, 1}
    assert abs(prunes[0] - prunes[1]) < 0.15 * (prunes[0] + prunes[1])


def test_random_only_waits_when_nothing_else_is_legal(build) -> None:
    slots = [build.report(sid, Stage.EMBARGOED) for sid in build.space.slot_ids]
    obs = build.obs(slots)
    policy = RandomPolicy(RandomOptions(seed=1), build.context())
    assert set(policy.act([obs] * 50)) == {WAIT}


def test_random_germinates_with_every_head_drawn(build) -> None:
    obs = build.obs()  # every slot empty: only WAIT and GERMINATE are legal
    rng = random.Random(3)
    germs = [
        a
        for a in (sample_legal(rng, obs.masks, build.space) for _ in range(2000))
        if a.op == LifecycleOp.GERMINATE
    ]
    assert {a.slot for a in germs} == {0, 1, 2}
    assert {a.blueprint for a in germs} == set(range(len(build.space.blueprints)))
    assert {a.style for a in germs} == set(range(len(build.space.styles)))
    assert {a.tempo for a in germs} == set(range(len(build.space.tempos)))


def test_random_seed_comes_from_the_options_or_the_run(build) -> None:
    obs = build.obs()

    def draws(options: RandomOptions, run_seed: int) -> list:
        return RandomPolicy(options, build.context(seed=run_seed)).act([obs] * 40)

    assert draws(RandomOptions(), 5) == draws(RandomOptions(), 5)
    assert draws(RandomOptions(), 5) != draws(RandomOptions(), 6)
    assert draws(RandomOptions(seed=9), 5) == draws(RandomOptions(seed=9), 6)
    with pytest.raises(ConfigError, match="seed"):
        structure({"seed": -1}, RandomOptions)


def test_random_rejects_a_foreign_state(build) -> None:
    policy = RandomPolicy(RandomOptions(), build.context())
    with pytest.raises(CheckpointError, match="random policy"):
        policy.load_state_dict({"version": 1, "rng": "nope"})
    with pytest.raises(CheckpointError, match="random policy"):
        policy.load_state_dict({})


def test_wait_always_waits(build) -> None:
    policy = WaitPolicy(WaitOptions(), build.context())
    holding = build.report("r0c0", Stage.HOLDING, epochs_in_stage=3, contribution=9.0)
    obs = [
        build.obs(env_index=0, plateau_epochs=9),
        build.obs(build.with_slot(holding), env_index=1),
    ]
    assert policy.act(obs) == [WAIT, WAIT]
    assert policy.state_dict() == {}
    policy.load_state_dict({})
