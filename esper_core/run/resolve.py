"""Resolve the components a config names, validate their options, and build them.

Every component is constructed the same way, ``cls(options, context)``; this module is
the one place that derives each kind's context from the run's config.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
from attrs import define, frozen

from esper_core.components.executor import ExecutorContext
from esper_core.components.policy import PolicyContext
from esper_core.components.reward import RewardSetup
from esper_core.components.task import TaskContext
from esper_core.components.telemetry import TelemetryContext
from esper_core.config import RunConfig
from esper_core.converter import structure, unstructure
from esper_core.errors import ConfigError, EsperError
from esper_core.lifecycle.blueprint_check import checked_blueprint
from esper_core.plugins import PluginManager
from esper_core.recipe import recipe_fields, resolve_recipe, task_recipe
from esper_core.run.policy_ref import PolicyRef

if TYPE_CHECKING:
    from esper_core.env.env import MorphogeneticEnv


@frozen
class Component:
    """A registered component class, its validated options and the plugin providing it."""

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
    operators: list[Any] = attrs.field(factory=list)  # the growth operators installed

    def make_task(self, quiet: bool = False) -> Any:
        return self.task.cls(self.task.options, task_context(self.config, quiet))

    def make_reward(self) -> Any:
        return self.reward.cls(self.reward.options, reward_setup(self.config))

    def make_executor(self) -> Any:
        return self.executor.cls(self.executor.options, executor_context(self.config))

    def policy_context(
        self, envs: Sequence[MorphogeneticEnv], total_updates: int = 0
    ) -> PolicyContext:
        return policy_context(
            self.config, envs, self.config.run.task, self.policy_ref.argument, total_updates
        )

    def make_policy(self, envs: Sequence[MorphogeneticEnv], total_updates: int = 0) -> Any:
        return self.policy.cls(self.policy.options, self.policy_context(envs, total_updates))

    def make_telemetry(
        self, run_dir: Path | None, quiet: bool = False, new_run: bool = False
    ) -> list[Any]:
        context = telemetry_context(self.config, run_dir, quiet, new_run)
        return [c.cls(c.options, context) for c in self.telemetry]


# ---------------------------------------------------------------- contexts from the config


def task_context(config: RunConfig, quiet: bool = False) -> TaskContext:
    return TaskContext(seed=config.run.seed, quiet=quiet or config.run.quiet)


def policy_context(
    config: RunConfig,
    envs: Sequence[MorphogeneticEnv],
    task: str,
    argument: str | None,
    total_updates: int = 0,
) -> PolicyContext:
    """What a policy acting on ``envs`` may know (the runner's envs, or a Grower's one)."""
    from esper_core.env.observation import feature_dim

    env0 = envs[0]
    return PolicyContext(
        space=env0.space,
        feature_dim=feature_dim(env0.space, config.env.history_length),
        history_length=config.env.history_length,
        max_epochs=env0.max_epochs,
        n_envs=len(envs),
        task=task,
        topology=env0.task.topology,
        gamma=config.run.gamma,
        seed=config.run.seed,
        device=config.run.device,
        total_updates=total_updates,
        argument=argument,
        seed_group=config.train.seed_group if total_updates else 1,
    )


def reward_setup(config: RunConfig) -> RewardSetup:
    return RewardSetup(gamma=config.run.gamma)


def executor_context(config: RunConfig) -> ExecutorContext:
    return ExecutorContext(device=config.run.device, devices=tuple(config.run.devices))


def telemetry_context(
    config: RunConfig, run_dir: Path | None, quiet: bool = False, new_run: bool = False
) -> TelemetryContext:
    return TelemetryContext(run_dir=run_dir, quiet=quiet or config.run.quiet, new_run=new_run)


# ---------------------------------------------------------------- resolution


def component(
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
    task = component(pm, "tasks", config.run.task, config, problems)
    reward = component(pm, "rewards", config.run.reward, config, problems)
    policy = component(pm, "policies", ref.name, config, problems)
    executor = component(pm, "executors", config.run.executor, config, problems)
    telemetry_names = list(dict.fromkeys(config.run.telemetry))
    telemetry = [component(pm, "telemetry", name, config, problems) for name in telemetry_names]
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
            **{name: unstructure(c.options) for name, c in zip(telemetry_names, telemetry) if c},
        },
    )
    blueprints = resolve_blueprints(pm, config, task_topology(task))
    # The run records the recipe it trains with, not "the task's default".
    recipe = resolve_recipe(config.training, task_recipe(task.cls, task_topology(task)))
    filled = attrs.evolve(
        filled,
        env=attrs.evolve(filled.env, blueprints=sorted(bp.key for bp in blueprints)),
        training=attrs.evolve(filled.training, **recipe_fields(recipe)),
    )
    return Resolved(
        config=filled,
        task=task,
        reward=reward,
        policy=policy,
        policy_ref=ref,
        executor=executor,
        telemetry=[c for c in telemetry if c],
        blueprints=blueprints,
        operators=resolve_operators(pm),
    )


def with_new_option_defaults(stored: RunConfig, pm: PluginManager) -> RunConfig:
    """``stored`` (the resolved config a run was made with) with the default of each option
    its components gained since: an option is added with a default that keeps what the
    code did before, so a run made before it is what that default makes. Options stored
    are kept as they are, and so are the blueprint set and recipe; a component that no
    longer resolves is left as stored (its difference is then reported)."""
    ref = PolicyRef.parse(stored.run.policy)

    def filled(kind: str, name: str) -> dict[str, Any]:
        table = dict(getattr(stored, kind))
        try:
            found = component(pm, kind, name, stored, [])
        except EsperError:
            found = None
        if found is not None:
            table[name] = {**unstructure(found.options), **table.get(name, {})}
        return table

    return attrs.evolve(
        stored,
        tasks=filled("tasks", stored.run.task),
        rewards=filled("rewards", stored.run.reward),
        policies=filled("policies", ref.name),
        executors=filled("executors", stored.run.executor),
    )


def resolve_operators(pm: PluginManager) -> list[Any]:
    """Every installed growth operator, in a stable (name) order: a host growth takes the
    one its request names, or the one of its kind that the host declares sites for."""
    return [op for _, op in sorted(pm.registry("operators").items())]


def task_topology(task: Component) -> str | None:
    """The task's topology: a class attribute, or (a task whose host is the user's model,
    ``tasks.dataset``) its options' ``topology``."""
    topology = getattr(task.cls, "topology", None)
    if not isinstance(topology, str):
        topology = getattr(task.options, "topology", None)
    return topology if isinstance(topology, str) else None


