"""A seed whose output holds inf or NaN: the host stays bit-identical in TRAINING and at
alpha 0, the seed is pruned with a reason, and the host is not rolled back for it."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
import torch
from torch import nn

from esper_core.components.blueprint import Blueprint
from esper_core.lifecycle.actions import WAIT, LifecycleOp
from esper_core.lifecycle.model import MorphogeneticModel
from esper_core.lifecycle.rules import COOLDOWN_STAGES
from esper_core.lifecycle.stages import Stage
from esper_core.run.telemetry import GovernorRollback, SeedPruned
from tests.core.lifecycle_helpers import FAST, drive_to, resolve_any
from tests.fakes import BLUEPRINTS, AccuracyDeltaReward, TinyCNNHost, TinyTask
from tests.fakes import drive_to as drive_env_to

NON_FINITE = [float("inf"), float("-inf"), float("nan")]


class Blowup(nn.Module):
    """A 1x1 residual seed whose output is shifted by ``fill`` (inf, NaN) when set."""

    def __init__(self, channels: int, fill: float | None = None) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 1)
        self.fill = fill

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x + self.conv(x)
        if self.fill is not None:
            out = out + torch.full_like(out, self.fill)
        return out


BLOWUP = Blueprint("blowup", "cnn", Blowup, lambda c: c * c + c, "non-finite on demand")
BORN_INF = Blueprint(
    "born_inf", "cnn", lambda c: Blowup(c, float("inf")), lambda c: c * c + c, "inf from birth"
)


def model_and_host() -> tuple[MorphogeneticModel, nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    host = TinyCNNHost(width=4, blocks=2)
    bare = copy.deepcopy(host)
    model = MorphogeneticModel(host, resolve_any, FAST)
    return model, bare, torch.randn(6, 1, 4, 4), torch.randint(0, 4, (6,))


def host_grads(module: nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in module.parameters() if p.grad is not None]


@pytest.mark.parametrize("fill", NON_FINITE, ids=["inf", "-inf", "nan"])
def test_a_training_seed_cannot_touch_the_host_whatever_it_outputs(fill: float) -> None:
    model, bare, x, y = model_and_host()
    slot = drive_to(model.slot("r0c0"), Stage.TRAINING, blueprint=BLOWUP)
    assert slot.seed is not None
    slot.seed.fill = fill
    out = model(x)
    nn.functional.cross_entropy(out, y).backward()
    reference = bare(x)
    nn.functional.cross_entropy(reference, y).backward()
    assert torch.equal(out, reference)  # bit for bit, and finite
    host = host_grads(model.host)
    assert host and all(torch.equal(a, b) for a, b in zip(host, host_grads(bare), strict=True))
    # The seed still learns from the task gradient (straight-through), and was counted.
    assert all(p.grad is not None for p in slot.seed.parameters())
    assert slot.nonfinite_outputs.item() == 1


@pytest.mark.parametrize("fill", [*NON_FINITE, 3e38], ids=["inf", "-inf", "nan", "huge"])
@pytest.mark.parametrize("style", ["linear_add", "linear_multiply", "gated"])
def test_alpha_zero_is_exactly_the_host_whatever_the_seed_outputs(fill: float, style: str) -> None:
    model, bare, x, _ = model_and_host()
    slot = drive_to(model.slot("r0c0"), Stage.BLENDING, blueprint=BLOWUP, style=style)
    assert slot.seed is not None
    slot.seed.fill = fill
    model.eval(), bare.eval()
    with torch.no_grad():
        reference = bare(x)
        with slot.alpha_override(0.0):
            assert torch.equal(model(x), reference)
        # The counterfactual path: per-sample alpha, half of the batch switched off.
        per_sample = torch.tensor([0.0, 0.5, 0.0, 1.0, 0.0, 0.25])
        with slot.alpha_override(per_sample):
            mixed = model(x)
    off = per_sample == 0
    assert torch.equal(mixed[off], reference[off])
    if not math.isfinite(fill):
        assert torch.isfinite(mixed).all()  # non-finite seed values fall back to the host's


def env_with(*extra: Blueprint) -> Any:
    from esper_core.config import load_config
    from esper_core.env.env import MorphogeneticEnv

    # Full isolation, so that a seed spends its first epochs in TRAINING.
    config = load_config(
        overrides=[
            "lifecycle.min_training_epochs=2",
            "env.max_epochs=12",
            "lifecycle.isolation=full",
            "lifecycle.isolation_non_identity=full",
        ]
    )
    blueprints = (*BLUEPRINTS, *extra)
    env = MorphogeneticEnv(TinyTask(), AccuracyDeltaReward(), blueprints, config, 0, "cpu")
    env.reset(0)
    return env


def host_state(env: Any) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in env.model.host.state_dict().items()}


def test_a_training_seed_that_outputs_inf_is_pruned_without_a_rollback() -> None:
    env, reference = env_with(BORN_INF), env_with(BORN_INF)
    space = env.space
    env.step(space.germinate("r0c0", "born_inf"))
    result = env.step(space.on_slot(LifecycleOp.ADVANCE, "r0c0"))  # one epoch in TRAINING
    for _ in range(2):
        reference.step(WAIT)
    pruned = [e for e in result.events if isinstance(e, SeedPruned)]
    assert [(e.slot_id, e.stage, e.reason) for e in pruned] == [("r0c0", "TRAINING", "non_finite")]
    assert not result.rolled_back
    assert not [e for e in result.events if isinstance(e, GovernorRollback)]
    assert env.governor.rollbacks == 0 and env.stats.n_pruned == 1
    assert env.model.slot("r0c0").stage in COOLDOWN_STAGES
    assert math.isfinite(result.metrics.train_loss) and math.isfinite(result.metrics.val_loss)
    # The host trained exactly as if no seed had ever been there.
    ours, theirs = host_state(env), host_state(reference)
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert result.metrics.val_acc == reference.last_eval.accuracy


def test_a_blending_seed_that_turns_non_finite_is_pruned_without_a_rollback() -> None:
    env = env_with(BLOWUP)
    drive_env_to(env, "r0c0", "BLENDING", blueprint="blowup")
    slot = env.model.slot("r0c0")
    assert slot.seed is not None and 0.0 < slot.state.alpha < 1.0
    slot.seed.fill = float("nan")
    result = env.step(WAIT)
    pruned = [e for e in result.events if isinstance(e, SeedPruned)]
    assert [(e.stage, e.reason) for e in pruned] == [("BLENDING", "non_finite")]
    assert not result.rolled_back and env.governor.rollbacks == 0
    assert math.isfinite(result.metrics.train_loss) and math.isfinite(result.metrics.val_loss)
    assert all(torch.isfinite(p).all() for p in env.model.host.parameters())
    # The next epoch trains the host alone, and nothing is pruned again.
    after = env.step(WAIT)
    assert not [e for e in after.events if isinstance(e, SeedPruned)] and not after.rolled_back
