"""The fake components as a plugin: ``--plugin tests.fake_plugin``, or ``--plugin
path/to/tests/fake_plugin.py`` from anywhere."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import random
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

from attrs import define

from esper_core import hookimpl
from esper_core.env.observation import Observation
from esper_core.lifecycle.actions import WAIT, Action, LifecycleOp


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
                    op = (
                        LifecycleOp.FOSSILIZE
                        if obs.slots[i].stage.value == "HOLDING"
                        else LifecycleOp.ADVANCE
                    )
                    action = Action(op, slot=i)
                    break
            else:
                if bool(m.op[LifecycleOp.GERMINATE]):
                    slot = int(m.slot[LifecycleOp.GERMINATE].nonzero()[0])
                    action = Action(
                        LifecycleOp.GERMINATE,
                        slot=slot,
                        blueprint=self.rng.randrange(len(space.blueprints)),
                        style=self.rng.randrange(len(space.styles)),
                    )
                elif bool(m.op[LifecycleOp.PRUNE]) and self.rng.random() < 0.05:
                    action = Action(
                        LifecycleOp.PRUNE, slot=int(m.slot[LifecycleOp.PRUNE].nonzero()[0])
                    )
            actions.append(action)
        return actions

    def observe(self, results: Sequence[Any]) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {"rng": list(self.rng.getstate()[1]), "pos": self.rng.getstate()[2]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.setstate((3, tuple(state["rng"]), state["pos"]))


@functools.cache
def _fakes() -> ModuleType:
    """tests/fakes.py: through the ``tests`` package when it is importable (the same classes
    the tests import), else from this file's folder (a file plugin belongs to no package)."""
    try:
        return importlib.import_module("tests.fakes")
    except ModuleNotFoundError as exc:
        if exc.name not in ("tests", "tests.fakes"):
            raise
    spec = importlib.util.spec_from_file_location(
        f"{__name__}_fakes", Path(__file__).with_name("fakes.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@hookimpl
def esper_register_tasks(register: Any) -> None:
    register(_fakes().TinyTask)
    register(_fakes().FaultyTask)


@hookimpl
def esper_register_blueprints(register: Any) -> None:
    for bp in _fakes().BLUEPRINTS:
        register(bp)


@hookimpl
def esper_register_rewards(register: Any) -> None:
    register(_fakes().AccuracyDeltaReward)


@define
class InterrupterOptions:
    at_epoch: int = 3
    at_outer: int = 0


class Interrupter:
    """Sends this process SIGINT after a given epoch: a Ctrl-C at a known point."""

    name: ClassVar[str] = "interrupter"
    description: ClassVar[str] = "test backend that interrupts the run"
    Options: ClassVar[type] = InterrupterOptions

    def __init__(self, options: InterrupterOptions, context: Any) -> None:
        self.options = options

    def handle(self, events: Sequence[Any]) -> None:
        import signal

        from esper_core.run.telemetry import EpochCompleted

        for event in events:
            outer = (
                event.update
                if getattr(event, "update", None) is not None
                else getattr(event, "episode", -1)
            )
            if (
                isinstance(event, EpochCompleted)
                and event.env == 0
                and event.epoch == self.options.at_epoch
                and outer == self.options.at_outer
            ):
                signal.raise_signal(signal.SIGINT)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


@define
class ChurnOptions:
    seed: int = 0


class ChurnPolicy(ScriptedPolicy):
    """Germinates whenever it may and prunes as soon as it may: many lifecycle cycles."""

    name: ClassVar[str] = "churn"
    description: ClassVar[str] = "germinate/prune as fast as the masks allow"
    Options: ClassVar[type] = ChurnOptions

    def act(self, observations: Sequence[Observation]) -> list[Action]:
        actions = []
        for obs in observations:
            m = obs.masks
            if bool(m.op[LifecycleOp.PRUNE]):
                actions.append(
                    Action(LifecycleOp.PRUNE, slot=int(m.slot[LifecycleOp.PRUNE].nonzero()[0]))
                )
            elif bool(m.op[LifecycleOp.GERMINATE]):
                slot = int(m.slot[LifecycleOp.GERMINATE].nonzero()[0])
                actions.append(
                    Action(
                        LifecycleOp.GERMINATE,
                        slot=slot,
                        blueprint=self.rng.randrange(len(self.context.space.blueprints)),
                        style=self.rng.randrange(len(self.context.space.styles)),
                    )
                )
            elif bool(m.op[LifecycleOp.ADVANCE]):
                actions.append(
                    Action(LifecycleOp.ADVANCE, slot=int(m.slot[LifecycleOp.ADVANCE].nonzero()[0]))
                )
            else:
                actions.append(WAIT)
        return actions


@define
class ProbeOptions:
    pass


class MemoryProbe:
    """Every 20 epochs, records the process's resident memory and its live torch tensors
    and modules into run_dir/memory.json: RSS alone cannot tell a leak from the allocator
    settling, the live-object counts can."""

    name: ClassVar[str] = "memory_probe"
    description: ClassVar[str] = "resident set size and live tensors every 20 epochs"
    Options: ClassVar[type] = ProbeOptions

    def __init__(self, options: ProbeOptions, context: Any) -> None:
        self.run_dir = context.run_dir
        self.samples: list[dict[str, int]] = []

    def handle(self, events: Sequence[Any]) -> None:
        import gc
        import os

        import torch

        from esper_core.run.telemetry import EpochCompleted

        for event in events:
            if isinstance(event, EpochCompleted) and event.env == 0 and event.epoch % 20 == 0:
                with open("/proc/self/statm") as fh:
                    pages = int(fh.read().split()[1])
                live = gc.get_objects()
                self.samples.append(
                    {
                        "epoch": event.epoch,
                        "rss": pages * os.sysconf("SC_PAGE_SIZE"),
                        "tensors": sum(isinstance(o, torch.Tensor) for o in live),
                        "modules": sum(isinstance(o, torch.nn.Module) for o in live),
                    }
                )

    def flush(self) -> None:
        pass

    def close(self) -> None:
        import json

        (Path(self.run_dir) / "memory.json").write_text(json.dumps(self.samples))


@hookimpl
def esper_register_telemetry(register: Any) -> None:
    register(Interrupter)
    register(MemoryProbe)


@hookimpl
def esper_register_policies(register: Any) -> None:
    register(ScriptedPolicy)
    register(ChurnPolicy)
