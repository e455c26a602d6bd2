"""The benchmark's suite file: pairs split in advance, the policies under test, the menu.

::

    seeds = 10                       # evaluation seeds: run.seed + 0..9
    tuning_seeds = [100, 101, 102, 103, 104]   # the rate and the oracle are chosen here
    policies = ["wait", "heuristic", "ppo:pretrained"]
    candidates = [{ name = "heuristic", label = "slowdown", options = { trigger = "slowdown" } }]

    [menu]
    moments = [0.1, 0.3, 0.5]        # each operator at these fractions of the run
    blueprints = { cnn = ["conv_layer"], mlp = ["residual"], transformer = ["block"] }

    [config]                         # the shared run config
    env = { max_epochs = 10 }

    [[pairs]]
    label = "digits-impaired"
    split = "evaluation"             # or "training": never both for one host
    task = "digits"
    options = { preset = "impaired" }
    lr = [0.1, 0.2, 0.4]             # wait's rate is tuned on this grid; every arm uses it
    config = { env = { max_epochs = 12 } }   # this pair's cells only

    [training_runs]                  # a controller trained in independent runs
    ppo = ["ppo-run-1", "ppo-run-2", "ppo-run-3"]   # labels of policies under test

The split is part of the file, fixed before any run: a host (a task with the options
that shape its network) is in one split only, and ``esper benchmark --split
evaluation`` never runs a training pair's cell (nor the reverse). Everything is checked
here or when the cells are planned, before one runs.

``candidates`` are policies run on the training pairs only: the options a default is
chosen among, so that the choice never sees an evaluation pair. Their labels share one
namespace with ``policies``.

``[training_runs]`` names the policies that are one learned controller's independent
training runs (each checkpoint evaluated as its own policy): at least two per group, a
policy in one group only, the group's name not a policy's label. The results then pool
each group over runs x pairs x evaluation seeds as well, so its interval speaks for the
training procedure (:mod:`esper_core.benchmark.pooled_runs`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
from attrs import define, frozen

from esper_core.compare.experiment import Arm, PolicyEntry, build_experiment
from esper_core.compare.experiment import ExperimentFile as _ExperimentFile
from esper_core.compare.labels import label_check
from esper_core.compare.stalls import StallRule
from esper_core.compare.sweep_spec import config_problems
from esper_core.config import RunConfig, config_to_dict
from esper_core.config_io import merge, read_file
from esper_core.config_limits import MAX_COMPARE_SEEDS, MAX_JOBS, MAX_RESAMPLES, MAX_SEED
from esper_core.converter import each, in_range, one_of, options_field, os_path, structure
from esper_core.errors import ConfigError

SPLITS = ("evaluation", "training")
# Task options that shape the network (what makes two pairs the same host), whatever
# the data budget: the split is over hosts, not over datasets.
HOST_OPTIONS = (
    "preset",
    "model",
    "topology",
    "slots",
    "base_channels",
    "n_blocks",
    "convs_per_block",
    "convs_after_pool",
    "slots_before_pool",
    "d_model",
    "n_layer",
    "n_head",
    "n_segments",
)
MIN_RUNS = 2  # a group of fewer says nothing of how training runs differ
DEFAULT_BLUEPRINTS = {"cnn": ["conv_layer"], "mlp": ["residual"], "transformer": ["block"]}


class SuiteError(ConfigError):
    """The suite file is inconsistent (labels, split, seeds, grids)."""


def _moment(value: Any) -> str | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1
    return None if ok else f"expected a fraction of the run in [0, 1), got {value!r}"


@define
class MenuFile:
    """The ``[menu]`` table: what every pair's oracle menu tries."""

    moments: list[float] = options_field(
        [0.1, 0.3, 0.5],
        each(_moment, distinct=True),
        "Fractions of the run at which each growth operator is tried.",
    )
    blueprints: dict[str, list[str]] = options_field(
        DEFAULT_BLUEPRINTS,
        doc="Per topology, the seed blueprints tried at each slot where they fit.",
    )
    widen_factor: float = options_field(
        2.0, in_range(1, 64, lo_open=True), "The host widening entries' factor."
    )
    deepen_factor: int = options_field(
        2, in_range(2, 8, integer=True), "The host deepening entries' factor."
    )


@define
class PairEntry:
    """One host/task pair of the suite."""

    label: str | None = options_field(None, label_check, "Name in tables and directories.")
    task: str | None = options_field(None, doc="Task component; required.")
    split: str | None = options_field(
        None, one_of(*SPLITS), "evaluation or training; required, fixed before any run."
    )
    options: dict[str, Any] = options_field({}, doc="Task options (merged over [config]).")
    lr: list[float] = options_field(
        [], each(in_range(0, 1e3, lo_open=True)), "wait's learning-rate grid; required."
    )
    config: dict[str, Any] = options_field({}, doc="A partial run config for this pair's cells.")


