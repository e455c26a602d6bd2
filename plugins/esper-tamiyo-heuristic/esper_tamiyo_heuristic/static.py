"""``policies.static``: the final architecture trained from scratch (a fair baseline).

The policy names seeds (``seeds = ["conv_heavy@r0c0"]``, any number); the env installs
them as fossils before the first epoch of every episode, with the host init, data order
and seed init a grown run of the same seed gets, and the policy then always WAITs. Run
with the seeds a growing policy ended with, it answers "is growing better than just
training what you end with?" (``esper compare``'s ``static-final`` baseline does this
for every seed of every growing policy).
"""

from __future__ import annotations

from typing import Any, ClassVar

from attrs import define

from esper_core import hookimpl
from esper_core.converter import each, options_field
from esper_tamiyo_heuristic.wait import WaitOptions, WaitPolicy


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


class StaticPolicy(WaitPolicy):
    """Installs its seeds at birth, then always WAITs (the env reinstalls them at every
    reset, and the fossils are in the env's checkpoint: nothing else to remember)."""

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


@hookimpl
def esper_register_policies(register: Any) -> None:
    register(StaticPolicy)
