"""Masked factored heads: illegal choices are never sampled, irrelevant heads are excluded."""

from __future__ import annotations

import math

import torch
from esper_tamiyo_ppo.distributions import MASK_VALUE, BatchMasks, masked_logits, run_heads
from esper_tamiyo_ppo.network import ActorCritic
from hypothesis import given, settings
from hypothesis import strategies as st

from esper_core.lifecycle.actions import (
    HEADS,
    OP_HEADS,
    OPS,
    Action,
    ActionMasks,
    LifecycleOp,
    refusal_reason,
)

from .helpers import SPACE

SIZES = SPACE.head_sizes
N_SLOTS, N_TARGETS = SIZES["slot"], SIZES["alpha_target"]


def _net(seed: int, gain: float = 1.0) -> ActorCritic:
    torch.manual_seed(seed)
    net = ActorCritic(12, SIZES, hidden_size=16)
    with torch.no_grad():
        for head in net.heads.values():  # sharp, varied logits: masked choices would often win
            head.weight.normal_(0.0, gain)
            head.bias.normal_(0.0, gain)
    return net


@st.composite
def masks(draw) -> ActionMasks:  # type: ignore[no-untyped-def]
    bits = st.booleans()
    slot = torch.tensor(
        draw(
            st.lists(
                st.lists(bits, min_size=N_SLOTS, max_size=N_SLOTS),
                min_size=len(OPS),
                max_size=len(OPS),
            )
        )
    )
    alpha = torch.tensor(
        draw(
            st.lists(
                st.lists(bits, min_size=N_TARGETS, max_size=N_TARGETS),
                min_size=N_SLOTS,
                max_size=N_SLOTS,
            )
        )
    )

    # Consistency the core guarantees: SET_ALPHA_TARGET on a slot needs a legal target there,
    # an op is legal iff some slot is, WAIT always is (with any slot).
    def head(n: int) -> torch.Tensor:
        m = torch.tensor(draw(st.lists(bits, min_size=n, max_size=n)))
        m[draw(st.integers(0, n - 1))] = True
        return m

    # Per slot, the blueprints that can grow there; a slot may have none (GERMINATE is
    # then illegal in it).
    blueprint = torch.stack([head(SIZES["blueprint"]) for _ in range(N_SLOTS)])
    blueprint[draw(st.integers(0, N_SLOTS - 1))] = False
    slot[LifecycleOp.SET_ALPHA_TARGET] &= alpha.any(dim=1)
    slot[LifecycleOp.GERMINATE] &= blueprint.any(dim=1)
    slot[LifecycleOp.WAIT] = True
    op = slot.any(dim=1)

    return ActionMasks(
        op=op,
        slot=slot,
        blueprint=blueprint,
        style=head(SIZES["style"]),
        tempo=head(SIZES["tempo"]),
        alpha_target=alpha,
    )


@settings(max_examples=40, deadline=None)
@given(masks(), st.integers(0, 2**16), st.booleans())
def test_masked_actions_are_never_sampled(
    mask: ActionMasks, seed: int, deterministic: bool
) -> None:
    net = _net(seed % 7, gain=5.0)
    n = 64
    features = torch.randn(n, 16, generator=torch.Generator().manual_seed(seed))
    out = run_heads(
        net,
        features,
        BatchMasks.stack([mask] * n),
        generator=torch.Generator().manual_seed(seed),
        deterministic=deterministic,
    )
    for row in out.actions.tolist():
        action = Action.from_indices(row)
        assert refusal_reason(action, mask, SPACE) is None, (action, mask)
        if action.op == LifecycleOp.GERMINATE:
            assert (
                mask.blueprint[action.slot, action.blueprint]
                and mask.style[action.style]
                and mask.tempo[action.tempo]
            )
    assert torch.isfinite(out.log_probs).all() and torch.isfinite(out.entropies).all()


