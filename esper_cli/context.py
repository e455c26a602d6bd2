"""What the commands of one ``esper`` invocation share through the click context.

The root context's ``obj`` holds the plugin manager; ``meta`` (shared by every nested
context) holds the ``--debug`` flag and the run directory of the command that runs or
trains, which the error boundary reads. Nothing here is process-global.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from attrs import frozen

from esper_core.plugins import PluginManager

DEBUG_KEY = "esper.debug"
RUN_KEY = "esper.run"


@frozen
class RunTarget:
    """Where the running command writes: the failure hint names its last checkpoint."""

    run_dir: Path
    mode: str  # "run" or "train": the command that resumes it


def plugin_manager(ctx: click.Context) -> PluginManager:
    """The invocation's plugin manager (built once; --plugin values extend it)."""
    root = ctx.find_root()
    if not isinstance(root.obj, dict):
        root.obj = {}
    if "pm" not in root.obj:
        root.obj["pm"] = PluginManager()
    pm: PluginManager = root.obj["pm"]
    return pm


def loaded_plugin_manager(ctx: click.Context) -> PluginManager | None:
    """The plugin manager if one was built; the error boundary must not build one."""
    obj = ctx.find_root().obj
    pm = obj.get("pm") if isinstance(obj, dict) else None
    return pm if isinstance(pm, PluginManager) else None


def set_debug(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--debug`` callback: tracebacks instead of one-line errors, for this invocation."""
    if value:
        ctx.meta[DEBUG_KEY] = True


def debug_enabled(ctx: click.Context) -> bool:
    return bool(ctx.meta.get(DEBUG_KEY, False))


def note_run(ctx: click.Context, run_dir: Path, mode: str) -> None:
    """Record the run directory before the library starts, for the failure hint."""
    ctx.meta[RUN_KEY] = RunTarget(run_dir, mode)


def run_target(ctx: click.Context) -> RunTarget | None:
    target = ctx.meta.get(RUN_KEY)
    return target if isinstance(target, RunTarget) else None


def dumps(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True, default=str)
