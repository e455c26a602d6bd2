"""Every benchmark runs, in CI, in its ``--smoke`` mode: a few seconds, the same code
path and the same JSON keys as a real measurement. A benchmark that is never run rots
(``slot_overhead.py`` crashed for weeks after a lifecycle default changed while
BENCHMARKS.md still quoted it). Nothing here looks at a time: only that the script
finishes and prints what BENCHMARKS.md reads.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.plugin_set import REPO, subprocess_env

BENCHMARKS = REPO / "benchmarks"

# The summary of a ratio's repetitions (benchmarks/_spread.py).
SPREAD = {"median", "iqr", "ci95", "n", "values"}

# Per script: the keys its JSON must have, as dotted paths ("a.b": key b of object a;
# "a.*.b": key b of every value of object a, or of every element of list a). A key
# listed here is one BENCHMARKS.md or a reader of the JSON relies on.
EXPECTED: dict[str, list[str]] = {
    "own_model_spirals": [
        "args",
        "runs.*.test_acc",
        "runs.*.params",
        "runs.*.train_flops",
        "summary.heuristic.test_acc_iqm",
        "summary.wait.test_acc_iqm",
        "summary.heuristic_minus_wait.iqm",
        "summary.heuristic_minus_wait.ci95",
        "summary.heuristic_minus_wait.wins_ties_losses",
    ],
    "expansion_trace": [
        "args",
        *(
            f"epochs.*.{split}.{key}"
            for split in ("train", "val")
            for key in (
                "ratio",
                "ratio_relative",
                "host",
                "slot_score",
                "host_signal",
                "slot_signal",
                "loss",
            )
        ),
        "rescaled.*.ratio_relative",
    ],
    "cli_latency": ["benchmark", "load_average", "commands.*.wall_s", "commands.*.median_s"],
    "data_loader": [
        "torch",
        "threads",
        *[
            f"{size}.{key}"
            for size in ("digits", "cifar_sized")
            for key in (
                "samples",
                "batch_size",
                "tensor_loader_batches_per_s",
                "dataloader_batches_per_s",
                "dataloader_batched_batches_per_s",
                "ratio",
                "ratio_vs_batched",
                *(f"ratio_spread.{k}" for k in SPREAD),
            )
        ],
    ],
    "distributed_sps": [
        "sps_1_rank",
        "sps_2_ranks",
        "speedup",
        *(f"speedup_spread.{k}" for k in SPREAD),
        "peak_rss_mib_1_rank",
        "peak_rss_mib_per_rank_2_ranks",
        "runs",
    ],
    "ppo_greedy_check": [
        "runs.*.update",
        "runs.*.return",
        "runs.*.final_val_acc",
        "runs.*.params_added",
        "runs.*.pairs.*.return",
        "best",
    ],
    "ppo_training_episodes": [
        "runs.*.blocks.*.updates",
        *(f"runs.*.blocks.*.pairs.*.{k}" for k in ("episodes", "grew_host", "germinated")),
        *(f"runs.*.blocks.*.pairs.*.{k}" for k in ("final_val_acc", "flops_ratio", "return")),
    ],
    "ppo_price_break_even": ["runs", "from_update", "price", "pairs"],
    "controller_cells": [
        "source",
        *(
            f"pairs.*.*.{k}"
            for k in ("cells", "host_grown", "host_kept", "operators", "first_epochs")
        ),
        *(f"pairs.*.*.{k}" for k in ("seeds_only", "seed_params", "final_test_acc")),
        "pairs.*.*.by_seed.*.host_growths",
    ],
    "shared_epochs": [
        "args",
        "alone.wall_s",
        "epochs_ratio",
        "alone.epochs_trained",
        "shared.wall_s",
        "shared.epochs_trained",
        "time_ratio.median",
        "identical",
    ],
    "ppo_pretrained_grower": [
        "model",
        "runs.*.test_acc",
        "runs.*.params",
        "runs.*.train_flops",
        "summary.*.test_acc",
        "summary.*.params",
        "summary.*.train_flops",
    ],
    "grower_widen": [
        "model",
        "chosen_lr",
        "chosen_growth",
        "summary.*.arm",
        "summary.*.test_acc",
        "summary.*.params",
        "summary.*.train_flops",
    ],
    "grower_overhead": [
        "benchmark",
        "reps",
        "plain_epoch_s_median",
        "grower_epoch_s_median",
        *(f"ratio.{k}" for k in SPREAD),
        *(f"train_ratio.{k}" for k in SPREAD),
        "end_epoch_s_median",
        "plain_validation_s_median",
        "target",
        # The load it was measured under: on a shared machine the ratio means little
        # without it (the 1.03x target cannot be judged above the core count).
        "clock",
        "load_before",
        "load_after",
        "cores",
    ],
    "epoch_overhead": [
        "benchmark",
        "reps",
        "esper_epoch_s_median",
        "plain_epoch_s_median",
        "epoch_ratio_median",
        *(f"epoch_ratio.{k}" for k in SPREAD),
        "epoch_ratio_target",
        "controller_fraction_median",
        *(f"controller_fraction.{k}" for k in SPREAD),
        "controller_fraction_target",
        "load_average",
    ],
    "growth_study": ["benchmark", "rows.*.variant", "rows.*.test", "rows.*.vs", "markdown"],
    "heuristic_vs_wait": [
        "benchmark",
        "final_test_acc.heuristic",
        "final_test_acc.wait",
        "mean_final_test_acc.heuristic",
        "mean_final_test_acc.wait",
        "heuristic_wins",
        "acceptance.passed",
        "runs",
    ],
    "ppo_digits": [
        "benchmark",
        "train.wall_time_s",
        "train.curve",
        "compare",
        "ppo_minus_wait_iqm",
        "ppo_minus_heuristic_iqm",
        "accepted",
    ],
    "ppo_update": [
        "benchmark",
        "esper_samples_per_s",
        "cleanrl_samples_per_s",
        "speed_ratio",
        *(f"speed_ratio_spread.{k}" for k in SPREAD),
        "cleanrl_fused_adam_samples_per_s",
        "speed_ratio_same_optimizer",
        *(f"speed_ratio_same_optimizer_spread.{k}" for k in SPREAD),
        "load_average",
    ],
    "slot_overhead": [
        "empty_ratio",
        "isolation_ratio",
        *(f"{side}.{k}" for side in ("empty", "isolation") for k in ("ratio", "ratio_of_minimums")),
        *(f"{side}.paired_ratio.{k}" for side in ("empty", "isolation") for k in SPREAD),
        "load_average",
    ],
    "dry_run_estimate": [
        "benchmark",
        "estimate_s",
        "measured_wall_s",
        "measured_cpu_s",
        "runs",
        "runs_wall_time_s",
        "ratio",
        "cpu_ratio",
        "load_before",
    ],
    "task_cost": [
        "benchmark",
        "load_before",
        "load_after",
        *(
            f"tasks.*.{k}"
            for k in ("seconds_per_run", "seconds_per_sample", "seconds_per_gflop", "settings")
        ),
        *(f"tasks.*.sizes.*.{k}" for k in ("epoch_s", "setup_s", "epoch_samples", "epoch_gflop")),
    ],
    "telemetry_overhead": [
        "benchmark",
        "ratio_median",
        *(f"ratio.{k}" for k in SPREAD),
        "cpu_ratio_median",
        *(f"cpu_ratio.{k}" for k in SPREAD),
        "hub_fraction_median",
        *(f"hub_fraction.{k}" for k in SPREAD),
        "load_average",
    ],
    "gpu_streams": [
        "benchmark",
        "device",
        *(f"rows.*.{k}" for k in ("host", "envs", "executor", "samples_per_s", "host_s_per_epoch")),
        "profile.epoch_wall_ms",
        "profile.gpu_busy_fraction",
        "scaling.acceptance",
    ],
    "gpu_graph_step": [
        "benchmark",
        "device",
        "rows.*.envs",
        "rows.*.mode",
        "rows.*.samples_per_s",
        "scaling",
    ],
    "gpu_recipes": [
        "benchmark",
        "device",
        "epochs.*.setting",
        "epochs.*.gpu_s_per_epoch",
        "speedup_vs_fp32_eager",
        "runs.*.run_s",
        "runs.*.median_epoch_s",
    ],
    "thread_default": ["benchmark", "load_average", "settings.*.median_wall_s", "fastest"],
    "train_sps": [
        "benchmark",
        "rows.*.envs",
        "rows.*.executor",
        "rows.*.sps",
        "rows.*.loadavg_before",
        *(f"ratios.*.{k}" for k in SPREAD),
    ],
}


def scripts() -> list[str]:
    """Every benchmark script (``_name.py`` are their shared helpers)."""
    return sorted(p.stem for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_"))


def missing_keys(data: Any, path: str) -> list[str]:
    """The dotted ``path``'s parts that ``data`` lacks (empty when all are there)."""
    head, _, rest = path.partition(".")
    if head == "*":
        items = list(data.values()) if isinstance(data, dict) else data
        if not isinstance(items, list) or not items:
            return [f"* (no elements in {type(data).__name__})"]
        return [m for item in items for m in (missing_keys(item, rest) if rest else [])]
    if not isinstance(data, dict) or head not in data:
        return [head]
    return missing_keys(data[head], rest) if rest else []


