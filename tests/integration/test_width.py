"""Branch seeds end to end on glyphs (the CNN host): legal only where a block follows,
germinated by the heuristic through `esper run`, resumed exactly mid-blending."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from esper_core.config import load_config
from esper_core.env.gym import make_env
from esper_core.lifecycle.actions import LifecycleOp, refusal_reason
from esper_core.plugins import PluginManager
from esper_core.run.api import run
from esper_core.run.checkpoint import load_checkpoint
from esper_core.run.interrupts import Interrupted
from tests.integration.test_run import stable

pytest.importorskip("esper_tasks.glyphs", reason="the esper-tasks plugin is not installed")
legal = pytest.importorskip(
    "esper_tamiyo_heuristic.legal", reason="the heuristic plugin is not installed"
)

SMALL = [
    "run.task=glyphs",
    "tasks.glyphs.n_train=256",
    "tasks.glyphs.n_val=100",
    "tasks.glyphs.n_test=100",
    "run.telemetry=[]",
]
# The heuristic germinates widen at once (its capacity signal always fires).
WIDEN_RUN = [
    *SMALL,
    "run.policy=heuristic",
    'policies.heuristic.trigger="capacity"',  # the lifecycle of a widen seed, not a trigger
    'policies.heuristic.judge="gain"',
    "policies.heuristic.underfit_loss_ratio=0",
    "policies.heuristic.flat_max_drop=1",
    'policies.heuristic.host_growth="off"',  # the widen seed alone, not the host's growth
    "policies.heuristic.fit_loss_ratio=0",
    'policies.heuristic.blueprint_order=["widen"]',
    'env.blueprints=["widen"]',
    "env.max_epochs=10",
    "run.episodes=1",
    "run.checkpoint_every=1",
]


def test_branch_blueprints_stay_out_of_the_default_action_space(pm: PluginManager) -> None:
    env = make_env(load_config(overrides=SMALL), pm)
    assert not any("widen" in key for key in env.space.blueprints)
    assert bool(env.masks().blueprint.all())


def test_a_branch_is_legal_only_in_a_slot_a_block_follows(pm: PluginManager) -> None:
    config = load_config(overrides=[*SMALL, 'env.blueprints=["widen", "widen4x", "conv_small"]'])
    env = make_env(config, pm)
    env.reset()
    space, masks = env.space, env.masks()
    assert space.slot_ids == ("r0c0", "r0c1", "r0c2")
    assert space.blueprints == ("cnn/conv_small", "cnn/widen", "cnn/widen4x")
    assert masks.blueprint.tolist() == [
        [True, True, True],
        [True, True, True],
        [True, False, False],
    ]
    assert masks.slot[LifecycleOp.GERMINATE].tolist() == [True, True, True]
    refused = refusal_reason(space.germinate("r0c2", "widen"), masks, space)
    assert refused == "blueprint cnn/widen cannot grow in slot r0c2"
    assert refusal_reason(space.germinate("r0c1", "widen4x"), masks, space) is None
    # The random policy's sampler never picks a branch for the last slot.
    rng = random.Random(0)
    for _ in range(300):
        action = legal.sample_legal(rng, masks, space)
        if action.op == LifecycleOp.GERMINATE and action.slot == 2:
            assert action.blueprint == 0
    # With only branches, the last slot has nothing to germinate.
    only = make_env(load_config(overrides=[*SMALL, 'env.blueprints=["widen"]']), pm)
    only.reset()
    assert only.masks().slot[LifecycleOp.GERMINATE].tolist() == [True, True, False]


def test_the_heuristic_grows_a_widen_seed_through_esper_run(
    pm: PluginManager, tmp_path: Path
) -> None:
    summary = run(load_config(overrides=WIDEN_RUN), pm, run_dir=tmp_path / "w", quiet=True)
    assert summary["status"] == "completed"
    seeds = summary["seeds"]
    assert seeds and {s["blueprint"] for s in seeds} == {"cnn/widen"}
    first = seeds[0]
    assert first["slot_id"] == "r0c0"  # the first slot a block follows
    assert first["params"] == 9 * 4 * 8 + 2 * 8 + 8 * 8 + 8  # into block 1 (8 channels)
    episode = summary["episodes"][0]
    assert episode["seeds_germinated"] >= 1
    assert episode["train_flops"] > episode["host_train_flops"]  # the branch was trained


def test_a_run_with_a_widen_seed_mid_blending_resumes_identically(
    pm: PluginManager, tmp_path: Path
) -> None:
    blending = [*WIDEN_RUN, "lifecycle.tempos=[5]"]
    reference = run(load_config(overrides=blending), pm, run_dir=tmp_path / "ref", quiet=True)
    cut = [
        *blending,
        'run.telemetry=["interrupter"]',
        "telemetry.interrupter.at_epoch=6",
        "telemetry.interrupter.at_outer=0",
    ]
    with pytest.raises(Interrupted):
        run(load_config(overrides=cut), pm, run_dir=tmp_path / "cut", quiet=True)
    state = load_checkpoint(tmp_path / "cut" / "checkpoint.pt")
    assert state["epoch"] == 6
    slots = _slot_stages(state)
    assert ("BLENDING", "cnn/widen") in slots, slots  # cut while the branch blends in
    config = load_config(tmp_path / "cut" / "config.toml", ["run.telemetry=[]"])
    resumed = run(config, pm, run_dir=tmp_path / "cut", resume=True, quiet=True)
    assert stable(resumed) == stable(reference)


def _slot_stages(state: dict) -> list[tuple[str, str | None]]:  # type: ignore[type-arg]
    """(stage, blueprint) of each checkpointed slot (from its extra state)."""
    found: list[tuple[str, str | None]] = []

    def walk(value: object) -> None:
        if isinstance(value, dict):
            inner = value.get("state")
            if isinstance(inner, dict) and "stage" in inner:
                found.append((str(inner["stage"]), inner.get("blueprint")))
            for v in value.values():
                walk(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v)

    walk(state)
    assert found, "no slot state in the checkpoint"
    return found
