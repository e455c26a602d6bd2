"""What decides a cell's result: the settings compared before a finished cell is reused.

A finished (or checkpointed) cell is reused when its stored config and the planned one
agree on every setting that can change the result, and two planned cells with the same
settings are one run (the second is a copy of the first). Settings that cannot change a
result are left out:

- display and telemetry (``run.quiet``, ``run.telemetry``, ``[telemetry]``);
- the options of components the run does not use (``[policies.heuristic]`` in a ``wait``
  cell: every cell carries the shared config's sections);
- the blueprint set, for a policy whose architecture is fixed (``wait``, ``static``): it
  never germinates, so installing a blueprint package cannot change what it trains
  (``static`` builds only the blueprints its ``seeds`` name, which are compared);
- ``static`` with no seeds and no host growth is ``wait`` (the host alone, as its
  option says), and without a width growth (``widen_at`` unset) the other ``widen_*``
  options of ``static`` shape nothing, nor the ``deepen_*`` ones without ``deepen_at``:
  a cell finished before they existed is kept.

A component option added after a cell ran is missing from its stored config; it is
compared at its default (:func:`esper_core.run.resolve.with_new_option_defaults`), since
an option is added with a default that keeps what the code did before.

The thread count is not left out: it changes the order of float sums, hence the last
digits of every result.
"""

from __future__ import annotations

import json
from typing import Any

from esper_core.config import RunConfig, config_to_dict
from esper_core.run.policy_ref import PolicyRef

NEUTRAL_KEYS = ("run.quiet", "run.telemetry")
NEUTRAL_SECTIONS = ("telemetry",)
# Policies that never change the architecture: they cannot germinate, and their static
# final architecture is themselves.
FIXED_ARCHITECTURE = ("static", "wait")
# policies.static's host-growth options, by the option that switches each growth on:
# they shape nothing unless it is set.
GROWTH_PREFIXES = {"widen_at": "widen_", "deepen_at": "deepen_"}
# Component sections of which only the selected component's options matter.
_SELECTED = (("tasks", "task"), ("rewards", "reward"), ("executors", "executor"))
# How much of a long value a difference shows (around where the two first differ).
SHOWN = 60


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(data, dict):
        return {prefix: data}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def comparable(config: RunConfig) -> dict[str, Any]:
    """The settings that decide a cell's result, flattened to dotted keys."""
    data = config_to_dict(config)
    for section in NEUTRAL_SECTIONS:
        data.pop(section, None)
    run = data.get("run", {})
    for section, field in _SELECTED:
        chosen = run.get(field)
        data[section] = {chosen: data.get(section, {}).get(chosen, {})}
    policy = PolicyRef.parse(str(run.get("policy", ""))).name
    options = data.get("policies", {}).get(policy, {})
    grows = any(options.get(on) is not None for on in GROWTH_PREFIXES)
    if policy == "static" and not options.get("seeds") and not grows:
        policy, options = "wait", {}
        run["policy"] = "wait"
    if policy == "static":
        for on, prefix in GROWTH_PREFIXES.items():
            if options.get(on) is None:
                options = {k: v for k, v in options.items() if not k.startswith(prefix)}
    data["policies"] = {policy: options}
    if policy in FIXED_ARCHITECTURE:
        data.get("env", {}).pop("blueprints", None)
    return {k: v for k, v in _flatten(data).items() if k not in NEUTRAL_KEYS}


def result_key(config: RunConfig) -> str:
    """Equal for two configs exactly when they decide the same result."""
    return json.dumps(comparable(config), sort_keys=True, default=repr)


def _around(a: str, b: str) -> tuple[str, str]:
    """Both texts cut to the same window around where they first differ, so the window
    shows the difference (a cut at the same point from the start would show a shared
    prefix on both sides)."""
    if len(a) <= SHOWN and len(b) <= SHOWN:
        return a, b
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    start = max(0, first - SHOWN // 4)

    def cut(text: str) -> str:
        head = "..." if start else ""
        tail = "..." if start + SHOWN < len(text) else ""
        return head + text[start : start + SHOWN] + tail

    return cut(a), cut(b)


def describe_difference(key: str, there: Any, now: Any) -> str:
    """One setting that differs, as the difference itself: a list's added and removed
    entries, or the stretch of two long values where they differ."""
    if isinstance(there, list) and isinstance(now, list):
        added = [v for v in now if v not in there]
        removed = [v for v in there if v not in now]
        parts = [f"{json.dumps(v)} added" for v in added]
        parts += [f"{json.dumps(v)} removed" for v in removed]
        return f"{key}: {', '.join(parts) or 'the same entries in another order'}"
    a, b = _around(repr(there), repr(now))
    return f"{key}: {a} there, {b} now"


def config_differences(stored: RunConfig, planned: RunConfig) -> list[str]:
    """Each setting that decides a result and differs, stored (``there``) against planned."""
    a, b = comparable(stored), comparable(planned)
    return [
        describe_difference(k, a.get(k, "(unset)"), b.get(k, "(unset)"))
        for k in sorted(set(a) | set(b))
        if a.get(k) != b.get(k)
    ]
