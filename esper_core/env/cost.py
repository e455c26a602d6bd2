"""What a run costs: parameters in the forward pass, parameters held, training FLOPs.

FLOPs are counted by :class:`torch.utils.flop_counter.FlopCounterMode` (no hand-written
formulas): once per architecture, on a real training batch, forward and backward, and
multiplied by the samples of every batch trained with that architecture. Attention is
counted through its math kernel (two batched matmuls forward, four backward) on every
device: torch gives the CPU's fused attention kernel no FLOP formula (it would count
zero) and counts CUDA's with its backward's recomputation, so a fused kernel would make a
run's FLOPs depend on where it ran. An
architecture is what changes the computation: each slot's stage, blueprint and whether
the seed's input is isolated, and the sizes of a growing host's sites (as each installed growth operator reads them). The counting pass leaves no trace: the random state is
forked, buffers (BatchNorm statistics) are restored and gradients dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import torch
from attrs import define, field, frozen
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from esper_core.lifecycle import rules
from esper_core.lifecycle.model import MorphogeneticModel
from esper_core.lifecycle.rules import BLENDED_STAGES, SEED_STAGES

if TYPE_CHECKING:
    from esper_core.components.growth_operator import GrowthOperator
    from esper_core.components.task import Task
    from esper_core.env.episode import EpisodeStats

Architecture = tuple[tuple[str, str, str | None, bool], ...]


def architecture(
    model: MorphogeneticModel, operators: Sequence[GrowthOperator] = ()
) -> Architecture:
    """Each slot's (id, stage, blueprint, isolated); for a host that can grow, one more
    entry ("host", the sizes of its sites by each operator that grows it, the stage of a
    host growth in flight or None, False): a widened or deepened host is a new
    architecture, its FLOPs counted anew."""
    slots = tuple(
        (s.slot_id, s.stage.value, s.state.blueprint, rules.is_isolated(s.stage, s.state.alpha))
        for s in model.iter_slots()
    )
    host = model.host
    sizes = []
    for operator in operators:
        sites = operator.sites(host)
        if sites:  # a user's module with no layer pair declares none
            sizes.append(f"{operator.name} " + ",".join(str(site.size) for site in sites))
    if not sizes:
        return slots
    growth = model.host_growth
    growing = growth.stage.value if growth is not None else None
    return (*slots, ("host", "; ".join(sizes), growing, False))


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
    """FLOPs of one training step's forward and backward pass on this batch, side-effect
    free: gradients are set aside first (backward would add to them in place) and put back.
    Runs with autograd on wherever it is called from (Lightning's validation hooks run in
    inference mode), on copies of the batch that autograd may save."""
    with torch.inference_mode(False), torch.enable_grad():
        return _count(model, loss_fn, inputs.clone(), targets.clone())


def _count(
    model: torch.nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    inputs: torch.Tensor,
    targets: torch.Tensor,
) -> int:
    buffers = [b.detach().clone() for b in model.buffers()]
    params = list(model.parameters())
    grads = [p.grad for p in params]
    for p in params:
        p.grad = None
    devices = [inputs.device] if inputs.device.type == "cuda" else []
    try:
        with (
            torch.random.fork_rng(devices=devices),
            sdpa_kernel(SDPBackend.MATH),
            FlopCounterMode(display=False) as counter,
        ):
            loss_fn(model(inputs), targets).backward()
    finally:
        with torch.no_grad():
            for buffer, saved in zip(model.buffers(), buffers):
                buffer.copy_(saved)
        for p, grad in zip(params, grads):
            p.grad = grad
    return int(counter.get_total_flops())


@frozen
class CostState:
    """A :class:`CostMeter` as plain data, for checkpoints: an observation's FLOPs ratio
    and the FLOPs rent read the last epoch's numbers after a resume."""

    per_sample: tuple[tuple[Architecture, float], ...]
    host_per_sample: float | None
    epoch_flops: int
    epoch_host_flops: int
    stale: bool = False


