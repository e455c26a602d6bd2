"""Schema 2 of the ``slots`` observation: unit-free features, padded to the run's space,
so one batch may hold observations of different hosts and tasks (``train.pairs``).

Each observation is read in its OWN env's terms: its slots (``len(obs.slots)`` <= the
layout's ``S``), its blueprints (``K_i``, the width of its masks, <= ``K``), its
topology. Its rows fill the first ``S_i`` slot rows and, in each, the first ``K_i``
candidate rows; the rest are absent: all zero, presence flag 0. Every number below
means the same on every task (ratios, fractions, flags), never a raw loss or count.

Run-level, ``[G]`` (schema 1's, in its order, then three more):

- epoch / max_epochs; val loss / chance loss; val accuracy / 100; train loss / chance;
  train accuracy / 100; plateau epochs / 10 (at most 2); best accuracy / 100; epochs
  since the last prune / 10 (at most 2) -- the flat network's, clipped to [-10, 10];
- the history: each of the last ``H`` validation losses minus the current, over the
  chance loss; each of the last ``H`` accuracies minus the current, / 100;
- ln(1 + seed parameters / host parameters); ln(training FLOPs ratio) in [-10, 10];
  the topology one-hot (the observation's, else the run's);
- learning-curve slope: relative change of the validation loss per epoch over the last
  3 epochs, ``(L_now / L_then - 1) / k``, in [-1, 1] (0 before a second epoch);
- train/validation gap: ``(val loss - train loss) / val loss``, in [-1, 1];
- budget left: ``1 - epoch / max_epochs``.

Per slot, ``[S, F]``: the stage one-hot and the flat network's 9 slot scalars (alpha,
alpha target, contribution / 10, its velocity / 10, epochs in stage / 10, gradient
health or -1, ln(1 + seed parameters / host), gate passed, contribution known); the
installed blueprint (present; identity at birth and branch, read through the
env's own keys ``obs.blueprints``, 0 where it names none); the slot's depth ``i /
(S_i - 1)``; ln(expansion ratio) in [-5, 5] and whether the probe measured one (0, 0
when NaN or absent); the presence flag.

Per (slot, blueprint) candidate, ``[S, K, D]``: ln(1 + its parameters in that slot /
host parameters), its price; identity at birth; branch; epochs before it blends / 10
(at most 3); the presence flag.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from esper_core.components.blueprint import TOPOLOGIES
from esper_core.env.observation import Observation, features
from esper_core.lifecycle.actions import ActionSpace
from esper_core.lifecycle.stages import STAGES
from esper_tamiyo_ppo.slot_layout import RUN_SCALARS, SLOT_SCALARS, SlotLayout

SLOPE_EPOCHS = 3
# The flat features with no blueprint vocabulary: the run-level scalars and each slot's
# stage and scalars, read per observation whatever its env's own space.
_NO_BLUEPRINTS = ActionSpace((), (), (), (), ())


def log_ratio(params: int, host: int) -> float:
    return min(math.log1p(max(params, 0) / max(host, 1)), 10.0)


def _clip(value: float, bound: float) -> float:
    return max(min(value, bound), -bound)


def installed_index(blueprint: str | None, obs: Observation, n_blueprints: int) -> int:
    """The installed seed's blueprint in its env's own vocabulary (``obs.blueprints``),
    or -1. Never the run's space: a mixed run's names blueprints by position, and a
    feature must read the same whether or not the space is padded."""
    if blueprint is None or blueprint not in obs.blueprints:
        return -1
    j = obs.blueprints.index(blueprint)
    return j if j < n_blueprints else -1


def own_sizes(obs: Observation) -> tuple[int, int]:
    """The slot and blueprint counts of the observation's own env."""
    return len(obs.slots), int(obs.masks.blueprint.shape[-1])


