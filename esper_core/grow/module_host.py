"""A host from any ``nn.Module``: each slot sits on a named submodule's output.

Forward hooks, not ``torch.fx``: a hook sees the model exactly as it runs (Python
control flow, ``torch.flatten`` in torchvision's ResNet, the fast path of
``nn.TransformerEncoder``), so any model that runs can host seeds; fx would need a
model that traces symbolically and would run a regenerated copy of its forward. A hook
also leaves the user's forward and the user's module object untouched: an empty slot's
hook returns None, so the submodule's own tensor flows on and outputs and gradients
are the bare model's bit for bit, and whatever calls that module (the user's loop, a
``LightningModule``) runs the slots. Channels and topology come from one dry run on an
example input: a 4-D output ``[batch, channels, H, W]`` is a ``cnn`` slot, a 3-D
``[batch, seq, features]`` one a ``transformer`` slot, a 2-D ``[batch, features]`` one
(an MLP's hidden layer, a tabular model) an ``mlp`` slot.

The user's module also *owns* the slots: they are registered on it as the submodule
``esper_slots`` (an ``nn.ModuleDict`` by slot id), the way PEFT and Torch-Pruning attach
their modules, so ``model.parameters()`` (clipping, an optimizer built later),
``model.state_dict()``, ``model.to()``, ``model.train()``/``eval()``, ``torch.save(model)``
and ``copy.deepcopy(model)`` (an EMA copy) include the seeds. The hooks are picklable
objects holding their slot, so a saved or copied model runs its own seeds.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import attrs
import torch
from torch import nn

from esper_core.components.host import InjectionSpec
from esper_core.errors import HostError
from esper_core.grow.layer_pairs import LayerPair
from esper_core.grow.layer_widening import LayerWidening
from esper_core.grow.module_checks import check_arguments, dry_run, slot_names

Route = Callable[[torch.Tensor], torch.Tensor]


def slot_id_of(name: str) -> str:
    """The slot id of submodule ``name``: ``nn.ModuleDict`` keys may not hold dots."""
    return name.replace(".", "/")


# The submodule of the user's model that holds the slots while a Grower grows it.
SLOTS_ATTRIBUTE = "esper_slots"


class SlotDict(nn.ModuleDict):
    """The slots as the user's module holds them. Its forward is the identity: a model
    that calls its children in turn (an ``nn.Sequential``, where the slots are the last
    entry) passes its output through unchanged; the slots run from the hooks."""

    def forward(self, x: Any) -> Any:
        return x


class SlotHook:
    """The forward hook of one slot: the submodule's output through the slot when it
    holds a seed. An object holding its route, not a closure, so that ``torch.save(model)``
    pickles it and ``copy.deepcopy(model)`` gives the copy a hook on the copy's slot."""

    def __init__(self, route: Route) -> None:
        self.route = route

    def __call__(self, module: nn.Module, args: Any, output: Any) -> torch.Tensor | None:
        # An empty slot returns None: the submodule's own tensor flows on unchanged.
        if getattr(self.route, "has_seed", True):
            return self.route(output)
        return None


class SampleCounter:
    """A forward pre-hook counting the samples of training-mode forwards with gradient:
    the user's loop trains, so this is how the library path learns what an epoch cost.
    Picklable; a copy of the model counts into its own counter, which nobody reads."""

    def __init__(self) -> None:
        self.samples = 0

    def __call__(self, module: nn.Module, args: Any) -> None:
        if module.training and torch.is_grad_enabled() and args:
            first = args[0]
            if isinstance(first, torch.Tensor) and first.dim():
                self.samples += int(first.shape[0])


