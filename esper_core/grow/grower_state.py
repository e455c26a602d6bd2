"""What a saved Grower state must hold, and whether the grower loading it grows as the
one that saved it did.

A grower state holds the lifecycle's and the policy's state, not their options: a state
saved by a grower with ``widen_factor=2`` would load into one built with
``widen_factor=3`` and go on growing by another rule than the one that grew it. The
state therefore records the options that decide growth (the policy, its resolved
options, the lifecycle, the governor, the env's but its length) and a load compares them
first. ``env.max_epochs`` may change (a Lightning fit extended past its epochs), and so
may the device and the components that only record.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from esper_core.config import RunConfig
from esper_core.converter import unstructure
from esper_core.errors import CheckpointError, GrowerError
from esper_core.run.checkpoint_fields import check_env_state

STATE_FORMAT = 1
STATE_KEYS = ("env", "step", "policy")  # what state_dict() always writes
CONFIG_KEY = "growth_config"  # older states lack it and are not compared
SHOWN = 3  # differences named in the message


def growth_config(cfg: RunConfig, policy: str, options: Any) -> dict[str, Any]:
    """The options that decide how a grower grows, flat (``policies.static.widen_factor``)."""
    env = {k: v for k, v in unstructure(cfg.env).items() if k != "max_epochs"}
    data = {
        "run.policy": cfg.run.policy,
        f"policies.{policy}": unstructure(options),
        "lifecycle": unstructure(cfg.lifecycle),
        "governor": unstructure(cfg.governor),
        "env": env,
    }
    return _flatten(data)


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, Mapping) and value:
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def check_growth_config(state: Mapping[str, Any], current: Mapping[str, Any]) -> None:
    """Refuse, in one line naming the first differences, a state saved by a grower whose
    growth options differ from ``current``'s."""
    saved = state.get(CONFIG_KEY)
    if saved is None:
        return
    if not isinstance(saved, Mapping):
        raise CheckpointError(
            f"the grower state holds {CONFIG_KEY} = {type(saved).__name__}, but a Grower "
            "writes a table: it was edited or written by another tool"
        )
    absent = "(unset)"
    changes = [
        f"{name}={saved.get(name, absent)!r}, this grower {current.get(name, absent)!r}"
        for name in sorted(set(saved) | set(current))
        if saved.get(name, absent) != current.get(name, absent)
    ]
    if changes:
        more = f" and {len(changes) - SHOWN} more" if len(changes) > SHOWN else ""
        raise GrowerError(
            f"the grower state was saved with {'; '.join(changes[:SHOWN])}{more}: it grew by "
            "other options; create the Grower with the overrides it was saved with "
            "(only max_epochs may change)"
        )


def check_state(state: Any, max_epochs: int) -> None:
    """Refuse a grower state whose shape or numbers are not what state_dict() writes,
    before anything of it is loaded."""
    if not isinstance(state, Mapping):
        raise CheckpointError(
            f"a grower state is a dict from Grower.state_dict(), got {type(state).__name__}"
        )
    if state.get("format") != STATE_FORMAT:
        raise GrowerError(
            f"grower state of format {state.get('format')!r}, expected {STATE_FORMAT}; "
            "load a state saved by this version's Grower.state_dict()"
        )
    missing = [key for key in STATE_KEYS if key not in state]
    if missing:
        raise CheckpointError(
            f"the grower state lacks {', '.join(missing)}: it was truncated or not written "
            "by Grower.state_dict()"
        )
    check_env_state(state["env"], "env", "the grower state", max_epochs)
    step = state["step"]
    if step is not None and not isinstance(step, Mapping):
        raise CheckpointError(
            f"the grower state holds step = {type(step).__name__}, but a Grower writes a "
            "table or None: it was edited or written by another tool"
        )
