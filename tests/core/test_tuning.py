"""The [tuning] search of `esper compare` without running cells: the grid, the choice rule
(ties, direction, diverged runs), the checks of the section, the planned tuning cells and
the choice read back from finished ones."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import attrs
import pytest

from esper_core.compare.comparison import RESULTS_JSON, RESULTS_MD, prepare, write_results
from esper_core.compare.experiment import (
    ExperimentError,
    build_experiment,
    parse_experiment,
    shared_config,
)
from esper_core.compare.metric import metric_kinds
from esper_core.compare.plan import plan_cells
from esper_core.compare.results import aggregate, load_results
from esper_core.compare.tuning import TuningCell, tuning_cells
from esper_core.compare.tuning_choice import choose, grid_edges, score
from esper_core.compare.tuning_grid import apply_point, grid_points
from esper_core.compare.tuning_results import VAL_ACC, VAL_LOSS, TuningResults, tuning_results
from esper_core.compare.tuning_tables import UNTUNED, edge_lines, search_rows, tuning_markdown
from esper_core.errors import ConfigError
from esper_core.plugins import PluginManager
from esper_core.run.run_dir import SUMMARY

SHARED = {"run": {"reward": "acc_delta", "telemetry": [], "seed": 10}, "env": {"max_epochs": 2}}
TUNING = {"seeds": [100, 101], "grid": {"training.grad_clip": [0.5, 1.0, 2.0]}}


def experiment_of(**changes: Any):  # type: ignore[no-untyped-def]
    data = {"policies": ["scripted"], "tasks": ["tiny"], "seeds": 3, "config": SHARED, **changes}
    spec = parse_experiment(data)
    return build_experiment(spec, shared_config(spec))


def problems_of(tuning: dict[str, Any], **changes: Any) -> list[str]:
    with pytest.raises(ExperimentError) as info:
        experiment_of(tuning=tuning, **changes)
    return info.value.problems


# ---------------------------------------------------------------- the grid and the rule


def test_grid_points_are_the_product_in_the_order_written() -> None:
    points = grid_points({"a": [1, 2], "b": ["x", "y", "z"]})
    assert points == [
        {"a": 1, "b": "x"},
        {"a": 1, "b": "y"},
        {"a": 1, "b": "z"},
        {"a": 2, "b": "x"},
        {"a": 2, "b": "y"},
        {"a": 2, "b": "z"},
    ]


def test_a_point_sets_dotted_keys_like_set_and_copies_the_data() -> None:
    data = {"training": {"grad_clip": 1.0}, "env": {}}
    out = apply_point(data, {"training.grad_clip": 0.5, "env.batch_size": 8})
    assert out == {"training": {"grad_clip": 0.5}, "env": {"batch_size": 8}}
    assert data == {"training": {"grad_clip": 1.0}, "env": {}}
    with pytest.raises(ConfigError, match=r"training\.grad_clip is a value, not a section"):
        apply_point(data, {"training.grad_clip.x": 1})


@pytest.mark.parametrize(
    ("scores", "higher", "expected"),
    [
        ([70.0, 80.0, 75.0], True, 1),  # accuracy: the highest
        ([0.9, 0.7, 0.8], False, 1),  # loss: the lowest
        ([80.0, 70.0, 80.0], True, 0),  # a tie: the first in grid order
        ([0.5, 0.7, 0.5], False, 0),
        ([70.0, 80.0, 80.0], True, 1),  # the first of the tied best, not the last
        ([math.nan, 60.0, 50.0], True, 1),  # a diverged point is never chosen over a finite one
        ([math.nan, 2.0, math.inf], False, 1),
        ([math.nan, math.nan], True, 0),  # nothing finite: the first
    ],
)
def test_the_choice_is_the_best_mean_first_on_ties(
    scores: list[float], higher: bool, expected: int
) -> None:
    assert choose(scores, higher) == expected


def test_a_score_is_the_mean_and_a_diverged_seed_spoils_it() -> None:
    assert score([1.0, 2.0, 6.0]) == 3.0
    assert math.isnan(score([1.0, math.inf]))
    assert math.isnan(score([]))


@pytest.mark.parametrize(
    ("grid", "chosen", "expected"),
    [
        ({"lr": [0.1, 0.2, 0.4]}, {"lr": 0.4}, {"lr": "highest"}),
        ({"lr": [0.2, 0.1, 0.4]}, {"lr": 0.1}, {"lr": "lowest"}),  # by value, not position
        ({"lr": [0.1, 0.2, 0.4]}, {"lr": 0.2}, {}),
        ({"lr": [0.1]}, {"lr": 0.1}, {}),  # one value: nothing to extend from
        ({"mode": ["a", "b"]}, {"mode": "b"}, {}),  # not numbers: no order
        ({"flag": [False, True]}, {"flag": True}, {}),
        ({"lr": [0.1, 0.2], "clip": [1, 2, 3]}, {"lr": 0.2, "clip": 2}, {"lr": "highest"}),
    ],
)
def test_a_choice_at_an_end_of_its_grid_is_flagged(
    grid: dict[str, list[Any]], chosen: dict[str, Any], expected: dict[str, str]
) -> None:
    assert grid_edges(grid, chosen) == expected


# ---------------------------------------------------------------- checks of the section


def test_a_valid_section_is_resolved_with_its_grid() -> None:
    experiment = experiment_of(tuning=TUNING)
    assert experiment.tuning is not None
    assert experiment.tuning.seeds == (100, 101)
    assert experiment.tuning.points() == [{"training.grad_clip": v} for v in (0.5, 1.0, 2.0)]
    assert experiment_of().tuning is None


def test_an_unquoted_dotted_key_is_the_same_key() -> None:
    """`training.grad_clip = [...]` in [tuning.grid] is a nested table in TOML."""
    nested = {"seeds": [100], "grid": {"training": {"grad_clip": [0.5, 1.0]}}}
    experiment = experiment_of(tuning=nested)
    assert experiment.tuning is not None
    assert experiment.tuning.grid == {"training.grad_clip": [0.5, 1.0]}


@pytest.mark.parametrize(
    ("tuning", "expected"),
    [
        (
            {"seeds": [100], "grid": {"training.grad_clipp": [1.0]}},
            'tuning.grid "training.grad_clipp" = 1.0: training: unknown key(s) grad_clipp',
        ),
        (
            {"seeds": [100], "grid": {"trainin.grad_clip": [1.0]}},
            'tuning.grid "trainin.grad_clip" = 1.0: (top level): unknown key(s) trainin',
        ),
        (
            {"seeds": [100], "grid": {"training.grad_clip": [1.0, -1.0]}},
            'tuning.grid "training.grad_clip" = -1.0: training.grad_clip: expected a number',
        ),
        (
            {"seeds": [100], "grid": {"env.batch_size": []}},
            'tuning.grid "env.batch_size": expected at least one value to try, got an empty list',
        ),
        (
            {"seeds": [100], "grid": {"env.batch_size": 8}},
            'tuning.grid "env.batch_size": expected a list of values to try, got 8',
        ),
        ({"seeds": [100], "grid": {}}, "tuning.grid: expected at least one key"),
        (
            {"seeds": [100], "grid": {"run.seed": [1, 2]}},
            'tuning.grid "run.seed": the run section is set by each cell',
        ),
        ({"grid": {"env.batch_size": [8]}}, "tuning.seeds: expected at least one seed"),
        (
            {"seeds": [100, 100], "grid": {"env.batch_size": [8]}},
            "tuning.seeds: 100 listed more than once",
        ),
        (
            {"seeds": [12, 13, 100], "grid": {"env.batch_size": [8]}},
            "tuning.seeds: 12 is an evaluation seed (run.seed 10 to 12); results must come "
            "from seeds nothing was tuned on: pick other tuning seeds",
        ),
        (
            {"seeds": [9, 10, 11], "grid": {"env.batch_size": [8]}},
            "tuning.seeds: 10, 11 are evaluation seeds",
        ),
        (
            {"seeds": [100], "grid": {"env.batch_size": list(range(1, 20)), "x.y": [1] * 20}},
            "tuning.grid: 380 points (the product of the lists); at most 256",
        ),
    ],
)
def test_a_bad_section_is_one_line_naming_what_is_wrong(
    tuning: dict[str, Any], expected: str
) -> None:
    problems = problems_of(tuning)
    assert len(problems) == 1, problems
    assert expected in problems[0]


def test_a_bad_metric_or_an_unknown_key_of_the_section_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"tuning\.metric: expected one of auto, accuracy, loss"):
        experiment_of(tuning={**TUNING, "metric": "val"})
    with pytest.raises(ConfigError, match=r"tuning: unknown key\(s\) grids"):
        experiment_of(tuning={**TUNING, "grids": {}})


def test_a_bad_grid_fails_in_the_cli_with_one_line_and_exit_2(invoke, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "x.toml"
    path.write_text(
        'policies = ["scripted"]\ntasks = ["tiny"]\n'
        '[tuning]\nseeds = [100]\n[tuning.grid]\n"training.nope" = [1.0]\n'
        '[config]\nrun = { reward = "acc_delta" }\n'
    )
    result = invoke("compare", str(path), "--plugin", "tests.fake_plugin", "--dry-run")
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert 'tuning.grid "training.nope" = 1.0: training: unknown key(s) nope' in lines[0]


# ---------------------------------------------------------------- the tuning cells


SWEPT = {
    "policies": ["scripted", "wait"],
    "baselines": ["static-final", "size-sweep"],
    "sweep": {"sizes": [{"label": "w2", "options": {"width": 2}}]},
}


def test_every_arm_is_searched_on_every_point_and_tuning_seed(
    pm: PluginManager, tmp_path: Path
) -> None:
    experiment = experiment_of(tuning=TUNING, **SWEPT)
    cells = tuning_cells(experiment, pm, threads=1)
    arms = ["scripted", "wait", "sweep.w2"]  # no static-final: it uses scripted's choice
    assert len(cells) == len(arms) * 3 * 2
    assert {(c.policy, c.point, c.seed) for c in cells} == {
        (a, k, s) for a in arms for k in range(3) for s in (100, 101)
    }
    for cell in cells:
        assert cell.config.run.seed == cell.seed
        assert cell.config.training.grad_clip == (0.5, 1.0, 2.0)[cell.point]
        assert cell.directory(tmp_path) == (
            tmp_path
            / "tuning"
            / "cells"
            / "tiny"
            / cell.policy
            / f"point-{cell.point}"
            / f"seed-{cell.seed}"
        )
    sized = next(c for c in cells if c.policy == "sweep.w2")
    assert sized.config.tasks["tiny"]["width"] == 2 and sized.config.run.policy == "wait"
    assert len({c.lock(tmp_path) for c in cells}) == len(cells)
    assert tuning_cells(experiment_of(**SWEPT), pm) == []


def test_a_grid_value_a_task_refuses_names_the_arm_and_the_point(pm: PluginManager) -> None:
    experiment = experiment_of(tuning={"seeds": [100], "grid": {"tasks.tiny.depth": [1]}})
    with pytest.raises(ConfigError) as info:
        tuning_cells(experiment, pm)
    assert "tuning scripted on tiny (tasks.tiny.depth=1): tasks.tiny: unknown key(s) depth" in (
        str(info.value)
    )


def test_the_dry_run_plan_counts_the_tuning_cells(pm: PluginManager, tmp_path: Path) -> None:
    experiment = experiment_of(tuning=TUNING, **SWEPT)
    _, _, plan = prepare(experiment, pm, tmp_path / "out")
    # search: 3 arms x 3 points x 2 seeds; evaluation: 3 arms x 3 seeds + 3 static-final
    assert (plan.tuning, plan.total, plan.completed) == (18, 18 + 9 + 3, 0)


def _finished(directory: Path, val_acc: float, val_loss: float) -> None:
    directory.mkdir(parents=True)
    summary = {
        "status": "completed",
        "final_val_acc_mean": val_acc,
        "episodes": [{"final_val_loss": val_loss}],
    }
    (directory / SUMMARY).write_text(json.dumps(summary))


def _search_done(cells: list[TuningCell], root: Path, acc: dict, loss: dict) -> None:
    for cell in cells:
        _finished(
            cell.directory(root),
            acc[cell.policy][cell.point][cell.seed - 100],
            loss[cell.policy][cell.point][cell.seed - 100],
        )


# Per arm, per point, per tuning seed (100, 101): accuracy favours point 2 (scripted; ties
# with point 1 for wait go to 1), loss favours point 0.
ACC = {
    "scripted": [[50.0, 60.0], [70.0, 70.0], [90.0, 80.0]],
    "wait": [[50.0, 60.0], [80.0, 70.0], [70.0, 80.0]],
    "sweep.w2": [[10.0, 10.0], [10.0, 10.0], [10.0, 10.0]],
}
LOSS = {
    "scripted": [[0.5, 0.54], [0.9, 0.9], [1.0, 1.0]],
    "wait": [[math.nan, 0.1], [0.8, 0.8], [0.6, 0.7]],  # point 0 diverged on seed 100
    "sweep.w2": [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]],
}


def test_each_arm_chooses_its_best_point_on_accuracy(pm: PluginManager, tmp_path: Path) -> None:
    experiment = experiment_of(tuning=TUNING, **SWEPT)
    cells = tuning_cells(experiment, pm)
    _search_done(cells, tmp_path, ACC, LOSS)
    tuned = tuning_results(experiment, cells, tmp_path, pm)
    assert tuned is not None and tuned.finished and tuned.seeds == [100, 101]
    chosen = {a.arm: (a.point, a.chosen) for a in tuned.arms}
    assert chosen == {
        "scripted": (2, {"training.grad_clip": 2.0}),
        "scripted.static-final": (2, {"training.grad_clip": 2.0}),
        "wait": (1, {"training.grad_clip": 1.0}),  # 75 = 75: the first
        "sweep.w2": (0, {"training.grad_clip": 0.5}),  # all equal: the first
    }
    scripted = tuned.arm("tiny", "scripted")
    assert scripted is not None and scripted.metric == VAL_ACC and scripted.higher_is_better
    assert [p.mean for p in scripted.points] == [55.0, 70.0, 85.0]
    assert scripted.points[2].scores == [90.0, 80.0]
    static = tuned.arm("tiny", "scripted.static-final")
    assert static is not None and static.same_as == "scripted" and static.points == []
    # scripted chose the top of the grid, sweep.w2 its bottom, wait its middle; each said once.
    assert {a.arm: a.edges for a in tuned.arms if a.same_as is None} == {
        "scripted": {"training.grad_clip": "highest"},
        "wait": {},
        "sweep.w2": {"training.grad_clip": "lowest"},
    }
    lines = edge_lines(tuned)
    assert len(lines) == 2 and lines[0].startswith("tiny / scripted: training.grad_clip = 2 ")
    assert "extend the grid above" in lines[0] and "extend the grid below" in lines[1]
    page = tuning_markdown(attrs.evolve(aggregate(experiment, [], tmp_path), tuning=tuned))
    assert "At the edge of the grid:" in page and f"- {lines[1]}" in page
    # The evaluation cells carry each arm's choice.
    planned = plan_cells(experiment, pm, chosen=tuned.chosen())
    clips = {(c.policy, c.config.training.grad_clip) for c in planned}
    assert clips == {("scripted", 2.0), ("wait", 1.0), ("sweep.w2", 0.5)}


def test_loss_is_lowest_first_and_a_diverged_point_loses(pm: PluginManager, tmp_path: Path) -> None:
    experiment = experiment_of(tuning={**TUNING, "metric": "loss"}, **SWEPT)
    cells = tuning_cells(experiment, pm)
    _search_done(cells, tmp_path, ACC, LOSS)
    tuned = tuning_results(experiment, cells, tmp_path, pm)
    assert tuned is not None
    wait = tuned.arm("tiny", "wait")
    assert wait is not None and wait.metric == VAL_LOSS and not wait.higher_is_better
    assert wait.point == 2  # 0.65 < 0.8; point 0 (0.05 without its diverged seed) is out
    assert wait.points[0].scores == [None, 0.1] and wait.points[0].mean is None
    assert tuned.arm("tiny", "scripted").point == 0  # type: ignore[union-attr]
    # Written and read back: NaN never reaches results.json.
    results = aggregate(experiment, [], tmp_path)
    write_results(attrs.evolve(results, tuning=tuned), tmp_path)
    assert "NaN" not in (tmp_path / RESULTS_JSON).read_text()
    assert load_results(tmp_path / RESULTS_JSON).tuning == tuned
    assert wait.edges == {"training.grad_clip": "highest"}  # and they are read back


def test_an_unfinished_search_chooses_nothing(pm: PluginManager, tmp_path: Path) -> None:
    experiment = experiment_of(tuning=TUNING, **SWEPT)
    cells = tuning_cells(experiment, pm)
    _search_done(cells[1:], tmp_path, ACC, LOSS)  # one cell of the search never finished
    tuned = tuning_results(experiment, cells, tmp_path, pm)
    assert tuned is not None and not tuned.finished
    missing = cells[0]
    arm = tuned.arm("tiny", missing.policy)
    assert arm is not None and arm.chosen is None and arm.point is None
    assert arm.points[missing.point].scores[missing.seed - 100] is None
    assert all(
        a.chosen is not None
        for a in tuned.arms
        if a.arm != missing.policy and a.same_as != missing.policy
    )


def test_a_language_model_is_tuned_on_validation_loss(pm: PluginManager) -> None:
    experiment = experiment_of(tasks=["charlm", "tiny"], tuning=TUNING)
    assert metric_kinds(experiment, pm, "auto") == {"charlm": "loss", "tiny": "accuracy"}
    assert metric_kinds(experiment, pm, "accuracy") == {"charlm": "accuracy", "tiny": "accuracy"}


def test_untuned_results_say_so_and_record_null(pm: PluginManager, tmp_path: Path) -> None:
    experiment = experiment_of()
    results = aggregate(experiment, [], tmp_path)
    write_results(results, tmp_path)
    assert json.loads((tmp_path / RESULTS_JSON).read_text())["tuning"] is None
    assert UNTUNED in (tmp_path / RESULTS_MD).read_text()


def _three_seed_search(
    pm: PluginManager, root: Path, acc: dict[str, list[list[float]]]
) -> tuple[list[TuningCell], TuningResults]:
    """The search on tuning seeds 100-102 finished with these accuracies (losses all 1)."""
    loss = {arm: [[1.0, 1.0, 1.0]] * 3 for arm in acc}
    experiment = experiment_of(tuning={**TUNING, "seeds": [100, 101, 102]}, **SWEPT)
    cells = tuning_cells(experiment, pm)
    _search_done(cells, root, acc, loss)
    tuned = tuning_results(experiment, cells, root, pm)
    assert tuned is not None
    return cells, tuned


def test_a_point_that_stalls_on_one_tuning_seed_is_never_chosen(
    pm: PluginManager, tmp_path: Path
) -> None:
    """The rate with the best mean stalled on one tuning seed (80 where the
    others reached 98-99, more than ``stall.acc_points`` = 5 below their median): the next
    rate down, which trains on both, is chosen, and the search table says why."""
    acc = {
        "scripted": [[70.0, 70.0, 70.0], [85.0, 85.0, 85.0], [99.0, 80.0, 98.0]],
        # Each point stalls on a seed where the others trained: no point trains on all.
        "wait": [[50.0, 10.0, 50.0], [10.0, 50.0, 50.0], [50.0, 50.0, 10.0]],
        "sweep.w2": [[10.0, 10.0, 10.0]] * 3,
    }
    tuning = {**TUNING, "seeds": [100, 101, 102]}
    cells, tuned = _three_seed_search(pm, tmp_path, acc)
    scripted = tuned.arm("tiny", "scripted")
    assert scripted is not None and scripted.point == 1
    assert [p.failed for p in scripted.points] == [[], [], [101]]
    # No point trained: the first is taken, and no edge is claimed for a choice not made.
    wait = tuned.arm("tiny", "wait")
    assert wait is not None and wait.point == 0 and wait.edges == {}
    _, rows = search_rows(tuned)
    assert ["yes" if r[-1] == "yes" else r[-1] for r in rows if r[1] == "scripted"] == [
        "",
        "yes",
        "did not train: 101",
    ]
    # A looser rule keeps the point.
    looser = experiment_of(tuning=tuning, stall={"acc_points": 20.0}, **SWEPT)
    kept = tuning_results(looser, cells, tmp_path, pm)
    assert kept is not None and kept.arm("tiny", "scripted").point == 2  # type: ignore[union-attr]


def test_a_seed_hard_at_every_rate_is_no_stall(pm: PluginManager, tmp_path: Path) -> None:
    """Tuning seed 101 ends 10 points below the median at every rate (glyphs' 8-channel
    host at random seed 106 did so): the seed is hard, no rate stalled on it, and the best
    rate is chosen, where judging each rate on its own runs left no rate at all."""
    acc = {
        "scripted": [[70.0, 60.0, 70.0], [80.0, 70.0, 80.0], [75.0, 65.0, 75.0]],
        "wait": [[70.0, 70.0, 70.0]] * 3,
        "sweep.w2": [[10.0, 10.0, 10.0]] * 3,
    }
    _, tuned = _three_seed_search(pm, tmp_path, acc)
    scripted = tuned.arm("tiny", "scripted")
    assert scripted is not None and scripted.point == 1
    assert [p.failed for p in scripted.points] == [[], [], []]
