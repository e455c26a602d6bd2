"""The trainer of growth in the user's own loop: the user trains, this keeps the seeds'
parameters in the user's optimizer and measures their gradients.

Each seed's parameters (its gate included) are one parameter group of the user's
optimizer, tagged ``esper_slot``, added when the seed is built and removed, with the
optimizer state of its parameters, when it is pruned: the approach of Lightning's
``BaseFinetuning.unfreeze_and_add_param_group``. The group takes the optimizer's
defaults (the user's learning rate and weight decay) unless ``group_options`` says
otherwise. Gradients are measured by an optimizer step pre-hook, when they are
complete (after ``GradScaler`` has unscaled them); nothing runs while no seed learns.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from esper_core.config import TrainingSection
from esper_core.env.gradients import measure_seed_gradients, seed_accumulators, total_grad_norm
from esper_core.env.pending import Pending
from esper_core.env.training import train_stats
from esper_core.errors import GrowerError
from esper_core.lifecycle.model import MorphogeneticModel

GROUP_KEY = "esper_slot"


class LoopTrainer:
    """Implements :class:`esper_core.env.training.Trainer` for the user's loop."""

    def __init__(
        self,
        model: MorphogeneticModel,
        cfg: TrainingSection,
        optimizer: torch.optim.Optimizer | None = None,
        group_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.cfg = cfg
        self.group_options = dict(group_options or {})
        self._host_params = model.host_parameters()
        self._n_host = sum(p.numel() for p in self._host_params)
        self._versions: dict[str, int] = {}
        self._seed_acc: dict[str, torch.Tensor] = {}
        self._steps = 0
        self.optimizer: torch.optim.Optimizer | None = None
        self._handle: Any = None
        if optimizer is not None:
            self.attach(optimizer)

    def attach(self, optimizer: torch.optim.Optimizer) -> None:
        """Use ``optimizer`` for the seeds from now on (Lightning creates it after the model)."""
        if self._handle is not None:
            self._handle.remove()
        self.optimizer = optimizer
        self._handle = optimizer.register_step_pre_hook(self._before_step)
        self._versions = {}
        self.sync_optimizers()

    # ------------------------------------------------------------ parameter groups

    def _group_index(self, slot_id: str) -> int | None:
        assert self.optimizer is not None
        for i, group in enumerate(self.optimizer.param_groups):
            if group.get(GROUP_KEY) == slot_id:
                return i
        return None

    def _remove_group(self, slot_id: str) -> None:
        assert self.optimizer is not None
        index = self._group_index(slot_id)
        if index is None:
            return
        group = self.optimizer.param_groups.pop(index)
        for p in group["params"]:
            self.optimizer.state.pop(p, None)  # momentum of a seed that is gone

    def _add_group(self, slot_id: str, params: list[nn.Parameter]) -> None:
        assert self.optimizer is not None
        self.optimizer.add_param_group({"params": params, **self.group_options, GROUP_KEY: slot_id})

    def sync_optimizers(self, order: list[str] | None = None) -> None:
        """Give each slot's seed parameters exactly one group; ``order``: the slot ids
        whose groups come first, in that order (a resumed optimizer's)."""
        if self.optimizer is None:
            return
        slots = {slot.slot_id: slot for slot in self.model.iter_slots()}
        ids = [*(order or []), *(s for s in slots if s not in (order or []))]
        for slot_id in ids:
            slot = slots[slot_id]
            if self._versions.get(slot_id) == slot.param_version:
                continue
            self._remove_group(slot_id)
            params = slot.seed_parameters()
            if params:
                self._add_group(slot_id, params)
            self._versions[slot_id] = slot.param_version

    def reset_optimizers(self) -> None:
        """Forget every parameter's optimizer state (after a governor rollback)."""
        if self.optimizer is not None:
            self.optimizer.state.clear()
        self.sync_optimizers()

    def group_order(self) -> list[str]:
        if self.optimizer is None:
            return []
        return [g[GROUP_KEY] for g in self.optimizer.param_groups if g.get(GROUP_KEY)]

    # ------------------------------------------------------------ gradient statistics

    def _before_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if not self._seed_acc:
            return
        norm = total_grad_norm(self._host_params)
        if norm is None:
            norm = torch.zeros((), device=next(iter(self._seed_acc.values())).device)
        host_scaled = norm / math.sqrt(max(self._n_host, 1))
        measure_seed_gradients(self.model, self._seed_acc, host_scaled, self.cfg)
        self._steps += 1

    def begin_epoch(self) -> None:
        device = self.model.slots_device()
        self._seed_acc = seed_accumulators(self.model, device)
        self._steps = 0

    def train_batch(self, inputs: torch.Tensor, targets: torch.Tensor) -> None:
        raise GrowerError("in the library API the user's loop trains; call grower.end_epoch()")

    def end_epoch(self) -> Pending:
        """The seeds' gradient statistics; the main numbers are empty (the loss is the
        user's), so an observation shows validation's in their place."""
        slot_ids = list(self._seed_acc)
        device = self.model.slots_device()
        main = torch.zeros(5, device=device, dtype=torch.float32)
        stacked = torch.cat([main, *[self._seed_acc[s] for s in slot_ids]])
        steps = self._steps
        return Pending(stacked, lambda values: train_stats(values, slot_ids, steps))

    # ------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        """The order of the seed groups; the optimizer's own state is saved by its owner
        (:meth:`Grower.state_dict` or Lightning)."""
        return {"order": self.group_order()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._versions = {}
        if self.optimizer is not None:
            for slot_id in self.group_order():
                self._remove_group(slot_id)
        self.sync_optimizers(order=list(state.get("order", [])))