def unit_free(obs: Observation) -> list[float]:
    """Learning-curve slope, train/validation gap, budget left (module docstring)."""
    losses = list(obs.loss_history)[-(SLOPE_EPOCHS + 1) :]
    k = len(losses) - 1
    then = losses[0] if losses else 0.0
    slope = (obs.val_loss / then - 1.0) / k if k > 0 and then > 0 else 0.0
    gap = (obs.val_loss - obs.train_loss) / obs.val_loss if obs.val_loss > 0 else 0.0
    budget = 1.0 - obs.epoch / max(obs.max_epochs, 1)
    return [_clip(slope, 1.0), _clip(gap, 1.0), budget]


def _expansion(obs: Observation, i: int) -> list[float]:
    ratio = obs.expansion[i] if i < len(obs.expansion) else math.nan
    if not math.isfinite(ratio) or ratio <= 0:
        return [0.0, 0.0]
    return [_clip(math.log(ratio), 5.0), 1.0]


def padded_features(obs: Observation, layout: SlotLayout, topology: str) -> list[float]:
    """One step's flat vector of ``layout`` (schema 2) for ``obs``; ``topology``: the
    run's, read where ``obs.topology`` is empty. Nothing here reads the run's space,
    so a host reads the same under a padded space as under its own."""
    n_slots, n_bp = own_sizes(obs)
    if n_slots > layout.n_slots or n_bp > layout.n_blueprints:
        raise ValueError(
            f"an observation of {n_slots} slots and {n_bp} blueprints does not fit the "
            f"policy's space of {layout.n_slots} and {layout.n_blueprints}"
        )
    history = layout.history_length
    flat = features(obs, _NO_BLUEPRINTS, history)
    run_end = RUN_SCALARS + 2 * history
    per_slot = len(STAGES) + SLOT_SCALARS + 1  # the flat slot block, one-hot of width 1
    host = max(obs.host_params, 1)
    identity = obs.blueprint_identity or (False,) * n_bp
    branch = obs.blueprint_branch or (False,) * n_bp
    blending = obs.epochs_before_blending or (0,) * n_bp
    params = obs.blueprint_params or ((0,) * n_bp,) * n_slots
    kind = obs.topology or topology
    out = flat[:run_end]
    out += [
        log_ratio(obs.seed_params, host),
        _clip(math.log(max(obs.train_flops_ratio, 1e-6)), 10.0),
        *(1.0 if kind == t else 0.0 for t in TOPOLOGIES),
        *unit_free(obs),
    ]
    absent_slot = [0.0] * layout.slot_dim
    for i in range(layout.n_slots):
        if i >= n_slots:
            out += absent_slot
            continue
        report = obs.slots[i]
        start = run_end + i * per_slot
        out += flat[start : start + len(STAGES) + SLOT_SCALARS]
        j = installed_index(report.blueprint, obs, n_bp)
        out += [
            1.0 if report.blueprint is not None else 0.0,
            1.0 if j >= 0 and identity[j] else 0.0,
            1.0 if j >= 0 and branch[j] else 0.0,
            i / (n_slots - 1) if n_slots > 1 else 0.0,  # its depth, whatever the slot count
            *_expansion(obs, i),
            1.0,
        ]
    absent_candidate = [0.0] * layout.candidate_dim
    for i in range(layout.n_slots):
        for j in range(layout.n_blueprints):
            if i >= n_slots or j >= n_bp:
                out += absent_candidate
                continue
            out += [
                log_ratio(params[i][j], host),
                1.0 if identity[j] else 0.0,
                1.0 if branch[j] else 0.0,
                min(blending[j], 30) / 10.0,
                1.0,
            ]
    return out


def fits_space(observations: Sequence[Observation], space: ActionSpace, topology: str) -> bool:
    """Whether every observation is of the run's own space (no padding, one topology)."""
    sizes = (len(space.slot_ids), len(space.blueprints))
    return all(
        own_sizes(o) == sizes and (not o.topology or not topology or o.topology == topology)
        for o in observations
    )
