"""The one cattrs converter of Esper, plus value checks and error formatting.

Every config, event, checkpoint metadata and summary goes through :data:`converter`.
It is strict: unknown keys are refused, a bool is not accepted where a number is
expected and a number is not accepted where a string is. Value ranges are declared
on attrs fields as ``metadata={"check": ...}`` and checked by :func:`check_values`,
so every problem in a file is reported at once, each with its dotted path.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.errors import ClassValidationError, IterableValidationError

from esper_core.errors import ConfigError

T = TypeVar("T")
Check = Callable[[Any], "str | None"]

converter = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)


class ValueTypeError(ValueError):
    """Raised by the strict primitive hooks; the message is the user-facing text."""


def _describe(value: Any) -> str:
    if isinstance(value, str):
        # JSON quoting escapes newlines and control characters: messages stay one line.
        return json.dumps(value, ensure_ascii=False)
    return repr(value)


def _structure_float(value: Any, _: type) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueTypeError(f"expected a number, got {_describe(value)}")
    return float(value)


def _structure_int(value: Any, _: type) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ValueTypeError(f"expected an integer, got {_describe(value)}")
    return value


def _structure_str(value: Any, _: type) -> str:
    if not isinstance(value, str):
        raise ValueTypeError(f"expected a string, got {_describe(value)}")
    return value


def _structure_bool(value: Any, _: type) -> bool:
    if not isinstance(value, bool):
        raise ValueTypeError(f"expected true or false, got {_describe(value)}")
    return value


def _structure_enum(value: Any, cls: type[enum.Enum]) -> enum.Enum:
    try:
        if isinstance(value, bool):  # True would pass as the IntEnum member 1
            raise ValueError(value)
        return cls(value)
    except ValueError:
        choices = ", ".join(str(m.value) for m in cls)
        raise ValueTypeError(f"expected one of {choices}, got {_describe(value)}") from None


converter.register_structure_hook(float, _structure_float)
converter.register_structure_hook(int, _structure_int)
converter.register_structure_hook(str, _structure_str)
converter.register_structure_hook(bool, _structure_bool)
converter.register_structure_hook_func(
    lambda t: isinstance(t, type) and issubclass(t, enum.Enum), _structure_enum
)
converter.register_unstructure_hook_func(
    lambda t: isinstance(t, type) and issubclass(t, enum.Enum), lambda e: e.value
)
# cattrs dispatches on the class hierarchy before trying hook predicates, and str/int
# subclasses hit its identity hook: without these a StrEnum/IntEnum member would stay
# an enum object, which `torch.load(weights_only=True)` refuses to unpickle.
converter.register_unstructure_hook(enum.StrEnum, lambda e: e.value)
converter.register_unstructure_hook(enum.IntEnum, lambda e: e.value)
converter.register_structure_hook(enum.StrEnum, _structure_enum)
converter.register_structure_hook(enum.IntEnum, _structure_enum)
converter.register_structure_hook(Any, lambda v, _: v)


# ---------------------------------------------------------------- value checks


def in_range(
    lo: float | None = None,
    hi: float | None = None,
    *,
    lo_open: bool = False,
    hi_open: bool = False,
    integer: bool = False,
) -> Check:
    """A check that a number lies in an interval, e.g. ``in_range(0, 1, lo_open=True)``."""

    left = "(" if lo_open else "["
    right = ")" if hi_open else "]"
    lo_txt = "-inf" if lo is None else f"{lo:g}"
    hi_txt = "inf" if hi is None else f"{hi:g}"
    kind = "an integer" if integer else "a number"
    if lo is not None and hi is None and not lo_open and lo == 0:
        expected = f"{kind} >= 0"
    elif lo is not None and hi is None:
        expected = f"{kind} {'>' if lo_open else '>='} {lo:g}"
    else:
        expected = f"{kind} in {left}{lo_txt}, {hi_txt}{right}"

    def check(value: Any) -> str | None:
        if value is None:
            return None
        bad = (
            (lo is not None and (value <= lo if lo_open else value < lo))
            or (hi is not None and (value >= hi if hi_open else value > hi))
            or value != value  # NaN
        )
        return f"expected {expected}, got {_describe(value)}" if bad else None

    return check


def one_of(*choices: str) -> Check:
    def check(value: Any) -> str | None:
        if value is None or value in choices:
            return None
        return f"expected one of {', '.join(choices)}, got {_describe(value)}"

    return check


def each(inner: Check) -> Check:
    """Apply ``inner`` to every element of a sequence."""

    def check(value: Any) -> str | None:
        if value is None:
            return None
        for i, item in enumerate(value):
            problem = inner(item)
            if problem:
                return f"item {i}: {problem}"
        return None

    return check


def non_empty(value: Any) -> str | None:
    if value is not None and len(value) == 0:
        return "expected at least one item, got none"
    return None


def check_values(obj: Any, path: str = "") -> list[str]:
    """Run every field's declared check, recursively; return ``path: problem`` lines."""
    problems: list[str] = []
    if not attrs.has(type(obj)):
        return problems
    for field in attrs.fields(type(obj)):
        value = getattr(obj, field.name)
        here = f"{path}.{field.name}" if path else field.name
        check = field.metadata.get("check")
        if check is not None:
            problem = check(value)
            if problem:
                problems.append(f"{here}: {problem}")
        if attrs.has(type(value)):
            problems.extend(check_values(value, here))
    validate = getattr(obj, "__esper_validate__", None)
    if validate is not None:
        problems.extend(f"{path}: {p}" if path else p for p in validate())
    return problems


