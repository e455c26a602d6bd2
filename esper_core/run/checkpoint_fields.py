"""The range of every number a resumed run reads from its checkpoint.

The digest of a checkpoint (:mod:`~esper_core.run.content_digest`) detects corruption,
not forgery: it is unkeyed, so a tool that edits a checkpoint and recomputes it (or a
bug that writes a wrong value) produces a checkpoint that passes. What such a value can
do is bounded here instead, before it is used: an episode counter beyond the run's
length would end it early and report success; an epoch outside ``0..max_epochs`` would
skip an episode's training or fail deep in the env; a NaN ``elapsed`` would reach
summary.json. Each is refused in one line naming the field and its range.

:func:`check_fields` needs only the checkpoint (it runs before anything the config names
is built); :func:`check_progress` needs the episode length and the rollout size, which
only the built envs and policy know.
"""

from __future__ import annotations

import math
import numbers
from pathlib import Path
from typing import Any

from esper_core.errors import CheckpointError

# The length of the run in its config, by mode: what the episode (update) counter counts to.
PLANNED: dict[str, tuple[str, str]] = {"run": ("run", "episodes"), "train": ("train", "updates")}
# Counters of an env's episode (EpisodeStats) that count events, never below zero.
COUNTERS = (
    "plateau_epochs",
    "n_germinated",
    "n_fossilized",
    "n_pruned",
    "n_refused",
    "n_gate_failures",
    "train_flops",
    "train_samples",
)


def check_fields(data: dict[str, Any], path: Path, mode: str) -> None:
    """Refuse a checkpoint whose counters, clock or lists lie outside what a run writes."""
    section, key = PLANNED[mode]
    planned = _planned(data, section, key)
    _whole(data, "outer", path, 0, planned)
    _whole(data, "epoch", path, 0, _planned(data, "env", "max_epochs"))
    _whole(data, "rollout_episode", path, 0, None, default=0)
    elapsed = data["elapsed"]
    if not _real(elapsed) or not math.isfinite(elapsed) or elapsed < 0:
        raise _out_of_range(path, "elapsed", elapsed, "a finite number of seconds >= 0")
    for name in ("episodes", "updates", "evaluations", "host_growths"):
        value = data.get(name, [])
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise _out_of_range(path, name, type(value).__name__, "a list of records")
    envs = data["envs"]
    if not isinstance(envs, list) or not all(isinstance(env, dict) for env in envs):
        raise _out_of_range(path, "envs", type(envs).__name__, "a list of env states")
    if data["epoch"] > 0:  # at epoch 0 a resume resets the envs instead of loading them
        for index, env in enumerate(envs):
            _check_env(env, f"envs[{index}]", path, data["epoch"])


def check_progress(
    data: dict[str, Any], path: Path, max_epochs: int, episodes_per_update: int
) -> None:
    """Refuse a position the built run cannot be at: an epoch past its episodes' length,
    a rollout episode past its rollout."""
    _whole(data, "epoch", path, 0, max_epochs)
    _whole(data, "rollout_episode", path, 0, episodes_per_update - 1, default=0)


def check_env_state(env: Any, where: str, source: str, max_epochs: int) -> None:
    """Refuse an env state (e.g. a Grower's) whose epoch lies outside ``0..max_epochs`` or
    whose counters and reward totals lie outside what an env writes. ``source`` names it
    in the message ("the grower state")."""
    if not isinstance(env, dict):
        raise _out_of_range(source, where, type(env).__name__, "a table")
    _whole(env, "epoch", source, 0, max_epochs, where=where)
    _check_env(env, where, source, env["epoch"])


def _check_env(env: dict[str, Any], where: str, path: Path | str, epoch: int) -> None:
    if env.get("epoch") != epoch:
        raise _out_of_range(path, f"{where}.epoch", env.get("epoch"), f"{epoch}, the run's epoch")
    for name in ("seed", "episode"):
        _whole(env, name, path, 0, None, where=where)
    counters = env.get("counters")
    if not isinstance(counters, dict):
        raise _out_of_range(path, f"{where}.counters", type(counters).__name__, "a table")
    for name in COUNTERS:
        _whole(counters, name, path, 0, None, where=f"{where}.counters", default=0)
    components = counters.get("reward_components", {})
    rewards = {"reward_total": counters.get("reward_total", 0.0)}
    if isinstance(components, dict):
        rewards.update({f"reward_components.{k}": v for k, v in components.items()})
    for name, value in rewards.items():
        if not _real(value) or not math.isfinite(value):
            raise _out_of_range(path, f"{where}.counters.{name}", value, "a finite number")


def _planned(data: dict[str, Any], section: str, key: str) -> int | None:
    """The saved config's ``section.key`` when it is a whole number (the config check has
    held it against the run's own)."""
    config = data.get("config")
    value = config.get(section, {}).get(key) if isinstance(config, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _whole(
    data: dict[str, Any],
    name: str,
    path: Path | str,
    low: int,
    high: int | None,
    where: str = "",
    default: int | None = None,
) -> None:
    value = data.get(name, default)
    field = f"{where}.{name}" if where else name
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise _out_of_range(path, field, value, _range(low, high))
    if high is not None and value > high:
        raise _out_of_range(path, field, value, _range(low, high))


def _range(low: int, high: int | None) -> str:
    return f"a whole number in {low}..{high}" if high is not None else f"a whole number >= {low}"


def _real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _out_of_range(path: Path | str, field: str, value: Any, expected: str) -> CheckpointError:
    """``path``: the checkpoint file, or (a str) what else holds the state."""
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    if isinstance(path, Path):
        return CheckpointError(
            f"checkpoint {path} holds {field} = {shown}, but a run writes {expected}: it was "
            "edited or written by another tool; resume from an intact copy, or start a new run"
        )
    return CheckpointError(
        f"{path} holds {field} = {shown}, but Esper writes {expected}: it was edited or "
        "written by another tool; load an intact copy"
    )
