"""Blueprints: named recipes for seed modules."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from attrs import field, frozen

if TYPE_CHECKING:
    from torch import nn

    from esper_core.components.host import InjectionSpec

TOPOLOGIES = ("cnn", "transformer", "mlp")
# A blueprint's key (topology/name) names it in configs, checkpoints and file names.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,63}")


def _topology(_instance: Any, _attribute: Any, value: Any) -> None:
    if value not in TOPOLOGIES:
        raise ValueError(f"blueprint topology {value!r} is not one of {', '.join(TOPOLOGIES)}")


def _name(_instance: Any, _attribute: Any, value: Any) -> None:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise ValueError(
            f"blueprint name {value!r} is not a plain name (up to 64 letters, digits and _ . + -)"
        )


@frozen
class Blueprint:
    """A seed recipe.

    ``factory(channels)`` returns an ``nn.Module`` whose output has the shape of its
    input: ``[B, C, H, W]`` at any spatial size for ``cnn``, ``[B, T, C]`` at any
    sequence length for ``transformer``, ``[B, C]`` for ``mlp``. ``param_estimate(channels)`` states its
    parameter count; ``identity_at_birth`` says whether a freshly built module returns
    its input unchanged. A run checks all of it when it builds each module
    (:mod:`esper_core.lifecycle.blueprint_check`).

    A ``branch`` blueprint is a parallel branch of the segment that FOLLOWS its slot
    (cnn only): ``factory(channels, next_channels, next_stride)`` returns a module mapping
    the slot's activation ``[B, channels, H, W]`` to an increment ``[B, next_channels,
    H / next_stride, W / next_stride]`` that the slot adds to that segment's output;
    ``param_estimate`` takes the same three numbers, and ``identity_at_birth`` means the
    increment is zero at birth. It can grow only in a slot whose
    :class:`~esper_core.components.host.InjectionSpec` names a following segment
    (``next_channels``). Build and estimate through :meth:`build_for` and
    :meth:`estimate_for`, which pass what each kind takes.
    """

    name: str = field(validator=_name)
    topology: str = field(validator=_topology)
    factory: Callable[..., nn.Module]
    param_estimate: Callable[..., int]
    description: str = ""
    identity_at_birth: bool = False
    # Stacking births: ``inherit(seed, block)`` copies a host block's weights into a freshly
    # built seed (``lifecycle.stack_blocks``); None for blueprints that cannot.
    inherit: Callable[[nn.Module, nn.Module], None] | None = None
    branch: bool = False
    # Left out of a run's default action space (``env.blueprints`` unset); a run that
    # names it in ``env.blueprints`` may germinate it.
    opt_in: bool = False

    def fits(self, spec: InjectionSpec) -> str | None:
        """Why this blueprint cannot grow in the slot of ``spec``, or None if it can."""
        if self.topology != spec.topology:
            return (
                f"blueprint {self.key} is for {self.topology} hosts, this slot is {spec.topology}"
            )
        if self.branch and spec.next_channels is None:
            return (
                f"blueprint {self.key} is a branch of the following segment, and no segment "
                "of known width follows this slot"
            )
        return None

    def sizes_for(self, spec: InjectionSpec) -> tuple[int, ...]:
        """The arguments of ``factory`` and ``param_estimate`` for the slot of ``spec``."""
        problem = self.fits(spec)
        if problem is not None:
            raise ValueError(problem)
        if self.branch:
            assert spec.next_channels is not None
            return (spec.channels, spec.next_channels, spec.next_stride)
        return (spec.channels,)

    def build_for(self, spec: InjectionSpec) -> nn.Module:
        return self.factory(*self.sizes_for(spec))

    def estimate_for(self, spec: InjectionSpec) -> int:
        return int(self.param_estimate(*self.sizes_for(spec)))

    @property
    def key(self) -> str:
        return f"{self.topology}/{self.name}"

    def build(self, *sizes: int) -> nn.Module:
        """The module at ``sizes`` (``channels``, or for a branch ``channels, next_channels,
        next_stride``); slots use :meth:`build_for`."""
        return self.factory(*sizes)
