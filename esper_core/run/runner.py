"""The library API behind the CLI: resolve components, run episodes, train policies.

``run`` evaluates a policy for ``run.episodes`` episodes of ``run.n_envs`` envs;
``train`` drives a :class:`~esper_core.components.policy.Trainable` policy for ``train.updates``
rollouts. Both write the run directory of DESIGN.md and can be resumed from their
checkpoint with identical results (same seed, CPU).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
from attrs import define, frozen

from esper_core import __version__
from esper_core.config import RunConfig, config_to_dict, dump_toml
from esper_core.converter import structure, unstructure
from esper_core.errors import ConfigError, EsperError, RunDirError
from esper_core.plugins import PluginManager
from esper_core.run.checkpoint import load_checkpoint, save_checkpoint, write_json, write_text
from esper_core.run.ledger import SeedLedger
from esper_core.run.telemetry import (
    EpisodeFinished,
    Event,
    Hub,
    PolicyUpdate,
    RunFinished,
    RunStarted,
)

CHECKPOINT = "checkpoint.pt"
SUMMARY = "summary.json"
CONFIG = "config.toml"


class Interrupted(EsperError):
    """The user interrupted the run; a checkpoint was written."""


# ---------------------------------------------------------------- component resolution


@frozen
class PolicyRef:
    name: str
    argument: str | None = None

    @classmethod
    def parse(cls, text: str) -> PolicyRef:
        name, sep, arg = text.partition(":")
        return cls(name.strip(), arg.strip() if sep else None)


@frozen
class Component:
    cls: Any
    options: Any
    plugin: str


@define
class Resolved:
    """The components a config names, with their options validated."""

    config: RunConfig
    task: Component
    reward: Component
    policy: Component
    policy_ref: PolicyRef
    executor: Component
    telemetry: list[Component]
    blueprints: list[Any]

    def make_task(self) -> Any:
        return self.task.cls(self.task.options)


def _component(
    pm: PluginManager, kind: str, name: str, config: RunConfig, problems: list[str]
) -> Component | None:
    registry = pm.registry(kind)
    cls = registry.get(name)  # an unknown name fails here, listing what is available
    try:
        options = structure(
            config.component_options(kind, name), cls.Options, path=f"{kind}.{name}"
        )
    except ConfigError as exc:
        problems.extend(exc.problems)
        return None
    return Component(cls, options, registry.plugin_of(name))


def resolve(config: RunConfig, pm: PluginManager) -> Resolved:
    """Look up every component and validate its options; fill in their defaults."""
    problems: list[str] = []
    ref = PolicyRef.parse(config.run.policy)
    task = _component(pm, "tasks", config.run.task, config, problems)
    reward = _component(pm, "rewards", config.run.reward, config, problems)
    policy = _component(pm, "policies", ref.name, config, problems)
    executor = _component(pm, "executors", config.run.executor, config, problems)
    telemetry = [
        _component(pm, "telemetry", name, config, problems)
        for name in dict.fromkeys(config.run.telemetry)
    ]
    if problems:
        raise ConfigError(problems)
    assert task and reward and policy and executor
    filled = attrs.evolve(
        config,
        tasks={**config.tasks, config.run.task: unstructure(task.options)},
        rewards={**config.rewards, config.run.reward: unstructure(reward.options)},
        policies={**config.policies, ref.name: unstructure(policy.options)},
        executors={**config.executors, config.run.executor: unstructure(executor.options)},
        telemetry={
            **config.telemetry,
            **{
                name: unstructure(c.options)
                for name, c in zip(dict.fromkeys(config.run.telemetry), telemetry)
                if c
            },
        },
    )
    task_topology = getattr(task.cls, "topology", None)
    blueprints = pm.blueprints_for(task_topology) if task_topology else []
    return Resolved(
        config=filled,
        task=task,
        reward=reward,
        policy=policy,
        policy_ref=ref,
        executor=executor,
        telemetry=[c for c in telemetry if c],
        blueprints=blueprints,
    )


# ---------------------------------------------------------------- run directories


def default_run_dir(config: RunConfig, mode: str) -> Path:
    if config.run.name:
        return Path(config.run.out_dir) / config.run.name
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    policy = PolicyRef.parse(config.run.policy).name
    return Path(config.run.out_dir) / f"{config.run.task}-{policy}-{mode}-{stamp}"


def prepare_run_dir(path: Path, config: RunConfig, resume: bool) -> None:
    if resume:
        if not (path / CHECKPOINT).is_file():
            raise RunDirError(f"cannot resume {path}: it has no {CHECKPOINT}")
        # A process killed mid-write leaves its temporary file; the target itself is intact.
        for stale in path.glob(".*.tmp"):
            stale.unlink()
        return
    if path.exists() and ((path / CHECKPOINT).exists() or (path / SUMMARY).exists()):
        raise RunDirError(
            f"{path} already holds a run; resume it with --resume {path}, or choose another --out"
        )
    path.mkdir(parents=True, exist_ok=True)
    write_text(path / CONFIG, dump_toml(config))


def load_run_config(path: Path) -> RunConfig:
    from esper_core.config import load_config

    if not (path / CONFIG).is_file():
        raise RunDirError(f"{path} is not a run directory: {CONFIG} is missing")
    return load_config(path / CONFIG)


# ---------------------------------------------------------------- interrupts


class StopFlag:
    """Set by the first Ctrl-C: the loop stops at the next epoch boundary and checkpoints.
    A second Ctrl-C interrupts at once."""

    def __init__(self) -> None:
        self.requested = False

    @contextlib.contextmanager
    def installed(self, notify: Callable[[str], None]) -> Iterator[StopFlag]:
        if threading.current_thread() is not threading.main_thread():
            yield self
            return

        def handler(signum: int, frame: Any) -> None:
            if self.requested:
                raise KeyboardInterrupt
            self.requested = True
            notify(
                "Interrupt received: finishing this epoch, then writing a checkpoint (Ctrl-C again to abort)."
            )

        previous = signal.signal(signal.SIGINT, handler)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous)


# ---------------------------------------------------------------- the loop


@define
class Session:
    """Everything a running experiment holds; shared by ``run`` and ``train``."""

    resolved: Resolved
    mode: str
    run_dir: Path
    envs: list[Any]
    policy: Any
    executor: Any
    hub: Hub
    ledger: SeedLedger = attrs.field(factory=SeedLedger)
    episodes: list[dict[str, Any]] = attrs.field(factory=list)
    updates: list[dict[str, float]] = attrs.field(factory=list)
    outer: int = 0  # episode (run) or update (train) in progress
    epoch: int = 0  # epochs done in it
    started: float = attrs.field(factory=time.time)
    elapsed_before: float = 0.0
    last_observations: list[Any] = attrs.field(factory=list)

    @property
    def config(self) -> RunConfig:
        return self.resolved.config

    @property
    def ranks(self) -> Any:
        """The executor when it spreads envs over processes (see MultiProcessExecutor), else None."""
        from esper_core.run.executor import MultiProcessExecutor

        return self.executor if isinstance(self.executor, MultiProcessExecutor) else None

    @property
    def writer(self) -> bool:
        """Whether this process writes the run directory (only rank 0 of a multi-process run)."""
        ranks = self.ranks
        return True if ranks is None else bool(ranks.is_writer)

    def reset_envs(self) -> list[Any]:
        seeds = [self.env_seed(self.outer, i) for i in range(len(self.envs))]
        if self.ranks is not None:
            return list(self.ranks.reset_envs(self.envs, seeds, self.outer))
        return [env.reset(seed, self.outer) for env, seed in zip(self.envs, seeds)]

    def stop_requested(self, stop: StopFlag) -> bool:
        # Every rank must stop (and checkpoint) at the same epoch.
        return stop.requested if self.ranks is None else bool(self.ranks.any_rank(stop.requested))

    def env_seed(self, outer: int, env_index: int) -> int:
        """Env i of episode/update k uses seed + k * n_envs + i: same seed, same data and host."""
        return self.config.run.seed + outer * len(self.envs) + env_index

    def emit(self, events: Sequence[Event]) -> None:
        self.ledger.consume(events)
        for event in events:
            if isinstance(event, EpisodeFinished):
                self.episodes.append(unstructure(event))
        self.hub.emit(events)

    def checkpoint(self) -> None:
        env_states = (
            [env.state_dict() for env in self.envs]
            if self.ranks is None
            else self.ranks.env_states(self.envs)
        )
        if not self.writer:
            return
        payload = {
            "mode": self.mode,
            "outer": self.outer,
            "epoch": self.epoch,
            "envs": env_states,
            "policy": self.policy.state_dict(),
            "telemetry": self.hub.state_dict(),
            "ledger": self.ledger.state_dict(),
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
        save_checkpoint(self.run_dir / CHECKPOINT, payload, metadata)

    def restore(self, data: dict[str, Any]) -> None:
        if data.get("mode") != self.mode:
            raise RunDirError(
                f"{self.run_dir} was written by `esper {data.get('mode')}`; resume it with that command"
            )
        self.outer, self.epoch = int(data["outer"]), int(data["epoch"])
        if self.epoch > 0:
            for env, state in zip(self.envs, data["envs"], strict=True):
                env.load_state_dict(state)
        self.policy.load_state_dict(data["policy"])
        self.hub.load_state_dict(data["telemetry"])
        self.ledger.load_state_dict(data["ledger"])
        self.episodes = list(data["episodes"])
        self.updates = list(data["updates"])
        self.elapsed_before = float(data["elapsed"])


def _make_policy_context(resolved: Resolved, envs: Sequence[Any], total_updates: int) -> Any:
    from esper_core.components.policy import PolicyContext
    from esper_core.env.observation import feature_dim

    env0 = envs[0]
    cfg = resolved.config
    return PolicyContext(
        space=env0.space,
        feature_dim=feature_dim(env0.space, cfg.env.history_length),
        history_length=cfg.env.history_length,
        max_epochs=env0.max_epochs,
        n_envs=len(envs),
        task=cfg.run.task,
        topology=env0.task.topology,
        gamma=cfg.run.gamma,
        seed=cfg.run.seed,
        device=cfg.run.device,
        total_updates=total_updates,
        argument=resolved.policy_ref.argument,
    )


def open_session(
    config: RunConfig,
    pm: PluginManager,
    mode: str,
    run_dir: Path | None,
    resume: bool,
    quiet: bool = False,
) -> Session:
    import torch

    from esper_core.env.env import MorphogeneticEnv
    from esper_core.run.executor import MultiProcessExecutor

    resolved = resolve(config, pm)
    config = resolved.config
    if config.run.threads:
        torch.set_num_threads(config.run.threads)
    path = run_dir or default_run_dir(config, mode)
    executor = resolved.executor.cls(resolved.executor.options, config)
    ranks = executor if isinstance(executor, MultiProcessExecutor) else None
    writer = ranks is None or bool(ranks.is_writer)
    if writer:
        prepare_run_dir(path, config, resume)
    elif resume and not (path / CHECKPOINT).is_file():
        raise RunDirError(
            f"cannot resume {path}: it has no {CHECKPOINT} (every rank must see the run directory)"
        )
    task = resolved.make_task()
    devices = executor.env_devices(config.run.n_envs)
    envs = [
        MorphogeneticEnv(
            task,
            resolved.reward.cls(resolved.reward.options, gamma=config.run.gamma),
            resolved.blueprints,
            config,
            i,
            devices[i],
        )
        for i in range(config.run.n_envs)
    ]
    total_updates = config.train.updates if mode == "train" else 0
    policy = resolved.policy.cls(
        resolved.policy.options, _make_policy_context(resolved, envs, total_updates)
    )
    backends = (
        [
            c.cls(c.options, run_dir=path, quiet=quiet or config.run.quiet)
            for c in resolved.telemetry
        ]
        if writer
        else []
    )
    session = Session(resolved, mode, path, envs, policy, executor, Hub(backends))
    if resume:
        session.restore(load_checkpoint(path / CHECKPOINT))
    else:
        session.hub.emit(
            [
                RunStarted(
                    run_name=path.name,
                    run_dir=str(path),
                    mode=mode,
                    task=config.run.task,
                    policy=config.run.policy,
                    reward=config.run.reward,
                    executor=config.run.executor,
                    n_envs=config.run.n_envs,
                    episodes=config.run.episodes if mode == "run" else total_updates,
                    max_epochs=envs[0].max_epochs,
                    slot_ids=list(envs[0].space.slot_ids),
                    host_params=envs[0].model.host_param_count(),
                    config=config_to_dict(config),
                    esper_version=__version__,
                )
            ]
        )
    if ranks is not None:  # after a restore, so every rank continues from the same policy
        ranks.bind_policy(policy, training=mode == "train")
    return session


def _epoch_loop(
    session: Session, stop: StopFlag, outer_count: int, after_outer: Callable[[], None]
) -> None:
    """Episodes (or rollouts) of every env, epoch by epoch, with checkpoints and interrupts."""
    cfg = session.config
    envs, policy, executor = session.envs, session.policy, session.executor
    max_epochs = envs[0].max_epochs
    while session.outer < outer_count:
        if session.epoch == 0:
            observations = session.reset_envs()
            policy.reset(list(range(len(envs))))
            if session.mode == "train":
                policy.begin_rollout(observations)
        else:
            observations = [env.observation for env in envs]
        while session.epoch < max_epochs:
            actions = policy.act(observations)
            results = executor.step(envs, actions)
            policy.observe(results)
            session.epoch += 1
            events: list[Event] = []
            for result in results:
                events.extend(result.events)
            if session.mode == "train":
                # Epoch and episode events of a training run say which update they belong to.
                tag: dict[str, Any] = {"update": session.outer}
                events = [attrs.evolve(e, **tag) if hasattr(e, "update") else e for e in events]
            session.emit(events)
            session.hub.flush()
            observations = [r.observation for r in results]
            every = cfg.run.checkpoint_every
            if session.stop_requested(stop):
                session.checkpoint()
                raise Interrupted(
                    f"interrupted at {'episode' if session.mode == 'run' else 'update'} {session.outer} "
                    f"epoch {session.epoch}; checkpoint written to {session.run_dir / CHECKPOINT}. "
                    f"Resume with: esper {session.mode} --resume {session.run_dir}"
                )
            if (
                session.mode == "run"
                and every
                and session.epoch % every == 0
                and session.epoch < max_epochs
            ):
                session.checkpoint()
        session.last_observations = observations
        after_outer()
        session.outer += 1
        session.epoch = 0
        if (
            session.mode == "run"
            or session.outer % cfg.train.checkpoint_every == 0
            or session.outer == outer_count
        ):
            session.checkpoint()


def _finish(session: Session, status: str) -> dict[str, Any]:
    summary = build_summary(session, status)
    if session.writer:
        write_json(session.run_dir / SUMMARY, summary)
    session.hub.emit([RunFinished(status=status, wall_time=summary["wall_time"], summary=summary)])
    return summary


def build_summary(session: Session, status: str) -> dict[str, Any]:
    import statistics

    cfg = session.config
    episodes = session.episodes
    final_tests = [e["final_test_acc"] for e in episodes if e["final_test_acc"] is not None]
    totals: dict[str, float] = {}
    for e in episodes:
        for key, value in e["reward_components"].items():
            totals[key] = totals.get(key, 0.0) + value
    return {
        "run_name": session.run_dir.name,
        "mode": session.mode,
        "status": status,
        "task": cfg.run.task,
        "policy": cfg.run.policy,
        "reward": cfg.run.reward,
        "seed": cfg.run.seed,
        "n_envs": len(session.envs),
        "episodes_completed": len(episodes),
        "final_test_acc_mean": statistics.fmean(final_tests) if final_tests else None,
        "final_val_acc_mean": statistics.fmean([e["final_val_acc"] for e in episodes])
        if episodes
        else None,
        "params_added_mean": statistics.fmean([e["params_added"] for e in episodes])
        if episodes
        else None,
        "host_params": session.envs[0].model.host_param_count() if session.envs else None,
        "seeds_fossilized": sum(e["seeds_fossilized"] for e in episodes),
        "seeds_pruned": sum(e["seeds_pruned"] for e in episodes),
        "rollbacks": sum(e["rollbacks"] for e in episodes),
        "refused_actions": sum(e["refused_actions"] for e in episodes),
        "reward_components": totals,
        "episodes": [{k: v for k, v in e.items() if k != "time"} for e in episodes],
        "seeds": session.ledger.state_dict(),
        "updates": session.updates,
        "wall_time": session.elapsed_before + time.time() - session.started,
    }


def _close(session: Session) -> None:
    session.hub.close()
    session.executor.close()


@contextlib.contextmanager
def explained_failures(pm: PluginManager, run_dir: Path | None, mode: str) -> Iterator[None]:
    """Out-of-memory, dead workers, full disks and plugin exceptions become one clear
    :class:`EsperError` naming the cause and the last checkpoint; bugs keep their traceback."""
    from esper_core.run.failures import explain, plugin_modules

    try:
        yield
    except Exception as exc:
        explained = explain(exc, plugin_modules(pm), run_dir, mode)
        if explained is None:
            raise
        raise explained from exc


def run(
    config: RunConfig,
    pm: PluginManager,
    *,
    run_dir: Path | None = None,
    resume: bool = False,
    quiet: bool = False,
    notify: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run ``run.episodes`` episodes of ``run.n_envs`` envs under the configured policy."""
    return _execute("run", config, pm, run_dir, resume, quiet, notify)


