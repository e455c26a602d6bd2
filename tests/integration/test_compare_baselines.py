"""`esper compare` with the static-final baseline and the cost axes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from esper_core.compare.comparison import PARETO_PLOT, Plan, compare, prepare
from esper_core.compare.experiment import build_experiment, parse_experiment, shared_config
from esper_core.compare.metric import ACCURACY
from esper_core.compare.pareto import COST_AXES, dominated
from esper_core.compare.preview import preview, preview_lines
from esper_core.env.birth import seed_spec
from esper_core.errors import ConfigError
from esper_core.plugins import PluginManager
from esper_core.run.run_dir import CONFIG, SUMMARY
from esper_core.run.summary import final_architecture
from tests.inline_runner import INLINE_RUNNER
from tests.plugin_set import FAKE_PLUGIN

PLUGINS = (FAKE_PLUGIN, "policies.wait", "policies.static")
# The cells run in this process (runner="inline", tests/inline_runner.py): what is checked
# here is what compare plans and makes of them, not the local pool (test_compare.py runs it).
SHARED = {
    "run": {"reward": "acc_delta", "telemetry": []},
    "lifecycle": {"min_training_epochs": 1},
    "env": {"max_epochs": 4},
}


def experiment(**changes):  # type: ignore[no-untyped-def]
    data = {
        "policies": ["scripted", "wait"],
        "tasks": ["tiny"],
        "seeds": 3,
        "baseline": "wait",
        "baselines": ["static-final"],
        "config": SHARED,
        **changes,
    }
    spec = parse_experiment(data)
    return build_experiment(spec, shared_config(spec), plugins=PLUGINS)


@pytest.fixture(scope="module")
def pm() -> PluginManager:
    return PluginManager(extra=[*PLUGINS, INLINE_RUNNER], autoload=False)


@pytest.fixture(scope="module")
def report(pm: PluginManager, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    out = tmp_path_factory.mktemp("baselines")
    done = compare(experiment(), pm, out, notify=lambda _m: None, runner="inline")
    assert not done.failed and not done.results.missing
    return done


def test_every_growing_run_gets_its_final_architecture_from_scratch(report) -> None:  # type: ignore[no-untyped-def]
    results = report.results
    assert results.policies == ["scripted", "scripted.static-final", "wait"]
    cells = {(c.policy, c.seed): c for c in results.cells}
    grown_any = False
    for seed in results.seeds:
        grown = json.loads((Path(cells["scripted", seed].run_dir) / SUMMARY).read_text())
        static = json.loads(
            (Path(cells["scripted.static-final", seed].run_dir) / SUMMARY).read_text()
        )
        architecture = final_architecture(grown["seeds"])
        grown_any = grown_any or bool(architecture)
        assert static["policy"] == "static"
        installed = [s for s in static["seeds"] if s["fate"] == "fossilized"]
        assert [seed_spec(s["blueprint"], s["slot_id"], s["style"]) for s in installed] == (
            architecture
        )
        assert all(s["germinated_epoch"] == 0 for s in installed)
        assert (
            cells["scripted.static-final", seed].params_forward
            == cells["scripted", seed].params_forward
        )
    assert grown_any, "the scripted policy should grow on some seed"


def test_paired_differences_against_the_baseline_and_the_static_final(report) -> None:  # type: ignore[no-untyped-def]
    results = report.results
    row = results.row("tiny", "scripted")
    assert row is not None
    cells = {(c.policy, c.seed): c for c in results.cells}
    for against in ("wait", "scripted.static-final"):
        d = row.versus(against)
        assert d is not None and d.n == len(results.seeds)
        diffs = [
            cells["scripted", s].final_test_acc - cells[against, s].final_test_acc
            for s in results.seeds
        ]
        assert d.mean == pytest.approx(sum(diffs) / len(diffs))
        assert (d.wins, d.ties, d.losses) == (
            sum(x > 0 for x in diffs),
            sum(x == 0 for x in diffs),
            sum(x < 0 for x in diffs),
        )
        assert row.versus(against, "train_flops") is not None
    assert row.versus("scripted") is None  # never against itself


def test_costs_and_the_pareto_marks(report) -> None:  # type: ignore[no-untyped-def]
    results = report.results
    for c in results.cells:
        assert c.params_forward > 0 and c.train_flops > 0 and c.params_held >= c.params_forward
    rows = [r for r in results.rows if r.task == "tiny"]
    points = {
        axis: {r.policy: (r.metrics[axis].mean, r.metrics[ACCURACY].iqm) for r in rows}
        for axis in COST_AXES
    }
    for r in rows:
        assert r.dominated == [a for a in COST_AXES if r.policy in dominated(points[a])]
    assert (report.directory / PARETO_PLOT).stat().st_size > 0
    markdown = (report.directory / "results.md").read_text()
    assert "own static final architecture" in markdown and "dominated on" in markdown


def test_a_rerun_skips_every_cell_static_ones_included(report, pm: PluginManager) -> None:  # type: ignore[no-untyped-def]
    _, _, plan = prepare(experiment(), pm, report.directory, jobs=1)
    assert plan.total == 3 * 3 and plan.completed == plan.total


def test_a_preview_counts_the_finished_static_final_runs(report, pm: PluginManager) -> None:  # type: ignore[no-untyped-def]
    p = preview(experiment(), pm, report.directory, threads=1, jobs=1)
    (static,) = [g for g in p.groups if g.kind == "static-final"]
    assert static.finished == static.runs == 3
    assert "0 to run" in preview_lines(p)[-1]
    assert p.to_run == []


def test_dominated() -> None:
    points = {"a": (10.0, 90.0), "b": (20.0, 90.0), "c": (5.0, 80.0), "d": (20.0, 95.0)}
    assert dominated(points) == {"b"}  # a: as good for less
    assert dominated({"x": (1.0, 1.0), "y": (1.0, 1.0)}) == set()  # a tie dominates nothing


def test_an_unknown_derived_baseline_is_refused() -> None:
    with pytest.raises(ConfigError, match="baselines"):
        experiment(baselines=["static-start"])


def test_two_arms_ending_with_one_architecture_share_one_static_final_run(
    pm: PluginManager, tmp_path: Path
) -> None:
    # The same policy twice: each seed's two static-final cells have the same settings,
    # and the second is a copy of the first once it has run (it was left missing).
    twice = experiment(policies=["scripted", {"name": "scripted", "label": "again"}, "wait"])
    done = compare(twice, pm, tmp_path, notify=lambda _m: None, runner="inline")
    assert not done.failed and not done.results.missing
    cells = {(c.policy, c.seed): c for c in done.results.cells}
    for seed in twice.seeds:
        first, second = cells["scripted.static-final", seed], cells["again.static-final", seed]
        assert first.final_test_acc == second.final_test_acc


def test_a_rerun_counts_each_static_final_run_it_redoes_once(
    report, pm: PluginManager, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """A static-final run made with another config is run again: the progress counter
    once counted it as finished before the rerun and again when it finished, and went
    past its total."""
    out = tmp_path / "again"
    shutil.copytree(report.directory, out)
    static = next(c for c in report.results.cells if c.policy == "scripted.static-final").run_dir
    stored = Path(static.replace(str(report.directory), str(out))) / CONFIG
    stored.write_text(stored.read_text().replace("[training]", "[training]\nlr = 0.0123", 1))
    plans: list[Plan] = []
    counted: list[str] = []
    compare(
        experiment(),
        pm,
        out,
        on_plan=plans.append,
        on_outcome=lambda o: counted.append(o.status),
        notify=lambda _m: None,
        runner="inline",
    )
    (plan,) = plans
    assert plan.completed + len(counted) == plan.total, (plan, counted)
    assert counted == ["completed"]
