"""An append-only text file whose position can be checkpointed and rolled back.

Backends that write files (events.jsonl, metrics.csv) keep their lines in memory
during an epoch and write them in one call at ``flush()``. ``state()`` is what a
checkpoint stores: the byte offset and the SHA-256 of every byte before it.
``resume()`` cuts the file back to that offset when the run resumes, so the resumed
file is byte-for-byte what an uninterrupted run would have written (up to timestamps),
but only after proving that the bytes before the offset are the ones this run wrote:
what it cuts off was then written after the checkpoint, and nothing else is lost.

A fresh run starts the file empty at its first write; a resumed run calls ``resume()``
before writing anything, which opens the existing file instead.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, BinaryIO

from esper_core.errors import RunDirError

# The run's record, written by telemetry.jsonl and read back by esper report: named here,
# below both, so the report's reader does not import the backend that registers it.
EVENTS_FILE = "events.jsonl"
_CHUNK = 1 << 20


class AppendFile:
    def __init__(self, path: Path, fsync: bool = False) -> None:
        self.path = path
        self.fsync = fsync
        self._fh: BinaryIO | None = None
        self._pending: list[str] = []
        self._digest = hashlib.sha256()  # of every byte written so far

    def write(self, text: str) -> None:
        self._pending.append(text)

    def _open_fresh(self) -> BinaryIO:
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "wb")  # noqa: SIM115 - held open for the whole run
            self._digest = hashlib.sha256()
        return self._fh

    def flush(self, fsync: bool | None = None) -> None:
        fh = self._open_fresh() if self._pending or self._fh is None else self._fh
        if self._pending:
            data = "".join(self._pending).encode("utf-8")
            fh.write(data)
            self._pending.clear()
            self._digest.update(data)
        fh.flush()
        if self.fsync if fsync is None else fsync:
            os.fsync(fh.fileno())

    def position(self) -> int:
        """Flush, make durable and return the byte offset a checkpoint can resume from."""
        self.flush(fsync=True)
        assert self._fh is not None
        return self._fh.tell()

    def state(self) -> dict[str, Any]:
        """What a checkpoint stores to resume this file: offset and digest of the bytes before it."""
        offset = self.position()
        return {"offset": offset, "sha256": self._digest.hexdigest()}

    def resume(self, state: dict[str, Any]) -> None:
        self.truncate_to(int(state["offset"]), str(state["sha256"]))

    def truncate_to(self, offset: int, sha256: str) -> None:
        """Cut the file back to ``offset`` and append from there, if its first ``offset``
        bytes have digest ``sha256`` (they are what this run wrote before the checkpoint)."""
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
        try:
            digest = _prefix_digest(fh, offset)
            if digest.hexdigest() != sha256:
                raise RunDirError(
                    f"{self.path} is not the file this run wrote: its first {offset} bytes differ "
                    "from those recorded at the checkpoint, so resuming would cut off records it "
                    "cannot account for; the file was left as it is"
                )
            fh.truncate(offset)
            fh.seek(offset)
        except BaseException:
            fh.close()
            raise
        self._fh, self._digest = fh, digest

    def close(self) -> None:
        try:
            if self._pending or self._fh is not None:
                self.flush()
        finally:
            if self._fh is not None:
                self._fh.close()
                self._fh = None


def _prefix_digest(fh: BinaryIO, length: int) -> Any:
    digest = hashlib.sha256()
    fh.seek(0)
    left = length
    while left:
        chunk = fh.read(min(_CHUNK, left))
        if not chunk:
            break
        digest.update(chunk)
        left -= len(chunk)
    return digest
