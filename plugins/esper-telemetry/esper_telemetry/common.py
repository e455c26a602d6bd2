"""Pieces shared by the backends: run facts, step numbering, per-step means, config flattening."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from attrs import define, field

from esper_core.converter import converter
from esper_core.errors import RunDirError
from esper_core.run.telemetry import (
    EpisodeFinished,
    EpochCompleted,
    Event,
    GovernorRollback,
    RunStarted,
    SeedFossilized,
    SeedGerminated,
    SeedPruned,
)


@define
class RunInfo:
    """What a backend needs to know about the run, taken from ``RunStarted``.

    A resumed run does not emit ``RunStarted`` again, so backends keep this in their
    ``state_dict()`` and get it back from the checkpoint.
    """

    run_name: str = ""
    mode: str = "run"
    task: str = ""
    policy: str = ""
    reward: str = ""
    n_envs: int = 1
    outer_total: int = 1  # episodes (``esper run``) or PPO updates (``esper train``)
    max_epochs: int = 1
    slot_ids: list[str] = field(factory=list)
    episodes_per_update: int = 1  # rollout episodes per PPO update (train)

    @classmethod
    def from_event(cls, event: RunStarted) -> RunInfo:
        return cls(
            run_name=event.run_name,
            mode=event.mode,
            task=event.task,
            policy=event.policy,
            reward=event.reward,
            n_envs=event.n_envs,
            outer_total=event.episodes,
            max_epochs=event.max_epochs,
            slot_ids=list(event.slot_ids),
            episodes_per_update=max(event.episodes_per_update, 1),
        )

    @property
    def outer_name(self) -> str:
        return "update" if self.mode == "train" else "episode"

    def global_epoch(self, episode: int, epoch: int) -> int:
        """Epochs done since the run began: the x axis shared by every epoch metric.

        Episode ``k`` (or PPO update ``k``, whose episodes carry index ``k``) covers
        ``k * max_epochs + 1 ... (k + 1) * max_epochs``, so the step increases across
        episodes and never repeats.
        """
        return episode * self.max_epochs + epoch

    def to_state(self) -> dict[str, Any]:
        state: dict[str, Any] = converter.unstructure(self)
        return state

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> RunInfo:
        return converter.structure(state, cls)


def need_run_dir(run_dir: Path | None, backend: str) -> Path:
    if run_dir is None:
        raise RunDirError(f"telemetry backend {backend!r} writes files and needs a run directory")
    return Path(run_dir)


def finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def epoch_metrics(event: EpochCompleted) -> dict[str, float]:
    """The scalar metrics of one env's epoch, by name (test metrics only when measured)."""
    out = {
        "train_loss": event.train_loss,
        "train_acc": event.train_acc,
        "val_loss": event.val_loss,
        "val_acc": event.val_acc,
        "reward": event.reward,
        "seed_params": float(event.seed_params),
    }
    if event.test_loss is not None:
        out["test_loss"] = event.test_loss
    if event.test_acc is not None:
        out["test_acc"] = event.test_acc
    for name, value in event.reward_components.items():
        out[f"reward/{name}"] = value
    return out


def episode_metrics(event: EpisodeFinished) -> dict[str, float]:
    out = {
        "final_val_acc": event.final_val_acc,
        "total_reward": event.total_reward,
        "params_added": float(event.params_added),
        "seeds_germinated": float(event.seeds_germinated),
        "seeds_fossilized": float(event.seeds_fossilized),
        "seeds_pruned": float(event.seeds_pruned),
        "rollbacks": float(event.rollbacks),
        "refused_actions": float(event.refused_actions),
    }
    if event.final_test_acc is not None:
        out["final_test_acc"] = event.final_test_acc
    if event.final_test_loss is not None:
        out["final_test_loss"] = event.final_test_loss
    return out


class StepMeans:
    """Per-env values of each step, averaged over the envs when the epoch is complete.

    Values are added as the events arrive; ``drain()`` (called from the backend's
    ``flush()``, i.e. once every env has finished the epoch) returns one mean per metric
    and step, in step order, so run-level curves never mix epochs.
    """

    def __init__(self) -> None:
        self._values: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))

    def add(self, step: int, metrics: dict[str, float]) -> None:
        row = self._values[step]
        for name, value in metrics.items():
            if finite(value):
                row[name].append(float(value))

    def drain(self) -> list[tuple[int, dict[str, float]]]:
        out = [
            (step, {name: sum(vals) / len(vals) for name, vals in row.items() if vals})
            for step, row in sorted(self._values.items())
        ]
        self._values.clear()
        return out


def flatten_config(config: dict[str, Any], prefix: str = "") -> dict[str, bool | int | float | str]:
    """Nested config tables as ``section.key`` scalars (lists as JSON text, ``None`` dropped)."""
    out: dict[str, bool | int | float | str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten_config(value, f"{name}."))
        elif value is None:
            continue
        elif isinstance(value, bool | int | float | str):
            out[name] = value
        else:
            out[name] = json.dumps(value, default=str)
    return out


def describe_lifecycle(event: Event) -> str | None:
    """A one-line description of a lifecycle event, or None for other events."""
    if isinstance(event, SeedGerminated):
        what = f"{event.slot_id} germinated {event.blueprint} ({event.style}, tempo {event.tempo})"
    elif isinstance(event, SeedFossilized):
        contribution = (
            "" if event.contribution is None else f", contribution {event.contribution:+.2f} pts"
        )
        what = f"{event.slot_id} fossilized {event.blueprint}{contribution}"
    elif isinstance(event, SeedPruned):
        what = f"{event.slot_id} pruned {event.blueprint} from {event.stage} ({event.reason})"
    elif isinstance(event, GovernorRollback):
        what = f"governor rollback to epoch {event.snapshot_epoch}: {event.reason}"
    else:
        return None
    return f"env {event.env} ep {event.episode} epoch {event.epoch}: {what}"


def lifecycle_epoch(event: Event) -> int:
    """The (1-based) epoch whose ``EpochCompleted`` a lifecycle event belongs with.

    Lifecycle events carry the epoch boundary they happened at: an action (germinate,
    fossilize, prune) at boundary ``k`` starts epoch ``k + 1``; a governor rollback, and
    the prunes it causes, end epoch ``k``.
    """
    epoch: int = event.epoch  # type: ignore[attr-defined]
    if isinstance(event, GovernorRollback) or (
        isinstance(event, SeedPruned) and event.reason in ("rollback", "non_finite")
    ):
        return epoch
    return epoch + 1
