"""Issue 33, the attack on the surfaces added after the replay was written: lists in a
config, ``[[policies]]`` entries with ``checkpoints``, the records of finished compare
cells, host width growth and ``policies.schedule`` on a schedule that cannot happen, and
the Gymnasium adapter's seeds. Each test failed on the code before its fix
(RELIABILITY.md, "Issue 33: the newer surfaces")."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, cast

import pytest

from esper_core.compare.experiment import Cell, parse_experiment
from esper_core.compare.preview import wall_time
from esper_core.compare.results import read_cell
from esper_core.config import RunConfig, load_config
from esper_core.errors import ConfigError, RunDirError
from tests.conftest import Invoke
from tests.plugin_set import FAKE_COMPONENTS
from tests.reliability.cli_runs import failed_in_one_line

# ---------------------------------------------------------------- lists in a config


@pytest.mark.parametrize(
    ("assignment", "expected"),
    [
        # was: "unknown telemetry component 'j'"
        ('run.telemetry="jsonl"', 'run.telemetry: expected a list such as [...], got "jsonl"'),
        # was: "'c', 'o', 'n', ... not installed"
        (
            'env.blueprints="conv_heavy"',
            'env.blueprints: expected a list such as [...], got "conv_heavy"',
        ),
        # a table's keys became the list
        ("env.blueprints={a=1}", "env.blueprints: expected a list such as [...], got {'a': 1}"),
    ],
)
def test_a_string_or_table_where_a_list_belongs_is_refused_not_split(
    assignment: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(overrides=[assignment])
    assert caught.value.problems == [expected]


def test_a_string_for_a_plugin_list_option_is_refused_in_one_line(invoke: Invoke) -> None:
    line = failed_in_one_line(
        invoke(
            "config", "show", "--policy", "static",
            "--set", 'policies.static.seeds="conv_heavy@r0c0"',
        )
    )  # fmt: skip
    assert 'policies.static.seeds: expected a list such as [...], got "conv_heavy@r0c0"' in line


def test_the_checks_of_a_policy_entry_run_inside_the_list_of_policies() -> None:
    # The NUL passed: check_values did not look inside lists of entries.
    data = {"policies": [{"name": "ppo", "checkpoints": ["runs/a/checkpoint.pt", "a\0b"]}]}
    with pytest.raises(ConfigError, match=r"policies\.0\.checkpoints: item 1: expected a path"):
        parse_experiment(data)


# ---------------------------------------------------------------- finished cells' records


def _summary(**changes: Any) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "status": "completed",
        "final_test_acc_mean": 81.5,
        "params_added_mean": 100.0,
        "host_params": 600,
        "seeds_fossilized": 1,
        "seeds_pruned": 0,
        "wall_time": 12.0,
        "episodes": [{"final_test_loss": 0.5, "seeds_germinated": 1}],
    }
    summary.update(changes)
    return summary


def _cell(root: Path, summary: dict[str, Any]) -> Cell:
    cell = Cell("tiny", "scripted", 0, cast(RunConfig, None))
    directory = cell.directory(root)
    directory.mkdir(parents=True)
    # allow_nan: json writes NaN and Infinity as a forged file holds them
    (directory / "summary.json").write_text(json.dumps(summary, allow_nan=True))
    return cell


def test_an_intact_cell_record_is_read(tmp_path: Path) -> None:
    result = read_cell(_cell(tmp_path, _summary()), tmp_path)
    assert result is not None and result.final_test_acc == 81.5 and result.wall_time == 12.0


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"final_test_acc_mean": math.nan}, "final_test_acc_mean = nan"),
        ({"final_test_acc_mean": 1e300}, "final_test_acc_mean = 1e+300"),
        ({"final_test_acc_mean": -50}, "final_test_acc_mean = -50"),
        ({"params_added_mean": math.inf}, "params_added_mean = inf"),
        ({"seeds_pruned": -3}, "seeds_pruned = -3"),
        ({"seeds_fossilized": 1.5}, "seeds_fossilized = 1.5"),
        ({"wall_time": math.nan}, "wall_time = nan"),
        ({"wall_time": True}, "wall_time = True"),
        ({"episodes": [{"final_test_loss": math.nan}]}, "final_test_loss = nan"),
        ({"episodes": ["x"]}, "AttributeError"),
    ],
)
def test_a_forged_number_in_a_finished_cell_is_named_not_tabled(
    tmp_path: Path, changes: dict[str, Any], named: str
) -> None:
    cell = _cell(tmp_path, _summary(**changes))
    with pytest.raises(RunDirError, match="is damaged") as caught:
        read_cell(cell, tmp_path)
    assert named in str(caught.value)
    assert "delete that run directory" in str(caught.value)


def test_a_diverged_runs_infinite_test_loss_is_still_read(tmp_path: Path) -> None:
    cell = _cell(tmp_path, _summary(episodes=[{"final_test_loss": math.inf}]))
    result = read_cell(cell, tmp_path)
    assert result is not None and result.final_test_loss == math.inf


@pytest.mark.parametrize("forged", [math.nan, math.inf, -5.0, "12"])
def test_the_dry_run_estimate_names_a_forged_wall_time(
    invoke: Invoke, tmp_path: Path, forged: object
) -> None:
    # NaN and inf were a ValueError / OverflowError traceback; -5 an estimate of "-5 s".
    out = tmp_path / "exp"
    _cell(out, _summary(wall_time=forged))
    with pytest.raises(RunDirError, match="wall_time"):
        wall_time(Cell("tiny", "scripted", 0, cast(RunConfig, None)).directory(out))
    args = ["compare", *FAKE_COMPONENTS, "--seeds", "2", "--out", str(out), "--dry-run"]
    line = failed_in_one_line(invoke(*args))
    assert "summary.json is damaged (wall_time = " in line


# ---------------------------------------------------------------- training runs


def _experiment_of(policies: list[Any]) -> Any:
    from esper_core.compare.experiment import build_experiment

    return build_experiment(parse_experiment({"policies": policies}), load_config())


def _trained(directory: Path, content: bytes) -> Path:
    directory.mkdir(parents=True)
    (directory / "checkpoint.pt").write_bytes(content)
    return directory / "checkpoint.pt"


@pytest.mark.parametrize(
    "second",
    [
        "{a}/../a/checkpoint.pt",  # `..` in the path
        "{a}/./checkpoint.pt",
        "{a}",  # the run directory: ppo:DIR loads DIR/checkpoint.pt
        "{link}/checkpoint.pt",  # a link to the run directory
        "{copy}/checkpoint.pt",  # `cp -r` of the run directory
    ],
)
def test_one_training_run_under_two_names_is_not_two_runs(tmp_path: Path, second: str) -> None:
    # Each was two arms and "training runs 2 x N seeds": one run counted twice, with an
    # interval as narrow as if two independent runs agreed.
    a = _trained(tmp_path / "a", b"run a").parent
    _trained(tmp_path / "copy", b"run a")
    (tmp_path / "link").symlink_to(a)
    name = second.format(a=a, link=tmp_path / "link", copy=tmp_path / "copy")
    from esper_core.compare.experiment import ExperimentError

    with pytest.raises(ExperimentError) as caught:
        _experiment_of([{"name": "ppo", "checkpoints": [str(a / "checkpoint.pt"), name]}])
    (problem,) = caught.value.problems
    assert f"checkpoint {name!r} is the same training run as " in problem


def test_two_training_runs_and_two_missing_files_are_still_two_runs(tmp_path: Path) -> None:
    a = _trained(tmp_path / "a", b"run a")
    b = _trained(tmp_path / "b", b"run b")
    assert len(_experiment_of([{"name": "ppo", "checkpoints": [str(a), str(b)]}]).policies) == 2
    missing = [str(tmp_path / "x" / "checkpoint.pt"), str(tmp_path / "y" / "checkpoint.pt")]
    assert len(_experiment_of([{"name": "ppo", "checkpoints": missing}]).policies) == 2
