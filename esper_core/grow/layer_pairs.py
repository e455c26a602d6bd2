"""Which layers of a user's module can grow in width, from one run on an example input.

A *layer pair* is a ``Linear`` or ``Conv2d`` (the producer) whose outputs reach exactly
one other ``Linear`` or ``Conv2d`` (the consumer) through operations that act on each
channel alone: activations, BatchNorm, pooling, dropout, a flatten. Widening the pair adds
outputs to the producer (and channels to the norms between) and inputs to the consumer;
nothing else in the model sees the new channels, so the model's output keeps its shape.

The pairs are found the way Torch-Pruning finds its dependency groups: one forward pass
with gradient (eval mode: no statistics move), then the autograd graph is walked back from
each layer's input. Anything else on the way (a residual add, a concatenation, a
``LayerNorm`` that mixes features, a second reader of the producer's output) ends the
walk, and that producer is reported as refused, with why, so a user reads which of their
layers can widen and which cannot.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from attrs import frozen
from torch import nn

from esper_core.lifecycle.width_parts import CHANNELWISE

LAYERS = (nn.Linear, nn.Conv2d)
NORMS = (nn.BatchNorm1d, nn.BatchNorm2d)
# Modules without parameters that pass each channel on alone (a flatten keeps the channels
# as contiguous runs of features: channel-major).
PASSING = (
    *CHANNELWISE,
    nn.Hardtanh,
    nn.ELU,
    nn.Hardswish,
    nn.Mish,
    nn.Flatten,
    nn.AdaptiveAvgPool2d,
    nn.AdaptiveMaxPool2d,
)
# The same operations called as functions (``F.relu(x)``, ``x.flatten(1)``,
# ``x.mean((2, 3))``), by their autograd node.
PASSING_OPS = frozenset(
    {
        "ReluBackward0",
        "GeluBackward0",
        "SiluBackward0",
        "TanhBackward0",
        "SigmoidBackward0",
        "LeakyReluBackward0",
        "HardtanhBackward0",
        "EluBackward0",
        "HardswishBackward0",
        "MishBackward0",
        "NativeDropoutBackward0",
        "MulBackward0",  # dropout in training mode: times a constant mask
        "CloneBackward0",
        "MaxPool2DWithIndicesBackward0",
        "AvgPool2DBackward0",
        "AdaptiveAvgPool2DBackward0",
        "AdaptiveMaxPool2DBackward0",
        "MeanBackward1",
        "ViewBackward0",
        "ReshapeAliasBackward0",
        "UnsafeViewBackward0",
        "SqueezeBackward1",
        "SqueezeBackward2",
    }
)


@frozen
class LayerPair:
    """A producer layer, the norms after it and the one layer that reads its outputs.

    ``width``: the producer's outputs; ``spread``: the consumer's inputs per channel (1,
    or ``H x W`` when a conv's output is flattened into a linear layer); ``inside``: the
    modules whose output carries the producer's channels (the producer included), each
    with its features per channel, so a slot there knows its width after a growth.
    """

    producer: str
    consumer: str
    norms: tuple[str, ...]
    width: int
    spread: int
    inside: tuple[tuple[str, int], ...]

    def describe(self) -> str:
        return f"{self.producer} -> {self.consumer} ({self.width} wide)"


@frozen
class WidthReport:
    """The pairs found (in the order the forward runs their producers) and, one line
    each, the layers that cannot widen and why."""

    pairs: tuple[LayerPair, ...]
    refused: tuple[str, ...]

    def describe(self) -> str:
        lines = [f"stage {i}: {pair.describe()}" for i, pair in enumerate(self.pairs)]
        return "; ".join(lines) if lines else "no layer pair can widen"


def _features(layer: nn.Module, outputs: bool) -> int:
    if isinstance(layer, nn.Linear):
        return int(layer.out_features if outputs else layer.in_features)
    assert isinstance(layer, nn.Conv2d)
    return int(layer.out_channels if outputs else layer.in_channels)


def _own_forward(module: nn.Module) -> str | None:
    """The torch class ``module`` subclasses with a forward of its own (a scaled Linear, a
    weight-standardised conv), or None: a widening adds the new channels as that torch
    class computes them and folds into the same object, whose own forward would then
    compute something else."""
    for base in (*LAYERS, *NORMS):
        if isinstance(module, base):
            methods = ("forward", "_conv_forward") if base is nn.Conv2d else ("forward",)
            if any(getattr(type(module), m) is not getattr(base, m) for m in methods):
                return base.__name__
    return None


def _channels(tensor: torch.Tensor) -> int:
    return int(tensor.shape[1] if tensor.dim() == 4 else tensor.shape[-1])


def _readers(root: Any) -> dict[int, list[Any]]:
    """The operations that read each autograd node's output, over the whole graph."""
    readers: dict[int, list[Any]] = {}
    seen, stack = {id(root)}, [root]
    while stack:
        node = stack.pop()
        for child, _ in node.next_functions:
            if child is None:
                continue
            readers.setdefault(id(child), []).append(node)
            if id(child) not in seen:
                seen.add(id(child))
                stack.append(child)
    return readers


class _Call:
    """One call of a module, as autograd saw it at that moment: a later in-place
    operation (torchvision's ``ReLU(inplace=True)``, ``out += identity``) gives the same
    tensor another node, so nodes are read in the hooks, not after the forward."""

    def __init__(self, args: Any) -> None:
        x = args[0] if args else None
        self.input = x.grad_fn if isinstance(x, torch.Tensor) else None
        self.input_dim = x.dim() if isinstance(x, torch.Tensor) else 0
        self.output: Any = None
        self.channels = 0
        self.tensors = isinstance(x, torch.Tensor)

    def ended(self, output: Any) -> None:
        self.tensors = self.tensors and isinstance(output, torch.Tensor)
        if isinstance(output, torch.Tensor):
            self.output = output.grad_fn
            self.channels = _channels(output) if output.dim() else 0


class _Run:
    """What one forward pass showed: each module's calls, by autograd node."""

    def __init__(self, model: nn.Module, example_input: torch.Tensor, skip: str) -> None:
        self.modules = {n: m for n, m in model.named_modules() if n and not n.startswith(skip)}
        self.calls: dict[str, list[_Call]] = {name: [] for name in self.modules}

        def before(name: str) -> Callable[..., None]:
            def hook(module: nn.Module, args: Any) -> None:
                self.calls[name].append(_Call(args))

            return hook

        def after(name: str) -> Callable[..., None]:
            def hook(module: nn.Module, args: Any, output: Any) -> None:
                self.calls[name][-1].ended(output)

            return hook

        handles = [m.register_forward_pre_hook(before(n)) for n, m in self.modules.items()]
        handles += [m.register_forward_hook(after(n)) for n, m in self.modules.items()]
        was_training = model.training
        # A layer the user froze makes no autograd node: every parameter takes part here.
        frozen = [p for p in model.parameters() if not p.requires_grad]
        try:
            model.eval()
            for p in frozen:
                p.requires_grad_(True)
            with torch.enable_grad():
                self.output = model(example_input)
        finally:
            for handle in handles:
                handle.remove()
            for p in frozen:
                p.requires_grad_(False)
            model.train(was_training)
        self.root = getattr(self.output, "grad_fn", None)
        self.readers = _readers(self.root) if self.root is not None else {}
        # Modules whose parameters another module holds too (tied weights), by name.
        owners: dict[int, list[str]] = {}
        for name, module in self.modules.items():
            for param in module.parameters(recurse=False):
                owners.setdefault(id(param), []).append(name)
        self.sharing = {n: o for names in owners.values() if len(names) > 1 for n in names
                        for o in names if o != n}  # fmt: skip
        # The node of each leaf module's one output: which module an autograd node is.
        self.by_node: dict[int, str] = {}
        for name, module in self.modules.items():
            call = self.once(name)
            # A module that returns its input (Identity, Dropout in eval mode) made no node.
            made = call is not None and call.output is not None and call.output is not call.input
            if made and not any(module.children()):
                assert call is not None
                self.by_node.setdefault(id(call.output), name)

    def once(self, name: str) -> _Call | None:
        """The module's one call on tensors; None if it ran on others, or not once."""
        calls = self.calls.get(name, [])
        return calls[0] if len(calls) == 1 and calls[0].tensors else None


def _walk(run: _Run, consumer: str) -> tuple[str, tuple[str, ...], list[int]] | None:
    """Back from ``consumer``'s input to the layer that produced it: (producer, norms,
    autograd nodes on the way), or None when anything else is in the way (a second
    reader of a tensor on the way, an operation that mixes channels, the model's input)."""
    called = run.once(consumer)
    assert called is not None
    node = called.input
    norms: list[str] = []
    nodes: list[int] = []
    while node is not None and len(run.readers.get(id(node), [])) == 1:
        nodes.append(id(node))
        name = run.by_node.get(id(node))
        if name is not None:
            module = run.modules[name]
            if isinstance(module, LAYERS):
                return name, tuple(reversed(norms)), nodes
            if isinstance(module, NORMS):
                norms.append(name)
            elif not isinstance(module, PASSING):
                return None
            node = run.calls[name][0].input
            continue
        inputs = [child for child, _ in node.next_functions if child is not None]
        if type(node).__name__ not in PASSING_OPS or len(inputs) != 1:
            return None
        node = inputs[0]
    return None


def _pair(run: _Run, consumer: str) -> LayerPair | tuple[str, str] | None:
    """The pair ``consumer`` closes; (producer, why not) when its producer is found but
    the pair cannot widen; None when no layer's outputs reach it alone."""
    walked = _walk(run, consumer)
    if walked is None:
        return None
    producer, norms, nodes = walked
    p, c = run.modules[producer], run.modules[consumer]
    width = _features(p, outputs=True)
    for name in (producer, *norms, consumer):
        other = run.sharing.get(name)
        if other:
            # A fold makes new parameters: the tie would silently come undone.
            return producer, f"{producer} -> {consumer}: {name} shares its parameters with {other}"
        torch_class = _own_forward(run.modules[name])
        if torch_class is not None:
            return producer, (
                f"{producer} -> {consumer}: {name} ({type(run.modules[name]).__name__}) has a "
                f"forward of its own, which a widening cannot keep (it widens a plain "
                f"{torch_class}; use nn.{torch_class} there or grow with seeds)"
            )
    for layer in (p, c):
        if isinstance(layer, nn.Conv2d) and (layer.groups != 1 or layer.padding_mode != "zeros"):
            return producer, f"{producer} -> {consumer}: only convs with groups=1 and zero padding"
    bad = [n for n in norms if int(getattr(run.modules[n], "num_features", -1)) != width]
    if bad:
        return producer, f"{producer} -> {consumer}: norm {bad[0]} is not {width} wide"
    consumer_in = run.once(consumer)
    assert consumer_in is not None
    reads = _features(c, outputs=False)
    if isinstance(p, nn.Linear) and isinstance(c, nn.Conv2d):
        return producer, f"{producer} (Linear) -> {consumer} (Conv2d): not channel for channel"
    if isinstance(p, nn.Conv2d) and isinstance(c, nn.Linear):
        if consumer_in.input_dim != 2 or reads % width:
            return (
                producer,
                f"{producer} -> {consumer}: {reads} inputs are not {width} flattened channels",
            )
        spread = reads // width
    elif reads != width:
        return producer, f"{producer} -> {consumer}: {reads} inputs for {width} outputs"
    else:
        spread = 1
    on_way = set(nodes)
    inside = [
        (name, call.channels // width)
        for name in run.modules
        if (call := run.once(name)) is not None and id(call.output) in on_way
    ]
    return LayerPair(producer, consumer, norms, width, spread, tuple(inside))


def _why_not(run: _Run, layer: str) -> str:
    """Why ``layer``'s outputs reach no single layer: forward from its output to the first
    operation that is not per-channel, or to a second reader."""
    called = run.once(layer)
    if called is None:
        times = len(run.calls[layer])
        if times == 0:
            return f"{layer}: never called (its owner reads its weight itself, as attention does)"
        return f"{layer}: runs {times} times per forward (a shared module)"
    node = called.output
    while node is not None:
        readers = run.readers.get(id(node), [])
        if node is run.root and not readers:
            return f"{layer}: its outputs are the model's output"
        if len(readers) != 1:
            where = "its output" if node is called.output else "its channels"
            return (
                f"{layer}: {where} are read by {len(readers)} operations (a residual or a branch)"
            )
        reader = readers[0]
        name = run.by_node.get(id(reader))
        module = run.modules.get(name) if name else None
        if isinstance(module, (*NORMS, *PASSING)) or (
            module is None and type(reader).__name__ in PASSING_OPS
        ):
            node = reader
            continue
        what = f"{name} ({type(module).__name__})" if module is not None else type(reader).__name__
        joined = len(reader.next_functions) > 1  # another tensor, with gradient or not
        if joined and module is None:
            return f"{layer}: {what} after it joins its channels to another tensor"
        return f"{layer}: {what} after it mixes its channels"
    return f"{layer}: its output has no gradient"


def find_pairs(
    model: nn.Module, example_input: torch.Tensor, skip: str = "esper_slots"
) -> WidthReport:
    """The layer pairs of ``model`` that can widen, and why its other layers cannot (one
    forward on ``example_input`` in eval mode; submodules under ``skip`` are not looked at)."""
    run = _Run(model, example_input, skip)
    layers = [name for name, m in run.modules.items() if isinstance(m, LAYERS)]
    pairs: dict[str, LayerPair] = {}
    why: dict[str, str] = {}
    for name in layers:
        if run.once(name) is None:
            continue
        found = _pair(run, name)
        if isinstance(found, LayerPair):
            pairs[found.producer] = found
        elif found is not None:
            why[found[0]] = found[1]
    refused = [why.get(name) or _why_not(run, name) for name in layers if name not in pairs]
    return WidthReport(tuple(pairs[n] for n in layers if n in pairs), tuple(refused))
