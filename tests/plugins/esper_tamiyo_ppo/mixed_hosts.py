"""Hand-made observations of hosts of any slot count and blueprint vocabulary, as the
envs of a mixed run (``train.pairs``) hand them to one policy: each with its own slots,
masks, blueprint descriptions and topology, under a padded union space."""

from __future__ import annotations

import math

import attrs
import torch
from esper_tamiyo_ppo.options import PPOOptions
from esper_tamiyo_ppo.policy import PPOPolicy

from esper_core.components.policy import PolicyContext
from esper_core.env.observation import Observation, feature_dim
from esper_core.lifecycle.actions import OPS, ActionMasks, ActionSpace, LifecycleOp
from esper_core.lifecycle.gates import GateResult
from esper_core.lifecycle.slot import SlotReport
from esper_core.lifecycle.stages import Stage

STYLES = ("linear_add", "sigmoid_add", "linear_multiply", "gated")
TEMPOS = (3, 5, 8)
ALPHAS = (0.5, 0.7, 1.0)
HISTORY = 5
# A slot's stage by its index: a mix of empty, growing and finished slots.
STAGE_CYCLE = (Stage.DORMANT, Stage.TRAINING, Stage.BLENDING, Stage.FOSSILIZED)


def space(n_slots: int, n_blueprints: int, topology: str = "cnn") -> ActionSpace:
    return ActionSpace(
        slot_ids=tuple(f"r0c{i}" for i in range(n_slots)),
        blueprints=tuple(f"{topology}/b{j}" for j in range(n_blueprints)),
        styles=STYLES,
        tempos=TEMPOS,
        alpha_targets=ALPHAS,
    )


def union(n_slots: int, n_blueprints: int) -> ActionSpace:
    """The padded space of a mixed run: ids by position, as the paired env names them."""
    return ActionSpace(
        slot_ids=tuple(f"slot{i}" for i in range(n_slots)),
        blueprints=tuple(f"blueprint{j}" for j in range(n_blueprints)),
        styles=STYLES,
        tempos=TEMPOS,
        alpha_targets=ALPHAS,
    )


def _report(i: int, own: ActionSpace) -> SlotReport:
    stage = STAGE_CYCLE[i % len(STAGE_CYCLE)]
    grown = stage != Stage.DORMANT and own.blueprints
    return SlotReport(
        slot_id=own.slot_ids[i],
        stage=stage,
        seed_id=f"s{i}" if grown else None,
        blueprint=own.blueprints[i % len(own.blueprints)] if grown else None,
        style=STYLES[0] if grown else None,
        alpha=0.3 * (i % 3),
        alpha_target=1.0 if grown else 0.0,
        epochs_in_stage=i + 1,
        epochs_total=2 * i + 1,
        contribution=0.4 * i - 0.3 if grown else None,
        contribution_velocity=0.05 * i,
        gradient_health=0.8 if grown else None,
        grad_ratio=None,
        seed_params=1000 * (i + 1) if grown else 0,
        acc_at_stage_start=50.0,
        acc_at_germination=48.0,
        cooldown_left=0,
    )


def masks(own: ActionSpace) -> ActionMasks:
    """WAIT; GERMINATE in dormant slots, every other blueprint fitting; ADVANCE and
    SET_ALPHA_TARGET in growing ones."""
    n, k = len(own.slot_ids), len(own.blueprints)
    slot = torch.zeros(len(OPS), n, dtype=torch.bool)
    slot[LifecycleOp.WAIT] = True
    alpha = torch.zeros(n, len(ALPHAS), dtype=torch.bool)
    for i in range(n):
        stage = STAGE_CYCLE[i % len(STAGE_CYCLE)]
        slot[LifecycleOp.GERMINATE, i] = stage == Stage.DORMANT and k > 0
        slot[LifecycleOp.ADVANCE, i] = stage in (Stage.TRAINING, Stage.BLENDING)
        slot[LifecycleOp.SET_ALPHA_TARGET, i] = stage == Stage.BLENDING
        alpha[i, :2] = stage == Stage.BLENDING
    blueprint = torch.zeros(n, k, dtype=torch.bool)
    blueprint[:, ::2] = True
    return ActionMasks(
        op=slot.any(dim=1),
        slot=slot,
        blueprint=blueprint,
        style=torch.ones(len(STYLES), dtype=torch.bool),
        tempo=torch.ones(len(TEMPOS), dtype=torch.bool),
        alpha_target=alpha,
    )


def observation(
    env_index: int, n_slots: int, n_blueprints: int, topology: str = "cnn", epoch: int = 4
) -> Observation:
    """A host of ``n_slots`` slots and ``n_blueprints`` blueprints, mid-episode."""
    own = space(n_slots, n_blueprints, topology)
    return Observation(
        env_index=env_index,
        epoch=epoch,
        max_epochs=10,
        val_loss=0.9,
        val_acc=71.0,
        train_loss=0.7,
        train_acc=76.0,
        chance_loss=math.log(10),
        loss_history=(1.4, 1.2, 1.05, 0.95, 0.9),
        acc_history=(55.0, 62.0, 66.0, 69.0, 71.0),
        plateau_epochs=1,
        best_acc=71.0,
        epochs_since_prune=10_000,
        host_params=50_000,
        seed_params=2_000 * n_slots,
        slots=tuple(_report(i, own) for i in range(n_slots)),
        gates=tuple(
            GateResult("g", Stage.BLENDING, passed=i % 2 == 0) if i % 4 else None
            for i in range(n_slots)
        ),
        masks=masks(own),
        epochs_before_blending=tuple(j % 3 for j in range(n_blueprints)),
        train_flops_ratio=1.0 + 0.1 * n_slots,
        expansion=tuple(math.nan if i == 1 else 0.5 + i for i in range(n_slots)),
        blueprint_params=tuple(
            tuple(100 * (i + 1) * (j + 2) for j in range(n_blueprints)) for i in range(n_slots)
        ),
        blueprint_identity=tuple(j % 2 == 0 for j in range(n_blueprints)),
        blueprint_branch=tuple(j == 1 for j in range(n_blueprints)),
        topology=topology,
        blueprints=own.blueprints,
    )


def context(
    space: ActionSpace,
    n_envs: int = 3,
    argument: str | None = None,
    topology: str = "cnn",
    max_epochs: int = 10,
) -> PolicyContext:
    return PolicyContext(
        space=space,
        feature_dim=feature_dim(space, HISTORY),
        history_length=HISTORY,
        max_epochs=max_epochs,
        n_envs=n_envs,
        task="glyphs",
        topology=topology,
        gamma=0.9,
        seed=0,
        argument=argument,
    )


def policy(options: PPOOptions, ctx: PolicyContext) -> PPOPolicy:
    if not ctx.argument:
        options = attrs.evolve(options, allow_untrained=True)
    return PPOPolicy(options, ctx)
