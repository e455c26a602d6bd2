"""The results of a comparison as text: table rows shared by the terminal and Markdown."""

from __future__ import annotations

from esper_core.compare.results import (
    IMPROVEMENT_METRIC,
    METRIC,
    METRICS,
    ComparisonResults,
    Metric,
)


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


def table_rows(
    results: ComparisonResults, task: str | None, short: bool = False
) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the table of one task (None: all tasks); shared by text outputs."""
    header = ["policy", "runs", metric_header(METRIC[IMPROVEMENT_METRIC], short)]
    if results.baseline:
        same_seed = "W/T/L" if short else f"vs {results.baseline}, same seed: W/T/L"
        header += [f"P(> {results.baseline})", same_seed]
    header += [metric_header(m, short) for m in METRICS if m.key != IMPROVEMENT_METRIC]
    lines = []
    for policy in results.policies:
        row = results.row(task, policy)
        if row is None:
            continue
        main = row.metrics[IMPROVEMENT_METRIC]
        cells = [
            policy,
            str(row.n),
            fmt_interval(main.iqm, main.low, main.high, METRIC[IMPROVEMENT_METRIC].digits),
        ]
        if results.baseline:
            imp = row.improvement
            if policy == results.baseline:
                cells += ["baseline", "-"]
            elif imp is None:
                cells += ["-", "-"]
            else:
                cells += [
                    fmt_interval(imp.probability, imp.low, imp.high, 2),
                    f"{imp.wins}/{imp.ties}/{imp.losses}",
                ]
        for m in METRICS:
            if m.key != IMPROVEMENT_METRIC:
                r = row.metrics[m.key]
                cells.append(fmt_interval(r.iqm, r.low, r.high, m.digits))
        lines.append(cells)
    return header, lines


def sections(results: ComparisonResults) -> list[tuple[str | None, str]]:
    out: list[tuple[str | None, str]] = [(t, t) for t in results.tasks]
    if len(results.tasks) > 1:
        out.append((None, "all tasks (bootstrap stratified over tasks)"))
    return out


def describe(results: ComparisonResults) -> list[str]:
    seeds = results.seeds
    span = f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]}–{seeds[-1]}"
    lines = [
        f"{len(seeds)} seed(s) per policy and task (seeds {span}), one episode of one env per run; "
        "the same seed gives every policy the same host initialisation and data order.",
        f"Each value: interquartile mean (IQM) over runs [{results.confidence:.0%} confidence interval, "
        f"percentile bootstrap with {results.resamples} resamples, generator seed {results.bootstrap_seed}].",
    ]
    if results.baseline:
        lines.append(
            f"P(> {results.baseline}): probability that a run of the policy ends with a higher final test "
            f"accuracy than a run of {results.baseline} (Mann–Whitney U / (n·m), ties count 1/2); "
            "0.5 means no difference, an interval excluding 0.5 a real one. "
            f"W/T/L: runs that ended better / equal / worse than {results.baseline}'s run with the "
            "same task and seed."
        )
    return lines


def to_markdown(results: ComparisonResults) -> str:
    title = f"# esper compare: {', '.join(results.policies)} on {', '.join(results.tasks)}"
    out = [title, "", *describe(results), ""]
    for task, heading in sections(results):
        header, rows = table_rows(results, task)
        out += [f"## {heading}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(r) + " |" for r in rows]
        out.append("")
    if results.missing:
        out += ["## Missing runs", "", *[f"- {m}" for m in results.missing], ""]
    return "\n".join(out)
