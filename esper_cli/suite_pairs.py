"""``esper train --suite SUITE``: the suite's training pairs as the run's ``train.pairs``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from esper_core.config import RunConfig


def with_suite_pairs(config: RunConfig, suite_path: str, pm: Any) -> RunConfig:
    """``config`` whose envs draw the suite's training pairs, each at the rate the
    suite's training-split benchmark tuned (``OUT/training/results.json``)."""
    from esper_core.benchmark.suite import build_suite, load_suite_file
    from esper_core.benchmark.train_pairs import TRAINING, training_pairs, tuned_rates
    from esper_core.converter import structure

    spec = load_suite_file(suite_path)
    suite = build_suite(spec, structure(dict(spec.config), RunConfig))
    root = Path(spec.out or f"runs/benchmark-{Path(suite_path).stem}")
    rates = tuned_rates(root / TRAINING / "results.json", suite_path)
    pairs = training_pairs(suite, rates, suite_path, spec.config)
    return attrs.evolve(config, train=attrs.evolve(config.train, pairs=pairs))
