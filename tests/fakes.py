"""Small, fast components for core tests that must not depend on the plugins."""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from attrs import define
from torch import nn

from esper_core.components.blueprint import Blueprint
from esper_core.components.host import InjectionSpec, slot_id
from esper_core.components.reward import RewardBreakdown, RewardContext, RewardSetup
from esper_core.components.task import BatchMetrics, TaskContext, TaskData
from esper_core.env.data import TensorSplit


class TinyCNNHost(nn.Module):
    topology = "cnn"

    def __init__(
        self, in_channels: int = 1, width: int = 4, blocks: int = 2, classes: int = 4
    ) -> None:
        super().__init__()
        chans = [in_channels] + [width * 2**i for i in range(blocks)]
        self.blocks = nn.ModuleList(
            nn.Sequential(
                nn.Conv2d(chans[i], chans[i + 1], 3, padding=1),
                nn.BatchNorm2d(chans[i + 1]),
                nn.ReLU(),
            )
            for i in range(blocks)
        )
        self.head = nn.Linear(chans[-1], classes)
        self._specs = tuple(
            InjectionSpec(slot_id(0, i), chans[i + 1], "cnn", i) for i in range(blocks)
        )

    def num_segments(self) -> int:
        return len(self.blocks)

    def injection_specs(self) -> tuple[InjectionSpec, ...]:
        return self._specs

    def forward_segment(self, index: int, x: torch.Tensor) -> torch.Tensor:
        return self.blocks[index](x)

    def forward_head(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x.mean(dim=(2, 3)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(self.num_segments()):
            x = self.forward_segment(i, x)
        return self.forward_head(x)


class Residual1x1(nn.Module):
    def __init__(self, channels: int, zero: bool = True) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 1)
        if zero:
            nn.init.zeros_(self.conv.weight)
            nn.init.zeros_(self.conv.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x)


RES = Blueprint("res", "cnn", Residual1x1, lambda c: c * c + c, "zero-init 1x1 residual", True)
RES_RANDOM = Blueprint(
    "res_random",
    "cnn",
    lambda c: Residual1x1(c, zero=False),
    lambda c: c * c + c,
    "1x1 residual",
    False,
)
BLUEPRINTS = (RES, RES_RANDOM)


def resolve(key: str) -> Blueprint:
    return {bp.key: bp for bp in BLUEPRINTS}[key]


@define
class TinyTaskOptions:
    n_train: int = 256
    n_val: int = 128
    n_test: int = 128
    width: int = 4
    blocks: int = 2  # = slots (r0c0, r0c1, ...)


class TinyTask:
    """Four Gaussian classes rendered as 1x4x4 images: learnable in a few epochs."""

    name: ClassVar[str] = "tiny"
    description: ClassVar[str] = "synthetic 4-class images for tests"
    Options: ClassVar[type] = TinyTaskOptions
    topology = "cnn"
    num_classes = 4
    default_max_epochs = 6
    default_batch_size = 32
    default_eval_batch_size = 64

    def __init__(
        self, options: TinyTaskOptions | None = None, context: TaskContext | None = None
    ) -> None:
        self.options = options or TinyTaskOptions()
        self.context = context or TaskContext()
        self._cache: dict[str, TaskData] = {}

    @property
    def chance_loss(self) -> float:
        return math.log(self.num_classes)

    def build_host(self) -> nn.Module:
        return TinyCNNHost(
            width=self.options.width, blocks=self.options.blocks, classes=self.num_classes
        )

    def _split(self, n: int, seed: int) -> TensorSplit:
        g = torch.Generator().manual_seed(seed)
        y = torch.randint(0, 4, (n,), generator=g)
        centers = torch.randn(4, 1, 4, 4, generator=torch.Generator().manual_seed(99))
        x = centers[y] + 0.8 * torch.randn(n, 1, 4, 4, generator=g)
        return TensorSplit(x, y)

    def load_data(self, device: torch.device) -> TaskData:
        key = str(device)
        if key not in self._cache:
            o = self.options
            data = TaskData(
                self._split(o.n_train, 1), self._split(o.n_val, 2), self._split(o.n_test, 3)
            )
            self._cache[key] = TaskData(
                data.train.to(device), data.val.to(device), data.test.to(device)
            )
        return self._cache[key]

    def prepare_batch(self, inputs, targets, train, generator):  # type: ignore[no-untyped-def]
        return inputs, targets

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(outputs, targets)

    def metrics(self, outputs: torch.Tensor, targets: torch.Tensor) -> BatchMetrics:
        loss_sum = nn.functional.cross_entropy(outputs, targets, reduction="sum")
        correct = (outputs.argmax(dim=-1) == targets).sum()
        # A fill on the device, like the real tasks: no host-to-device copy per batch.
        count = torch.full((), targets.numel(), device=outputs.device)
        return BatchMetrics(loss_sum, correct, count)


@define
class AccOptions:
    scale: float = 1.0


class AccuracyDeltaReward:
    """Reward = change of validation accuracy in points (a minimal family for core tests)."""

    name: ClassVar[str] = "acc_delta"
    description: ClassVar[str] = "accuracy delta"
    Options: ClassVar[type] = AccOptions

    def __init__(self, options: AccOptions | None = None, setup: RewardSetup | None = None) -> None:
        self.options = options or AccOptions()
        self.gamma = (setup or RewardSetup(gamma=0.99)).gamma

    def compute(self, ctx: RewardContext) -> RewardBreakdown:
        return RewardBreakdown.of(
            accuracy=self.options.scale * (ctx.val_acc - ctx.val_acc_prev) / 100.0
        )


# Every seed walks the whole staged lifecycle (GERMINATED -> TRAINING -> BLENDING), with
# two TRAINING epochs, unless a test sets lifecycle.isolation otherwise.
STAGED = [
    "lifecycle.isolation=full",
    "lifecycle.isolation_non_identity=full",
    "lifecycle.min_training_epochs=2",
]


def make_env(*overrides: str, env_index: int = 0, seed: int = 0):  # type: ignore[no-untyped-def]
    """A MorphogeneticEnv on the tiny task, reset with ``seed``."""
    from esper_core.config import load_config
    from esper_core.env.env import MorphogeneticEnv

    config = load_config(overrides=[*STAGED, "env.max_epochs=12", *overrides])
    env = MorphogeneticEnv(TinyTask(), AccuracyDeltaReward(), BLUEPRINTS, config, env_index, "cpu")
    env.reset(seed)
    return env


def drive_to(env, slot_id: str, stage: str, blueprint: str = "res", style: str = "linear_add"):  # type: ignore[no-untyped-def]
    """Step ``env`` with scripted actions until ``slot_id`` reaches ``stage``; returns the results."""
    from esper_core.lifecycle.actions import WAIT, LifecycleOp

    space = env.space
    results = []
    for _ in range(env.max_epochs):
        report = next(r for r in env.observation.slots if r.slot_id == slot_id)
        if report.stage.value == stage:
            return results
        gate = env.observation.gates[space.slot_ids.index(slot_id)]
        if report.stage.value == "DORMANT":
            action = space.germinate(slot_id, blueprint, style)
        elif report.stage.value == "HOLDING" and stage == "FOSSILIZED":
            action = space.on_slot(LifecycleOp.FOSSILIZE, slot_id)
        elif gate is not None and gate.passed and report.stage.value != "HOLDING":
            action = space.on_slot(LifecycleOp.ADVANCE, slot_id)
        else:
            action = WAIT
        results.append(env.step(action))
    raise AssertionError(f"{slot_id} did not reach {stage}: {env.observation.slots}")


@define
class FaultyTaskOptions:
    fault: str = "none"  # none, nan, inf, explode, chance, oom, worker_crash
    at_epoch: int = 3  # 1-based epoch in which the fault starts
    epochs: int = 1  # how many epochs it lasts


class _CrashingDataset(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Map-style view of a split whose (single) DataLoader worker dies in a given epoch.

    The worker counts the samples it served in its own copy of the dataset, which
    tells it the epoch (one worker serves every sample)."""

    def __init__(self, split: TensorSplit, at_epoch: int) -> None:
        self.split, self.at_epoch, self.served = split, at_epoch, 0

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, i: int):  # type: ignore[no-untyped-def]
        import os

        self.served += 1
        if self.served > (self.at_epoch - 1) * len(self.split):
            os._exit(1)  # a worker killed by the OS (segfault, OOM killer) looks like this
        return self.split.inputs[i], self.split.targets[i]


class FaultyTask(TinyTask):
    """TinyTask that injects a fault in given epochs (counted from its own training batches)."""

    name: ClassVar[str] = "faulty"
    description: ClassVar[str] = "tiny task with injected faults"
    Options: ClassVar[type] = FaultyTaskOptions

    def __init__(
        self, options: FaultyTaskOptions | None = None, context: TaskContext | None = None
    ) -> None:
        super().__init__(TinyTaskOptions(), context)
        self.fault = options or FaultyTaskOptions()
        self.train_batches = 0
        self.batches_per_epoch = TinyTaskOptions().n_train // self.default_batch_size

    def _epoch(self) -> int:
        """The 1-based epoch being trained (or just trained, during validation)."""
        return -(-self.train_batches // self.batches_per_epoch)

    def _active(self) -> bool:
        return self.fault.at_epoch <= self._epoch() < self.fault.at_epoch + self.fault.epochs

    def load_data(self, device: torch.device) -> TaskData:
        data = super().load_data(device)
        if self.fault.fault != "worker_crash":
            return data
        return TaskData(_CrashingDataset(data.train, self.fault.at_epoch), data.val, data.test)

    def prepare_batch(self, inputs, targets, train, generator):  # type: ignore[no-untyped-def]
        if train:
            self.train_batches += 1
        return inputs, targets

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        loss = super().loss(outputs, targets)
        if self._active():
            if self.fault.fault == "nan":
                return loss * float("nan")
            if self.fault.fault == "inf":
                return loss * float("inf")
            if self.fault.fault == "oom":
                raise torch.OutOfMemoryError(
                    "CUDA out of memory. Tried to allocate 20.00 GiB (injected)"
                )
        return loss

    def metrics(self, outputs: torch.Tensor, targets: torch.Tensor) -> BatchMetrics:
        m = super().metrics(outputs, targets)
        if self.fault.fault == "explode" and self._active():
            return BatchMetrics(m.loss_sum * 1e4, m.correct, m.count)
        if self.fault.fault == "chance" and self._active():
            # A model collapsed to a uniform guess: chance accuracy, chance-level loss.
            k = self.num_classes
            return BatchMetrics(m.count * math.log(k), m.count // k, m.count)
        return m


def allow_fp16_on_cpu(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Let ``training.amp = "fp16"`` run on the CPU (a user gets a ConfigError there).

    CPU autocast does run in float16 and ``torch.amp.GradScaler("cpu")`` is the same
    class as on CUDA, so the fp16 path (scaler, fused steps, inf checks) is tested here.
    """
    import esper_core.env.evaluation as evaluation
    import esper_core.env.training as training

    dtypes = {"off": None, "bf16": torch.bfloat16, "fp16": torch.float16}

    def amp_dtype(amp: str, device: torch.device) -> torch.dtype | None:
        return dtypes[amp]

    monkeypatch.setattr(training, "amp_dtype", amp_dtype)
    monkeypatch.setattr(evaluation, "amp_dtype", amp_dtype)
