"""The shipped ``ppo:pretrained`` checkpoint: how it is cut from a training run.

A run's checkpoint holds what resuming needs (optimiser, rollout buffer, generators),
most of its size; evaluating and ``init_from`` read only the network, the observation
statistics and what :mod:`esper_tamiyo_ppo.compat` checks. :func:`export_pretrained`
keeps exactly those, so the file the package ships stays small:

    python -m esper_tamiyo_ppo.pretrained RUN_DIR/checkpoint.pt \\
        plugins/esper-tamiyo-ppo/esper_tamiyo_ppo/pretrained/checkpoint.pt
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from esper_core.errors import CheckpointError

# What evaluation and init_from read of a PPO state (policy.py, compat.py, init_from.py).
KEPT = (
    "kind",
    "version",
    "options",
    "task",
    "space",
    "feature_dim",
    "history_length",
    "feature_schema",
    "network",
    "obs_normalizer",
    "updates_done",
)


def slim_policy_state(state: dict[str, Any]) -> dict[str, Any]:
    """The parts of a slots PPO state that acting needs, the options' init_from cleared
    (a path on the training machine means nothing to a user)."""
    if state.get("options", {}).get("network") != "slots":
        raise CheckpointError(
            "only a slots checkpoint can be shipped as ppo:pretrained (a flat one fits only "
            "its own host); train with --set policies.ppo.network=slots"
        )
    slim = {key: state[key] for key in KEPT if key in state}
    slim["options"] = {**state["options"], "init_from": ""}
    return slim


def export_pretrained(source: str | Path, target: str | Path) -> int:
    """Write the slim checkpoint of the run checkpoint ``source`` to ``target``; its size."""
    from esper_core.run.checkpoint import load_checkpoint, save_checkpoint

    data = load_checkpoint(source)
    if "policy" not in data:
        raise CheckpointError(f"checkpoint {source} holds no policy state")
    save_checkpoint(target, {"policy": slim_policy_state(data["policy"])})
    return Path(target).stat().st_size


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m esper_tamiyo_ppo.pretrained RUN_CHECKPOINT TARGET", file=sys.stderr)
        return 2
    try:
        size = export_pretrained(argv[0], argv[1])
    except CheckpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {argv[1]} ({size:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
