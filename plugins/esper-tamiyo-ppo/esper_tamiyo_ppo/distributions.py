"""Masked, factored categorical distributions over the action heads.

Illegal choices get the logit ``MASK_VALUE`` (-1e4): large and negative but FINITE, so a
head whose every choice is masked (possible only for heads the chosen op ignores) gives
a uniform distribution instead of NaNs, and fp16 stays finite. Their probability is
exactly 0 in float32 (``exp(-1e4)`` underflows), so they are never sampled; there is no
probability floor anywhere.

The op is chosen first; the slot head uses ``masks.slot[op]``, the blueprint head
``masks.blueprint[slot]`` and the alpha-target head ``masks.alpha_target[slot]``. Heads the op does not read (:data:`OP_HEADS`) are set to
the canonical value 0 and their log-probabilities and entropies are excluded (zeroed),
so they neither change the ratio nor receive gradient.

A policy that grows the host (``host_growth`` on) has one more head, decided last and
recorded after the others: ``host_growth``, 0 (not now) or 1 (grow the host now), legal
when ``masks.host_growth`` says so and only with WAIT (a growth and a seed's action in the
same step would both touch the slots). It reads the trunk and is always used: where only
"not now" is legal its log-probability and entropy are 0 anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import torch

from esper_core.lifecycle.actions import HEADS, OP_HEADS, OPS, ActionMasks, LifecycleOp
from esper_tamiyo_ppo.network import SLOT_CHILDREN

if TYPE_CHECKING:
    from esper_tamiyo_ppo.network import PolicyNetwork

MASK_VALUE = -1e4
CANONICAL = 0  # the value of a head the chosen op does not read
HEAD_INDEX = {name: i for i, name in enumerate(HEADS)}
GROWTH_HEAD = "host_growth"


def head_names(host_growth: bool) -> tuple[str, ...]:
    """The heads of a policy's action, in the order of its columns."""
    return (*HEADS, GROWTH_HEAD) if host_growth else HEADS


PER_SLOT = ("blueprint", "alpha_target")  # heads whose mask depends on the slot
assert ("op", "slot", *SLOT_CHILDREN) == HEADS, "run_heads decides the heads in this order"


def used_heads_table(device: torch.device | str = "cpu") -> torch.Tensor:
    """``[n_ops, n_heads]`` bool: which heads each op reads."""
    table = torch.zeros(len(OPS), len(HEADS), dtype=torch.bool, device=device)
    for op, heads in OP_HEADS.items():
        for head in heads:
            table[int(op), HEAD_INDEX[head]] = True
    return table


