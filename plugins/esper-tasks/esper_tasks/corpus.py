"""Text corpora for the character language model."""

from __future__ import annotations

import os
import sysconfig
from pathlib import Path

from esper_core.errors import DataError

# Third-party code installed next to the standard library differs between machines.
_SKIP_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__"})


def stdlib_sources() -> list[Path]:
    """The standard library's ``.py`` files, sorted by path relative to its root."""
    root = Path(sysconfig.get_paths()["stdlib"])
    found: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS]
        for name in filenames:
            if name.endswith(".py"):
                path = Path(dirpath, name)
                found.append((path.relative_to(root).as_posix(), path))
    if not found:
        raise DataError(
            f"no Python source files under {root}; give a text file with "
            "--set tasks.charlm.path=FILE"
        )
    return [path for _, path in sorted(found)]


def read_text(paths: list[Path], max_chars: int) -> str:
    """The files' text, concatenated in order and cut at ``max_chars`` characters.

    Decoded as UTF-8 with undecodable bytes replaced, so any file is accepted.
    """
    parts: list[str] = []
    total = 0
    for path in paths:
        try:
            text = path.read_bytes().decode("utf-8", errors="replace")
        except OSError as exc:
            raise DataError(f"cannot read {path}: {exc}") from None
        parts.append(text)
        total += len(text)
        if total >= max_chars:
            break
    return "".join(parts)[:max_chars]
