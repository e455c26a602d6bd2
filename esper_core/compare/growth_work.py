"""What growth adds to a run's training FLOPs, before it runs: the growing arms' part of
``esper compare --dry-run``'s estimate.

A seed costs the training FLOPs of its weights at every position of its slot's activation
(3 x 2 x the blueprint's ``param_estimate`` x the slot's positions: a multiply-add per
weight and position forward, twice that backward, as the env's FLOP counter counts a
convolution or a linear layer), from the epoch it is grown to the end; a grown host costs
the task's FLOPs of the host at its grown size (``grown_flops_per_sample``) less the bare
host's, from the epoch it grows. Both come from the task's options alone
(:class:`~esper_core.components.task.SlotSite`), building nothing.

What a policy grows is read from its options by name, so any policy that names its growth
the way the shipped ones do is priced:

- known in advance: ``seeds`` (``blueprint@slot``; from epoch 0, or from
  ``round(at x max_epochs)`` for a policy with ``at``, as ``policies.schedule``), and
  ``widen_at``/``widen_factor`` and ``deepen_at``/``deepen_factor`` (``policies.static``;
  every stage grown: a run that grows some of them, ``widen_stages``, costs less);
- adaptive, an assumption the dry run states: a policy with ``blueprint_order`` (the
  heuristic) grows one seed of the costliest blueprint of that order in its costliest slot
  from its ``min_epoch`` to the end, and with ``host_growth`` on grows its host by
  ``host_growth_factor`` at ``host_growth_min_at`` first (no seed germinates before it);
  any other policy that grows (PPO, random) grows one seed of the costliest blueprint of
  the run's action space in its costliest slot from epoch 1; none with
  ``env.max_seeds = 0``. One seed kept to the end is what the heuristic's growing runs do
  (it holds one seed at a time); a policy that fills several slots costs more than stated.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
from attrs import frozen

from esper_core.components.task import SlotSite
from esper_core.config import RunConfig
from esper_core.converter import structure
from esper_core.plugins import PluginManager
from esper_core.run.policy_ref import PolicyRef
from esper_core.run.resolve import pinned_blueprints

# Forward and backward of a weight applied at one position: a multiply-add forward
# (2 FLOPs), and the gradients of its input and of itself backward (twice that).
TRAIN_FLOPS_PER_WEIGHT = 3 * 2
NO_GROWTH = ("wait",)


@frozen
class Growth:
    """Training FLOPs one sample adds, each part from its epoch to the end of the run."""

    parts: tuple[tuple[float, int], ...]  # (FLOPs per sample, the epoch it starts)
    # What was assumed of an adaptive policy (None: the growth is fixed in advance).
    assumption: str | None = None


@frozen
class _Part:
    flops_per_sample: float
    start: int
    assumption: str | None = None


def _options(config: RunConfig, pm: PluginManager) -> dict[str, Any]:
    """The policy's options, its defaults filled in."""
    name = _policy(config)
    given = config.component_options("policies", name)
    options = getattr(pm.registry("policies").get(name), "Options", None)
    if options is None or not attrs.has(options):
        return given
    return attrs.asdict(structure(given, options), recurse=False)


def _policy(config: RunConfig) -> str:
    """The policy's component name (``ppo`` of ``ppo:runs/x/checkpoint.pt``)."""
    return PolicyRef.parse(config.run.policy).name


def _epoch(at: float, epochs: int) -> int:
    return min(epochs, round(at * epochs))


def seed_flops(blueprint: Any, site: SlotSite) -> float:
    """Training FLOPs per sample of ``blueprint``'s seed in ``site``'s slot; 0 where it
    cannot grow there."""
    spec = site.spec
    if blueprint.fits(spec) is not None:
        return 0.0
    # A branch seed's output is at the following segment's resolution, but the shipped
    # ones compute most of it at the slot's: counted there, they come within 1.2x of the
    # FLOP counter on digits and glyphs (counted at the next one's, 0.3x of it).
    return float(TRAIN_FLOPS_PER_WEIGHT * blueprint.estimate_for(spec) * site.positions)


def _costliest(blueprints: Sequence[Any], sites: Sequence[SlotSite]) -> tuple[float, str]:
    """The costliest (FLOPs, ``blueprint@slot``) of the blueprints over the slots."""
    best = (0.0, "")
    for bp in blueprints:
        for site in sites:
            flops = seed_flops(bp, site)
            if flops > best[0]:
                best = (flops, f"{bp.key}@{site.spec.slot_id}")
    return best


