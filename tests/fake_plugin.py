"""A plugin file with the fake components, loadable with --plugin tests/fake_plugin.py."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, ClassVar

from attrs import define

from esper_core import hookimpl
from esper_core.actions import WAIT, Action, LifecycleOp
from esper_core.observation import Observation


@define
class ScriptOptions:
    seed: int = 0


class ScriptedPolicy:
    """Germinates when it can, advances when a gate passes, fossilizes from HOLDING,
    otherwise a random legal op with a small probability: exercises every path."""

    name: ClassVar[str] = "scripted"
    description: ClassVar[str] = "test policy"
    Options: ClassVar[type] = ScriptOptions

    def __init__(self, options: ScriptOptions, context: Any) -> None:
        self.options = options
        self.context = context
        self.rng = random.Random(options.seed)

    def reset(self, env_indices: Sequence[int]) -> None:
        pass

    def act(self, observations: Sequence[Observation]) -> list[Action]:
        space = self.context.space
        actions = []
        for obs in observations:
            m = obs.masks
            action = WAIT
            for i, gate in enumerate(obs.gates):
                if gate is not None and gate.passed:
                    op = LifecycleOp.FOSSILIZE if obs.slots[i].stage.value == "HOLDING" else LifecycleOp.ADVANCE
                    action = Action(op, slot=i)
                    break
            else:
                if bool(m.op[LifecycleOp.GERMINATE]):
                    slot = int(m.slot[LifecycleOp.GERMINATE].nonzero()[0])
                    action = Action(LifecycleOp.GERMINATE, slot=slot, blueprint=self.rng.randrange(len(space.blueprints)),
                                    style=self.rng.randrange(len(space.styles)))
                elif bool(m.op[LifecycleOp.PRUNE]) and self.rng.random() < 0.05:
                    action = Action(LifecycleOp.PRUNE, slot=int(m.slot[LifecycleOp.PRUNE].nonzero()[0]))
            actions.append(action)
        return actions

    def observe(self, results: Sequence[Any]) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {"rng": list(self.rng.getstate()[1]), "pos": self.rng.getstate()[2]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.setstate((3, tuple(state["rng"]), state["pos"]))


@hookimpl
def esper_register_tasks(register: Any) -> None:
    from tests.fakes import TinyTask

    register(TinyTask)


@hookimpl
def esper_register_blueprints(register: Any) -> None:
    from tests.fakes import BLUEPRINTS

    for bp in BLUEPRINTS:
        register(bp)


@hookimpl
def esper_register_rewards(register: Any) -> None:
    from tests.fakes import AccuracyDeltaReward

    register(AccuracyDeltaReward)


@hookimpl
def esper_register_policies(register: Any) -> None:
    register(ScriptedPolicy)


@define
class InterrupterOptions:
    at_epoch: int = 3
    at_outer: int = 0


class Interrupter:
    """Sends this process SIGINT after a given epoch: a Ctrl-C at a known point."""

    name: ClassVar[str] = "interrupter"
    description: ClassVar[str] = "test backend that interrupts the run"
    Options: ClassVar[type] = InterrupterOptions

    def __init__(self, options: InterrupterOptions, run_dir: Any = None, quiet: bool = False) -> None:
        self.options = options

    def handle(self, events: Sequence[Any]) -> None:
        import signal

        from esper_core.telemetry import EpochCompleted

        for event in events:
            outer = event.update if getattr(event, "update", None) is not None else getattr(event, "episode", -1)
            if isinstance(event, EpochCompleted) and event.env == 0 and event.epoch == self.options.at_epoch \
                    and outer == self.options.at_outer:
                signal.raise_signal(signal.SIGINT)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


@hookimpl
def esper_register_telemetry(register: Any) -> None:
    register(Interrupter)
