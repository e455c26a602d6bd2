"""The library API behind ``esper run`` and ``esper train``.

``run`` evaluates a policy for ``run.episodes`` episodes of ``run.n_envs`` envs;
``train`` drives a :class:`~esper_core.components.policy.Trainable` policy for
``train.updates`` rollouts. Both write the run directory of DESIGN.md, return the
contents of its summary.json, and can be resumed from their checkpoint with identical
results (same seed, CPU). Errors propagate unchanged: the caller decides how to
explain them (see :mod:`esper_core.run.failures`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict, Unpack

from esper_core.config import RunConfig
from esper_core.plugins import PluginManager
from esper_core.run.failures import ended_by_plugin, failure_line, plugin_modules, timed_out
from esper_core.run.interrupts import Interrupted, StopFlag
from esper_core.run.loops import EpisodeLoop, TrainLoop
from esper_core.run.session import open_session
from esper_core.run.summary import finish
from esper_core.run.telemetry import RunFinished
from esper_core.run.watchdog import Expired, Watchdog, building


class RunOptions(TypedDict, total=False):
    """The keyword options of :func:`run`, :func:`train` and :func:`drive` (defaults in :func:`drive`)."""

    run_dir: Path | None  # None: a new directory under runs/ (run_dir.default_run_dir)
    resume: bool  # continue run_dir from its checkpoint
    quiet: bool  # as run.quiet: tasks and telemetry backends print nothing
    notify: Callable[[str], None]  # told what a Ctrl-C will do


def run(config: RunConfig, pm: PluginManager, **options: Unpack[RunOptions]) -> dict[str, Any]:
    """Run ``run.episodes`` episodes of ``run.n_envs`` envs under the configured policy."""
    return drive(EpisodeLoop, config, pm, **options)


def train(config: RunConfig, pm: PluginManager, **options: Unpack[RunOptions]) -> dict[str, Any]:
    """Train a Trainable policy for ``train.updates`` rollouts (each one episode of every env)."""
    return drive(TrainLoop, config, pm, **options)


def drive(
    loop_class: type[EpisodeLoop] | type[TrainLoop],
    config: RunConfig,
    pm: PluginManager,
    run_dir: Path | None = None,
    resume: bool = False,
    quiet: bool = False,
    notify: Callable[[str], None] = print,
    opened: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Open the session, run ``loop_class`` over it until done or interrupted, and write
    the summary: :func:`run` and :func:`train` in one, for callers that pick the loop.
    ``opened`` is called once the session is open (a resumed checkpoint verified)."""
    mode = loop_class.mode
    # A user's data function (tasks.dataset.data) called while the run is built is
    # bounded too (watchdog.supervised): one that never returns is stopped.
    opening = Watchdog(config.run.epoch_timeout)
    try:
        with opening, building(opening):
            session = open_session(config, pm, mode, run_dir, resume, quiet)
    except SystemExit as exc:  # a plugin's task, policy or executor, while being built
        raise ended_by_plugin(exc, plugin_modules(pm), None, mode) from None
    except Expired as exc:  # deliberately caught (a BaseException), as in the loop below
        fired = opening.fired or f"{opening.unit}, in {opening.phase}"
        raise timed_out(exc, fired, opening.limit, plugin_modules(pm), None, mode) from None
    if opened is not None:
        opened()
    try:
        loop = loop_class(session)
    except BaseException:
        session.close()
        raise
    stop = StopFlag()
    # Inside the Ctrl-C handler's scope: the watchdog's handler wraps that one, and is
    # removed (with its thread stopped) before anything below writes to the run directory.
    watchdog = Watchdog(config.run.epoch_timeout)
    status, error = "failed", ""
    try:
        with stop.installed(notify), watchdog:
            loop.run(stop, watchdog)
        status = "completed"
        return finish(session, status)
    except Interrupted:
        status = "interrupted"
        raise
    except Expired as exc:
        # Deliberately caught (a BaseException): the unit was cut off mid-way, so nothing
        # of it is saved; the last checkpoint is the run's state.
        fired = watchdog.fired or f"{watchdog.unit}, in {watchdog.phase}"
        failure = timed_out(exc, fired, watchdog.limit, plugin_modules(pm), session.run_dir, mode)
        error = failure_line(failure, {}, session.run_dir, mode)
        raise failure from None
    except SystemExit as exc:
        # Deliberately caught: plugin code (a reward's compute, a blueprint's forward) may
        # call sys.exit(), which is not an Exception and would end the process "successfully".
        failure = ended_by_plugin(exc, plugin_modules(pm), session.run_dir, mode)
        error = failure_line(failure, {}, session.run_dir, mode)
        raise failure from None
    except BaseException as exc:
        # Propagated unchanged (the caller explains it); the run directory keeps the line.
        error = failure_line(exc, plugin_modules(pm), session.run_dir, mode)
        raise
    finally:
        if status != "completed":
            wall_time = time.time() - session.started
            session.hub.emit([RunFinished(status=status, wall_time=wall_time, error=error)])
        session.close()
