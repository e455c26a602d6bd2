"""The PPO policy's growth of the host itself (``host_growth`` on; ``GrowsHostOnline``).

The network has one more head, "grow the host now" (0: not now, 1: now); this module
says when "now" is legal and turns the choice into the action's request. With
``host_growth = "auto"`` the head says when and the host's expansion score which growth
(widen or deepen; the rule the heuristic's auto follows,
:mod:`esper_core.components.host_growth_choice`).
"Now" is legal when the env says the growth the policy would ask for can start
(``Observation.host_growth_ready``, :mod:`esper_core.env.host_growth_ready`: no growth
in flight, no seed in its way, not at the last epoch), so the env never refuses a
request the mask allowed, and a seed kept for good no longer rules out a growth that can
work around it (deepening: seed first, then grow). Two rules of the policy's own narrow
it: the window ``host_growth_min_at`` .. ``host_growth_max_at`` of the run, which the
options name, and once per episode, which keeps what an episode may cost bounded and the
head's choice one decision per episode. The head is decided with WAIT only
(:func:`~esper_tamiyo_ppo.distributions.run_heads`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from attrs import evolve

from esper_core.components.host_growth_choice import choose, declared, ready
from esper_core.components.host_growth_options import growth_request
from esper_core.components.policy import HostGrowthSpec
from esper_core.env.observation import Observation
from esper_core.lifecycle.actions import HEADS, Action, LifecycleOp
from esper_tamiyo_ppo.distributions import BatchMasks, HeadOutputs
from esper_tamiyo_ppo.options import PPOOptions


class HostGrowthChoice:
    """What each env's episode has asked, and the growth head's masks and requests."""

    def __init__(self, options: PPOOptions, n_envs: int, device: torch.device) -> None:
        self.options = options
        self.enabled = options.host_growth != "off"
        self.device = device
        self.asked = torch.zeros(n_envs, dtype=torch.bool, device=device)
        # Per env: the policy's own probability of not having grown yet this episode, along
        # the steps it acted on deterministically (see median_moment).
        self.not_yet = torch.ones(n_envs, device=device)

    def request(self, at: float, kind: str = "") -> HostGrowthSpec | None:
        """The growth the options ask for, starting at ``at`` (None: host_growth off);
        ``kind``: what auto chose."""
        return growth_request(self.options, at, kind)

    def declared(self) -> list[HostGrowthSpec]:
        """Every growth it may ask for (``GrowsHostOnline``): auto may widen or deepen."""
        return declared(self.options)

    def reset(self, rows: torch.Tensor) -> None:
        """New episodes in ``rows``: each may grow its host once again."""
        self.asked[rows] = False
        self.not_yet[rows] = 1.0

    def masks(self, observations: Sequence[Observation], rows: torch.Tensor) -> torch.Tensor | None:
        """``[B, 2]``: "not now" always legal, "now" as the module docstring says; None
        without the head."""
        if not self.enabled:
            return None
        o = self.options
        legal = [
            round(o.host_growth_min_at * obs.max_epochs)
            <= obs.epoch
            <= round(o.host_growth_max_at * obs.max_epochs)
            and ready(obs, choose(o, obs)[0])
            for obs in observations
        ]
        now = torch.tensor(legal, dtype=torch.bool, device=self.device) & ~self.asked[rows]
        return torch.stack([torch.ones_like(now), now], dim=1)

    def median_moment(self, out: HeadOutputs, masks: BatchMasks, rows: torch.Tensor) -> HeadOutputs:
        """``out`` with the growth head decided deterministically at the median of the
        policy's own growth moment: "now" at the first step where the probability that it
        would have grown by then (sampling every step so far) reaches one half. The head's
        most likely choice at each step alone is the wrong deterministic action for a
        once-per-episode decision: a policy that grows with probability 0.3 at each of five
        legal epochs grows in 83 % of its sampled episodes, and never when each step takes
        its mode."""
        if not self.enabled:
            return out
        col = len(HEADS)
        op, chosen, log_p = out.actions[:, 0], out.actions[:, col], out.log_probs[:, col]
        legal = masks.host_growth[:, 1] & (op == int(LifecycleOp.WAIT))  # type: ignore[index]
        p_now = torch.where(chosen == 1, log_p.exp(), 1.0 - log_p.exp())
        not_yet = self.not_yet[rows] * torch.where(legal, 1.0 - p_now, 1.0)
        self.not_yet[rows] = not_yet
        now = legal & (not_yet <= 0.5)
        actions, log_probs = out.actions.clone(), out.log_probs.clone()
        actions[:, col] = now.long()
        # The log-probability of what it does, so an action's reason quotes its chance.
        log_probs[:, col] = torch.where(now, p_now, 1.0 - p_now).clamp_min(1e-12).log()
        return out._replace(actions=actions, log_probs=log_probs)

    def apply(self, action: Action, choice: Sequence[int], obs: Observation, row: int) -> Action:
        """``action`` with the request when the head's ``choice`` (its column, or none
        without the head) says "now"; the env's episode then has asked."""
        if list(choice) != [1]:
            return action
        self.asked[row] = True
        kind, why = choose(self.options, obs)
        grows = f"grows the host: {kind} x{self.options.host_growth_factor:g}"
        return evolve(
            action,
            host_growth=self.request(obs.epoch / obs.max_epochs, kind),
            reason="; ".join(r for r in (action.reason, grows, why) if r),
        )

    def state_dict(self) -> dict[str, Any]:
        return {"host_grown": self.asked.clone(), "host_not_yet": self.not_yet.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "host_grown" in state:  # written before host growth existed: none asked
            self.asked.copy_(state["host_grown"])
        if "host_not_yet" in state:  # written before the median moment: as if fresh
            self.not_yet.copy_(state["host_not_yet"])
