"""``esper benchmark``: the three phases of one split, run as ``esper compare`` runs cells.

Each phase's cells go to the runner (the local process pool, ``jobs`` at a time), a
finished cell is never run again and one made with another config runs again, as in a
comparison (:mod:`esper_core.compare.plan`, :mod:`esper_core.compare.cells`). A phase
starts once the one before it has finished for a pair: the menu waits for wait's rate,
the evaluation for the oracle. Running the same command again continues where it
stopped. Results go to ``OUT/results.json`` and ``OUT/results.md``.
"""

from __future__ import annotations

import math
import shutil
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import attrs
from attrs import frozen

from esper_core.benchmark import phases
from esper_core.benchmark.menu import MenuEntry, build_menu, refusals
from esper_core.benchmark.oracle import EntryScore, choose_oracle, clear_of_noise, entry_score
from esper_core.benchmark.paired import paired_differences
from esper_core.benchmark.pooled_runs import runs_results
from esper_core.benchmark.probe import host_offer, pair_config
from esper_core.benchmark.results import (
    ArmValues,
    BenchmarkResults,
    MenuRecord,
    PairResult,
    score_rows,
)
from esper_core.benchmark.suite import Pair, Suite, SuiteError, split_problems
from esper_core.benchmark.tables import to_markdown
from esper_core.compare.cell_dirs import CellState, cell_state
from esper_core.compare.cell_result import read_cell
from esper_core.compare.cell_runner import make_runner, threads_per_job
from esper_core.compare.cells import CellJob, CellOutcome
from esper_core.compare.experiment import Cell
from esper_core.compare.metric import HIGHER_IS_BETTER, VALIDATION, metric_kinds, task_metrics
from esper_core.compare.plan import stale_cells
from esper_core.compare.stalls import StallRule, failed_seeds
from esper_core.compare.tuning_results import VAL_ACC, VAL_LOSS, tuning_results, validation_value
from esper_core.converter import unstructure
from esper_core.plugins import PluginManager
from esper_core.run.checkpoint import write_json, write_text

RESULTS_JSON, RESULTS_MD = "results.json", "results.md"
PHASES = ("tuning", "menu", "evaluation")
Notify = Callable[[str], None]


@frozen
class PairPlan:
    pair: Pair
    menu: list[MenuEntry]
    left_out: list[str]
    metric: str  # the test field ranked by
    validation: str  # val_acc | val_loss


def plan_pairs(suite: Suite, split: str, pm: PluginManager) -> list[PairPlan]:
    """Check the split over every pair's resolved host, then build the split's menus."""
    resolved = []
    for pair in suite.pairs:
        config = pair_config(suite, pair, phases.WAIT_ARM, pm)
        options = {k: v for k, v in config.tasks.get(pair.task.name, {}).items() if v is not None}
        resolved.append(attrs.evolve(pair, task=attrs.evolve(pair.task, options=options)))
    problems = split_problems(resolved)
    if problems:
        raise SuiteError(problems)
    plans = []
    for pair in suite.split(split):
        offer = host_offer(suite, pair, pm)
        menu = build_menu(
            offer, suite.menu.moments, suite.menu.widen_factor, suite.menu.deepen_factor
        )
        experiment = phases.pair_experiment(suite, pair)
        kind = metric_kinds(experiment, pm, "auto")[pair.task.label]
        metric = task_metrics(experiment, pm)[pair.task.label]
        validation = VAL_LOSS if kind == "loss" else VAL_ACC
        plans.append(PairPlan(pair, menu, refusals(offer), metric, validation))
    return plans


