"""The run directory: its name, its files, and the checks before a run writes or resumes it.

A run holds the directory's lock (:mod:`~esper_core.run.lock`) from before its first
write until it ends, and every file it writes there is named through :func:`run_file`.
"""

from __future__ import annotations

import datetime as dt
import errno
from pathlib import Path

from esper_core.config import RunConfig, dump_toml, load_config
from esper_core.errors import EsperError, RunDirError
from esper_core.run.checkpoint import disk_full_error, is_disk_full, write_text
from esper_core.run.lock import RunDirLock
from esper_core.run.paths import inside_run_dir, refuse_overwrite
from esper_core.run.policy_ref import PolicyRef

CHECKPOINT = "checkpoint.pt"
SUMMARY = "summary.json"
CONFIG = "config.toml"


def default_run_dir(config: RunConfig, mode: str) -> Path:
    """``run.out_dir/run.name``, else ``run.out_dir/TASK-POLICY-MODE-TIMESTAMP``."""
    if config.run.name:
        return Path(config.run.out_dir) / config.run.name
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    policy = PolicyRef.parse(config.run.policy).name
    base = Path(config.run.out_dir) / f"{config.run.task}-{policy}-{mode}-{stamp}"
    # Two runs started in the same second (a script, a test) must not meet in one directory.
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def run_file(run_dir: Path, name: str) -> Path:
    """``run_dir / name`` for a file the run writes, refused if it would land elsewhere."""
    return inside_run_dir(run_dir, name, "run file")


def prepare_run_dir(path: Path, config: RunConfig, resume: bool) -> RunDirLock:
    """:func:`lock_run_dir`, then (for a new run) :func:`write_run_config`."""
    lock = lock_run_dir(path, resume)
    if not resume:
        try:
            write_run_config(path, config)
        except BaseException:
            lock.release()
            raise
    return lock


def lock_run_dir(path: Path, resume: bool) -> RunDirLock:
    """Lock ``path`` and check it can be resumed (or holds none of a new run's files).

    The caller releases the returned lock when the run ends. A directory that cannot be
    created or written (a file in the way, a read-only file system, ``/proc``) is a
    :class:`RunDirError`. Nothing is written yet (but the lock file), so that the
    telemetry backends can refuse their own files before :func:`write_run_config`.
    """
    if resume and not (path / CHECKPOINT).is_file():
        raise RunDirError(f"cannot resume {path}: it has no {CHECKPOINT}")
    try:
        if not resume:
            path.mkdir(parents=True, exist_ok=True)
        lock = RunDirLock.acquire(path)
    except OSError as exc:
        raise _unwritable(path, exc) from None
    try:
        _check(path, resume)
    except BaseException:
        lock.release()
        raise
    return lock


def _check(path: Path, resume: bool) -> None:
    if resume:
        # A process killed mid-write leaves its temporary file; the target itself is intact.
        for stale in path.glob(".*.tmp"):
            stale.unlink()
        return
    if (path / CHECKPOINT).exists() or (path / SUMMARY).exists():
        raise RunDirError(
            f"{path} already holds a run; resume it with --resume {path}, or choose another --out"
        )
    # A config.toml without a checkpoint is the user's own file (or a run that died
    # before its first checkpoint): a new run never writes over it.
    refuse_overwrite(path, CONFIG)


def write_run_config(path: Path, config: RunConfig) -> None:
    """Write a new run's ``config.toml`` (what ``--resume`` reads back)."""
    try:
        write_text(run_file(path, CONFIG), dump_toml(config))
    except OSError as exc:
        raise _unwritable(path, exc) from None


def _unwritable(path: Path, exc: OSError) -> EsperError:
    if is_disk_full(exc):
        return disk_full_error(exc, path, "free some disk space, or choose another --out")
    return RunDirError(
        f"cannot write the run directory {path}: {_why(path, exc)}; choose another --out "
        "(or run.out_dir)"
    )


def _why(path: Path, exc: OSError) -> str:
    """The reason in the user's terms: which file is in the way, which parent refuses."""
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        return f"{existing} is a file, not a directory"
    reason = exc.strerror or type(exc).__name__
    if existing is not None and existing != path and exc.errno == errno.ENOENT:
        return f"{existing} does not accept new directories ({reason})"
    return reason


def load_run_config(path: Path) -> RunConfig:
    """The config a run directory was started with (to resume it)."""
    if not (path / CONFIG).is_file():
        raise RunDirError(f"{path} is not a run directory: {CONFIG} is missing")
    return load_config(path / CONFIG)
