"""The benchmark's results as Markdown: the scores, then each pair's rate, menu and oracle."""

from __future__ import annotations

from collections.abc import Sequence

from esper_core.benchmark.results import (
    EXTRA_FLOPS,
    NORMALIZED,
    BenchmarkResults,
    PairResult,
    PolicyDifference,
    RunsDifference,
    RunsResult,
    ScoreRow,
    at_grid_edge,
    unscored,
)

TITLES = {
    NORMALIZED: "Where growth pays: normalized score (policy - wait) / (oracle - wait)",
    EXTRA_FLOPS: "Where the oracle is wait: extra training FLOPs (policy / wait - 1)",
}


def _number(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.3f}" if signed else f"{value:.3f}"


def _interval(low: float | None, high: float | None) -> str:
    return "-" if low is None or high is None else f"[{low:+.3f}, {high:+.3f}]"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


def _score_section(title: str, rows: Sequence[ScoreRow]) -> list[str]:
    pooled = [
        [r.policy, _number(r.estimate, True), _interval(r.low, r.high), str(len(r.pairs))]
        for r in rows
    ]
    pairs = list(dict.fromkeys(p.pair for r in rows for p in r.per_pair))
    per_pair = []
    for r in rows:
        by_pair = {p.pair: p for p in r.per_pair}
        per_pair.append(
            [r.policy]
            + [
                f"{_number(by_pair[p].estimate, True)} {_interval(by_pair[p].low, by_pair[p].high)}"
                if p in by_pair
                else "-"
                for p in pairs
            ]
        )
    lines = [f"## {title}", "", f"Unit: {rows[0].unit}. IQM over pairs x evaluation seeds.", ""]
    lines += _table(["policy", "IQM", "interval (crossed bootstrap)", "pairs"], pooled)
    lines += ["", "Per pair (IQM over evaluation seeds [bootstrap interval]):", ""]
    return lines + _table(["policy", *pairs], per_pair) + [""]


def _difference_cells(d: RunsDifference | PolicyDifference) -> list[str]:
    """Against, IQM, interval, wins/ties/losses and pairs of a paired difference."""
    return [
        d.against,
        _number(d.estimate, True),
        _interval(d.low, d.high),
        f"{d.wins}/{d.ties}/{d.losses}",
        str(len(d.pairs)),
    ]


def _runs_section(groups: Sequence[RunsResult]) -> list[str]:
    """Each learned controller pooled over its training runs (``[training_runs]``)."""
    scores = [
        [
            g.group,
            s.score,
            s.unit,
            _number(s.estimate, True),
            _interval(s.low, s.high),
            str(len(g.runs)),
            str(len(s.pairs)),
            str(len(s.seeds)),
        ]
        for g in groups
        for s in g.scores
    ]
    differences = [[g.group, *_difference_cells(d)] for g in groups for d in g.differences]
    lines = [
        "## Pooled over training runs",
        "",
        "IQM over training runs x pairs x evaluation seeds, three crossed factors: the "
        "interval (crossed bootstrap) draws runs, pairs and seeds, so it speaks for the "
        "training procedure. Runs: "
        + "; ".join(f"{g.group} = {', '.join(g.runs)}" for g in groups)
        + ".",
        "",
    ]
    lines += _table(["group", "score", "unit", "IQM", "interval", "runs", "pairs", "seeds"], scores)
    if differences:
        lines += [
            "",
            "Paired difference of the normalized score (each run less the policy, same pair "
            "and seed, resampled as one crossed table); wins/ties/losses over (run, pair, "
            "seed) cells:",
            "",
        ]
        lines += _table(
            ["group", "against", "IQM", "interval", "wins/ties/losses", "pairs"], differences
        )
    return lines


def _paired_section(differences: Sequence[PolicyDifference]) -> list[str]:
    """Each policy less each later one on the normalized score, cell by cell."""
    rows = [[d.policy, *_difference_cells(d), str(len(d.seeds))] for d in differences]
    lines = [
        "## Paired differences where growth pays",
        "",
        "The normalized score of the policy less that of the other, on the same pair and "
        "seed; IQM over pairs x evaluation seeds with the crossed bootstrap interval; "
        "wins/ties/losses over the cells.",
        "",
    ]
    header = ["policy", "against", "IQM", "interval", "wins/ties/losses", "pairs", "seeds"]
    return lines + _table(header, rows) + [""]


def _pair_section(pair: PairResult, tuning_seeds: Sequence[int]) -> list[str]:
    grid = ", ".join(f"{v:g}" for v in pair.lr_grid)
    rate = "unfinished" if pair.lr is None else f"{pair.lr:g}"
    oracle = pair.oracle or "unfinished"
    pays = {None: "", True: " (growth pays)", False: " (growth does not pay)"}[pair.growth_pays]
    lines = [
        f"### {pair.label} ({pair.task}, {pair.split})",
        "",
        f"- metric: {pair.metric}; wait's rate {rate} from the grid [{grid}], used by every arm",
        f"- oracle: {oracle}{pays}"
        + (
            ""
            if pair.gap is None
            else f"; mean gap over wait on the evaluation seeds {pair.gap:+.4g}"
        ),
    ]
    lines += [f"- not scored: {why}" for why in (pair.no_baseline, pair.wait_stalled) if why]
    if pair.within_noise:
        lines.append(f"- {pair.within_noise}")
    lines += [f"- not on the menu: {line}" for line in pair.left_out]
    lines += [f"- failed: {line}" for line in pair.failures]
    if pair.menu:
        seeds = [str(s) for s in tuning_seeds]
        rows = [
            [
                m.label + (" (oracle)" if m.label == pair.oracle else ""),
                *(_number(v) for v in m.values),
                _number(m.mean),
                ", ".join(map(str, m.failed)) or "",
            ]
            for m in pair.menu
        ]
        lines += ["", "Validation on the tuning seeds:", ""]
        lines += _table(["entry", *seeds, "mean", "did not train"], rows)
    return [*lines, ""]


def to_markdown(results: BenchmarkResults) -> str:
    level = f"{results.confidence:.0%}"
    lines = [
        f"# Controller benchmark: {results.split} pairs",
        "",
        f"Evaluation seeds {', '.join(map(str, results.seeds))}; tuning seeds "
        f"{', '.join(map(str, results.tuning_seeds))} (the rate and the oracle are chosen "
        f"there, never on evaluation seeds). Moments: {', '.join(f'{m:g}' for m in results.moments)}. "
        f"Intervals at {level}.",
        "",
        f"- rate: {results.tuning_rule}",
        f"- oracle: {results.oracle_rule}",
        "",
    ]
    kinds: dict[tuple[str, str], list[ScoreRow]] = {}
    for row in results.rows:
        kinds.setdefault((row.score, row.unit), []).append(row)
    for (score, unit), rows in kinds.items():
        title = TITLES.get(score, f"Where the oracle is wait: metric lost against wait ({unit})")
        lines += _score_section(title, rows)
    if not results.rows:
        lines += ["No scores yet: no pair has finished its evaluation.", ""]
    lines += [f"- {line}" for line in unscored(results.pairs)]
    lines += [f"- {line}" for line in at_grid_edge(results.pairs)]
    if any(d.pairs for d in results.paired):
        lines += ([""] if lines[-1] else []) + _paired_section(
            [d for d in results.paired if d.pairs]
        )
    if results.training_runs:
        lines += ([""] if lines[-1] else []) + _runs_section(results.training_runs)
    lines += ["", "## Pairs", ""]
    for pair in results.pairs:
        lines += _pair_section(pair, results.tuning_seeds)
    return "\n".join(lines).rstrip() + "\n"
