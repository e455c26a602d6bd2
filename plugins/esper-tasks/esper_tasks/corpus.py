"""Text corpora for the character language model."""

from __future__ import annotations

import os
import sysconfig
from pathlib import Path

from esper_core.errors import DataError

# Third-party code installed next to the standard library differs between machines.
_SKIP_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__"})
_MAX_UTF8_BYTES = 4  # bytes of one character, at most
# Text in another encoding (Latin-1, say) has a few undecodable bytes among ASCII; a
# binary file has them everywhere. More than this fraction is not text.
_MAX_UNDECODABLE = 0.01


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

    Decoded as UTF-8 with undecodable bytes replaced. Only the bytes that can hold the
    characters still wanted are read: a UTF-8 character is at most 4 bytes, so a file of
    gigabytes (one huge line, say) costs no more than ``4 * max_chars`` bytes of memory.
    """
    parts: list[str] = []
    total = 0
    for path in paths:
        wanted = max_chars - total
        try:
            with path.open("rb") as fh:
                data = fh.read(_MAX_UTF8_BYTES * wanted)
        except OSError as exc:
            raise DataError(f"cannot read {path}: {exc}") from None
        # A character cut at the end of what was read lies past the first `wanted`.
        text = data.decode("utf-8", errors="replace")[:wanted]
        parts.append(text)
        total += len(text)
        if total >= max_chars:
            break
    return "".join(parts)


def check_text(text: str, source: str) -> None:
    """Refuse a corpus no character model can be meant for: empty, binary (NUL bytes,
    or mostly bytes that are not UTF-8), or of one distinct character (every next
    character is certain: 100 % accuracy and zero loss, with nothing learned)."""
    fix = "set tasks.charlm.path to a UTF-8 text file, or unset it to use the stdlib's sources"
    if not text:
        raise DataError(f"charlm corpus {source} is empty; {fix}")
    if "\x00" in text:
        raise DataError(f"charlm corpus {source} is a binary file (it holds NUL bytes); {fix}")
    undecodable = text.count("\ufffd")
    if undecodable > _MAX_UNDECODABLE * len(text):
        raise DataError(
            f"charlm corpus {source} is not UTF-8 text: {undecodable:,} of the first "
            f"{len(text):,} characters are bytes that do not decode; convert it to UTF-8 "
            f"(e.g. with iconv), or {fix}"
        )
    distinct = set(text)
    if len(distinct) < 2:
        raise DataError(
            f"charlm corpus {source} holds one distinct character ({text[0]!r}), so every "
            "next character is certain and there is nothing to learn; give a text of at "
            "least two distinct characters"
        )