@define
class SuiteFile:
    pairs: list[PairEntry] = options_field([], doc="The host/task pairs.")
    policies: list[PolicyEntry] = options_field([], doc="The policies under test.")
    candidates: list[PolicyEntry] = options_field(
        [],
        doc="Policies run on the training pairs only: the candidates a default is chosen "
        "among (never run on an evaluation pair).",
    )
    seeds: int = options_field(
        10, in_range(1, MAX_COMPARE_SEEDS, integer=True), "Evaluation seeds: run.seed + 0..n-1."
    )
    tuning_seeds: list[int] = options_field(
        [100, 101, 102, 103, 104],
        each(in_range(0, MAX_SEED, integer=True), distinct=True),
        "Seeds the rate and the oracle are chosen on (never evaluation seeds).",
    )
    menu: MenuFile = attrs.field(factory=MenuFile, metadata={"doc": "The oracle menus."})
    stall: StallRule = attrs.field(
        factory=StallRule, metadata={"doc": "When a run counts as not trained."}
    )
    jobs: int | None = options_field(
        None, in_range(1, MAX_JOBS, integer=True), "Cells run in parallel."
    )
    out: str | None = options_field(None, os_path, "Benchmark directory.")
    confidence: float = options_field(
        0.95, in_range(0, 1, lo_open=True, hi_open=True), "Confidence level."
    )
    resamples: int = options_field(
        2000, in_range(100, MAX_RESAMPLES, integer=True), "Bootstrap resamples."
    )
    bootstrap_seed: int = options_field(
        0, in_range(0, MAX_SEED, integer=True), "Seed of the bootstrap generator."
    )
    config: dict[str, Any] = options_field({}, doc="The shared run config.")
    training_runs: dict[str, list[str]] = options_field(
        {}, doc="Per learned controller, the labels of its training runs' policies."
    )


@frozen
class RunsGroup:
    """A learned controller's independent training runs: its policies' labels."""

    label: str
    runs: tuple[str, ...]


@frozen
class Pair:
    """A checked pair: ``task`` is its task arm (label = the pair's label)."""

    task: Arm
    split: str
    grid: tuple[float, ...]
    config: dict[str, Any] = attrs.field(factory=dict)


@frozen
class Suite:
    pairs: tuple[Pair, ...]
    policies: tuple[Arm, ...]
    seeds: tuple[int, ...]
    tuning_seeds: tuple[int, ...]
    menu: MenuFile
    base: RunConfig = attrs.field(eq=False)
    stall: StallRule = attrs.field(factory=StallRule)
    confidence: float = 0.95
    resamples: int = 2000
    bootstrap_seed: int = 0
    out: str | None = None
    training_runs: tuple[RunsGroup, ...] = ()
    candidates: tuple[Arm, ...] = ()

    def split(self, split: str) -> tuple[Pair, ...]:
        return tuple(p for p in self.pairs if p.split == split)

    def pair_base(self, pair: Pair) -> RunConfig:
        """The shared config with the pair's own over it."""
        data = merge(config_to_dict(self.base), pair.config)
        data.pop("schema_version", None)
        return structure(data, RunConfig)


def _entries(data: dict[str, Any]) -> None:
    value = data.get("policies")
    if isinstance(value, list):
        data["policies"] = [{"name": v} if isinstance(v, str) else v for v in value]


def load_suite_file(path: str | Path) -> SuiteFile:
    p = Path(path)
    if not p.is_file():
        raise SuiteError([f"{p}: suite file not found"])
    data = dict(read_file(p))
    data.pop("schema_version", None)
    _entries(data)
    try:
        return structure(data, SuiteFile)
    except ConfigError as exc:
        raise SuiteError([f"{p}: {q}" for q in exc.problems]) from None


def host_key(task: str, options: dict[str, Any]) -> str:
    """What makes two pairs the same host: the task and its network-shaping options."""
    shaping = {k: options[k] for k in HOST_OPTIONS if k in options}
    return f"{task} {json.dumps(shaping, sort_keys=True)}"


def split_problems(pairs: Sequence[Pair]) -> list[str]:
    """Hosts in both splits (``pairs``' options as resolved: defaults filled in)."""
    seen: dict[str, Pair] = {}
    problems = []
    for pair in pairs:
        key = host_key(pair.task.name, pair.task.options)
        other = seen.setdefault(key, pair)
        if other.split != pair.split:
            problems.append(
                f"pairs {other.task.label!r} ({other.split}) and {pair.task.label!r} "
                f"({pair.split}) are the same host ({key}); a host is in one split only: "
                "change one pair's host options or move it to the other split"
            )
    return problems


