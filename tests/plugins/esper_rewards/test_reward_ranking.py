"""Every family ranks real outcomes the way a researcher would (DOMAIN §10).

Scripted policies on digits with the ``impaired`` host (30 epochs, the task default),
several seeds. Each episode is run once with a reward that records its contexts; then
every family scores the same contexts, so all five see identical episodes. The score
is the discounted return with the run's γ (what PPO maximises); a rollback would add
the env's ``governor_penalty`` (none happens in these episodes). On every seed:

- a useful fossil (``conv_heavy``: +15 to +23 validation points over ``wait``) earns
  more than ``wait``;
- ``wait`` earns more than a useless fossil (``attention``: measured 6 to 8 points
  below ``wait`` on these seeds, with 552 parameters; 2 to 6 with full isolation);
- parking a zero-parameter seed (``noop``, blended and never fossilized) or a seed that
  never blends (``conv_heavy`` kept in TRAINING) earns nothing over ``wait``. The
  never-blended seed leaves the host's training bit-identical to ``wait``'s; the blended
  noop does not (its ramp scales the host's upstream gradient by 1 - alpha) and ended
  0.3-1.1 validation points below ``wait`` on these seeds.

The episodes use the default lifecycle (``lifecycle.isolation = none``: a seed blends
from its germination), except the never-blended seed: without isolation every seed
blends at once, so that episode asks for ``isolation = full`` to have a seed that trains
beside the host without touching its output.

The seeds are the ones the reward defaults were designed on; the property, not a
tuning result, is what this checks.
"""

from __future__ import annotations

import attrs
import pytest

from esper_core.components.reward import RewardBreakdown, RewardContext, RewardSetup
from esper_core.config import load_config
from esper_core.env.env import MorphogeneticEnv
from esper_core.lifecycle.actions import WAIT, Action, LifecycleOp
from esper_core.lifecycle.stages import Stage
from esper_core.plugins import PluginManager
from esper_core.recipe import LEGACY_SGD, recipe_overrides
from esper_core.run.resolve import resolve
from tests.plugins.esper_rewards.builders import FAMILIES

pytestmark = pytest.mark.slow

# Two of the three random seeds the defaults were designed on, holding the narrowest cases
# (measured 2026-11-29): on random seed 0 the blended noop came closest to wait in every
# family (equal in two), on random seed 1 useful growth came closest to wait in every
# family and wait to the useless fossil in four. Random seed 2 brought one case as narrow
# (loss: wait over the useless fossil by 2.53, 2.55 on random seed 1), at a third of the
# test's time.
SEEDS = (0, 1)
GAMMA = 0.995  # run.gamma's default


@attrs.define
class Recorder:
    """A reward family that records what it is shown and pays nothing."""

    contexts: list[RewardContext] = attrs.field(factory=list)
    name = "recorder"

    def compute(self, ctx: RewardContext) -> RewardBreakdown:
        self.contexts.append(ctx)
        return RewardBreakdown.of(recorded=0.0)


@attrs.frozen
class Script:
    """Germinate ``blueprint`` in the host's slot at the first epoch, then advance it
    whenever its gate passes and fossilize it from HOLDING (or, ``park``, WAIT from
    TRAINING or BLENDING on)."""

    blueprint: str | None
    park: bool = False
    isolation: str = "none"

    def act(self, env: MorphogeneticEnv) -> Action:
        if self.blueprint is None:
            return WAIT
        slot_id = env.space.slot_ids[0]
        slot = env.model.slot(slot_id)
        if slot.stage == Stage.DORMANT and env.stats.n_germinated == 0:
            return env.space.germinate(slot_id, self.blueprint)
        if slot.stage == Stage.GERMINATED:
            return env.space.on_slot(LifecycleOp.ADVANCE, slot_id)
        gate = slot.next_gate()
        if self.park or gate is None or not gate.passed:
            return WAIT
        op = LifecycleOp.FOSSILIZE if slot.stage == Stage.HOLDING else LifecycleOp.ADVANCE
        return env.space.on_slot(op, slot_id)


