"""What a controller sees after each epoch, the feature vector for neural policies,
and the running mean/std normaliser (Welford) that PPO freezes during a rollout."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import torch

from esper_core.env.host_growth_ready import growth_ready
from esper_core.lifecycle.actions import ActionSpace, compute_masks
from esper_core.lifecycle.stages import STAGES
from esper_core.step_values import Observation

if TYPE_CHECKING:
    from collections.abc import Mapping

    from esper_core.components.blueprint import Blueprint
    from esper_core.components.growth_operator import GrowthOperator
    from esper_core.components.growth_request import HostGrowthSpec
    from esper_core.components.task import Task
    from esper_core.env.cost import CostMeter
    from esper_core.env.episode import EpisodeStats
    from esper_core.env.evaluation import EvalResult
    from esper_core.env.expansion_score import ExpansionScores
    from esper_core.env.training import TrainStats
    from esper_core.lifecycle.actions import MaskRules
    from esper_core.lifecycle.model import MorphogeneticModel
    from esper_core.lifecycle.slot_state import SlotSettings


class Observed(Protocol):
    """What an observation reads of an env (``MorphogeneticEnv`` is one)."""

    @property
    def model(self) -> MorphogeneticModel: ...

    @property
    def task(self) -> Task: ...

    @property
    def blueprints(self) -> Mapping[str, Blueprint]: ...

    @property
    def space(self) -> ActionSpace: ...

    @property
    def mask_rules(self) -> MaskRules: ...

    @property
    def settings(self) -> SlotSettings: ...

    @property
    def fits(self) -> torch.Tensor: ...

    @property
    def cost(self) -> CostMeter: ...

    @property
    def stats(self) -> EpisodeStats: ...

    @property
    def last_eval(self) -> EvalResult: ...

    @property
    def last_train(self) -> TrainStats | None: ...

    @property
    def last_expansion(self) -> ExpansionScores: ...

    @property
    def env_index(self) -> int: ...

    @property
    def pair_label(self) -> str: ...

    @property
    def seed(self) -> int: ...

    @property
    def epoch(self) -> int: ...

    @property
    def max_epochs(self) -> int: ...

    @property
    def host_params(self) -> int: ...

    @property
    def operators(self) -> Mapping[str, GrowthOperator]: ...

    @property
    def host_growth_specs(self) -> Sequence[HostGrowthSpec]: ...

    @property
    def online_growth_specs(self) -> Sequence[HostGrowthSpec]: ...


def observe(env: Observed, rolled_back: bool) -> Observation:
    """The observation of ``env`` now; before the first epoch, training numbers are validation's."""
    reports = tuple(env.model.reports())
    ev, stats = env.last_eval, env.stats
    train = env.last_train
    gates = tuple(slot.next_gate() for slot in env.model.iter_slots())
    return Observation(
        env_index=env.env_index,
        epoch=env.epoch,
        max_epochs=env.max_epochs,
        val_loss=ev.loss,
        val_acc=ev.accuracy,
        train_loss=train.loss if train else ev.loss,
        train_acc=train.accuracy if train else ev.accuracy,
        train_measured=train is not None,
        chance_loss=env.task.chance_loss,
        loss_history=tuple(stats.val_history),
        acc_history=tuple(stats.acc_history),
        plateau_epochs=stats.plateau_epochs,
        best_acc=stats.best_acc,
        epochs_since_prune=stats.epochs_since_prune(env.epoch),
        host_params=env.host_params,
        seed_params=env.model.seed_param_count(),
        slots=reports,
        gates=gates,
        masks=compute_masks(reports, env.space, env.mask_rules, gates, env.fits),
        rolled_back=rolled_back,
        train_flops_ratio=env.cost.epoch_flops_ratio(),
        expansion=expansion_ratios(env.last_expansion, env.model.slot_ids),
        epochs_before_blending=tuple(
            env.settings.epochs_before_blending(env.blueprints[key].identity_at_birth)
            for key in env.space.blueprints
        ),
        blueprint_params=blueprint_params(env),
        blueprint_identity=tuple(
            env.blueprints[key].identity_at_birth for key in env.space.blueprints
        ),
        blueprint_branch=tuple(env.blueprints[key].branch for key in env.space.blueprints),
        topology=env.task.topology,
        blueprints=env.space.blueprints,
        host_growth_ready=growth_ready(env),
        host_growth_kinds=tuple(spec.kind for spec in env.online_growth_specs),
        pair=env.pair_label,
        seed=env.seed,
    )


def expansion_ratios(scores: ExpansionScores, slot_ids: Sequence[str]) -> tuple[float, ...]:
    """Each slot's expansion score over the host's, NaN where the probe measured none;
    () when the probe is off (``env.expansion_batches = 0``)."""
    if scores.batches == 0:
        return ()
    return tuple(scores.ratio(sid) if sid in scores.slots else math.nan for sid in slot_ids)


