"""The results of a comparison as text: table rows shared by the terminal and Markdown."""

from __future__ import annotations

from collections.abc import Set

from esper_core.compare.frontier import FrontierGap, FrontierVerdict, TaskFrontier
from esper_core.compare.metric import MIXED, higher_is_better
from esper_core.compare.paired import PairedDifference
from esper_core.compare.pareto import COST_AXES
from esper_core.compare.results import METRIC, METRICS, ComparisonResults, Metric
from esper_core.compare.stalls import failed_arms
from esper_core.compare.static_final import STATIC_FINAL
from esper_core.compare.tuning_tables import tuning_markdown


def fmt(value: float | None, digits: int) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def fmt_interval(estimate: float, low: float | None, high: float | None, digits: int) -> str:
    if low is None or high is None:
        return fmt(estimate, digits)
    return f"{fmt(estimate, digits)} [{fmt(low, digits)}, {fmt(high, digits)}]"


def metric_header(metric: Metric, short: bool = False) -> str:
    if short:
        return metric.short
    return f"{metric.title} ({metric.unit})" if metric.unit else metric.title


def fmt_paired(d: PairedDifference | None, digits: int) -> str:
    if d is None:
        return "-"
    return f"{fmt_interval(d.iqm, d.low, d.high, digits)} ({d.wins}/{d.ties}/{d.losses})"


def _static_final(results: ComparisonResults) -> bool:
    return any(p.endswith(f".{STATIC_FINAL}") for p in results.policies)


def _better_than(metric: str, baseline: str, short: bool) -> str:
    """The P(...) header: the comparison says its direction."""
    if metric == MIXED:
        return f"P(better than {baseline})"
    if short:
        return f"P({'>' if higher_is_better(metric) else '<'} {baseline})"
    if higher_is_better(metric):
        return f"P(> {baseline})"
    return f"P({METRIC[metric].short} < {baseline})"


def _win(metric: str) -> str:
    """What a win is, for the W/T/L headers of a metric where lower is better."""
    if metric == MIXED:
        return ", win: better in the task's metric"
    return "" if higher_is_better(metric) else f", win: lower {METRIC[metric].short}"


