"""Output directories named on the command line, checked before any work starts."""

from __future__ import annotations

import os
from pathlib import Path

from esper_core.errors import RunDirError


def output_dir(path: Path, flag: str) -> Path:
    """``path`` if a directory can be created or reused there; else a one-line error naming
    ``flag`` (a run would otherwise fail after its setup, with an OSError)."""
    if path.exists() and not path.is_dir():
        raise RunDirError(f"{flag} {path}: a file is in the way; name a directory")
    for parent in path.parents:
        if not parent.exists():
            continue
        if not parent.is_dir():
            raise RunDirError(f"{flag} {path}: {parent} is a file, not a directory")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise RunDirError(f"{flag} {path}: {parent} is not writable")
        break
    return path
