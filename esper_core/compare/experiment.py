"""Comparison experiments: which policies, on which tasks, over which seeds.

An experiment comes from a TOML file (``esper compare experiments/x.toml``) or from
flags (``esper compare --policy heuristic --policy wait --task digits --seeds 5``)::

    seeds = 5                      # cells use run.seed, run.seed + 1, ...
    baseline = "wait"              # P(policy > baseline) is reported against it
    baselines = ["static-final", "size-sweep"]    # derived baselines
    jobs = 2

    [[policies]]
    name = "heuristic"             # or "ppo:runs/x/checkpoint.pt"
    label = "heuristic"            # directory and table name (default: derived from name)
    options = { min_epoch = 5 }
    config = { env = { max_epochs = 24 } }   # this policy's cells only (a shorter budget)

    [[policies]]                   # one method from independent training runs: arms
    name = "ppo"                   # ppo.run-1, ppo.run-2, also reported across the runs
    checkpoints = ["runs/a/checkpoint.pt", "runs/b/checkpoint.pt"]

    [[tasks]]
    name = "digits"
    options = { preset = "impaired" }

    [config]                       # the shared run config, as in `esper run --config`
    env = { max_epochs = 30 }

    [[sweep.sizes]]                # the size-sweep baseline: static hosts of several sizes
    label = "c4"                   # cells and tables say sweep.c4
    options = { base_channels = 4 }  # merged over each task's options

    [[sweep.sizes]]                # the same size trained longer: another sweep point
    label = "c4-60ep"
    options = { base_channels = 4 }
    config = { env = { max_epochs = 60 } }  # merged over [config] for this point's cells

Each (task, policy, seed) is one *cell*: an ordinary run directory with one episode of
one env. A policy's ``options`` are merged over ``[config.policies.NAME]`` (a task's over
``[config.tasks.NAME]``), so two entries may run the same component with different
options under different labels; one with ``checkpoints`` is one arm per training run
(:mod:`esper_core.compare.training_group`). Each ``[[sweep.sizes]]`` entry is, per task
and seed, a cell of policy ``wait`` labelled ``sweep.LABEL`` (:mod:`esper_core.compare.size_sweep`),
its ``config`` a partial run config merged over the shared one (a training length), so
the sweep spans sizes and training lengths; ``[sweep] metric`` ("auto", "accuracy" or
"loss") is what the comparison and its frontier are measured in
(:mod:`esper_core.compare.metric`). ``[tuning]`` searches every arm's recipe on tuning
seeds first (:mod:`esper_core.compare.tuning_grid`).
The whole experiment is validated before any cell runs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
from attrs import define, frozen

from esper_core.compare.entries import PolicyEntry, TaskEntry
from esper_core.compare.labels import label_problem
from esper_core.compare.stall_rule import StallRule
from esper_core.compare.sweep_spec import (
    SIZE_SWEEP,
    SweepArm,
    SweepFile,
    config_problems,
    resolve_sweep,
)
from esper_core.compare.training_group import (
    TrainingGroup,
    expand_training_groups,
    group_problems,
)
from esper_core.compare.tuning_grid import Tuning, TuningFile, check_tuning
from esper_core.config import RunConfig
from esper_core.config_io import apply_overrides, merge, read_file
from esper_core.config_limits import MAX_COMPARE_SEEDS, MAX_JOBS, MAX_RESAMPLES, MAX_SEED
from esper_core.converter import each, in_range, one_of, options_field, os_path, structure
from esper_core.errors import ConfigError

CELLS_DIR = "cells"
LOCKS_DIR = ".locks"

# Derived baselines an experiment can ask for (esper_core.compare.static_final, .size_sweep).
BASELINE_KINDS = ("static-final", SIZE_SWEEP)


class ExperimentError(ConfigError):
    """The experiment is inconsistent (labels, baseline, seeds, existing cells)."""


# ---------------------------------------------------------------- the file


@define
class ExperimentFile:
    """The content of an experiment file; every key is optional."""

    policies: list[PolicyEntry] = options_field([], doc="The policies to compare.")
    tasks: list[TaskEntry] = options_field([], doc="The tasks (default: the config's run.task).")
    seeds: int = options_field(
        5,
        in_range(1, MAX_COMPARE_SEEDS, integer=True),
        "Seeds per (task, policy): run.seed + 0..seeds-1.",
    )
    baseline: str | None = options_field(
        None, doc="Policy label for the probability of improvement."
    )
    baselines: list[str] = options_field(
        [],
        each(one_of(*BASELINE_KINDS), distinct=True),
        'Derived baselines: "static-final" trains, for every seed of every growing policy, '
        'the architecture that run ended with from scratch on the same seed; "size-sweep" '
        "trains static hosts of the [[sweep.sizes]] (policy wait) on the same seeds.",
    )
    sweep: SweepFile = attrs.field(factory=SweepFile, metadata={"doc": "The size sweep."})
    stall: StallRule = attrs.field(
        factory=StallRule, metadata={"doc": "When a run counts as not trained."}
    )
    tuning: TuningFile | None = options_field(None, doc="The search run before the evaluation.")
    jobs: int | None = options_field(
        None, in_range(1, MAX_JOBS, integer=True), "Cells run in parallel."
    )
    runner: str = options_field(
        "local", doc="Where the cells run: a runners.* component (local, ray, ...)."
    )
    runner_options: dict[str, Any] = options_field({}, doc="Options of the runner component.")
    out: str | None = options_field(None, os_path, "Experiment directory.")
    confidence: float = options_field(
        0.95, in_range(0, 1, lo_open=True, hi_open=True), "Confidence level."
    )
    resamples: int = options_field(
        2000, in_range(100, MAX_RESAMPLES, integer=True), "Bootstrap resamples."
    )
    bootstrap_seed: int = options_field(
        0, in_range(0, MAX_SEED, integer=True), "Seed of the bootstrap generator."
    )
    config: dict[str, Any] = options_field(
        {}, doc="The shared run config (as an `esper run --config` file)."
    )


def _entries(data: dict[str, Any], key: str) -> None:
    # `policies = ["heuristic", "wait"]` is shorthand for tables with only a name.
    value = data.get(key)
    if isinstance(value, list):
        data[key] = [{"name": v} if isinstance(v, str) else v for v in value]


def parse_experiment(data: dict[str, Any], source: str = "experiment") -> ExperimentFile:
    data = dict(data)
    data.pop("schema_version", None)
    for key in ("policies", "tasks"):
        _entries(data, key)
    try:
        return structure(data, ExperimentFile)
    except ConfigError as exc:
        raise ConfigError([f"{source}: {p}" for p in exc.problems]) from None


def load_experiment_file(path: str | Path) -> ExperimentFile:
    p = Path(path)
    if not p.is_file():
        raise ConfigError([f"{p}: experiment file not found"])
    return parse_experiment(read_file(p), str(p))


# ---------------------------------------------------------------- the resolved experiment


@frozen
class Arm:
    """A policy or task of the experiment, with its label and its own options."""

    label: str
    spec: str  # what run.policy / run.task is set to ("ppo:runs/x/checkpoint.pt")
    name: str  # the component name ("ppo")
    options: dict[str, Any] = attrs.field(factory=dict)
    # A partial run config merged over the shared one for this arm's cells (a sweep
    # point's or a policy's training length); empty for the tasks.
    config: dict[str, Any] = attrs.field(factory=dict)


@frozen
class Cell:
    """One run: a policy on a task with one seed; ``config`` is fully resolved."""

    task: str
    policy: str
    seed: int
    config: RunConfig = attrs.field(eq=False)

    def directory(self, root: Path) -> Path:
        return root / CELLS_DIR / self.task / self.policy / f"seed-{self.seed}"

    def lock(self, root: Path) -> Path:
        return root / LOCKS_DIR / f"{self.task}--{self.policy}--seed-{self.seed}.lock"


@frozen
class Experiment:
    policies: tuple[Arm, ...]
    tasks: tuple[Arm, ...]
    seeds: tuple[int, ...]
    base: RunConfig = attrs.field(eq=False)
    baseline: str | None = None
    baselines: tuple[str, ...] = ()
    confidence: float = 0.95
    resamples: int = 2000
    bootstrap_seed: int = 0
    plugins: tuple[str, ...] = ()  # extra plugin modules/files every worker loads
    # The size sweep: one arm per size, spec "wait", options = the task-option overrides.
    sweep: tuple[SweepArm, ...] = ()
    frontier_metric: str = "auto"
    tuning: Tuning | None = None  # None: every arm runs the shared config's recipe
    training_groups: tuple[TrainingGroup, ...] = ()  # methods of several training runs
    stall: StallRule = attrs.field(factory=StallRule)  # when a run did not train

    def default_out(self) -> Path:
        """A deterministic directory, so re-running the same command continues it."""
        labels = "-".join([*(t.label for t in self.tasks), *(p.label for p in self.policies)])
        return Path(self.base.run.out_dir) / f"compare-{labels}"


def policy_label(spec: str) -> str:
    """``heuristic`` -> heuristic; ``ppo:runs/x/checkpoint.pt`` -> ppo-x; ``ppo:runs/x`` -> ppo-x."""
    name, _, argument = spec.partition(":")
    name = name.strip()
    if not argument:
        return name
    path = Path(argument.strip())
    stem = path.parent.name if path.suffix == ".pt" and path.parent.name else path.stem or path.name
    return re.sub(r"[^A-Za-z0-9._-]+", "-", f"{name}-{stem}").strip("-")


def _arms(
    entries: Sequence[PolicyEntry | TaskEntry], kind: str, base: RunConfig
) -> tuple[list[Arm], list[str]]:
    arms: list[Arm] = []
    problems: list[str] = []
    for i, entry in enumerate(entries):
        if not entry.name or not entry.name.strip():
            problems.append(f"{kind} entry {i}: name: expected a {kind} component, got none")
            continue
        name = entry.name.partition(":")[0].strip() if kind == "policy" else entry.name
        if kind == "task" and ":" in entry.name:
            problems.append(f"tasks[{i}].name: a task takes no argument, got {entry.name!r}")
        label = entry.label or (policy_label(entry.name) if kind == "policy" else entry.name)
        problem = label_problem(label) if label else "expected a name"
        if problem:
            problems.append(f"{kind} {entry.name!r}: label: {problem}; give it a `label`")
        config: dict[str, Any] = {}
        if isinstance(entry, PolicyEntry):
            config = dict(entry.config)
            problems += config_problems(config, base, f"policies.{i}.config")
        arms.append(Arm(label, entry.name.strip(), name, dict(entry.options), config))
    seen: dict[str, str] = {}
    for arm in arms:
        if arm.label in seen:
            problems.append(
                f"two {kind} entries have the label {arm.label!r} ({seen[arm.label]!r} and {arm.spec!r}); "
                "give them distinct `label`s in an experiment file"
            )
        seen[arm.label] = arm.spec
    return arms, problems


def shared_config(
    spec: ExperimentFile,
    config_path: str | None = None,
    extra: dict[str, Any] | None = None,
    sets: Sequence[str] = (),
) -> RunConfig:
    """``--config`` file <- the experiment's [config] <- flags <- ``--set``."""
    data: dict[str, Any] = read_file(config_path) if config_path else {}
    data.pop("schema_version", None)
    data = merge(data, spec.config)
    data.pop("schema_version", None)
    if extra:
        data = merge(data, extra)
    if sets:
        data = apply_overrides(data, list(sets))
    return structure(data, RunConfig)


