"""Growth operators: named ways to grow the host itself (its width, its depth, one part
of it), provided by plugins as blueprints are.

A host declares what can grow by the methods an operator reads (its *growth sites*);
an operator says which sites of a host it acts on and their sizes (:meth:`sites`; none:
it does not apply to that host), checks a request before the run trains
(:meth:`problems`: the plan, the weights and FLOPs it adds) and starts it
(:meth:`start`): a :class:`~esper_core.lifecycle.host_growth.HostGrowth` in flight whose
:class:`~esper_core.lifecycle.host_growth.HostOperation` installs masked modules, moves their masks, folds them into plain
modules (saying how each new parameter was assembled, so the optimizer's state follows
by piece) or puts the originals back. The core runs the lifecycle every operator shares
once (:mod:`esper_core.lifecycle.host_growth`: the ramp, the stages, fold and prune;
:mod:`esper_core.env.host_growth`: the schedule, a checkpoint's replay, the governor's
rollback, the optimizer's state), and checks an operator as a run would use it
(:mod:`esper_core.lifecycle.operator_check`: bit for bit at birth, the same function
folded, the original back on prune).

A request names its operator's kind (``width``: ``WidthGrowthSpec``; ``depth``:
``DepthGrowthSpec``) and optionally the operator by name; without a name the env takes
the one installed operator of that kind the host declares sites for. An operator with
a true ``by_name_only`` attribute (optional; one that narrows another, such as one
submodule's widths) is taken only where a request names it.

Whether a growth can start now, with the seeds the slots hold, is read from two more
optional members (:mod:`esper_core.env.host_growth_ready`): ``touches_slot(host, spec,
slot)``, whether a growth as ``spec`` asks changes what a seed at ``slot`` (an
``InjectionSpec``) sees (absent: every slot), and ``keeps_fossils``, whether a fossilized
seed in a slot it touches may stay there (absent: no). A live seed in a touched slot
always waits; an operator's ``start`` refuses no more than they say.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from attrs import frozen

if TYPE_CHECKING:
    import torch
    from torch import nn

    from esper_core.lifecycle.host_growth import GrowingModel, HostGrowth

KINDS = ("width", "depth")


@frozen
class GrowthSite:
    """A place of a host an operator grows, by the name a reader knows (``stage0``,
    ``d_model``, ``n_layer``, a user's ``fc1 -> fc2``), and its size there."""

    name: str
    size: int


@frozen
class OperatorSample:
    """A small host an operator acts on, an input it takes, and a request to grow it:
    what ``esper operators`` lists and ``esper operators check`` checks."""

    host: Any  # an nn.Module
    example_input: Any  # a torch.Tensor
    spec: Any  # a WidthGrowthSpec or DepthGrowthSpec


@runtime_checkable
class GrowthOperator(Protocol):
    """One way to grow a host (see the module docstring). ``name``: its registry key
    (``cnn/width``); ``kind``: the request it serves (one of :data:`KINDS`); ``needs``:
    what a host must declare for it, as the end of a one-line refusal."""

    name: str
    kind: str
    description: str
    needs: str

    def sites(self, host: nn.Module) -> tuple[GrowthSite, ...]:
        """The sites of ``host`` this operator grows, with their sizes; empty: it does
        not apply to ``host``."""
        ...

    def refusal(self, host: nn.Module) -> str | None:
        """Why an applicable ``host`` cannot grow at all (one line), or None."""
        ...

    def problems(self, host: nn.Module, spec: Any) -> list[str]:
        """What is wrong with growing ``host`` as ``spec`` asks (the plan, the weights and
        the FLOPs it would add), one line each; empty: nothing."""
        ...

    def start(
        self,
        model: GrowingModel,
        spec: Any,
        *,
        generator: torch.Generator,
        born_epoch: int,
        replayed: Any = None,
    ) -> HostGrowth:
        """The growth of ``model``'s host as ``spec`` asks, installed at alpha 0;
        ``replayed``: a checkpoint's record of it (its exact plan) instead."""
        ...

    def sample(self) -> OperatorSample:
        """A small host this operator grows, for listing and checking it."""
        ...


def operator_key(component: Any, plugin: str) -> str:
    """A registered operator's registry key (its name), or a PluginError if it is none."""
    from esper_core.errors import PluginError

    if not isinstance(component, GrowthOperator) or component.kind not in KINDS:
        raise PluginError(
            f"plugin {plugin!r} registered {component!r} as a growth operator; register "
            "values implementing esper_core.components.growth_operator.GrowthOperator "
            f"(kind one of {', '.join(KINDS)})"
        )
    return str(component.name)
