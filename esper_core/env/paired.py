"""An env that runs a different host/task pair in each episode (``train.pairs``).

A controller meant for hosts it has never seen has to learn on many: each env of a
mixed run holds one :class:`~esper_core.env.env.MorphogeneticEnv` per pair and, at every
reset, draws the pair of the new episode from the episode's env seed (so a resumed or
repeated run draws the same pairs; consecutive seeds cycle through the pairs). Between resets it *is* that env: every attribute
and method the loops, the executor and the observation read is the drawn env's, so one
epoch of a mixed run is the same code as any other.

What differs is the action space the policy is built for: :attr:`space` is the union of
the pairs' spaces, padded (the widest host's slot count, the largest blueprint
vocabulary), and each observation carries its own env's slots, masks and topology. A
policy that reads observations by their features (PPO's ``slots`` network) acts on any
pair; actions stay indices into the drawn env's own space, the padding being at the end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from esper_core.errors import ConfigError
from esper_core.lifecycle.actions import ActionSpace

if TYPE_CHECKING:
    from esper_core.components.policy import HostGrowthSpec
    from esper_core.env.env import MorphogeneticEnv
    from esper_core.env.observation import Observation


def draw_pair(seed: int, n_pairs: int) -> int:
    """The pair an episode with env seed ``seed`` runs. Env seeds are consecutive within
    an episode round (``run.seed + k x n_envs + i``), so cycling through the pairs by seed
    gives every pair the same share of a rollout, and of any run of evaluation seeds,
    where a random draw would leave some out."""
    return seed % n_pairs


def union_space(labels: Sequence[str], spaces: Sequence[ActionSpace]) -> ActionSpace:
    """The space a policy acting on every pair is built for: the pairs' own when they
    agree; else as many slots as the widest host and blueprints as the largest
    vocabulary, named by position (``slot0``, ``blueprint0``). The lifecycle's
    vocabularies (styles, tempos, alpha targets) are the run's and must agree."""
    first = spaces[0]
    if all(s == first for s in spaces):
        return first
    for label, s in zip(labels, spaces):
        if (s.styles, s.tempos, s.alpha_targets) != (
            first.styles,
            first.tempos,
            first.alpha_targets,
        ):
            raise ConfigError(
                [
                    f"train.pairs: pair {label!r} sets its own lifecycle styles, tempos or "
                    f"alpha targets; every pair must share the run's [lifecycle]"
                ]
            )
    n_slots = max(len(s.slot_ids) for s in spaces)
    n_blueprints = max(len(s.blueprints) for s in spaces)
    return ActionSpace(
        slot_ids=tuple(f"slot{i}" for i in range(n_slots)),
        blueprints=tuple(f"blueprint{j}" for j in range(n_blueprints)),
        styles=first.styles,
        tempos=first.tempos,
        alpha_targets=first.alpha_targets,
    )


class PairedEnv:
    """Env ``i`` of a mixed run: one env per pair (``labels[k]`` runs ``envs[k]``), the
    drawn one current."""

    def __init__(self, labels: Sequence[str], envs: Sequence[MorphogeneticEnv]) -> None:
        if len(labels) != len(envs) or not envs:
            raise ValueError("a PairedEnv needs one env per pair label, and at least one")
        epochs = {e.max_epochs for e in envs}
        if len(epochs) > 1:
            lengths = ", ".join(f"{k}: {e.max_epochs}" for k, e in zip(labels, envs))
            raise ConfigError(
                [
                    f"train.pairs: every pair's episode must have the same length ({lengths}); "
                    "set env.max_epochs in the run's config, not in a pair's"
                ]
            )
        self.labels = tuple(labels)
        self.pair_envs = list(envs)
        for label, env in zip(self.labels, self.pair_envs):
            env.pair_label = label
        self.pair = 0
        self.space = union_space(self.labels, [e.space for e in envs])

    @property
    def current(self) -> MorphogeneticEnv:
        return self.pair_envs[self.pair]

    @property
    def pair_label(self) -> str:
        return self.labels[self.pair]

    def __getattr__(self, name: str) -> Any:
        # Only reached for what PairedEnv itself lacks; the guard keeps a half-built
        # object (copy, unpickling) from recursing.
        if name in ("pair_envs", "pair", "labels", "space"):
            raise AttributeError(name)
        return getattr(self.current, name)

    def reset(self, seed: int | None = None, episode: int = 0) -> Observation:
        """A new episode on the pair ``seed`` draws (the current pair without a seed)."""
        if seed is not None:
            self.pair = draw_pair(seed, len(self.pair_envs))
        return self.current.reset(seed, episode)

    def install_at_birth(self, specs: Sequence[str]) -> None:
        for env in self.pair_envs:
            env.install_at_birth(specs)

    def schedule_host_growth(self, specs: Sequence[HostGrowthSpec]) -> None:
        for env in self.pair_envs:
            env.schedule_host_growth(specs)

    def state_dict(self) -> dict[str, Any]:
        """The drawn env's state, with the pair it runs (``pair``, ``pair_label``)."""
        return {**self.current.state_dict(), "pair": self.pair, "pair_label": self.pair_label}

    def load_state_dict(self, data: dict[str, Any]) -> None:
        data = dict(data)
        pair, label = int(data.pop("pair")), data.pop("pair_label", None)
        if not 0 <= pair < len(self.labels) or label != self.labels[pair]:
            raise ValueError(
                f"the checkpoint's env ran pair {label!r}, which this run's train.pairs "
                f"({', '.join(self.labels)}) does not have at index {pair}"
            )
        self.pair = pair
        self.current.load_state_dict(data)
