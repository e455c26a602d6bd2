"""The numbers of a PPO policy state, checked before a policy is built from them.

A checkpoint's content digest only says the file is what was written: anyone handing
over a file can recompute it. A network with a NaN weight, or an observation normaliser
with a negative variance, still loads, and the policy it makes computes NaN logits and
only ever waits (or, in ``esper compare``, is pooled as if it were a trained run). Every
way a PPO state is loaded (``ppo:PATH``, ``policies.ppo.init_from``, ``--resume``) goes
through :func:`check_state_values`, which refuses such a state in one line.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch

from esper_core.errors import CheckpointError

# The largest |weight| a network trained here may hold. Trained weights are of order 1
# (the shipped checkpoints' largest is about 2: tanh layers saturate past a
# pre-activation of a few units, so training gains nothing by growing them), and Adam
# moves a weight by a few learning rates per step. 1e4 leaves thousands of times that
# headroom; past it the weights were written, not trained, and two layers of them (1e30
# and up) overflow float32 logits (3.4e38) into inf and NaN.
MAX_WEIGHT = 1e4


def check_state_values(state: dict[str, Any], source: str) -> None:
    """Refuse (:class:`CheckpointError`) a state whose weights are not finite or past
    :data:`MAX_WEIGHT`, or whose normaliser statistics no data could produce."""
    network = state.get("network")
    if isinstance(network, dict):
        for name, tensor in network.items():
            _check_weight(name, tensor, source)
    for where, rms in _running_stats(state):
        _check_running_stats(where, rms, source)


def _damaged(source: str, what: str) -> CheckpointError:
    return CheckpointError(
        f"{source}: {what}; no training run writes that, so the file is damaged or was "
        "edited: use another checkpoint (or train one with esper train --policy ppo)"
    )


def _check_weight(name: str, tensor: object, source: str) -> None:
    if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
        return  # a wrong type or shape is the network's own load to refuse
    if tensor.numel() == 0:
        return
    if not bool(torch.isfinite(tensor).all()):
        raise _damaged(source, f"network weight {name!r} is not finite (NaN or inf)")
    largest = float(tensor.detach().abs().max())
    if largest > MAX_WEIGHT:
        raise _damaged(
            source, f"network weight {name!r} reaches {largest:.3g}, past {MAX_WEIGHT:g}"
        )


def _running_stats(state: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every running mean/std of the state, named as the message will say it."""
    obs = state.get("obs_normalizer")
    if isinstance(obs, dict) and "mean" in obs:  # the flat network's single normaliser
        yield "obs_normalizer", obs
    elif isinstance(obs, dict):  # the slots network's parts
        for part, rms in obs.items():
            if isinstance(rms, dict):
                yield f"obs_normalizer.{part}", rms
    reward = state.get("reward_normalizer")
    if isinstance(reward, dict) and isinstance(reward.get("rms"), dict):
        yield "reward_normalizer", reward["rms"]


def _check_running_stats(where: str, rms: dict[str, Any], source: str) -> None:
    for key in ("mean", "var"):
        value = rms.get(key)
        if isinstance(value, torch.Tensor) and not bool(torch.isfinite(value).all()):
            raise _damaged(source, f"{where} {key} is not finite (NaN or inf)")
    var = rms.get("var")
    if isinstance(var, torch.Tensor) and var.numel() and float(var.min()) < 0:
        raise _damaged(source, f"{where} var is negative ({float(var.min()):.3g})")
    count = rms.get("count")
    if isinstance(count, int | float) and not (math.isfinite(count) and count >= 0):
        raise _damaged(source, f"{where} count is {count!r}, not a count of samples")