def test_mask_value_is_finite_and_gives_zero_probability() -> None:
    logits = masked_logits(torch.tensor([[3.0, -2.0, 50.0]]), torch.tensor([[True, True, False]]))
    assert float(logits[0, 2]) == MASK_VALUE and math.isfinite(MASK_VALUE)
    assert float(torch.softmax(logits, -1)[0, 2]) == 0.0
    # Every choice masked (a head the op ignores): uniform, not NaN.
    all_masked = torch.log_softmax(
        masked_logits(torch.randn(1, 4), torch.zeros(1, 4, dtype=torch.bool)), -1
    )
    assert torch.allclose(all_masked.exp(), torch.full((1, 4), 0.25))


def _single_op_masks(op: LifecycleOp) -> ActionMasks:
    slot = torch.zeros(len(OPS), N_SLOTS, dtype=torch.bool)
    slot[LifecycleOp.WAIT] = True
    slot[op] = True
    return ActionMasks(
        op=slot.any(dim=1) & torch.tensor([o in (LifecycleOp.WAIT, op) for o in OPS]),
        slot=slot,
        blueprint=torch.ones(N_SLOTS, SIZES["blueprint"], dtype=torch.bool),
        style=torch.ones(SIZES["style"], dtype=torch.bool),
        tempo=torch.ones(SIZES["tempo"], dtype=torch.bool),
        alpha_target=torch.ones(N_SLOTS, N_TARGETS, dtype=torch.bool),
    )


def test_irrelevant_heads_are_canonical_and_excluded() -> None:
    net = _net(0, gain=2.0)
    n = 200
    mask = _single_op_masks(LifecycleOp.GERMINATE)
    out = run_heads(
        net,
        torch.randn(n, 16),
        BatchMasks.stack([mask] * n),
        generator=torch.Generator().manual_seed(1),
    )
    ops = out.actions[:, 0]
    assert {int(o) for o in ops.unique()} == {LifecycleOp.WAIT, LifecycleOp.GERMINATE}
    for i, head in enumerate(HEADS):
        relevant = torch.tensor([head in OP_HEADS[LifecycleOp(int(o))] for o in ops])
        assert torch.equal(out.used[:, i], relevant)
        assert bool((out.actions[~relevant, i] == 0).all())
        assert bool((out.log_probs[~relevant, i] == 0).all()) and bool(
            (out.entropies[~relevant, i] == 0).all()
        )
        assert bool((out.log_probs[relevant, i] <= 0).all())
        if head != "slot" and bool(relevant.any()):  # (one legal slot here: its log-prob is 0)
            assert bool((out.log_probs[relevant, i] < 0).any()) and bool(
                (out.entropies[relevant, i] > 0).all()
            )


def test_irrelevant_heads_do_not_change_log_prob_nor_get_gradient() -> None:
    net = _net(0)
    n = 16
    features = torch.randn(n, 16)
    mask = BatchMasks.stack([_single_op_masks(LifecycleOp.ADVANCE)] * n)
    actions = torch.zeros(n, len(HEADS), dtype=torch.long)
    actions[:, 0] = LifecycleOp.WAIT
    actions[n // 2 :, 0] = LifecycleOp.ADVANCE
    actions[n // 2 :, 1] = 1
    before = run_heads(net, features, mask, actions=actions).log_probs.sum(1)
    with torch.no_grad():  # heads that neither WAIT nor ADVANCE read
        for head in ("blueprint", "style", "tempo", "alpha_target"):
            net.heads[head].weight.add_(3.0)
    after = run_heads(net, features, mask, actions=actions)
    assert torch.equal(before, after.log_probs.sum(1))
    (-after.log_probs.sum() - after.entropies.sum()).backward()
    for head in ("blueprint", "style", "tempo", "alpha_target"):
        grad = net.heads[head].weight.grad
        assert grad is None or bool((grad == 0).all()), head
    assert bool((net.heads["op"].weight.grad != 0).any()) and bool(
        (net.heads["slot"].weight.grad != 0).any()
    )


def test_slot_head_is_conditioned_on_the_op() -> None:
    net = _net(3, gain=2.0)
    features = torch.randn(1, 16)
    op_onehot = [net.conditioned(features, "op", torch.tensor([int(op)])) for op in (1, 4)]
    logits = [net.heads["slot"](x) for x in op_onehot]
    assert not torch.allclose(logits[0], logits[1])
