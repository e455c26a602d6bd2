"""The results of a comparison as text: table rows shared by the terminal and Markdown."""

from __future__ import annotations

from esper_core.compare.results import (
    IMPROVEMENT_METRIC,
    METRIC,
    METRICS,
    ComparisonResults,
    Metric,
    PairedDifference,
)
from esper_core.compare.static_final import STATIC_FINAL


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


def table_rows(
    results: ComparisonResults, task: str | None, short: bool = False
) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the table of one task (None: all tasks); shared by text outputs."""
    header = ["policy", "runs", metric_header(METRIC[IMPROVEMENT_METRIC], short)]
    if results.baseline:
        same_seed = "W/T/L" if short else f"vs {results.baseline}, same seed: W/T/L"
        header += [f"P(> {results.baseline})", same_seed]
    static = _static_final(results)
    if static:
        header.append(
            "- static-final (W/T/L)"
            if short
            else "test acc − own static final architecture, same seed: IQM [CI] (W/T/L)"
        )
    header += [metric_header(m, short) for m in METRICS if m.key != IMPROVEMENT_METRIC]
    header.append("dominated on" if short else "dominated on (Pareto)")
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
        if static:
            cells.append(fmt_paired(row.versus(f"{policy}.{STATIC_FINAL}"), 2))
        for m in METRICS:
            if m.key != IMPROVEMENT_METRIC:
                r = row.metrics[m.key]
                if m.key == "train_flops":  # billions: the IQM of a count is no integer
                    cells.append(fmt_interval(r.iqm / 1e9, _g(r.low), _g(r.high), 2) + " G")
                else:
                    cells.append(fmt_interval(r.iqm, r.low, r.high, m.digits))
        cells.append(", ".join(AXIS_NAMES[a] for a in row.dominated) or "-")
        lines.append(cells)
    return header, lines


def _g(value: float | None) -> float | None:
    return None if value is None else value / 1e9


AXIS_NAMES = {"params_forward": "params", "train_flops": "FLOPs"}


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
    if _static_final(results):
        lines.append(
            f"POLICY.{STATIC_FINAL}: for each seed, the architecture POLICY's run ended with "
            "(its seeds in the forward pass at the end) trained from scratch on the same seed "
            "(policies.static: same host init, data order and seed init). The difference "
            "column is POLICY's run minus that run: IQM of the paired differences [CI] "
            "(wins/ties/losses)."
        )
    lines.append(
        "Costs: parameters in the forward pass and held at the end, training FLOPs "
        "(forward + backward, counted by torch's FlopCounterMode). Dominated on params / "
        "FLOPs: another policy of the task has at least the IQM test accuracy for at most "
        "the mean cost, and is better on one of the two."
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