def build_experiment(
    spec: ExperimentFile, base: RunConfig, plugins: Sequence[str] = ()
) -> Experiment:
    """Check labels, the baseline and the lists; fill defaults (the config's task)."""
    tasks = spec.tasks or [TaskEntry(name=base.run.task)]
    policies, groups, problems = expand_training_groups(spec.policies)
    policy_arms, policy_problems = _arms(policies, "policy", base)
    task_arms, task_problems = _arms(tasks, "task", base)
    problems += policy_problems + task_problems
    if not spec.policies:
        problems.append(
            "no policies: pass --policy NAME (repeatable) or add [[policies]] to the experiment file"
        )
    labels = [a.label for a in policy_arms]
    problems += group_problems(groups, labels, spec.baseline)
    methods = [g.label for g in groups]
    if spec.baseline is not None and spec.baseline not in [*labels, *methods]:
        problems.append(
            f"baseline {spec.baseline!r} is not one of the policies: {', '.join(labels) or '(none)'}"
        )
    sweep, sweep_problems = resolve_sweep(
        spec.sweep, spec.baselines, [t.label for t in task_arms], base
    )
    problems += sweep_problems
    seeds = tuple(base.run.seed + k for k in range(spec.seeds))
    tuning, tuning_problems = check_tuning(spec.tuning, base, seeds)
    if problems + tuning_problems:
        raise ExperimentError(problems + tuning_problems)
    return Experiment(
        policies=tuple(policy_arms),
        tasks=tuple(task_arms),
        seeds=seeds,
        base=base,
        baseline=spec.baseline,
        baselines=tuple(dict.fromkeys(spec.baselines)),
        sweep=sweep,
        frontier_metric=spec.sweep.metric,
        tuning=tuning,
        training_groups=tuple(groups),
        confidence=spec.confidence,
        resamples=spec.resamples,
        bootstrap_seed=spec.bootstrap_seed,
        plugins=tuple(plugins),
        stall=spec.stall,
    )
