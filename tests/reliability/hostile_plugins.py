"""Plugin files whose code misbehaves on purpose, for the hostile-plugin and watchdog tests."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.plugin_set import FAKE_PLUGIN

# A reward that behaves like the fake acc_delta until epoch 3, then does BODY.
REWARD = """
import math
import sys
from esper_core import hookimpl
from esper_core.components.reward import RewardBreakdown
from esper_core.plugins import PluginManager

BASE = PluginManager(autoload=False, extra=[{fake!r}]).get("rewards", "acc_delta")


class Hostile(BASE):
    name = "hostile"

    def compute(self, ctx):
        if ctx.epoch < 3:
            return super().compute(ctx)
{body}


@hookimpl
def esper_register_rewards(register):
    register(Hostile)
"""

# A cnn blueprint of one 1x1 convolution, with a policy that germinates it at once.
BLUEPRINT = """
import sys
import torch
from attrs import define
from torch import nn
from esper_core import hookimpl
from esper_core.components.blueprint import Blueprint
from esper_core.lifecycle.actions import WAIT, Action, LifecycleOp


class Seed(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 1)
        nn.init.zeros_(self.conv.weight)
        nn.init.zeros_(self.conv.bias)

    def forward(self, x):
{forward}


def build(channels):
{build}


@define
class Options:
    pass


class GerminateFirst:
    name = "germinate_first"
    description = "germinates the first blueprint at once"
    Options = Options

    def __init__(self, options, context):
        self.context = context

    def reset(self, env_indices):
        pass

    def act(self, observations):
        return [
            Action(LifecycleOp.GERMINATE, slot=0, blueprint=0, style=0)
            if bool(obs.masks.op[LifecycleOp.GERMINATE])
            else WAIT
            for obs in observations
        ]

    def observe(self, results):
        pass

    def state_dict(self):
        return {{}}

    def load_state_dict(self, state):
        pass


@hookimpl
def esper_register_blueprints(register):
    register(Blueprint("aaa_hostile", "cnn", build, lambda c: c * c + c, identity_at_birth={identity}))


@hookimpl
def esper_register_policies(register):
    register(GerminateFirst)
"""


def _indent(code: str, spaces: int) -> str:
    return textwrap.indent(textwrap.dedent(code).strip("\n"), " " * spaces)


def hostile_reward(path: Path, body: str) -> str:
    """A plugin file registering ``rewards.hostile``, which runs ``body`` from epoch 3 on."""
    path.write_text(REWARD.format(fake=FAKE_PLUGIN, body=_indent(body, 8)))
    return str(path)


def hostile_blueprint(
    path: Path,
    forward: str = "return x + self.conv(x)",
    build: str = "return Seed(channels)",
    identity: bool = True,
) -> str:
    """A plugin file registering the blueprint ``cnn/aaa_hostile`` (first in the action
    space) and ``policies.germinate_first``, which germinates it at the first chance."""
    path.write_text(
        BLUEPRINT.format(forward=_indent(forward, 8), build=_indent(build, 4), identity=identity)
    )
    return str(path)
