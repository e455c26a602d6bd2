"""TensorBoard files, read back with tensorboard's own EventAccumulator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from esper_telemetry.tensorboard_writer import TensorBoardBackend, TensorBoardOptions

from esper_core import TelemetryContext
from tests.plugins.esper_telemetry.helpers import feed, synthetic_batches


def accumulator(logdir: Path) -> Any:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    # 0 = keep every event (the default samples scalars down to a reservoir)
    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def scalars(acc: Any, tag: str) -> list[tuple[int, float]]:
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def test_scalars_text_hparams_and_ppo_with_their_steps(tmp_path: Path) -> None:
    backend = TensorBoardBackend(
        TensorBoardOptions(), TelemetryContext(run_dir=tmp_path, quiet=True)
    )
    batches = synthetic_batches(n_envs=2, episodes=2, max_epochs=4, mode="train")
    feed(backend, batches)
    backend.close()
    acc = accumulator(tmp_path / "tensorboard")
    tags = acc.Tags()
    for tag in (
        "env0/val_acc",
        "env1/val_acc",
        "mean/val_acc",
        "env0/reward/accuracy",
        "mean/reward/rent",
        "env0/test_acc",
        "env1/alpha/r0c0",
        "episode/env0/final_val_acc",
        "episode/mean/total_reward",
        "ppo/policy_loss",
        "ppo/entropy",
        "hparams/final_test_acc_mean",
    ):
        assert tag in tags["scalars"], tag
    # global epoch = episode * max_epochs + epoch: 1..8 over two episodes of 4 epochs
    assert [s for s, _ in scalars(acc, "env0/val_acc")] == list(range(1, 9))
    assert scalars(acc, "env1/val_acc")[4] == (5, pytest.approx(40.0 + 1 + 1))
    means = dict(scalars(acc, "mean/val_acc"))
    assert means == {step: pytest.approx(40.0 + ((step - 1) % 4 + 1) + 0.5) for step in range(1, 9)}
    assert [s for s, _ in scalars(acc, "episode/mean/final_val_acc")] == [0, 1]
    assert scalars(acc, "episode/mean/final_val_acc")[0][1] == pytest.approx(80.5)
    assert scalars(acc, "ppo/policy_loss") == [(0, pytest.approx(0.0)), (1, pytest.approx(-0.1))]
    # lifecycle events as text, at the epoch they start
    assert "lifecycle/env0/text_summary" in tags["tensors"]
    texts = [
        (e.step, e.tensor_proto.string_val[0].decode())
        for e in acc.Tensors("lifecycle/env0/text_summary")
    ]
    assert texts[0][0] == 1 and "r0c0 germinated cnn/res" in texts[0][1]
    assert [step for step, _ in texts] == [1, 5]
    # the HParams dashboard: experiment, session start (with the flattened config) and end
    content = acc.PluginTagToContent("hparams")
    assert set(content) == {
        "_hparams_/experiment",
        "_hparams_/session_start_info",
        "_hparams_/session_end_info",
    }
    from tensorboard.plugins.hparams import plugin_data_pb2

    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    hparams = start.session_start_info.hparams
    assert hparams["training.lr"].number_value == pytest.approx(0.01)
    assert hparams["task"].string_value == "tiny"
    assert hparams["run.telemetry"].string_value == '["jsonl"]'


def test_per_env_curves_can_be_switched_off(tmp_path: Path) -> None:
    backend = TensorBoardBackend(
        TensorBoardOptions(per_env=False, hparams=False),
        TelemetryContext(run_dir=tmp_path, quiet=True),
    )
    feed(backend, synthetic_batches(n_envs=2, episodes=1, max_epochs=2))
    backend.close()
    tags = accumulator(tmp_path / "tensorboard").Tags()
    assert "mean/val_acc" in tags["scalars"]
    assert not [t for t in tags["scalars"] if t.startswith(("env", "episode/env"))]


def test_resume_truncates_and_removes_files_written_after_the_checkpoint(tmp_path: Path) -> None:
    batches = synthetic_batches(n_envs=2, episodes=2, max_epochs=4)
    whole = tmp_path / "whole"
    reference = TensorBoardBackend(
        TensorBoardOptions(), TelemetryContext(run_dir=whole, quiet=True)
    )
    feed(reference, batches)
    reference.close()  # flushed: the writer's queue would otherwise hold the last events

    part = tmp_path / "part"
    first = TensorBoardBackend(TensorBoardOptions(), TelemetryContext(run_dir=part, quiet=True))
    feed(first, batches[:4])
    state = first.state_dict()
    feed(first, batches[4:7])  # after the checkpoint; then the process dies
    first.close()
    # a resumed run that died again before its own first checkpoint left a file behind
    second = TensorBoardBackend(TensorBoardOptions(), TelemetryContext(run_dir=part, quiet=True))
    second.load_state_dict(state)
    feed(second, batches[4:6])
    second.close()
    assert len(list((part / "tensorboard").iterdir())) == 2

    resumed = TensorBoardBackend(TensorBoardOptions(), TelemetryContext(run_dir=part, quiet=True))
    resumed.load_state_dict(state)
    feed(resumed, batches[4:])
    resumed.close()
    full, cut = accumulator(whole / "tensorboard"), accumulator(part / "tensorboard")
    assert sorted(cut.Tags()["scalars"]) == sorted(full.Tags()["scalars"])
    for tag in full.Tags()["scalars"]:
        assert scalars(cut, tag) == scalars(full, tag), tag
    assert len(cut.Tensors("lifecycle/env1/text_summary")) == len(
        full.Tensors("lifecycle/env1/text_summary")
    )