def _named(pm: PluginManager, names: Sequence[str], topology: str) -> list[Any]:
    """The installed blueprints of ``topology`` among ``names`` (keys or names)."""
    installed = pm.blueprints_for(topology)
    wanted = set(names)
    return [bp for bp in installed if bp.key in wanted or bp.name in wanted]


def growth(
    config: RunConfig, task: Any, epochs: int, pm: PluginManager, from_start: bool = False
) -> Growth | None:
    """What ``config``'s policy grows on ``task`` over ``epochs`` epochs; None: nothing,
    or a task that cannot say (no ``slot_sites``). ``from_start``: the growth trained from
    epoch 0 (a static-final twin of a growing arm)."""
    if _policy(config) in NO_GROWTH or not hasattr(task, "slot_sites"):
        return None
    sites = task.slot_sites()
    if not sites:
        return None
    options = _options(config, pm)
    host = _host_growth(options, task, epochs)
    # The heuristic germinates no seed before its host has grown.
    after = host.start if host is not None and host.assumption else 0
    seeds = (
        None
        if config.env.max_seeds == 0
        else _seed_growth(options, sites, config, pm, epochs, after)
    )
    parts = [g for g in (seeds, host) if g is not None and g.flops_per_sample > 0]
    if not parts:
        return None
    assumed = "; ".join(g.assumption for g in parts if g.assumption) or None
    if assumed and from_start:
        assumed += ", all of it trained from epoch 0 by the static-final twin"
    return Growth(tuple((g.flops_per_sample, 0 if from_start else g.start) for g in parts), assumed)


def _seed_growth(
    options: dict[str, Any],
    sites: Sequence[SlotSite],
    config: RunConfig,
    pm: PluginManager,
    epochs: int,
    after: int,
) -> _Part | None:
    topology = sites[0].spec.topology
    by_slot = {site.spec.slot_id: site for site in sites}
    if options.get("seeds"):
        flops = 0.0
        for spec in options["seeds"]:
            name, slot = str(spec).split(":")[0].split("@")
            found = _named(pm, [name], topology)
            if found and slot in by_slot:
                flops += seed_flops(found[0], by_slot[slot])
        start = _epoch(float(options["at"]), epochs) if "at" in options else 0
        return _Part(flops, start)
    if "blueprint_order" in options:
        candidates = _named(pm, options["blueprint_order"], topology)
        start = max(after, int(options.get("min_epoch", 0)))
        why = "its min_epoch" if start > after else "once its host grew"
        who = f"from epoch {start} ({why})"
    elif "widen_at" in options or "deepen_at" in options:
        return None  # policies.static without seeds: its host growth only
    else:
        candidates = pinned_blueprints(pm.blueprints_for(topology), config.env.blueprints, topology)
        start = 1
        who = "from epoch 1"
    flops, seed = _costliest(candidates, sites)
    if not seed:
        return None
    return _Part(flops, min(start, epochs), f"{_policy(config)}: one {seed} seed {who}")


def _host_growth(options: dict[str, Any], task: Any, epochs: int) -> _Part | None:
    if not hasattr(task, "grown_flops_per_sample"):
        return None
    bare = task.training_work().flops_per_sample
    if options.get("host_growth", "off") != "off":
        kind = options["host_growth"]
        factor = float(options.get("host_growth_factor", 2.0))
        at = float(options.get("host_growth_min_at", 0.0))
        width, depth = (factor, 1) if kind == "widen" else (1.0, round(factor))
        extra = task.grown_flops_per_sample(width, depth) - bare
        note = f"host {kind}s x{factor:g} at epoch {_epoch(at, epochs)} (host_growth_min_at)"
        return _Part(extra, _epoch(at, epochs), note)
    extra, starts = 0.0, []
    if options.get("widen_at") is not None:
        extra += task.grown_flops_per_sample(float(options.get("widen_factor", 2.0)), 1) - bare
        starts.append(_epoch(float(options["widen_at"]), epochs))
    if options.get("deepen_at") is not None:
        extra += task.grown_flops_per_sample(1.0, int(options.get("deepen_factor", 2))) - bare
        starts.append(_epoch(float(options["deepen_at"]), epochs))
    return _Part(extra, min(starts)) if starts else None
