"""The CUDA paths of every executor on a real GPU: one GradScaler per env, no host sync
inside an epoch but the one fetch, and the distributed executor's NCCL group.

Skipped without a CUDA device; CPU doubles of the same rules live in test_streams.py
(stream ordering with a recording double) and tests/core/test_device_traffic.py.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.plugins.esper_streams.helpers import drive, make_config, make_envs

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

N_ENVS = 3


def _executor(name: str, config: Any) -> Any:
    from esper_streams.distributed import DistributedExecutor, DistributedOptions
    from esper_streams.streams import StreamsExecutor, StreamsOptions

    from esper_core.run.executor import SerialExecutor
    from esper_core.run.resolve import executor_context

    context = executor_context(config)
    if name == "serial":
        return SerialExecutor(None, context)
    if name == "streams":
        return StreamsExecutor(StreamsOptions(), context)
    # One rank, no process group: the env path every rank runs for the envs it owns.
    return DistributedExecutor(DistributedOptions(), context)


class FetchCounter:
    """``Tensor.tolist`` with sync checking paused: fetch's one read, counted."""

    def __init__(self) -> None:
        self.reads = 0
        original = torch.Tensor.tolist

        def tolist(tensor: torch.Tensor) -> Any:  # a function, so it binds as a method
            if tensor.is_cuda:
                self.reads += 1
            mode = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode(0)
            try:
                return original(tensor)
            finally:
                torch.cuda.set_sync_debug_mode(mode)

        self.tolist = tolist


@pytest.mark.parametrize("amp", ["off", "bf16", "fp16"])
@pytest.mark.parametrize("executor_name", ["serial", "streams", "distributed"])
def test_an_epoch_syncs_with_the_host_only_in_its_fetch(
    executor_name: str, amp: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = make_config(f"run.n_envs={N_ENVS}", "run.device=cuda:0", f"training.amp={amp}")
    executor = _executor(executor_name, config)
    envs = make_envs(config, executor.env_devices(N_ENVS))
    drive(executor, envs, epochs=1)  # warm-up: allocator, cuBLAS handles, lazy init
    counter = FetchCounter()
    monkeypatch.setattr(torch.Tensor, "tolist", counter.tolist)
    epochs = 3  # the scripted policy germinates, so seeds train and blend in these
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            drive(executor, envs, epochs=epochs)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    syncs = [
        f"{w.filename}:{w.lineno}: {w.message}"
        for w in caught
        if "called a synchronizing" in str(w.message)
    ]
    assert not syncs, "host syncs inside the epoch:\n" + "\n".join(syncs)
    # serial reads each env as it ends its epoch; streams and a rank read all at once.
    expected = epochs * N_ENVS if executor_name == "serial" else epochs
    assert counter.reads == expected
    executor.close()


def test_each_env_steps_its_own_grad_scaler_on_its_stream() -> None:
    from esper_streams.streams import StreamsExecutor, StreamsOptions

    from esper_core.run.resolve import executor_context

    config = make_config(f"run.n_envs={N_ENVS}", "run.device=cuda:0", "training.amp=fp16")
    executor = StreamsExecutor(StreamsOptions(), executor_context(config))
    envs = make_envs(config, executor.env_devices(N_ENVS))
    drive(executor, envs, epochs=3)
    torch.cuda.synchronize()
    scalers = [env.trainer.scaler for env in envs]
    assert len({id(s) for s in scalers}) == N_ENVS
    assert all(s.is_enabled() for s in scalers)
    # Each scale has moved from its initial value only through that env's own steps
    # (growth_interval is 2000 steps, so in three epochs it can only have halved).
    assert all(0.0 < s.get_scale() <= 65536.0 for s in scalers)
    # A scaler's inf check is its env's alone: backing one off leaves the others be.
    before = [s.get_scale() for s in scalers[1:]]
    scalers[0].update(new_scale=1.0)
    assert [s.get_scale() for s in scalers[1:]] == before


@pytest.mark.skipif(
    os.environ.get("CUBLAS_WORKSPACE_CONFIG") not in (":4096:8", ":16:8"),
    reason="deterministic cuBLAS needs CUBLAS_WORKSPACE_CONFIG=:4096:8 before CUDA starts",
)
def test_fp32_streams_match_serial_bit_for_bit_with_deterministic_kernels() -> None:
    from esper_streams.streams import StreamsExecutor, StreamsOptions

    from esper_core.run.executor import SerialExecutor
    from esper_core.run.resolve import executor_context

    config = make_config(f"run.n_envs={N_ENVS}", "run.device=cuda:0")
    gpu = torch.device("cuda", 0)
    torch.use_deterministic_algorithms(True, warn_only=False)
    try:
        serial = drive(
            SerialExecutor(None, executor_context(config)), make_envs(config, [gpu] * 3), 3
        )
        streams = drive(
            StreamsExecutor(StreamsOptions(), executor_context(config)),
            make_envs(config, [gpu] * 3),
            3,
        )
    finally:
        torch.use_deterministic_algorithms(False)
    for a_step, b_step in zip(serial, streams, strict=True):
        for a, b in zip(a_step, b_step, strict=True):
            assert (a.metrics.val_loss, a.metrics.train_loss, a.reward) == (
                b.metrics.val_loss,
                b.metrics.train_loss,
                b.reward,
            )


def test_distributed_runs_one_rank_over_nccl_on_the_gpu(tmp_path: Path) -> None:
    from tests.plugins.esper_streams.test_distributed import DIST, RUN, _cli

    done = _cli(
        *RUN,
        "--out",
        str(tmp_path / "run"),
        *DIST,
        "--nproc",
        "1",
        "--device",
        "cuda:0",
        "--set",
        "executors.distributed.timeout=60",
    )
    assert done.exit_code == 0, done.output
    assert (tmp_path / "run" / "summary.json").is_file()
