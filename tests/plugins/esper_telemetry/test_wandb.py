"""wandb in offline mode: the offline run files hold every metric, with per-group step metrics."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("wandb")

from esper_telemetry.wandb_logger import WandbBackend, WandbOptions

from esper_core import TelemetryContext
from tests.plugins.esper_telemetry.helpers import (
    feed,
    synthetic_batches,
    wandb_history,
    wandb_records,
)

GROUPS = {"epoch/": "global_epoch", "episode/": "episode_index", "ppo/": "ppo_update"}


def group_steps(rows: list[dict], prefix: str) -> list[int]:
    step_metric = GROUPS[prefix]
    return [row[step_metric] for row in rows if any(k.startswith(prefix) for k in row)]


def test_offline_run_holds_every_metric_group_with_its_own_step(tmp_path: Path) -> None:
    backend = WandbBackend(WandbOptions(), TelemetryContext(run_dir=tmp_path, quiet=True))
    feed(backend, synthetic_batches(n_envs=2, episodes=2, max_epochs=3, mode="train"))
    backend.close()
    assert list(tmp_path.glob("wandb/offline-run-*")), (
        "wandb did not write an offline run inside the run dir"
    )
    records = wandb_records(tmp_path)
    metrics = {
        (r.metric.name or r.metric.glob_name, r.metric.step_metric)
        for kind, r in records
        if kind == "metric"
    }
    for prefix, step_metric in GROUPS.items():
        assert (f"{prefix}*", step_metric) in metrics
    rows = wandb_history(tmp_path)
    assert group_steps(rows, "epoch/") == list(range(1, 7))
    assert group_steps(rows, "episode/") == [0, 1]
    assert group_steps(rows, "ppo/") == [0, 1]
    epoch_rows = [r for r in rows if "global_epoch" in r]
    first = epoch_rows[0]
    assert first["epoch/env0/val_acc"] == pytest.approx(41.0)
    assert first["epoch/env1/val_acc"] == pytest.approx(42.0)
    assert first["epoch/mean/val_acc"] == pytest.approx(41.5)
    assert first["epoch/total/germinated"] == 2
    assert epoch_rows[1]["epoch/total/germinated"] == 0
    assert first["epoch/env1/reward/rent"] == pytest.approx(-0.01)
    ppo = [r for r in rows if "ppo_update" in r]
    assert ppo[1]["ppo/entropy"] == pytest.approx(0.9)
    config = next(r for kind, r in records if kind == "run").run.config
    keys = {item.key for item in config.update}
    assert {"run", "training", "esper"} <= keys
    summary = {
        item.key: item.value_json
        for kind, r in records
        if kind == "summary"
        for item in r.summary.update
    }
    assert summary.get("final_test_acc_mean") == "81.0"
    assert summary.get("status") == '"completed"'


def test_a_resumed_run_neither_repeats_nor_loses_steps(tmp_path: Path) -> None:
    batches = synthetic_batches(n_envs=1, episodes=1, max_epochs=6)
    first = WandbBackend(WandbOptions(), TelemetryContext(run_dir=tmp_path, quiet=True))
    feed(first, batches[:3])  # RunStarted + epochs 1-2
    state = first.state_dict()
    feed(first, batches[3:5])  # epochs 3-4 are logged, then the process dies
    first.close()
    resumed = WandbBackend(WandbOptions(), TelemetryContext(run_dir=tmp_path, quiet=True))
    resumed.load_state_dict(state)
    feed(resumed, batches[3:])  # the resumed run replays epochs 3.. from the checkpoint
    resumed.close()
    runs = sorted(tmp_path.glob("wandb/offline-run-*"))
    assert len(runs) == 2 and all(
        r.name.endswith(state["run_id"]) or state["run_id"] in r.name for r in runs
    )
    assert group_steps(wandb_history(tmp_path), "epoch/") == [1, 2, 3, 4, 5, 6]


def test_options_are_validated() -> None:
    from esper_core.converter import structure
    from esper_core.errors import ConfigError

    with pytest.raises(ConfigError, match="mode: expected one of offline, online, disabled"):
        structure({"mode": "cloud"}, WandbOptions, path="telemetry.wandb")
