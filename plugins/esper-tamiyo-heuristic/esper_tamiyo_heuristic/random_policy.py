"""``policies.random``: uniform over the legal actions, never a masked one.

It samples a legal op uniformly, then a legal slot for that op, then legal values for
the heads that op reads. Its ``random.Random`` is seeded from the options (or the run
seed) and its state is part of :meth:`RandomPolicy.state_dict`, so a resumed run makes
the same choices as an uninterrupted one.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from attrs import define

from esper_core import hookimpl
from esper_core.config_limits import MAX_SEED
from esper_core.converter import in_range, options_field
from esper_core.errors import CheckpointError

if TYPE_CHECKING:
    from esper_core import PolicyContext
    from esper_core.env.observation import Observation
    from esper_core.env.step import StepResult
    from esper_core.lifecycle.actions import Action

STATE_VERSION = 1


@define
class RandomOptions:
    seed: int | None = options_field(
        None,
        in_range(0, MAX_SEED, integer=True),
        "Seed of the policy's random generator (default: the run seed).",
    )


class RandomPolicy:
    """Uniformly random legal actions: a floor that any useful controller must beat."""

    name: ClassVar[str] = "random"
    description: ClassVar[str] = "Uniform over legal actions (op, then slot, then the other heads)"
    Options: ClassVar[type] = RandomOptions

    def __init__(self, options: RandomOptions, context: PolicyContext) -> None:
        self.options = options
        self.context = context
        self.rng = random.Random(context.seed if options.seed is None else options.seed)

    def reset(self, env_indices: Sequence[int]) -> None:
        """No per-episode memory; the generator keeps running so episodes differ."""

    def act(self, observations: Sequence[Observation]) -> list[Action]:
        from esper_tamiyo_heuristic.legal import sample_legal

        # Envs draw in the order given, which the runner keeps fixed: reproducible.
        return [
            sample_legal(self.rng, obs.masks, self.context.space).because(
                "policies.random: a uniformly random legal action"
            )
            for obs in observations
        ]

    def observe(self, results: Sequence[StepResult]) -> None:
        """Outcomes do not change a random policy."""

    def state_dict(self) -> dict[str, Any]:
        version, internal, gauss_next = self.rng.getstate()
        return {"version": STATE_VERSION, "rng": [version, list(internal), gauss_next]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        try:
            if state["version"] != STATE_VERSION:
                raise ValueError(f"state version {state['version']!r}, expected {STATE_VERSION}")
            version, internal, gauss_next = state["rng"]
            self.rng.setstate((int(version), tuple(int(v) for v in internal), gauss_next))
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(
                f"the random policy's saved state is not one it wrote ({type(exc).__name__}: {exc}); "
                "resume the run with the policy that wrote the checkpoint"
            ) from None


@hookimpl
def esper_register_policies(register: Any) -> None:
    register(RandomPolicy)