@define
class CostMeter:
    """Per-sample training FLOPs of each architecture an episode has trained, and of the
    bare host, so an epoch's compute can be priced relative to not growing at all."""

    # The growth operators installed: the sizes of a host's sites they read are part of
    # its architecture.
    operators: Sequence[GrowthOperator] = ()
    per_sample: dict[Architecture, float] = field(factory=dict)
    host_per_sample: float | None = None
    epoch_flops: int = 0
    epoch_host_flops: int = 0  # what the bare host would have cost on the same samples
    _current: Architecture | None = None
    # The epoch numbers are the last epoch's until this epoch trains its first batch, so
    # what an observation read stays readable after begin_epoch (a Grower's checkpoint is
    # taken there) and after a resume.
    _stale: bool = False

    def measure_host(
        self,
        model: MorphogeneticModel,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        batch: tuple[torch.Tensor, torch.Tensor],
    ) -> None:
        """Count the bare host's per-sample FLOPs now, on ``batch`` (a few validation
        samples: shaped like training's, and read at the episode's start anyway; FLOPs per
        sample do not depend on how many). Measured lazily at the first training batch
        instead, a host grown before its first epoch would be its own baseline, and a
        controller that widens at its first decision would pay no compute for it."""
        inputs, targets = batch
        with model.host_alone():
            self.host_per_sample = (
                count_train_flops(model.host, loss_fn, inputs, targets) / inputs.shape[0]
            )

    def begin_epoch(self, model: MorphogeneticModel) -> None:
        self._current = architecture(model, self.operators)
        self._stale = True

    def epoch_flops_ratio(self) -> float:
        """The epoch's training FLOPs over the bare host's on the same samples (1: no growth)."""
        return self.epoch_flops / self.epoch_host_flops if self.epoch_host_flops else 1.0

    def batch_flops(
        self,
        model: MorphogeneticModel,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        inputs: torch.Tensor,
        targets: torch.Tensor,
        samples: int | None = None,
    ) -> int:
        """The FLOPs of training on this batch (counted on it if its architecture is new);
        ``samples``: of training on that many samples shaped like this batch's instead."""
        if self._stale:
            self.epoch_flops = self.epoch_host_flops = 0
            self._stale = False
        key = self._current if self._current is not None else architecture(model, self.operators)
        n = max(inputs.shape[0], 1)
        trained = inputs.shape[0] if samples is None else samples
        if key not in self.per_sample:
            self.per_sample[key] = count_train_flops(model, loss_fn, inputs, targets) / n
        if self.host_per_sample is None:
            # The host alone: its forward is exactly the model's with every slot empty.
            with model.host_alone():
                self.host_per_sample = count_train_flops(model.host, loss_fn, inputs, targets) / n
        flops = round(self.per_sample[key] * trained)
        self.epoch_flops += flops
        self.epoch_host_flops += round(self.host_per_sample * trained)
        return flops

    def state(self) -> CostState:
        per_sample = tuple(self.per_sample.items())
        return CostState(
            per_sample, self.host_per_sample, self.epoch_flops, self.epoch_host_flops, self._stale
        )

    def load_state(self, state: CostState) -> None:
        self.per_sample = dict(state.per_sample)
        self.host_per_sample = state.host_per_sample
        self.epoch_flops, self.epoch_host_flops = state.epoch_flops, state.epoch_host_flops
        self._stale = state.stale


class Accounting(Protocol):
    """What counting a batch's cost reads of an env (``MorphogeneticEnv`` is one)."""

    @property
    def stats(self) -> EpisodeStats: ...

    @property
    def cost(self) -> CostMeter: ...

    @property
    def model(self) -> MorphogeneticModel: ...

    @property
    def task(self) -> Task: ...


def account_training(
    env: Accounting, inputs: torch.Tensor, targets: torch.Tensor, samples: int | None = None
) -> None:
    """Count the training FLOPs of this batch (or of ``samples`` samples shaped like it)
    in the env's episode and epoch cost: the CLI path per batch, the library path per
    epoch from the samples its hook counted."""
    stats = env.stats
    stats.train_flops += env.cost.batch_flops(env.model, env.task.loss, inputs, targets, samples)
    stats.train_samples += int(inputs.shape[0]) if samples is None else samples
    if stats.host_flops_per_sample is None:
        stats.host_flops_per_sample = env.cost.host_per_sample
