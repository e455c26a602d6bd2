"""Reading configuration text: TOML/JSON files (size-limited, regular files only), ``--set``
overrides and merging. Only plain data comes out; :mod:`esper_core.config` structures it."""

from __future__ import annotations

import datetime as dt
import json
import os
import stat
import tomllib
from pathlib import Path
from typing import Any

from esper_core.errors import ConfigError

MAX_CONFIG_BYTES = 1 << 20  # a config or experiment file larger than this is not one
MAX_DEPTH = 32  # tables and arrays nested deeper than this are not a config


def _check_plain(data: Any, source: str) -> None:
    """Refuse what parses but is no config: dates and times, and deep nesting.

    TOML has date and time values that no setting takes (and JSON cannot copy), and a
    value nested hundreds of levels deep would exhaust the recursion of every later
    step. Walks with an explicit stack, so the check itself cannot recurse too deep.
    """
    stack: list[tuple[Any, int, str]] = [(data, 0, "")]
    while stack:
        value, depth, where = stack.pop()
        here = f"{source}: {where}" if where else source
        if depth > MAX_DEPTH:
            raise ConfigError([f"{here}: nested more than {MAX_DEPTH} levels deep"])
        if isinstance(value, dict):
            stack.extend(
                (v, depth + 1, f"{where}.{k}" if where else str(k)) for k, v in value.items()
            )
        elif isinstance(value, list):
            stack.extend((v, depth + 1, f"{where}[{i}]") for i, v in enumerate(value))
        elif isinstance(value, dt.date | dt.time):  # datetime is a date
            raise ConfigError(
                [f"{here}: dates and times are not config values, got {value.isoformat()}"]
            )


def _loads(text: str, as_json: bool) -> Any:
    """json/tomllib, with the failures they raise besides a syntax error made one line."""
    try:
        return json.loads(text) if as_json else tomllib.loads(text)
    except RecursionError:
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep") from None
    except (tomllib.TOMLDecodeError, json.JSONDecodeError):
        raise
    except ValueError:  # Python refuses integers of more than 4300 digits
        raise ValueError("a number has too many digits") from None


def parse_text(text: str, source: str) -> dict[str, Any]:
    """Parse TOML or JSON text (by the source's suffix) into a dict."""
    as_json = source.endswith(".json")
    try:
        data = _loads(text, as_json)
    except ValueError as exc:  # TOMLDecodeError and JSONDecodeError are ValueErrors
        raise ConfigError([f"{source}: not valid {'JSON' if as_json else 'TOML'}: {exc}"]) from None
    if not isinstance(data, dict):
        raise ConfigError([f"{source}: expected a table of settings at the top level"])
    _check_plain(data, source)
    return data


def read_file(path: str | Path) -> dict[str, Any]:
    """Read a config file: a regular file of at most MAX_CONFIG_BYTES, UTF-8.

    Opened without blocking and checked with fstat before reading, so a FIFO cannot
    hang the process and /dev/zero cannot fill its memory.
    """
    p = Path(path)
    if "\0" in str(p):
        raise ConfigError([f"{str(p)!r}: a config file name cannot contain a NUL byte"])
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise ConfigError([f"{p}: config file not found"]) from None
    except OSError as exc:
        raise ConfigError([f"{p}: cannot read config file: {exc.strerror or exc}"]) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError([f"{p}: not a regular file; a config must be a TOML or JSON file"])
        with os.fdopen(fd, "rb", closefd=False) as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError([f"{p}: cannot read config file: {exc.strerror or exc}"]) from None
    finally:
        os.close(fd)
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError([f"{p}: larger than {MAX_CONFIG_BYTES // 1024} KiB; not a config file"])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            [f"{p}: cannot read config file: not UTF-8 text ({exc.reason})"]
        ) from None
    return parse_text(text, str(p))


def parse_override(assignment: str) -> tuple[list[str], Any]:
    """``section.key=value`` -> (["section", "key"], value); the value is read as TOML."""
    key, sep, raw = assignment.partition("=")
    key = key.strip()
    short = assignment if len(assignment) <= 200 else assignment[:200] + "..."
    shown = json.dumps(short, ensure_ascii=False)
    if not sep or not key or any(not part.strip() for part in key.split(".")):
        raise ConfigError([f'--set {shown}: expected "section.key=value", e.g. --set run.seed=3'])
    path = key.split(".")
    if len(path) > MAX_DEPTH:
        raise ConfigError([f"--set {shown}: key nested more than {MAX_DEPTH} levels deep"])
    raw = raw.strip()
    try:
        value = _loads(f"v = {raw}", as_json=False)["v"]
    except tomllib.TOMLDecodeError:
        value = raw  # a bare word: read it as a string
    except ValueError as exc:
        raise ConfigError([f"--set {shown}: {exc}"]) from None
    _check_plain(value, f"--set {shown}")
    return path, value


def apply_overrides(data: dict[str, Any], assignments: list[str]) -> dict[str, Any]:
    out = json.loads(json.dumps(data))  # deep copy of plain data
    for assignment in assignments:
        path, value = parse_override(assignment)
        node = out
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                shown = json.dumps(assignment, ensure_ascii=False)
                raise ConfigError([f"--set {shown}: {part} is a value, not a section"])
            node = child
        node[path[-1]] = value
    return out


def merge(base: dict[str, Any], extra: dict[str, Any], path: str = "") -> dict[str, Any]:
    """Recursively merge ``extra`` into a copy of ``base`` (tables merge, values replace)."""
    out = dict(base)
    for key, value in extra.items():
        here = f"{path}.{key}" if path else key
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value, here)
        elif isinstance(value, dict) and key in out:
            raise ConfigError([f"{here}: expected a table of settings, got {out[key]!r}"])
        else:
            out[key] = value
    return out
