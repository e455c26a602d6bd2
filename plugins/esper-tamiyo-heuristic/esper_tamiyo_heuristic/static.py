"""``policies.static``: the final architecture trained from scratch (a fair baseline).

The policy names seeds (``seeds = ["conv_heavy@r0c0"]``, any number); the env installs
them as fossils before the first epoch of every episode, with the host init, data order
and seed init a grown run of the same seed gets, and the policy then always WAITs. Run
with the seeds a growing policy ended with, it answers "is growing better than just
training what you end with?" (``esper compare``'s ``static-final`` baseline does this
for every seed of every growing policy).

With ``widen_at`` it also grows the host itself, once, on a schedule (the growth
literature's baseline, "grow by operator X at a fraction f of the budget"): at epoch
``round(widen_at x max_epochs)`` the host widens by ``widen_factor`` (a CNN's conv
stages, a transformer's ``d_model`` with its heads and MLPs) behind a mask the alpha
ramp takes from 0 to 1 over ``widen_tempo`` epochs, then fold into the host
(``esper_core.env.host_growth``). With ``deepen_at`` a transformer host's stack of
blocks grows ``deepen_factor`` times as deep at epoch ``round(deepen_at x max_epochs)``:
the stack copied on itself (``deepen_mode = "stack"``, G_stack) or fresh blocks
(``"identity"``), each block behind a mask ramped over ``deepen_tempo`` epochs, then
folded in; a CNN host's conv stages (``deepen_stages``) each grow ``deepen_factor`` times
as deep in their layers before the pool (fresh conv+BN+ReLU layers, or copies of the
stage's channel-preserving ones). Both may be set (at epochs whose ramps do not overlap).
``widen_operator`` and ``deepen_operator`` name the growth operator (``esper operators``
lists them, a third party's too); empty, the one of its kind the host declares sites for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from attrs import define

from esper_core import hookimpl
from esper_core.converter import each, in_range, one_of, options_field
from esper_tamiyo_heuristic.wait import WaitOptions, WaitPolicy

if TYPE_CHECKING:
    from esper_core.components.policy import HostGrowthSpec


def _seed_spec(value: Any) -> str | None:
    if isinstance(value, str) and value.count("@") == 1 and all(value.split("@")):
        return None
    return f"expected blueprint@slot[:style] such as conv_heavy@r0c0, got {value!r}"


@define
class StaticOptions(WaitOptions):
    seeds: list[str] = options_field(
        [],
        each(_seed_spec),
        "Seeds installed as fossils before the first epoch: blueprint@slot, with :style for a "
        'blend style other than linear_add (e.g. ["conv_heavy@r0c0", "norm@r0c1:gated"]); '
        "none: the host alone, as wait.",
    )
    widen_at: float | None = options_field(
        None,
        in_range(0, 1, hi_open=True),
        "Widen the host at this fraction of the run (epoch round(f x max_epochs)): a CNN's "
        "conv stages, or a transformer's d_model (heads and MLPs with it); none: the host "
        "keeps its width.",
    )
    widen_factor: float = options_field(
        2.0,
        in_range(1, 64, lo_open=True),
        "Each widened stage's channels (a transformer's d_model) are multiplied by this.",
    )
    widen_stages: list[int] = options_field(
        [],
        each(in_range(0, 64, integer=True), distinct=True),
        "The conv stages (blocks) to widen, from 0; empty: all of them (a transformer "
        "widens every block: leave it empty; a Grower's model: its layer pairs, as "
        "esper_core.widenable_layers lists them).",
    )
    widen_tempo: int = options_field(
        5, in_range(1, 1000, integer=True), "Epochs the new channels' mask ramps from 0 to 1."
    )
    widen_curve: str = options_field(
        "linear", one_of("linear", "cosine", "sigmoid"), "The mask ramp's alpha curve."
    )
    widen_cross_init: str = options_field(
        "random",
        one_of("random", "zero"),
        "How the weights from new channels into existing ones start (the mask hides them "
        "either way at first).",
    )
    widen_operator: str = options_field(
        "",
        None,
        "The width growth operator by name (esper operators lists them, e.g. layers/width); "
        "empty: the one the host declares sites for.",
    )
    deepen_at: float | None = options_field(
        None,
        in_range(0, 1, hi_open=True),
        "Deepen the host at this fraction of the run (epoch round(f x max_epochs)): new "
        "blocks on top of a transformer's stack, or new conv layers before each CNN stage's "
        "pool, each behind a mask ramped from 0 (the host's function, bit for bit) to 1; "
        "none: the host keeps its depth.",
    )
    deepen_mode: str = options_field(
        "stack",
        one_of("stack", "identity"),
        "stack: the whole stack copied on itself (G_stack, [b1,b2] -> [b1,b2,b1',b2']; a CNN "
        "stage copies its channel-preserving layers); identity: fresh blocks (a CNN: fresh "
        "conv+BN+ReLU layers), initialised as the host initialises its own.",
    )
    deepen_factor: int = options_field(
        2,
        in_range(2, 8, integer=True),
        "The stack grows this many times as deep (a CNN stage of k layers before its pool "
        "gains (factor - 1) x k fresh layers, or factor - 1 copies of its C->C layers).",
    )
    deepen_stages: list[int] = options_field(
        [],
        each(in_range(0, 64, integer=True), distinct=True),
        "The CNN stages (blocks) to deepen, from 0; empty: all of them (a transformer "
        "deepens its whole stack: leave it empty).",
    )
    deepen_tempo: int = options_field(
        5, in_range(1, 1000, integer=True), "Epochs the new blocks' mask ramps from 0 to 1."
    )
    deepen_curve: str = options_field(
        "linear", one_of("linear", "cosine", "sigmoid"), "The mask ramp's alpha curve."
    )
    deepen_operator: str = options_field(
        "",
        None,
        "The depth growth operator by name (esper operators lists them, e.g. cnn/depth); "
        "empty: the one the host declares sites for.",
    )


class StaticPolicy(WaitPolicy):
    """Installs its seeds at birth, optionally widens the host on a schedule, and always
    WAITs (the env reinstalls the seeds and replays the growth at every reset, and both
    are in the env's checkpoint: nothing else to remember)."""

    name: ClassVar[str] = "static"
    description: ClassVar[str] = (
        "Fixed architecture from epoch 0: given seeds installed as fossils at birth, then WAIT"
    )
    Options: ClassVar[type] = StaticOptions
    options: StaticOptions
    why: ClassVar[str] = "policies.static: the architecture was fixed at birth"

    def birth_seeds(self) -> list[str]:
        """The seeds every env installs at the start of each episode (``InstallsAtBirth``)."""
        return list(self.options.seeds)

    def reason(self) -> str:
        o = self.options
        plan = [
            f"{word} at {at:g} of the run" if at is not None else ""
            for word, at in (("widens", o.widen_at), ("deepens", o.deepen_at))
        ]
        planned = " and ".join(p for p in plan if p)
        if not planned:
            return self.why
        return f"policies.static: the seeds were fixed at birth, and the host {planned}"

    def host_growths(self) -> list[HostGrowthSpec]:
        """The host growths every env applies in each episode (``SchedulesHostGrowth``)."""
        from esper_core.components.policy import DepthGrowthSpec, WidthGrowthSpec

        o = self.options
        specs: list[HostGrowthSpec] = []
        if o.widen_at is not None:
            specs.append(
                WidthGrowthSpec(
                    at=o.widen_at,
                    factor=o.widen_factor,
                    stages=tuple(o.widen_stages),
                    tempo=o.widen_tempo,
                    curve=o.widen_curve,
                    cross_init=o.widen_cross_init,
                    operator=o.widen_operator,
                )
            )
        if o.deepen_at is not None:
            specs.append(
                DepthGrowthSpec(
                    at=o.deepen_at,
                    mode=o.deepen_mode,
                    factor=o.deepen_factor,
                    tempo=o.deepen_tempo,
                    curve=o.deepen_curve,
                    stages=tuple(o.deepen_stages),
                    operator=o.deepen_operator,
                )
            )
        return specs


@hookimpl
def esper_register_policies(register: Any) -> None:
    register(StaticPolicy)
