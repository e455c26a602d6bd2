"""Atomic writes and safe checkpoint loading.

Every file of a run directory is written to a temporary file in the same directory,
flushed, fsynced and renamed over the target, so a crash (even SIGKILL) leaves
either the old file or the new one, never a torn one. The temporary file is created
with mode 0666 less the process's umask, as ``open()`` would create the target.
Checkpoints are loaded with ``torch.load(weights_only=True)``: a checkpoint that holds
pickled code is refused. Each checkpoint carries a digest of its content
(:mod:`~esper_core.run.content_digest`), checked after loading.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pickle
import pickletools
import secrets
import struct
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, cast

from esper_core.errors import CheckpointError, EsperError
from esper_core.run.content_digest import DIGEST_KEY, content_digest

# 2: every checkpoint holds the digest of its content (format 1 had none to verify).
CHECKPOINT_FORMAT = 2

# A write that fails with one of these needs space, not a fix: the disk, the user's
# quota or the process's file-size limit (RLIMIT_FSIZE) is exhausted.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


class DiskFullError(EsperError):
    """Writing failed because the disk (or a quota or file-size limit) is full."""


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS


def disk_full_error(exc: OSError, target: str | Path, advice: str) -> DiskFullError:
    """The one-line :class:`DiskFullError` for a write of ``target`` that failed with ``exc``."""
    what = (
        "no space left on the device"
        if exc.errno == errno.ENOSPC
        else os.strerror(exc.errno or 0).lower()
    )
    return DiskFullError(f"{what} while writing {target}; {advice}")


def _create_temporary(target: Path) -> tuple[int, str]:
    """A new file next to ``target``; the kernel applies the umask to its mode 0666."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = str(target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue


@contextlib.contextmanager
def atomic_writer(path: str | Path, mode: str = "wb") -> Iterator[IO[Any]]:
    """Open a temporary sibling of ``path``; on success rename it over ``path``."""
    target = Path(path)
    tmp: str | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = _create_temporary(target)
        with os.fdopen(fd, mode) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        if tmp is not None:
            _remove(tmp)
        if is_disk_full(exc):
            raise disk_full_error(
                exc,
                target,
                # Whether a run can resume is its caller's to say (Session.checkpoint).
                "the previous version (if any) is intact. Free some disk space",
            ) from exc
        raise
    except BaseException:
        if tmp is not None:
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


class _WriteRecorder:
    """A file wrapper that remembers the OSError of a failed write.

    ``torch.save`` swallows the error its writer gets from the file and later fails
    with a ``RuntimeError`` of its own (``unexpected pos``); the recorded error says
    what really happened (e.g. a full disk).
    """

    def __init__(self, fh: IO[bytes]) -> None:
        self._fh = fh
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return self._fh.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        self._fh.flush()


def save_checkpoint(
    path: str | Path, payload: dict[str, Any], metadata: dict[str, Any] | None = None
) -> None:
    """Write ``payload`` with ``torch.save`` atomically, and ``metadata`` as a JSON sibling.

    The file also holds the format and the digest of the payload; the digest is copied
    into the metadata for people reading it.
    """
    import torch

    digest = content_digest(payload)
    body = {"format": CHECKPOINT_FORMAT, **payload, DIGEST_KEY: digest}
    with atomic_writer(path, "wb") as fh:
        sink = _WriteRecorder(fh)
        try:
            torch.save(body, cast(IO[bytes], sink))  # only write() and flush() are used
        except RuntimeError:
            if sink.error is not None:
                raise sink.error from None
            raise
    if metadata is not None:
        write_json(Path(path).with_suffix(".json"), {**metadata, DIGEST_KEY: digest})


def load_checkpoint(path: str | Path, map_location: Any = "cpu") -> dict[str, Any]:
    """Load a checkpoint safely; every failure is a :class:`CheckpointError` naming the file
    and saying what is wrong with it."""
    import torch

    p = Path(path)
    if not p.is_file():
        raise CheckpointError(f"checkpoint {p} not found")
    try:
        data = torch.load(p, map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises many types on damaged bytes (even IndexError)
        raise CheckpointError(f"checkpoint {p} {_load_problem(p, exc)}") from None
    if not isinstance(data, dict) or "format" not in data:
        raise CheckpointError(
            f"checkpoint {p} is not an Esper checkpoint: it holds "
            f"{'a dict without a format entry' if isinstance(data, dict) else type(data).__name__}"
        )
    if data["format"] != CHECKPOINT_FORMAT:
        raise CheckpointError(
            f"checkpoint {p} has format {data['format']!r}; this Esper reads format "
            f"{CHECKPOINT_FORMAT} (format 1 was written by an older Esper, without a content digest)"
        )
    stored = data.pop(DIGEST_KEY, None)
    body = {k: v for k, v in data.items() if k != "format"}
    if stored is None:
        raise CheckpointError(
            f"checkpoint {p} has no content digest to verify (damaged, or not written by Esper)"
        )
    if content_digest(body) != stored:
        raise CheckpointError(
            f"checkpoint {p} is corrupt: its content does not match the digest written with it "
            "(the file changed on disk after it was saved)"
        )
    return data


# Opcodes that name or call a Python object: a pickle without them holds plain data only.
_CODE_OPCODES = frozenset(
    {
        "GLOBAL",
        "STACK_GLOBAL",
        "INST",
        "OBJ",
        "REDUCE",
        "NEWOBJ",
        "NEWOBJ_EX",
        "EXT1",
        "EXT2",
        "EXT4",
    }
)


def _load_problem(path: Path, exc: Exception) -> str:
    """What is wrong with a file ``torch.load(weights_only=True)`` refused, in words."""
    text = str(exc)
    if isinstance(exc, pickle.UnpicklingError) and (
        "Unsupported global" in text or "GLOBAL" in text
    ):
        return _CODE
    with open(path, "rb") as fh:
        zip_start = fh.read(4) == b"PK\x03\x04"
    if zip_start and not zipfile.is_zipfile(path):
        return "is corrupt or truncated: a damaged PyTorch zip archive (its directory is missing)"
    if zip_start:
        detail = _last_detail(text) if isinstance(exc, pickle.UnpicklingError) else _first_line(exc)
        return f"is corrupt or truncated: {type(exc).__name__}: {detail}"
    opcodes = _pickle_opcodes(path)
    if opcodes is None:
        if path.stat().st_size == 0:
            return "is corrupt or truncated: the file is empty"
        return (
            "is not a checkpoint: its bytes are neither a PyTorch zip archive nor a pickle "
            "(a damaged file, or another kind of file)"
        )
    if opcodes & _CODE_OPCODES:
        return _CODE
    return "is a plain pickle, not a checkpoint written by Esper (a PyTorch zip archive)"


_CODE = (
    "holds pickled Python objects (code), which Esper refuses to load; only tensors and "
    "plain data are allowed. Re-create it with Esper"
)


def _pickle_opcodes(path: Path) -> set[str] | None:
    """The opcodes of ``path`` if the whole file is one pickle, else None (nothing runs)."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as fh:
            ops = [(op.name, pos) for op, _, pos in pickletools.genops(fh)]
    except (ValueError, EOFError, struct.error):  # what genops raises on bytes that are no pickle
        return None
    if not ops or ops[-1][0] != "STOP" or ops[-1][1] != size - 1:
        return None
    return {name for name, _ in ops}


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _last_detail(text: str) -> str:
    """The informative line of torch's long weights-only message."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if line.startswith(("Unsupported", "Trying", "Expected", "Invalid")):
            return line
    return lines[-1] if lines else "unreadable"
