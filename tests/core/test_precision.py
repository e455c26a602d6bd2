"""Mixed precision on the CPU with an enabled GradScaler (the same class as on CUDA):
a whole lifecycle under fp16, and no host synchronisation in the batch path."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pytest
import torch

from esper_core.env.optimizers import make_optimizer
from esper_core.env.training import EpochTrainer
from esper_core.lifecycle.actions import WAIT, LifecycleOp
from esper_core.lifecycle.rules import COOLDOWN_STAGES
from esper_core.lifecycle.stages import Stage
from esper_core.run.telemetry import SeedPruned
from tests.fakes import allow_fp16_on_cpu, drive_to, make_env


@pytest.fixture
def fp16_env(monkeypatch: pytest.MonkeyPatch) -> Any:
    allow_fp16_on_cpu(monkeypatch)
    env = make_env('training.amp="fp16"', "env.max_epochs=30")
    assert env.trainer.scaler.is_enabled() and env.trainer.amp_dtype == torch.float16
    return env


def test_fp16_runs_a_whole_lifecycle_with_an_enabled_scaler(fp16_env: Any) -> None:
    """GERMINATED seeds have no gradient; stepping their optimizer through the scaler
    used to assert 'No inf checks were recorded for this optimizer'."""
    env = fp16_env
    results = drive_to(env, "r0c0", "FOSSILIZED")  # germinate, train, blend, hold, fossilize
    stages = [
        {s.to_stage for s in r.events if hasattr(s, "to_stage") and s.slot_id == "r0c0"}
        for r in results
    ]
    assert {"GERMINATED", "TRAINING", "BLENDING", "HOLDING", "FOSSILIZED"} <= set().union(*stages)
    space = env.space
    env.step(space.germinate("r0c1", "res_random"))
    env.step(space.on_slot(LifecycleOp.ADVANCE, "r0c1"))
    env.step(WAIT)
    assert env.model.slot("r0c1").stage == Stage.TRAINING
    # The training seed really stepped: its weights moved away from their germination.
    before = {k: v.clone() for k, v in env.model.slot("r0c1").seed.state_dict().items()}
    result = env.step(WAIT)
    after = env.model.slot("r0c1").seed.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    result = env.step(space.on_slot(LifecycleOp.PRUNE, "r0c1"))
    assert [e.reason for e in result.events if isinstance(e, SeedPruned)] == ["policy"]
    assert env.model.slot("r0c1").stage in COOLDOWN_STAGES
    assert env.model.slot("r0c0").stage == Stage.FOSSILIZED
    assert math.isfinite(result.metrics.train_loss) and math.isfinite(result.metrics.val_loss)
    assert not any(r.rolled_back for r in results) and not result.rolled_back


def test_fp16_optimizers_take_the_inf_check_on_the_device(fp16_env: Any) -> None:
    trainer: EpochTrainer = fp16_env.trainer
    drive_to(fp16_env, "r0c0", "TRAINING")
    opts = [trainer.host_optimizer, *(s.optimizer for s in trainer.seed_optimizers.values())]
    assert all(opt.defaults["fused"] for opt in opts)
    # Zero momentum buffers from the start: a first step skipped for an inf must not
    # leave the fused kernel's uninitialised buffers behind.
    groups = [{"params": [torch.nn.Parameter(torch.ones(3))], "weight_decay": 0.0}]
    fresh = make_optimizer(groups, trainer.recipe, fused=True)
    (buffer,) = [s["momentum_buffer"] for s in fresh.state.values()]
    assert torch.equal(buffer, torch.zeros(3))


def test_a_step_skipped_for_an_inf_changes_no_weight_and_no_momentum(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    allow_fp16_on_cpu(monkeypatch)
    env = make_env('training.amp="fp16"')
    trainer: EpochTrainer = env.trainer
    host = {k: v.detach().clone() for k, v in env.model.host.named_parameters()}
    trainer.begin_epoch()
    inputs = torch.full((8, 1, 4, 4), float("inf"))
    trainer.train_batch(inputs, torch.zeros(8, dtype=torch.long))
    assert all(torch.equal(host[k], v) for k, v in env.model.host.named_parameters())
    for state in trainer.host_optimizer.state.values():
        assert torch.equal(state["momentum_buffer"], torch.zeros_like(state["momentum_buffer"]))
    assert trainer.scaler.get_scale() < 65536.0  # the scaler saw the inf and backed off


SYNCING = ("item", "tolist", "__bool__", "__float__", "__int__", "__index__", "numpy", "cpu")


@pytest.mark.parametrize("amp", ["off", "bf16", "fp16"])
def test_the_batch_path_never_synchronises_with_the_host(
    amp: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a host, a blending seed and a training seed: 0 host reads per batch."""
    allow_fp16_on_cpu(monkeypatch)
    env = make_env(f'training.amp="{amp}"', "env.max_epochs=30")
    drive_to(env, "r0c0", "BLENDING")
    drive_to(env, "r0c1", "TRAINING", blueprint="res_random")
    assert env.model.slot("r0c0").stage == Stage.BLENDING
    assert len(env.trainer.seed_optimizers) == 2
    counts: Counter[str] = Counter()
    in_batch = [False]
    for name in SYNCING:
        original = getattr(torch.Tensor, name)

        def counted(
            self: torch.Tensor, *a: Any, _o: Any = original, _n: str = name, **k: Any
        ) -> Any:
            if in_batch[0]:
                counts[_n] += 1
            return _o(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, counted)
    original_batch = EpochTrainer.train_batch

    def train_batch(self: EpochTrainer, *args: Any) -> None:
        in_batch[0] = True
        try:
            original_batch(self, *args)
        finally:
            in_batch[0] = False

    monkeypatch.setattr(EpochTrainer, "train_batch", train_batch)
    result = env.step(WAIT)
    assert result.metrics.batches >= 8
    assert counts == Counter()