def runs_problems(groups: dict[str, list[str]], policies: Sequence[str]) -> list[str]:
    """What is wrong with ``[training_runs]`` given the suite's policy labels."""
    problems = []
    owner: dict[str, str] = {}
    for name, runs in groups.items():
        where = f"training_runs.{name}"
        if name in policies or name in ("wait", "oracle"):
            problems.append(f"{where}: {name!r} is a policy's label; name the group something else")
        if len(set(runs)) < MIN_RUNS:
            problems.append(
                f"{where}: {len(set(runs))} training run(s); a group needs at least "
                f"{MIN_RUNS} (one run says nothing of the training procedure)"
            )
        for run in sorted({r for r in runs if runs.count(r) > 1}):
            problems.append(f"{where}: {run!r} is listed twice; list each run once")
        for run in dict.fromkeys(runs):
            if run not in policies or run == "wait":
                problems.append(
                    f"{where}: {run!r} is not a policy under test; list labels from "
                    f"policies ({', '.join(p for p in policies if p != 'wait') or 'none'})"
                )
            elif owner.setdefault(run, name) != name:
                problems.append(
                    f"{where}: {run!r} is already in group {owner[run]!r}; a training run "
                    "belongs to one group only"
                )
    return problems


def _pair(i: int, entry: PairEntry, base: RunConfig) -> tuple[Pair | None, list[str]]:
    where = f"pairs[{i}]"
    problems = [
        f"{where}.{key}: required ({why})"
        for key, why in (
            ("label", "it names the pair's directories"),
            ("task", "a task component such as digits"),
            ("split", '"evaluation" or "training", fixed before any run'),
        )
        if getattr(entry, key) is None
    ]
    if not entry.lr:
        problems.append(
            f"{where}.lr: expected the learning rates wait is tuned on, e.g. [0.1, 0.4]"
        )
    problems += config_problems(dict(entry.config), base, f"{where}.config")
    if problems or entry.label is None or entry.task is None or entry.split is None:
        return None, problems
    arm = Arm(entry.label, entry.task, entry.task, dict(entry.options))
    return Pair(arm, entry.split, tuple(entry.lr), dict(entry.config)), []


def build_suite(spec: SuiteFile, base: RunConfig) -> Suite:
    """Check the pairs, the policies (as ``esper compare`` checks them) and the seeds."""
    problems: list[str] = []
    pairs: list[Pair] = []
    for i, entry in enumerate(spec.pairs):
        pair, found = _pair(i, entry, base)
        problems += found
        if pair is not None:
            pairs.append(pair)
    if not spec.pairs:
        problems.append("no pairs: add [[pairs]] with label, task, split and lr")
    labels = [p.task.label for p in pairs]
    problems += [
        f"two pairs have the label {x!r}"
        for x in sorted({x for x in labels if labels.count(x) > 1})
    ]
    seeds = tuple(base.run.seed + k for k in range(spec.seeds))
    shared = sorted(set(spec.tuning_seeds) & set(seeds))
    if shared:
        problems.append(
            f"tuning_seeds: {', '.join(map(str, shared))} among the evaluation seeds "
            f"(run.seed {seeds[0]} to {seeds[-1]}); pick tuning seeds nothing is evaluated on"
        )
    if not spec.tuning_seeds:
        problems.append("tuning_seeds: expected at least one seed")
    policies: tuple[Arm, ...] = ()
    candidates: tuple[Arm, ...] = ()
    try:  # the policies under test and the candidates, checked as esper compare checks them
        entries = [*spec.policies, *spec.candidates]
        checked = build_experiment(_ExperimentFile(policies=entries), base).policies
        policies, candidates = checked[: len(spec.policies)], checked[len(spec.policies) :]
    except ConfigError as exc:
        problems += [f"policies: {p}" for p in exc.problems]
    reserved = {"wait", "oracle"} & {p.label for p in (*policies, *candidates) if p.spec != "wait"}
    problems += [
        f"policies: the label {r!r} is the benchmark's own arm; give it another"
        for r in sorted(reserved)
    ]
    if policies or not spec.policies:  # a policy that did not check is already named
        problems += runs_problems(spec.training_runs, [p.label for p in policies])
    if problems:
        raise SuiteError(problems)
    return Suite(
        pairs=tuple(pairs),
        policies=policies,
        seeds=seeds,
        tuning_seeds=tuple(spec.tuning_seeds),
        menu=spec.menu,
        base=base,
        stall=spec.stall,
        confidence=spec.confidence,
        resamples=spec.resamples,
        bootstrap_seed=spec.bootstrap_seed,
        out=spec.out,
        training_runs=tuple(RunsGroup(k, tuple(v)) for k, v in spec.training_runs.items()),
        candidates=candidates,
    )
