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
options under different labels. Each ``[[sweep.sizes]]`` entry is, per task and seed, a
cell of policy ``wait`` labelled ``sweep.LABEL`` (:mod:`esper_core.compare.size_sweep`),
its ``config`` a partial run config merged over the shared one (a training length), so
the sweep spans sizes and training lengths; ``[sweep] metric`` ("auto", "accuracy" or
"loss") is what the comparison and its frontier are measured in
(:mod:`esper_core.compare.metric`).
The whole experiment is validated before any cell runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
from attrs import define, frozen

from esper_core.config import RunConfig, config_to_dict
from esper_core.config_io import apply_overrides, merge, read_file
from esper_core.converter import each, in_range, one_of, options_field, structure
from esper_core.errors import ConfigError

CELLS_DIR = "cells"
LOCKS_DIR = ".locks"
# Matched whole (fullmatch): "$" would also accept a name ending in a newline.
LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


# The run settings every cell's own (plan._cell_data sets them): a sweep point's config
# may not set them, or it would be silently overridden.
CELL_RUN_KEYS = ("task", "policy", "seed", "episodes", "n_envs", "quiet", "threads")

# Derived baselines an experiment can ask for (esper_core.compare.static_final, .size_sweep).
BASELINE_KINDS = ("static-final", "size-sweep")
SIZE_SWEEP = "size-sweep"
SWEEP_PREFIX = "sweep."  # a size's label in tables and cell directories: sweep.LABEL
# What the frontier is measured in: "auto" is test loss for a task that says it is a
# language model (Task.language_model), test accuracy otherwise.
FRONTIER_METRICS = ("auto", "accuracy", "loss")


class ExperimentError(ConfigError):
    """The experiment is inconsistent (labels, baseline, seeds, existing cells)."""


# ---------------------------------------------------------------- the file


def _problem(what: str) -> str | None:
    return (
        None
        if LABEL.fullmatch(what)
        else (
            f'expected letters, digits, ".", "_" or "-" (it names a directory), got {json.dumps(what)}'
        )
    )


def _label(value: Any) -> str | None:
    return None if value is None else _problem(value)


@define
class PolicyEntry:
    """One policy of the experiment."""

    name: str = options_field(
        "heuristic", doc="Policy component, or NAME:ARGUMENT (ppo:DIR/checkpoint.pt)."
    )
    label: str | None = options_field(
        None, _label, "Name in tables and cell directories (default: from name)."
    )
    options: dict[str, Any] = options_field({}, doc="Options merged over [config.policies.NAME].")


@define
class TaskEntry:
    """One task of the experiment."""

    name: str = options_field("digits", doc="Task component.")
    label: str | None = options_field(
        None, _label, "Name in tables and cell directories (default: name)."
    )
    options: dict[str, Any] = options_field({}, doc="Options merged over [config.tasks.NAME].")


@define
class SweepSize:
    """One static host size of the size-sweep baseline."""

    label: str = options_field("", _label, "Its name: cells and tables say sweep.LABEL.")
    options: dict[str, Any] = options_field(
        {}, doc="Task options merged over each task's options, e.g. { base_channels = 8 }."
    )
    tasks: list[str] = options_field(
        [], doc="Labels of the tasks this size is trained on (default: every task)."
    )
    config: dict[str, Any] = options_field(
        {},
        doc="A partial run config merged over the shared [config] for this size's cells, e.g. "
        "{ env = { max_epochs = 30 } }: the same size at another training length is "
        "another sweep point.",
    )


@define
class SweepFile:
    """The size-sweep baseline: for every size, task and seed, a cell of policy ``wait`` with
    the size's task options; the same seeds as the policies."""

    sizes: list[SweepSize] = options_field([], doc="The static host sizes.")
    metric: str = options_field(
        "auto",
        one_of(*FRONTIER_METRICS),
        'What the comparison and its frontier are judged in: "accuracy" (higher is better), '
        '"loss" (test loss, lower is better) or "auto" (loss for a language-model task, '
        "accuracy otherwise).",
    )