# The scripted outcomes were measured under the original recipe (constant-rate SGD, weight
# decay on every parameter). Under digits' default recipe (cosine, lr 0.02), and under the
# original one with decay on kernels only, the parked noop's ramp (the host's upstream
# gradient scaled by 1 - alpha, a lower effective rate) ended above wait on one of the
# three seeds and paid pbrs +0.03-0.05 over it: an accuracy reward cannot tell a host that
# trained better by chance from one that grew. The property is checked where it was set.
LEGACY_RECIPE = recipe_overrides(LEGACY_SGD)

SCRIPTS = {
    "wait": Script(None),
    "useful_fossil": Script("conv_heavy"),
    "useless_fossil": Script("attention"),
    "parked_noop": Script("noop", park=True),
    "never_blended": Script("conv_heavy", park=True, isolation="full"),
}


def episode(pm: PluginManager, seed: int, script: Script) -> tuple[list[RewardContext], str]:
    overrides = ["run.task=digits", "tasks.digits.preset=impaired", *LEGACY_RECIPE]
    # Test accuracy at the last epoch only: no reward reads it, and measuring it draws no
    # random number, so the episodes are the ones measured with it every epoch.
    overrides += ["env.eval_test_every=0"]
    # No expansion probe (a fifth of an episode's time): no reward or script reads its
    # scores, and it leaves training untouched (eval mode, its own generator), so every
    # context is equal field for field to one from an episode with the probe.
    overrides += ["env.expansion_batches=0"]
    overrides += [f"lifecycle.isolation={script.isolation}"]
    overrides += [f"lifecycle.isolation_non_identity={script.isolation}"]
    config = load_config(overrides=overrides)
    resolved = resolve(config, pm)
    recorder = Recorder()
    env = MorphogeneticEnv(
        resolved.make_task(quiet=True), recorder, resolved.blueprints, resolved.config
    )
    env.reset(seed)
    while env.epoch < env.max_epochs:
        env.step(script.act(env))
    return recorder.contexts, env.model.slot(env.space.slot_ids[0]).stage.value


def discounted_return(family: object, contexts: list[RewardContext]) -> float:
    total = 0.0
    for t, ctx in enumerate(contexts):
        reward = family.compute(ctx).total  # type: ignore[attr-defined]
        assert not ctx.rolled_back  # a rollback would add the env's governor penalty
        total += GAMMA**t * reward
    return total


@pytest.fixture(scope="module")
def episodes(pm: PluginManager) -> dict[tuple[int, str], list[RewardContext]]:
    out = {}
    for seed in SEEDS:
        for name, script in SCRIPTS.items():
            contexts, stage = episode(pm, seed, script)
            expected = {"wait": "DORMANT", "useful_fossil": "FOSSILIZED"}
            expected |= {"useless_fossil": "FOSSILIZED", "parked_noop": "BLENDING"}
            expected |= {"never_blended": "TRAINING"}
            assert stage == expected[name], (seed, name)
            out[(seed, name)] = contexts
    return out


def test_the_scripted_outcomes_are_what_the_names_say(episodes) -> None:
    for seed in SEEDS:
        final = {name: episodes[(seed, name)][-1].val_acc for name in SCRIPTS}
        assert final["useful_fossil"] >= final["wait"] + 10.0, (seed, final)
        assert final["useless_fossil"] <= final["wait"], (seed, final)
        # a seed that never touches the output leaves the host's training bit-identical
        assert final["never_blended"] == final["wait"], (seed, final)
        # a blended noop adds no parameter, but while its alpha ramps it scales the host's
        # upstream gradient by 1 - alpha, so the host trains differently: beyond a
        # per-action cost, only its accuracy can set its reward apart from wait's
        assert all(s.seed_params == 0 for s in episodes[(seed, "parked_noop")][-1].slots_after)


@pytest.mark.parametrize("cls", FAMILIES, ids=lambda c: c.name)
def test_every_family_ranks_useful_growth_first_and_parking_at_best_as_wait(
    cls: type, episodes
) -> None:
    family = cls(cls.Options(), RewardSetup(gamma=GAMMA))
    for seed in SEEDS:
        score = {name: discounted_return(family, episodes[(seed, name)]) for name in SCRIPTS}
        where = (cls.name, seed, score)
        assert score["useful_fossil"] > score["wait"] > score["useless_fossil"], where
        assert score["parked_noop"] <= score["wait"] + 1e-9, where
        assert score["never_blended"] <= score["wait"] + 1e-9, where
