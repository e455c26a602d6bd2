"""Config loading, validation messages, overrides and the TOML round trip."""

from __future__ import annotations

import json

import pytest

from esper_core.config import RunConfig, config_to_dict, dump_toml, load_config, parse_override
from esper_core.converter import structure
from esper_core.errors import ConfigError


def problems(**kwargs: object) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(**kwargs)  # type: ignore[arg-type]
    return info.value.problems


def test_defaults_match_domain() -> None:
    c = RunConfig()
    assert (c.training.host_lr, c.training.host_momentum, c.training.host_weight_decay) == (
        0.01,
        0.9,
        5e-4,
    )
    assert c.training.grad_clip == 1.0
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
        "env.max_epochs: expected an integer >= 1, got 0"
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