def resolve_blueprints(pm: PluginManager, config: RunConfig, topology: str | None) -> list[Any]:
    """The action space's blueprints for ``topology``: pinned by ``env.blueprints``; each
    module a blueprint builds is checked before a slot uses it, naming its plugin."""
    registry = pm.registry("blueprints")
    return [
        checked_blueprint(bp, registry.plugin_of(bp.key))
        for bp in pinned_blueprints(
            pm.blueprints_for(topology) if topology else [], config.env.blueprints, topology
        )
    ]


def pinned_blueprints(
    installed: list[Any], pinned: list[str] | None, topology: str | None
) -> list[Any]:
    """The blueprints of the action space: those ``env.blueprints`` names (a key such as
    ``cnn/conv_light`` or, within the task's topology, a name such as ``conv_light``), or
    every installed one but the opt-in ones (``Blueprint.opt_in``) when it is unset."""
    if pinned is None:
        return [bp for bp in installed if not getattr(bp, "opt_in", False)]
    by_key = {bp.key: bp for bp in installed}
    by_name = {bp.name: bp for bp in installed}
    chosen: dict[str, Any] = {}
    unknown = []
    for name in pinned:
        bp = by_key.get(name) or by_name.get(name)
        if bp is None:
            unknown.append(name)
        else:
            chosen[bp.key] = bp
    if unknown:
        available = ", ".join(sorted(by_key)) or "none"
        raise ConfigError(
            [
                f"env.blueprints: {', '.join(map(repr, unknown))} not installed for "
                f"{topology or 'this task'} hosts; available: {available}"
            ]
        )
    return [chosen[key] for key in sorted(chosen)]
