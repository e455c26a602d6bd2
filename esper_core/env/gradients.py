"""A seed's gradients in an epoch: measured before clipping, then clipped to the run's
one budget (:func:`clip_gradients`), all on the device (no host sync per batch)."""

from __future__ import annotations

import math

import torch
from torch import nn

from esper_core.config import TrainingSection
from esper_core.lifecycle.model import MorphogeneticModel
from esper_core.lifecycle.rules import GRADIENT_STAGES


def total_grad_norm(params: list[nn.Parameter]) -> torch.Tensor | None:
    """The 2-norm of the gradients of ``params``; None when none of them has a gradient."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return None
    return torch.nn.utils.get_total_norm(grads, norm_type=2.0)


def seed_accumulators(model: MorphogeneticModel, device: torch.device) -> dict[str, torch.Tensor]:
    """Per seed that learns from the task gradient: norm_sum, healthy, exploding,
    ratio_sum, batches (what :func:`measure_seed_gradients` adds to)."""
    return {
        slot.slot_id: torch.zeros(5, device=device, dtype=torch.float32)
        for slot in model.iter_slots()
        if slot.stage in GRADIENT_STAGES
    }


SeedNorms = dict[str, tuple[list[nn.Parameter], torch.Tensor]]


def measure_seed_gradients(
    model: MorphogeneticModel,
    seed_acc: dict[str, torch.Tensor],
    host_scaled: torch.Tensor,
    cfg: TrainingSection,
) -> SeedNorms:
    """Add one batch's gradient statistics of each seed in ``seed_acc`` (on the device),
    measured before clipping; return each measured seed's parameters and gradient norm.
    ``host_scaled``: the host's gradient norm over the square root of its parameter count."""
    norms: SeedNorms = {}
    for slot_id, acc in seed_acc.items():
        params = model.slot(slot_id).seed_parameters()
        norm = total_grad_norm(params)
        if norm is None:
            continue
        norms[slot_id] = (params, norm)
        n_seed = sum(p.numel() for p in params)
        finite = torch.isfinite(norm)
        healthy = finite & (norm >= cfg.vanishing_grad) & (norm <= cfg.exploding_grad)
        exploding = (~finite) | (norm > cfg.exploding_grad)
        ratio = (norm / math.sqrt(n_seed)) / (host_scaled + 1e-12)
        acc += torch.stack(
            [
                torch.nan_to_num(norm, nan=0.0, posinf=0.0),
                healthy.float(),
                exploding.float(),
                torch.nan_to_num(ratio, nan=0.0, posinf=0.0),
                torch.ones((), device=acc.device),
            ]
        )
    return norms


def clip_gradients(
    host_params: list[nn.Parameter],
    host_norm: torch.Tensor,
    seed_norms: SeedNorms,
    cfg: TrainingSection,
    shared: frozenset[str] | set[str],
) -> None:
    """Clip to ``cfg.grad_clip``: one global norm over the host and the seeds in ``shared``
    (those blended into the output: BLENDING, HOLDING, FOSSILIZED), combined from the norms
    already measured. A seed outside it (TRAINING) learns in isolation, its output not in
    the model's: it is clipped on its own, so the host's update stays bit-identical to the
    host alone's (DOMAIN §2). With ``clip_per_group`` every group is clipped on its own."""
    params = list(host_params)
    norms = [host_norm]
    for slot_id, (seed_params, norm) in seed_norms.items():
        if slot_id in shared and not cfg.clip_per_group:
            params.extend(seed_params)
            norms.append(norm)
        else:
            torch.nn.utils.clip_grads_with_norm_(seed_params, cfg.grad_clip, norm)
    # The shared norm is torch's clip_grad_norm_'s over the same gradients in the order
    # of the user's model.parameters() (host, then each seed), not one combined from the
    # norms measured above: sqrt(a^2 + b^2) rounds otherwise, and the same model grown
    # through the Grower with clip_grad_norm_(model.parameters(), c) must train alike.
    total = total_grad_norm(params) if len(norms) > 1 else host_norm
    assert total is not None  # a blended seed's norm was measured from its gradients
    torch.nn.utils.clip_grads_with_norm_(params, cfg.grad_clip, total)
