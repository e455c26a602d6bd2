"""Turn what goes wrong during a run into one clear message with advice.

Out-of-memory, a dead DataLoader worker, a full disk and an exception raised inside a
plugin's code each become an :class:`~esper_core.errors.EsperError` that says what
happened, what to do, and where the last checkpoint is. Anything else is a bug and
keeps its traceback.

The library lets exceptions propagate; :func:`explain` is asked where they end: the CLI's
error boundary (``esper_cli.boundary``) and each comparison cell (``esper_core.compare.cells``).
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

from esper_core.errors import DataError, EsperError, PluginError
from esper_core.run.checkpoint import DiskFullError, is_disk_full

CORE_PACKAGES = ("esper_core", "esper_cli")


class ResourceError(EsperError):
    """The device ran out of memory."""


def _resume_hint(run_dir: Path | None, mode: str) -> str:
    if run_dir is None:
        return ""
    checkpoint = run_dir / "checkpoint.pt"
    if checkpoint.is_file():
        return (
            f" The last checkpoint is {checkpoint}; continue with: esper {mode} --resume {run_dir}"
        )
    return f" No checkpoint was written yet in {run_dir}."


def blame(exc: BaseException, plugin_modules: dict[str, str]) -> str | None:
    """The plugin whose code raised ``exc``: the innermost traceback frame in a plugin module.

    ``plugin_modules`` maps plugin name -> module name. A frame matches a plugin when it
    runs in that module or in another module of the same top-level package.
    """
    found = _culprit_frame(exc, plugin_modules)
    return None if found is None else found[0]


def _culprit_frame(exc: BaseException, plugin_modules: dict[str, str]) -> tuple[str, str] | None:
    """(plugin, function) of the innermost traceback frame in a plugin's code."""
    frames = [
        (frame.f_globals.get("__name__", ""), frame.f_code.co_name)
        for frame, _ in traceback.walk_tb(exc.__traceback__)
    ]
    by_module = {module: name for name, module in plugin_modules.items()}
    by_package: dict[str, list[str]] = {}
    for name, module in plugin_modules.items():
        by_package.setdefault(module.split(".")[0], []).append(name)
    for module, function in reversed(frames):
        root = module.split(".")[0]
        if root in CORE_PACKAGES:
            continue
        if module in by_module:
            return by_module[module], function
        if root in by_package:
            return " / ".join(sorted(by_package[root])), function
    return None


def failure_line(
    exc: BaseException, plugin_modules: dict[str, str], run_dir: Path | None, mode: str
) -> str:
    """The one line a failed run records as its reason: what the CLI shows for ``exc``
    (its :func:`explain`-ed form), or for a bug the exception's type and message."""
    if isinstance(exc, EsperError):
        text = str(exc)
    else:
        explained = (
            explain(exc, plugin_modules, run_dir, mode) if isinstance(exc, Exception) else None
        )
        text = str(explained) if explained is not None else f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())


def explain(
    exc: BaseException, plugin_modules: dict[str, str], run_dir: Path | None, mode: str
) -> EsperError | None:
    """An :class:`EsperError` describing ``exc`` for the user, or None to let it propagate."""
    if isinstance(exc, EsperError):
        return None
    torch: ModuleType | None = sys.modules.get("torch")
    hint = _resume_hint(run_dir, mode)
    if torch is not None and isinstance(exc, torch.OutOfMemoryError):
        return ResourceError(
            f"out of device memory ({_first_line(exc)}). Lower env.batch_size, put fewer envs on each "
            f"device (--devices), or enable mixed precision (--set training.amp=bf16).{hint}"
        )
    if isinstance(exc, RuntimeError) and "DefaultCPUAllocator" in str(exc):
        # torch's CPU allocator raises a plain RuntimeError, not OutOfMemoryError: left to
        # blame() it named every plugin of the package whose frame ran out (the host's).
        return ResourceError(
            f"out of memory ({_first_line(exc)}). Lower env.batch_size, or the host's size "
            f"(a preset, or a width growth's factor).{hint}"
        )
    if isinstance(exc, RuntimeError) and "DataLoader worker" in str(exc):
        return DataError(
            f"a data-loading worker process died ({_first_line(exc)}). This is often the OS killing it "
            f"for lack of memory, or a crash in the dataset's code; rerun with --set env.num_workers=0 "
            f"to see the dataset's own error.{hint}"
        )
    if is_disk_full(exc):
        return DiskFullError(f"no space left on the device ({exc}). Free disk space.{hint}")
    culprit = blame(exc, plugin_modules)
    if culprit is not None:
        return PluginError(
            f"plugin {culprit} raised {type(exc).__name__}: {_first_line(exc)} (run with --debug for the "
            f"traceback).{hint}"
        )
    return None


