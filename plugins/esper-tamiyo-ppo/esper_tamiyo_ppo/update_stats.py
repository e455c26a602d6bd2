"""The update's statistics: packed per minibatch, summarised per update.

A minibatch's statistics are packed in one tensor (so an epoch sums them in one go, and
data-parallel ranks reduce them in the gradient's all-reduce): :data:`SCALAR_STATS`, then
the entropy summed per head and the entries counted per head (both only where the op
used the head). ``n_ratios`` counts the ratios the clip acts on: one per used head
(per-head clip) or one per sample (joint clip).
"""

from __future__ import annotations

import torch

from esper_core.lifecycle.actions import HEADS
from esper_tamiyo_ppo.minibatches import Share

SCALAR_STATS = (
    "pg_loss",
    "v_loss",
    "entropy",
    "approx_kl",
    "ratio_deviation",
    "n_clipped",
    "n_ratios",
)
N_SCALARS, N_HEADS = len(SCALAR_STATS), len(HEADS)


@torch.no_grad()
def minibatch_stats(
    clip_coef: float,
    share: Share,
    weight: torch.Tensor | None,
    losses: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    ratio: torch.Tensor,
    clipped_over: torch.Tensor,
    used: torch.Tensor,
    head_entropy: torch.Tensor,
) -> torch.Tensor:
    """One minibatch's packed statistics; ``losses`` are its (pg, value, entropy, approx-KL)."""
    deviation = (ratio - 1.0).abs()  # 0 in unused heads: their ratio is exactly 1
    if weight is not None:
        used = used * weight.unsqueeze(1)
        clipped_over = clipped_over * weight.unsqueeze(1)
        deviation = deviation * weight.unsqueeze(1)
        head_entropy = head_entropy * weight.unsqueeze(1)
    n_clipped = (deviation > clip_coef).sum(dtype=deviation.dtype)
    scalars = (
        *losses,
        share.count(deviation.sum()),
        share.count(n_clipped),
        share.count(clipped_over.sum()),
    )
    return torch.cat(
        [torch.stack(scalars), share.count(head_entropy.sum(0)), share.count(used.sum(0))]
    )


def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> float:
    var = returns.var()
    return float("nan") if float(var) == 0.0 else float(1.0 - (returns - values).var() / var)


def summarise(
    heads: tuple[str, ...],
    epochs: list[list[torch.Tensor]],
    stop: bool,
    values: torch.Tensor,
    returns: torch.Tensor,
    lr: float,
    ent_coef: float,
) -> dict[str, float]:
    """The update's diagnostics: means over the minibatches run (``epochs``: per epoch, per
    minibatch, its packed statistics), per head and per epoch."""
    diagnostics = {
        "explained_variance": explained_variance(values, returns),
        "epochs_run": float(len(epochs)),
        "minibatches_run": float(sum(len(e) for e in epochs)),
        "kl_stopped": float(stop),
        "learning_rate": lr,
        "ent_coef": ent_coef,
    }
    if epochs:
        epoch_sums = [torch.stack(e).sum(0) for e in epochs]
        total = torch.stack(epoch_sums).sum(0)
        pg, v, ent, kl, _, n_clip, n_ratios = total[:N_SCALARS].tolist()
        entropy_per_head = total[N_SCALARS : N_SCALARS + len(heads)].tolist()
        head_used = total[N_SCALARS + len(heads) :]
        n_mb = diagnostics["minibatches_run"]
        diagnostics.update(
            {
                "policy_loss": pg / n_mb,
                "value_loss": v / n_mb,
                "entropy": ent / n_mb,
                "approx_kl": kl / n_mb,
                "clip_fraction": n_clip / max(n_ratios, 1.0),
            }
        )
        for head, summed, count in zip(heads, entropy_per_head, head_used.tolist(), strict=True):
            diagnostics[f"entropy/{head}"] = summed / count if count else 0.0
        for k, e in enumerate(epoch_sums, start=1):
            *_, deviation_sum, clipped_sum, ratios = e[:N_SCALARS].tolist()
            n = max(ratios, 1.0)
            diagnostics[f"ratio_deviation/epoch{k}"] = deviation_sum / n
            diagnostics[f"clip_fraction/epoch{k}"] = clipped_sum / n
    return diagnostics
