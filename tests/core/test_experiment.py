"""Comparison experiments without running cells: the file, labels, cell configs, validation,
identical starting points across policies, and aggregation of finished cells."""

from __future__ import annotations

import json
import re
from pathlib import Path

import attrs
import pytest
import torch

from esper_core.compare.comparison import RESULTS_JSON, RESULTS_MD, write_results
from esper_core.compare.experiment import (
    Cell,
    ExperimentError,
    build_experiment,
    load_experiment_file,
    parse_experiment,
    policy_label,
    shared_config,
)
from esper_core.compare.plan import plan_cells, stale_cells, validate
from esper_core.compare.results import aggregate, load_results
from esper_core.compare.tables import to_markdown
from esper_core.config import dump_toml
from esper_core.errors import ConfigError, RunDirError
from esper_core.plugins import PluginManager
from esper_core.run.session import open_session

SHARED = {"run": {"reward": "acc_delta", "telemetry": []}, "env": {"max_epochs": 3}}

EXPERIMENT = """
seeds = 3
baseline = "scripted"

[[policies]]
name = "scripted"

[[policies]]
name = "scripted"
label = "scripted-7"
options = { seed = 7 }

[[tasks]]
name = "tiny"

[[tasks]]
name = "tiny"
label = "tiny-small"
options = { n_train = 64 }

[config]
run = { reward = "acc_delta", telemetry = [], seed = 10 }
env = { max_epochs = 4 }
policies.scripted = { seed = 1 }
"""