def ended_by_plugin(
    exc: SystemExit, plugin_modules: dict[str, str], run_dir: Path | None, mode: str
) -> PluginError:
    """The error for code that called ``sys.exit()`` inside a run. Left alone it would end
    the process with its code (0 reads as success) and no word, the run half-recorded."""
    found = _culprit_frame(exc, plugin_modules)
    who = f"plugin {found[0]}" if found is not None else "code outside Esper"
    # The plugin's own frame names the function: the innermost frame may be a wrapper
    # another library put around sys.exit.
    where = f"its {found[1]}" if found is not None else _innermost_function(exc)
    own = _user_frame(exc, plugin_modules)
    if own is not None and found is not None:
        # A function the user named in the config (tasks.dataset.data = "mod:fn"), run by
        # a plugin: the plugin did not end the process, the user's function did.
        who, where = f"{own[0]}:{own[1]}", f"(run by plugin {found[0]}'s {found[1]})"
        return PluginError(
            f"{who} {where} called sys.exit({exc.code!r}); code Esper runs must raise an "
            f"exception, not end the process.{_resume_hint(run_dir, mode)}"
        )
    return PluginError(
        f"{who} called sys.exit({exc.code!r}) in {where}; a plugin must "
        f"raise an exception, not end the process.{_resume_hint(run_dir, mode)}"
    )


def timed_out(
    exc: BaseException,
    fired: str,
    limit: float,
    plugin_modules: dict[str, str],
    run_dir: Path | None,
    mode: str,
) -> EsperError:
    """The error for a unit of a run that the watchdog stopped: ``fired`` says which unit
    and phase; the interrupted traceback says whose code was running."""
    from esper_core.run.watchdog import RunTimeoutError

    found = _culprit_frame(exc, plugin_modules)
    where = (
        f"plugin {found[0]} was running its {found[1]}"
        if found is not None
        else "no plugin code was running (Esper's or torch's own code was)"
    )
    own = _user_frame(exc, plugin_modules)
    if own is not None and found is not None:
        # A function the user named (tasks.dataset.data = "mod:fn") hung, not the plugin.
        where = f"{own[0]}:{own[1]} was running (run by plugin {found[0]}'s {found[1]})"
    # run_dir None: stopped while the run was being built, before anything was written.
    written = (
        "after the last checkpoint" if run_dir is not None else "(the run was still being built)"
    )
    # The hint ends in a path: what follows is a clause of its own, not a sentence.
    slow = (
        f"; if the epoch is only slow, raise run.epoch_timeout in {run_dir / 'config.toml'} first"
        if run_dir is not None
        else " If the epoch is only slow, raise run.epoch_timeout."
    )
    return RunTimeoutError(
        f"{fired} ran longer than run.epoch_timeout = {limit:g} s and was stopped; {where}. "
        f"Nothing was written {written}.{_resume_hint(run_dir, mode)}{slow}"
    )


def _user_frame(exc: BaseException, plugin_modules: dict[str, str]) -> tuple[str, str] | None:
    """(module, function) of the innermost frame of the user's own code (a source file
    outside every installed package: a data function the config names), when it is
    inner to every plugin frame; else None. Esper's, the standard library's and an
    installed library's frames (a wrapper some library puts around sys.exit) are
    passed over: they did not decide to end the process."""
    roots = {module.split(".")[0] for module in plugin_modules.values()}
    for frame, _ in reversed(list(traceback.walk_tb(exc.__traceback__))):
        module = frame.f_globals.get("__name__", "")
        root = module.split(".")[0]
        source = frame.f_code.co_filename
        library = source.startswith("<") or any(
            part in Path(source).parts for part in ("site-packages", "dist-packages")
        )
        if root in CORE_PACKAGES or root in sys.stdlib_module_names or library:
            continue
        return None if root in roots else (module, frame.f_code.co_name)
    return None


def _innermost_function(exc: BaseException) -> str:
    """The function that raised ``exc`` outside Esper's own packages (e.g. a reward's compute)."""
    names = [
        frame.f_code.co_name
        for frame, _ in traceback.walk_tb(exc.__traceback__)
        if frame.f_globals.get("__name__", "").split(".")[0] not in CORE_PACKAGES
    ]
    return f"its {names[-1]}" if names else "Esper's own code"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def plugin_modules(pm: Any) -> dict[str, str]:
    return {info.name: info.module for info in pm.plugins()}
