"""One writer per run directory: an exclusive ``flock`` on ``RUN_DIR/.esper.lock``.

The kernel releases an ``flock`` when its process ends, however it ends (even SIGKILL),
so a lock file left behind by a dead process is not a lock: it is never stale. The file
holds the pid of the holder, for the message a second writer gets. The file itself stays
(removing it would let two processes lock two different files of the same name).

The lock file is opened like every other run file is written: resolved inside the run
directory, and never through a symbolic link (``O_NOFOLLOW``), because opening it
truncates it: a link planted at ``RUN_DIR/.esper.lock`` would otherwise have the pid
written over whatever it points to. It is opened non-blocking so that a FIFO in its
place cannot hang the run, and refused unless it is a regular file.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from esper_core.errors import RunDirError
from esper_core.run.paths import inside_run_dir

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
        path = inside_run_dir(run_dir, LOCK_FILE, "the lock file")
        fd = _open_lock_file(path, run_dir)
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


def _open_lock_file(path: Path, run_dir: Path) -> int:
    """The lock file's descriptor; a link, a FIFO or a directory in its place is refused."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags | getattr(os, "O_NOFOLLOW", 0), 0o666)
    except OSError:
        if path.is_symlink():  # ELOOP (Linux) or EMLINK (some BSDs): the link is not opened
            raise _not_a_lock_file(run_dir, "a symbolic link") from None
        if path.is_dir():
            raise _not_a_lock_file(run_dir, "a directory") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _not_a_lock_file(run_dir, "a special file (a FIFO, a socket or a device)")
    return fd


def _not_a_lock_file(run_dir: Path, what: str) -> RunDirError:
    return RunDirError(
        f"{run_dir / LOCK_FILE} is {what}, not the lock file Esper writes; remove it "
        "(nothing of the run is in it) and run again"
    )


def _read_pid(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return f" (pid {text})" if text.isdigit() else ""
