"""The cell-by-cell reader of a controller benchmark: a directory and the tarball a
results page keeps read alike, and a growth the governor rolled back counts as tried,
not kept."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

from tests.plugin_set import REPO
from tests.scripts import load_script


def _script() -> ModuleType:
    return load_script("benchmarks/controller_cells.py")


def _summary(host_added: int, seeds_added: int, growth_epoch: int | None, acc: float) -> dict:
    growths = (
        []
        if growth_epoch is None
        else [{"operator": "width", "started_epoch": growth_epoch, "fate": "fossilized"}]
    )
    episode = {
        "params_added": host_added + seeds_added,
        "host_params_added": host_added,
        "final_test_acc": acc,
        "final_test_loss": 1.0,
    }
    return {"episodes": [episode], "host_growths": growths}


CELLS = {
    ("mlp", "wait", 7): _summary(0, 0, None, 70.0),
    ("mlp", "ppo", 7): _summary(1200, 0, 1, 74.0),
    ("mlp", "ppo", 8): _summary(0, 0, 2, 60.0),  # widened, then rolled back
    ("mlp", "ppo", 9): _summary(0, 35, None, 72.0),
    ("cnn", "ppo", 7): _summary(0, 0, None, 90.0),
}


@pytest.fixture
def cells_dir(tmp_path: Path) -> Path:
    root = tmp_path / "controller-benchmark" / "evaluation" / "cells"
    for (pair, arm, seed), summary in CELLS.items():
        d = root / pair / arm / f"seed-{seed}"
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps(summary))
        (d / "config.toml").write_text("")
    return root


def test_a_directory_and_its_tarball_read_alike(cells_dir: Path, tmp_path: Path) -> None:
    script = _script()
    tarball = tmp_path / "cells.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(cells_dir.parents[1], arcname="controller-benchmark")
    from_dir = script.collect(cells_dir, [], [], None)
    assert from_dir == script.collect(tarball, [], [], None)
    assert set(from_dir) == {"cnn", "mlp"}


def test_what_an_arm_did_is_counted_per_cell(cells_dir: Path) -> None:
    ppo = _script().collect(cells_dir, ["ppo"], ["mlp"], range(7, 10))["mlp"]["ppo"]
    assert ppo["cells"] == 3
    assert (ppo["host_grown"], ppo["host_kept"]) == (2, 1)
    assert ppo["first_epochs"] == {1: 1, 2: 1}
    assert (ppo["seeds_only"], ppo["seed_params"]) == (1, [35, 35])
    assert ppo["final_test_acc"] == pytest.approx((74.0 + 60.0 + 72.0) / 3)


def test_the_filters_narrow_and_an_empty_match_is_a_usage_error(cells_dir: Path) -> None:
    script = _script()
    assert list(script.collect(cells_dir, [], [], range(8, 9))) == ["mlp"]
    with pytest.raises(SystemExit) as stopped:
        script.main([str(cells_dir), "--arm", "nothing"])
    assert stopped.value.code == 2


def test_the_documented_command_reads_the_kept_cells() -> None:
    """docs/results/ppo-suite.md quotes this run of controller_cells.py on the kept cells."""
    kept = REPO / "docs/results/controller-benchmark-evaluation/cells-9000.tar.gz"
    arms = ["ppo16-run-1", "ppo16-run-2", "ppo16-run-3"]
    pairs = _script().collect(kept, arms, [], None)
    assert len(pairs) == 14 and all(list(p) == arms for p in pairs.values())
    mlp = pairs["user-mlp-small"]
    assert [mlp[a]["host_grown"] for a in arms] == [3, 1, 10]