class ModuleHost(nn.Module):
    """Runs the user's module; slots enter through forward hooks and live in the user's
    module (see the module docstring).

    Implements :class:`~esper_core.components.host.RoutedHost` (the model hands its
    slots to :meth:`route` instead of calling segments) and
    :class:`~esper_core.components.host.OwnsSlots`.
    """

    def __init__(
        self,
        module: nn.Module,
        names: Sequence[str],
        specs: tuple[InjectionSpec, ...],
        output_features: int = 0,
    ) -> None:
        super().__init__()
        self.module = module
        self.names = tuple(names)
        self.topology = specs[0].topology
        self._specs = specs
        # The last dimension of the model's output: classes (or a vocabulary).
        self.output_features = output_features
        self._routes: dict[str, Route] = {}
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        self._counter = SampleCounter()
        # The layer pairs a width growth may widen (none until the Grower asks), and
        # their widths now: implements WidensItsLayers.
        self.pairs: tuple[LayerPair, ...] = ()
        self._widths: tuple[int, ...] = ()
        self._refused: tuple[str, ...] = ()

    # ------------------------------------------------------------ width growth

    def enable_width(self, pairs: Sequence[LayerPair], refused: Sequence[str] = ()) -> None:
        """Let width growth widen these pairs of the user's module (``widen_stages``
        index them); ``refused``: why its other layers cannot widen, one line each."""
        self.pairs = tuple(pairs)
        self._widths = tuple(pair.width for pair in pairs)
        self._refused = tuple(refused)

    def width_refusal(self) -> str:
        """Why no width of the user's module can grow (read when it has no pair)."""
        name = type(self.module).__name__
        why = "; ".join(self._refused[:3]) or "it has no Linear or Conv2d layer"
        return (
            f"{name} cannot grow in width: no Linear or Conv2d of it feeds a single other one "
            f"through per-channel operations ({why}); grow it with seeds instead"
        )

    def stage_channels(self) -> tuple[int, ...]:
        return self._widths

    def stage_names(self) -> tuple[str, ...]:
        return tuple(f"{pair.producer} -> {pair.consumer}" for pair in self.pairs)

    def set_stage_channels(self, channels: tuple[int, ...]) -> None:
        """The pairs' widths after a growth; a slot on a module that carries a pair's
        channels takes the pair's new width."""
        self._widths = tuple(channels)
        per_channel = {
            slot_id_of(name): (width, times)
            for pair, width in zip(self.pairs, channels)
            for name, times in pair.inside
        }
        self._specs = tuple(
            attrs.evolve(spec, channels=per_channel[spec.slot_id][0] * per_channel[spec.slot_id][1])
            if spec.slot_id in per_channel
            else spec
            for spec in self._specs
        )

    def layer_widening(
        self,
        old: tuple[int, ...],
        new: tuple[int, ...],
        generator: torch.Generator | None,
        cross_init: str,
    ) -> LayerWidening:
        return LayerWidening(
            self.module, self.pairs, old, new, generator, cross_init, self._rehook, slot_id_of
        )

    def _rehook(self) -> None:
        """The slots' hooks back on the modules now at their names (a growth swapped some)."""
        if self.routed:
            self.route(self._routes)

    def injection_specs(self) -> tuple[InjectionSpec, ...]:
        return self._specs

    def slot_modules(self) -> dict[str, nn.Module]:
        """Each slot's named submodule, whose output is the slot's activation (an empty
        slot has no hook on it, so the expansion probe listens to these)."""
        modules = dict(self.module.named_modules())
        return {slot_id_of(name): modules[name] for name in self.names}

    def route(self, routes: Mapping[str, Route]) -> None:
        """Send each named submodule's output through ``routes[slot_id]`` from now on."""
        self.unroute()
        self._routes = dict(routes)
        if routes:
            self._handles.append(self.module.register_forward_pre_hook(self._counter))
        modules = dict(self.module.named_modules())
        for name in self.names:
            slot_id = slot_id_of(name)
            if slot_id in self._routes:
                hook = SlotHook(self._routes[slot_id])
                self._handles.append(modules[name].register_forward_hook(hook))

    @property
    def routed(self) -> bool:
        """Whether the hooks are on the user's module (between route() and unroute())."""
        return bool(self._handles)

    def unroute(self) -> None:
        """Remove the hooks: the user's module computes what it did before."""
        for handle in self._handles:
            handle.remove()
        self._handles, self._routes = [], {}

    # ------------------------------------------------------------ the slots' owner

    def adopt(self, slots: nn.ModuleDict) -> nn.ModuleDict:
        """Register ``slots`` on the user's module (its ``esper_slots`` submodule, a
        :class:`SlotDict` of the same slots); return that container."""
        if hasattr(self.module, SLOTS_ATTRIBUTE):
            raise HostError(_taken(self.module))
        owned = SlotDict(dict(slots.items()))
        self.module.add_module(SLOTS_ATTRIBUTE, owned)
        return owned

    def release(self) -> nn.ModuleDict | None:
        """Take the slots off the user's module again (the module as it was given);
        return them, or None if it held none."""
        slots = getattr(self.module, SLOTS_ATTRIBUTE, None)
        if not isinstance(slots, nn.ModuleDict):
            return None
        delattr(self.module, SLOTS_ATTRIBUTE)
        return slots

    @contextmanager
    def without_slots(self) -> Iterator[None]:
        """The user's module alone in here: its parameters and ``state_dict`` are the host's
        own (what the governor snapshots and the optimizer's host groups hold)."""
        slots = self.release()
        try:
            yield
        finally:
            if slots is not None:
                self.module.add_module(SLOTS_ATTRIBUTE, slots)

    def take_samples(self) -> int:
        """The samples trained on (training-mode forwards with gradient) since the last call."""
        samples, self._counter.samples = self._counter.samples, 0
        return samples

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.module(x)
        return out


