"""What a checkpoint must hold, and whether the run resuming it is the run that wrote it.

A resumed run rebuilds every component from its config and then loads the checkpoint's
state into them; a config that changed since (a preset edited in ``config.toml``, a
plugin option) would either fail deep inside ``load_state_dict`` or, worse, quietly
change the results. The checkpoint therefore stores the resolved config it was written
under, and resuming compares the two first. Only the length of an ``esper run`` may
change: ``run.episodes`` can be raised to extend it, or lowered to end it early, but not
below what is already done (each episode depends only on its index). ``train.updates``
may not: a trainable policy's schedules (learning rate, entropy) span the planned
number of updates, so a longer run would not be the run that was started. Telemetry
(``run.telemetry`` and the ``telemetry`` tables) may differ too, since it records a run
without changing it; a backend that keeps files can still only continue from a position
the checkpoint holds (see :class:`~esper_core.run.hub.Hub`). So may ``run.epoch_timeout``,
the watchdog's limit, which stops a hung run but never changes one that finishes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from attrs import define

from esper_core.config import config_from_dict, config_to_dict
from esper_core.errors import CheckpointError, ConfigError, RunDirError
from esper_core.plugins import PluginManager
from esper_core.run.checkpoint import load_checkpoint
from esper_core.run.checkpoint_fields import check_fields
from esper_core.run.resolve import with_new_option_defaults

# What Session.checkpoint() writes; a checkpoint without all of it was not written by a run.
PAYLOAD_KEYS = (
    "mode",
    "outer",
    "epoch",
    "config",
    "envs",
    "policy",
    "telemetry",
    "ledger",
    "episodes",
    "updates",
    "elapsed",
)
# The config field a resume may change, by mode: the length of an `esper run`.
LENGTH_FIELD: dict[str, str | None] = {"run": "run.episodes", "train": None}
SHOWN = 3  # differences named in the message
# Config entries that record or supervise the run without changing its results (a
# run stopped by its epoch timeout must be resumable with a longer one).
RECORDING = ("run.telemetry", "telemetry", "run.epoch_timeout")


def verify_resume(
    data: dict[str, Any],
    current: dict[str, Any],
    mode: str,
    path: Path,
    pm: PluginManager | None = None,
) -> bool:
    """Refuse a checkpoint this run cannot continue (see :func:`check_payload` and
    :func:`check_config`). True when the run's length changed."""
    check_payload(data, path, mode)
    check_fields(data, path, mode)
    return check_config(_as_read_now(data["config"], pm), current, mode, data["outer"], path)


def _as_read_now(saved: dict[str, Any], pm: PluginManager | None) -> dict[str, Any]:
    """The checkpoint's config as this version reads it: a setting or component option
    added since it was written is at its default, which keeps what the code did before
    (an upgrade between a run's checkpoint and its resume is no config change). A config
    this version cannot read is compared as saved."""
    if pm is None:
        return saved
    try:
        config = config_from_dict(saved)
    except ConfigError:
        return saved
    return config_to_dict(with_new_option_defaults(config, pm))


@define
class SavedCheckpoint:
    """A checkpoint read (and verified) before the run directory is locked, and the
    identity of its file then: a run that ended in between may have replaced it."""

    path: Path
    data: dict[str, Any]
    identity: tuple[int, int, int]

    @classmethod
    def load(cls, path: Path) -> SavedCheckpoint:
        identity = _identity(path)
        return cls(path, load_checkpoint(path), identity)

    def current(self) -> dict[str, Any]:
        """The checkpoint as the file holds it now (read again only if it was replaced)."""
        if _identity(self.path) != self.identity:
            self.identity = _identity(self.path)
            self.data = load_checkpoint(self.path)
        return self.data


def _identity(path: Path) -> tuple[int, int, int]:
    try:
        info = os.stat(path)
    except OSError:
        return (0, 0, 0)  # gone: load_checkpoint says so in its words
    return (info.st_ino, info.st_mtime_ns, info.st_size)


def check_payload(data: dict[str, Any], path: Path, mode: str) -> None:
    """Refuse a checkpoint that lacks what a run writes, or that another command wrote."""
    missing = [key for key in PAYLOAD_KEYS if key not in data]
    if missing:
        raise CheckpointError(
            f"checkpoint {path} lacks {', '.join(missing)}: it was not written by "
            "`esper run` or `esper train` (a checkpoint of another kind, or of an older Esper)"
        )
    if data["mode"] != mode:
        raise RunDirError(
            f"{path.parent} was written by `esper {data['mode']}`; resume it with that command"
        )


def check_config(
    saved: dict[str, Any], current: dict[str, Any], mode: str, done: int, path: Path
) -> bool:
    """Refuse a config that differs from ``saved`` anywhere but the run's length, or that
    shortens the run below the ``done`` episodes. True when the length changed."""
    length = LENGTH_FIELD[mode]
    saved_flat, current_flat = _flatten(saved), _flatten(current)
    changes = [
        f"{name}: {_show(saved_flat, name)} -> {_show(current_flat, name)}"
        for name in sorted(set(saved_flat) | set(current_flat))
        if name != length
        and not _recording(name)
        and saved_flat.get(name, _ABSENT) != current_flat.get(name, _ABSENT)
    ]
    if changes:
        more = f" and {len(changes) - SHOWN} more" if len(changes) > SHOWN else ""
        may = f"only {length} may change" if length else "nothing may change"
        raise RunDirError(
            f"cannot resume {path.parent}: its config changed since the checkpoint "
            f"({'; '.join(changes[:SHOWN])}{more}). A resumed run keeps the config it started "
            f"with; {may}. Restore config.toml, or start a new run"
        )
    if length is None:
        return False
    wanted = current_flat.get(length)
    if isinstance(wanted, int) and wanted < done:
        raise RunDirError(
            f"cannot resume {path.parent} with {length}={wanted}: {done} episodes are already done"
        )
    return saved_flat.get(length) != wanted


def _recording(name: str) -> bool:
    return name in RECORDING or name.startswith(tuple(f"{r}." for r in RECORDING))


class _Absent:
    def __repr__(self) -> str:
        return "(unset)"


_ABSENT = _Absent()


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _show(flat: dict[str, Any], name: str) -> str:
    text = repr(flat.get(name, _ABSENT))
    return text if len(text) <= 60 else text[:57] + "..."
