"""The session shared by ``esper run`` and ``esper train``: envs, policy, executor,
telemetry hub and seed ledger, with the checkpoint that saves and restores all of them."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
from attrs import define

from esper_core import __version__
from esper_core.components.executor import MultiProcessExecutor
from esper_core.components.policy import check_trainable
from esper_core.config import RunConfig, config_to_dict, dump_toml
from esper_core.converter import unstructure
from esper_core.errors import CheckpointError, ConfigError, RunDirError
from esper_core.plugins import PluginManager
from esper_core.run.checkpoint import DiskFullError, save_checkpoint, write_text
from esper_core.run.checkpoint_fields import check_progress
from esper_core.run.devices import check_devices
from esper_core.run.env_builders import fit_envs_to_policy, paired_builder, task_builder
from esper_core.run.hub import Hub
from esper_core.run.interrupts import Interrupted, StopFlag
from esper_core.run.ledger import HostGrowthLedger, SeedLedger
from esper_core.run.lock import RunDirLock
from esper_core.run.resolve import Resolved, resolve
from esper_core.run.resume_check import SavedCheckpoint, verify_resume
from esper_core.run.run_dir import (
    CHECKPOINT,
    CONFIG,
    default_run_dir,
    lock_run_dir,
    run_file,
    write_run_config,
)
from esper_core.run.shared_epochs import SharedEpochs
from esper_core.run.telemetry import EpisodeFinished, Event, RunStarted

if TYPE_CHECKING:
    from esper_core.env.observation import Observation
    from esper_core.env.step import StepResult


@define
class Session:
    """Everything a running experiment holds, and where its loop has got to."""

    resolved: Resolved
    mode: str  # the command that owns the run directory: "run" or "train"
    run_dir: Path
    envs: list[Any]
    policy: Any
    executor: Any
    hub: Hub
    ledger: SeedLedger = attrs.field(factory=SeedLedger)
    growth_ledger: HostGrowthLedger = attrs.field(factory=HostGrowthLedger)
    episodes: list[dict[str, Any]] = attrs.field(factory=list)
    updates: list[dict[str, float]] = attrs.field(factory=list)
    outer: int = 0  # episode (run) or update (train) in progress
    epoch: int = 0  # epochs done in it
    rollout_episode: int = 0  # training: episodes of every env done in this rollout
    evaluations: list[dict[str, Any]] = attrs.field(factory=list)  # training: greedy evaluations
    eval_envs: list[Any] = attrs.field(factory=list)  # built by run.evaluation when first due
    plugins: PluginManager | None = None  # where reference policies are looked up
    build_env: Callable[[int], Any] | None = None  # env i as the run builds it (evaluation's)
    started: float = attrs.field(factory=time.time)
    elapsed_before: float = 0.0
    lock: RunDirLock | None = None  # held by the writing process until close()
    # Training with seed groups: which envs take another's epochs (esper_core.run.shared_epochs).
    shared: SharedEpochs | None = None

    @property
    def config(self) -> RunConfig:
        return self.resolved.config

    @property
    def ranks(self) -> MultiProcessExecutor | None:
        """The executor when it spreads envs over processes, else None."""
        return self.executor if isinstance(self.executor, MultiProcessExecutor) else None

    @property
    def writer(self) -> bool:
        """Whether this process writes the run directory (only rank 0 of a multi-process run)."""
        ranks = self.ranks
        return True if ranks is None else bool(ranks.is_writer)

    @property
    def episodes_per_update(self) -> int:
        """Episodes of every env in one rollout: the trainable policy's
        ``episodes_per_update`` (1 for ``esper run`` and for policies without one)."""
        return int(getattr(self.policy, "episodes_per_update", 1)) if self.mode == "train" else 1

    @property
    def episode_index(self) -> int:
        """The index of the episodes in progress: episode k of a run; in training, rollout episode j
        of update k is episode k * episodes_per_update + j."""
        return self.outer * self.episodes_per_update + self.rollout_episode

    def env_seed(self, episode: int, env_index: int) -> int:
        """Env i of episode k uses seed + k * n_envs + i: same seed, same data and host.
        In training, envs share seeds in groups of ``train.seed_group``: env i of episode
        k uses seed + k * (n_envs / g) + i // g, consecutive, so a mixed run's groups
        still cycle through its pairs."""
        group = self.config.train.seed_group if self.mode == "train" else 1
        return self.config.run.seed + episode * (len(self.envs) // group) + env_index // group

    def reset_envs(self) -> list[Observation]:
        episode = self.episode_index
        seeds = [self.env_seed(episode, i) for i in range(len(self.envs))]
        if self.ranks is not None:
            return list(self.ranks.reset_envs(self.envs, seeds, episode))
        return [env.reset(seed, episode) for env, seed in zip(self.envs, seeds)]

    def start_episodes(self) -> list[Observation]:
        """What the next epoch acts on: at epoch 0 every env is reset and the policy forgets
        its per-episode memory; a session resumed mid-episode continues where it stopped."""
        if self.epoch > 0:
            if self.ranks is not None:  # other ranks' envs: their owners have the observations
                return list(self.ranks.observations(self.envs))
            return [env.observation for env in self.envs]
        observations = self.reset_envs()
        self.policy.reset(list(range(len(self.envs))))
        return observations

    def emit(self, events: Sequence[Event]) -> None:
        events = [self._with_pair(self._with_growth_note(event)) for event in events]
        self.ledger.consume(events)
        self.growth_ledger.consume(events)
        for event in events:
            if isinstance(event, EpisodeFinished):
                self.episodes.append(unstructure(event))
        self.hub.emit(events)

    def _with_pair(self, event: Event) -> Event:
        """A mixed run's episode says which pair it ran (before that env draws its next)."""
        if not isinstance(event, EpisodeFinished) or not self.config.train.pairs:
            return event
        return attrs.evolve(event, pair=self.envs[event.env].pair_label)

    def _with_growth_note(self, event: Event) -> Event:
        """An episode that germinated nothing says why, when its policy can tell (before
        the policy resets that env's memory for the next episode)."""
        why = getattr(self.policy, "why_no_growth", None)
        if not isinstance(event, EpisodeFinished) or event.seeds_germinated or why is None:
            return event
        return attrs.evolve(event, growth_note=why(event.env))

    def emit_epoch(self, results: Sequence[StepResult], update: int | None = None) -> None:
        """The events of one epoch of every env, then a flush of the backends. In a training
        run the epoch and episode events say which ``update`` they belong to."""
        events: list[Event] = [event for result in results for event in result.events]
        if update is not None:
            tag: dict[str, Any] = {"update": update}  # only some event classes have the field
            events = [attrs.evolve(e, **tag) if hasattr(e, "update") else e for e in events]
        self.emit(events)
        self.hub.flush()

    def stop_if_requested(self, stop: StopFlag, unit: str) -> None:
        """After a Ctrl-C, checkpoint at this epoch boundary and raise :class:`Interrupted`."""
        # Every rank must stop (and checkpoint) at the same epoch.
        requested = (
            stop.requested if self.ranks is None else bool(self.ranks.any_rank(stop.requested))
        )
        if not requested:
            return
        self.checkpoint()
        raise Interrupted(
            f"interrupted at {unit} {self.outer} epoch {self.epoch}; checkpoint written to "
            f"{self.run_dir / CHECKPOINT}. Resume with: esper {self.mode} --resume {self.run_dir}"
        )

    def checkpoint(self) -> None:
        if self.ranks is not None:
            env_states = self.ranks.env_states(self.envs)
        else:
            env_states = (
                [env.state_dict() for env in self.envs]
                if self.shared is None
                else self.shared.states(self.envs)
            )
        if not self.writer:
            return
        payload = {
            "mode": self.mode,
            "outer": self.outer,
            "epoch": self.epoch,
            "config": config_to_dict(self.config),
            "rollout_episode": self.rollout_episode,
            "evaluations": self.evaluations,
            "envs": env_states,
            "policy": self.policy.state_dict(),
            "telemetry": self.hub.state_dict(),
            "ledger": self.ledger.state_dict(),
            "host_growths": self.growth_ledger.state_dict(),
            "episodes": self.episodes,
            "updates": self.updates,
            "elapsed": self.elapsed_before + time.time() - self.started,
        }
        metadata = {
            "esper_version": __version__,
            "mode": self.mode,
            "outer": self.outer,
            "epoch": self.epoch,
            "task": self.config.run.task,
            "policy": self.config.run.policy,
            "slot_ids": list(self.envs[0].space.slot_ids),
            "blueprints": list(self.envs[0].space.blueprints),
            "written": dt.datetime.now().isoformat(timespec="seconds"),
        }
        target = run_file(self.run_dir, CHECKPOINT)
        try:
            save_checkpoint(target, payload, metadata)
        except DiskFullError as exc:
            then = (
                f"and resume the run: esper {self.mode} --resume {self.run_dir}"
                if self.hub.resumable
                else "and start the run again: no checkpoint was written before this one"
            )
            raise DiskFullError(f"{exc} {then}") from exc
        self.hub.resumable = True

    def restore(self, data: dict[str, Any]) -> None:
        """Continue from a checkpoint of this run; refuse one this run cannot continue."""
        path = self.run_dir / CHECKPOINT
        changed = verify_resume(data, config_to_dict(self.config), self.mode, path, self.plugins)
        check_progress(data, path, self.envs[0].max_epochs, self.episodes_per_update)
        done = int(data["outer"])
        if changed and self.writer:
            # The run was lengthened (or shortened): its config.toml records the new length.
            write_text(run_file(self.run_dir, CONFIG), dump_toml(self.config))
        self.outer, self.epoch = done, int(data["epoch"])
        self.rollout_episode = int(data.get("rollout_episode", 0))
        self.evaluations = list(data.get("evaluations", []))
        try:
            if self.epoch > 0:
                for env, state in zip(self.envs, data["envs"], strict=True):
                    env.load_state_dict(state)
            self.policy.load_state_dict(data["policy"])
        except (RuntimeError, KeyError, ValueError, TypeError, IndexError) as exc:
            # Same config, yet the state does not fit: a plugin changed what it builds.
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise CheckpointError(
                f"checkpoint {path} does not fit the components this run builds "
                f"({type(exc).__name__}: {first}); were the plugins upgraded since it was written?"
            ) from None
        self.hub.load_state_dict(data["telemetry"])
        self.hub.resumable = True
        self.ledger.load_state_dict(data["ledger"])
        # Checkpoints written before host growths had events have none.
        self.growth_ledger.load_state_dict(data.get("host_growths", []))
        self.episodes = list(data["episodes"])
        self.updates = list(data["updates"])
        self.elapsed_before = float(data["elapsed"])

    def close(self) -> None:
        try:
            self.hub.close()
        finally:
            try:
                self.executor.close()
            finally:
                if self.lock is not None:
                    self.lock.release()


