"""What a run costs: parameters in the forward pass, parameters held, training FLOPs.

FLOPs are counted by :class:`torch.utils.flop_counter.FlopCounterMode` (no hand-written
formulas): once per architecture, on a real training batch, forward and backward, and
multiplied by the samples of every batch trained with that architecture. An
architecture is what changes the computation: each slot's stage, blueprint and whether
the seed's input is isolated. The counting pass leaves no trace: the random state is
forked, buffers (BatchNorm statistics) are restored and gradients dropped.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from attrs import define, field
from torch.utils.flop_counter import FlopCounterMode

from esper_core.lifecycle import rules
from esper_core.lifecycle.model import MorphogeneticModel
from esper_core.lifecycle.rules import BLENDED_STAGES, SEED_STAGES

Architecture = tuple[tuple[str, str, str | None, bool], ...]


def architecture(model: MorphogeneticModel) -> Architecture:
    return tuple(
        (s.slot_id, s.stage.value, s.state.blueprint, rules.is_isolated(s.stage, s.state.alpha))
        for s in model.iter_slots()
    )


def params_forward(model: MorphogeneticModel) -> int:
    """Parameters that shape the output: the host and every seed blended in (alpha > 0)."""
    return model.host_param_count() + model.seed_param_count(BLENDED_STAGES)


def params_held(model: MorphogeneticModel) -> int:
    """Parameters the model holds: the host and every seed, incubating ones included."""
    return model.host_param_count() + model.seed_param_count(SEED_STAGES)


def count_train_flops(
    model: torch.nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    inputs: torch.Tensor,
    targets: torch.Tensor,
) -> int:
    """FLOPs of one training step's forward and backward pass on this batch, side-effect free."""
    buffers = [b.detach().clone() for b in model.buffers()]
    devices = [inputs.device] if inputs.device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices), FlopCounterMode(display=False) as counter:
            loss_fn(model(inputs), targets).backward()
    finally:
        with torch.no_grad():
            for buffer, saved in zip(model.buffers(), buffers):
                buffer.copy_(saved)
        for p in model.parameters():
            p.grad = None
    return int(counter.get_total_flops())


@define
class CostMeter:
    """Per-sample training FLOPs of each architecture an episode has trained, and of the
    bare host, so an epoch's compute can be priced relative to not growing at all."""

    per_sample: dict[Architecture, float] = field(factory=dict)
    host_per_sample: float | None = None
    epoch_flops: int = 0
    epoch_host_flops: int = 0  # what the bare host would have cost on the same samples
    _current: Architecture | None = None

    def begin_epoch(self, model: MorphogeneticModel) -> None:
        self._current = architecture(model)
        self.epoch_flops = self.epoch_host_flops = 0

    def epoch_flops_ratio(self) -> float:
        """This epoch's training FLOPs over the bare host's on the same samples (1: no growth)."""
        return self.epoch_flops / self.epoch_host_flops if self.epoch_host_flops else 1.0

    def batch_flops(
        self,
        model: MorphogeneticModel,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        inputs: torch.Tensor,
        targets: torch.Tensor,
    ) -> int:
        """The FLOPs of training on this batch (counted on it if its architecture is new)."""
        key = self._current if self._current is not None else architecture(model)
        n = max(inputs.shape[0], 1)
        if key not in self.per_sample:
            self.per_sample[key] = count_train_flops(model, loss_fn, inputs, targets) / n
        if self.host_per_sample is None:
            # The host alone: its forward is exactly the model's with every slot empty.
            self.host_per_sample = count_train_flops(model.host, loss_fn, inputs, targets) / n
        flops = round(self.per_sample[key] * inputs.shape[0])
        self.epoch_flops += flops
        self.epoch_host_flops += round(self.host_per_sample * inputs.shape[0])
        return flops