def blueprint_params(env: Observed) -> tuple[tuple[int, ...], ...]:
    """``[slot][blueprint]``: the parameters of a new seed of each blueprint in each slot
    (``Blueprint.estimate_for`` its slot as it is now, a widened host included), 0 where
    it cannot grow."""
    fits = env.fits.tolist()
    return tuple(
        tuple(
            env.blueprints[key].estimate_for(env.model.slot(sid).spec) if fit else 0
            for key, fit in zip(env.space.blueprints, fits[i])
        )
        for i, sid in enumerate(env.space.slot_ids)
    )


SLOT_SCALARS = 9


def feature_dim(space: ActionSpace, history_length: int) -> int:
    per_slot = len(STAGES) + SLOT_SCALARS + len(space.blueprints) + 1
    return 8 + 2 * history_length + len(space.slot_ids) * per_slot


def _clip(value: float, lo: float = -10.0, hi: float = 10.0) -> float:
    if not math.isfinite(value):
        return hi if value > 0 else lo
    return min(max(value, lo), hi)


def features(obs: Observation, space: ActionSpace, history_length: int) -> list[float]:
    """A flat vector of roughly unit-scale numbers; see :func:`feature_dim` for its size."""
    chance = max(obs.chance_loss, 1e-6)
    hist_loss = list(obs.loss_history)[-history_length:]
    hist_acc = list(obs.acc_history)[-history_length:]
    pad = history_length - len(hist_loss)
    hist_loss = [hist_loss[0] if hist_loss else obs.val_loss] * pad + hist_loss
    hist_acc = [hist_acc[0] if hist_acc else obs.val_acc] * pad + hist_acc
    out = [
        obs.epoch / max(obs.max_epochs, 1),
        _clip(obs.val_loss / chance),
        obs.val_acc / 100.0,
        _clip(obs.train_loss / chance),
        obs.train_acc / 100.0,
        min(obs.plateau_epochs, 20) / 10.0,
        obs.best_acc / 100.0,
        min(obs.epochs_since_prune, 20) / 10.0,
    ]
    out.extend(_clip((v - obs.val_loss) / chance) for v in hist_loss)
    out.extend((v - obs.val_acc) / 100.0 for v in hist_acc)
    host = max(obs.host_params, 1)
    for report, gate in zip(obs.slots, obs.gates):
        out.extend(1.0 if report.stage == stage else 0.0 for stage in STAGES)
        out.extend(
            [
                report.alpha,
                report.alpha_target,
                _clip((report.contribution or 0.0) / 10.0),
                _clip(report.contribution_velocity / 10.0),
                min(report.epochs_in_stage, 30) / 10.0,
                report.gradient_health if report.gradient_health is not None else -1.0,
                _clip(math.log1p(report.seed_params / host)),
                1.0 if gate is not None and gate.passed else 0.0,
                1.0 if report.contribution is not None else 0.0,
            ]
        )
        onehot = [0.0] * (len(space.blueprints) + 1)
        index = (
            space.blueprints.index(report.blueprint) if report.blueprint in space.blueprints else -1
        )
        onehot[index] = 1.0
        out.extend(onehot)
    return out


def feature_tensor(
    observations: Sequence[Observation], space: ActionSpace, history_length: int
) -> torch.Tensor:
    return torch.tensor(
        [features(o, space, history_length) for o in observations], dtype=torch.float32
    )


class RunningMeanStd:
    """Running mean and variance over batches (Chan et al.'s parallel Welford update)."""

    def __init__(self, shape: tuple[int, ...], epsilon: float = 1e-4, clip: float = 10.0) -> None:
        self.mean = torch.zeros(shape, dtype=torch.float64)
        self.var = torch.ones(shape, dtype=torch.float64)
        self.count = epsilon
        self.clip = clip

    def update(self, batch: torch.Tensor) -> None:
        batch = batch.detach().to(torch.float64).reshape(-1, *self.mean.shape)
        if batch.shape[0] == 0:
            return
        b_mean = batch.mean(dim=0)
        b_var = batch.var(dim=0, unbiased=False)
        n = batch.shape[0]
        delta = b_mean - self.mean
        total = self.count + n
        self.mean = self.mean + delta * n / total
        m2 = self.var * self.count + b_var * n + delta.pow(2) * self.count * n / total
        self.var = m2 / total
        self.count = total

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        mean = self.mean.to(device=x.device, dtype=x.dtype)
        std = torch.sqrt(self.var + 1e-8).to(device=x.device, dtype=x.dtype)
        return ((x - mean) / std).clamp(-self.clip, self.clip)

    def state_dict(self) -> dict[str, object]:
        return {
            "mean": self.mean.clone(),
            "var": self.var.clone(),
            "count": float(self.count),
            "clip": self.clip,
        }

    def load_state_dict(self, state: dict[str, object]) -> None:
        mean, var = state["mean"], state["var"]
        assert isinstance(mean, torch.Tensor) and isinstance(var, torch.Tensor)
        if mean.shape != self.mean.shape:
            raise ValueError(
                f"normalizer shape {tuple(mean.shape)} does not match {tuple(self.mean.shape)}"
            )
        self.mean, self.var = mean.clone(), var.clone()
        self.count = float(state["count"])  # type: ignore[arg-type]
        self.clip = float(state["clip"])  # type: ignore[arg-type]
