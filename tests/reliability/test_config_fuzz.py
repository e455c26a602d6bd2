"""Fuzzing the config schema field by field (RELIABILITY.md).

Every field of every ``RunConfig`` section is set through ``--set`` (the CLI's own path:
``load_config(overrides=...)``) to values a user or a script could write by mistake:
NaN, infinities, huge numbers, 5000-digit integers, negatives, the wrong type, dates,
deep nesting. The result must be either a config whose every value lies inside its
field's declared range, or a ``ConfigError`` whose every problem is one line. Never
another exception, never an absurd value accepted. A few cases also run through the CLI
(``esper config show``) to check exit code 2 and one line on stderr.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esper_core.config import RunConfig, load_config
from esper_core.converter import Each, Range
from esper_core.errors import ConfigError, EsperError

SECTIONS = [
    f.name for f in attrs.fields(RunConfig) if attrs.has(type(getattr(RunConfig(), f.name)))
]
FIELDS = [
    (section, field)
    for section in SECTIONS
    for field in attrs.fields(type(getattr(RunConfig(), section)))
]
FIELD_IDS = [f"{section}.{field.name}" for section, field in FIELDS]

# Raw --set values, written as a user would type them (TOML, or a bare word).
NASTY = [
    "nan",
    "-nan",
    "inf",
    "-inf",
    "1e20",
    "-1e20",
    "1e308",
    "1e400",
    "1" + "0" * 5000,  # more digits than Python converts
    "9" * 4000,
    "9223372036854775808",  # 2**63
    "4294967296",  # 2**32
    "100000",
    "1e8",
    "-1",
    "-5",
    "0",
    "0.5",
    "1e-320",
    "true",
    '"abc"',
    '""',
    "bare-word",
    "../escape",
    "/abs/escape",
    "x" * 300,
    "[]",
    "[1, 2]",
    "[nan]",
    "[1e20, 3]",
    '["cpu", "cuda:x"]',
    "{a = 1}",
    "{a = nan}",
    "1979-05-27T07:32:00Z",
    "07:32:00",
    "[" * 40 + "]" * 40,
    "[" * 3000 + "]" * 3000,
    "{a = " * 40 + "1" + "}" * 40,
]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _in_range(check: Range, value: Any) -> bool:
    """The field's declared interval, tested here independently of the converter."""
    if check.lo is not None and (value <= check.lo if check.lo_open else value < check.lo):
        return False
    return check.hi is None or (value < check.hi if check.hi_open else value <= check.hi)


def assert_sane(config: RunConfig, section: str, field: attrs.Attribute) -> None:  # type: ignore[type-arg]
    value = getattr(getattr(config, section), field.name)
    check = field.metadata.get("check")
    values = value if isinstance(value, list) else [value]
    inner = check.inner if isinstance(check, Each) else check
    for item in values:
        if _number(item):
            assert math.isfinite(item), (section, field.name, item)
            assert -(2**63) <= item < 2**63, (section, field.name, item)
            assert isinstance(inner, Range), f"{section}.{field.name} has no declared range"
            assert _in_range(inner, item), (section, field.name, item)
        if isinstance(item, str):
            assert len(item) < 10_000


def outcome(section: str, field: attrs.Attribute, raw: str) -> None:  # type: ignore[type-arg]
    try:
        config = load_config(overrides=[f"{section}.{field.name}={raw}"])
    except ConfigError as exc:
        assert exc.problems, raw
        for line in exc.problems:
            assert "\n" not in line and len(line) < 1000, line
            assert line.startswith((f"{section}", "--set ")), line
        return
    assert_sane(config, section, field)


@pytest.mark.parametrize(("section", "field"), FIELDS, ids=FIELD_IDS)
def test_every_numeric_field_has_a_finite_range(section: str, field: attrs.Attribute) -> None:  # type: ignore[type-arg]
    default = getattr(getattr(RunConfig(), section), field.name)
    annotated = str(field.type)
    if not any(t in annotated for t in ("int", "float")) or annotated == "bool":
        return
    check = field.metadata.get("check")
    inner = check.inner if isinstance(check, Each) else check
    assert isinstance(inner, Range), f"{section}.{field.name}: numeric field without a range"
    assert inner.lo is not None and inner.hi is not None, (section, field.name, inner)
    assert all(map(math.isfinite, (inner.lo, inner.hi)))
    for item in default if isinstance(default, list) else [default]:
        assert item is None or _in_range(inner, item), (section, field.name, "default")


@pytest.mark.parametrize(("section", "field"), FIELDS, ids=FIELD_IDS)
def test_every_field_refuses_nasty_values_in_one_line(section: str, field: attrs.Attribute) -> None:  # type: ignore[type-arg]
    for raw in NASTY:
        outcome(section, field, raw)