def table_rows(
    results: ComparisonResults, task: str | None, short: bool = False
) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the table of one task (None: all tasks); shared by text outputs.
    The main column and every comparison are in the section's metric (all tasks of
    different metrics: no main column, each task compared in its own)."""
    metric = results.metric(task)
    main = METRIC.get(metric)  # None: MIXED
    header = ["policy", "runs"]
    if main is not None:
        header.append(metric_header(main, short))
    if results.baseline:
        same_seed = (
            "W/T/L" if short else f"vs {results.baseline}, same random seed: W/T/L{_win(metric)}"
        )
        header += [_better_than(metric, results.baseline, short), same_seed]
    static = _static_final(results) and main is not None
    if main is not None and static:
        direction = "higher" if higher_is_better(metric) else "lower"
        header.append(
            "- static-final (W/T/L)"
            if short
            else f"{main.short} − own static final architecture, same random seed ({direction} is "
            "better): IQM [CI] (W/T/L)"
        )
    header += [metric_header(m, short) for m in METRICS if m.key != metric]
    header.append("dominated on" if short else "dominated on (Pareto)")
    failed = failed_arms(results.failures, task)
    lines = []
    for policy in results.policies:
        row = results.row(task, policy)
        if row is None:
            continue
        cells = [policy, str(row.n)]
        if main is not None:
            r = row.metrics[metric]
            cells.append(fmt_interval(r.iqm, r.low, r.high, main.digits))
        if results.baseline:
            imp = row.improvement
            if policy == results.baseline:
                cells += ["baseline", "-"]
            elif imp is None:
                cells += ["-", "-"]
            else:
                versus = fmt_interval(imp.probability, imp.low, imp.high, 2)
                if failed & {policy, results.baseline}:
                    versus = f"{UNRESOLVED} ({versus})"
                cells += [versus, f"{imp.wins}/{imp.ties}/{imp.losses}"]
        if main is not None and static:
            twin = f"{policy}.{STATIC_FINAL}"
            paired = fmt_paired(row.versus(twin, metric), main.digits)
            cells.append(f"{UNRESOLVED} ({paired})" if failed & {policy, twin} else paired)
        for m in METRICS:
            if m.key != metric:
                r = row.metrics[m.key]
                if m.key == "train_flops":  # billions: the IQM of a count is no integer
                    cells.append(fmt_interval(r.iqm / 1e9, _g(r.low), _g(r.high), 2) + " G")
                else:
                    cells.append(fmt_interval(r.iqm, r.low, r.high, m.digits))
        # The verdict word of every table and plot (NOT_DOMINATED), never "-" or "on it".
        cells.append(", ".join(AXIS_NAMES[a] for a in row.dominated) or NOT_DOMINATED)
        lines.append(cells)
    return header, lines


def _g(value: float | None) -> float | None:
    return None if value is None else value / 1e9


AXIS_NAMES = {"params_forward": "params", "train_flops": "FLOPs"}
# A verdict that does not hold, in every table: a row nothing dominates (the main table
# said "-" and the frontier's "no") and a size the frontier does not pass through (it said
# "-", the word for a value that does not exist).
NO = "no"
NOT_DOMINATED = NO
# A verdict against an arm that did not train on every seed (esper_core.compare.stalls).
UNRESOLVED = "unresolved"


def sections(results: ComparisonResults) -> list[tuple[str | None, str]]:
    out: list[tuple[str | None, str]] = [(t, t) for t in results.tasks]
    if len(results.tasks) > 1:
        out.append((None, "all tasks (bootstrap stratified over tasks)"))
    return out


def _ranking(results: ComparisonResults) -> str:
    """Which metric ranks the runs of which task, and which way is better."""
    by_metric: dict[str, list[str]] = {}
    for task in results.tasks:
        by_metric.setdefault(results.metric(task), []).append(task)
    parts = [
        f"{'a higher' if higher_is_better(m) else 'a lower'} {METRIC[m].title}"
        + (f" ({', '.join(tasks)})" if len(by_metric) > 1 else "")
        for m, tasks in by_metric.items()
    ]
    return "; ".join(parts)


def describe(results: ComparisonResults) -> list[str]:
    seeds = results.seeds
    span = f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]}–{seeds[-1]}"
    better = _ranking(results)
    lines = [
        f"{len(seeds)} random seed(s) per policy and task (random seeds {span}), one episode of one "
        "env per run; the same random seed gives every policy the same host initialisation and data order.",
        f"Each value: interquartile mean (IQM) over runs [{results.confidence:.0%} confidence interval, "
        f"percentile bootstrap with {results.resamples} resamples, generator seed {results.bootstrap_seed}].",
        f"Runs are ranked by the task's metric: better is {better}.",
    ]
    if results.baseline:
        named = " / ".join(
            dict.fromkeys(
                _better_than(results.metric(task), results.baseline, False)
                for task, _ in sections(results)
            )
        )
        lines.append(
            f"{named}: probability that a run of the policy ends better than "
            f"a run of {results.baseline}, with {better} (Mann–Whitney U / (n·m), ties count "
            "1/2); 0.5 means no difference, an interval excluding 0.5 a real one. "
            f"W/T/L: runs that ended better / equal / worse than {results.baseline}'s run "
            "with the same task and random seed."
        )
    if _static_final(results):
        lines.append(
            f"POLICY.{STATIC_FINAL}: for each random seed, the architecture POLICY's run ended "
            "with (its seeds in the forward pass at the end) trained from scratch on the same "
            "random seed "
            "(policies.static: same host init, data order and seed init). The difference "
            "column is POLICY's run minus that run in the task's metric (a negative test "
            "loss difference is a win): IQM of the paired differences [CI] "
            "(wins/ties/losses). A run whose host itself grew: its twin grows the host so at "
            "epoch 0 with a one-epoch ramp, folded before the first epoch, and installs the "
            "seeds the run grew on it; a run that kept two host growths, or a seed born "
            "before its host grew, has no twin (the row pairs fewer runs; a caution above names each)."
        )
    lines.append(
        "Costs: parameters in the forward pass and held at the end, training FLOPs "
        "(forward + backward, counted by torch's FlopCounterMode). Dominated on params / "
        "FLOPs: another policy of the task (or a size of the sweep) has at least as good an "
        "IQM in the task's metric for at most the mean cost, and is better on one of the two."
    )
    return lines


def _gap(gap: FrontierGap, digits: int) -> str:
    if gap.n == 0 or gap.iqm is None:
        return "outside the sweep"
    text = (
        f"{fmt_interval(gap.iqm, gap.low, gap.high, digits)} ({gap.better}/{gap.ties}/{gap.worse})"
    )
    return text + (f", {gap.outside} seed(s) outside" if gap.outside else "")


def _dominated(verdict: FrontierVerdict | None) -> str:
    if verdict is None:
        return "-"
    return f"yes: {', '.join(verdict.dominated_by)}" if verdict.dominated else NOT_DOMINATED


def frontier_rows(
    frontier: TaskFrontier, short: bool = False, failed: Set[str] = frozenset()
) -> tuple[list[str], list[list[str]], list[str], list[list[str]]]:
    """The verdict table (one row per policy) and the sweep table (one row per size);
    ``failed``: the task's arms that did not train, whose verdicts are unresolved (a
    sweep size among them leaves every gap unresolved)."""
    sweep_failed = (
        any(p.label in failed for p in frontier.axes[0].points) if frontier.axes else False
    )
    metric = METRIC[frontier.metric]
    digits = metric.digits
    value = metric_header(metric, short)
    delta = "Δ" if short else "Δ vs frontier"
    header = ["policy", value]
    for axis in COST_AXES:
        name = AXIS_NAMES[axis]
        header += [
            f"dominated ({name})",
            f"{delta} @ equal {name}" + ("" if short else ", same random seed: IQM [CI] (B/T/W)"),
        ]
    rows = []
    for policy in dict.fromkeys(v.policy for v in frontier.verdicts):
        first = frontier.verdict(policy, "params_forward")
        cells = [policy, fmt(first.value if first else None, digits)]
        for axis in COST_AXES:
            verdict = frontier.verdict(policy, axis)
            gap = _gap(verdict.gap, digits) if verdict else "-"
            if verdict and (sweep_failed or policy in failed):
                gap = f"{UNRESOLVED} ({gap})"
            cells += [_dominated(verdict), gap]
        rows.append(cells)
    sweep_header = ["size", "params fwd", "train FLOPs", value, "on frontier"]
    sweep_rows = []
    params, flops = (next(a for a in frontier.axes if a.axis == x) for x in COST_AXES)
    for point in params.points:
        other = next(p for p in flops.points if p.label == point.label)
        on = [
            AXIS_NAMES[a.axis]
            for a in (params, flops)
            if any(p.label == point.label and p.on_frontier for p in a.points)
        ]
        sweep_rows.append(
            [
                point.label,
                fmt(point.cost, 0),
                fmt(other.cost / 1e9, 2) + " G",
                fmt(point.value, digits),
                ", ".join(on) or NO,
            ]
        )
    return header, rows, sweep_header, sweep_rows


def describe_frontier(frontier: TaskFrontier) -> str:
    metric = METRIC[frontier.metric]
    direction = "higher" if frontier.higher_is_better else "lower"
    return (
        f"Size-sweep frontier of {frontier.task} in {metric.title} ({direction} is better): "
        "the monotone hull of the sweep's points in log cost (cost: mean over random seeds; value: "
        f"IQM), {'concave' if frontier.higher_is_better else 'convex'} and never worse at a "
        "higher cost, so a point below the chord of its neighbours or a bigger one that did "
        "worse lowers nothing. The hull is chosen by the sizes' validation values, as a "
        "researcher picks a size, and drawn at their test values; on frontier: it passes "
        "through the size. Dominated: a sweep "
        "point or another policy has at most the policy's cost and at least its value, "
        "better on one. Δ: the policy's run minus the frontier of the same random seed's "
        "sweep runs (chosen by that random seed's validation values) at "
        "the run's own cost (linear in log cost between hull vertices, flat at the best "
        "value up to the costliest point; none outside the sweep's cost range): IQM over "
        "random seeds [CI] (random seeds better/tied/worse than the frontier)."
    )


def training_runs_rows(
    results: ComparisonResults, short: bool = False
) -> tuple[list[str], list[list[str]]]:
    """One row per method of several training runs and task: its runs pooled, the spread
    of its runs and the paired difference against the baseline, in the task's metric."""
    header = [
        "method",
        "task",
        "training runs",
        "IQM [CI]" if short else "metric: IQM [CI] pooled over runs × random seeds",
        "per-run IQMs" if short else "per-run IQMs (min–max)",
    ]
    if results.baseline:
        header.append(
            f"- {results.baseline} (W/T/L)"
            if short
            else f"vs {results.baseline}, same random seed: paired IQM [CI] (W/T/L)"
        )
    rows = []
    for g in results.training_groups:
        metric = METRIC[g.metric]
        runs = str(len(g.per_run)) + (f" of {g.runs}" if len(g.per_run) < g.runs else "")
        seeds = {r.n for r in g.per_run}
        cells = [
            g.label,
            g.task,
            f"{runs} × {seeds.pop()} random seeds"
            if len(seeds) == 1
            else f"{runs}, {g.n} runs × random seeds",
            f"{metric.short}: {fmt_interval(g.iqm, g.low, g.high, metric.digits)}",
            f"{fmt(g.run_min, metric.digits)}–{fmt(g.run_max, metric.digits)}",
        ]
        if results.baseline:
            cells.append(fmt_paired(g.versus, metric.digits))
        rows.append(cells)
    return header, rows


