"""The oracle is chosen by validation on the tuning seeds, never by test values."""

from __future__ import annotations

import math
from pathlib import Path

from esper_core.benchmark import phases
from esper_core.benchmark.menu import HostOffer, build_menu
from esper_core.benchmark.oracle import EntryScore, choose_oracle, entry_score
from esper_core.benchmark.run_suite import PairPlan, select
from esper_core.compare.experiment import Cell
from esper_core.compare.stalls import StallRule
from esper_core.config import RunConfig
from esper_core.converter import structure
from tests.core.benchmark.helpers import finished, pair, suite

SEEDS = (100, 101, 102)


def test_the_oracle_is_the_best_validation_entry_though_test_says_otherwise(
    tmp_path: Path,
) -> None:
    found = suite(pair("p", "digits"), tuning_seeds=list(SEEDS))
    menu = build_menu(HostOffer("cnn"), (0.1,), 2.0, 2)  # wait, widen, deepen
    plan = PairPlan(found.pairs[0], menu, [], "final_test_acc", "val_acc")
    config = structure({}, RunConfig)
    # (validation, test) per entry: widen is best on validation, deepen on test.
    values = {"wait": (80.0, 80.0), "widen-at0.1": (90.0, 81.0), "deepen-at0.1": (85.0, 99.0)}
    menu_cells: list[Cell] = []
    wait_runs: list[Cell] = []
    for label, (val, test) in values.items():
        for k, seed in enumerate(SEEDS):
            cell = Cell("p", label, seed, config)
            root = tmp_path if label == "wait" else phases.menu_root(tmp_path)
            finished(cell.directory(root), val + k, test + k)
            (wait_runs if label == "wait" else menu_cells).append(cell)
    records, index = select(plan, found, menu_cells, wait_runs, tmp_path)
    assert index is not None and menu[index].label == "widen-at0.1"
    assert [r.mean for r in records] == [81.0, 91.0, 86.0]


def test_an_entry_that_did_not_train_on_a_tuning_seed_is_never_the_oracle() -> None:
    rule = StallRule()
    entries = [
        entry_score("wait", {100: 80.0, 101: 80.0, 102: 80.0}, SEEDS, True, rule),
        # best mean, but 30 points behind its own median on one seed: a stall
        entry_score("widen", {100: 99.0, 101: 99.0, 102: 69.0}, SEEDS, True, rule),
        entry_score("deepen", {100: 81.0, 101: math.nan, 102: 81.0}, SEEDS, True, rule),
    ]
    assert entries[1].failed == (102,) and entries[2].failed == (101,)
    assert choose_oracle(entries, True) == 0


def test_ties_go_to_wait_and_an_unfinished_menu_chooses_nothing() -> None:
    rule = StallRule()
    same = {100: 1.5, 101: 1.5, 102: 1.5}
    tied = [entry_score(x, same, SEEDS, False, rule) for x in ("wait", "widen")]
    assert choose_oracle(tied, False) == 0
    lower = entry_score("widen", {100: 1.4, 101: 1.4, 102: 1.4}, SEEDS, False, rule)
    assert choose_oracle([tied[0], lower], False) == 1  # a loss: lower is better
    partial = entry_score("deepen", {100: 1.0}, SEEDS, False, rule)
    assert not partial.complete
    assert choose_oracle([tied[0], partial], False) is None
    assert choose_oracle([EntryScore("wait", (None,), None, (), False)], True) is None
