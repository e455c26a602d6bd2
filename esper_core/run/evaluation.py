"""Greedy evaluation during training: a learning curve a person can judge.

Before the first update and every ``train.eval_every`` updates, the training loop plays
one episode per seed of ``train.eval_seeds`` with the trained policy taking the most
likely action of every head (:meth:`~esper_core.components.policy.Trainable.act_greedily`),
and once, at the first evaluation, with each reference policy of
``train.eval_references`` (``wait``, ``heuristic``) on the same seeds. Each evaluation
is one :class:`~esper_core.run.telemetry.PolicyEvaluation` event; ``esper report`` draws
them. The episodes run on envs of their own, so training envs, their seeds and the
rollout are untouched, and no epoch or episode event of theirs reaches telemetry: the
run's summary counts training episodes only. Every rank of a multi-process run
evaluates (only the writer's events reach the files): a rank that skipped it would wait
at the next collective for as long as the evaluation takes, past the executor's timeout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from esper_core.converter import structure, unstructure
from esper_core.run.env_builders import fit_envs_to_policy
from esper_core.run.telemetry import EpisodeFinished, PolicyEvaluation

if TYPE_CHECKING:
    from esper_core.env.env import MorphogeneticEnv
    from esper_core.env.observation import Observation
    from esper_core.lifecycle.actions import Action
    from esper_core.run.session import Session

TRAINED = "trained"
Act = Callable[[Sequence["Observation"]], list["Action"]]


def due(session: Session) -> bool:
    """Whether the loop, at the boundary before update ``session.outer``, evaluates now."""
    train = session.config.train
    if not train.eval_every or not train.eval_seeds:
        return False
    last = session.outer >= train.updates
    if session.outer % train.eval_every and not last:
        return False
    return not any(e["update"] == session.outer for e in session.evaluations)


def evaluate(session: Session) -> list[PolicyEvaluation]:
    """The evaluations due now (the references first, once); also kept in the session."""
    events = []
    # A mixed run's references would act on the pairs' union space, which only a policy
    # reading observations by their features can: the benchmark's cells are its references.
    mixed = bool(session.config.train.pairs)
    if not mixed and not any(e["update"] is None for e in session.evaluations):
        for name in session.config.train.eval_references:
            make = _reference(session, name)
            if make is not None:
                events.append(_play(session, name, None, make))
    events.append(play_trained(session))
    session.evaluations.extend(unstructure(e) for e in events)
    return events


def play_trained(session: Session) -> PolicyEvaluation:
    """The trained policy's greedy evaluation at ``session.outer``, neither kept in the
    session nor emitted: a check of a checkpoint after training
    (benchmarks/ppo_greedy_check.py)."""
    policy = session.policy
    return _play(session, TRAINED, session.outer, lambda envs: policy)


def _reference(session: Session, name: str) -> Callable[[list[MorphogeneticEnv]], Any] | None:
    """A factory of the reference policy ``name``, or None if no plugin provides it."""
    pm = session.plugins
    if pm is None or name not in pm.registry("policies"):
        return None
    cls = pm.registry("policies").get(name)
    options = structure(
        session.config.component_options("policies", name), cls.Options, path=f"policies.{name}"
    )

    def make(envs: list[MorphogeneticEnv]) -> Any:
        context = attrs.evolve(session.resolved.policy_context(envs), argument=None)
        return cls(options, context)

    return make


def _envs(session: Session, count: int) -> list[MorphogeneticEnv]:
    """Evaluation envs (built once, kept on the session), one per training env index."""
    from esper_core.env.env import MorphogeneticEnv

    if len(session.eval_envs) < count:
        task, resolved = session.envs[0].task, session.resolved

        def build(i: int) -> MorphogeneticEnv:
            return MorphogeneticEnv(
                task,
                resolved.make_reward(),
                resolved.blueprints,
                session.config,
                i,
                session.envs[i].device,
                operators=resolved.operators,
            )

        make = session.build_env or build  # a mixed run's envs draw their pair per seed
        session.eval_envs.extend(make(i) for i in range(len(session.eval_envs), count))
    return session.eval_envs[:count]


def _play(
    session: Session,
    name: str,
    update: int | None,
    make: Callable[[list[MorphogeneticEnv]], Any],
) -> PolicyEvaluation:
    """One episode per evaluation seed, in groups of at most ``n_envs`` envs."""
    from esper_core.env.env import run_epoch

    seeds = list(session.config.train.eval_seeds)
    width = len(session.envs)
    finished: list[EpisodeFinished] = []
    pairs: list[str] = []
    for start in range(0, len(seeds), width):
        group = seeds[start : start + width]
        envs = _envs(session, width)[: len(group)]
        policy = make(envs)
        fit_envs_to_policy(envs, policy)  # else the envs mask every growth it may ask for
        act: Act = policy.act_greedily if name == TRAINED else policy.act
        observations = [env.reset(seed, 0) for env, seed in zip(envs, group)]
        policy.reset(list(range(len(envs))))
        while envs[0].epoch < envs[0].max_epochs:
            actions = act(observations)
            results = [run_epoch(env, a) for env, a in zip(envs, actions)]
            policy.observe(results)
            observations = [r.observation for r in results]
        finished += [e for r in results for e in r.events if isinstance(e, EpisodeFinished)]
        pairs += [env.pair_label for env in envs if env.pair_label]
    return PolicyEvaluation(
        update=update,
        policy=name,
        seeds=seeds,
        final_val_acc=[e.final_val_acc for e in finished],
        final_test_acc=[e.final_test_acc for e in finished],
        total_reward=[e.total_reward for e in finished],
        seeds_fossilized=[e.seeds_fossilized for e in finished],
        params_added=[e.params_added for e in finished],
        pairs=pairs,
    )
