"""Shared helpers: tiny in-process runs, time-free views of run files, wandb's offline files."""

from __future__ import annotations

import csv
import json
import struct
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from esper_core.config import load_config
from esper_core.plugins import PluginManager
from esper_core.run import api
from esper_core.run.run_dir import load_run_config

TESTS = Path(__file__).resolve().parents[2]
FAKE_PLUGIN = TESTS / "fake_plugin.py"
FAULTY_PLUGIN = Path(__file__).resolve().parent / "faulty_plugin.py"
BACKENDS = ("console", "jsonl", "csv", "tensorboard", "wandb")
TIME_KEYS = {"time", "wall_time", "epoch_time", "elapsed"}

TINY = {
    "run": {"task": "tiny", "policy": "scripted", "reward": "acc_delta"},
    "env": {"max_epochs": 12},
}
TINY_SETS = ["lifecycle.min_training_epochs=2"]


def plugin_manager(*extra: str) -> PluginManager:
    """Only the fake components, this plugin's backends and ``extra``: nothing else installed interferes."""
    names = [str(FAKE_PLUGIN), str(FAULTY_PLUGIN), *(f"telemetry.{b}" for b in BACKENDS), *extra]
    return PluginManager(extra=names, autoload=False)


def tiny_config(telemetry: Sequence[str], *sets: str) -> Any:
    overrides = [*TINY_SETS, f"run.telemetry={json.dumps(list(telemetry))}", *sets]
    return load_config(None, overrides, TINY)


def run_tiny(run_dir: Path, telemetry: Sequence[str], *sets: str) -> dict[str, Any]:
    return api.run(
        tiny_config(telemetry, *sets),
        plugin_manager(),
        run_dir=run_dir,
        quiet=True,
        notify=lambda _msg: None,
    )


def resume_tiny(run_dir: Path) -> dict[str, Any]:
    config = load_run_config(run_dir)
    return api.run(
        config, plugin_manager(), run_dir=run_dir, resume=True, quiet=True, notify=lambda _msg: None
    )


def without_time(value: Any) -> Any:
    """``value`` with every timing field removed, recursively."""
    if isinstance(value, dict):
        return {k: without_time(v) for k, v in value.items() if k not in TIME_KEYS}
    if isinstance(value, list):
        return [without_time(v) for v in value]
    return value


def jsonl_records(path: Path, drop: Sequence[str] = ("run_dir",)) -> list[dict[str, Any]]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = without_time(json.loads(line))
        for key in drop:
            row.pop(key, None)
        rows.append(row)
    return rows


def csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return [{k: v for k, v in row.items() if k not in TIME_KEYS} for row in csv.DictReader(fh)]


# ---------------------------------------------------------------- wandb offline files

_BLOCK = 32 * 1024
_HEADER = 7  # ":W&B", a 2-byte magic, a version byte


def _chunks(data: bytes) -> Iterator[bytes]:
    """Records of wandb's transaction log (the LevelDB log format: 32 KiB blocks of
    checksum(4) length(2) type(1) payload; FULL=1, FIRST=2, MIDDLE=3, LAST=4)."""
    assert data[:4] == b":W&B", "not a wandb transaction log"
    pos, pending = _HEADER, b""
    while pos + 7 <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        payload = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 1:
            yield payload
        elif kind == 2:
            pending = payload
        elif kind == 3:
            pending += payload
        elif kind == 4:
            yield pending + payload
            pending = b""


def _file_records(path: Path) -> list[tuple[str, Any]]:
    from wandb.proto import wandb_internal_pb2 as pb

    out: list[tuple[str, Any]] = []
    for chunk in _chunks(path.read_bytes()):
        record = pb.Record()
        record.ParseFromString(chunk)
        out.append((record.WhichOneof("record_type"), record))
    return out


def wandb_records(run_dir: Path, timeout: float = 60.0) -> list[tuple[str, Any]]:
    """(record type, record) of every offline run under ``run_dir/wandb``, in order.

    wandb's service process writes the log after ``run.finish()`` returns, so wait until
    every run's log ends with its ``exit`` record.
    """
    deadline = time.monotonic() + timeout
    paths = sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb"))
    while True:
        per_file = [_file_records(path) for path in paths]
        if all(records and any(kind == "exit" for kind, _ in records) for records in per_file):
            return [record for records in per_file for record in records]
        if time.monotonic() > deadline:
            raise AssertionError(f"wandb did not finish writing {paths} within {timeout} s")
        time.sleep(0.1)


def wandb_history(run_dir: Path) -> list[dict[str, Any]]:
    rows = []
    for kind, record in wandb_records(run_dir):
        if kind == "history":
            rows.append(
                {
                    item.key or "/".join(item.nested_key): json.loads(item.value_json)
                    for item in record.history.item
                }
            )
    return rows


