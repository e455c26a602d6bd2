"""Envs of a seed group share their epochs until their actions part.

With ``train.seed_group = g`` the g envs of a group start each training episode on one
random seed: the same host, data and batches. Until the policy gives them different
actions they compute the same epochs bit for bit, so one of them (the part's *lead*) trains
each epoch and the others take its result. When actions part, the first env of each new
part takes the state its old lead had before this epoch (through the resume path,
``env.load_state_dict``) and trains on its own from then on. A run gives exactly what it
gives without sharing (``tests/core/test_shared_epochs.py``); it only skips repeated work.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import attrs
from attrs import define

if TYPE_CHECKING:
    from esper_core.env.step import StepResult
    from esper_core.lifecycle.actions import Action


@define
class SharedEpochs:
    """Which env trains each env's epoch: ``leads[i]`` is i itself, or the env of its group
    whose results it takes (every env of a part has the same actions so far)."""

    group: int
    leads: list[int]

    @classmethod
    def of(cls, n_envs: int, group: int) -> SharedEpochs:
        """Every env on its own until :meth:`restart` (a run resumed mid-episode loaded
        each env's state, so nothing is shared before the next episode)."""
        return cls(group=group, leads=list(range(n_envs)))

    @property
    def trained(self) -> int:
        """Envs that train their own epoch now."""
        return sum(lead == i for i, lead in enumerate(self.leads))

    def restart(self, envs: Sequence[Any]) -> None:
        """A new episode: each group is one part, led by its first env, where the group's
        envs sit on one device (a state does not move between devices here)."""
        self.leads = list(range(len(envs)))
        for first in range(0, len(envs), self.group):
            members = range(first, min(first + self.group, len(envs)))
            if len({str(envs[i].device) for i in members}) == 1:
                for i in members:
                    self.leads[i] = first

    def step(
        self, executor: Any, envs: Sequence[Any], actions: Sequence[Action]
    ) -> list[StepResult]:
        """One epoch of every env: the executor steps the leads; every other env gets its
        lead's result as its own."""
        self._part(envs, actions)
        running = [i for i, lead in enumerate(self.leads) if lead == i]
        stepped = executor.step([envs[i] for i in running], [actions[i] for i in running])
        results = dict(zip(running, stepped, strict=True))
        return [
            results[i] if lead == i else as_env(results[lead], i)
            for i, lead in enumerate(self.leads)
        ]

    def states(self, envs: Sequence[Any]) -> list[dict[str, Any]]:
        """The envs' checkpoint states: an env that has not trained its own epochs has its
        lead's (a copy, so that no two envs load one optimizer state and share its tensors);
        a stale env's own state is never read."""
        own = {lead: envs[lead].state_dict() for lead in set(self.leads)}
        return [
            own[i] if lead == i else copy.deepcopy(own[lead]) for i, lead in enumerate(self.leads)
        ]

    def _part(self, envs: Sequence[Any], actions: Sequence[Action]) -> None:
        """Split every part by its envs' actions; each new part's first env takes its old
        lead's state, from before this epoch."""
        leads = list(self.leads)
        for lead in sorted(set(self.leads)):
            parts: list[tuple[Action, list[int]]] = []
            for i in (i for i, of in enumerate(self.leads) if of == lead):
                part = next((p for a, p in parts if a == actions[i]), None)
                if part is None:
                    parts.append((actions[i], [i]))
                else:
                    part.append(i)
            for _, part in parts:
                head = part[0]
                for i in part:
                    leads[i] = head
                if head != lead:
                    # A deep copy: optimizer.load_state_dict keeps the tensors it is given.
                    envs[head].load_state_dict(copy.deepcopy(envs[lead].state_dict()))
        self.leads = leads


def as_env(result: StepResult, index: int) -> StepResult:
    """``result`` as env ``index`` would have reported it (its own index, fresh containers),
    with an epoch time of 0: it spent none, its lead trained the epoch."""
    # Every event of a step is one env's (StepEvents); the protocol type does not say so.
    events: list[Any] = [
        attrs.evolve(cast(Any, event), env=index) if hasattr(event, "env") else event
        for event in result.events
    ]
    events = [
        attrs.evolve(event, epoch_time=0.0) if hasattr(event, "epoch_time") else event
        for event in events
    ]
    return attrs.evolve(
        result,
        env_index=index,
        metrics=attrs.evolve(result.metrics, epoch_time=0.0),
        observation=attrs.evolve(result.observation, env_index=index),
        reward_components=dict(result.reward_components),
        events=events,
        info=dict(result.info),
    )
