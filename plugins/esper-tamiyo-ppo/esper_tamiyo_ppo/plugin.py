"""The ``policies.ppo`` entry point.

Importing this module must stay cheap (``esper plugins`` imports every plugin), so the
registered component is a small constructor that imports torch and the real
:class:`esper_tamiyo_ppo.policy.PPOPolicy` only when a run builds the policy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from esper_core import hookimpl
from esper_tamiyo_ppo.options import PPOOptions

if TYPE_CHECKING:
    from esper_core.components.policy import PolicyContext
    from esper_tamiyo_ppo.policy import PPOPolicy


class PPO:
    """Registered as ``ppo``; ``PPO(options, context)`` returns a :class:`PPOPolicy`."""

    name: ClassVar[str] = "ppo"
    description: ClassVar[str] = (
        "PPO actor-critic over the factored, masked action (MLP or LSTM trunk); train with `esper train`."
    )
    Options: ClassVar[type] = PPOOptions

    def __new__(cls, options: PPOOptions, context: PolicyContext) -> PPOPolicy:  # type: ignore[misc]
        from esper_tamiyo_ppo.policy import PPOPolicy

        return PPOPolicy(options, context)


@hookimpl
def esper_register_policies(register: Any) -> None:
    register(PPO)
