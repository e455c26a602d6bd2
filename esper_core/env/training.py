"""THE epoch: one implementation for every policy and executor.

:class:`EpochTrainer` exposes an epoch as ``begin_epoch() / train_batch() / end_epoch()``
so an executor can interleave the batches of many envs. Every per-batch number stays
on the device; :meth:`EpochTrainer.end_epoch` returns them as a
:class:`~esper_core.env.pending.Pending`, read with the epoch's one host transfer.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
from attrs import define, frozen
from torch import nn

from esper_core.components.task import Task
from esper_core.config import TrainingSection
from esper_core.env.amp import amp_dtype, autocast
from esper_core.env.gradients import (
    clip_gradients,
    measure_seed_gradients,
    seed_accumulators,
    total_grad_norm,
)
from esper_core.env.optimizers import (
    carry_state,
    embedding_parameters,
    make_optimizer,
    param_groups,
    set_lr,
)
from esper_core.env.pending import Pending
from esper_core.lifecycle.model import MorphogeneticModel
from esper_core.lifecycle.rules import BLENDED_STAGES
from esper_core.lifecycle.width_fold import FoldedParam
from esper_core.recipe import lr_factor, resolve_recipe, task_recipe

log = logging.getLogger("esper.training")


@frozen
class SeedGradStats:
    health: float | None  # fraction of batches with a finite, non-vanishing, non-exploding norm
    exploding: bool
    grad_ratio: float | None  # (|g_seed|/sqrt(n_seed)) / (|g_host|/sqrt(n_host)), epoch mean
    grad_norm: float | None  # mean pre-clip norm


@frozen
class TrainStats:
    loss: float  # mean over samples (or tokens)
    accuracy: float  # percent
    batches: int
    samples: int
    host_grad_norm: float
    finite: bool
    seeds: dict[str, SeedGradStats]


def has_gradients(optimizer: torch.optim.Optimizer) -> bool:
    """Whether any parameter of ``optimizer`` received a gradient in this backward pass."""
    return any(p.grad is not None for group in optimizer.param_groups for p in group["params"])


class CompiledForward:
    """Calls ``torch.compile(model)``; if compiling fails, logs why and runs eagerly.

    Only a compilation failure turns compile off: an error the model itself raises
    (the eager call fails too) and an out-of-memory error are re-raised unchanged, and
    compile stays on. A config field, never process state: each env has its own instance.
    """

    def __init__(self, model: nn.Module, mode: str) -> None:
        self.model = model
        self.mode = mode
        self.fallback_reason: str | None = None
        self._compiled: Callable[..., Any] | None = None
        if mode != "off":
            try:
                self._compiled = torch.compile(model, mode=mode)
            except RuntimeError as exc:  # e.g. an unsupported Python or platform
                self._fall_back(exc)

    def _fall_back(self, exc: BaseException) -> None:
        self.fallback_reason = f"{type(exc).__name__}: {exc}"
        self._compiled = None
        log.warning(
            "torch.compile(mode=%r) failed, training eagerly instead: %s",
            self.mode,
            self.fallback_reason,
        )

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self._compiled is None:
            return self.model(x)
        try:
            out: torch.Tensor = self._compiled(x)
            return out
        except torch.OutOfMemoryError:
            raise  # memory, not compilation: falling back would hide it
        except Exception as exc:
            failure = exc
        # torch has no public type for "compilation failed", so ask the model: an error
        # the eager call raises too is the model's own. It propagates from here as the
        # model raised it (not as the compiler wrapped it), and compile stays on.
        eager: torch.Tensor = self.model(x)
        self._fall_back(failure)
        return eager


class Trainer(Protocol):
    """What an env asks of its trainer: :class:`EpochTrainer`, or in the user's own loop
    :class:`esper_core.grow.loop_trainer.LoopTrainer` (the user trains, it measures)."""

    def begin_epoch(self) -> None: ...

    def train_batch(self, inputs: torch.Tensor, targets: torch.Tensor) -> None: ...

    def end_epoch(self) -> Pending: ...

    def sync_optimizers(self) -> None: ...

    def reset_optimizers(self) -> None: ...

    def host_changed(self, folded: Sequence[FoldedParam] = ()) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@define
class SeedOptimizer:
    """A seed's optimizer, for the slot's parameter set of ``version``; ``born``: the run's
    optimizer step when the seed's parameters first joined (where its own warm-up starts)."""

    version: int
    born: int
    optimizer: torch.optim.Optimizer