# ---------------------------------------------------------------- error formatting


def _walk(exc: BaseException, path: list[str]) -> list[str]:
    if isinstance(exc, ClassValidationError | IterableValidationError):
        lines: list[str] = []
        for sub in exc.exceptions:
            sub_path = list(path)
            for note in getattr(sub, "__notes__", []):
                name = getattr(note, "name", None)
                index = getattr(note, "index", None)
                if name is not None:
                    sub_path.append(str(name))
                elif index is not None:
                    sub_path.append(str(index))
            lines.extend(_walk(sub, sub_path))
        return lines
    where = ".".join(path) or "(top level)"
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        keys = ", ".join(sorted(exc.extra_fields))
        allowed = ", ".join(f.name for f in attrs.fields(exc.cl)) if attrs.has(exc.cl) else ""
        return [f"{where}: unknown key(s) {keys}; allowed keys are {allowed}"]
    if isinstance(exc, KeyError):
        return [f"{where}: required value is missing"]
    if isinstance(exc, ValueTypeError):
        return [f"{where}: {exc}"]
    if isinstance(exc, TypeError) and "argument" in str(exc):
        return [f"{where}: expected a table of settings"]
    text = str(exc) or type(exc).__name__
    return [f"{where}: {text}"]


def structure(data: Any, cls: type[T], path: str = "") -> T:
    """Structure ``data`` into ``cls``; raise :class:`ConfigError` listing every problem.

    ``path`` prefixes each problem, so options of a component nested in a larger
    file are reported where the user wrote them (``rewards.pbrs.weight: ...``).
    """
    prefix = [p for p in path.split(".") if p]
    if attrs.has(cls) and not isinstance(data, dict):
        where = path or "(top level)"
        raise ConfigError([f"{where}: expected a table of settings, got {_describe(data)}"])
    try:
        obj = converter.structure(data, cls)
    except (ClassValidationError, IterableValidationError) as exc:
        raise ConfigError(_walk(exc, prefix)) from None
    except (ValueError, TypeError) as exc:
        raise ConfigError(_walk(exc, prefix)) from None
    problems = check_values(obj, path)
    if problems:
        raise ConfigError(problems)
    return obj


def unstructure(obj: Any) -> Any:
    return converter.unstructure(obj)


def drop_none(value: Any) -> Any:
    """Remove ``None`` entries recursively (TOML has no null; a missing key means default)."""
    if isinstance(value, dict):
        return {k: drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [drop_none(v) for v in value]
    return value


def options_field(default: Any, check: Check | None = None, doc: str = "") -> Any:
    """An attrs field carrying a value check and a one-line description."""
    metadata: dict[str, Any] = {"doc": doc}
    if check is not None:
        metadata["check"] = check
    if isinstance(default, list | dict | set):
        return attrs.field(factory=lambda: type(default)(default), metadata=metadata)
    return attrs.field(default=default, metadata=metadata)


def describe_fields(cls: type) -> Sequence[tuple[str, Any, str]]:
    """(name, default, doc) of every field of an attrs options class, for help output."""
    rows = []
    for f in attrs.fields(cls):
        factory = getattr(f.default, "factory", None)
        default = factory() if factory is not None else f.default
        rows.append((f.name, default, f.metadata.get("doc", "")))
    return rows