def describe_training_runs(results: ComparisonResults) -> str:
    versus = (
        f" The paired column is each run's value minus {results.baseline}'s run of the same "
        "task and random seed, resampled the same way; W/T/L in the task's metric (a lower test "
        "loss is a win)."
        if results.baseline
        else ""
    )
    return (
        "Each method trained in several independent runs (one arm METHOD.run-i per "
        "checkpoint, in the tables above one by one): the IQM of every (training run, "
        "evaluation random seed) value pooled, and the lowest and highest IQM of a single run. "
        "The interval is a crossed bootstrap: each resample draws the training runs with "
        "replacement and one draw of the evaluation random seeds that every drawn run (and the "
        "baseline) shares, expanded for the few runs a study has (docs/growth.md), so it "
        f"holds the spread between training runs as well as between random seeds.{versus}"
    )


def to_markdown(results: ComparisonResults) -> str:
    title = f"# esper compare: {', '.join(results.policies)} on {', '.join(results.tasks)}"
    out = [title, ""]
    if results.no_growth:  # first: every table below is read in its light
        out += [f"**{results.no_growth}**", ""]
    for failure in results.failures:
        out += [f"**Did not train: {failure.sentence()}.**", ""]
    for caution in results.cautions:
        out += [f"**Caution: {caution}.**", ""]
    out += [*describe(results), ""]
    out += tuning_markdown(results)
    for task, heading in sections(results):
        header, rows = table_rows(results, task)
        out += [f"## {heading}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(r) + " |" for r in rows]
        out.append("")
    if results.training_groups:
        header, rows = training_runs_rows(results)
        out += ["## Across training runs", "", "| " + " | ".join(header) + " |"]
        out += ["|" + "---|" * len(header), *["| " + " | ".join(r) + " |" for r in rows]]
        out += ["", describe_training_runs(results), ""]
    for frontier in results.frontier:
        failed = failed_arms(results.failures, frontier.task)
        header, rows, sweep_header, sweep_rows = frontier_rows(frontier, failed=failed)
        out += [f"## Frontier: {frontier.task}", "", describe_frontier(frontier), ""]
        for h, rs in ((header, rows), (sweep_header, sweep_rows)):
            out += ["| " + " | ".join(h) + " |", "|" + "---|" * len(h)]
            out += ["| " + " | ".join(r) + " |" for r in rs]
            out.append("")
    if results.missing:
        out += ["## Missing runs", "", *[f"- {m}" for m in results.missing], ""]
    return "\n".join(out)
