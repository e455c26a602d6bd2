"""Stand-ins for the envs another rank owns.

A rank builds only the envs it steps (model, optimizers and data cost memory); the
runner still sees ``n_envs`` envs. Each env of another rank is a :class:`PeerEnv`: it
answers what the runner and the policy ask of any env (its index, action space, epochs
per episode, task, host size) from one of this rank's own envs - every env of a run has
the same task, host architecture and action space - and shows the observation its owner
last reported. Stepping, resetting or checkpointing it is the owner's job.
"""

from __future__ import annotations

from typing import Any

from esper_streams.errors import DistributedError


class PeerEnv:
    """Env ``env_index``, owned by rank ``owner``; ``template`` is one of this rank's envs."""

    def __init__(self, env_index: int, owner: int, template: Any) -> None:
        self.env_index = env_index
        self.owner = owner
        self.space = template.space
        self.max_epochs = template.max_epochs
        self.task = template.task
        self.host_params = template.host_params
        self.birth_host_params = template.birth_host_params
        self.device = template.device
        self._observation: Any = None

    @property
    def observation(self) -> Any:
        if self._observation is None:
            raise DistributedError(
                f"env {self.env_index} lives on rank {self.owner}; its observation has not "
                "been shared with this rank yet"
            )
        return self._observation

    def show(self, observation: Any) -> None:
        """The observation the owner reported (after a reset, a step or a resume)."""
        self._observation = observation

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """A resume: the owner loads this env's state; this rank keeps nothing of it."""

    def __getattr__(self, name: str) -> Any:
        # Anything else (the model, the trainer, step()) exists only on the owner.
        raise AttributeError(
            f"env {self.env_index} lives on rank {self.owner}; {name!r} is not available on "
            "this rank (only the owner builds, steps and checkpoints it)"
        )