def run_phase(
    cells: Sequence[Cell],
    root: Path,
    runner: object,
    pm: PluginManager,
    plugins: Sequence[str],
    notify: Notify,
    on_outcome: Callable[[CellOutcome], None],
) -> list[CellOutcome]:
    """Run the unfinished ``cells`` under ``root``; a cell made with another config first
    removed (it runs again)."""
    for directory, differences in stale_cells(cells, root, pm).items():
        notify(
            f"{directory}: made with another config ({'; '.join(differences[:3])}); running it again"
        )
        shutil.rmtree(directory)
    jobs = [
        CellJob(str(c.directory(root)), str(c.lock(root)), unstructure(c.config), tuple(plugins))
        for c in cells
        if cell_state(c.directory(root)) is not CellState.COMPLETED
    ]
    return list(runner.run(jobs, on_outcome, notify)) if jobs else []  # type: ignore[attr-defined]


def _validation(cells: Sequence[Cell], root: Path, metric: str) -> dict[str, dict[int, float]]:
    """Per arm, per seed, the finished cells' final validation values."""
    out: dict[str, dict[int, float]] = {}
    for cell in cells:
        directory = cell.directory(root)
        if cell_state(directory) is CellState.COMPLETED:
            out.setdefault(cell.policy, {})[cell.seed] = validation_value(directory, metric)
    return out


def _failures(outcomes: Sequence[CellOutcome], out: Path) -> list[tuple[str, str]]:
    """(cell directory relative to ``out``, error) of every failed cell."""
    return [
        (str(Path(o.directory).relative_to(out)), o.error or "failed")
        for o in outcomes
        if o.status == "failed"
    ]


def select(
    plan: PairPlan, suite: Suite, menu_cells: Sequence[Cell], wait_runs: Sequence[Cell], out: Path
) -> tuple[list[MenuRecord], int | None, str | None]:
    """The menu's validation values on the tuning seeds, the oracle's index (None while
    a run is unfinished) and, when the best entry's gain over wait is within the tuning
    seeds' noise, the line saying so (the oracle is then wait): ``menu_cells`` under
    ``OUT/menu``, ``wait_runs`` (the tuning cells of wait's chosen rate) under ``OUT``.
    Only validation values are read."""
    values = _validation(menu_cells, phases.menu_root(out), plan.validation)
    values["wait"] = _validation(wait_runs, out, plan.validation).get("wait", {})
    higher = plan.validation == VAL_ACC
    got = [values.get(e.label, {}) for e in plan.menu]
    wait = values["wait"]
    entries: list[EntryScore] = [
        entry_score(
            e.label,
            v,
            suite.tuning_seeds,
            higher,
            suite.stall,
            got[:k] + got[k + 1 :],
            None if e.label == "wait" else wait,
        )
        for k, (e, v) in enumerate(zip(plan.menu, got))
    ]
    records = [
        MenuRecord(
            e.label, e.policy, e.options, e.operator, e.at, list(s.values), s.mean, list(s.failed)
        )
        for e, s in zip(plan.menu, entries)
    ]
    settings = (suite.confidence, suite.resamples, suite.bootstrap_seed)
    index, note = clear_of_noise(entries, choose_oracle(entries, higher), higher, settings)
    return records, index, note


def no_baseline(wait: MenuRecord, lr: float) -> str | None:
    """Why the pair has no baseline (None: it has one): ``wait`` (the menu's first entry)
    did not train on some tuning seed at the pair's rate, so nothing is scored against it
    (docs/growth.md, the tuning rule)."""
    if not wait.failed:
        return None
    seeds = ", ".join(str(s) for s in wait.failed)
    return (
        f"wait did not train on tuning seed(s) {seeds} at its rate {lr:g}: no baseline, so "
        "the pair is not scored (widen its rate grid or its budget; docs/growth.md, the "
        "tuning rule)"
    )