class EpochTrainer:
    """Trains one env's model under one recipe (:mod:`esper_core.recipe`): a host
    optimizer and one per seed with the same hyper-parameters, the schedule applied to all
    of them each step, one gradient-norm budget over host and seeds, AMP.

    ``total_steps``: the optimizer steps of the whole run, the schedule's horizon.
    """

    def __init__(
        self,
        model: MorphogeneticModel,
        task: Task,
        cfg: TrainingSection,
        device: torch.device,
        total_steps: int = 1,
    ) -> None:
        self.model = model
        self.task = task
        self.cfg = cfg
        self.recipe = resolve_recipe(cfg, task_recipe(task))
        self.total_steps = total_steps
        self.device = device
        self.amp_dtype = amp_dtype(cfg.amp, device)
        self.forward = CompiledForward(model, cfg.compile)
        self._host_params = model.host_parameters()
        self._n_host = sum(p.numel() for p in self._host_params)
        self.step = 0  # optimizer steps taken in this run: the schedule's position
        self.host_optimizer = self._make_host_optimizer()
        self.seed_optimizers: dict[str, SeedOptimizer] = {}
        self.scaler = self._make_scaler()
        self._acc: dict[str, torch.Tensor] = {}
        self._seed_acc: dict[str, torch.Tensor] = {}
        self._batches = 0

    # ------------------------------------------------------------ optimizers

    def _optimizer(self, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        embeddings = embedding_parameters(self.model.modules())
        groups = param_groups(params, self.recipe, embeddings)
        return make_optimizer(groups, self.recipe, fused=self.cfg.amp == "fp16")

    def _make_host_optimizer(self) -> torch.optim.Optimizer:
        return self._optimizer(self._host_params)

    def _make_scaler(self) -> torch.amp.GradScaler:
        # One scaler per env: its scale and inf checks must not mix envs or devices.
        return torch.amp.GradScaler(self.device.type, enabled=self.cfg.amp == "fp16")

    def sync_optimizers(self) -> None:
        """Keep one optimizer per seed whose parameter set is exactly the slot's (gate included)."""
        for slot in self.model.iter_slots():
            current = self.seed_optimizers.get(slot.slot_id)
            if current is not None and current.version == slot.param_version:
                continue
            params = slot.seed_parameters()
            if params:
                # A gate added later joins the seed's schedule, not a fresh warm-up.
                born = current.born if current is not None else self.step
                self.seed_optimizers[slot.slot_id] = SeedOptimizer(
                    slot.param_version, born, self._optimizer(params)
                )
            else:
                self.seed_optimizers.pop(slot.slot_id, None)

    def host_changed(self, folded: Sequence[FoldedParam] = ()) -> None:
        """The host's parameter set changed (a width growth was born, fossilized or
        pruned): one host optimizer over the new set, which keeps the state of every
        parameter it still has, assembles the state of ``folded`` parameters from their
        pieces' and starts the new ones fresh (:func:`carry_state`)."""
        old = self.host_optimizer
        self._host_params = self.model.host_parameters()
        self._n_host = sum(p.numel() for p in self._host_params)
        self.host_optimizer = self._make_host_optimizer()
        carry_state(old, self.host_optimizer, folded)

    def reset_optimizers(self) -> None:
        """Fresh optimizer and scaler state (after a governor rollback); the schedule goes
        on from where the run is."""
        self._host_params = self.model.host_parameters()  # a rollback may prune a growth
        self._n_host = sum(p.numel() for p in self._host_params)
        self.host_optimizer = self._make_host_optimizer()
        self.seed_optimizers.clear()
        self.scaler = self._make_scaler()
        self.sync_optimizers()

    def _apply_schedule(self) -> None:
        r, step, total = self.recipe, self.step, self.total_steps
        set_lr(self.host_optimizer, r.lr * lr_factor(r, step, total))
        for seed in self.seed_optimizers.values():
            set_lr(seed.optimizer, r.lr * lr_factor(r, step, total, seed.born))

    def state_dict(self) -> dict[str, Any]:
        return {
            "host": self.host_optimizer.state_dict(),
            "seeds": {sid: s.optimizer.state_dict() for sid, s in self.seed_optimizers.items()},
            "born": {sid: s.born for sid, s in self.seed_optimizers.items()},
            "step": self.step,
            "scaler": self.scaler.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state.get("step", 0))
        self.host_optimizer.load_state_dict(state["host"])
        self.sync_optimizers()
        born = state.get("born", {})
        for slot_id, opt_state in state["seeds"].items():
            seed = self.seed_optimizers.get(slot_id)
            if seed is not None:
                seed.optimizer.load_state_dict(opt_state)
                seed.born = int(born.get(slot_id, 0))
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])

    # ------------------------------------------------------------ the epoch

    def _zeros(self, n: int) -> torch.Tensor:
        return torch.zeros(n, device=self.device, dtype=torch.float32)

    def begin_epoch(self) -> None:
        self.model.train()
        self.sync_optimizers()
        # loss_sum, correct, count, host_norm_sum, nonfinite
        self._acc = {"main": self._zeros(5)}
        self._seed_acc = seed_accumulators(self.model, self.device)
        self._batches = 0

    def train_batch(self, inputs: torch.Tensor, targets: torch.Tensor) -> None:
        """One optimisation step on one batch; no host synchronisation."""
        cfg = self.cfg
        self._apply_schedule()
        self.host_optimizer.zero_grad(set_to_none=True)
        seed_opts = [seed.optimizer for seed in self.seed_optimizers.values()]
        for opt in seed_opts:
            opt.zero_grad(set_to_none=True)
        with autocast(self.amp_dtype, self.device):
            outputs = self.forward(inputs)
            loss = self.task.loss(outputs, targets)
        self.scaler.scale(loss).backward()
        # A seed that took no part in the forward pass (GERMINATED, or a gate before
        # BLENDING) has no gradient: the scaler has no inf check for it, so it is not
        # stepped at all. Whether a .grad exists is known on the host (no sync).
        seed_opts = [opt for opt in seed_opts if has_gradients(opt)]
        if self.scaler.is_enabled():
            self.scaler.unscale_(self.host_optimizer)
            for opt in seed_opts:
                self.scaler.unscale_(opt)
        host_norm = total_grad_norm(self._host_params)
        if host_norm is None:
            host_norm = torch.zeros((), device=self.device)
        host_scaled = host_norm / math.sqrt(max(self._n_host, 1))
        seed_norms = measure_seed_gradients(self.model, self._seed_acc, host_scaled, cfg)
        blended = {sid for sid in seed_norms if self.model.slot(sid).stage in BLENDED_STAGES}
        clip_gradients(self._host_params, host_norm, seed_norms, cfg, blended)
        self.scaler.step(self.host_optimizer)
        for opt in seed_opts:
            self.scaler.step(opt)
        self.scaler.update()
        self.step += 1
        with torch.no_grad():
            m = self.task.metrics(outputs.detach().float(), targets)
            self._acc["main"] += torch.stack(
                [
                    m.loss_sum.float(),
                    m.correct.float(),
                    m.count.float(),
                    torch.nan_to_num(host_norm, nan=0.0, posinf=0.0).float(),
                    (~torch.isfinite(loss.detach())).float(),
                ]
            )
        self._batches += 1

    def end_epoch(self) -> Pending:
        """The epoch's numbers, still on the device; read them with :func:`fetch`."""
        slot_ids = list(self._seed_acc)
        stacked = torch.cat([self._acc["main"], *[self._seed_acc[s] for s in slot_ids]])
        n_batches = self._batches
        return Pending(stacked, lambda values: train_stats(values, slot_ids, n_batches))


def train_stats(values: list[float], slot_ids: list[str], n_batches: int) -> TrainStats:
    """The :class:`TrainStats` of an epoch's fetched accumulators: the main five
    (loss_sum, correct, count, host_norm_sum, nonfinite), then five per seed."""
    loss_sum, correct, count, host_norm_sum, nonfinite = values[:5]
    batches = max(n_batches, 1)
    seeds: dict[str, SeedGradStats] = {}
    for i, slot_id in enumerate(slot_ids):
        norm_sum, healthy, exploding, ratio_sum, n = values[5 + 5 * i : 10 + 5 * i]
        if n == 0:
            seeds[slot_id] = SeedGradStats(None, False, None, None)
        else:
            seeds[slot_id] = SeedGradStats(healthy / n, exploding > 0, ratio_sum / n, norm_sum / n)
    finite = nonfinite == 0 and math.isfinite(loss_sum)
    return TrainStats(
        loss=loss_sum / count if count else float("nan"),
        accuracy=100.0 * correct / count if count else 0.0,
        batches=n_batches,
        samples=int(count),
        host_grad_norm=host_norm_sum / batches,
        finite=finite,
        seeds=seeds,
    )