def _taken(module: nn.Module) -> str:
    cls = type(module).__name__
    if isinstance(getattr(module, SLOTS_ATTRIBUTE, None), nn.ModuleDict):
        return (
            f"{cls} already holds grown seeds ({SLOTS_ATTRIBUTE}: a copy or a torch.save of a "
            "grown model); grow the original model, or resume a fresh one with "
            "grower.load_state_dict(saved_grower_state)"
        )
    return (
        f"{cls} has an attribute {SLOTS_ATTRIBUTE!r} of its own, where a Grower keeps the "
        "seeds; rename that attribute of your model"
    )


def _missing(module: nn.Module, name: str) -> str:
    names = [n for n, _ in module.named_modules() if n]
    close = difflib.get_close_matches(name, names, n=3)
    hint = f"did you mean {', '.join(close)}?" if close else f"submodules: {', '.join(names[:12])}"
    return (
        f"slot {name!r}: {type(module).__name__} has no submodule of that name; "
        f"name one from model.named_modules() ({hint})"
    )


def _topology(name: str, cls: str, output: Any) -> tuple[str, int]:
    if not isinstance(output, torch.Tensor):
        kind = type(output).__name__
        raise HostError(
            f"slot {name!r}: {cls} returns a {kind}, not a tensor; put the slot on a "
            "submodule that returns one tensor (e.g. a child of this one)"
        )
    if output.dim() == 4:
        return "cnn", int(output.shape[1])
    if output.dim() == 3:
        return "transformer", int(output.shape[-1])
    if output.dim() == 2:
        return "mlp", int(output.shape[-1])
    raise HostError(
        f"slot {name!r}: {cls} outputs shape {tuple(output.shape)}; a slot needs "
        "[batch, channels, H, W] (cnn), [batch, seq, features] (transformer) or "
        "[batch, features] (mlp): pick another submodule"
    )


def host_from_module(
    model: nn.Module, slots: Sequence[str], example_input: torch.Tensor
) -> ModuleHost:
    """A host with one slot on the output of each named submodule of ``model``.

    One dry run on ``example_input`` (eval mode, no gradient, so BatchNorm statistics
    and the random number generators are untouched) finds each slot's channels,
    topology and order.
    """
    check_arguments(model, example_input)
    slots = slot_names(slots)
    if not slots:
        raise HostError("slots: name at least one submodule of the model, e.g. slots=['layer1']")
    if len(set(slots)) != len(slots):
        raise HostError(f"slots: {list(slots)} names a submodule twice; name each once")
    if hasattr(model, SLOTS_ATTRIBUTE):
        raise HostError(_taken(model))
    modules = dict(model.named_modules())
    for name in slots:
        if not name or name not in modules:
            raise HostError(_missing(model, name))
    outputs: dict[str, list[Any]] = {name: [] for name in slots}
    order: list[str] = []

    def recorder(name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            outputs[name].append(output)
            order.append(name)

        return hook

    handles = [modules[name].register_forward_hook(recorder(name)) for name in slots]
    try:
        out = dry_run(model, example_input)
    finally:
        for handle in handles:
            handle.remove()
    specs: list[InjectionSpec] = []
    for name in sorted(slots, key=lambda n: order.index(n) if n in order else len(order)):
        cls = type(modules[name]).__name__
        seen = outputs[name]
        if not seen:
            raise HostError(
                f"slot {name!r}: {cls} never ran on the example input; "
                "put the slot on a submodule that the forward calls"
            )
        if len(seen) > 1:
            raise HostError(
                f"slot {name!r}: {cls} runs {len(seen)} times per forward (a shared module); "
                "put the slot on a submodule that runs once"
            )
        topology, channels = _topology(name, cls, seen[0])
        specs.append(InjectionSpec(slot_id_of(name), channels, topology, len(specs)))
    topologies = {spec.topology for spec in specs}
    if len(topologies) > 1:
        raise HostError(
            f"slots {list(slots)} mix {' and '.join(sorted(topologies))} outputs; "
            "choose slots of one kind (all 4-D, all 3-D or all 2-D)"
        )
    ids = [spec.slot_id for spec in specs]
    if len(set(ids)) != len(ids):
        raise HostError(f"slots {list(slots)} give repeated slot ids {ids}; rename a submodule")
    # [batch] (1-D) outputs have no class dimension: their last size is the batch's, which
    # would pass for a class count. 0 makes the Grower refuse them.
    features = int(out.shape[-1]) if isinstance(out, torch.Tensor) and out.dim() >= 2 else 0
    return ModuleHost(model, list(slots), tuple(specs), features)


# The layers a host growth would have to rewrite; the rest only pass their width on.
_RESHAPED = (nn.Conv2d, nn.Linear, nn.Embedding, nn.MultiheadAttention)


def layer_names(model: nn.Module, shown: int = 4) -> str:
    """The user's layers a host growth would have to rewrite, by name, for an error: the
    first ``shown`` of them and how many more."""
    names = [
        f"{name} ({type(m).__name__})"
        for name, m in model.named_modules()
        if isinstance(m, _RESHAPED)
    ]
    if not names:
        return "no Conv2d, Linear or Embedding layer"
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more