def wait_stalled(
    validation: dict[int, float | None],
    higher: bool,
    lr: float,
    rule: StallRule,
    others: Sequence[Mapping[int, float | None]] = (),
) -> str | None:
    """Why no claim stands against ``wait`` on the pair (None: it trained on every
    evaluation seed): at its rate it diverged or stalled far behind its other runs on
    some evaluation seed (``validation``: its final validation value per seed), which
    would make any policy look good there (docs/growth.md, the tuning rule). ``others``:
    the other arms' validation values, which excuse a seed that was hard for them too."""
    failed = failed_seeds(validation, higher, rule, others)
    if not failed:
        return None
    finite = {s: v for s, v in validation.items() if v is not None and math.isfinite(v)}
    shown = ", ".join(
        f"{s} ({f'{finite[s]:.4g}' if s in finite else 'not finite'})" for s in failed
    )
    median = f"{statistics.median(finite.values()):.4g}" if finite else "none finite"
    return (
        f"wait did not train on evaluation seed(s) {shown} at its rate {lr:g} (median of "
        f"its runs {median}): no claim against it, so the pair is not scored (widen its "
        "rate grid, add tuning seeds or lower the rate; docs/growth.md, the tuning rule)"
    )


def benchmark(
    suite: Suite,
    pm: PluginManager,
    out: Path,
    split: str,
    *,
    jobs: int = 1,
    runner: str = "local",
    plugins: Sequence[str] = (),
    notify: Notify = print,
    on_outcome: Callable[[CellOutcome], None] | None = None,
    until: str = "evaluation",
) -> BenchmarkResults:
    """Run the split's phases (what is unfinished) up to ``until`` (``tuning``, ``menu``
    or ``evaluation``), then score and write the results (a phase not run is unfinished
    in them: ``tuning`` gives each pair's rate, what ``esper train --suite`` needs)."""
    if until not in PHASES:
        raise ValueError(f"until must be one of {', '.join(PHASES)}, not {until!r}")
    threads = suite.base.run.threads or threads_per_job(jobs)
    cells_runner = make_runner(pm, runner, {}, jobs)
    report = on_outcome or (lambda _o: None)
    plans = plan_pairs(suite, split, pm)
    out.mkdir(parents=True, exist_ok=True)
    outcomes: list[CellOutcome] = []

    def phase(cells: Sequence[Cell], root: Path) -> None:
        outcomes.extend(run_phase(cells, root, cells_runner, pm, plugins, notify, report))

    searched = {p.pair.task.label: phases.tuning_phase(suite, p.pair, pm, threads) for p in plans}
    notify(f"tuning wait's rate: {sum(map(len, searched.values()))} runs")
    phase([c for cells in searched.values() for c in cells], out)
    results: list[PairResult] = []
    menu_cells: dict[str, list[Cell]] = {}
    for plan in plans:
        label = plan.pair.task.label
        experiment = phases.pair_experiment(suite, plan.pair, tuned=True)
        tuned = tuning_results(experiment, searched[label], out, pm)
        arm = None if tuned is None else tuned.arm(label, "wait")
        result = PairResult(
            label,
            plan.pair.task.name,
            plan.pair.split,
            plan.metric,
            HIGHER_IS_BETTER[plan.metric],
            list(plan.pair.grid),
            None if arm is None or arm.chosen is None else float(arm.chosen[phases.LR]),
            arm,
            left_out=plan.left_out,
        )
        results.append(result)
        if result.lr is not None and until != "tuning":
            menu_cells[label] = phases.menu_phase(
                suite, plan.pair, plan.menu, result.lr, pm, threads
            )
    notify(f"oracle menus on the tuning seeds: {sum(map(len, menu_cells.values()))} runs")
    phase([c for cells in menu_cells.values() for c in cells], phases.menu_root(out))
    evaluation: dict[str, list[Cell]] = {}
    for i, plan in enumerate(plans):
        result = results[i]
        if result.lr is None or until == "tuning":
            continue
        label = plan.pair.task.label
        wait_runs = [c for c in searched[label] if c.config.training.lr == result.lr]
        records, index, note = select(plan, suite, menu_cells[label], wait_runs, out)
        oracle = None if index is None else plan.menu[index]
        results[i] = attrs.evolve(
            result,
            menu=records,
            oracle=None if oracle is None else oracle.label,
            growth_pays=None if oracle is None else oracle.policy != "wait",
            within_noise=note,
            no_baseline=no_baseline(records[0], result.lr),
        )
        if oracle is not None and until == "evaluation":
            evaluation[label] = phases.evaluation_phase(
                suite, plan.pair, oracle, result.lr, pm, threads
            )
    notify(f"evaluation: {sum(map(len, evaluation.values()))} runs")
    phase([c for cells in evaluation.values() for c in cells], out)
    failed = _failures(outcomes, out)
    results = [
        _evaluated(r, evaluation.get(r.label, []), out, suite.seeds, failed, suite.stall)
        for r in results
    ]
    policies = [a.label for a in phases.evaluation_arms(suite, None, split)]
    settings = (suite.confidence, suite.resamples, suite.bootstrap_seed)
    done = BenchmarkResults(
        split,
        list(suite.seeds),
        list(suite.tuning_seeds),
        list(suite.menu.moments),
        policies,
        results,
        score_rows(results, policies, suite.seeds, settings),
        suite.confidence,
        training_runs=runs_results(results, suite.training_runs, policies, suite.seeds, settings),
        paired=paired_differences(results, policies, suite.training_runs, suite.seeds, settings),
    )
    write_json(out / RESULTS_JSON, unstructure(done))
    write_text(out / RESULTS_MD, to_markdown(done))
    return done


