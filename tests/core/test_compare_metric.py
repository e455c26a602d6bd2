"""A comparison ranks runs in its task's metric: for a language model the test loss.

Synthetic finished cells where accuracy and loss disagree (the README's charlm case: the
policy wins on accuracy on 2 of 3 seeds against wait but has the lower loss on 3 of 3).
P(better than the baseline), the same-seed W/T/L, the paired difference against the
policy's own static final architecture, the dominance marks and the tables must all
follow the loss when the task's metric is the loss."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from esper_core.compare.comparison import RESULTS_JSON, RESULTS_MD, write_results
from esper_core.compare.experiment import Arm, Cell, Experiment
from esper_core.compare.metric import ACCURACY, LOSS, MIXED
from esper_core.compare.results import (
    RESULTS_SCHEMA_VERSION,
    ComparisonResults,
    aggregate,
    load_results,
)
from esper_core.compare.tables import table_rows, to_markdown
from esper_core.config import RunConfig

SEEDS = (0, 1, 2)
# policy -> (params in the forward pass, accuracy per seed, loss per seed)
RUNS = {
    "wait": (100.0, [50.0, 50.0, 50.0], [2.90, 2.90, 2.90]),
    # Accuracy: better on seeds 0 and 1, worse on 2. Loss: lower on every seed.
    "heuristic": (150.0, [51.0, 51.0, 49.0], [2.85, 2.86, 2.87]),
    # Its final architecture from scratch: more accurate on every seed, higher loss.
    "heuristic.static-final": (150.0, [52.0, 52.0, 52.0], [2.88, 2.88, 2.88]),
}


def finish(directory: Path, params: float, acc: float, loss: float) -> None:
    directory.mkdir(parents=True)
    summary = {
        "status": "completed",
        "final_test_acc_mean": acc,
        "params_added_mean": 0.0,
        "params_forward_mean": params,
        "train_flops_mean": params * 1e6,
        "seeds_fossilized": 0,
        "seeds_pruned": 0,
        "wall_time": 1.0,
        "episodes": [{"final_test_loss": loss}],
    }
    (directory / "summary.json").write_text(json.dumps(summary))


def results_of(
    tmp_path: Path, metrics: dict[str, str] | None, tasks: tuple[str, ...] = ("charlm",)
) -> ComparisonResults:
    experiment = Experiment(
        policies=(Arm("heuristic", "heuristic", "heuristic"), Arm("wait", "wait", "wait")),
        tasks=tuple(Arm(t, t, t) for t in tasks),
        seeds=SEEDS,
        base=RunConfig(),
        baseline="wait",
        baselines=("static-final",),
        resamples=200,
    )
    cells = []
    for task in tasks:
        for policy, (params, accs, losses) in RUNS.items():
            for seed in SEEDS:
                cell = Cell(task, policy, seed, RunConfig())
                finish(cell.directory(tmp_path), params, accs[seed], losses[seed])
                cells.append(cell)
    return aggregate(experiment, cells, tmp_path, metrics)


def test_a_language_model_is_ranked_by_its_test_loss(tmp_path: Path) -> None:
    results = results_of(tmp_path, {"charlm": LOSS})
    assert results.metrics == {"charlm": LOSS} and results.metric("charlm") == LOSS
    row = results.row("charlm", "heuristic")
    assert row is not None and row.metric == LOSS
    imp = row.improvement
    assert imp is not None and imp.metric == LOSS
    assert imp.probability == 1.0  # every heuristic run has a lower loss than every wait run
    assert (imp.wins, imp.ties, imp.losses) == (3, 0, 0)
    static = row.versus("heuristic.static-final")
    assert static is not None and (static.metric, static.higher_is_better) == (LOSS, False)
    assert static.mean == pytest.approx(-0.02)  # the policy's run minus the static one
    assert (static.wins, static.ties, static.losses) == (3, 0, 0)
    # At equal parameters the heuristic's loss is lower: the static final architecture is
    # the dominated one (in accuracy it would be the other way round).
    static_row = results.row("charlm", "heuristic.static-final")
    assert static_row is not None and static_row.dominated == ["params_forward", "train_flops"]
    assert row.dominated == []

    header, rows = table_rows(results, "charlm")
    assert header[2] == "final test loss" and "P(test loss < wait)" in header
    assert "vs wait, same random seed: W/T/L, win: lower test loss" in header
    static_column = (
        "test loss − own static final architecture, same random seed (lower is better): "
        "IQM [CI] (W/T/L)"
    )
    assert static_column in header
    by_policy = {r[0]: dict(zip(header, r)) for r in rows}
    heuristic = by_policy["heuristic"]
    assert heuristic["final test loss"].startswith("2.8600")
    assert heuristic["P(test loss < wait)"].startswith("1.00")
    assert heuristic["vs wait, same random seed: W/T/L, win: lower test loss"] == "3/0/0"
    assert heuristic[static_column].startswith("-0.0200")
    assert heuristic[static_column].endswith("(3/0/0)")
    assert "final test accuracy (%)" in header  # still shown, as one column among the costs
    short_header, _ = table_rows(results, "charlm", short=True)
    assert "P(< wait)" in short_header

    write_results(results, tmp_path)
    markdown = (tmp_path / RESULTS_MD).read_text()
    assert markdown == to_markdown(results)
    assert "better is a lower final test loss" in markdown
    assert load_results(tmp_path / RESULTS_JSON) == results
    raw = json.loads((tmp_path / RESULTS_JSON).read_text())
    assert raw["schema_version"] == RESULTS_SCHEMA_VERSION >= 5  # metrics since schema 5
    assert raw["metrics"] == {"charlm": LOSS} and raw["rows"][0]["metric"] == LOSS
    assert (tmp_path / "intervals.png").stat().st_size > 0
    assert (tmp_path / "pareto.png").stat().st_size > 0


def test_the_same_runs_ranked_by_accuracy_disagree(tmp_path: Path) -> None:
    """Without the loss as the metric the verdicts flip: what the test above checks is
    the metric's doing, not the data's."""
    results = results_of(tmp_path, None)
    row = results.row("charlm", "heuristic")
    assert row is not None and row.metric == ACCURACY
    imp = row.improvement
    assert imp is not None and (imp.wins, imp.ties, imp.losses) == (2, 0, 1)
    assert imp.probability == pytest.approx(2 / 3)
    static = row.versus("heuristic.static-final")
    assert static is not None and (static.wins, static.losses) == (0, 3)
    assert row.dominated == ["params_forward", "train_flops"]
    header, _ = table_rows(results, "charlm")
    assert "P(> wait)" in header and "vs wait, same random seed: W/T/L" in header


def test_tasks_of_different_metrics_are_each_ranked_in_their_own(tmp_path: Path) -> None:
    results = results_of(tmp_path, {"charlm": LOSS, "glyphs": ACCURACY}, ("charlm", "glyphs"))
    pooled = results.row(None, "heuristic")
    assert pooled is not None and pooled.metric == MIXED and results.metric(None) == MIXED
    imp = pooled.improvement
    assert imp is not None and imp.metric == MIXED
    # charlm: 3 wins in loss; glyphs: 2 wins and a loss in accuracy.
    assert (imp.wins, imp.ties, imp.losses) == (5, 0, 1)
    assert imp.probability == pytest.approx((1.0 + 2 / 3) / 2)
    header, rows = table_rows(results, None)
    # No main column (accuracy pooled with loss means nothing); both are shown as values.
    assert header[:3] == ["policy", "runs", "P(better than wait)"]
    assert "final test accuracy (%)" in header and "final test loss" in header
    assert all(len(r) == len(header) for r in rows)
    write_results(results, tmp_path)
    markdown = (tmp_path / RESULTS_MD).read_text()
    assert "a lower final test loss (charlm); a higher final test accuracy (glyphs)" in markdown


def test_results_of_schema_4_load_as_ranked_by_accuracy(tmp_path: Path) -> None:
    """Before schema 5 every comparison was in accuracy and every paired win a higher
    value: that is what an older results.json says when it loads."""
    from esper_core.converter import unstructure

    raw = unstructure(results_of(tmp_path, None))
    raw["schema_version"] = 4
    del raw["metrics"]
    for row in raw["rows"]:
        del row["metric"]
        for difference in row["paired"]:
            del difference["higher_is_better"]
    (tmp_path / RESULTS_JSON).write_text(json.dumps(raw))
    old = load_results(tmp_path / RESULTS_JSON)
    assert old.metric("charlm") == ACCURACY
    row = old.row("charlm", "heuristic")
    assert row is not None and row.metric == ACCURACY
    assert all(d.higher_is_better for d in row.paired)
    assert table_rows(old, "charlm")[0][2] == "final test accuracy (%)"
