"""How a run builds env ``i``: on its task, or, in a mixed training run
(``train.pairs``), as a :class:`~esper_core.env.paired.PairedEnv` holding one env per
pair, each pair's config resolved as a run of its own."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from esper_core.config import RunConfig, config_to_dict
from esper_core.config_io import merge
from esper_core.converter import structure
from esper_core.env.paired import PairedEnv
from esper_core.errors import ConfigError
from esper_core.plugins import PluginManager
from esper_core.recipe import Recipe
from esper_core.run.resolve import Resolved, resolve

if TYPE_CHECKING:
    import torch

    from esper_core.env.env import MorphogeneticEnv

log = logging.getLogger(__name__)

# Sections a pair may not set: the run's, shared by every pair.
SHARED = ("train", "policies", "run.policy", "run.executor", "run.n_envs", "run.seed")


def pair_config(config: RunConfig, label: str, partial: dict[str, Any]) -> RunConfig:
    """The run's config with pair ``label``'s partial config merged over it."""
    for key in SHARED:
        section, _, name = key.partition(".")
        value = partial.get(section)
        if value is not None and (not name or (isinstance(value, dict) and name in value)):
            raise ConfigError(
                [
                    f"train.pairs: pair {label!r} sets {key}, which is the run's for every "
                    "pair; set it outside train.pairs"
                ]
            )
    base = config_to_dict(attrs.evolve(config, train=attrs.evolve(config.train, pairs=[])))
    # Resolving the run filled in run.task's blueprints and training recipe: a pair of
    # another task takes its own task's unless its config names them.
    base["env"].pop("blueprints", None)
    for key in attrs.fields_dict(Recipe):
        base["training"].pop(key, None)
    data = merge(base, partial)
    data.pop("schema_version", None)
    try:
        return structure(data, RunConfig)
    except ConfigError as exc:
        raise ConfigError([f"train.pairs {label!r}: {p}" for p in exc.problems]) from None


def resolve_pairs(config: RunConfig, pm: PluginManager) -> list[tuple[str, Resolved]]:
    """Each pair's components, resolved and checked before anything is built."""
    return [
        (p.label, resolve(pair_config(config, p.label, p.config), pm)) for p in config.train.pairs
    ]


def paired_builder(
    config: RunConfig,
    pm: PluginManager,
    devices: Sequence[torch.device | str],
    quiet: bool,
) -> Callable[[int], PairedEnv]:
    """``build(i)``: env ``i`` of the mixed run (every pair's task is built once)."""
    from esper_core.env.env import MorphogeneticEnv

    if config.run.executor != "serial":
        raise ConfigError(
            [
                f"train.pairs runs on the serial executor, not {config.run.executor!r}: "
                "set run.executor=serial"
            ]
        )
    pairs = resolve_pairs(config, pm)
    tasks = [(label, r, r.make_task(quiet)) for label, r in pairs]

    def build(i: int) -> PairedEnv:
        device = devices[i % len(devices)]
        envs = [
            MorphogeneticEnv(
                task,
                r.make_reward(),
                r.blueprints,
                r.config,
                i,
                device,
                operators=r.operators,
            )
            for _, r, task in tasks
        ]
        return PairedEnv([label for label, _, _ in tasks], envs)

    return build


def task_builder(
    resolved: Resolved, devices: Sequence[Any], quiet: bool
) -> Callable[[int], MorphogeneticEnv]:
    """``build(i)``: env ``i`` of a run of one task (the task is built once)."""
    from esper_core.env.env import MorphogeneticEnv

    task = resolved.make_task(quiet)

    def build(i: int) -> MorphogeneticEnv:
        return MorphogeneticEnv(
            task,
            resolved.make_reward(),
            resolved.blueprints,
            resolved.config,
            i,
            devices[i],
            operators=resolved.operators,
        )

    return build


def fit_envs_to_policy(envs: Sequence[Any], policy: object) -> None:
    """What ``policy`` asks of the envs it will act on, before their next reset: seeds
    installed at birth, a scheduled growth of the host, or the growths it may ask for
    online (each env then observes whether each can start; without them it masks every
    growth). Training envs and the envs of a greedy evaluation are fitted alike."""
    from esper_core.components.policy import GrowsHostOnline, InstallsAtBirth, SchedulesHostGrowth
    from esper_core.env import host_growth_online

    if isinstance(policy, InstallsAtBirth):  # a fixed architecture: seeds from epoch 0
        for env in envs:
            env.install_at_birth(policy.birth_seeds())
    if isinstance(policy, SchedulesHostGrowth):  # the host itself grows on a schedule
        for env in envs:
            env.schedule_host_growth(policy.host_growths())
    if isinstance(policy, GrowsHostOnline):  # ...or when the policy chooses: can it?
        optional = host_growth_online.where_possible(policy)
        for group in each_pair(envs):
            why = host_growth_online.check_declared(
                group, policy.online_host_growths(), optional=optional
            )
            if why is not None:
                log.info("%s; it grows without that there", why)


def each_pair(envs: Sequence[Any]) -> list[list[Any]]:
    """The envs grouped by host: one group per pair of a mixed run, else all of them."""
    if envs and isinstance(envs[0], PairedEnv):
        return [[env.pair_envs[k] for env in envs] for k in range(len(envs[0].pair_envs))]
    return [list(envs)]
