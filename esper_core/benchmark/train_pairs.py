"""A suite's training pairs as ``train.pairs`` (``esper train --suite``): a controller
trains on the hosts set aside for training, each at the rate the benchmark tuned for it
on the tuning seeds, and never sees an evaluation pair."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from esper_core.benchmark.suite import Suite
from esper_core.config_io import merge
from esper_core.config_train import TrainPair
from esper_core.errors import ConfigError

TRAINING = "training"


def tuned_rates(results_json: Path, suite_path: str) -> dict[str, float]:
    """Each training pair's tuned rate from the training split's ``results.json``."""
    hint = f"run `esper benchmark {suite_path} --split training` first (it tunes each pair's rate)"
    if not results_json.is_file():
        raise ConfigError([f"no tuned rates for the training pairs in {results_json}: {hint}"])
    data = json.loads(results_json.read_text(encoding="utf-8"))
    if data.get("split") != TRAINING:
        raise ConfigError([f"{results_json} is the {data.get('split')!r} split's, not training's"])
    rates = {p["label"]: p["lr"] for p in data.get("pairs", []) if p.get("lr") is not None}
    return {label: float(lr) for label, lr in rates.items()}


def shared_config(suite_config: Mapping[str, Any]) -> dict[str, Any]:
    """What every pair takes from the suite's ``[config]``, as the suite file writes it
    (a key it does not set stays the run's): all but its ``run`` table, whose seed is the
    evaluation seeds', never a training run's."""
    return {k: v for k, v in suite_config.items() if k not in ("run", "train", "policies")}


def training_pairs(
    suite: Suite,
    rates: Mapping[str, float],
    suite_path: str,
    suite_config: Mapping[str, Any] | None = None,
) -> list[TrainPair]:
    """The suite's training pairs, each a partial run config at its tuned rate, over
    what the suite's raw ``[config]`` (``suite_config``) sets."""
    pairs = suite.split(TRAINING)
    if not pairs:
        raise ConfigError([f'{suite_path} has no training pairs (split = "training")'])
    missing = [p.task.label for p in pairs if p.task.label not in rates]
    if missing:
        raise ConfigError(
            [
                f"no tuned rate for training pairs {', '.join(missing)}: finish "
                f"`esper benchmark {suite_path} --split training` first"
            ]
        )
    shared = shared_config(suite_config or {})
    out = []
    for pair in pairs:
        arm = pair.task
        own = {
            "run": {"task": arm.spec},
            "tasks": {arm.name: dict(arm.options)},
            "training": {"lr": rates[arm.label]},
        }
        out.append(TrainPair(label=arm.label, config=merge(merge(shared, pair.config), own)))
    return out
