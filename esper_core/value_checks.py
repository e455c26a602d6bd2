"""Value checks declared on config fields (``options_field(..., check)``): ranges, choices,
per-item checks, names and paths. Each returns ``None`` or the problem in words;
:func:`esper_core.converter.check_values` runs them and adds the dotted path."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

import attrs

Check = Callable[[Any], "str | None"]

_LONG_INT = 10**30  # larger integers are described by their size, not spelled out


def describe(value: Any) -> str:
    if isinstance(value, str):
        # JSON quoting escapes newlines and control characters: messages stay one line.
        return json.dumps(value[:200] + ("..." if len(value) > 200 else ""), ensure_ascii=False)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= _LONG_INT:
        # repr() of a 5000-digit integer raises ValueError (Python's digit limit).
        digits = int(abs(value).bit_length() * math.log10(2)) + 1
        return f"an integer of about {digits} digits"
    return repr(value)


# ---------------------------------------------------------------- value checks


@attrs.frozen
class Range:
    """A check that a number lies in an interval; build it with :func:`in_range`.

    A class, not a closure, so tests and docs can read the bounds.
    """

    lo: float | None
    hi: float | None
    lo_open: bool = False
    hi_open: bool = False
    integer: bool = False

    @property
    def expected(self) -> str:
        lo_txt = "-inf" if self.lo is None else _bound(self.lo)
        hi_txt = "inf" if self.hi is None else _bound(self.hi)
        kind = "an integer" if self.integer else "a number"
        if self.lo is not None and self.hi is None and not self.lo_open and self.lo == 0:
            return f"{kind} >= 0"
        if self.lo is not None and self.hi is None:
            return f"{kind} {'>' if self.lo_open else '>='} {lo_txt}"
        left = "(" if self.lo_open else "["
        right = ")" if self.hi_open else "]"
        return f"{kind} in {left}{lo_txt}, {hi_txt}{right}"

    def __call__(self, value: Any) -> str | None:
        if value is None:
            return None
        lo, hi = self.lo, self.hi
        bad = (
            (lo is not None and (value <= lo if self.lo_open else value < lo))
            or (hi is not None and (value >= hi if self.hi_open else value > hi))
            or value != value  # NaN
        )
        return f"expected {self.expected}, got {describe(value)}" if bad else None


def in_range(
    lo: float | None = None,
    hi: float | None = None,
    *,
    lo_open: bool = False,
    hi_open: bool = False,
    integer: bool = False,
) -> Range:
    """A check that a number lies in an interval, e.g. ``in_range(0, 1, lo_open=True)``."""
    return Range(lo, hi, lo_open, hi_open, integer)


def _bound(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def one_of(*choices: str) -> Check:
    def check(value: Any) -> str | None:
        if value is None or value in choices:
            return None
        return f"expected one of {', '.join(choices)}, got {describe(value)}"

    return check


@attrs.frozen
class Each:
    """Apply ``inner`` to every element of a sequence; build it with :func:`each`."""

    inner: Check
    length: int | None = None  # the sequence must have exactly this many items
    non_empty: bool = False  # an empty list would leave the run nothing to choose from
    distinct: bool = False  # an item named twice is a typo, not a request

    def __call__(self, value: Any) -> str | None:
        if value is None:
            return None
        if self.length is not None and len(value) != self.length:
            return f"expected {self.length} items, got {len(value)}"
        if self.non_empty and len(value) == 0:
            return "expected at least one item, got none"
        for i, item in enumerate(value):
            problem = self.inner(item)
            if problem:
                return f"item {i}: {problem}"
        if self.distinct:
            twice = [v for i, v in enumerate(value) if v in value[:i]]
            if twice:
                return f"{twice[0]!r} is named twice; name each item once"
        return None


def each(
    inner: Check, length: int | None = None, non_empty: bool = False, distinct: bool = False
) -> Each:
    """Apply ``inner`` to every element of a sequence (of exactly ``length`` items, if set;
    of at least one with ``non_empty``; none twice with ``distinct``)."""
    return Each(inner, length, non_empty, distinct)


def non_empty(value: Any) -> str | None:
    if value is not None and len(value) == 0:
        return "expected at least one item, got none"
    return None


_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+=-]{0,127}")


def path_component(value: Any) -> str | None:
    """A single file or directory name: no separator, no ``..``, at most 128 characters."""
    if value is None or (isinstance(value, str) and _SAFE_NAME.fullmatch(value)):
        return None
    return (
        "expected a single file name of at most 128 letters, digits and . _ + = - "
        f"(not starting with . + = -), got {describe(value)}"
    )


MAX_PATH = 4096  # PATH_MAX on Linux: a longer path fails in every system call


def os_path(value: Any) -> str | None:
    """A path the OS can take: 1 to 4096 characters, no NUL (a ValueError in every call)."""
    if value is None or (
        isinstance(value, str) and 0 < len(value) <= MAX_PATH and "\0" not in value
    ):
        return None
    return f"expected a path of 1 to {MAX_PATH} characters without NUL bytes, got {describe(value)}"


def relative_path(value: Any) -> str | None:
    """A path that stays inside the run directory: relative, and no part is ``..``.

    Each part must be a plain name (:func:`path_component`), so a value can neither
    climb out of the directory nor name a device, a home directory or a drive.
    """
    if value is None:
        return None
    parts = value.split("/") if isinstance(value, str) else []
    if parts and all(path_component(part) is None for part in parts):
        return None
    return (
        "expected a relative path inside the run directory (names of letters, digits "
        f"and . _ + = - separated by /, no .. and no leading /), got {describe(value)}"
    )