def test_every_script_is_listed() -> None:
    """A new benchmark must say which keys its smoke run prints."""
    assert scripts() == sorted(EXPECTED)


def test_the_key_check_sees_nested_and_starred_paths() -> None:
    data = {"a": {"b": 1}, "rows": [{"x": 1}, {"y": 2}], "c": {"k": {"v": 1}}}
    assert missing_keys(data, "a.b") == []
    assert missing_keys(data, "a.z") == ["z"]
    assert missing_keys(data, "rows.*.x") == ["x"]
    assert missing_keys(data, "c.*.v") == []
    assert missing_keys(data, "nothing") == ["nothing"]


@pytest.mark.slow
@pytest.mark.benchmarks
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_benchmark_smoke(name: str, tmp_path: Path) -> None:
    """The script finishes in ``--smoke`` mode and prints JSON with every expected key."""
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / f"{name}.py"), "--smoke"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,  # nothing a benchmark writes lands in the repository
        # Benchmarks measure what a user has installed: every plugin, autoloaded.
        env={**subprocess_env(autoload=True), "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, f"{name}.py --smoke failed:\n{done.stderr[-4000:]}"
    try:
        result = json.loads(done.stdout)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"{name}.py --smoke printed no JSON ({exc}):\n{done.stdout}") from exc
    absent = {path: m for path in EXPECTED[name] if (m := missing_keys(result, path))}
    assert not absent, f"{name}.py --smoke lacks keys: {absent}"
