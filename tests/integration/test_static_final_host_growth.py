"""The static-final twin of a run whose host itself grew (a policy's ``host_growth``): it
trains the grown host from the first epoch, not the host the run started with; a run
whose end no twin can rebuild has none, and says why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from esper_core.compare.comparison import compare
from esper_core.compare.experiment import build_experiment, parse_experiment, shared_config
from esper_core.compare.static_final import host_at_birth, why_no_twin
from esper_core.run.run_dir import SUMMARY
from tests.inline_runner import INLINE_RUNNER
from tests.plugin_set import first_party, plugin_manager


def _growth(operator: str, before: dict[str, int], after: dict[str, int], fate: str = "fossilized") -> dict[str, Any]:  # fmt: skip
    return {
        "growth_id": f"{operator}-0",
        "env": 0,
        "episode": 0,
        "operator": operator,
        "plan": "",
        "widths_before": before,
        "widths_after": after,
        "params_before": 10,
        "params_after": 20,
        "started_epoch": 3,
        "ended_epoch": 8,
        "fate": fate,
    }


def _summary(*growths: dict[str, Any], seeds: list[dict[str, Any]] | None = None) -> dict[str, Any]:  # fmt: skip
    return {"host_growths": list(growths), "seeds": seeds or []}


def test_the_twin_grows_the_host_at_birth_as_the_run_kept_it() -> None:
    assert host_at_birth(_summary()) == {} and why_no_twin(_summary()) is None
    widened = _summary(
        _growth("width", {"stage0": 32, "stage1": 64}, {"stage0": 128, "stage1": 256})
    )
    assert why_no_twin(widened) is None
    assert host_at_birth(widened) == {
        "widen_at": 0.0,
        "widen_factor": 4.0,
        "widen_stages": [],
        "widen_tempo": 1,
    }
    one_stage = _summary(_growth("width", {"stage0": 4, "stage1": 8}, {"stage0": 4, "stage1": 16}))
    assert host_at_birth(one_stage)["widen_stages"] == [1]
    deeper = _summary(_growth("depth", {"n_layer": 2}, {"n_layer": 4}))
    assert host_at_birth(deeper) == {
        "deepen_at": 0.0,
        "deepen_factor": 2,
        "deepen_mode": "identity",
        "deepen_stages": [],
        "deepen_tempo": 1,
    }
    # A growth a rollback pruned left the host as it was.
    pruned = _summary(_growth("width", {"d_model": 16}, {"d_model": 32}, fate="pruned_by_rollback"))
    assert host_at_birth(pruned) == {} and why_no_twin(pruned) is None
    # One still ramping at the end is part of the final architecture.
    live = _summary(_growth("width", {"d_model": 16}, {"d_model": 32}, fate="live"))
    assert host_at_birth(live)["widen_factor"] == 2.0


def test_seeds_born_on_the_grown_host_are_installed_on_it_by_the_twin() -> None:
    widen = _growth("width", {"d_model": 16}, {"d_model": 32})  # started 3, folded at 8
    seed = {"fate": "fossilized", "blueprint": "transformer/block", "slot_id": "r0c1"}
    seed |= {"seed_id": "r0c1-s1", "style": "linear_add", "env": 0, "episode": 0}
    for born in (8, 9):  # at the fold's epoch (germinated after it) or later
        seed |= {"germinated_epoch": born, "last_stage": "FOSSILIZED"}
        assert why_no_twin(_summary(widen, seeds=[seed])) is None
    assert host_at_birth(_summary(widen, seeds=[seed]))["widen_tempo"] == 1  # folds at birth
    still_ramping = _growth("width", {"d_model": 16}, {"d_model": 32}, fate="live")
    still_ramping["ended_epoch"] = None
    assert "born before its host grew" in str(why_no_twin(_summary(still_ramping, seeds=[seed])))


def test_an_end_no_twin_can_rebuild_says_why() -> None:
    widen = _growth("width", {"d_model": 16}, {"d_model": 32})
    deepen = _growth("depth", {"n_layer": 2}, {"n_layer": 4})
    assert "kept 2 growths" in str(why_no_twin(_summary(widen, deepen)))
    seed = {"fate": "fossilized", "blueprint": "transformer/block", "slot_id": "r0c1"}
    seed |= {"seed_id": "r0c1-s1", "style": "linear_add", "env": 0, "episode": 0}
    seed |= {"germinated_epoch": 5, "last_stage": "FOSSILIZED"}  # the growth ended at 8
    assert "a seed born before its host grew" in str(why_no_twin(_summary(widen, seeds=[seed])))
    uneven = _growth("width", {"stage0": 4, "stage1": 8}, {"stage0": 8, "stage1": 24})
    assert "different factors" in str(why_no_twin(_summary(uneven)))


def test_a_compare_trains_the_grown_host_from_the_first_epoch(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("def f(x):\n    return x + 1\n" * 120, encoding="utf-8")
    charlm = {"path": corpus.as_posix(), "max_chars": 3000, "block_size": 16, "d_model": 16}
    charlm |= {"n_head": 2, "n_layer": 2, "n_segments": 2}
    grows = {"host_growth": "widen", "host_growth_drop": 10.0, "min_epoch": 5}
    grows |= {"host_growth_tempo": 2}  # folded before the end
    data = {
        "policies": [{"name": "heuristic", "label": "grows", "options": grows}, "wait"],
        "tasks": [{"name": "charlm", "options": charlm}],
        "seeds": 2,
        "baseline": "wait",
        "baselines": ["static-final"],
        "config": {
            "run": {"telemetry": []},
            "env": {"max_epochs": 5, "blueprints": ["transformer/block"]},
        },
    }
    spec = parse_experiment(data)
    experiment = build_experiment(spec, shared_config(spec), plugins=first_party())
    # The cells run in this process (tests/inline_runner.py): the twin's host and its
    # epoch-0 growth are compare's doing on every runner.
    inline = plugin_manager(INLINE_RUNNER)
    done = compare(experiment, inline, tmp_path / "out", notify=lambda _m: None, runner="inline")
    assert not done.failed and not done.results.missing
    cells = {(c.policy, c.seed): c for c in done.results.cells}
    for seed in (0, 1):
        grown = json.loads((Path(cells["grows", seed].run_dir) / SUMMARY).read_text())
        twin = json.loads((Path(cells["grows.static-final", seed].run_dir) / SUMMARY).read_text())
        assert grown["host_growths"][0]["widths_after"] == {"d_model": 32}
        (birth,) = twin["host_growths"]
        assert (birth["started_epoch"], birth["widths_after"]) == (0, {"d_model": 32})
        forward = [cells[arm, seed].params_forward for arm in ("grows", "grows.static-final")]
        assert forward[0] == forward[1] > cells["wait", seed].params_forward
    markdown = (tmp_path / "out" / "results.md").read_text()
    assert "its twin grows the host so at epoch 0" in markdown


def test_the_results_name_each_run_without_a_twin_and_why(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from esper_core.compare.cell_result import CellResult
    from esper_core.compare.static_final import no_twins

    widen = _growth("width", {"d_model": 16}, {"d_model": 32})  # folded at epoch 8
    seed = {"fate": "fossilized", "blueprint": "transformer/block", "slot_id": "r0c1"}
    seed |= {"seed_id": "r0c1-s1", "style": "linear_add", "env": 0, "episode": 0}
    early, late = dict(seed, germinated_epoch=5), dict(seed, germinated_epoch=8)
    results = []
    for n, seeds in enumerate(([early], [late])):
        (tmp_path / str(n)).mkdir()
        summary = _summary(widen, seeds=seeds)
        (tmp_path / str(n) / SUMMARY).write_text(json.dumps(summary), encoding="utf-8")
        results.append(CellResult("charlm", "grows", n, 50.0, 1.0, 1, 0, 1.0, str(tmp_path / str(n))))  # fmt: skip
    experiment = SimpleNamespace(
        baselines=["static-final"], policies=[SimpleNamespace(label="grows", name="heuristic")]
    )
    assert no_twins(experiment, results) == [  # type: ignore[arg-type]
        "grows on charlm, random seed 0, has no static-final twin: it kept a seed born before "
        "its host grew; a twin installs seeds on the grown host"
    ]