@define
class ExperimentFile:
    """The content of an experiment file; every key is optional."""

    policies: list[PolicyEntry] = options_field([], doc="The policies to compare.")
    tasks: list[TaskEntry] = options_field([], doc="The tasks (default: the config's run.task).")
    seeds: int = options_field(
        5, in_range(1, integer=True), "Seeds per (task, policy): run.seed + 0..seeds-1."
    )
    baseline: str | None = options_field(
        None, doc="Policy label for the probability of improvement."
    )
    baselines: list[str] = options_field(
        [],
        each(one_of(*BASELINE_KINDS)),
        'Derived baselines: "static-final" trains, for every seed of every growing policy, '
        'the architecture that run ended with from scratch on the same seed; "size-sweep" '
        "trains static hosts of the [[sweep.sizes]] (policy wait) on the same seeds.",
    )
    sweep: SweepFile = attrs.field(factory=SweepFile, metadata={"doc": "The size sweep."})
    jobs: int | None = options_field(None, in_range(1, integer=True), "Cells run in parallel.")
    runner: str = options_field(
        "local", doc="Where the cells run: a runners.* component (local, ray, ...)."
    )
    runner_options: dict[str, Any] = options_field({}, doc="Options of the runner component.")
    out: str | None = options_field(None, doc="Experiment directory.")
    confidence: float = options_field(
        0.95, in_range(0, 1, lo_open=True, hi_open=True), "Confidence level."
    )
    resamples: int = options_field(2000, in_range(100, integer=True), "Bootstrap resamples.")
    bootstrap_seed: int = options_field(
        0, in_range(0, integer=True), "Seed of the bootstrap generator."
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
    # point's training length); empty for the policies.
    config: dict[str, Any] = attrs.field(factory=dict)


@frozen
class SweepArm:
    """One point of the sweep: label ``sweep.LABEL``, task options merged over the task's,
    ``config`` merged over the shared run config."""

    label: str
    options: dict[str, Any] = attrs.field(factory=dict)
    tasks: tuple[str, ...] = ()  # task labels; empty: every task
    config: dict[str, Any] = attrs.field(factory=dict)

    def applies_to(self, task: str) -> bool:
        return not self.tasks or task in self.tasks


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


def _arms(entries: Sequence[PolicyEntry | TaskEntry], kind: str) -> tuple[list[Arm], list[str]]:
    arms: list[Arm] = []
    problems: list[str] = []
    for i, entry in enumerate(entries):
        name = entry.name.partition(":")[0].strip() if kind == "policy" else entry.name
        if kind == "task" and ":" in entry.name:
            problems.append(f"tasks[{i}].name: a task takes no argument, got {entry.name!r}")
        label = entry.label or (policy_label(entry.name) if kind == "policy" else entry.name)
        problem = _problem(label) if label else "expected a name"
        if problem:
            problems.append(f"{kind} {entry.name!r}: label: {problem}; give it a `label`")
        arms.append(Arm(label, entry.name.strip(), name, dict(entry.options)))
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
    policy_arms, problems = _arms(spec.policies, "policy")
    task_arms, task_problems = _arms(tasks, "task")
    problems += task_problems
    if not spec.policies:
        problems.append(
            "no policies: pass --policy NAME (repeatable) or add [[policies]] to the experiment file"
        )
    labels = [a.label for a in policy_arms]
    if spec.baseline is not None and spec.baseline not in labels:
        problems.append(
            f"baseline {spec.baseline!r} is not one of the policies: {', '.join(labels) or '(none)'}"
        )
    sweep, sweep_problems = _sweep(spec, [t.label for t in task_arms], base)
    problems += sweep_problems
    if problems:
        raise ExperimentError(problems)
    seeds = tuple(base.run.seed + k for k in range(spec.seeds))
    return Experiment(
        policies=tuple(policy_arms),
        tasks=tuple(task_arms),
        seeds=seeds,
        base=base,
        baseline=spec.baseline,
        baselines=tuple(dict.fromkeys(spec.baselines)),
        sweep=sweep,
        frontier_metric=spec.sweep.metric,
        confidence=spec.confidence,
        resamples=spec.resamples,
        bootstrap_seed=spec.bootstrap_seed,
        plugins=tuple(plugins),
    )


def _sweep(
    spec: ExperimentFile, tasks: Sequence[str], base: RunConfig
) -> tuple[tuple[SweepArm, ...], list[str]]:
    """The sweep's arms, or what is wrong with them: sizes without the baseline (or the
    baseline without sizes), labels missing, repeated or not a directory name, tasks that
    are not the experiment's, a config that is not a valid run config."""
    sizes = spec.sweep.sizes
    wanted = SIZE_SWEEP in spec.baselines
    if wanted and not sizes:
        return (), [
            'baselines: "size-sweep" needs sizes: add [[sweep.sizes]] tables '
            "(label = ..., options = { TASK_OPTION = ... })"
        ]
    if sizes and not wanted:
        return (), ['sweep.sizes is given but baselines lacks "size-sweep": add it']
    problems = []
    arms: list[SweepArm] = []
    for i, size in enumerate(sizes):
        if not size.label:
            problems.append(
                f"sweep.sizes.{i}.label: expected a label (it names the size: sweep.LABEL)"
            )
        elif problem := _problem(size.label):
            problems.append(f"sweep.sizes.{i}.label: {problem}")
        problems += _size_config_problems(size.config, base, f"sweep.sizes.{i}.config")
        unknown = [t for t in size.tasks if t not in tasks]
        if unknown:
            problems.append(
                f"sweep.sizes.{i}.tasks: {', '.join(map(repr, unknown))} is not a task label "
                f"of the experiment: {', '.join(tasks)}"
            )
        arms.append(
            SweepArm(
                SWEEP_PREFIX + size.label,
                dict(size.options),
                tuple(size.tasks),
                dict(size.config),
            )
        )
    labels = [a.label for a in arms]
    problems += [
        f"two sweep sizes have the label {lab!r}"
        for lab in sorted({x for x in labels if labels.count(x) > 1})
    ]
    return tuple(arms), problems


def _size_config_problems(config: dict[str, Any], base: RunConfig, where: str) -> list[str]:
    """A sweep point's config, checked as the run config its cells will have (merged over
    the shared one), so a typo fails before any cell runs."""
    if not config:
        return []
    owned = [k for k in CELL_RUN_KEYS if k in (config.get("run") or {})]
    if owned:
        return [
            f"{where}.run: {', '.join(owned)} is set by each cell of the experiment, "
            "not by a sweep size"
        ]
    data = config_to_dict(base)
    data.pop("schema_version", None)
    try:
        structure(merge(data, config, where), RunConfig, path=where)
    except ConfigError as exc:
        return list(exc.problems)
    return []
