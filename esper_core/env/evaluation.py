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


class VariantMasks:
    """The per-sample alpha masks of the counterfactual variants, one per blended seed.

    Built on the device (a fill, no host-to-device copy) once per batch size and kept
    while the set of blended seeds stays the same, so validation copies nothing to the
    device per batch or per epoch.
    """

    def __init__(self) -> None:
        self._key: tuple[tuple[str, ...], torch.device] | None = None
        self._by_size: dict[int, dict[str, torch.Tensor]] = {}

    def get(
        self, blended: list[str], variants: list[set[str]], size: int, device: torch.device
    ) -> dict[str, torch.Tensor]:
        """For each seed in ``blended``: 1.0 where its variant keeps it on, 0.0 where off."""
        key = (tuple(blended), device)
        if key != self._key:
            self._key, self._by_size = key, {}
        masks = self._by_size.get(size)
        if masks is None:
            k = len(variants)
            masks = {}
            # Built from device kernels alone: writing a Python float into a GPU tensor
            # element by element would synchronise once per element.
            positions = torch.arange(k, device=device)
            for sid in blended:
                per_variant = torch.ones(k, device=device)
                for j, off in enumerate(variants):
                    if sid in off:
                        per_variant = per_variant * (positions != j)
                masks[sid] = per_variant.view(k, 1).expand(k, size).reshape(-1)
            self._by_size[size] = masks
        return masks


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
    masks: VariantMasks | None = None,
) -> Pending:
    """One pass over a split; with ``counterfactual`` each batch is repeated with
    per-sample alpha overrides (all on, each blended seed off, all off with 2+ seeds),
    so every contribution comes from the same pass. BatchNorm is in eval mode, so the
    pass neither updates running statistics nor mixes samples. ``masks``: a cache kept
    from one call to the next (the env holds one)."""
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
    masks = masks or VariantMasks()
    try:
        for inputs, targets in batches:
            b = inputs.shape[0]
            if k > 1:
                inputs = inputs.repeat(k, *([1] * (inputs.dim() - 1)))
            alpha_masks = masks.get(blended, variants, b, device) if blended else {}
            with contextlib.ExitStack() as stack:
                for sid in blended:
                    slot = model.slot(sid)
                    stack.enter_context(slot.alpha_override(slot.alpha_tensor * alpha_masks[sid]))
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
