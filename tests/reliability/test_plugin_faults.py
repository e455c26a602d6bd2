"""Plugin code that ends the process, is interrupted,
registers a bad blueprint or builds broken seed modules is stopped in one line that
names the plugin; `esper blueprints check` runs the same checks for plugin authors."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from esper_core.components.blueprint import Blueprint
from esper_core.errors import PluginError
from esper_core.plugins import PluginManager
from tests.conftest import Invoke
from tests.plugins.esper_telemetry.helpers import tiny_config
from tests.reliability.cli_runs import FAKE, failed_in_one_line

HEADER = """
from esper_core import hookimpl
from esper_core.components.blueprint import Blueprint
import sys
import torch
from torch import nn
"""


def plugin_file(tmp_path: Path, body: str, name: str = "evil_plugin.py") -> str:
    path = tmp_path / name
    path.write_text(HEADER + textwrap.dedent(body))
    return str(path)


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ("sys.exit(0)\n", "while importing"),
        (
            """
            @hookimpl
            def esper_register_blueprints(register):
                sys.exit(0)
            """,
            "in esper_register_blueprints",
        ),
    ],
)
def test_a_plugin_calling_sys_exit_is_an_error_naming_it(
    invoke: Invoke, tmp_path: Path, body: str, where: str
) -> None:
    path = plugin_file(tmp_path, body)
    line = failed_in_one_line(invoke("plugins", "--plugin", path))
    assert path in line and f"' called sys.exit(0) {where}" in line


def test_an_interrupt_while_importing_a_plugin_names_it(invoke: Invoke, tmp_path: Path) -> None:
    path = plugin_file(tmp_path, "raise KeyboardInterrupt\n")
    result = invoke("plugins", "--plugin", path)
    assert result.exit_code == 130, (result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    expected = f"interrupted while importing plugin '{path}' (KeyboardInterrupt)"
    assert lines == [expected], result.stderr


def test_a_blueprint_topology_that_is_a_path_is_refused_naming_the_plugin(
    invoke: Invoke, tmp_path: Path
) -> None:
    path = plugin_file(
        tmp_path,
        """
        @hookimpl
        def esper_register_blueprints(register):
            register(Blueprint("x", "../evil", lambda c: nn.Identity(), lambda c: 0))
        """,
    )
    line = failed_in_one_line(invoke("blueprints", "--plugin", path))
    assert path in line and "blueprint topology '../evil' is not one of cnn, transformer" in line


def test_a_raising_param_estimate_is_one_line_naming_the_plugin(
    invoke: Invoke, tmp_path: Path
) -> None:
    path = plugin_file(
        tmp_path,
        """
        def estimate(c):
            raise ArithmeticError("cannot count")

        @hookimpl
        def esper_register_blueprints(register):
            register(Blueprint("uncounted", "cnn", lambda c: nn.Identity(), estimate))
        """,
    )
    line = failed_in_one_line(invoke("blueprints", "--plugin", path))
    assert f"blueprint cnn/uncounted of plugin 'file:{Path(path).resolve()}'" in line
    assert "param_estimate raised ArithmeticError: cannot count" in line


class Pair(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, x


class Squash(nn.Module):
    """[B, C, H, W] -> [B, 1, H, W]: broadcasts in the blend, so it would train silently."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=1, keepdim=True)


class Scale(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.full((channels, 1, 1), 2.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.w


BROKEN = {
    "tuple": (Blueprint("pair", "cnn", lambda c: Pair(), lambda c: 0), "returns tuple"),
    "shape": (
        Blueprint("squash", "cnn", lambda c: Squash(), lambda c: 0),
        "returns shape [2, 1, 5, 5] for an input of shape [2, 8, 5, 5]",
    ),
    "estimate": (
        Blueprint("scale", "cnn", Scale, lambda c: 10 * c),
        "it has 8 parameters but param_estimate says 80",
    ),
    "identity": (
        Blueprint("scale2", "cnn", Scale, lambda c: c, identity_at_birth=True),
        "claims identity_at_birth but changes its input",
    ),
    "factory": (
        Blueprint("nothing", "cnn", lambda c: None, lambda c: 0),  # type: ignore[arg-type,return-value]
        "returned NoneType, not a torch.nn.Module",
    ),
}


@pytest.mark.parametrize("fault", sorted(BROKEN))
def test_a_broken_blueprint_fails_at_first_use_naming_it_and_its_plugin(fault: str) -> None:
    from esper_core.lifecycle.blueprint_check import checked_blueprint

    blueprint, expected = BROKEN[fault]
    with pytest.raises(PluginError) as info:
        checked_blueprint(blueprint, "acme.plugin").build(8)
    message = str(info.value)
    assert message.startswith(f"blueprint {blueprint.key} of plugin 'acme.plugin' is broken")
    assert expected in message and "\n" not in message


def broken_blueprint_plugin(tmp_path: Path) -> str:
    """A plugin whose only cnn blueprint squashes channels, with a policy that germinates it."""
    return plugin_file(
        tmp_path,
        """
        from attrs import define
        from esper_core.lifecycle.actions import WAIT, Action, LifecycleOp

        class Squash(nn.Module):
            def forward(self, x):
                return x.mean(dim=1, keepdim=True)

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
                out = []
                for obs in observations:
                    if bool(obs.masks.op[LifecycleOp.GERMINATE]):
                        out.append(Action(LifecycleOp.GERMINATE, slot=0, blueprint=0, style=0))
                    else:
                        out.append(WAIT)
                return out

            def observe(self, results):
                pass

            def state_dict(self):
                return {}

            def load_state_dict(self, state):
                pass

        @hookimpl
        def esper_register_blueprints(register):
            register(Blueprint("aaa_squash", "cnn", lambda c: Squash(), lambda c: 0))

        @hookimpl
        def esper_register_policies(register):
            register(GerminateFirst)
        """,
        "squash_plugin.py",
    )


def test_a_run_stops_at_the_first_germination_of_a_broken_blueprint(tmp_path: Path) -> None:
    from esper_core.run import api

    path = broken_blueprint_plugin(tmp_path)
    pm = PluginManager(extra=[FAKE, path], autoload=False)
    config = tiny_config([], "run.policy=germinate_first", "env.max_epochs=3")
    with pytest.raises(PluginError) as info:
        api.run(config, pm, run_dir=tmp_path / "run", quiet=True, notify=lambda _m: None)
    message = str(info.value)
    assert f"blueprint cnn/aaa_squash of plugin 'file:{Path(path).resolve()}'" in message
    assert "a seed must keep its input's shape" in message


def test_blueprints_check_reports_each_blueprint(invoke: Invoke, tmp_path: Path) -> None:
    path = broken_blueprint_plugin(tmp_path)
    result = invoke("blueprints", "check", "--plugin", FAKE, "--plugin", path)
    assert result.exit_code == 1, result.output
    out = result.stdout
    lines = out.strip().splitlines()
    assert any(
        line.startswith("FAIL cnn/aaa_squash (plugin file:") and "keep its input's shape" in line
        for line in lines
    ), out
    assert any(line.startswith("ok   cnn/res (plugin file:") for line in lines), out
    result = invoke("blueprints", "check", "res", "--plugin", FAKE, "--channels", "3")
    assert result.exit_code == 0 and result.stdout.startswith("ok   cnn/res"), result.output
