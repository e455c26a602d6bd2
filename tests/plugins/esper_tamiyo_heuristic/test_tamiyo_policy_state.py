"""state_dict / load_state_dict: a policy restored from a checkpoint decides exactly as
the one that kept running."""

from __future__ import annotations

from pathlib import Path

import pytest
from esper_tamiyo_heuristic.heuristic import HeuristicOptions, HeuristicPolicy
from esper_tamiyo_heuristic.random_policy import RandomOptions, RandomPolicy

from esper_core.errors import CheckpointError
from esper_core.lifecycle.stages import Stage
from esper_core.run.checkpoint import load_checkpoint, save_checkpoint


def through_checkpoint(state: dict, tmp_path: Path) -> dict:
    """The same trip a run's checkpoint takes: torch.save, then a weights_only load."""
    save_checkpoint(tmp_path / "policy.pt", {"policy": state})
    return load_checkpoint(tmp_path / "policy.pt")["policy"]


def episode(build) -> list:
    """Two envs over several epochs: a germination, a prune (penalty), more germinations."""
    opts = {"epoch": 0, "train_loss": 2.28}  # near chance and flat: a capacity limit
    training = build.report(
        "r0c0",
        Stage.TRAINING,
        seed_id="r0c0-s1",
        blueprint="cnn/conv_heavy",
        epochs_in_stage=3,
        acc_at_stage_start=80.0,
    )
    embargoed = build.report("r0c0", Stage.EMBARGOED, seed_id="r0c0-s1", blueprint="cnn/conv_heavy")
    steps = []
    for epoch in range(6, 16):
        if epoch == 7:
            slots0 = build.with_slot(training)
        elif epoch == 8:
            slots0 = build.with_slot(embargoed)
        else:
            slots0 = None
        steps.append(
            [
                build.obs(slots0, env_index=0, **{**opts, "epoch": epoch}, passed=False),
                build.obs(None, env_index=1, **{**opts, "epoch": epoch}),
            ]
        )
    return steps


def test_heuristic_resumes_exactly(build, tmp_path: Path) -> None:
    options = HeuristicOptions(
        blueprint_order=["conv_heavy", "conv_light", "norm"],
        prune_cooldown=0,
        blueprint_penalty_epochs=4,
        trigger="capacity",  # hand-made observations carry no expansion scores
        judge="gain",
        host_growth="off",
        fit_loss_ratio=0.0,
    )
    steps = episode(build)
    straight = HeuristicPolicy(options, build.context())
    expected = [straight.act(obs) for obs in steps]

    first = HeuristicPolicy(options, build.context())
    got = [first.act(obs) for obs in steps[:4]]
    state = through_checkpoint(first.state_dict(), tmp_path)
    assert state["memory"][0]["penalties"] == {"cnn/conv_heavy": 12}  # pruned at epoch 8, + 4
    resumed = HeuristicPolicy(options, build.context())
    resumed.load_state_dict(state)
    got += [resumed.act(obs) for obs in steps[4:]]
    assert got == expected
    # The run really used its memory: rotation and the penalty shape the blueprints.
    keys = [
        build.space.blueprints[a.blueprint]
        for acts in expected
        for a in acts
        if a.op.name == "GERMINATE"
    ]
    assert "cnn/conv_light" in keys and "cnn/norm" in keys


def test_heuristic_rejects_a_foreign_state(build) -> None:
    policy = HeuristicPolicy(HeuristicOptions(), build.context())
    with pytest.raises(CheckpointError, match="heuristic policy"):
        policy.load_state_dict({"version": 2, "memory": {"0": {"rotation": "x"}}})
    with pytest.raises(CheckpointError, match="heuristic policy"):
        policy.load_state_dict({"version": 1, "memory": {}})  # the old rules' state
    with pytest.raises(CheckpointError, match="heuristic policy"):
        policy.load_state_dict({"rng": []})


def test_random_resumes_exactly(build, tmp_path: Path) -> None:
    holding = build.report("r0c0", Stage.HOLDING, epochs_in_stage=2)
    obs = [build.obs(), build.obs(build.with_slot(holding), env_index=1)]
    straight = RandomPolicy(RandomOptions(seed=11), build.context())
    expected = [straight.act(obs) for _ in range(30)]

    first = RandomPolicy(RandomOptions(seed=11), build.context())
    got = [first.act(obs) for _ in range(13)]
    state = through_checkpoint(first.state_dict(), tmp_path)
    resumed = RandomPolicy(RandomOptions(seed=999), build.context())  # its own seed is overwritten
    resumed.load_state_dict(state)
    got += [resumed.act(obs) for _ in range(17)]
    assert got == expected
