"""`esper compare` with the size-sweep baseline on the tiny task: the sweep's
cells run on the policies' seeds, and results.json, results.md, the terminal tables and
pareto.png carry the frontier and each policy's verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from esper_cli.main import build_cli
from esper_core.compare.comparison import PARETO_PLOT, RESULTS_JSON, RESULTS_MD
from esper_core.compare.frontier import frontier as frontier_of
from esper_core.compare.frontier import frontier_curve, frontier_value
from esper_core.compare.results import RESULTS_SCHEMA_VERSION, load_results
from esper_core.plugins import PluginManager
from tests.inline_runner import INLINE_RUNNER
from tests.plugin_set import FAKE_PLUGIN

SEEDS = 2
WIDTHS = (2, 4, 8)  # the tiny task's default width is 4: sweep.w4 is the wait policy's host
EXPERIMENT = f"""
policies = ["scripted", "wait"]
tasks = ["tiny"]
seeds = {SEEDS}
baseline = "wait"
baselines = ["size-sweep"]
resamples = 200

{
    "".join(
        f'''
[[sweep.sizes]]
label = "w{w}"
options = {{ width = {w} }}
'''
        for w in WIDTHS
    )
}
[config]
run = {{ reward = "acc_delta", telemetry = [] }}
lifecycle = {{ min_training_epochs = 1 }}
env = {{ max_epochs = 3 }}
"""
# policies.wait both loads the policy (cells run in workers) and selects it: --policy first.
PLUGINS = ("--plugin", FAKE_PLUGIN, "--policy", "scripted", "--plugin", "policies.wait")


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """`esper compare frontier-tiny.toml` as a user runs it, with only the plugins it names
    (autoloading is off, as in a subprocess of the tests), in this process: the cells run
    one after another here (tests/inline_runner.py), through the same cell code as in a
    worker, and load exactly the plugins the command does."""
    root = tmp_path_factory.mktemp("sweep")
    (root / "frontier-tiny.toml").write_text(EXPERIMENT)
    out = root / "out"
    group, pm = build_cli(PluginManager(extra=[INLINE_RUNNER], autoload=False))
    command = ["compare", str(root / "frontier-tiny.toml"), *PLUGINS, "--runner", "inline"]
    done = CliRunner().invoke(group, [*command, "--out", str(out), "--quiet"], obj={"pm": pm})
    assert done.exit_code == 0, done.output
    return out, done.stdout


def test_the_sweep_runs_static_hosts_on_the_policies_seeds(swept) -> None:  # type: ignore[no-untyped-def]
    out, _ = swept
    results = load_results(out / RESULTS_JSON)
    assert results.schema_version == RESULTS_SCHEMA_VERSION
    sizes = [f"sweep.w{w}" for w in WIDTHS]
    assert results.policies == ["scripted", "wait", *sizes]
    cells = {(c.policy, c.seed): c for c in results.cells}
    for seed in results.seeds:
        for w, size in zip(WIDTHS, sizes):
            config = (out / "cells" / "tiny" / size / f"seed-{seed}" / "config.toml").read_text()
            assert 'policy = "wait"' in config and f"width = {w}" in config
        # Same seed, same host as the wait policy: the same run.
        assert cells["sweep.w4", seed].final_test_acc == cells["wait", seed].final_test_acc
    params = [cells[s, results.seeds[0]].params_forward for s in sizes]
    assert params == sorted(params) and len(set(params)) == len(params)


def test_results_carry_the_frontier_and_the_verdicts(swept) -> None:  # type: ignore[no-untyped-def]
    out, output = swept
    results = load_results(out / RESULTS_JSON)
    (frontier,) = results.frontier
    assert (frontier.task, frontier.metric, frontier.higher_is_better) == (
        "tiny",
        "final_test_acc",
        True,
    )
    assert [a.axis for a in frontier.axes] == ["params_forward", "train_flops"]
    assert {p.label for p in frontier.axes[0].points} == {f"sweep.w{w}" for w in WIDTHS}
    assert any(p.on_frontier for p in frontier.axes[0].points)
    wait = frontier.verdict("wait", "params_forward")
    assert wait is not None and not wait.dominated  # it is sweep.w4: nothing beats its twin
    # The frontier at its own cost is at least its own value: equal on a seed where w4 is
    # on the hull, above it where w4 fell below the chord from w2 to w8.
    cells = {(c.policy, c.seed): c for c in results.cells}
    diffs = []
    for seed in results.seeds:
        sweep = {
            f"sweep.w{w}": (
                cells[f"sweep.w{w}", seed].params_forward,
                cells[f"sweep.w{w}", seed].final_test_acc,
            )
            for w in WIDTHS
        }
        on_hull = "sweep.w4" in frontier_of(sweep)
        reached = frontier_value(frontier_curve(sweep), cells["wait", seed].params_forward)
        assert reached is not None
        diffs.append(cells["wait", seed].final_test_acc - reached)
        assert (diffs[-1] == 0.0) is on_hull and diffs[-1] <= 0.0
    assert wait.gap.n == SEEDS and wait.gap.better == 0
    assert wait.gap.ties == sum(d == 0.0 for d in diffs)
    assert wait.gap.mean == pytest.approx(sum(diffs) / SEEDS)
    assert frontier.verdict("scripted", "train_flops") is not None
    raw = json.loads((out / RESULTS_JSON).read_text())
    assert raw["frontier"][0]["verdicts"][0]["gap"].keys() >= {"iqm", "low", "high", "outside"}
    markdown = (out / RESULTS_MD).read_text()
    assert "## Frontier: tiny" in markdown and "Δ vs frontier @ equal params" in markdown
    assert "frontier: tiny" in output and "size sweep: tiny" in output
    assert (out / PARETO_PLOT).stat().st_size > 0


def test_a_size_sweep_without_sizes_is_one_line(invoke, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "x.toml"
    path.write_text(
        EXPERIMENT.split("\n[[sweep.sizes]]")[0] + "\n[config]\nenv = { max_epochs = 1 }\n"
    )
    result = invoke("compare", str(path), *PLUGINS, "--out", str(tmp_path / "o"))
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and '"size-sweep" needs sizes' in lines[0]


def test_an_unknown_size_option_is_the_tasks_own_error(invoke, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "x.toml"
    path.write_text(EXPERIMENT.replace("width = 8", "depth = 8"))
    out = tmp_path / "o"
    result = invoke("compare", str(path), *PLUGINS, "--out", str(out))
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "sweep.w8 on tiny" in lines[0] and "depth" in lines[0], lines
    assert not out.exists()


def test_dry_run_counts_the_sweep(invoke, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "x.toml"
    path.write_text(EXPERIMENT)
    result = invoke("compare", str(path), *PLUGINS, "--out", str(tmp_path / "o"), "--dry-run")
    assert result.exit_code == 0, result.output
    # sweep.w4 is the wait policy's host: its runs are copied from wait's, not run.
    assert f"experiment OK: {SEEDS * (1 + len(WIDTHS))} runs" in result.output
    assert "tiny / sweep.w4 / random seeds 0, 1: same settings as tiny/wait: copied, not run" in (
        result.output
    )
    assert f"{SEEDS} copies of another run's settings" in result.output


def test_dry_run_counts_the_tuning_runs(invoke, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "x.toml"
    path.write_text(
        EXPERIMENT + '\n[tuning]\nseeds = [100]\n[tuning.grid]\n"env.batch_size" = [8, 16]\n'
    )
    result = invoke("compare", str(path), *PLUGINS, "--out", str(tmp_path / "o"), "--dry-run")
    assert result.exit_code == 0, result.output
    arms = 2 + len(WIDTHS)  # scripted, wait and every size, each on 2 points x 1 seed
    # sweep.w4's runs, the search's and the evaluation's, are copies of wait's.
    evaluated, searched = SEEDS * (arms - 1), 2 * (arms - 1)
    assert f"{evaluated + searched} runs ({searched} of them tuning runs;" in result.output
    assert f"{SEEDS + 2} copies of another run's settings" in result.output


def test_an_untuned_comparison_says_so(swept) -> None:  # type: ignore[no-untyped-def]
    out, output = swept
    assert json.loads((out / RESULTS_JSON).read_text())["tuning"] is None
    untuned = "Untuned: every arm used the shared config's training recipe"
    assert untuned in (out / RESULTS_MD).read_text()
    assert untuned in " ".join(output.split())  # the terminal wraps it


def test_a_longer_sweep_point_costs_more_training_flops(tmp_path: Path) -> None:
    """One size at two training lengths is two sweep points: the same parameters, and the
    training FLOPs each cell measured, twice as many for twice the epochs, with no cost
    declared anywhere. A policy trained in between lies inside the sweep on the FLOPs axis."""
    from esper_core.compare.comparison import compare
    from esper_core.compare.experiment import build_experiment, parse_experiment, shared_config

    sizes = [
        {"label": f"w4-{n}ep", "options": {"width": 4}, "config": {"env": {"max_epochs": n}}}
        for n in (2, 4)
    ]
    spec = parse_experiment(
        {
            "policies": ["wait"],
            "tasks": ["tiny"],
            "seeds": 1,
            "baselines": ["size-sweep"],
            "resamples": 100,
            "sweep": {"sizes": sizes},
            "config": {
                "run": {"reward": "acc_delta", "telemetry": []},
                "env": {"max_epochs": 3},
            },
        }
    )
    plugins = (FAKE_PLUGIN, "policies.wait")
    experiment = build_experiment(spec, shared_config(spec), plugins=plugins)
    # The cells run in this process (tests/inline_runner.py): what each measured is theirs.
    pm = PluginManager(extra=[*plugins, INLINE_RUNNER], autoload=False)
    report = compare(experiment, pm, tmp_path / "out", notify=lambda _m: None, runner="inline")
    assert not report.failed and not report.results.missing
    cells = {c.policy: c for c in report.results.cells}
    short, long, wait = cells["sweep.w4-2ep"], cells["sweep.w4-4ep"], cells["wait"]
    assert short.params_forward == long.params_forward == wait.params_forward
    assert long.train_flops == 2 * short.train_flops > 0
    assert wait.train_flops == pytest.approx(1.5 * short.train_flops)
    (frontier,) = report.results.frontier
    flops = next(a for a in frontier.axes if a.axis == "train_flops")
    assert [p.cost for p in flops.points] == [short.train_flops, long.train_flops]
    verdict = frontier.verdict("wait", "train_flops")
    assert verdict is not None and (verdict.gap.n, verdict.gap.outside) == (1, 0)