def experiment_of(data: dict, sets: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    spec = parse_experiment(data)
    return build_experiment(spec, shared_config(spec, sets=sets))


def test_experiment_file_plans_every_cell(pm: PluginManager, tmp_path: Path) -> None:
    path = tmp_path / "x.toml"
    path.write_text(EXPERIMENT)
    spec = load_experiment_file(path)
    experiment = build_experiment(spec, shared_config(spec, sets=["env.max_epochs=2"]))
    assert [p.label for p in experiment.policies] == ["scripted", "scripted-7"]
    assert [t.label for t in experiment.tasks] == ["tiny", "tiny-small"]
    assert experiment.seeds == (10, 11, 12)  # run.seed of the shared config, then +1, +2
    cells = plan_cells(experiment, pm, threads=1)
    assert len(cells) == 2 * 2 * 3
    assert [c.seed for c in cells[:4]] == [10] * 4  # seed-major order
    for cell in cells:
        run = cell.config.run
        assert (run.task, run.policy, run.seed, run.episodes, run.n_envs) == (
            "tiny",
            "scripted",
            cell.seed,
            1,
            1,
        )
        assert cell.config.env.max_epochs == 2  # --set wins over [config]
        assert cell.config.tasks["tiny"]["n_train"] == (64 if cell.task == "tiny-small" else 256)
        # [[policies]] options are merged over [config.policies.scripted]
        assert cell.config.policies["scripted"]["seed"] == (7 if cell.policy == "scripted-7" else 1)
        assert (
            cell.directory(tmp_path)
            == tmp_path / "cells" / cell.task / cell.policy / f"seed-{cell.seed}"
        )


def test_policy_labels() -> None:
    assert policy_label("heuristic") == "heuristic"
    assert policy_label("ppo:runs/x/checkpoint.pt") == "ppo-x"
    assert policy_label("ppo:runs/best") == "ppo-best"
    assert policy_label("ppo:my policy.pt") == "ppo-my-policy"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"policies": ["scripted", "scripted"]}, "two policy entries have the label 'scripted'"),
        (
            {"policies": ["scripted"], "baseline": "wait"},
            "baseline 'wait' is not one of the policies: scripted",
        ),
        ({"policies": [{"name": "scripted", "label": "a/b"}]}, "label: expected letters"),
        ({"policies": ["scripted"], "tasks": ["tiny:x"]}, "a task takes no argument"),
        ({}, "no policies"),
        ({"policies": ["scripted"], "seeds": 0}, "seeds: expected an integer in [1, 1000], got 0"),
        ({"policies": [{"name": "scripted", "colour": 1}]}, "policies.0: unknown key(s) colour"),
    ],
)
def test_inconsistent_experiments_fail_clearly(data: dict, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        experiment_of({**data, "config": SHARED})
    assert expected in str(info.value)


def test_unknown_names_and_bad_options_are_all_reported(pm: PluginManager) -> None:
    experiment = experiment_of(
        {
            "policies": [
                "scripted",
                "nope",
                {"name": "scripted", "label": "bad", "options": {"speed": 1}},
            ],
            "tasks": ["tiny"],
            "config": SHARED,
        }
    )
    with pytest.raises(ConfigError) as info:
        plan_cells(experiment, pm)
    message = str(info.value)
    assert "nope on tiny: unknown policies component 'nope'; available:" in message
    assert "bad on tiny: policies.scripted: unknown key(s) speed" in message


def test_same_seed_same_host_and_first_batch_for_every_policy(
    pm: PluginManager, tmp_path: Path
) -> None:
    # The scripted policy with two option sets, plus wait and random when they are installed.
    policies: list = ["scripted", {"name": "scripted", "label": "other", "options": {"seed": 5}}]
    policies += [p for p in ("wait", "random") if p in pm.registry("policies")]
    experiment = experiment_of(
        {"policies": policies, "tasks": ["tiny"], "seeds": 2, "config": SHARED}
    )
    starts = {}
    for cell in plan_cells(experiment, pm):
        if cell.seed == 1 and cell.policy != "scripted":
            continue  # seed 1 only shows that another seed starts elsewhere
        config = attrs.evolve(cell.config, run=attrs.evolve(cell.config.run, threads=0))
        session = open_session(
            config, pm, "run", tmp_path / f"{cell.policy}-{cell.seed}", resume=False, quiet=True
        )
        session.reset_envs()
        env = session.envs[0]
        env.begin_epoch()
        inputs, targets = next(iter(env.train_batches()))
        weights = {
            k: v.clone() for k, v in env.model.state_dict().items() if isinstance(v, torch.Tensor)
        }
        starts[cell.policy, cell.seed] = (weights, inputs, targets)
        session.hub.close()
    ref_weights, ref_inputs, ref_targets = starts["scripted", 0]
    for (policy, seed), (weights, inputs, targets) in starts.items():
        if seed == 0:
            assert weights.keys() == ref_weights.keys() and len(weights) > 4
            assert all(torch.equal(weights[k], ref_weights[k]) for k in weights), policy
            assert torch.equal(inputs, ref_inputs) and torch.equal(targets, ref_targets), policy
    assert len(starts) == len(policies) + 1
    # ... and another seed really is another start.
    w0, x0, _ = starts["scripted", 0]
    w1, x1, _ = starts["scripted", 1]
    assert not all(torch.equal(w0[k], w1[k]) for k in w0 if w0[k].is_floating_point())
    assert not torch.equal(x0, x1)


def test_missing_ppo_checkpoint_fails_validation(pm: PluginManager, tmp_path: Path) -> None:
    if "ppo" not in pm.registry("policies"):
        pytest.skip("esper-tamiyo-ppo is not installed")
    experiment = experiment_of(
        {"policies": ["scripted", "ppo:nowhere/checkpoint.pt"], "tasks": ["tiny"], "config": SHARED}
    )
    with pytest.raises(
        ExperimentError,
        match=r"ppo-nowhere on tiny: PPO checkpoint nowhere/checkpoint\.pt not found",
    ):
        validate(experiment, pm, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_an_experiment_whose_cells_all_finished_is_reported_without_its_device(
    pm: PluginManager, tmp_path: Path
) -> None:
    # Run on a machine with eight GPUs, reported on this one: nothing is built again.
    data = {"policies": ["scripted"], "tasks": ["tiny"], "seeds": 2, "config": SHARED}
    experiment = experiment_of(data, sets=("run.device=cuda:7",))
    root = tmp_path / "out"
    cells = plan_cells(experiment, pm)
    with pytest.raises(ExperimentError, match=r"scripted on tiny: run\.device: 'cuda:7'"):
        validate(experiment, pm, root)  # nothing finished: it would have to run here
    for cell in cells:
        directory = cell.directory(root)
        directory.mkdir(parents=True)
        (directory / "summary.json").write_text(json.dumps({"status": "completed"}))
        (directory / "config.toml").write_text(dump_toml(cell.config))
    assert [c.directory(root) for c in validate(experiment, pm, root)] == [
        c.directory(root) for c in cells
    ]
    # One cell finished with another config runs again: the arm is built, and refused.
    other = attrs.evolve(cells[0].config, env=attrs.evolve(cells[0].config.env, max_epochs=9))
    (cells[0].directory(root) / "config.toml").write_text(dump_toml(other))
    with pytest.raises(ExperimentError, match="cuda:7"):
        validate(experiment, pm, root)


def _finished_cell(pm: PluginManager, root: Path) -> tuple[Cell, Path]:
    """The one cell of a one-seed experiment, finished under ``root`` (its config.toml is
    the test's to write)."""
    experiment = experiment_of(
        {"policies": ["scripted"], "tasks": ["tiny"], "seeds": 1, "config": SHARED}
    )
    (cell,) = plan_cells(experiment, pm)
    directory = cell.directory(root)
    directory.mkdir(parents=True)
    (directory / "summary.json").write_text(json.dumps({"status": "completed"}))
    return cell, directory


def test_finished_cells_of_another_config_or_blueprint_set_are_stale(
    pm: PluginManager, tmp_path: Path
) -> None:
    cell, directory = _finished_cell(pm, tmp_path)

    def stored(config) -> dict[Path, list[str]]:  # type: ignore[no-untyped-def]
        (directory / "config.toml").write_text(dump_toml(config))
        return stale_cells([cell], tmp_path, pm)

    other = attrs.evolve(cell.config, env=attrs.evolve(cell.config.env, max_epochs=9))
    assert stored(other) == {directory: ["env.max_epochs: 9 there, 3 now"]}
    # The resolved config pins the blueprint set: installing a blueprint package since the
    # cell ran makes it stale too.
    fewer = attrs.evolve(
        cell.config, env=attrs.evolve(cell.config.env, blueprints=cell.config.env.blueprints[:1])
    )
    assert len(cell.config.env.blueprints) > 1
    ((why,),) = stored(fewer).values()
    assert why.startswith("env.blueprints: ")
    # The thread count changes the last digits of a result: not reusable either.
    threads = attrs.evolve(cell.config, run=attrs.evolve(cell.config.run, threads=7))
    assert stored(threads) == {directory: ["run.threads: 7 there, 0 now"]}
    # The same config except display and telemetry: reusable.
    same = attrs.evolve(cell.config, run=attrs.evolve(cell.config.run, telemetry=["jsonl"]))
    assert stored(same) == {}


def test_an_option_added_since_a_cell_ran_is_compared_at_its_default(
    pm: PluginManager, tmp_path: Path
) -> None:
    # A cell made before ``rewards.acc_delta.scale`` existed stores no such key: it is what
    # the option's default makes, so it is kept, and a planned value other than the
    # default still makes it run again.
    cell, directory = _finished_cell(pm, tmp_path)
    assert cell.config.rewards["acc_delta"] == {"scale": 1.0}
    older = attrs.evolve(cell.config, rewards={**cell.config.rewards, "acc_delta": {}})
    (directory / "config.toml").write_text(dump_toml(older))
    assert stale_cells([cell], tmp_path, pm) == {}
    doubled = attrs.evolve(cell.config, rewards={"acc_delta": {"scale": 2.0}})
    assert stale_cells([attrs.evolve(cell, config=doubled)], tmp_path, pm) == {
        directory: ["rewards.acc_delta.scale: 1.0 there, 2.0 now"]
    }


def _finished(directory: Path, acc: float, params: float = 0.0) -> None:
    directory.mkdir(parents=True)
    (directory / "summary.json").write_text(
        json.dumps(
            {
                "status": "completed",
                "final_test_acc_mean": acc,
                "params_added_mean": params,
                "seeds_fossilized": 1,
                "seeds_pruned": 0,
                "wall_time": 2.0,
                "episodes": [{"final_test_loss": 0.1}],
            }
        )
    )


def test_aggregate_rows_pooled_rows_and_outputs(pm: PluginManager, tmp_path: Path) -> None:
    experiment = experiment_of(
        {
            "policies": ["scripted", {"name": "scripted", "label": "other"}],
            "tasks": ["tiny", {"name": "tiny", "label": "t2"}],
            "seeds": 4,
            "baseline": "other",
            "config": SHARED,
        }
    )
    cells = plan_cells(experiment, pm)
    acc = {
        ("tiny", "scripted"): [1, 2, 3, 100],
        ("tiny", "other"): [0, 0, 0, 0],
        ("t2", "scripted"): [10, 10, 10, 10],
        ("t2", "other"): [20, 20, 20, 20],
    }
    for cell in cells:
        if (cell.task, cell.policy, cell.seed) != ("t2", "other", 3):  # one run missing
            _finished(
                cell.directory(tmp_path), acc[cell.task, cell.policy][cell.seed], params=cell.seed
            )
    results = aggregate(experiment, cells, tmp_path)
    assert results.missing == [str(tmp_path / "cells" / "t2" / "other" / "seed-3")]
    row = results.row("tiny", "scripted")
    assert row is not None and row.n == 4
    assert row.metrics["final_test_acc"].iqm == pytest.approx(2.5)  # middle of 1, 2, 3, 100
    assert row.metrics["final_test_acc"].mean == pytest.approx(26.5)
    assert row.metrics["params_added"].iqm == pytest.approx(1.5)
    assert row.improvement is not None and row.improvement.probability == 1.0
    t2 = results.row("t2", "scripted")
    assert t2 is not None and t2.improvement is not None and t2.improvement.probability == 0.0
    assert results.row("t2", "other").n == 3  # type: ignore[union-attr]
    # Paired by seed: t2/other has no seed 3, so that run of scripted has no partner.
    assert (row.improvement.wins, row.improvement.ties, row.improvement.losses) == (4, 0, 0)
    assert (t2.improvement.wins, t2.improvement.ties, t2.improvement.losses) == (0, 0, 3)
    pooled = results.row(None, "scripted")
    assert pooled is not None and pooled.n == 8
    assert pooled.improvement is not None and pooled.improvement.probability == pytest.approx(0.5)
    assert (pooled.improvement.wins, pooled.improvement.losses) == (4, 3)
    assert pooled.metrics["final_test_acc"].iqm == pytest.approx(
        8.25
    )  # 1,2,3,10,10,10,10,100 -> 3,10,10,10
    write_results(results, tmp_path)
    assert load_results(tmp_path / RESULTS_JSON) == results
    markdown = (tmp_path / RESULTS_MD).read_text()
    assert markdown == to_markdown(results)
    assert (
        "| scripted | 4 | 2.50 [" in markdown
        and "| other | 4 | 0.00 [0.00, 0.00] | baseline |" in markdown
    )
    assert "## all tasks (bootstrap stratified over tasks)" in markdown
    assert (tmp_path / "intervals.png").stat().st_size > 10_000


def test_a_damaged_summary_of_a_finished_cell_is_named(pm: PluginManager, tmp_path: Path) -> None:
    experiment = experiment_of({"policies": ["scripted"], "seeds": 1, "config": SHARED})
    (cell,) = plan_cells(experiment, pm)
    directory = cell.directory(tmp_path)
    _finished(directory, 50.0)
    summary = json.loads((directory / "summary.json").read_text())
    del summary["seeds_pruned"]
    (directory / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(RunDirError, match=r"summary\.json is damaged.*delete that run directory"):
        aggregate(experiment, [cell], tmp_path)


def test_the_terminal_tables_never_split_a_value_at_80_columns(
    pm: PluginManager, tmp_path: Path
) -> None:
    """Off a terminal (or where the table does not fit) each row is a record, one value per
    line: an interval such as ``62.63 [58.90, 66.36]`` used to fold over several lines."""
    import io

    from rich.console import Console

    from esper_cli.compare import print_tables

    experiment = experiment_of(
        {
            "policies": ["scripted", {"name": "scripted", "label": "a-rather-long-policy-label"}],
            "tasks": ["tiny"],
            "seeds": 3,
            "baseline": "scripted",
            "config": SHARED,
        }
    )
    cells = plan_cells(experiment, pm)
    for cell in cells:
        _finished(cell.directory(tmp_path), 60.0 + cell.seed + len(cell.policy), params=18560)
    results = aggregate(experiment, cells, tmp_path)
    for console in (
        Console(file=io.StringIO(), width=80),  # a pipe
        Console(file=io.StringIO(), width=80, force_terminal=True, color_system=None),
    ):
        print_tables(results, console)
        text = console.file.getvalue()  # type: ignore[attr-defined]
        assert "…" not in text
        lines = text.splitlines()
        assert "  a-rather-long-policy-label" in lines
        # Every interval whole on one line, next to its column's name.
        intervals = [line for line in lines if line.startswith("    test acc %")]
        assert len(intervals) == 2 and all(
            re.search(r"\d \[[\d.]+, [\d.]+\]$", x) for x in intervals
        )
        assert not [line for line in lines if "│" in line]  # 10 columns do not fit 80


SWEEP = {
    "policies": ["scripted"],
    "tasks": ["tiny", {"name": "tiny", "label": "tiny-small", "options": {"n_train": 64}}],
    "seeds": 2,
    "baselines": ["size-sweep"],
    "sweep": {
        "sizes": [
            {"label": "w2", "options": {"width": 2}},
            {"label": "w8", "options": {"width": 8}, "tasks": ["tiny-small"]},
        ]
    },
    "config": SHARED,
}


def test_the_size_sweep_plans_wait_cells_on_the_policies_seeds(pm: PluginManager) -> None:
    experiment = experiment_of(SWEEP)
    assert [s.label for s in experiment.sweep] == ["sweep.w2", "sweep.w8"]
    cells = plan_cells(experiment, pm, threads=1)
    sweep = [c for c in cells if c.policy.startswith("sweep.")]
    assert {(c.task, c.policy) for c in sweep} == {
        ("tiny", "sweep.w2"),
        ("tiny-small", "sweep.w2"),
        ("tiny-small", "sweep.w8"),  # only on the task it names
    }
    assert sorted({c.seed for c in sweep}) == sorted({c.seed for c in cells}) == [0, 1]
    for c in sweep:
        assert c.config.run.policy == "wait"
        options = c.config.tasks["tiny"]
        assert options["width"] == int(c.policy[-1])
        assert options["n_train"] == (64 if c.task == "tiny-small" else 256)  # merged over
    # Seed-major, the sweep after the policies of its seed.
    assert [c.policy for c in cells[:5]] == [
        "scripted",
        "scripted",
        "sweep.w2",
        "sweep.w2",
        "sweep.w8",
    ]


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"sweep": {}}, '"size-sweep" needs sizes: add [[sweep.sizes]]'),
        ({"baselines": []}, 'sweep.sizes is given but baselines lacks "size-sweep"'),
        (
            {"sweep": {"sizes": [{"label": "a"}, {"label": "a"}]}},
            "two sweep sizes have the label 'sweep.a'",
        ),
        ({"sweep": {"sizes": [{"options": {}}]}}, "sweep.sizes.0.label: expected a label"),
        ({"sweep": {"sizes": [{"label": "a", "tasks": ["big"]}]}}, "'big' is not a task label"),
        ({"sweep": {"sizes": [{"label": "a"}], "metric": "f1"}}, "sweep.metric: expected one of"),
        # A label names a directory: nothing that climbs out of the experiment's.
        ({"sweep": {"sizes": [{"label": "../../x"}]}}, "sweep.sizes.0.label: expected letters"),
        ({"sweep": {"sizes": [{"label": "a/b"}]}}, "sweep.sizes.0.label: expected letters"),
        ({"sweep": {"sizes": [{"label": "a\nb"}]}}, "sweep.sizes.0.label: expected letters"),
        (
            {"sweep": {"sizes": [{"label": "a", "config": {"env": {"max_epochs": 0}}}]}},
            "sweep.sizes.0.config.env.max_epochs: expected an integer",
        ),
        (
            {"sweep": {"sizes": [{"label": "a", "config": {"env": {"max_epoch": 9}}}]}},
            "sweep.sizes.0.config.env: unknown key(s) max_epoch",
        ),
        (
            {"sweep": {"sizes": [{"label": "a", "config": {"run": {"seed": 9}}}]}},
            "sweep.sizes.0.config.run: seed is set by each cell of the experiment",
        ),
    ],
)
def test_an_inconsistent_sweep_fails_before_any_cell(changes: dict, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        experiment_of({**SWEEP, **changes})
    assert expected in str(info.value)


def test_a_sweep_error_is_one_line_per_problem() -> None:
    with pytest.raises(ConfigError) as info:
        experiment_of({**SWEEP, "sweep": {"sizes": [{"label": "a/b"}]}})
    assert info.value.problems == [
        'sweep.sizes.0.label: expected letters, digits, ".", "_" or "-" (it names a '
        'directory), got "a/b"'
    ]


def test_one_size_at_two_training_lengths_is_two_sweep_points(pm: PluginManager) -> None:
    data = {
        **SWEEP,
        "tasks": ["tiny"],
        "sweep": {
            "sizes": [
                {"label": "w2-3ep", "options": {"width": 2}},
                {"label": "w2-6ep", "options": {"width": 2}, "config": {"env": {"max_epochs": 6}}},
            ]
        },
    }
    cells = plan_cells(experiment_of(data), pm, threads=1)
    epochs = {(c.policy, c.seed): c.config.env.max_epochs for c in cells}
    assert epochs == {
        (policy, seed): n
        for seed in (0, 1)
        for policy, n in (("scripted", 3), ("sweep.w2-3ep", 3), ("sweep.w2-6ep", 6))
    }
    for c in cells:
        if c.policy.startswith("sweep."):
            assert c.config.tasks["tiny"]["width"] == 2 and c.config.run.seed == c.seed


def test_a_policy_trained_for_its_own_length_keeps_it_in_every_cell(pm: PluginManager) -> None:
    data = {
        "policies": [
            "scripted",
            {"name": "scripted", "label": "short", "config": {"env": {"max_epochs": 2}}},
        ],
        "tasks": ["tiny"],
        "seeds": 2,
        "config": SHARED,
    }
    cells = plan_cells(experiment_of(data), pm, threads=1)
    epochs = {(c.policy, c.seed): c.config.env.max_epochs for c in cells}
    assert epochs == {(p, s): n for s in (0, 1) for p, n in (("scripted", 3), ("short", 2))}


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"env": {"max_epochs": 0}}, "policies.1.config.env.max_epochs: expected an integer"),
        ({"env": {"max_epoch": 9}}, "policies.1.config.env: unknown key(s) max_epoch"),
        ({"run": {"seed": 9}}, "policies.1.config.run: seed is set by each cell of the experiment"),
    ],
)
def test_a_policys_config_is_checked_before_any_cell(config: dict, expected: str) -> None:
    data = {
        "policies": ["scripted", {"name": "scripted", "label": "b", "config": config}],
        "tasks": ["tiny"],
        "config": SHARED,
    }
    with pytest.raises(ConfigError) as info:
        experiment_of(data)
    assert expected in str(info.value)


