"""`esper compare` with [tuning] end to end on the tiny task: every arm (policy and sweep
size) searched on the tuning seeds, its choice in results.json, results.md and the
terminal, and the evaluation cells (static-final ones included) run with it."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from esper_core.compare.comparison import RESULTS_JSON, RESULTS_MD, CompareReport, compare, prepare
from esper_core.compare.experiment import build_experiment, parse_experiment, shared_config
from esper_core.compare.results import RESULTS_SCHEMA_VERSION, load_results
from esper_core.compare.tuning_choice import choose
from esper_core.config import load_config
from esper_core.plugins import PluginManager
from esper_core.run.run_dir import CONFIG, SUMMARY
from tests.inline_runner import INLINE_RUNNER
from tests.plugin_set import FAKE_PLUGIN, write_broken_plugin

PLUGINS = (FAKE_PLUGIN, "policies.wait", "policies.static")
TUNING_SEEDS = [100, 101]
# The larger batch first: on the tiny task the smaller one learns more in two epochs, so a
# choice that fell back to the first point would show.
BATCH_SIZES = [64, 8]
DATA = {
    "policies": ["scripted"],
    "tasks": ["tiny"],
    "seeds": 2,
    "baselines": ["static-final", "size-sweep"],
    "resamples": 200,
    "sweep": {
        "sizes": [
            {"label": "w2", "options": {"width": 2}},
            {"label": "w4", "options": {"width": 4}},
        ]
    },
    "tuning": {"seeds": TUNING_SEEDS, "grid": {"env.batch_size": BATCH_SIZES}},
    "config": {
        "run": {"reward": "acc_delta", "telemetry": [], "threads": 1},
        "lifecycle": {"min_training_epochs": 1},
        "env": {"max_epochs": 2},
    },
}
ARMS = ["scripted", "sweep.w2", "sweep.w4"]


def experiment():  # type: ignore[no-untyped-def]
    spec = parse_experiment(DATA)
    return build_experiment(spec, shared_config(spec), plugins=PLUGINS)


@pytest.fixture(scope="module")
def pm() -> PluginManager:
    return PluginManager(extra=[*PLUGINS, INLINE_RUNNER], autoload=False)


@pytest.fixture(scope="module")
def tuned(pm: PluginManager, tmp_path_factory: pytest.TempPathFactory) -> CompareReport:
    out = tmp_path_factory.mktemp("tuned")
    # In this process: the local runner's spawned pools would add seconds per phase.
    messages: list[str] = []
    report = compare(experiment(), pm, out, notify=messages.append, runner="inline")
    assert not report.failed and not report.results.missing
    (chosen,) = [m for m in messages if m.startswith("tuning chosen: ")]
    assert "scripted on tiny: env.batch_size=" in chosen and "sweep.w2 on tiny" in chosen
    return report


def test_every_arm_chooses_its_best_point_on_the_tuning_seeds(tuned: CompareReport) -> None:
    out = tuned.directory
    raw = json.loads((out / RESULTS_JSON).read_text())
    assert raw["schema_version"] == RESULTS_SCHEMA_VERSION
    tuning = load_results(out / RESULTS_JSON).tuning
    assert tuning is not None and tuning == tuned.results.tuning
    assert tuning.seeds == TUNING_SEEDS and tuning.grid == {"env.batch_size": BATCH_SIZES}
    assert [a.arm for a in tuning.arms] == ["scripted", "scripted.static-final", *ARMS[1:]]
    for arm in tuning.arms:
        if arm.same_as is not None:
            continue
        assert arm.metric == "val_acc" and len(arm.points) == len(BATCH_SIZES)
        for k, point in enumerate(arm.points):
            # Each score is the validation accuracy its tuning cell's summary recorded.
            for seed, value in zip(TUNING_SEEDS, point.scores):
                directory = out / "tuning" / "cells" / "tiny" / arm.arm / f"point-{k}"
                summary = json.loads((directory / f"seed-{seed}" / SUMMARY).read_text())
                assert value == summary["final_val_acc_mean"]
                stored = load_config(directory / f"seed-{seed}" / CONFIG)
                assert (stored.env.batch_size, stored.run.seed) == (BATCH_SIZES[k], seed)
            assert point.mean == pytest.approx(sum(point.scores) / len(point.scores))  # type: ignore[arg-type]
        assert arm.point == choose([p.mean for p in arm.points], True)  # type: ignore[misc]
        assert arm.chosen == {"env.batch_size": BATCH_SIZES[arm.point]}
    assert any(a.point == 1 for a in tuning.arms), "some arm should prefer the smaller batch"


def test_evaluation_cells_run_with_their_arms_choice(tuned: CompareReport) -> None:
    out = tuned.directory
    tuning = tuned.results.tuning
    assert tuning is not None
    chosen = {a.arm: a.chosen for a in tuning.arms}
    assert chosen["scripted.static-final"] == chosen["scripted"]  # the grown model's recipe
    evaluated = {(c.policy, c.seed) for c in tuned.results.cells}
    assert evaluated == {
        (p, s) for p in [*ARMS, "scripted.static-final"] for s in tuned.results.seeds
    }
    assert not set(tuned.results.seeds) & set(TUNING_SEEDS)
    for policy, seed in evaluated:
        stored = load_config(out / "cells" / "tiny" / policy / f"seed-{seed}" / CONFIG)
        assert stored.env.batch_size == chosen[policy]["env.batch_size"], policy  # type: ignore[index]


def test_results_md_and_the_terminal_say_what_was_chosen(tuned: CompareReport) -> None:
    from rich.console import Console

    from esper_cli.compare import print_tables

    markdown = (tuned.directory / RESULTS_MD).read_text()
    assert "## Tuning" in markdown and "Tuning: searched on seeds 100, 101" in markdown
    assert "| tiny | scripted.static-final |" in markdown and "scripted's choice" in markdown
    assert "Untuned" not in markdown
    text = io.StringIO()
    print_tables(
        tuned.results, Console(file=text, width=200, force_terminal=True, color_system=None)
    )
    shown = text.getvalue()
    assert "tuning: chosen" in shown and "Tuning: searched on seeds 100, 101" in shown
    scripted = tuned.results.tuning.arm("tiny", "scripted")  # type: ignore[union-attr]
    assert scripted is not None and scripted.chosen is not None
    line = next(x for x in shown.splitlines() if " scripted │" in x and "validation" in x)
    assert str(scripted.chosen["env.batch_size"]) in line


def test_a_rerun_reuses_the_search_and_the_evaluation(
    tuned: CompareReport, pm: PluginManager
) -> None:
    _, _, plan = prepare(experiment(), pm, tuned.directory)
    assert plan.tuning == len(ARMS) * len(BATCH_SIZES) * len(TUNING_SEEDS)
    assert plan.total == plan.tuning + len(ARMS) * 2 + 2
    assert plan.completed == plan.total and plan.stale == 0


def test_a_failed_search_stops_before_the_evaluation(tmp_path: Path) -> None:
    plugin = write_broken_plugin(
        tmp_path / "broken_policy.py", "policies", "scripted", "act", "broken policy"
    )
    plugins = (*PLUGINS, str(plugin))
    data = {
        **DATA,
        "policies": ["broken", "wait"],
        "seeds": 1,
        "baselines": [],
        "sweep": {},
        "tuning": {"seeds": [100], "grid": {"env.batch_size": [8]}},
    }
    spec = parse_experiment(data)
    failing = build_experiment(spec, shared_config(spec), plugins=plugins)
    pm = PluginManager(extra=[*plugins, INLINE_RUNNER], autoload=False)
    messages: list[str] = []
    report = compare(failing, pm, tmp_path / "out", notify=messages.append, runner="inline")
    assert [Path(o.directory).parts[-3] for o in report.failed] == ["broken"]
    assert report.results.cells == [] and not (tmp_path / "out" / "cells").exists()
    tuning = report.results.tuning
    assert tuning is not None and not tuning.finished
    assert tuning.arm("tiny", "broken").chosen is None  # type: ignore[union-attr]
    assert tuning.arm("tiny", "wait").chosen == {"env.batch_size": 8}  # type: ignore[union-attr]
    assert any(m.startswith("tuning unfinished") for m in messages)
    assert "The search is unfinished" in (tmp_path / "out" / RESULTS_MD).read_text()


def test_progress_counts_start_over_when_a_wider_search_changes_the_choices(
    pm: PluginManager, tmp_path: Path
) -> None:
    def run(batch_sizes: list[int]) -> tuple[list[tuple[int, int]], int]:
        data = {**DATA, "tuning": {"seeds": TUNING_SEEDS, "grid": {"env.batch_size": batch_sizes}}}
        spec = parse_experiment(data)
        plans: list[tuple[int, int]] = []
        done = {"n": 0}

        def on_plan(plan) -> None:  # type: ignore[no-untyped-def]
            plans.append((plan.total, plan.completed))
            done["n"] = plan.completed

        def on_outcome(outcome) -> None:  # type: ignore[no-untyped-def]
            if outcome.status in ("completed", "skipped", "failed"):
                done["n"] += 1

        report = compare(
            build_experiment(spec, shared_config(spec), plugins=PLUGINS),
            pm,
            tmp_path,
            notify=lambda _m: None,
            runner="inline",
            on_plan=on_plan,
            on_outcome=on_outcome,
        )
        assert not report.failed
        return plans, done["n"]

    run([64])
    # The second point wins for some arm: its evaluation cells, finished at 64, run again.
    plans, done = run([64, 8])
    assert len(plans) == 2
    assert plans[1][1] < plans[0][1]  # fewer finished once the stale cells are known
    assert done == plans[-1][0]  # the count ends at the total, not beyond