def _toml_float(x: float) -> str:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return repr(x)


RAW_VALUES = st.one_of(
    st.sampled_from(NASTY),
    st.integers(-(2**70), 2**70).map(str),
    st.floats().map(_toml_float),
    st.text(max_size=12).map(lambda s: json.dumps(s, ensure_ascii=False)),
    st.text(max_size=12),
    st.lists(st.integers(-(2**40), 2**40), max_size=4).map(str),
    st.lists(st.floats(), max_size=3).map(lambda xs: "[" + ", ".join(map(_toml_float, xs)) + "]"),
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.sampled_from(range(len(FIELDS))), RAW_VALUES)
def test_random_values_for_random_fields(index: int, raw: str) -> None:
    section, field = FIELDS[index]
    outcome(section, field, raw)


# ---------------------------------------------------------------- through the CLI


def one_line_exit_2(result) -> str:  # type: ignore[no-untyped-def]
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return str(lines[0])


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        (["training.lr=inf"], "training.lr: expected a number in (0, 100], got inf"),
        (["governor.penalty=nan"], "governor.penalty: expected a number in [-1000, 0], got nan"),
        (
            ["rewards.pbrs.shaping_weight=inf"],
            "rewards.pbrs.shaping_weight: expected a number in [0, 1000], got inf",
        ),
        (["env.max_epochs=1e20"], "env.max_epochs: expected an integer in [1, 100000]"),
        (["env.history_length=1e8"], "env.history_length: expected an integer in [1, 1000]"),
        (["run.seed=1e20"], "run.seed: expected an integer in [0, 4294967295]"),
        (["run.seed=" + "1" * 5000], "a number has too many digits"),
        (["run.threads=100000"], "run.threads: expected an integer in [0, "),
        (["run.name=../escape"], "run.name: expected a single file name"),
        (["run.name=/abs/escape"], "run.name: expected a single file name"),
        (["run.name=" + "n" * 300], "run.name: expected a single file name"),
        (["run.name=1979-05-27T07:32:00Z"], "dates and times are not config values"),
        (["tasks.digits.x=" + "[" * 3000 + "]" * 3000], "nested more than 32 levels deep"),
        (["telemetry.console.file=/tmp/escape.txt"], "telemetry.console.file: expected a relative"),
        (["telemetry.console.file=../escape.txt"], "telemetry.console.file: expected a relative"),
        (
            ['run.telemetry=["tensorboard"]', "telemetry.tensorboard.subdir=../tb"],
            "telemetry.tensorboard.subdir: expected a relative path",
        ),
        (
            ['run.telemetry=["tensorboard"]', "telemetry.tensorboard.subdir=/tmp/tb"],
            "telemetry.tensorboard.subdir: expected a relative path",
        ),
    ],
)
def test_cli_refuses_in_one_line(invoke, sets: list[str], expected: str) -> None:  # type: ignore[no-untyped-def]
    args = ["config", "show"]
    for s in sets:
        args += ["--set", s]
    assert expected in one_line_exit_2(invoke(*args))


@pytest.mark.timeout(30)  # before the fix, reading the FIFO blocked forever
def test_cli_refuses_a_fifo_config(invoke, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    fifo = tmp_path / "esper.toml"
    os.mkfifo(fifo)
    line = one_line_exit_2(invoke("config", "show", "--config", str(fifo)))
    assert line == f"error: {fifo}: not a regular file; a config must be a TOML or JSON file"


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("big.toml", "# padding\n" * 110_000, "larger than 1024 KiB"),
        ("date.toml", "[run]\nname = 1979-05-27T07:32:00Z\n", "dates and times are not config"),
        ("deep.toml", "x = " + "[" * 3000 + "]" * 3000, "nested more than 32 levels deep"),
        ("deep.json", '{"a":' * 3000 + "1" + "}" * 3000, "nested more than 32 levels deep"),
        ("nan.json", '{"training": {"lr": NaN}}', "training.lr: expected a number"),
        (
            "inf.toml",
            "[rewards.pbrs]\nshaping_weight = inf\n",
            "expected a number in [0, 1000], got inf",
        ),
    ],
)
def test_cli_refuses_config_files_in_one_line(
    invoke, tmp_path: Path, name: str, text: str, expected: str
) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / name
    path.write_text(text)
    assert expected in one_line_exit_2(invoke("config", "show", "--config", str(path)))


def test_cli_blueprints_refuses_a_negative_width(invoke) -> None:  # type: ignore[no-untyped-def]
    for width in ("-5", "0", "10000000000"):
        assert "--channels" in one_line_exit_2(invoke("blueprints", "--channels", width))


def test_a_config_error_is_an_esper_error() -> None:
    assert issubclass(ConfigError, EsperError)