def test_a_size_option_the_task_does_not_know_is_the_tasks_error(pm: PluginManager) -> None:
    data = {**SWEEP, "sweep": {"sizes": [{"label": "deep", "options": {"depth": 3}}]}}
    with pytest.raises(ConfigError) as info:
        plan_cells(experiment_of(data), pm)
    assert "sweep.deep on tiny: tasks.tiny: unknown key(s) depth" in str(info.value)


EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.toml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_experiment_plans(path: Path, pm: PluginManager) -> None:
    """Each example experiment passes the checks `esper compare` makes before any cell."""
    spec = load_experiment_file(path)
    cells = plan_cells(build_experiment(spec, shared_config(spec)), pm, threads=1)
    assert len({c.seed for c in cells}) == spec.seeds
    assert {c.policy for c in cells} >= {f"sweep.{s.label}" for s in spec.sweep.sizes}


@pytest.mark.parametrize(
    ("metric", "expected"),
    [
        ("auto", {"charlm": "final_test_loss", "tiny": "final_test_acc"}),
        ("accuracy", {"charlm": "final_test_acc", "tiny": "final_test_acc"}),
        ("loss", {"charlm": "final_test_loss", "tiny": "final_test_loss"}),
    ],
)
def test_a_language_model_is_ranked_in_loss(
    metric: str, expected: dict[str, str], pm: PluginManager
) -> None:
    from esper_core.compare.metric import task_metrics

    data = {
        **SWEEP,
        "tasks": ["charlm", "tiny"],
        "sweep": {"sizes": [{"label": "a"}], "metric": metric},
    }
    assert task_metrics(experiment_of(data), pm) == expected
