"""Validation with fused counterfactuals: every seed's contribution from one pass.

Each validation batch is repeated once per variant (all seeds on, each blended seed
off, all off with 2+ blended seeds) with per-sample alpha overrides, so accuracy and
every counterfactual come from the same forward pass, read with the epoch's one
host synchronisation (:func:`esper_core.env.pending.fetch`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable

import torch
from attrs import frozen

from esper_core.components.task import Task
from esper_core.env.amp import amp_dtype, autocast
from esper_core.env.pending import Pending
from esper_core.lifecycle.model import MorphogeneticModel
from esper_core.lifecycle.rules import BLENDED_STAGES


@frozen
class EvalResult:
    loss: float
    accuracy: float  # percent, every seed at its alpha
    contributions: dict[str, float]  # points: acc(all on) - acc(seed off)
    all_off_accuracy: float | None  # with 2+ blended seeds
    finite: bool


def _blended_slots(model: MorphogeneticModel) -> list[str]:
    return [slot.slot_id for slot in model.iter_slots() if slot.stage in BLENDED_STAGES]


@torch.inference_mode()
def validate_pending(
    model: MorphogeneticModel,
    task: Task,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    *,
    counterfactual: bool = True,
    amp: str = "off",
) -> Pending:
    """One pass over a split; with ``counterfactual`` each batch is repeated with
    per-sample alpha overrides (all on, each blended seed off, all off with 2+ seeds),
    so every contribution comes from the same pass. BatchNorm is in eval mode, so the
    pass neither updates running statistics nor mixes samples."""
    was_training = model.training
    model.eval()
    blended = _blended_slots(model) if counterfactual else []
    variants: list[set[str]] = [set()]  # the seeds switched off in each variant
    variants += [{sid} for sid in blended]
    if len(blended) >= 2:
        variants.append(set(blended))
    k = len(variants)
    device = next(model.parameters()).device
    acc = torch.zeros(k, 3, device=device, dtype=torch.float64)  # loss_sum, correct, count
    dtype = amp_dtype(amp, device)
    masks: dict[int, dict[str, torch.Tensor]] = {}
    try:
        for inputs, targets in batches:
            b = inputs.shape[0]
            if k > 1:
                inputs = inputs.repeat(k, *([1] * (inputs.dim() - 1)))
                if b not in masks:
                    masks[b] = {
                        sid: torch.tensor(
                            [0.0 if sid in off else 1.0 for off in variants], device=device
                        ).repeat_interleave(b)
                        for sid in blended
                    }
            with contextlib.ExitStack() as stack:
                for sid in blended:
                    slot = model.slot(sid)
                    stack.enter_context(slot.alpha_override(slot.alpha_tensor * masks[b][sid]))
                stack.enter_context(autocast(dtype, device))
                outputs = model(inputs)
            chunks = outputs.float().chunk(k, dim=0)
            rows = []
            for chunk in chunks:
                m = task.metrics(chunk, targets)
                rows.append(
                    torch.stack([m.loss_sum.double(), m.correct.double(), m.count.double()])
                )
            acc += torch.stack(rows)
    finally:
        model.train(was_training)
    return Pending(acc, lambda flat: _eval_result(flat, blended))


def _eval_result(flat: list[float], blended: list[str]) -> EvalResult:
    values = [flat[i : i + 3] for i in range(0, len(flat), 3)]
    loss_sum, correct, count = values[0]
    accuracy = 100.0 * correct / count if count else 0.0
    contributions = {}
    for sid, row in zip(blended, values[1 : 1 + len(blended)]):
        contributions[sid] = accuracy - (100.0 * row[1] / row[2] if row[2] else 0.0)
    all_off = 100.0 * values[-1][1] / values[-1][2] if len(blended) >= 2 and values[-1][2] else None
    loss = loss_sum / count if count else float("nan")
    return EvalResult(
        loss=loss,
        accuracy=accuracy,
        contributions=contributions,
        all_off_accuracy=all_off,
        finite=math.isfinite(loss),
    )
