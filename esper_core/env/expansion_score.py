"""What added capacity would buy, from gradients: the expansion score of each slot.

A new module at a slot adds ``delta = V phi(h)`` to the slot's activation ``h``, with
``V`` starting at zero, so the model is unchanged at birth. One gradient step on ``V``
lowers the loss at first order by ``lr x ||dL/dV||^2``, where
``dL/dV = sum over samples and positions of G phi(h)^T`` and ``G = dL/dh`` is the
*functional gradient* at the slot: how the loss wants the activation to move. The host's
own next step lowers it by ``lr x ||dL/dtheta||^2``. Their ratio is the score
(Self-Expanding Neural Networks, Mitchell et al.: expand when added parameters raise
the achievable first-order decrease by enough; Euclidean metric here, where they use
the natural one).

``phi`` is a fixed random ReLU feature map of ``h`` (``phi = relu(U h)``, ``U`` drawn once
per slot). A *linear* ``phi = h`` would mostly measure what the next host layer can
already do (its gradient is the same functional gradient times the same ``h``), which is
the expressivity bottleneck's point (TINY / GroMo: only the part of the desired update
the current layers cannot express is worth new neurons); random nonlinear features lie
outside that span. Both gradients are means over the probe batches, so noise that a
step would average away does not count: a host stuck at the best its size allows has a
small mean gradient while the functional gradient at its slots stays large.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch
from attrs import frozen
from torch import nn

from esper_core.env.device import to_device
from esper_core.env.pending import Pending
from esper_core.lifecycle.model import MorphogeneticModel

# Random features per activation channel: enough for the score to see several new
# directions, few enough to cost a small matrix product per batch.
FEATURES_PER_CHANNEL = 2


@frozen
class ExpansionScores:
    """Per slot, ``||mean dL/dV||^2`` of a zero-initialised module on random features of
    the slot's activation; and ``||mean dL/dtheta||^2`` of the host's parameters."""

    slots: dict[str, float]
    host: float
    batches: int

    def ratio(self, slot_id: str) -> float:
        """The slot's score over the host's: what one step of a new module there buys,
        in units of what one more step of the host alone buys."""
        return self.slots[slot_id] / max(self.host, 1e-30)

    def best(self) -> tuple[str, float] | None:
        """The slot with the highest ratio and the ratio; None without slots."""
        if not self.slots:
            return None
        slot_id = max(self.slots, key=self.ratio)
        return slot_id, self.ratio(slot_id)


def _channels_last(h: torch.Tensor) -> torch.Tensor:
    """``[N, C]`` rows, one per sample and position: channels are dimension 1 of a
    ``[B, C, H, W]`` activation and the last one of ``[B, T, D]`` or ``[B, D]``."""
    if h.dim() == 4:
        return h.permute(0, 2, 3, 1).reshape(-1, h.shape[1])
    return h.reshape(-1, h.shape[-1])


def _features(h: torch.Tensor, projection: torch.Tensor) -> torch.Tensor:
    """``relu(U h)`` scaled to the RMS of ``h``, so the score does not depend on ``h``'s
    units more than the host's own gradients do."""
    phi = torch.relu(h @ projection)
    scale = h.pow(2).mean().sqrt() / phi.pow(2).mean().sqrt().clamp_min(1e-12)
    return phi * scale


def expansion_scores(
    model: nn.Module,
    sites: dict[str, nn.Module],
    host_params: Sequence[nn.Parameter],
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    *,
    generator: torch.Generator,
) -> Pending:
    """The scores from ``batches``, on the device until the epoch's one synchronisation
    reads them (:class:`~esper_core.env.pending.Pending` of :class:`ExpansionScores`).
    ``sites`` maps a slot id to the module whose output is the slot's activation. The
    model runs in eval mode (no BatchNorm statistics move) and its mode is restored; its
    parameters' ``.grad`` stay untouched (:func:`torch.autograd.grad`), and ``generator``
    draws the random features, so training is exactly what it would be without a probe."""
    captured: dict[str, torch.Tensor] = {}

    def capture(slot_id: str) -> Callable[..., None]:
        def hook(_module: nn.Module, _inputs: object, output: torch.Tensor) -> None:
            if isinstance(output, torch.Tensor) and output.requires_grad:
                captured[slot_id] = output

        return hook

    ids = list(sites)
    params = [p for p in host_params if p.requires_grad]
    host_sum = [torch.zeros_like(p) for p in params]
    slot_sum: dict[str, torch.Tensor] = {}
    projections: dict[str, torch.Tensor] = {}
    batches_seen = 0
    was_training = model.training
    handles = [sites[sid].register_forward_hook(capture(sid)) for sid in ids]
    model.eval()
    try:
        for inputs, targets in batches:
            captured.clear()
            with torch.enable_grad():
                loss = loss_fn(model(inputs), targets)
                seen = [sid for sid in ids if sid in captured]
                acts = [captured[sid] for sid in seen]
                grads = torch.autograd.grad(loss, [*params, *acts], allow_unused=True)
            for total, grad in zip(host_sum, grads[: len(params)]):
                if grad is not None:
                    total += grad
            for sid, h, g in zip(seen, acts, grads[len(params) :]):
                if g is None:
                    continue
                rows, grows = _channels_last(h.detach()), _channels_last(g)
                if sid not in projections:
                    width = rows.shape[1]
                    draw = torch.randn(width, FEATURES_PER_CHANNEL * width, generator=generator)
                    projections[sid] = to_device(draw, rows.device).to(rows.dtype) / width**0.5
                step = grows.T @ _features(rows, projections[sid])
                slot_sum[sid] = step if sid not in slot_sum else slot_sum[sid] + step
            batches_seen += 1
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    n = max(batches_seen, 1)
    device = next((t.device for t in host_sum), torch.device("cpu"))
    zero = torch.zeros((), device=device)
    host = sum(((t / n).pow(2).sum() for t in host_sum), zero)
    measured = [sid for sid in ids if sid in slot_sum]
    values = [host, *((slot_sum[sid] / n).pow(2).sum().to(device) for sid in measured)]
    seen_batches = batches_seen

    def build(read: list[float]) -> ExpansionScores:
        return ExpansionScores(
            slots=dict(zip(measured, read[1:])), host=read[0], batches=seen_batches
        )

    return Pending(torch.stack(values).float(), build)


def probe(
    model: MorphogeneticModel,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    seed: int,
) -> Pending:
    """:func:`expansion_scores` of every slot of ``model`` (its output is the slot's
    activation), the random features drawn from ``seed``."""
    # A host that hooks slots onto a user's submodules (grow.module_host) names them;
    # a built-in host calls each slot module in its forward.
    named = getattr(model.host, "slot_modules", None)
    sites = named() if callable(named) else {s.slot_id: s for s in model.iter_slots()}
    return expansion_scores(
        model,
        sites,
        model.host_parameters(),
        batches,
        loss_fn,
        generator=torch.Generator().manual_seed(seed),
    )