def check_seed_group(config: RunConfig) -> None:
    """``train.seed_group`` must split the envs into whole groups."""
    group, n_envs = config.train.seed_group, config.run.n_envs
    if n_envs % group:
        raise ConfigError(
            [
                f"train.seed_group = {group} does not divide run.n_envs = {n_envs}: envs share "
                "seeds in whole groups; set --envs to a multiple of it"
            ]
        )


def open_session(
    config: RunConfig,
    pm: PluginManager,
    mode: str,
    run_dir: Path | None,
    resume: bool,
    quiet: bool = False,
) -> Session:
    """Resolve and build every component, prepare (or resume) the run directory."""
    import torch

    resolved = resolve(config, pm)
    config = resolved.config
    if mode == "train":  # before the task, the envs and the run directory are built
        check_trainable(resolved.policy.cls, config.run.policy)
        check_seed_group(config)
    check_devices(config)
    if config.run.threads:
        torch.set_num_threads(config.run.threads)
    path = run_dir or default_run_dir(config, mode)
    # A resumed run's config names code (a task's data and model functions, plugin
    # components): it is held against the checkpoint before anything it names is built,
    # so an edited config.toml is refused instead of run.
    saved = _verified_checkpoint(path, config, mode, pm) if resume else None
    executor = resolved.make_executor()
    ranks = executor if isinstance(executor, MultiProcessExecutor) else None
    writer = ranks is None or bool(ranks.is_writer)
    # The envs and the policy are built before the run directory is: a setting only they
    # can check (an unknown slot id, a missing checkpoint) fails without leaving a stub.
    devices = executor.env_devices(config.run.n_envs)
    build: Callable[[int], Any] = (
        paired_builder(config, pm, devices, quiet)  # a host/task pair drawn per episode
        if mode == "train" and config.train.pairs
        else task_builder(resolved, devices, quiet)
    )

    n_envs = config.run.n_envs
    # A multi-process executor builds only its rank's envs (the others are stand-ins).
    envs = (
        ranks.build_envs(n_envs, build) if ranks is not None else [build(i) for i in range(n_envs)]
    )
    training = mode == "train"
    total_updates = config.train.updates if training else 0
    policy = resolved.make_policy(envs, total_updates)
    fit_envs_to_policy(envs, policy)
    lock = lock_run_dir(path, resume) if writer else None
    try:
        # The backends name their files before config.toml is written: a new run whose
        # --out already holds one of them is refused with the directory as it was.
        backends = resolved.make_telemetry(path, quiet, new_run=not resume) if writer else []
        if writer and not resume:
            write_run_config(path, config)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    session = Session(
        resolved,
        mode,
        path,
        envs,
        policy,
        executor,
        Hub(backends),
        lock=lock,
        plugins=pm,
        build_env=build,
    )
    try:
        if saved is not None:
            session.restore(saved.current())
        else:
            session.hub.emit([_run_started(session, total_updates if training else None)])
        if ranks is not None:  # after a restore, so every rank continues from the same policy
            ranks.bind_policy(policy, training=training)
    except BaseException:
        session.close()
        raise
    return session


def _verified_checkpoint(
    path: Path, config: RunConfig, mode: str, pm: PluginManager
) -> SavedCheckpoint:
    if not (path / CHECKPOINT).is_file():
        raise RunDirError(f"cannot resume {path}: it has no {CHECKPOINT}")
    saved = SavedCheckpoint.load(path / CHECKPOINT)
    verify_resume(saved.data, config_to_dict(config), mode, path / CHECKPOINT, pm)
    return saved


def _run_started(session: Session, total_updates: int | None) -> RunStarted:
    config, env = session.config, session.envs[0]
    return RunStarted(
        run_name=session.run_dir.name,
        run_dir=str(session.run_dir),
        mode=session.mode,
        task=config.run.task,
        policy=config.run.policy,
        reward=config.run.reward,
        executor=config.run.executor,
        n_envs=config.run.n_envs,
        episodes=config.run.episodes if total_updates is None else total_updates,
        max_epochs=env.max_epochs,
        slot_ids=list(env.space.slot_ids),
        host_params=env.host_params,
        config=config_to_dict(config),
        esper_version=__version__,
        episodes_per_update=session.episodes_per_update,
    )