def _evaluated(
    result: PairResult,
    cells: Sequence[Cell],
    out: Path,
    seeds: Sequence[int],
    failed: Sequence[tuple[str, str]],
    stall: StallRule,
) -> PairResult:
    by_arm: dict[str, dict[int, tuple[float, float]]] = {}
    validation: dict[str, dict[int, float | None]] = {}
    field = VALIDATION[result.metric]
    for cell in cells:
        found = read_cell(cell, out)
        if found is not None:
            by_arm.setdefault(cell.policy, {})[cell.seed] = (
                found.value(result.metric),
                found.train_flops,
            )
            validation.setdefault(cell.policy, {})[cell.seed] = (
                found.value(field) if getattr(found, field) is not None else None
            )
    wait_validation = validation.pop(phases.WAIT, {})
    arms = []
    for arm in dict.fromkeys(c.policy for c in cells):
        got = by_arm.get(arm, {})
        arms.append(
            ArmValues(
                arm,
                [got[s][0] if s in got else None for s in seeds],
                [got[s][1] if s in got else None for s in seeds],
            )
        )
    gap = None
    # Without evaluation cells (--until menu) there is no wait or oracle arm to compare.
    if result.growth_pays and len(arms) > 1:
        from esper_core.benchmark.scores import gap as oracle_gap

        wait = {s: v for s, v in zip(seeds, arms[0].metric) if v is not None}
        oracle = {s: v for s, v in zip(seeds, arms[1].metric) if v is not None}
        gap = oracle_gap(wait, oracle, result.higher_is_better)
    prefix = (
        f"tuning/cells/{result.label}/",
        f"menu/cells/{result.label}/",
        f"cells/{result.label}/",
    )
    lines = [
        f"{where}: {error.splitlines()[0]}" for where, error in failed if where.startswith(prefix)
    ]
    stalled = None
    if result.lr is not None and wait_validation:
        others = list(validation.values())
        stalled = wait_stalled(wait_validation, result.higher_is_better, result.lr, stall, others)
    return attrs.evolve(result, evaluation=arms, gap=gap, failures=lines, wait_stalled=stalled)


def unfinished(results: BenchmarkResults) -> list[str]:
    """Pairs whose search or selection has not finished (run again to continue)."""
    return [
        f"{p.label}: {'the rate search' if p.lr is None else 'the oracle selection'} is unfinished"
        for p in results.pairs
        if p.lr is None or p.growth_pays is None
    ]
