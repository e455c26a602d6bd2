"""``esper benchmark`` end to end at the smallest scale: two evaluation pairs (a CNN
task's host and a user's MLP through tasks.dataset) and one training pair, 2 epochs of 2
batches, 2 tuning and 2 evaluation seeds, one moment; cells in this process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from esper_core.benchmark.menu import WAIT
from esper_core.benchmark.run_suite import benchmark
from esper_core.benchmark.suite import MenuFile
from esper_core.plugins import PluginManager
from tests.core.benchmark.helpers import USER_MLP, pair, suite
from tests.inline_runner import INLINE_RUNNER
from tests.plugin_set import first_party


@pytest.mark.slow  # about 25 cells and 9 probe builds: ~50 s on a loaded 2-core machine
def test_one_split_runs_its_three_phases_and_scores_every_policy(tmp_path: Path) -> None:
    impaired = pair("digits-impaired", "digits", preset="impaired")
    impaired.lr = [0.1, 0.4]
    found = suite(
        impaired,
        pair("user-mlp", "dataset", **USER_MLP),
        pair("digits-small", "digits", "training", preset="small"),
        seeds=2,
        tuning_seeds=[100, 101],
        menu=MenuFile(moments=[0.5]),
    )
    plugins = [*first_party(), INLINE_RUNNER]
    pm = PluginManager(extra=plugins, autoload=False)
    out = tmp_path / "bench"
    done = benchmark(
        found, pm, out, "evaluation", runner="inline", plugins=plugins, notify=lambda _m: None
    )
    assert [p.label for p in done.pairs] == ["digits-impaired", "user-mlp"]
    assert not (out / "cells" / "digits-small").exists()  # a training pair never runs here
    for result in done.pairs:
        assert result.lr in result.lr_grid and result.oracle is not None
        assert result.menu[0].label == WAIT and result.failures == []
        arms = [a.arm for a in result.evaluation]
        assert arms[0] == WAIT and arms[-1] == "heuristic"
        assert ("oracle" in arms) == bool(result.growth_pays)
        assert all(v is not None for a in result.evaluation for v in a.metric)
    assert {r.policy for r in done.rows} == {"wait", "heuristic"}
    written = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert written["split"] == "evaluation" and len(written["pairs"]) == 2
    text = (out / "results.md").read_text(encoding="utf-8")
    assert "### user-mlp (dataset, evaluation)" in text and "deepen:" in text
    # Running again reuses every finished cell.
    ran: list[object] = []
    benchmark(
        found,
        pm,
        out,
        "evaluation",
        runner="inline",
        plugins=plugins,
        notify=lambda _m: None,
        on_outcome=ran.append,
    )
    assert ran == []


def test_until_tuning_gives_the_training_pairs_rates_and_runs_nothing_else(
    tmp_path: Path,
) -> None:
    from esper_core.benchmark.train_pairs import training_pairs, tuned_rates
    from esper_core.errors import ConfigError

    small = pair("digits-small", "digits", "training", preset="small")
    small.lr = [0.1, 0.4]
    found = suite(
        pair("digits-impaired", "digits", preset="impaired"),
        small,
        tuning_seeds=[100, 101],
        menu=MenuFile(moments=[0.5]),
    )
    plugins = [*first_party(), INLINE_RUNNER]
    pm = PluginManager(extra=plugins, autoload=False)
    out = tmp_path / "bench" / "training"
    with pytest.raises(ConfigError, match=r"run `esper benchmark suite\.toml --split training`"):
        tuned_rates(out / "results.json", "suite.toml")
    done = benchmark(
        found,
        pm,
        out,
        "training",
        runner="inline",
        plugins=plugins,
        notify=lambda _m: None,
        until="tuning",
    )
    (result,) = done.pairs
    assert result.lr in (0.1, 0.4) and result.oracle is None and result.menu == []
    assert not (out / "menu").exists() and not (out / "cells").exists()
    rates = tuned_rates(out / "results.json", "suite.toml")
    assert rates == {"digits-small": result.lr}
    (mine,) = training_pairs(found, rates, "suite.toml", {"env": {"max_epochs": 2}})
    assert mine.label == "digits-small"
    assert mine.config["run"] == {"task": "digits"}
    assert mine.config["tasks"]["digits"]["preset"] == "small"
    assert mine.config["training"]["lr"] == result.lr
    assert mine.config["env"]["max_epochs"] == 2  # the suite's shared config
    with pytest.raises(ConfigError, match="no tuned rate for training pairs digits-small"):
        training_pairs(found, {}, "suite.toml")