def masked_logits(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return logits.masked_fill(~mask, MASK_VALUE)


class BatchMasks(NamedTuple):
    """The :class:`~esper_core.lifecycle.actions.ActionMasks` of a batch, stacked (True = legal)."""

    op: torch.Tensor  # [B, n_ops]
    slot: torch.Tensor  # [B, n_ops, n_slots]
    blueprint: torch.Tensor  # [B, n_slots, n_blueprints]
    style: torch.Tensor  # [B, n_styles]
    tempo: torch.Tensor  # [B, n_tempos]
    alpha_target: torch.Tensor  # [B, n_slots, n_targets]
    host_growth: torch.Tensor | None = None  # [B, 2] not now / now; None: no such head

    @classmethod
    def stack(
        cls,
        masks: Sequence[ActionMasks],
        host_growth: torch.Tensor | None = None,
        sizes: dict[str, int] | None = None,
    ) -> BatchMasks:
        """Stack the envs' masks, each padded at the END with illegal (False) choices to
        ``sizes`` (the policy's head sizes; default: the batch's largest), so the masks
        of hosts with fewer slots or blueprints than a mixed run's space keep their
        indices. A head of size 0 gets the network's one dummy choice, legal."""
        own = [
            {
                name: _at_least_one(getattr(m, name)) if name in PADDED_ONE else getattr(m, name)
                for name in _DIMS
            }
            for m in masks
        ]
        target = _mask_shapes(own, sizes)
        return cls(
            **{name: torch.stack([_pad(m[name], target[name]) for m in own]) for name in target},
            host_growth=host_growth,
        )

    def map(self, fn: object) -> BatchMasks:
        """Apply a tensor function (indexing, reshaping, ``.to``) to every mask."""
        return BatchMasks(*(None if m is None else fn(m) for m in self))  # type: ignore[operator]


PADDED_ONE = ("blueprint", "style", "tempo", "alpha_target")  # size 0: one dummy choice
# Each mask's shape in head sizes: slot[op] is [n_ops, n_slots], blueprint[slot] ...
_DIMS = {
    "op": ("op",),
    "slot": ("op", "slot"),
    "blueprint": ("slot", "blueprint"),
    "style": ("style",),
    "tempo": ("tempo",),
    "alpha_target": ("slot", "alpha_target"),
}


def _mask_shapes(
    masks: Sequence[dict[str, torch.Tensor]], sizes: dict[str, int] | None
) -> dict[str, tuple[int, ...]]:
    """The stacked shape of each mask: ``sizes`` when given, else the batch's largest."""
    if sizes is None:
        sizes = {}
        for name, dims in _DIMS.items():
            for axis, head in enumerate(dims):
                widest = max(int(m[name].shape[axis]) for m in masks)
                sizes[head] = max(sizes.get(head, 0), widest)
    return {name: tuple(sizes[head] for head in dims) for name, dims in _DIMS.items()}


def _pad(mask: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    if tuple(mask.shape) == shape:
        return mask
    if any(have > want for have, want in zip(mask.shape, shape)):
        raise ValueError(f"an env's mask of shape {tuple(mask.shape)} exceeds the policy's {shape}")
    out = torch.zeros(shape, dtype=torch.bool, device=mask.device)
    out[tuple(slice(0, n) for n in mask.shape)] = mask
    return out


def _at_least_one(mask: torch.Tensor) -> torch.Tensor:
    """A head of size 0 (e.g. no blueprints) gets the network's one dummy choice."""
    if mask.shape[-1] > 0:
        return mask
    return torch.ones(*mask.shape[:-1], 1, dtype=torch.bool, device=mask.device)


class HeadOutputs(NamedTuple):
    actions: torch.Tensor  # [B, n_heads] long, canonical 0 in unused heads
    log_probs: torch.Tensor  # [B, n_heads], 0 in unused heads
    entropies: torch.Tensor  # [B, n_heads], 0 in unused heads
    used: torch.Tensor  # [B, n_heads] bool


def _choose(
    logits: torch.Tensor,
    given: torch.Tensor | None,
    generator: torch.Generator | None,
    deterministic: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(choice, its log-prob, sum of p·log p) of each row of masked ``logits``."""
    log_p = torch.log_softmax(logits, dim=-1)
    p = log_p.exp()
    if given is not None:
        choice = given
    elif deterministic:
        choice = logits.argmax(dim=-1)
    else:
        choice = torch.multinomial(p, 1, generator=generator).squeeze(-1)
    return choice, log_p.gather(-1, choice.unsqueeze(-1)).squeeze(-1), (p * log_p).sum(dim=-1)


def run_heads(
    net: PolicyNetwork,
    features: torch.Tensor,
    masks: BatchMasks,
    actions: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    deterministic: bool = False,
    used_table: torch.Tensor | None = None,
) -> HeadOutputs:
    """Sample (``actions=None``) or evaluate ``actions [B, n_heads]`` under the masks.

    ``features`` is what ``net`` encoded for the batch (its trunk output for the flat
    network); ``net`` computes each head's logits, this function masks and decides them.
    """
    table = used_table if used_table is not None else used_heads_table(features.device)
    rows = torch.arange(features.shape[0], device=features.device)
    chosen, log_probs, neg_entropies = [], [], []

    def decide(head: str, raw_logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        logits = masked_logits(raw_logits, mask)
        given = actions[:, len(chosen)] if actions is not None else None
        choice, log_p, neg_entropy = _choose(logits, given, generator, deterministic)
        chosen.append(choice)
        log_probs.append(log_p)
        neg_entropies.append(neg_entropy)
        return choice

    op = decide("op", net.op_logits(features), masks.op)
    used = table[op]
    slot = decide("slot", net.slot_logits(features, op), masks.slot[rows, op])
    if actions is None:  # the children are conditioned on the canonical slot (given ones are)
        slot = chosen[1] = torch.where(used[:, 1], slot, CANONICAL)
    children = net.child_logits(features, slot)
    for head in SLOT_CHILDREN:
        mask = getattr(masks, head)
        if head in PER_SLOT:
            mask = mask[rows, slot]
        decide(head, children[head], mask)
    if net.growth_head is not None:
        if masks.host_growth is None:
            raise ValueError("a network with a host-growth head needs masks.host_growth")
        now = masks.host_growth[:, 1] & (op == int(LifecycleOp.WAIT))
        decide(
            GROWTH_HEAD, net.growth_logits(features), torch.stack([masks.host_growth[:, 0], now], 1)
        )
        used = torch.cat([used, torch.ones_like(used[:, :1])], dim=1)
    # Heads the op ignores: canonical value, and no log-prob or entropy (hence no gradient).
    choices = torch.stack(chosen, 1)
    return HeadOutputs(
        actions=choices if actions is not None else torch.where(used, choices, CANONICAL),
        log_probs=torch.where(used, torch.stack(log_probs, 1), 0.0),
        entropies=torch.where(used, -torch.stack(neg_entropies, 1), 0.0),
        used=used,
    )
