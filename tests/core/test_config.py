"""Config loading, validation messages, overrides and the TOML round trip."""

from __future__ import annotations

import json

import pytest

from esper_core.config import (
    RunConfig,
    RunSection,
    config_to_dict,
    dump_toml,
    load_config,
)
from esper_core.config_io import parse_override
from esper_core.converter import structure
from esper_core.errors import ConfigError


def problems(**kwargs: object) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(**kwargs)  # type: ignore[arg-type]
    return info.value.problems


def test_defaults_match_domain() -> None:
    c = RunConfig()
    # The recipe is the task's (esper_core.recipe); the config leaves it unset.
    assert (c.training.optimizer, c.training.lr, c.training.schedule) == (None, None, None)
    assert c.training.grad_clip == 1.0 and not c.training.clip_per_group
    assert c.lifecycle.min_training_epochs == 10 and c.lifecycle.min_gradient_health == 0.7
    assert c.lifecycle.embargo_epochs == 5 and c.lifecycle.tempos == [3, 5, 8]
    assert c.governor.snapshot_every == 5 and c.governor.penalty == -10.0
    assert c.run.gamma == 0.995 and c.run.task == "digits" and c.run.policy == "heuristic"


def test_unknown_key_names_the_section_and_allowed_keys() -> None:
    (line,) = problems(overrides=["env.bogus=1"])
    assert line.startswith("env: unknown key(s) bogus; allowed keys are max_epochs")


def test_wrong_type_has_a_path() -> None:
    assert problems(overrides=['run.gamma="abc"']) == ['run.gamma: expected a number, got "abc"']
    assert problems(overrides=["run.seed=true"]) == ["run.seed: expected an integer, got True"]
    assert problems(overrides=["training.amp=3"]) == ["training.amp: expected a string, got 3"]


def test_out_of_range_and_enum() -> None:
    assert problems(overrides=["run.gamma=2"]) == [
        "run.gamma: expected a number in (0, 1], got 2.0"
    ]
    assert problems(overrides=["env.max_epochs=0"]) == [
        "env.max_epochs: expected an integer in [1, 100000], got 0"
    ]
    assert problems(overrides=["training.amp=fp8"]) == [
        'training.amp: expected one of off, bf16, fp16, got "fp8"'
    ]


def test_every_problem_is_reported_at_once() -> None:
    lines = problems(overrides=["run.gamma=2", "env.max_epochs=0", "training.grad_clip=-1"])
    assert len(lines) == 3


def test_broken_toml_names_the_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.toml"
    bad.write_text("[run\nseed = 1\n")
    (line,) = problems(path=bad)
    assert str(bad) in line and "not valid TOML" in line


def test_missing_file() -> None:
    (line,) = problems(path="/nonexistent/esper.toml")
    assert "config file not found" in line


def test_json_config(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"run": {"seed": 7}, "env": {"max_epochs": 3}}))
    c = load_config(path)
    assert c.run.seed == 7 and c.env.max_epochs == 3


def test_overrides_parse_toml_values_and_bare_words() -> None:
    assert parse_override("run.seed=3") == (["run", "seed"], 3)
    assert parse_override('run.telemetry=["jsonl"]') == (["run", "telemetry"], ["jsonl"])
    assert parse_override("run.task=digits") == (["run", "task"], "digits")
    with pytest.raises(ConfigError, match=r"section\.key=value"):
        parse_override("nonsense")


def test_set_wins_over_file_and_flags(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "c.toml"
    path.write_text("[run]\nseed = 1\nepisodes = 4\n")
    c = load_config(path, ["run.seed=5"], {"run": {"seed": 3, "n_envs": 2}})
    assert (c.run.seed, c.run.episodes, c.run.n_envs) == (5, 4, 2)


def test_component_tables_are_kept_raw_for_their_components() -> None:
    c = load_config(overrides=["rewards.pbrs.weight=0.5"])
    assert c.rewards == {"pbrs": {"weight": 0.5}}


def test_toml_round_trip() -> None:
    import tomllib

    c = load_config(overrides=["run.seed=9", 'env.slots=["r0c1"]', "rewards.pbrs.weight=0.25"])
    text = dump_toml(c)
    data = tomllib.loads(text)
    assert data["schema_version"] == 1
    data.pop("schema_version")
    assert structure(data, RunConfig) == c
    assert "schema_version" in config_to_dict(c)


def test_cross_field_validation() -> None:
    lines = problems(overrides=["lifecycle.default_tempo=4"])
    assert lines == ["lifecycle: default_tempo 4 is not one of tempos [3, 5, 8]"]


# -------------------------------------------------------------------------- nothing absurd


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("training.lr=inf", "training.lr: expected a number in (0, 100], got inf"),
        ("governor.penalty=nan", "governor.penalty: expected a number in [-1000, 0], got nan"),
        ("env.plateau_delta=-inf", "env.plateau_delta: expected a number in [0, 100], got -inf"),
        ("env.max_epochs=1e20", "env.max_epochs: expected an integer in [1, 100000], got "),
        ("env.history_length=1e8", "env.history_length: expected an integer in [1, 1000], got "),
        ("run.seed=1e20", "run.seed: expected an integer in [0, 4294967295], got "),
        ("run.seed=" + "1" * 4000, "run.seed: expected an integer in [0, 4294967295], got an"),
        ("run.seed=" + "1" * 5000, '--set "run.seed=111'),
        ("run.gamma=" + "1" * 4000, "run.gamma: expected a finite number, got an integer of"),
        ("run.threads=100000", "run.threads: expected an integer in [0, "),
        ("lifecycle.tempos=[3, 5, 1e9]", "lifecycle.tempos: item 2: expected an integer in [1, "),
    ],
)
def test_non_finite_and_absurd_numbers_are_refused(override: str, expected: str) -> None:
    (line,) = problems(overrides=[override])
    assert line.startswith(expected) and "\n" not in line and len(line) < 400


