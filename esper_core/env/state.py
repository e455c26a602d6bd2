"""An env's checkpoint: plain data through the converter, torch state as torch saves it.

``state_dict()`` is the unstructured :class:`EnvState` plus the model, optimizer,
governor and generator states under their own keys: plain containers and tensors
only, so the checkpoint loads with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from attrs import frozen

from esper_core.converter import structure, unstructure
from esper_core.env.cost import CostState
from esper_core.env.episode import EpisodeStats
from esper_core.env.evaluation import EvalResult
from esper_core.env.expansion_score import ExpansionScores
from esper_core.env.host_growth import GrowthRecord, records
from esper_core.env.training import TrainStats
from esper_core.errors import CheckpointError, ConfigError
from esper_core.lifecycle.views import by_name

if TYPE_CHECKING:
    import torch

    from esper_core.env.cost import CostMeter
    from esper_core.env.training import Trainer
    from esper_core.lifecycle.governor import Governor
    from esper_core.lifecycle.model import MorphogeneticModel

# Keys of the torch-side state, saved and loaded as torch objects (never structured).
TORCH_KEYS = ("model", "trainer", "governor", "generator")


@frozen
class EnvState:
    """The plain-data part of an env's checkpoint."""

    seed: int
    episode: int
    epoch: int
    counters: EpisodeStats
    last_eval: EvalResult
    last_test: EvalResult | None
    last_train: tuple[float, float] | None  # (loss, accuracy): what an observation shows
    cost: CostState | None = None  # None: a checkpoint from before the meter was saved
    # The episode's host width growths, replayed on the fresh host before its weights load.
    growths: tuple[GrowthRecord, ...] = ()
    # The last probe's scores as observed: measured before the epoch's end ticked the
    # slots, so a probe after a resume would read another model. None: an older checkpoint.
    last_expansion: ExpansionScores | None = None


class Saved(Protocol):
    """What an env's checkpoint reads of it and loads into it (``MorphogeneticEnv`` is one)."""

    @property
    def model(self) -> MorphogeneticModel: ...

    @property
    def trainer(self) -> Trainer: ...

    @property
    def governor(self) -> Governor: ...

    @property
    def generator(self) -> torch.Generator: ...

    @property
    def cost(self) -> CostMeter: ...

    @property
    def stats(self) -> EpisodeStats: ...

    @property
    def last_train(self) -> TrainStats | None: ...

    @property
    def last_eval(self) -> EvalResult: ...

    @property
    def last_test(self) -> EvalResult | None: ...

    @property
    def last_expansion(self) -> ExpansionScores: ...

    @property
    def seed(self) -> int: ...

    @property
    def episode(self) -> int: ...

    @property
    def epoch(self) -> int: ...

    @property
    def host_params(self) -> int: ...


def env_state_dict(env: Saved) -> dict[str, Any]:
    train = env.last_train
    last_train = None if train is None else (train.loss, train.accuracy)
    state = by_name(
        EnvState,
        env,
        counters=env.stats,
        last_train=last_train,
        cost=env.cost.state(),
        growths=records(env),
    )
    torch_state = {
        "model": env.model.state_dict(),
        "trainer": env.trainer.state_dict(),
        "governor": env.governor.state_dict(),
        "generator": env.generator.get_state(),
    }
    return {**unstructure(state), **torch_state}


def env_state(data: dict[str, Any]) -> EnvState:
    """The plain-data part of a checkpointed env state, structured."""
    plain = {key: value for key, value in data.items() if key not in TORCH_KEYS}
    try:
        return structure(plain, EnvState)
    except ConfigError as exc:
        raise CheckpointError(f"the checkpoint's env state does not load: {exc}") from None


def load_torch_state(env: Saved, data: dict[str, Any]) -> None:
    """Load the torch part of ``data`` into ``env``'s freshly built model, trainer,
    governor and generator."""
    env.model.load_state_dict(data["model"])
    env.trainer.load_state_dict(data["trainer"])
    env.governor.load_state_dict(data["governor"])
    env.generator.set_state(data["generator"])


def last_train_stats(state: EnvState) -> TrainStats | None:
    """The training numbers an observation shows after a resume (the rest is not kept)."""
    if state.last_train is None:
        return None
    loss, accuracy = state.last_train
    return TrainStats(loss, accuracy, 0, 0, 0.0, True, {})
