"""Seeds installed at birth: an architecture trained from scratch, under the same env.

``blueprint@slot`` names a seed (``conv_heavy@r0c0`` or ``cnn/conv_heavy@r0c0``), with
``:style`` after it for a blend style other than ``linear_add`` (``norm@r0c1:gated``: the
gate is part of the architecture). Every
episode, right after the host is built and before the first epoch, each named seed is
built and installed as a fossil (``rules.may_install_at_birth``). Seed ``k`` (counting
from 1) is initialised from ``seed * 1_000_003 + k``, the init a grown run gives its
``k``-th germination, and with the same host init and data order: the final
architecture of a grown run trained from scratch on the same seed (the ``static``
baseline). A host growth scheduled at epoch 0 with a one-epoch ramp completes before the
first epoch (:func:`esper_core.env.host_growth.folds_at_birth`): it is part of the host at
birth, so it starts before the seeds are installed, on the grown host (a grown run's seeds
born after its host grew); one that ramps over later epochs starts after them and grows
around them, as it would around kept seeds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from attrs import frozen

from esper_core.components.blueprint import Blueprint
from esper_core.env.init_seeds import init_seed
from esper_core.errors import ConfigError
from esper_core.lifecycle.alpha import STYLES
from esper_core.lifecycle.seed_spec import DEFAULT_STYLE, seed_spec

if TYPE_CHECKING:
    from esper_core.env.episode import EpisodeStats
    from esper_core.env.events import StepEvents
    from esper_core.env.training import Trainer
    from esper_core.lifecycle.model import MorphogeneticModel


@frozen
class BirthSeed:
    blueprint: str  # blueprint key, e.g. "cnn/conv_heavy"
    slot_id: str
    style: str = DEFAULT_STYLE

    @property
    def spec(self) -> str:
        return seed_spec(self.blueprint, self.slot_id, self.style)


def parse_birth_seeds(
    specs: Sequence[str], blueprints: Mapping[str, Blueprint], slot_ids: Sequence[str]
) -> tuple[BirthSeed, ...]:
    """``blueprint@slot`` strings -> seeds, refusing unknown names and repeated slots."""
    problems: list[str] = []
    seeds: list[BirthSeed] = []
    for spec in specs:
        name, sep, rest = str(spec).partition("@")
        slot_id, _, style = rest.partition(":")
        name, slot_id, style = name.strip(), slot_id.strip(), style.strip() or DEFAULT_STYLE
        keys = [k for k in blueprints if k == name or k.split("/", 1)[-1] == name]
        if not sep or not name or not slot_id:
            problems.append(f"seed {spec!r}: expected blueprint@slot, e.g. conv_heavy@r0c0")
        elif style not in STYLES:
            problems.append(
                f"seed {spec!r}: unknown style {style!r}; expected one of {', '.join(STYLES)}"
            )
        elif not keys:
            available = ", ".join(sorted(k.split("/", 1)[-1] for k in blueprints)) or "none"
            problems.append(f"seed {spec!r}: unknown blueprint {name!r}; available: {available}")
        elif slot_id not in slot_ids:
            problems.append(
                f"seed {spec!r}: unknown slot {slot_id!r}; this host has {', '.join(slot_ids)}"
            )
        elif any(s.slot_id == slot_id for s in seeds):
            problems.append(f"seed {spec!r}: slot {slot_id} already holds a seed")
        else:
            seeds.append(BirthSeed(keys[0], slot_id, style))
    if problems:
        raise ConfigError(problems)
    return tuple(seeds)


class Installing(Protocol):
    """What installing seeds at birth reads and writes of an env (``MorphogeneticEnv`` is
    one): its untrained model, the episode's counts, the trainer whose optimizers follow."""

    @property
    def model(self) -> MorphogeneticModel: ...

    @property
    def stats(self) -> EpisodeStats: ...

    @property
    def blueprints(self) -> Mapping[str, Blueprint]: ...

    @property
    def trainer(self) -> Trainer: ...

    @property
    def epoch(self) -> int: ...

    @property
    def seed(self) -> int: ...


def install(env: Installing, seeds: Sequence[BirthSeed], events: StepEvents) -> None:
    """Install ``seeds`` as fossils into ``env``'s untrained model, with their events."""
    for seed in seeds:
        slot = env.model.slot(seed.slot_id)
        before = slot.stage
        env.stats.n_germinated += 1
        slot.install_at_birth(
            f"{slot.slot_id}-s{env.stats.n_germinated}",
            env.blueprints[seed.blueprint],
            epochs_done=env.epoch,
            style=seed.style,
            init_seed=init_seed(env.seed, env.stats.n_germinated),
        )
        env.stats.n_fossilized += 1
        events.germinated(slot)
        events.stage_changed(slot, before)
        events.fossilized(slot)
    env.trainer.sync_optimizers()
