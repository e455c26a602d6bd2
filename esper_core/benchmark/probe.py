"""What a pair's host takes, asked of the env itself (no list of hosts kept here).

The pair is built once as a ``wait`` cell would be (task, host, env, in a scratch
directory), with the menu's blueprints added to ``env.blueprints`` where they are
opt-in: its action space names the slots, and the masks of its first observation say
which blueprint fits which slot and whether a seed may germinate at all. Host widening
and deepening are asked the same way: a ``policies.static`` cell that widens (deepens)
at the first moment is built, and the env refuses a host that cannot take it with its
own one-line reason, which the menu records. Deepening tries G_stack first (the stack
copied on itself), then fresh layers (``identity``) where a host has nothing to copy.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import attrs

from esper_core.benchmark.menu import HostOffer, SlotOffer
from esper_core.benchmark.phases import LR, WAIT_ARM, pair_experiment
from esper_core.benchmark.suite import Pair, Suite
from esper_core.compare.experiment import Arm
from esper_core.compare.plan import resolve_configs
from esper_core.config import RunConfig
from esper_core.errors import EsperError
from esper_core.lifecycle.actions import LifecycleOp
from esper_core.plugins import PluginManager
from esper_core.run.session import Session, open_session


def pair_config(suite: Suite, pair: Pair, policy: Arm, pm: PluginManager) -> RunConfig:
    """The resolved config of ``policy`` on the pair at the first rate of its grid."""
    experiment = pair_experiment(suite, pair, (policy,))
    where = f"{policy.label} on {pair.task.label}"
    point = {LR: pair.grid[0]}
    (config,) = resolve_configs(experiment, pm, 0, [(pair.task, policy, point, where)])
    return attrs.evolve(config, run=attrs.evolve(config.run, telemetry=[], threads=0))


def _open(config: RunConfig, pm: PluginManager, scratch: Path, name: str) -> Session:
    return open_session(config, pm, "run", scratch / name, resume=False, quiet=True)


def _refusal(
    suite: Suite, pair: Pair, options: dict[str, Any], pm: PluginManager, scratch: Path
) -> str | None:
    """Why the host refuses ``policies.static`` with ``options`` (None: it takes it)."""
    name = f"static-{len(list(scratch.iterdir()))}"
    try:
        session = _open(
            pair_config(suite, pair, Arm(name, "static", "static", options), pm), pm, scratch, name
        )
    except EsperError as exc:
        return str(exc)
    session.close()
    return None


def _with_blueprints(config: RunConfig, topology: str, names: list[str]) -> tuple[str, ...] | None:
    """env.blueprints with the opt-in menu blueprints added; None: nothing to add."""
    keys = list(config.env.blueprints or [])
    held = {k.split("/", 1)[-1] for k in keys}
    extra = [f"{topology}/{n}" for n in names if n not in held]
    return tuple(keys + extra) if extra else None


def _slots(session: Session, names: list[str]) -> tuple[tuple[SlotOffer, ...], tuple[str, ...]]:
    env = session.envs[0]
    observation = session.start_episodes()[0]
    space = env.space
    keys = {key.split("/", 1)[-1]: i for i, key in enumerate(space.blueprints)}
    masks = observation.masks
    slots = []
    for i, slot_id in enumerate(space.slot_ids):
        if not bool(masks.slot[LifecycleOp.GERMINATE, i]):
            continue
        fits = tuple(n for n in names if n in keys and bool(masks.blueprint[i, keys[n]]))
        if fits:
            slots.append(SlotOffer(slot_id, fits))
    return tuple(slots), tuple(n for n in names if n not in keys)


def _seeds(
    config: RunConfig, pm: PluginManager, scratch: Path, suite: Suite
) -> tuple[str, tuple[SlotOffer, ...], tuple[str, ...], tuple[str, ...] | None]:
    session = _open(config, pm, scratch, "wait")
    try:  # a user's task says its topology once built (tasks.dataset's option)
        topology = str(session.envs[0].task.topology)
        names = list(suite.menu.blueprints.get(topology, []))
        slots, missing = _slots(session, names)
    finally:
        session.close()
    extended = _with_blueprints(config, topology, names)
    if extended is None:
        return topology, slots, missing, None
    wider = attrs.evolve(config, env=attrs.evolve(config.env, blueprints=list(extended)))
    try:
        session = _open(wider, pm, scratch, "wait-blueprints")
    except EsperError:  # a menu blueprint is not installed: the default set only
        return topology, slots, missing, None
    try:
        return (topology, *_slots(session, names), extended)
    finally:
        session.close()


def host_offer(suite: Suite, pair: Pair, pm: PluginManager) -> HostOffer:
    """What the pair's host takes."""
    config = pair_config(suite, pair, WAIT_ARM, pm)
    at = suite.menu.moments[0] if suite.menu.moments else 0.0
    with tempfile.TemporaryDirectory(prefix="esper-benchmark-probe-") as name:
        scratch = Path(name)
        topology, slots, missing, blueprints = _seeds(config, pm, scratch, suite)
        widen = _refusal(
            suite, pair, {"widen_at": at, "widen_factor": suite.menu.widen_factor}, pm, scratch
        )
        mode, deepen = "stack", None
        for mode in ("stack", "identity"):
            options = {
                "deepen_at": at,
                "deepen_factor": suite.menu.deepen_factor,
                "deepen_mode": mode,
            }
            deepen = _refusal(suite, pair, options, pm, scratch)
            if deepen is None:
                break
    return HostOffer(topology, slots, widen, deepen, missing, blueprints, mode)
