"""The one cattrs converter of Esper, the runner of the value checks, and error formatting.

Every config, event, checkpoint metadata and summary goes through :data:`converter`.
It is strict: unknown keys are refused, a bool is not accepted where a number is
expected and a number is not accepted where a string is. Value ranges are declared
on attrs fields as ``metadata={"check": ...}`` and checked by :func:`check_values`,
so every problem in a file is reported at once, each with its dotted path.
Whatever an option (:func:`options_field`) declares, a float must be finite and an
integer must fit in 64 bits unless the option says otherwise (``allow_nonfinite=True``):
NaN, inf and 5000-digit integers are never a sensible setting, and torch crashes on them.
"""

from __future__ import annotations

import enum
import math
import typing
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.cols import homogenous_tuple_structure_factory as tuple_factory
from cattrs.cols import list_structure_factory
from cattrs.errors import ClassValidationError, IterableValidationError

from esper_core.errors import ConfigError
from esper_core.value_checks import (
    MAX_PATH,
    Check,
    Each,
    Range,
    each,
    in_range,
    non_empty,
    one_of,
    os_path,
    path_component,
    relative_path,
)
from esper_core.value_checks import describe as _describe

# The value checks live in esper_core.value_checks; every importer reads them from here.
__all__ = [
    "INT_LIMIT",
    "MAX_PATH",
    "Check",
    "Each",
    "Range",
    "ValueTypeError",
    "check_values",
    "converter",
    "describe_fields",
    "drop_none",
    "each",
    "in_range",
    "non_empty",
    "one_of",
    "options_field",
    "os_path",
    "path_component",
    "relative_path",
    "structure",
    "unstructure",
]

T = TypeVar("T")

converter = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)


class ValueTypeError(ValueError):
    """Raised by the strict primitive hooks; the message is the user-facing text."""


INT_LIMIT = 2**63
"""Every config integer lies in [-INT_LIMIT, INT_LIMIT): torch's int64, and the bound of
``torch.manual_seed``."""


def _structure_float(value: Any, _: type) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueTypeError(f"expected a number, got {_describe(value)}")
    try:
        return float(value)
    except OverflowError:  # an integer beyond the float range
        raise ValueTypeError(f"expected a finite number, got {_describe(value)}") from None


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


def _is_list(t: Any) -> bool:
    """``list[X]`` and ``tuple[X, ...]``: what a TOML array becomes."""
    origin, args = typing.get_origin(t), typing.get_args(t)
    return origin is list or (origin is tuple and len(args) == 2 and args[1] is Ellipsis)


def _list_hook(t: Any, conv: cattrs.Converter) -> Callable[[Any, Any], Any]:
    """A list must be given as one: a string (or a table) is not split into its
    characters (keys), which turned ``"jsonl"`` into the backends j, s, o, n and l."""
    factory = list_structure_factory if typing.get_origin(t) is list else tuple_factory
    inner = factory(t, conv)

    def structure_list(value: Any, cls: Any) -> Any:
        if value == "":  # --set 'env.blueprints=' empties a list (and says if it may not)
            return inner([], cls)
        if isinstance(value, str | bytes | dict):
            raise ValueTypeError(f"expected a list such as [...], got {_describe(value)}")
        return inner(value, cls)

    return structure_list


converter.register_structure_hook_factory(_is_list, _list_hook)


def _number_problem(value: Any) -> str | None:
    """Non-finite floats and integers beyond 64 bits, anywhere in a value."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"expected a finite number, got {value!r}"
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and not -INT_LIMIT <= value < INT_LIMIT
    ):
        return f"expected an integer in [-2**63, 2**63), got {_describe(value)}"
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            problem = _number_problem(item)
            if problem:
                return f"item {i}: {problem}"
    if isinstance(value, dict):
        for key, item in value.items():
            problem = _number_problem(item)
            if problem:
                return f"{_describe(key)}: {problem}"
    return None


def check_values(obj: Any, path: str = "") -> list[str]:
    """Run every field's declared check, recursively; return ``path: problem`` lines.

    A value of an :func:`options_field` that passes its own check must also be finite
    and fit in 64 bits, unless the field is declared with ``allow_nonfinite``. Plain
    attrs fields (events, summaries: a loss may well be inf) are not held to that.
    """
    problems: list[str] = []
    if not attrs.has(type(obj)):
        return problems
    for field in attrs.fields(type(obj)):
        value = getattr(obj, field.name)
        here = f"{path}.{field.name}" if path else field.name
        check = field.metadata.get("check")
        problem = check(value) if check is not None else None  # the field's own words first
        if not problem and field.metadata.get("finite", False):
            problem = _number_problem(value)
        if problem:
            problems.append(f"{here}: {problem}")
        if attrs.has(type(value)):
            problems.extend(check_values(value, here))
        elif isinstance(value, list | tuple):  # [[policies]] entries: their checks too
            for i, item in enumerate(value):
                if attrs.has(type(item)):
                    problems.extend(check_values(item, f"{here}.{i}"))
    validate = getattr(obj, "__esper_validate__", None)
    if validate is not None and not problems:  # cross-field rules assume valid fields
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


def options_field(
    default: Any, check: Check | None = None, doc: str = "", *, allow_nonfinite: bool = False
) -> Any:
    """An attrs field carrying a value check and a one-line description.

    ``allow_nonfinite`` lets the value hold NaN, inf or integers beyond 64 bits, which
    :func:`check_values` otherwise refuses before ``check`` runs.
    """
    metadata: dict[str, Any] = {"doc": doc}
    if check is not None:
        metadata["check"] = check
    metadata["finite"] = not allow_nonfinite
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
