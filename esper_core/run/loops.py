"""The two loops over a :class:`~esper_core.run.session.Session`.

:class:`EpisodeLoop` is ``esper run``: episodes of every env under a fixed policy.
:class:`TrainLoop` is ``esper train``: rollouts of a trainable policy, each followed by an
update. Both act once per epoch on every env at once; both stop at an epoch boundary
with a checkpoint when the user presses Ctrl-C.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from esper_core.components.policy import check_trainable
from esper_core.run import evaluation
from esper_core.run.interrupts import StopFlag
from esper_core.run.session import Session
from esper_core.run.shared_epochs import SharedEpochs
from esper_core.run.telemetry import PolicyUpdate
from esper_core.run.watchdog import Watchdog

if TYPE_CHECKING:
    from esper_core.env.observation import Observation


def play_epoch(
    s: Session,
    observations: list[Observation],
    update: int | None = None,
    watchdog: Watchdog | None = None,
) -> list[Observation]:
    """One epoch of every env at once: the policy acts on ``observations``, the executor
    steps every env, the policy observes the results and the epoch's events go out
    (tagged with ``update`` in a training run). Returns what the next epoch acts on.
    ``watchdog`` is told each phase, so that an epoch that never ends is named by it."""
    w = watchdog or Watchdog(0)
    w.phase = "the policy's act"
    actions = s.policy.act(observations)
    w.phase = "the envs' epoch (the executor's step: training, validation, rewards)"
    if s.shared is None:
        results = s.executor.step(s.envs, actions)
    else:
        results = s.shared.step(s.executor, s.envs, actions)
    w.phase = "the policy's observe"
    s.policy.observe(results)
    s.epoch += 1
    w.phase = "telemetry"
    s.emit_epoch(results, update=update)
    return [r.observation for r in results]


def _unit(s: Session, what: str) -> str:
    return f"{what} {s.epoch + 1} of {'update' if s.mode == 'train' else 'episode'} {s.outer}"


class EpisodeLoop:
    """``run.episodes`` episodes of every env; a checkpoint every ``run.checkpoint_every``
    epochs and after each episode."""

    mode: ClassVar[str] = "run"

    def __init__(self, session: Session) -> None:
        self.session = session

    def run(self, stop: StopFlag, watchdog: Watchdog | None = None) -> None:
        s, w = self.session, watchdog or Watchdog(0)
        episodes, every = s.config.run.episodes, s.config.run.checkpoint_every
        max_epochs = s.envs[0].max_epochs
        while s.outer < episodes:
            with w.watching(f"the start of episode {s.outer}"):
                w.phase = "the envs' reset and the policy's reset"
                observations = s.start_episodes()
            while s.epoch < max_epochs:
                with w.watching(_unit(s, "epoch")):
                    observations = play_epoch(s, observations, watchdog=w)
                s.stop_if_requested(stop, "episode")
                if every and s.epoch % every == 0 and s.epoch < max_epochs:
                    s.checkpoint()
            s.outer, s.epoch = s.outer + 1, 0
            s.checkpoint()


class TrainLoop:
    """``train.updates`` updates of a trainable policy, each learning from a rollout of
    ``episodes_per_update`` episodes of every env (the policy says how many; 1 by
    default); a greedy evaluation before the first update and every
    ``train.eval_every`` updates (:mod:`esper_core.run.evaluation`); a checkpoint every
    ``train.checkpoint_every`` updates and after the last. Advantages and the learning
    rule live in the policy (e.g. GAE and PPO)."""

    mode: ClassVar[str] = "train"

    def __init__(self, session: Session, share_epochs: bool = True) -> None:
        # open_session refused it already in train mode; a session opened to run is not.
        check_trainable(type(session.policy), session.config.run.policy)
        self.session = session
        group = session.config.train.seed_group
        # share_epochs=False trains every env on its own (the same results, more work):
        # for timing the sharing, or checking it.
        if share_epochs and group > 1 and session.ranks is None:
            session.shared = SharedEpochs.of(len(session.envs), group)
        self._watchdog = Watchdog(0)  # run()'s, so that _evaluate is watched too

    def run(self, stop: StopFlag, watchdog: Watchdog | None = None) -> None:
        s, w = self.session, watchdog or Watchdog(0)
        self._watchdog = w
        policy = s.policy
        updates, every = s.config.train.updates, s.config.train.checkpoint_every
        max_epochs, rounds = s.envs[0].max_epochs, s.episodes_per_update
        policy.set_training(True)
        self._evaluate()
        while s.outer < updates:
            # 1. Collect a rollout: `rounds` episodes of every env (a resumed one continues
            # mid-rollout, mid-episode).
            while s.rollout_episode < rounds:
                fresh = s.epoch == 0 and s.rollout_episode == 0
                with w.watching(
                    f"the start of rollout episode {s.rollout_episode} of update {s.outer}"
                ):
                    w.phase = "the envs' reset and the policy's reset"
                    observations = s.start_episodes()
                    if s.shared is not None and s.epoch == 0:
                        s.shared.restart(s.envs)
                    if fresh:
                        w.phase = "the policy's begin_rollout"
                        policy.begin_rollout(observations)
                while s.epoch < max_epochs:
                    with w.watching(_unit(s, "epoch")):
                        observations = play_epoch(s, observations, update=s.outer, watchdog=w)
                    s.stop_if_requested(stop, "update")
                s.rollout_episode, s.epoch = s.rollout_episode + 1, 0
            # 2. Learn from it.
            with w.watching(f"update {s.outer}"):
                w.phase = "the policy's update"
                diagnostics = dict(policy.update(observations))
            s.updates.append(diagnostics)
            # 3. Log, evaluate and checkpoint.
            s.hub.emit([PolicyUpdate(update=s.outer, diagnostics=dict(diagnostics))])
            s.hub.flush()
            s.outer, s.rollout_episode = s.outer + 1, 0
            self._evaluate()
            if s.outer % every == 0 or s.outer == updates:
                s.checkpoint()

    def _evaluate(self) -> None:
        s = self.session
        if not evaluation.due(s):
            return
        w = self._watchdog
        s.policy.set_training(False)
        try:
            with w.watching(f"the evaluation after update {s.outer}"):
                w.phase = "the greedy evaluation"
                events = evaluation.evaluate(s)
        finally:
            s.policy.set_training(True)
        s.hub.emit(events)
        s.hub.flush()
