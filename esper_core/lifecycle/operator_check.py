"""A growth operator checked as a run would use it, on the small host it provides
(:meth:`~esper_core.components.growth_operator.GrowthOperator.sample`): what
``esper operators check`` runs for plugin authors.

- the sample host declares sites for the operator, no refusal, and the sample request
  has no problems;
- born (alpha 0), the grown host computes its old function bit for bit;
- ramped to alpha 1 and folded into plain modules, it computes what the masked host did
  at alpha 1, with more parameters than before;
- pruned mid-ramp, it computes its old function bit for bit again, with the parameters
  it had.

Every forward runs in eval mode without gradients (a host's dropout would make two
forwards differ), on the CPU. Plugin code that raises is reported as a problem, one line.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from attrs import frozen

from esper_core.lifecycle.blueprint_check import PLUGIN_FAULTS, raised
from esper_core.lifecycle.stages import Stage

if TYPE_CHECKING:
    import torch
    from torch import nn

    from esper_core.components.growth_operator import GrowthOperator
    from esper_core.lifecycle.slot import SeedSlot

# The masked host at alpha 1 against its fold: the same sums in another order.
FOLD_ATOL, FOLD_RTOL = 1e-5, 1e-4


@frozen
class _SampleModel:
    """The model a growth reads (``GrowingModel``): the sample host, and no seed slots
    for the growth to keep empty."""

    host: Any

    def iter_slots(self) -> Iterator[SeedSlot]:
        return iter(())


def check_operator(operator: GrowthOperator) -> list[str]:
    """The operator's problems on its sample host, one line each; empty: it passed."""
    try:
        return _grow_fold_prune(operator)
    except PLUGIN_FAULTS as exc:  # the plugin's code: name what it did, in one line
        return [f"growing its sample host {raised(exc)}"]


def _forward(host: nn.Module, x: torch.Tensor) -> torch.Tensor:
    import torch

    with torch.no_grad():
        out: torch.Tensor = host(x)
    return out


def _params(host: nn.Module) -> dict[str, tuple[int, ...]]:
    return {name: tuple(p.shape) for name, p in host.named_parameters()}


def _grow_fold_prune(operator: GrowthOperator) -> list[str]:
    import torch

    sample = operator.sample()
    host = sample.host.eval()
    if not operator.sites(host):
        return [f"its sample host ({type(host).__name__}) declares no site for it"]
    refusal = operator.refusal(host)
    if refusal is not None:
        return [f"it refuses its sample host: {refusal}"]
    problems = operator.problems(host, sample.spec)
    if problems:
        return [f"its sample request: {p}" for p in problems]
    before, params = _forward(host, sample.example_input), _params(host)

    growth = operator.start(
        _SampleModel(host), sample.spec, generator=torch.Generator().manual_seed(0), born_epoch=0
    )
    host.eval()  # the masked modules are built in training mode, as torch builds any
    found = []
    if not torch.equal(_forward(host, sample.example_input), before):
        found.append("born at alpha 0, the host does not compute its old function bit for bit")
    while growth.stage != Stage.HOLDING:
        growth.tick()
    masked = _forward(host, sample.example_input)
    growth.fossilize()
    host.eval()
    folded = _forward(host, sample.example_input)
    if folded.shape != masked.shape or not torch.allclose(
        folded, masked, rtol=FOLD_RTOL, atol=FOLD_ATOL
    ):
        found.append("folded, the host does not compute what it did masked at alpha 1")
    if sum(p.numel() for p in host.parameters()) <= sum(map(_numel, params.values())):
        found.append("folded, the host has no more parameters than before")

    # Pruned mid-ramp, on a fresh sample: the original modules back.
    sample = operator.sample()
    host = sample.host.eval()
    before, params = _forward(host, sample.example_input), _params(host)
    growth = operator.start(
        _SampleModel(host), sample.spec, generator=torch.Generator().manual_seed(0), born_epoch=0
    )
    host.eval()
    growth.tick()
    growth.prune()
    host.eval()
    if _params(host) != params or not torch.equal(_forward(host, sample.example_input), before):
        found.append("pruned, the host is not the one it was before the growth")
    return found


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for size in shape:
        n *= size
    return n
