"""Blueprints are checked when they are used: a plugin's broken seed module fails in one
line naming the blueprint and its plugin, instead of crashing or training wrongly later.

A run's blueprints come from :func:`checked_blueprint` (called once, where the run
resolves its components): every module their factory builds is checked before a slot
uses it (DOMAIN §3):

- it is an ``nn.Module`` whose output, at two input sizes (spatial size for ``cnn``,
  sequence length for ``transformer``; an ``mlp`` activation ``[B, C]`` has one), is
  one tensor of the input's exact shape (a tuple crashes the blend; a shape that merely
  broadcasts trains silently wrong);
- its output is finite;
- its parameter count is within 10% of the blueprint's ``param_estimate``;
- it returns its input unchanged when the blueprint claims ``identity_at_birth``;
- in eval mode, each sample's output does not depend on the other samples of its batch
  (validation repeats each batch with per-sample alphas in eval mode): BatchNorm with
  running statistics passes, as in the host's own layers; batch statistics in eval mode
  (``track_running_stats=False``) do not;
- its floating-point parameters and buffers, and its output, have the input's dtype (a
  float64 seed fails inside the host's first matrix product, blaming the task);
- its code raises exceptions rather than calling ``sys.exit()``, which would end the run
  (or this check) with the exit code it chose.

A branch blueprint (``Blueprint.branch``) is built with ``(channels, next_channels,
next_stride)``; its output must have the following segment's shape ``[B, next_channels,
H // next_stride, W // next_stride]`` and, when it claims ``identity_at_birth``, be zero.
``esper blueprints check`` and ``esper blueprints`` use :func:`sample_spec`: a following
segment twice as wide and down-sampled 2x, as in the CNN host.

The check runs on the CPU, in eval mode and without gradients, on inputs drawn from
its own generator: it changes neither the module nor any random stream of the run.
``esper blueprints check`` runs the same checks for plugin authors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
from attrs import frozen

from esper_core.components.blueprint import Blueprint
from esper_core.components.host import InjectionSpec
from esper_core.errors import PluginError

if TYPE_CHECKING:
    import torch
    from torch import nn

ESTIMATE_TOLERANCE = 0.10  # relative, as DOMAIN §3's blueprints are tested
IDENTITY_ATOL = 1e-5
# Two input sizes per topology: (height, width) of a cnn map, length of a sequence; an
# mlp activation is [batch, features], with no size of its own.
SIZES: dict[str, tuple[tuple[int, ...], ...]] = {
    "cnn": ((5, 5), (7, 6)),
    "transformer": ((3,), (6,)),
    "mlp": ((),),
}
BATCH = 2
# What plugin code may raise and still be reported as a broken blueprint: every exception,
# and SystemExit, which is not one; KeyboardInterrupt stays the user's Ctrl-C.
PLUGIN_FAULTS = (Exception, SystemExit)


def sample_spec(blueprint: Blueprint, channels: int) -> InjectionSpec:
    """A slot at ``channels`` where ``blueprint`` can grow (for the CLI's checks and list)."""
    return InjectionSpec("check", channels, blueprint.topology, 0, 2 * channels, 2)


def checked_blueprint(blueprint: Blueprint, plugin: str) -> Blueprint:
    """``blueprint`` with a factory that checks every module it builds."""
    return attrs.evolve(blueprint, factory=CheckedFactory(blueprint, plugin))


@frozen
class CheckedFactory:
    """Builds with the plugin's factory, then checks; a failure is a one-line PluginError."""

    blueprint: Blueprint
    plugin: str

    def __call__(self, *sizes: int) -> nn.Module:
        try:
            module = self.blueprint.factory(*sizes)
        except PLUGIN_FAULTS as exc:
            raise self._error(sizes, f"its factory {raised(exc)}") from None
        problems = module_problems(self.blueprint, module, *sizes)
        if problems:
            raise self._error(sizes, "; ".join(problems))
        return module

    def _error(self, sizes: tuple[int, ...], what: str) -> PluginError:
        return blueprint_error(self.blueprint, self.plugin, sizes[0], what)


def blueprint_error(blueprint: Blueprint, plugin: str, channels: int, what: str) -> PluginError:
    return PluginError(
        f"blueprint {blueprint.key} of plugin {plugin!r} is broken at {channels} channels: "
        f"{' '.join(what.split())}"
    )


def check_blueprint(blueprint: Blueprint, channels: int) -> list[str]:
    """Every problem of ``blueprint`` at ``channels``, building one module (for the CLI)."""
    sizes = blueprint.sizes_for(sample_spec(blueprint, channels))
    try:
        module = blueprint.factory(*sizes)
    except PLUGIN_FAULTS as exc:
        return [f"its factory {raised(exc)}"]
    return module_problems(blueprint, module, *sizes)


def raised(exc: BaseException) -> str:
    """What plugin code did, for a message: ``raised ValueError: ...`` or ``called sys.exit(0)``."""
    if isinstance(exc, SystemExit):
        return (
            f"called sys.exit({exc.code!r}) (a plugin must raise an exception, not end the process)"
        )
    return f"raised {type(exc).__name__}: {exc}"


def module_problems(blueprint: Blueprint, module: Any, *sizes: int) -> list[str]:
    """What is wrong with ``module``, freshly built from ``blueprint`` at ``sizes``
    (``channels``, or for a branch ``channels, next_channels, next_stride``)."""
    import torch
    from torch import nn

    if not isinstance(module, nn.Module):
        return [f"its factory returned {type(module).__name__}, not a torch.nn.Module"]
    problems = _estimate_problems(blueprint, module, sizes)
    dtype_problem = _dtype_problem(module, torch.get_default_dtype())
    if dtype_problem:
        return [*problems, dtype_problem]  # its forward would only fail on the mismatch
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            for size in SIZES.get(blueprint.topology, ()):
                x = _input(blueprint.topology, sizes[0], size)
                problem = _output_problem(blueprint, module, x, sizes) or _mixing_problem(module, x)
                if problem:
                    problems.append(problem)
                    break
    finally:
        module.train(was_training)
    return problems


def _mixing_problem(module: nn.Module, x: torch.Tensor) -> str | None:
    """The first sample's output alone differs from its output within the batch."""
    import torch

    try:
        together = module(x)[:1]
        alone = module(x[:1])
    except PLUGIN_FAULTS as exc:
        return f"its forward, on an input of shape {list(x[:1].shape)}, {raised(exc)}"
    if not isinstance(alone, torch.Tensor) or alone.shape != together.shape:
        return "its output's batch dimension does not follow its input's"
    if not torch.allclose(alone, together, rtol=1e-4, atol=IDENTITY_ATOL):
        return (
            "in eval mode its output for one sample depends on the other samples of the "
            "batch (batch statistics?); use GroupNorm, LayerNorm or BatchNorm with running "
            "statistics"
        )
    return None


def _estimate_problems(
    blueprint: Blueprint, module: nn.Module, sizes: tuple[int, ...]
) -> list[str]:
    actual = sum(p.numel() for p in module.parameters())
    try:
        estimate = int(blueprint.param_estimate(*sizes))
    except PLUGIN_FAULTS as exc:
        return [f"its param_estimate {raised(exc)}"]
    if abs(actual - estimate) > ESTIMATE_TOLERANCE * max(actual, estimate):
        return [
            f"it has {actual:,} parameters but param_estimate says {estimate:,} "
            f"(more than {ESTIMATE_TOLERANCE:.0%} apart)"
        ]
    return []


def _dtype_problem(module: nn.Module, dtype: torch.dtype) -> str | None:
    """Floating-point parameters or buffers of another dtype than the host's ``dtype``."""
    tensors = [*module.named_parameters(), *module.named_buffers()]
    other = [(name, t.dtype) for name, t in tensors if t.is_floating_point() and t.dtype != dtype]
    if not other:
        return None
    name, found = other[0]
    return (
        f"its tensor {name} is {str(found).removeprefix('torch.')}, but the host computes in "
        f"{str(dtype).removeprefix('torch.')} (build the seed without .double() or dtype=)"
    )


def _input(topology: str, channels: int, size: tuple[int, ...]) -> torch.Tensor:
    import torch

    generator = torch.Generator().manual_seed(0)  # its own stream: the run's RNG is untouched
    shape = (BATCH, channels, *size) if topology == "cnn" else (BATCH, *size, channels)
    return torch.randn(shape, generator=generator)


def _expected_shape(blueprint: Blueprint, x: torch.Tensor, sizes: tuple[int, ...]) -> list[int]:
    if not blueprint.branch:
        return list(x.shape)
    _, next_channels, stride = sizes
    return [x.shape[0], next_channels, *(n // stride for n in x.shape[2:])]


def _output_problem(
    blueprint: Blueprint, module: nn.Module, x: torch.Tensor, sizes: tuple[int, ...]
) -> str | None:
    import torch

    try:
        out = module(x)
    except PLUGIN_FAULTS as exc:
        return f"its forward, on an input of shape {list(x.shape)}, {raised(exc)}"
    if not isinstance(out, torch.Tensor):
        return f"its forward returns {type(out).__name__}, not a tensor of its input's shape"
    if out.dtype != x.dtype:
        what = str(out.dtype).removeprefix("torch.")
        return f"its forward returns {what} for a {str(x.dtype).removeprefix('torch.')} input"
    expected = _expected_shape(blueprint, x, sizes)
    if list(out.shape) != expected:
        what = (
            f"a branch must return the following segment's shape {expected}"
            if blueprint.branch
            else "a seed must keep its input's shape"
        )
        return (
            f"its forward returns shape {list(out.shape)} for an input of shape {list(x.shape)}; "
            + what
        )
    if not bool(torch.isfinite(out).all()):
        return f"its output holds inf or NaN for a finite input of shape {list(x.shape)}"
    if blueprint.branch:
        if blueprint.identity_at_birth and bool(out.abs().max() > IDENTITY_ATOL):
            gap = float(out.abs().max())
            return (
                f"it claims identity_at_birth but its branch adds up to {gap:.3g} "
                "(zero-initialise its last layer, or set identity_at_birth=False)"
            )
        return None
    if blueprint.identity_at_birth and not torch.allclose(out, x, rtol=0.0, atol=IDENTITY_ATOL):
        gap = float((out - x).abs().max())
        return (
            f"it claims identity_at_birth but changes its input by up to {gap:.3g} "
            "(set identity_at_birth=False, or zero-initialise its last layer)"
        )
    return None
