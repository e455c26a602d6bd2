"""The trainer of growth in the user's own loop: the user trains, this keeps the seeds'
parameters in the user's optimizer and measures their gradients.

A seed's parameters (its gate included) join the user's optimizer when the seed is
built and leave it, with their optimizer state, when it is pruned. Each joins the *host
group* of its kind: the parameter group that holds the slot module's own parameters of
the same kind (the weight-decay rule's kinds, :func:`~esper_core.env.optimizers.param_kind`:
kernels with kernels, norms and biases with norms and biases), else any host parameters of
that kind, else any host parameters. In the host's group a seed has the host's learning
rate, momentum, betas and weight decay at every step, whatever moves them: every torch
scheduler keeps one entry per group, and since no group is added, none of them (``LambdaLR``
and ``CosineAnnealingLR`` refuse a group added mid-run) needs to know about seeds.

``group_options`` (the Grower's ``seed_group``) ask for hyper-parameters of the seeds'
own instead: then each seed's parameters form groups tagged ``esper_slot``, copies of
their host groups with those options on top, the approach of Lightning's
``BaseFinetuning.unfreeze_and_add_param_group``. The copy carries every key a scheduler
reads (``initial_lr``, ``max_lr``, ``min_lr``, momentum, betas), and before every
optimizer step a pre-hook sets each such group's hyper-parameters to its host group's
current ones (an ``lr`` option is kept as a multiple of the host's ``initial_lr``). A
scheduler that keeps per-group lists cannot take such a group: see docs/own-model.md.

Gradients are measured by the same pre-hook, when they are complete (after
``GradScaler`` has unscaled them); nothing is measured while no seed learns.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from esper_core.config import TrainingSection
from esper_core.env.adam_ages import correct_young_slices
from esper_core.env.gradients import measure_seed_gradients, seed_accumulators, total_grad_norm
from esper_core.env.optimizers import assembled_state, embedding_parameters, param_kind
from esper_core.env.pending import Pending
from esper_core.env.training import train_stats
from esper_core.errors import GrowerError
from esper_core.grow.layer_widening import ON_LAYER
from esper_core.grow.module_host import ModuleHost, slot_id_of
from esper_core.grow.optimizer_fit import check_owns_model, check_seed_group
from esper_core.lifecycle.model import MorphogeneticModel
from esper_core.lifecycle.width_fold import FoldedParam

GROUP_KEY = "esper_slot"
# The position of the host group a seed's own group follows, among the host groups.
FOLLOWS_KEY = "esper_follows"
# The seeds' learning rate as a multiple of that host group's.
LR_SCALE_KEY = "esper_lr_scale"
_OWN_KEYS = ("params", GROUP_KEY, FOLLOWS_KEY, LR_SCALE_KEY)


def _host_groups(optimizer: torch.optim.Optimizer) -> list[dict[str, Any]]:
    return [g for g in optimizer.param_groups if GROUP_KEY not in g]


def check_optimizer(optimizer: Any, where: str) -> None:
    """A torch optimizer whose parameter groups seeds and widened layers can join."""
    name = type(optimizer).__name__
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise GrowerError(
            f"{where}: expected a torch.optim.Optimizer, got {name}; seeds join its "
            "parameter groups, so pass the optimizer that trains the model"
        )
    if isinstance(optimizer, torch.optim.LBFGS):
        # LBFGS reads a list of its parameters taken when it was built: seeds and a
        # growth's folded layers, which the grower puts in its groups, would never train.
        raise GrowerError(
            f"{where}: torch.optim.{name} keeps its own list of the parameters it was built "
            "with, so seeds and widened layers would never train; use another optimizer "
            "(SGD, Adam, AdamW)"
        )


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
        with model.host_own():
            self._host_embeddings = embedding_parameters(model.host.modules())
        self._n_host = sum(p.numel() for p in self._host_params)
        self._versions: dict[str, int] = {}
        # The seeds in the optimizer, in the order they joined (a resume rejoins them so).
        self._members: dict[str, list[nn.Parameter]] = {}
        self._seed_acc: dict[str, torch.Tensor] = {}
        self._steps = 0
        self.optimizer: torch.optim.Optimizer | None = None
        self._handle: Any = None
        self._ages: Any = None
        if optimizer is not None:
            self.attach(optimizer)

    def attach(self, optimizer: torch.optim.Optimizer) -> None:
        """Use ``optimizer`` for the seeds from now on (Lightning creates it after the model)."""
        for handle in (self._handle, self._ages):
            if handle is not None:
                handle.remove()
        check_owns_model(optimizer, self.model.parameters(), "the grower's optimizer")
        check_seed_group(self.group_options, optimizer, "Grower(seed_group=...)")
        self.optimizer = optimizer
        self._handle = optimizer.register_step_pre_hook(self._before_step)
        # A width growth's fold leaves young slices in the user's Adam (adam_ages).
        self._ages = correct_young_slices(optimizer)
        self._versions, self._members = {}, {}
        self.sync_optimizers()

    # ------------------------------------------------------------ parameter groups

    def _leave(self, slot_id: str) -> None:
        assert self.optimizer is not None
        params = self._members.pop(slot_id, [])
        gone = {id(p) for p in params}
        groups = self.optimizer.param_groups
        groups[:] = [g for g in groups if g.get(GROUP_KEY) != slot_id]
        for group in groups:
            group["params"] = [p for p in group["params"] if id(p) not in gone]
        for p in params:
            self.optimizer.state.pop(p, None)  # momentum of a seed that is gone

    def _slot_module(self, slot_id: str) -> nn.Module | None:
        host = self.model.host
        if isinstance(host, ModuleHost):
            for name in host.names:
                if slot_id_of(name) == slot_id:
                    return host.module.get_submodule(name)
        return None

    def _host_group_by_kind(self, slot_id: str | None) -> dict[str, int]:
        """For each parameter kind, the host group (its position among the host groups)
        this slot's seed parameters of that kind join (see the module docstring); with
        no slot, the host's new parameters of a width growth."""
        assert self.optimizer is not None
        where = {id(p): i for i, g in enumerate(_host_groups(self.optimizer)) for p in g["params"]}
        module = self._slot_module(slot_id) if slot_id is not None else None
        near = [p for p in (module.parameters() if module else ()) if id(p) in where]
        held = [p for p in self._host_params if id(p) in where]
        anywhere = where[id((near or held)[0])] if near or held else 0
        by_kind = dict.fromkeys(("embedding", "vector", "matrix"), anywhere)
        for p in reversed([*near, *held]):  # the slot module's own first
            by_kind[param_kind(p, self._host_embeddings)] = where[id(p)]
        return by_kind

    def _join(self, slot_id: str, params: list[nn.Parameter]) -> None:
        assert self.optimizer is not None
        slot = self.model.slot(slot_id)
        seed_modules = [
            m for mod in (slot.seed, slot.gate) if mod is not None for m in mod.modules()
        ]
        embeddings = embedding_parameters(seed_modules)
        by_kind = self._host_group_by_kind(slot_id)
        by_host: dict[int, list[nn.Parameter]] = {}
        # An optimizer built from model.parameters() after the seed existed holds it
        # already (the user's module owns the seeds): it stays where the user put it.
        held = {id(p) for g in self.optimizer.param_groups for p in g["params"]}
        for p in params:
            if id(p) not in held:
                by_host.setdefault(by_kind[param_kind(p, embeddings)], []).append(p)
        hosts = _host_groups(self.optimizer)
        for index, members in by_host.items():
            host = hosts[index]
            if not self.group_options:
                host["params"].extend(members)
                continue
            group = {k: v for k, v in host.items() if k not in _OWN_KEYS}
            base = host.get("initial_lr", host["lr"])
            group[LR_SCALE_KEY] = float(self.group_options.get("lr", base) / base) if base else 1.0
            group[FOLLOWS_KEY] = index
            group.update(self.group_options)
            self.optimizer.add_param_group({**group, "params": members, GROUP_KEY: slot_id})
        self._members[slot_id] = list(params)

    def sync_optimizers(self, order: list[str] | None = None) -> None:
        """Keep each slot's seed parameters in the optimizer, once; ``order``: the slot ids
        that join first, in that order (a resumed optimizer's)."""
        if self.optimizer is None:
            return
        slots = {slot.slot_id: slot for slot in self.model.iter_slots()}
        for slot_id in dict.fromkeys([*(order or []), *slots]):
            slot = slots[slot_id]
            if self._versions.get(slot_id) == slot.param_version:
                continue
            self._leave(slot_id)
            params = slot.seed_parameters()
            if params:
                self._join(slot_id, params)
            self._versions[slot_id] = slot.param_version

    def reset_optimizers(self) -> None:
        """Forget every parameter's optimizer state (after a governor rollback)."""
        if self.optimizer is not None:
            self.optimizer.state.clear()
        self.sync_optimizers()

    def host_changed(self, folded: Sequence[FoldedParam] = ()) -> None:
        """A width growth changed the user's layers: the user's optimizer follows, as the
        env's host optimizer does (:func:`~esper_core.env.optimizers.carry_state`). A
        folded parameter takes the place of its old piece in that piece's group, its state
        assembled from the pieces' (under Adam, its young slices' lag, which the hook
        :meth:`attach` put on the optimizer steps at their own age); the parameters that
        are gone leave with their state; a growth's new parameters join the group of the
        layer they widen, with fresh state. A layer the user left out of the optimizer
        (fine-tuning the head alone) stays out, its new parameters and folded ones too."""
        before = self._host_params
        self._host_params = self.model.host_parameters()
        self._n_host = sum(p.numel() for p in self._host_params)
        with self.model.host_own():
            self._host_embeddings = embedding_parameters(self.model.host.modules())
        if self.optimizer is None:
            return  # an optimizer attached later is built over the model as it is then
        optimizer = self.optimizer
        now = {id(p) for p in self._host_params}
        gone = {id(p): p for p in before if id(p) not in now}
        hosts = _host_groups(optimizer)
        group_of = {id(p): group for group in hosts for p in group["params"]}
        for fold in folded:
            group = group_of.get(id(fold.pieces[0]))
            if group is not None:
                group["params"].append(fold.merged)
                state = assembled_state(optimizer, fold)
                if state:
                    optimizer.state[fold.merged] = state
        for group in optimizer.param_groups:
            group["params"] = [p for p in group["params"] if id(p) not in gone]
        for p in gone.values():
            optimizer.state.pop(p, None)
        held = {id(p) for group in optimizer.param_groups for p in group["params"]}
        group_of = {id(p): group for group in hosts for p in group["params"]}
        known = {id(p) for p in before} | {id(fold.merged) for fold in folded}
        layers = self._widened_layers()
        by_kind = self._host_group_by_kind(None)
        for p in self._host_params:
            if id(p) in held or id(p) in known:
                continue
            layer = layers.get(id(p))
            if layer is None:  # not a layer's growth: the host group of its kind
                hosts[by_kind[param_kind(p, self._host_embeddings)]]["params"].append(p)
                continue
            mates = [group_of[id(q)] for q in layer if id(q) in group_of]
            if mates:  # else the user left the layer out: its new parameters stay out
                mates[0]["params"].append(p)

    def _widened_layers(self) -> dict[int, list[nn.Parameter]]:
        """For each new parameter of a width growth riding on one of the user's layers
        (:data:`~esper_core.grow.layer_widening.ON_LAYER`), that layer's own parameters."""
        layers: dict[int, list[nn.Parameter]] = {}
        with self.model.host_own():
            for module in self.model.host.modules():
                part = getattr(module, ON_LAYER, None)
                if isinstance(part, nn.Module):
                    own = list(module.parameters(recurse=False))
                    layers.update({id(p): own for p in part.parameters()})
        return layers

    def group_order(self) -> list[str]:
        """The slots whose seeds are in the optimizer, in the order they joined."""
        return list(self._members)

    # ------------------------------------------------------------ gradient statistics

    def _follow(self, optimizer: torch.optim.Optimizer) -> None:
        """Each seed group takes its host group's hyper-parameters as they are now (a
        scheduler has moved them since the last step); options the user set stay."""
        hosts: list[dict[str, Any]] | None = None
        for group in optimizer.param_groups:
            index = group.get(FOLLOWS_KEY)
            if index is None:
                continue
            hosts = _host_groups(optimizer) if hosts is None else hosts
            if index >= len(hosts):
                continue  # the user removed groups; the seeds keep what they have
            host = hosts[index]
            for key, value in host.items():
                if key not in _OWN_KEYS and key not in self.group_options:
                    group[key] = value
            group["lr"] = host["lr"] * group[LR_SCALE_KEY]

    def _before_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self.group_options:
            self._follow(optimizer)
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
        """The order the seeds joined the optimizer in; the optimizer's own state is saved
        by its owner (:meth:`Grower.state_dict` or Lightning)."""
        return {"order": self.group_order()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._versions = {}
        if self.optimizer is not None:
            for slot_id in self.group_order():
                self._leave(slot_id)
        self.sync_optimizers(order=list(state.get("order", [])))