def test_threads_are_bounded_by_the_cpus() -> None:
    from esper_core.config import MAX_THREADS

    assert 4 <= MAX_THREADS <= 1024
    assert load_config(overrides=[f"run.threads={MAX_THREADS}"]).run.threads == MAX_THREADS
    (line,) = problems(overrides=[f"run.threads={MAX_THREADS + 1}"])
    assert line == f"run.threads: expected an integer in [0, {MAX_THREADS}], got {MAX_THREADS + 1}"
    assert "at most 4 per usable CPU" in RunSection.__attrs_attrs__.threads.metadata["doc"]


@pytest.mark.parametrize(
    "name", ["../escape", "/abs/escape", "a" * 300, "a/b", ".", "..", ".hidden", "", "a\nb", "x:y"]
)
def test_run_name_is_one_safe_path_component(name: str) -> None:
    (line,) = problems(extra={"run": {"name": name}})
    assert line.startswith("run.name: expected a single file name") and "\n" not in line


def test_a_safe_run_name_is_kept() -> None:
    assert load_config(overrides=["run.name=digits-ppo_v2.1"]).run.name == "digits-ppo_v2.1"


def test_nesting_and_datetimes_are_refused_in_overrides() -> None:
    (line,) = problems(overrides=["run.name=1979-05-27T07:32:00Z"])
    assert line.endswith("dates and times are not config values, got 1979-05-27T07:32:00+00:00")
    (line,) = problems(overrides=["tasks.x=" + "[" * 3000 + "]" * 3000])
    assert line.endswith("nested more than 32 levels deep")
    (line,) = problems(overrides=["tasks.x=" + "[" * 40 + "]" * 40])
    assert line.endswith("nested more than 32 levels deep")
    (line,) = problems(overrides=["a." * 100 + "b=1"])
    assert line.endswith("key nested more than 32 levels deep")


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("d.toml", "[run]\nname = 1979-05-27\n", "run.name: dates and times are not config"),
        ("t.toml", "[tasks.x]\nat = 07:32:00\n", "tasks.x.at: dates and times are not config"),
        ("deep.toml", "x = " + "[" * 5000 + "]" * 5000, "not valid TOML: nested more than 32"),
        ("deep.json", '{"a":' * 5000 + "1" + "}" * 5000, "not valid JSON: nested more than 32"),
        ("d40.json", '{"a":' * 40 + "1" + "}" * 40, "nested more than 32 levels deep"),
        ("big.json", '{"a": ' + "1" * 5000 + "}", "not valid JSON: a number has too many digits"),
        ("big.toml", "[run]\nseed = " + "1" * 5000, "not valid TOML: a number has too many digits"),
    ],
)
def test_files_that_parse_into_no_config(tmp_path, name: str, text: str, expected: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / name
    path.write_text(text)
    (line,) = problems(path=path)
    assert line.startswith(str(path)) and expected in line and "\n" not in line


@pytest.mark.timeout(20)  # before the fix, open() on the FIFO blocked forever
def test_a_fifo_is_refused_without_blocking(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os

    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)  # opening it for reading would block until a writer comes
    assert problems(path=fifo) == [
        f"{fifo}: not a regular file; a config must be a TOML or JSON file"
    ]


def test_config_files_must_be_small_regular_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # /dev/null is a device like /dev/zero (which, read to its end, never ends).
    assert problems(path="/dev/null") == [
        "/dev/null: not a regular file; a config must be a TOML or JSON file"
    ]
    assert problems(path=tmp_path)[0].endswith(
        "not a regular file; a config must be a TOML or JSON file"
    )
    big = tmp_path / "big.toml"
    big.write_text("# padding\n" * 110_000)  # 1.1 MB of valid TOML
    assert problems(path=big) == [f"{big}: larger than 1024 KiB; not a config file"]
    latin = tmp_path / "latin.toml"
    latin.write_bytes(b'[run]\nname = "\xe9"\n')
    assert "not UTF-8 text" in problems(path=latin)[0]


def test_every_option_must_be_finite_unless_it_says_otherwise() -> None:
    from attrs import define

    from esper_core.converter import in_range, options_field

    @define
    class Opts:
        limit: float = options_field(1.0, in_range(0), "0..inf")
        ratios: list[float] = options_field([1.0])
        free: float = options_field(1.0, allow_nonfinite=True)
        seed: int = options_field(0)

    assert structure({"free": float("inf")}, Opts).free == float("inf")
    with pytest.raises(ConfigError) as info:
        structure(
            {"limit": float("inf"), "ratios": [1.0, float("nan")], "seed": 2**63},
            Opts,
            "tasks.t",
        )
    assert info.value.problems == [
        "tasks.t.limit: expected a finite number, got inf",
        "tasks.t.ratios: item 1: expected a finite number, got nan",
        "tasks.t.seed: expected an integer in [-2**63, 2**63), got 9223372036854775808",
    ]


def test_paths_inside_the_run_directory() -> None:
    from esper_core.converter import path_component, relative_path

    for good in ["tb", "logs/tb", "a.b/c_d-1", "x+y=z"]:
        assert relative_path(good) is None
    for bad in ["", "/abs", "../x", "a/../../x", "a//b", "a/", "~/x", "a/./b", "C:x", "a\\..\\b"]:
        assert relative_path(bad) is not None, bad
    assert path_component("run-1") is None and path_component("a/b") is not None
