"""A reward that fails on one rank of a distributed run (raises, hangs, or is killed), for
the failure tests."""

from __future__ import annotations

import os
import signal
import time
from typing import Any, ClassVar

from attrs import define

from esper_core import hookimpl
from esper_core.components.reward import RewardBreakdown, RewardContext, RewardSetup


@define
class CrashOptions:
    rank: int = 1
    at_epoch: int = 2
    mode: str = "raise"  # raise | hang | kill (SIGKILL: no chance to report anything)
    stamp: str = ""  # a file to write the time of the failure to, if set


class CrashOnRank:
    name: ClassVar[str] = "crash_on_rank"
    description: ClassVar[str] = "accuracy delta that fails on one rank"
    Options: ClassVar[type] = CrashOptions

    def __init__(
        self, options: CrashOptions | None = None, setup: RewardSetup | None = None
    ) -> None:
        self.options = options or CrashOptions()

    def compute(self, ctx: RewardContext) -> RewardBreakdown:
        o = self.options
        if int(os.environ.get("RANK", "0")) == o.rank and ctx.epoch >= o.at_epoch:
            if o.stamp:
                with open(o.stamp, "w") as f:
                    f.write(repr(time.time()))
            if o.mode == "hang":
                time.sleep(3600)
            if o.mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise ZeroDivisionError(f"injected failure at epoch {ctx.epoch}")
        return RewardBreakdown.of(accuracy=(ctx.val_acc - ctx.val_acc_prev) / 100.0)


@hookimpl
def esper_register_rewards(register: Any) -> None:
    register(CrashOnRank)
