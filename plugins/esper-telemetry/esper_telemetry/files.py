"""An append-only text file whose position can be checkpointed and rolled back.

Backends that write files (events.jsonl, metrics.csv) keep their lines in memory
during an epoch and write them in one call at ``flush()``. ``position()`` is the byte
offset a checkpoint stores; ``truncate_to()`` cuts the file back to it when the run
resumes, so the resumed file is byte-for-byte what an uninterrupted run would have
written (up to timestamps).

A fresh run starts the file empty at its first write; a resumed run calls
``truncate_to()`` before writing anything, which opens the existing file instead.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

from esper_core.errors import RunDirError


class AppendFile:
    def __init__(self, path: Path, fsync: bool = False) -> None:
        self.path = path
        self.fsync = fsync
        self._fh: BinaryIO | None = None
        self._pending: list[str] = []

    def write(self, text: str) -> None:
        self._pending.append(text)

    def _open_fresh(self) -> BinaryIO:
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "wb")  # noqa: SIM115 - held open for the whole run
        return self._fh

    def flush(self, fsync: bool | None = None) -> None:
        fh = self._open_fresh() if self._pending or self._fh is None else self._fh
        if self._pending:
            fh.write("".join(self._pending).encode("utf-8"))
            self._pending.clear()
        fh.flush()
        if self.fsync if fsync is None else fsync:
            os.fsync(fh.fileno())

    def position(self) -> int:
        """Flush, make durable and return the byte offset a checkpoint can resume from."""
        self.flush(fsync=True)
        assert self._fh is not None
        return self._fh.tell()

    def truncate_to(self, offset: int) -> None:
        """Cut the file back to ``offset`` (from ``position()``) and append from there."""
        self._pending.clear()
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        size = self.path.stat().st_size if self.path.exists() else None
        if size is None and offset == 0:
            self._open_fresh()
            return
        if size is None or size < offset:
            found = "is missing" if size is None else f"has only {size} bytes"
            raise RunDirError(
                f"{self.path} {found} but the checkpoint expects {offset}: the file was "
                "replaced or truncated after the checkpoint, so this backend cannot resume it"
            )
        fh = open(self.path, "r+b")  # noqa: SIM115 - held open for the whole run
        fh.truncate(offset)
        fh.seek(offset)
        self._fh = fh

    def close(self) -> None:
        if self._pending or self._fh is not None:
            self.flush()
        if self._fh is not None:
            self._fh.close()
            self._fh = None
