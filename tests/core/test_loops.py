"""play_epoch: the one epoch step both loops share, in the order the loops relied on."""

from __future__ import annotations

from typing import Any

from attrs import define, field

from esper_core.run.loops import play_epoch


@define
class _Result:
    observation: str


@define
class _Session:
    """The parts of a Session that play_epoch touches, recording what happens in order."""

    log: list[tuple[Any, ...]] = field(factory=list)
    envs: list[str] = field(factory=lambda: ["env0", "env1"])
    epoch: int = 3
    shared: None = None  # no seed group shares its epochs here

    @property
    def policy(self) -> _Session:
        return self

    @property
    def executor(self) -> _Session:
        return self

    def act(self, observations: list[str]) -> list[str]:
        self.log.append(("act", tuple(observations)))
        return [f"a({o})" for o in observations]

    def step(self, envs: list[str], actions: list[str]) -> list[_Result]:
        self.log.append(("step", tuple(envs), tuple(actions)))
        return [_Result(f"next({a})") for a in actions]

    def observe(self, results: list[_Result]) -> None:
        self.log.append(("observe", self.epoch, len(results)))

    def emit_epoch(self, results: list[_Result], update: int | None = None) -> None:
        self.log.append(("emit", self.epoch, update))


def test_play_epoch_acts_steps_observes_counts_then_emits() -> None:
    s: Any = _Session()
    observations: Any = ["o0", "o1"]
    nxt = play_epoch(s, observations)
    assert nxt == ["next(a(o0))", "next(a(o1))"]
    assert s.epoch == 4
    assert s.log == [
        ("act", ("o0", "o1")),
        ("step", ("env0", "env1"), ("a(o0)", "a(o1)")),
        ("observe", 3, 2),  # before the epoch counter moves
        ("emit", 4, None),  # after it: the events belong to the epoch just trained
    ]


def test_play_epoch_tags_a_training_epoch_with_its_update() -> None:
    s: Any = _Session()
    observations: Any = ["o0", "o1"]
    play_epoch(s, observations, update=7)
    assert s.log[-1] == ("emit", 4, 7)
