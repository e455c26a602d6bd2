"""The governor's accuracy-at-chance trigger and its warm-up floor."""

from __future__ import annotations

import contextlib
import math

import attrs

from esper_core.config import GovernorSection
from esper_core.lifecycle.governor import Governor

CHANCE_LOSS = math.log(4)  # 4 classes: a uniform guess scores 25%


class NoModel:
    """take_snapshot() only needs a host (its own part), slots to copy and whether a growth
    is in flight."""

    class Host:
        def state_dict(self) -> dict[str, object]:
            return {}

    host = Host()
    host_growth = None

    def iter_slots(self) -> list[object]:
        return []

    def host_own(self) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()


def governor(**changes: object) -> Governor:
    return Governor(attrs.evolve(GovernorSection(), **changes), CHANCE_LOSS)


def judge(g: Governor, accuracies: list[float], loss: float = 1.0) -> list[bool]:
    return [g.check(loss, True, acc).panic for acc in accuracies]


def test_chance_accuracy_panics_after_consecutive_epochs_when_the_snapshot_was_better() -> None:
    g = governor()
    assert g.chance_accuracy == 1.5 * 25.0
    judge(g, [80.0])
    g.take_snapshot(NoModel(), 1)  # type: ignore[arg-type]
    assert g.snapshot_accuracy == 80.0
    assert judge(g, [30.0, 25.0, 36.0]) == [False, False, True]
    assert "at chance level" in g.check(1.0, True, 25.0).reason


def test_chance_accuracy_does_not_panic_without_a_better_snapshot() -> None:
    g = governor()
    judge(g, [20.0])
    g.take_snapshot(NoModel(), 1)  # type: ignore[arg-type]
    assert judge(g, [25.0] * 5) == [False] * 5  # a rollback would restore no better model


def test_an_epoch_above_chance_resets_the_count_and_zero_disables() -> None:
    g = governor()
    judge(g, [80.0])
    g.take_snapshot(NoModel(), 1)  # type: ignore[arg-type]
    assert judge(g, [25.0, 25.0, 60.0, 25.0, 25.0]) == [False] * 5
    off = governor(chance_band=0.0)
    judge(off, [80.0])
    off.take_snapshot(NoModel(), 1)  # type: ignore[arg-type]
    assert judge(off, [0.0] * 4) == [False] * 4


def test_before_min_history_the_chance_floor_alone_applies() -> None:
    g = governor()
    floor = 1.5 * CHANCE_LOSS
    assert g.floor() == floor
    assert [g.check(50.0, True, 50.0).panic for _ in range(3)] == [False, False, True]
    assert not g.history, "diverging losses must not become the history"


def test_the_new_state_survives_a_checkpoint() -> None:
    g = governor()
    judge(g, [80.0])
    g.take_snapshot(NoModel(), 1)  # type: ignore[arg-type]
    judge(g, [25.0])
    restored = governor()
    restored.load_state_dict(g.state_dict())
    assert (restored.chance_strikes, restored.snapshot_accuracy) == (1, 80.0)
    assert judge(restored, [25.0, 25.0]) == [False, True]
