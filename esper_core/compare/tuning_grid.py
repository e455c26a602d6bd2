"""The ``[tuning]`` section of an experiment: a small search space and named tuning seeds.

::

    [tuning]
    seeds = [100, 101, 102]          # never evaluation seeds
    metric = "auto"                  # validation accuracy, or validation loss for a language model
    [tuning.grid]
    "training.lr" = [1e-3, 3e-3, 1e-2]
    "training.weight_decay" = [0.0, 0.1]

The grid's keys are dotted config keys, the ones ``esper run --set KEY=VALUE`` takes
(``training.lr = [...]`` without quotes, a nested table in TOML, means the same). Its
points are the product of the lists in the order written, the last key varying fastest:
that is the *grid order* ties are broken in. Every value is checked here by building the
shared config with it, as ``--set`` would, so a misspelled key or a value out of range
fails before any cell runs; task and policy options are checked when the cells are planned.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import Any

from attrs import define, frozen

from esper_core.config import RunConfig, config_to_dict
from esper_core.converter import each, in_range, one_of, options_field, structure
from esper_core.errors import ConfigError

TUNING_METRICS = ("auto", "accuracy", "loss")
# A grid is a handful of values per key; a product this large is a mistake (a list pasted
# into the wrong key), and planning it would take minutes before saying so.
MAX_POINTS = 256
# Set by every cell itself (task, policy, seed, one env...): not part of a training recipe.
CELL_SECTION = "run"


@define
class TuningFile:
    """The ``[tuning]`` table of an experiment file."""

    seeds: list[int] = options_field(
        [],
        each(in_range(0, integer=True)),
        "The tuning seeds (never evaluation seeds), e.g. [100, 101, 102].",
    )
    metric: str = options_field(
        "auto",
        one_of(*TUNING_METRICS),
        'What is searched for: "accuracy" (validation accuracy, higher is better), "loss" '
        '(validation loss, lower is better) or "auto" (loss for a language-model task).',
    )
    grid: dict[str, Any] = options_field(
        {}, doc='Dotted config keys and the values to try, e.g. { "training.lr" = [0.01, 0.1] }.'
    )


@frozen
class Tuning:
    """The checked search: seeds, metric setting and the grid's keys with their values."""

    seeds: tuple[int, ...]
    metric: str
    grid: dict[str, list[Any]]

    def points(self) -> list[dict[str, Any]]:
        return grid_points(self.grid)


def grid_points(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid's values, in grid order (the last key fastest)."""
    keys = list(grid)
    return [dict(zip(keys, values)) for values in itertools.product(*grid.values())]


def describe_point(point: dict[str, Any]) -> str:
    return ", ".join(f"{k}={json.dumps(v)}" for k, v in point.items())


def apply_point(data: dict[str, Any], point: dict[str, Any]) -> dict[str, Any]:
    """``data`` (plain config data) with each dotted key of ``point`` set, as ``--set`` does."""
    out = json.loads(json.dumps(data))  # a deep copy: the caller's data is shared by cells
    for key, value in point.items():
        node = out
        parts = key.split(".")
        for i, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                where = ".".join(parts[: i + 1])
                raise ConfigError(
                    [f"tuning.grid {json.dumps(key)}: {where} is a value, not a section"]
                )
            node = child
        node[parts[-1]] = value
    return out


def _flatten(grid: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    # `training.lr = [...]` unquoted is a nested table in TOML; "training.lr" quoted is not.
    out: list[tuple[str, Any]] = []
    for key, value in grid.items():
        here = f"{prefix}.{key}" if prefix else str(key)
        out += _flatten(value, here) if isinstance(value, dict) else [(here, value)]
    return out


def _grid(raw: dict[str, Any]) -> tuple[dict[str, list[Any]], list[str]]:
    grid: dict[str, list[Any]] = {}
    problems = []
    for key, values in _flatten(raw):
        shown = f"tuning.grid {json.dumps(key)}"
        if key in grid:
            problems.append(f"{shown}: given twice (quoted and as a nested table)")
        elif any(not part.strip() for part in key.split(".")):
            problems.append(f'{shown}: expected a dotted config key such as "training.grad_clip"')
        elif key.split(".")[0] == CELL_SECTION:
            problems.append(
                f"{shown}: the run section is set by each cell (task, policy, seed); "
                "search the training recipe instead"
            )
        elif not isinstance(values, list):
            problems.append(f"{shown}: expected a list of values to try, got {json.dumps(values)}")
        elif not values:
            problems.append(f"{shown}: expected at least one value to try, got an empty list")
        else:
            grid[key] = values
    return grid, problems


def _config_problems(base: RunConfig, grid: dict[str, list[Any]]) -> list[str]:
    """Each value set alone on the shared config, then (when those pass) each whole point,
    built by the config loader: what `--set KEY=VALUE` would say, naming the key."""
    data = config_to_dict(base)
    data.pop("schema_version", None)

    def problems_of(point: dict[str, Any], shown: str) -> list[str]:
        try:
            structure(apply_point(data, point), RunConfig)
        except ConfigError as exc:
            return [f"{shown}: {p}" for p in exc.problems]
        return []

    single = [
        p
        for key, values in grid.items()
        for value in values
        for p in problems_of({key: value}, f"tuning.grid {json.dumps(key)} = {json.dumps(value)}")
    ]
    if single:
        return list(dict.fromkeys(single))
    return [
        p
        for point in grid_points(grid)
        for p in problems_of(point, f"tuning.grid point ({describe_point(point)})")
    ]


def check_tuning(
    spec: TuningFile | None, base: RunConfig, evaluation: Sequence[int]
) -> tuple[Tuning | None, list[str]]:
    """The search, or what is wrong with it: no seeds, seeds that are evaluation seeds
    (``evaluation``), no grid, keys or values the config refuses, too many points."""
    if spec is None:
        return None, []
    problems = []
    if not spec.seeds:
        problems.append("tuning.seeds: expected at least one seed, e.g. seeds = [100, 101, 102]")
    repeated = sorted({s for s in spec.seeds if spec.seeds.count(s) > 1})
    if repeated:
        problems.append(f"tuning.seeds: {', '.join(map(str, repeated))} listed more than once")
    shared = sorted(set(spec.seeds) & set(evaluation))
    if shared:
        problems.append(
            f"tuning.seeds: {', '.join(map(str, shared))} "
            f"{'is an evaluation seed' if len(shared) == 1 else 'are evaluation seeds'} "
            f"(run.seed {evaluation[0]} to {evaluation[-1]}); results must come from seeds "
            "nothing was tuned on: pick other tuning seeds"
        )
    grid, grid_problems = _grid(spec.grid)
    problems += grid_problems
    if not spec.grid:
        problems.append(
            'tuning.grid: expected at least one key, e.g. "training.grad_clip" = [0.5, 1.0]'
        )
    size = 1
    for values in grid.values():
        size *= len(values)
    if size > MAX_POINTS:
        problems.append(
            f"tuning.grid: {size} points (the product of the lists); at most {MAX_POINTS}"
        )
    elif grid and not grid_problems:
        problems += _config_problems(base, grid)
    if problems:
        return None, problems
    return Tuning(tuple(spec.seeds), spec.metric, grid), []
