"""``policies.wait``: always WAIT, the no-growth baseline (the host trains alone)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from attrs import define

from esper_core import hookimpl

if TYPE_CHECKING:
    from esper_core import PolicyContext
    from esper_core.env.observation import Observation
    from esper_core.env.step import StepResult
    from esper_core.lifecycle.actions import Action


@define
class WaitOptions:
    """The wait policy has no options."""


class WaitPolicy:
    """Never grows anything: every action is WAIT."""

    name: ClassVar[str] = "wait"
    description: ClassVar[str] = "Always WAIT: the host trains alone (the no-growth baseline)"
    Options: ClassVar[type] = WaitOptions
    options: WaitOptions

    def __init__(self, options: WaitOptions, context: PolicyContext) -> None:
        self.options = options
        self.context = context

    def reset(self, env_indices: Sequence[int]) -> None:
        """Nothing to forget."""

    # The reason every action carries (Action.reason).
    why: ClassVar[str] = "policies.wait never grows: the host trains alone"

    def act(self, observations: Sequence[Observation]) -> list[Action]:
        from esper_core.lifecycle.actions import WAIT

        return [WAIT.because(self.reason()) for _ in observations]

    def reason(self) -> str:
        """The reason every action carries (a subclass may say more than :attr:`why`)."""
        return self.why

    def observe(self, results: Sequence[StepResult]) -> None:
        """Outcomes change nothing."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Stateless: any saved state (an empty dict) restores it."""


@hookimpl
def esper_register_policies(register: Any) -> None:
    register(WaitPolicy)
