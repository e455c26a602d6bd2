"""Property-based fuzzing: every invalid config or argument list gets exit code 2 and one
line of explanation, never a traceback."""

from __future__ import annotations

from pathlib import Path

import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.plugin_set import FAKE_COMPONENTS
from tests.plugin_set import FAKE_PLUGIN as FAKE

SECTIONS = ["run", "env", "training", "lifecycle", "governor", "train", "rewards", "tasks", "bogus"]
KEYS = [
    "seed",
    "gamma",
    "max_epochs",
    "batch_size",
    "amp",
    "compile",
    "gate_mode",
    "tempos",
    "episodes",
    "n_envs",
    "device",
    "telemetry",
    "k_chance",
    "penalty",
    "embargo_epochs",
    "slots",
    "x",
    "task",
    "name",
    "threads",
    "history_length",
    "lr",
]
SCALARS = st.one_of(
    st.integers(-(10**6), 10**6),
    st.integers(-(2**80), 2**80),
    st.floats(),  # NaN and infinities included
    st.datetimes(),
    st.booleans(),
    st.text(max_size=8),
    st.lists(st.integers(-5, 5), max_size=3),
    st.lists(st.text(max_size=4), max_size=3),
)


def check(result) -> None:  # type: ignore[no-untyped-def]
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert result.exit_code in (0, 2), (result.exit_code, result.stderr)
    if result.exit_code == 2:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr


config_tables = st.dictionaries(
    st.sampled_from(SECTIONS),
    st.one_of(SCALARS, st.dictionaries(st.sampled_from(KEYS), SCALARS, max_size=4)),
    max_size=4,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(config_tables)
def test_random_config_files(invoke, tmp_path_factory, data) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path_factory.mktemp("cfg") / "c.toml"
    path.write_text(tomli_w.dumps(data))
    check(invoke("config", "show", "--plugin", FAKE, "--config", str(path)))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=24), max_size=4)
)
def test_random_set_overrides(invoke, sets) -> None:  # type: ignore[no-untyped-def]
    args = ["config", "show", "--plugin", FAKE]
    for s in sets:
        args += ["--set", s]
    check(invoke(*args))


OPTIONS = [
    "--seed",
    "--envs",
    "--max-epochs",
    "--episodes",
    "--device",
    "--task",
    "--policy",
    "--reward",
    "--executor",
    "--telemetry",
    "--set",
    "--config",
    "--out",
    "--resume",
    "--plugin",
    "--bogus",
]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(st.tuples(st.sampled_from(OPTIONS), st.text(max_size=10)), min_size=1, max_size=4),
    st.sampled_from(["run", "train", "config show"]),
)
def test_random_arguments(invoke, pairs, command) -> None:  # type: ignore[no-untyped-def]
    # A final invalid value makes sure nothing actually starts training.
    args = [*command.split(), "--plugin", FAKE]
    for option, value in pairs:
        args += [option, value]
    args += ["--set", "run.episodes=0", "--set", "train.updates=0"]
    check(invoke(*args))


COMPARE_OPTIONS = [
    "--policy",
    "--task",
    "--seeds",
    "--seed",
    "--jobs",
    "--baseline",
    "--out",
    "--config",
    "--set",
    "--plugin",
    "--reward",
    "--device",
    "--max-epochs",
    "--resamples",
]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.tuples(st.sampled_from(COMPARE_OPTIONS), st.text(max_size=10)), min_size=1, max_size=3
    )
)
def test_random_compare_arguments(invoke, tmp_path_factory, pairs) -> None:  # type: ignore[no-untyped-def]
    # --dry-run checks the whole experiment (every cell's config, data, policy) and runs nothing.
    out = tmp_path_factory.mktemp("compare") / "exp"
    args = ["compare", *FAKE_COMPONENTS, "--seeds", "1", "--max-epochs", "2", "--out", str(out)]
    args += ["--set", "run.telemetry=[]"]
    for option, value in pairs:
        args += [option, value]
    result = invoke(*args, "--dry-run")
    check(result)
    assert not out.exists()


def test_toml_that_is_not_a_table_of_tables(invoke, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    for text in [
        "run = 3\n",
        "[run]\nseed = [1, 2]\n",
        "[env]\nslots = []\n",
        'x = "\\u0000"\n',
        "\x00\x01",
    ]:
        path = tmp_path / "c.toml"
        path.write_text(text)
        result = invoke("config", "show", "--plugin", FAKE, "--config", str(path))
        check(result)
        assert result.exit_code == 2
