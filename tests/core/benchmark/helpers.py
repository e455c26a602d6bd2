"""Suites and fake finished cells for the benchmark's tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from esper_core.benchmark.suite import PairEntry, Suite, SuiteFile, build_suite
from esper_core.compare.experiment import PolicyEntry
from esper_core.config import RunConfig
from esper_core.converter import structure

USER_MLP: dict[str, Any] = {
    "data": "examples.benchmark_models:tabular",
    "model": "examples.benchmark_models:mlp_wide",
    "slots": ["body.1", "body.3"],
    "topology": "mlp",
}


def suite(*pairs: PairEntry, **settings: Any) -> Suite:
    spec = SuiteFile(
        pairs=list(pairs),
        policies=[PolicyEntry(name="heuristic")],
        config={"env": {"max_epochs": 2, "max_batches": 2}},
        **settings,
    )
    return build_suite(spec, structure(spec.config, RunConfig))


def pair(label: str, task: str, split: str = "evaluation", **options: Any) -> PairEntry:
    return PairEntry(label=label, task=task, split=split, options=options, lr=[0.1])


def finished(directory: Path, val_acc: float, test_acc: float) -> None:
    """A completed cell's summary.json with these final values (what a cell reads back)."""
    directory.mkdir(parents=True)
    summary = {
        "status": "completed",
        "final_val_acc_mean": val_acc,
        "final_test_acc_mean": test_acc,
        "seeds_fossilized": 0,
        "seeds_pruned": 0,
        "wall_time": 1.0,
        "train_flops_mean": 100.0,
        "episodes": [{"final_val_loss": 1.0, "final_test_loss": 1.0}],
    }
    (directory / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