def train(
    config: RunConfig,
    pm: PluginManager,
    *,
    run_dir: Path | None = None,
    resume: bool = False,
    quiet: bool = False,
    notify: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Train a Trainable policy for ``train.updates`` rollouts (each one episode of every env)."""
    return _execute("train", config, pm, run_dir, resume, quiet, notify)


def _execute(
    mode: str,
    config: RunConfig,
    pm: PluginManager,
    run_dir: Path | None,
    resume: bool,
    quiet: bool,
    notify: Callable[[str], None],
) -> dict[str, Any]:
    from esper_core.components.policy import Trainable

    run_dir = run_dir or default_run_dir(config, mode)
    with explained_failures(pm, run_dir, mode):
        session = open_session(config, pm, mode, run_dir, resume, quiet)
        outer_count = config.run.episodes
        if mode == "train":
            if not isinstance(session.policy, Trainable):
                _close(session)
                raise ConfigError(
                    [f"run.policy: {config.run.policy!r} is not trainable; try --policy ppo"]
                )
            session.policy.set_training(True)
            outer_count = config.train.updates

        def after_outer() -> None:
            """A training run learns from each finished rollout; evaluation runs do nothing."""
            if mode != "train":
                return
            diagnostics = session.policy.update(session.last_observations)
            session.updates.append(dict(diagnostics))
            session.hub.emit([PolicyUpdate(update=session.outer, diagnostics=dict(diagnostics))])
            session.hub.flush()

        stop = StopFlag()
        status = "failed"
        try:
            with stop.installed(notify):
                _epoch_loop(session, stop, outer_count, after_outer)
            status = "completed"
            return _finish(session, status)
        except Interrupted:
            status = "interrupted"
            raise
        finally:
            if status != "completed":
                session.hub.emit(
                    [RunFinished(status=status, wall_time=time.time() - session.started)]
                )
            _close(session)


def compare(*args: Any, **kwargs: Any) -> Any:
    """Policies x tasks x seeds with IQM and bootstrap intervals: see :func:`esper_core.compare.comparison.compare`."""
    from esper_core.compare.comparison import compare as run_comparison

    return run_comparison(*args, **kwargs)
