"""One writer per run directory: an exclusive ``flock`` on ``RUN_DIR/.esper.lock``.

The kernel releases an ``flock`` when its process ends, however it ends (even SIGKILL),
so a lock file left behind by a dead process is not a lock: it is never stale. The file
holds the pid of the holder, for the message a second writer gets. The file itself stays
(removing it would let two processes lock two different files of the same name).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from esper_core.errors import RunDirError

LOCK_FILE = ".esper.lock"


class RunDirLock:
    """The held lock of one run directory; :meth:`release` (or process exit) frees it."""

    def __init__(self, run_dir: Path, fd: int | None) -> None:
        self.run_dir = run_dir
        self._fd = fd

    @classmethod
    def acquire(cls, run_dir: Path) -> RunDirLock:
        """Lock ``run_dir`` (which must exist) for this process, or fail in one line."""
        try:
            import fcntl
        except ImportError:  # not POSIX: no advisory locks to take
            return cls(run_dir, None)
        path = run_dir / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise RunDirError(
                f"{run_dir} is in use by another Esper process{holder}; wait for it to finish, "
                "or choose another --out"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        with contextlib.suppress(OSError):  # the pid is only for messages
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(run_dir, fd)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor releases the flock
            self._fd = None


def _read_pid(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return f" (pid {text})" if text.isdigit() else ""
