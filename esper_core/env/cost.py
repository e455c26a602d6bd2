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
    model: MorphogeneticModel,
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
    """Per-sample training FLOPs of each architecture an episode has trained."""

    per_sample: dict[Architecture, float] = field(factory=dict)
    _current: Architecture | None = None

    def begin_epoch(self, model: MorphogeneticModel) -> None:
        self._current = architecture(model)

    def batch_flops(
        self,
        model: MorphogeneticModel,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        inputs: torch.Tensor,
        targets: torch.Tensor,
    ) -> int:
        """The FLOPs of training on this batch (counted on it if its architecture is new)."""
        key = self._current if self._current is not None else architecture(model)
        if key not in self.per_sample:
            flops = count_train_flops(model, loss_fn, inputs, targets)
            self.per_sample[key] = flops / max(inputs.shape[0], 1)
        return round(self.per_sample[key] * inputs.shape[0])

    def host_per_sample(self) -> float | None:
        """Per-sample FLOPs of the architecture being trained if it holds no seed (the host
        alone), once counted; None otherwise."""
        key = self._current
        if key is None or any(blueprint is not None for _, _, blueprint, _ in key):
            return None
        return self.per_sample.get(key)
