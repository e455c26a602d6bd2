"""``policies.static``: the final architecture trained from scratch (a fair baseline).

The policy names seeds (``seeds = ["conv_heavy@r0c0"]``, any number); the env installs
them as fossils before the first epoch of every episode, with the host init, data order
and seed init a grown run of the same seed gets, and the policy then always WAITs. Run
with the seeds a growing policy ended with, it answers "is growing better than just
training what you end with?" (``esper compare``'s ``static-final`` baseline does this
for every seed of every growing policy).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from attrs import define

from esper_core import hookimpl
from esper_core.converter import each, options_field

if TYPE_CHECKING:
    from esper_core.components.policy import PolicyContext
    from esper_core.env.observation import Observation
    from esper_core.env.step import StepResult
    from esper_core.lifecycle.actions import Action


def _seed_spec(value: Any) -> str | None:
    if isinstance(value, str) and value.count("@") == 1 and all(value.split("@")):
        return None
    return f"expected blueprint@slot[:style] such as conv_heavy@r0c0, got {value!r}"


@define
class StaticOptions:
    seeds: list[str] = options_field(
        [],
        each(_seed_spec),
        "Seeds installed as fossils before the first epoch: blueprint@slot, with :style for a "
        'blend style other than linear_add (e.g. ["conv_heavy@r0c0", "norm@r0c1:gated"]); '
        "none: the host alone, as wait.",
    )


class StaticPolicy:
    """Installs its seeds at birth, then always WAITs."""

    name: ClassVar[str] = "static"
    description: ClassVar[str] = (
        "Fixed architecture from epoch 0: given seeds installed as fossils at birth, then WAIT"
    )
    Options: ClassVar[type] = StaticOptions

    def __init__(self, options: StaticOptions, context: PolicyContext) -> None:
        self.options = options
        self.context = context

    def birth_seeds(self) -> list[str]:
        """The seeds every env installs at the start of each episode (``InstallsAtBirth``)."""
        return list(self.options.seeds)

    def reset(self, env_indices: Sequence[int]) -> None:
        """Nothing to forget: the env reinstalls the seeds at every reset."""

    def act(self, observations: Sequence[Observation]) -> list[Action]:
        from esper_core.lifecycle.actions import WAIT

        return [WAIT for _ in observations]

    def observe(self, results: Sequence[StepResult]) -> None:
        """Outcomes change nothing."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Stateless: the seeds come from the options, the fossils from the env's checkpoint."""


@hookimpl
def esper_register_policies(register: Any) -> None:
    register(StaticPolicy)
