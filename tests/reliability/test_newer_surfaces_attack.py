"""The attack on the surfaces added after the replay was written: lists in a
config, ``[[policies]]`` entries with ``checkpoints``, the records of finished compare
cells, host width growth and ``policies.schedule`` on a schedule that cannot happen, and
the Gymnasium adapter's seeds. Each test failed on the code before its fix
(RELIABILITY.md, "the newer surfaces")."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, cast

import pytest

from esper_core.compare.cell_result import read_cell
from esper_core.compare.experiment import Cell, parse_experiment
from esper_core.compare.preview import wall_time
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
        ({"wall_time": 1e308}, "wall_time = 1e+308"),
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


@pytest.mark.parametrize("forged", [math.nan, math.inf, -5.0, "12", 1e308])
def test_the_dry_run_estimate_names_a_forged_wall_time(
    invoke: Invoke, tmp_path: Path, forged: object
) -> None:
    # NaN and inf were a ValueError / OverflowError traceback; -5 an estimate of "-5 s".
    out = tmp_path / "exp"
    _cell(out, _summary(wall_time=forged))
    # A comparison's own directory (a --out holding cells without it is refused first).
    (out / "experiment.json").write_text("{}", encoding="utf-8")
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


# ---------------------------------------------------------------- host width growth


def _specs_env(host: Any, max_epochs: int = 10) -> Any:
    from types import SimpleNamespace

    from esper_core.run.resolve import resolve_operators
    from tests.plugin_set import plugin_manager

    operators = {op.name: op for op in resolve_operators(plugin_manager())}
    return SimpleNamespace(
        model=SimpleNamespace(host=host), max_epochs=max_epochs, operators=operators
    )


def _cnn(base_channels: int = 32, n_blocks: int = 1) -> Any:
    from esper_tasks.hosts.cnn import CNNHost

    return CNNHost(1, 10, base_channels, n_blocks)


def _problems(host: Any, max_epochs: int = 10, **spec: Any) -> list[str]:
    from esper_core.components.policy import WidthGrowthSpec
    from esper_core.env.host_growth import check_specs

    with pytest.raises(ConfigError) as caught:
        check_specs([WidthGrowthSpec(**spec)], _specs_env(host, max_epochs))
    return caught.value.problems


def test_a_width_growth_due_after_the_last_epoch_is_refused_before_training() -> None:
    # widen_at 0.9 of 4 epochs was epoch 4: the host widened after its last epoch, never
    # trained, and the summary said "growth kept: host widened 2x".
    (problem,) = _problems(_cnn(), 4, at=0.9)
    assert "starts at epoch round(0.9 x 4) = 4, after the run's last epoch (3)" in problem
    assert "choose at most 0.75" in problem


def test_a_factor_that_adds_no_channel_is_refused_before_training() -> None:
    # x 1.01 of 32 channels is 32 again: refused only at the growth's epoch, mid-run.
    (problem,) = _problems(_cnn(), at=0.5, factor=1.01)
    assert "stage 0 is 32 wide and x 1.01 rounds to 32: nothing to widen" in problem
    factor = float(problem.rsplit("at least ", 1)[1])
    assert round(32 * factor) > 32  # the factor it suggests does widen


def test_a_widened_host_past_the_task_hosts_bound_is_refused_before_training() -> None:
    from esper_core.components.policy import WidthGrowthSpec
    from esper_core.config_limits import MAX_HOST_WEIGHTS
    from esper_core.env.host_growth import check_specs

    host = _cnn(base_channels=512, n_blocks=2)  # 4.7M weights: inside the tasks' bound
    (problem,) = _problems(host, at=0.5, factor=8.0)  # 512 -> 4096 and 1024 -> 8192 channels
    assert f"at most {MAX_HOST_WEIGHTS:,}" in problem and "lower the factor" in problem
    check_specs([WidthGrowthSpec(at=0.5, factor=4.0)], _specs_env(host))  # 76M: fine


def test_a_stage_named_twice_is_refused(invoke: Invoke) -> None:
    line = failed_in_one_line(
        invoke(
            "config", "show", "--policy", "static", "--set", "policies.static.widen_stages=[0,0]"
        )
    )
    assert "policies.static.widen_stages: 0 is named twice; name each item once" in line


def test_a_schedule_due_after_the_last_epoch_is_refused(invoke: Invoke, tmp_path: Path) -> None:
    # at = 1 germinated nothing and the run was wait's, without a word.
    args = [
        "run", "--policy", "schedule", "--max-epochs", "4", "--quiet",
        "--set", "run.telemetry=[]", "--set", 'policies.schedule.seeds=["conv_heavy@r0c0"]',
        "--set", "policies.schedule.at=1", "--out", str(tmp_path / "r"),
    ]  # fmt: skip
    line = failed_in_one_line(invoke(*args))
    assert "policies.schedule.at: 1 of 4 epochs is epoch 4, after the run's last epoch" in line
    assert not (tmp_path / "r" / "checkpoint.pt").exists()


# ---------------------------------------------------------------- the Gymnasium adapter


@pytest.mark.parametrize("seed", [2**40, 2**70])
def test_a_seed_past_the_configs_range_leaves_the_gym_env_usable(seed: Any) -> None:
    pytest.importorskip("gymnasium")
    from esper_core.env.gym import EsperGymEnv
    from tests.plugin_set import plugin_manager

    env = EsperGymEnv(
        overrides=['run.task="tiny"', 'run.policy="scripted"', "run.telemetry=[]"],
        pm=plugin_manager("tests.fake_plugin"),
    )
    env.reset(seed=3)
    # Was: 2**70 kept as the env's seed before torch refused it, and every reset() after
    # failed with "Overflow when unpacking long long"; 2**40 overflowed at germination.
    with pytest.raises(
        ValueError, match=r"reset\(seed=...\) takes an integer in \[0, 4294967295\]"
    ):
        env.reset(seed=seed)
    _, info = env.reset()
    assert info["observation"].epoch == 0


@pytest.mark.parametrize(
    "action",
    [[1, 0, 999, 0, 0, 0], [1, 0, 0, 99, 0, 0], [1, 0, 0, 0, 99, 0], [3, 0, 0, 0, 0, 99]],
)
def test_an_index_past_its_head_is_refused_not_an_index_error(action: list[int]) -> None:
    # Was: IndexError from describing the action, after the epoch had trained.
    pytest.importorskip("gymnasium")
    import numpy as np

    from esper_core.env.gym import EsperGymEnv
    from tests.plugin_set import plugin_manager

    env = EsperGymEnv(
        overrides=['run.task="tiny"', 'run.policy="scripted"', "run.telemetry=[]"],
        pm=plugin_manager("tests.fake_plugin"),
    )
    env.reset(seed=0)
    *_, info = env.step(np.array(action))
    assert "out of range" in info["refused"]


def test_an_action_is_described_without_wrapping_a_negative_index() -> None:
    from esper_core.lifecycle.actions import Action, ActionSpace, LifecycleOp

    space = ActionSpace(("r0c0", "r0c1"), ("cnn/a", "cnn/b"), ("linear_add",), (3,), (0.5,))
    action = Action(LifecycleOp.GERMINATE, slot=-1, blueprint=-1, style=0, tempo=0)
    assert space.describe(action) == "GERMINATE #-1 #-1 linear_add tempo=3"


@pytest.mark.parametrize("length", [3, 9])
def test_an_action_of_the_wrong_length_says_what_an_action_is(length: int) -> None:
    from esper_core.lifecycle.actions import Action

    with pytest.raises(
        ValueError, match=rf"an action is 6 indices, one per head \(op, .*got {length}"
    ):
        Action.from_indices([0] * length)


@pytest.mark.parametrize("bad", [math.nan, "WAIT", 1.5])
def test_an_action_that_is_not_integers_says_what_an_action_is(bad: object) -> None:
    from esper_core.lifecycle.actions import Action

    with pytest.raises(ValueError, match="an action is 6 integer indices, one per head"):
        Action.from_indices([bad, 0, 0, 0, 0, 0])
