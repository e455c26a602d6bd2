"""Which growth a policy with ``host_growth = "auto"`` asks for, and whether the env can
start it now: one rule for every policy that grows the host online (the heuristic's and
PPO's), so the two read a host the same way.

auto reads the expansion score (``Observation.expansion``): what a new module *between*
the host's layers would buy at first order over the host's own next step. Where that is
high, the host's bottleneck is in what its layers compose, which depth adds; where it is
near zero, modules between the layers buy nothing the host's own step does not, and more
of the same layers (width) is the growth left to try.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Protocol

from esper_core.components.host_growth_options import GrowthOptions, growth_request
from esper_core.config_limits import MAX_FACTOR
from esper_core.converter import each, in_range, one_of, options_field

if TYPE_CHECKING:
    from esper_core.components.growth_request import HostGrowthSpec
    from esper_core.env.observation import Observation


def ratio_field() -> Any:
    # 0.2: between the controller suite's training pairs whose oracle widens (scores up to
    # 0.12 when the growth starts) and the one whose oracle deepens (0.47 and up), chosen
    # for the heuristic in the fourth round (docs/results/controller-benchmark.md).
    return options_field(
        0.2,
        in_range(0, MAX_FACTOR),
        "host_growth = auto: deepen when the highest expansion score of any slot (what a "
        "new module between the host's layers would buy at first order, over the host's own "
        "next step; needs env.expansion_batches > 0) is at least this when the growth "
        "starts; below it, or where the host cannot deepen, widen.",
    )


def topologies_field() -> Any:
    return options_field(
        ["cnn", "transformer"],
        each(one_of("cnn", "transformer", "mlp")),
        "host_growth = auto: the model families (task topologies) it may deepen; a host of "
        "another family widens whatever its expansion score.",
    )


class AutoOptions(GrowthOptions, Protocol):
    depth_expansion_ratio: float
    depth_topologies: list[str]


def declared(o: AutoOptions) -> list[HostGrowthSpec]:
    """Every growth ``o`` may ask for (``GrowsHostOnline.online_host_growths``): auto may
    widen or deepen (a host without one of them is offered only the other)."""
    kinds = ("widen", "deepen") if o.host_growth == "auto" else (o.host_growth,)
    return [g for k in kinds if (g := growth_request(o, 0.0, k)) is not None]


def choose(o: AutoOptions, obs: Observation) -> tuple[str, str]:
    """The growth to ask for (widen or deepen) and, for auto, why."""
    if o.host_growth != "auto":
        return o.host_growth, ""
    kinds = set(obs.host_growth_kinds)
    if "depth" not in kinds:
        return "widen", "auto: widen (the host cannot deepen)"
    if "width" not in kinds:
        return "deepen", "auto: deepen (the host cannot widen)"
    if obs.topology and obs.topology not in o.depth_topologies:
        return "widen", f"auto: widen (depth_topologies leaves out {obs.topology} hosts)"
    scores = [v for v in obs.expansion if math.isfinite(v)]
    if not scores:
        return "widen", "auto: widen (no expansion score: set env.expansion_batches > 0)"
    best, ratio = max(scores), o.depth_expansion_ratio
    if best >= ratio:
        return (
            "deepen",
            f"auto: deepen: expansion score {best:.2f} >= depth_expansion_ratio={ratio:g}",
        )
    return "widen", f"auto: widen: expansion score {best:.2f} < depth_expansion_ratio={ratio:g}"


def ready(obs: Observation, kind: str) -> bool:
    """Whether the env says the growth of ``kind`` (widen or deepen) can start now (an
    observation without kinds: the one growth declared)."""
    if not obs.host_growth_kinds:
        return obs.host_growth_ready[:1] == (True,)
    wanted = "depth" if kind == "deepen" else "width"
    says = dict(zip(obs.host_growth_kinds, obs.host_growth_ready, strict=False))
    return says.get(wanted, False)