# ---------------------------------------------------------------- synthetic event streams


def slot_summary(slot_id: str, stage: str, alpha: float = 0.0, seed: str | None = None) -> Any:
    from esper_core.run.telemetry import SlotSummary

    return SlotSummary(
        slot_id=slot_id,
        stage=stage,
        seed_id=seed,
        blueprint="cnn/res" if seed else None,
        alpha=alpha,
        contribution=1.25 if seed else None,
        seed_params=10 if seed else 0,
    )


def epoch_event(
    env: int,
    episode: int,
    epoch: int,
    *,
    components: dict[str, float] | None = None,
    update: int | None = None,
    test: bool = True,
) -> Any:
    from esper_core.run.telemetry import EpochCompleted

    components = (
        {"accuracy": 0.1 * epoch, "rent": -0.01 * env} if components is None else components
    )
    return EpochCompleted(
        env=env,
        episode=episode,
        epoch=epoch,
        train_loss=1.0 / epoch,
        train_acc=50.0 + epoch,
        val_loss=1.1 / epoch,
        val_acc=40.0 + epoch + env,
        test_loss=1.2 / epoch if test else None,
        test_acc=45.0 + epoch if test else None,
        action="WAIT",
        action_refused=None,
        reward=sum(components.values()),
        reward_components=components,
        host_params=100,
        seed_params=10,
        slots=[slot_summary("r0c0", "TRAINING", 0.0, "r0c0-s1"), slot_summary("r0c1", "DORMANT")],
        epoch_time=0.01,
        update=update,
    )


def run_started(n_envs: int = 2, episodes: int = 2, max_epochs: int = 4, mode: str = "run") -> Any:
    from esper_core.run.telemetry import RunStarted

    return RunStarted(
        run_name="synthetic",
        run_dir="/nowhere",
        mode=mode,
        task="tiny",
        policy="scripted",
        reward="acc_delta",
        executor="serial",
        n_envs=n_envs,
        episodes=episodes,
        max_epochs=max_epochs,
        slot_ids=["r0c0", "r0c1"],
        host_params=100,
        config={
            "run": {"seed": 3, "telemetry": ["jsonl"], "name": None},
            "training": {"lr": 0.01, "amp": "off"},
            "lifecycle": {"auto_advance": False},
        },
        esper_version="0.1.0",
    )


def synthetic_batches(
    n_envs: int = 2, episodes: int = 2, max_epochs: int = 4, mode: str = "run"
) -> list[list[Any]]:
    """What a run emits, one list per ``hub.emit`` call (each followed by a flush):
    RunStarted, then per epoch every env's events, a germination at each episode's start,
    an EpisodeFinished at its end, a PolicyUpdate after each episode when training, and
    RunFinished."""
    from esper_core.run.telemetry import EpisodeFinished, PolicyUpdate, RunFinished, SeedGerminated

    batches: list[list[Any]] = [[run_started(n_envs, episodes, max_epochs, mode)]]
    for episode in range(episodes):
        update = episode if mode == "train" else None
        for epoch in range(1, max_epochs + 1):
            batch: list[Any] = []
            for env in range(n_envs):
                if epoch == 1:
                    batch.append(
                        SeedGerminated(
                            env=env,
                            episode=episode,
                            epoch=0,
                            slot_id="r0c0",
                            seed_id="r0c0-s1",
                            blueprint="cnn/res",
                            style="linear_add",
                            tempo=5,
                            params=10,
                        )
                    )
                batch.append(epoch_event(env, episode, epoch, update=update))
                if epoch == max_epochs:
                    batch.append(
                        EpisodeFinished(
                            env=env,
                            episode=episode,
                            epochs=max_epochs,
                            final_val_acc=80.0 + env,
                            final_test_acc=81.0,
                            final_test_loss=0.5,
                            total_reward=1.5,
                            reward_components={"accuracy": 1.6, "rent": -0.1},
                            host_params=100,
                            params_added=10,
                            seeds_germinated=1,
                            seeds_fossilized=0,
                            seeds_pruned=0,
                            rollbacks=0,
                            refused_actions=0,
                            seed=env,
                            update=update,
                        )
                    )
            batches.append(batch)
        if mode == "train":
            batches.append(
                [
                    PolicyUpdate(
                        update=episode,
                        diagnostics={"policy_loss": -0.1 * episode, "entropy": 1.0 - 0.1 * episode},
                    )
                ]
            )
    batches.append(
        [
            RunFinished(
                status="completed",
                wall_time=1.0,
                summary={
                    "final_val_acc_mean": 80.5,
                    "final_test_acc_mean": 81.0,
                    "params_added_mean": 10.0,
                },
            )
        ]
    )
    return batches


def feed(backend: Any, batches: Sequence[Sequence[Any]]) -> None:
    for batch in batches:
        backend.handle(list(batch))
        backend.flush()
