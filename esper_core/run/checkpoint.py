"""Atomic writes and safe checkpoint loading.

Every file of a run directory is written to a temporary file in the same directory,
flushed, fsynced and renamed over the target, so a crash (even SIGKILL) leaves
either the old file or the new one, never a torn one. Checkpoints are loaded with
``torch.load(weights_only=True)``: a checkpoint that holds pickled code is refused.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pickle
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from esper_core.errors import CheckpointError, EsperError

CHECKPOINT_FORMAT = 1


class DiskFullError(EsperError):
    """Writing failed because the disk is full."""


@contextlib.contextmanager
def atomic_writer(path: str | Path, mode: str = "wb") -> Iterator[IO[Any]]:
    """Open a temporary sibling of ``path``; on success rename it over ``path``."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.fchmod(fd, 0o644)  # mkstemp's 0600 would make run directories unreadable to others
    try:
        with os.fdopen(fd, mode) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        _remove(tmp)
        if exc.errno == errno.ENOSPC:
            raise DiskFullError(
                f"no space left on the device while writing {target}; the previous version "
                "(if any) is intact. Free some disk space and resume the run"
            ) from exc
        raise
    except BaseException:
        _remove(tmp)
        raise


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


def write_text(path: str | Path, text: str) -> None:
    with atomic_writer(path, "w") as fh:
        fh.write(text)


def write_json(path: str | Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, sort_keys=True, allow_nan=True) + "\n")


def save_checkpoint(
    path: str | Path, payload: dict[str, Any], metadata: dict[str, Any] | None = None
) -> None:
    """Write ``payload`` with ``torch.save`` atomically, and ``metadata`` as a JSON sibling."""
    import torch

    body = {"format": CHECKPOINT_FORMAT, **payload}
    with atomic_writer(path, "wb") as fh:
        torch.save(body, fh)
    if metadata is not None:
        write_json(Path(path).with_suffix(".json"), metadata)


def load_checkpoint(path: str | Path, map_location: Any = "cpu") -> dict[str, Any]:
    """Load a checkpoint safely; every failure is a :class:`CheckpointError` naming the file."""
    import torch

    p = Path(path)
    if not p.is_file():
        raise CheckpointError(f"checkpoint {p} not found")
    try:
        data = torch.load(p, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        text = str(exc)
        if "weights_only" in text or "Unsupported global" in text or "GLOBAL" in text:
            raise CheckpointError(
                f"checkpoint {p} holds pickled Python objects (code), which Esper refuses to "
                "load; only tensors and plain data are allowed. Re-create it with Esper"
            ) from None
        raise CheckpointError(f"checkpoint {p} is corrupt or truncated ({exc})") from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError) as exc:
        raise CheckpointError(
            f"checkpoint {p} is corrupt or truncated: {type(exc).__name__}: {exc}"
        ) from None
    if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise CheckpointError(
            f"checkpoint {p} has format {found!r}; this Esper reads format {CHECKPOINT_FORMAT}"
        )
    return data


def guarded(action: Callable[[], Any], what: str) -> Any:
    """Run a write; turn a full disk into a :class:`DiskFullError` with advice."""
    try:
        return action()
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise DiskFullError(
                f"no space left on the device while writing {what}; free disk space and resume"
            ) from exc
        raise
