"""Checkpoints: safe to load, exact resume through `esper train`, clear mismatch errors."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import attrs
import pytest
import torch
from click.testing import CliRunner
from esper_tamiyo_ppo.options import PPOOptions

from esper_core.config import load_config
from esper_core.errors import CheckpointError
from esper_core.lifecycle.actions import ActionSpace
from esper_core.plugins import PluginManager
from esper_core.run import api
from esper_core.run.checkpoint import load_checkpoint, save_checkpoint
from esper_core.run.executor import SerialExecutor
from esper_core.run.interrupts import Interrupted
from esper_core.run.run_dir import CHECKPOINT, load_run_config

from .helpers import SPACE, BanditEnv, make_policy, run_updates


def _trained(options: PPOOptions | None = None, n_envs: int = 2, updates: int = 2):  # type: ignore[no-untyped-def]
    policy = make_policy(
        options or PPOOptions(hidden_size=16), n_envs=n_envs, max_epochs=4, total_updates=updates
    )
    run_updates(policy, [BanditEnv(i, 4) for i in range(n_envs)], updates)
    return policy


def _save(policy, path: Path) -> Path:  # type: ignore[no-untyped-def]
    save_checkpoint(path, {"policy": policy.state_dict()})
    return path


def assert_same(a: Any, b: Any, where: str = "state") -> None:
    """Recursive exact equality of nested dicts/lists of tensors and plain values."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), (
            f"{where}: keys {sorted(a)} != {sorted(b)}"
        )
        for key in a:
            assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b or (a != a and b != b), f"{where}: {a!r} != {b!r}"


def test_state_dict_is_weights_only_loadable_and_round_trips(tmp_path: Path) -> None:
    policy = _trained(PPOOptions(trunk="lstm", hidden_size=8))
    state = load_checkpoint(_save(policy, tmp_path / "c.pt"))[
        "policy"
    ]  # torch.load(weights_only=True)
    assert_same(policy.state_dict(), state)
    twin = make_policy(
        PPOOptions(trunk="lstm", hidden_size=8), n_envs=2, max_epochs=4, total_updates=2, seed=99
    )
    twin.load_state_dict(state)
    assert_same(policy.state_dict(), twin.state_dict())


def test_evaluation_loads_a_trained_policy_with_its_architecture(tmp_path: Path) -> None:
    policy = _trained(PPOOptions(trunk="lstm", hidden_size=8))
    path = _save(policy, tmp_path / "checkpoint.pt")
    # Other envs, episode length and (default: mlp/128) options: the checkpoint's trunk wins.
    for argument in (str(path), str(tmp_path)):
        evaluator = make_policy(
            PPOOptions(deterministic=True), n_envs=5, max_epochs=9, argument=argument
        )
        assert evaluator.options.trunk == "lstm" and evaluator.options.hidden_size == 8
        assert_same(policy.net.state_dict(), evaluator.net.state_dict())
        assert torch.equal(evaluator.obs_normalizer.rms.mean, policy.obs_normalizer.rms.mean)
        envs = [BanditEnv(i, 9) for i in range(5)]
        observations = [env.reset(i) for i, env in enumerate(envs)]
        evaluator.reset(range(5))
        assert len(evaluator.act(observations)) == 5


def test_mismatching_checkpoint_says_what_differs(tmp_path: Path) -> None:
    path = _save(_trained(), tmp_path / "checkpoint.pt")
    other = ActionSpace(
        slot_ids=("r0c0",),
        blueprints=("cnn/a", "cnn/z", "cnn/c"),
        styles=SPACE.styles,
        tempos=SPACE.tempos,
        alpha_targets=SPACE.alpha_targets,
    )
    with pytest.raises(CheckpointError) as info:
        make_policy(space=other, argument=str(path))
    message = str(info.value)
    assert str(path) in message
    assert (
        "slot ids: checkpoint has [r0c0, r0c1], this task has [r0c0] (only in the checkpoint: [r0c1])"
        in message
    )
    assert (
        "blueprint vocabulary: checkpoint has [cnn/a, cnn/b, cnn/c], this task has [cnn/a, cnn/z, cnn/c] "
        "(only in the checkpoint: [cnn/b]; only in this task: [cnn/z])"
    ) in message
    reordered = ActionSpace(
        slot_ids=SPACE.slot_ids,
        blueprints=("cnn/c", "cnn/b", "cnn/a"),
        styles=SPACE.styles,
        tempos=SPACE.tempos,
        alpha_targets=SPACE.alpha_targets,
    )
    with pytest.raises(
        CheckpointError, match=r"blueprint vocabulary: .* \(same entries in a different order\)"
    ):
        make_policy(space=reordered, argument=str(path))
    # A resume into a run of another shape fails the same way, not with a shape error.
    with pytest.raises(CheckpointError, match="slot ids"):
        make_policy(space=other).load_state_dict(load_checkpoint(path)["policy"])
    with pytest.raises(
        CheckpointError, match=r"policies\.ppo\.hidden_size: checkpoint 16, this run 128"
    ):
        make_policy().load_state_dict(load_checkpoint(path)["policy"])
    with pytest.raises(CheckpointError, match="other settings"):
        make_policy(PPOOptions(hidden_size=16), n_envs=3, max_epochs=4).load_state_dict(
            load_checkpoint(path)["policy"]
        )


def test_a_new_blueprint_alone_names_the_blueprints_and_the_pin_not_the_history(
    tmp_path: Path,
) -> None:
    """Installing a blueprint package lengthens the feature vector; the history length
    did not change, so the message must not send the user after it."""
    path = _save(_trained(), tmp_path / "checkpoint.pt")
    grown = ActionSpace(
        slot_ids=SPACE.slot_ids,
        blueprints=(*SPACE.blueprints, "cnn/d"),
        styles=SPACE.styles,
        tempos=SPACE.tempos,
        alpha_targets=SPACE.alpha_targets,
    )
    with pytest.raises(CheckpointError) as info:
        make_policy(space=grown, argument=str(path))
    message = str(info.value)
    assert "\n" not in message
    assert "history_length" not in message
    assert "only in this task: [cnn/d]" in message
    assert 'add --set \'env.blueprints=["cnn/a","cnn/b","cnn/c"]\'' in message
    # A blueprint that is gone cannot be pinned back: the message says to install it.
    shrunk = attrs.evolve(grown, blueprints=("cnn/a", "cnn/b"))
    with pytest.raises(CheckpointError, match=r"blueprints \[cnn/c\] are not installed"):
        make_policy(space=shrunk, argument=str(path))


def test_another_history_length_is_named_with_its_fix(tmp_path: Path) -> None:
    from esper_tamiyo_ppo.policy import PPOPolicy

    from esper_core.env.observation import feature_dim

    from .helpers import HISTORY, context

    path = _save(_trained(), tmp_path / "checkpoint.pt")
    longer = attrs.evolve(
        context(argument=str(path)),
        history_length=HISTORY + 3,
        feature_dim=feature_dim(SPACE, HISTORY + 3),
    )
    with pytest.raises(CheckpointError) as info:
        PPOPolicy(PPOOptions(), longer)
    message = str(info.value)
    assert f"env.history_length: checkpoint was trained with {HISTORY}" in message
    assert f"add --set env.history_length={HISTORY}" in message
    assert "blueprint" not in message


def test_a_checkpoint_of_another_task_is_refused_even_with_the_same_vocabulary(
    tmp_path: Path,
) -> None:
    from esper_tamiyo_ppo.policy import PPOPolicy

    from .helpers import context

    trained = _trained()
    assert trained.state_dict()["task"] == "bandit"
    path = _save(trained, tmp_path / "checkpoint.pt")
    other_task = attrs.evolve(context(argument=str(path)), task="other")
    with pytest.raises(CheckpointError) as info:
        PPOPolicy(PPOOptions(), other_task)
    message = str(info.value)
    assert "\n" not in message
    assert f"checkpoint {path} holds a PPO policy trained on task 'bandit'" in message
    assert "this run's task is 'other'" in message
    with pytest.raises(CheckpointError, match="trained on task 'bandit'"):
        PPOPolicy(
            PPOOptions(hidden_size=16), attrs.evolve(context(total_updates=2), task="other")
        ).load_state_dict(load_checkpoint(path)["policy"])
    # A checkpoint written before the task was recorded still loads on its vocabulary.
    state = load_checkpoint(path)["policy"]
    del state["task"]
    save_checkpoint(tmp_path / "old.pt", {"policy": state})
    PPOPolicy(PPOOptions(), attrs.evolve(context(argument=str(tmp_path / "old.pt")), task="other"))


def test_missing_or_foreign_checkpoint_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(
        CheckpointError, match=r"PPO checkpoint .*nope\.pt not found; train a policy with"
    ):
        make_policy(argument=str(tmp_path / "nope.pt"))
    save_checkpoint(tmp_path / "heuristic.pt", {"policy": {"rng": [1, 2, 3]}})
    with pytest.raises(CheckpointError, match="does not hold a PPO policy"):
        make_policy(argument=str(tmp_path / "heuristic.pt"))


# ---------------------------------------------------------------- through esper train


def _pm() -> PluginManager:
    return PluginManager(extra=["tests.fake_plugin", "policies.ppo"], autoload=False)


def _config(updates: int = 2):  # type: ignore[no-untyped-def]
    return load_config(
        extra={
            "run": {
                "task": "tiny",
                "policy": "ppo",
                "reward": "acc_delta",
                "telemetry": [],
                "n_envs": 2,
                "seed": 3,
                "quiet": True,
            },
            "env": {"max_epochs": 4},
            "train": {"updates": updates, "checkpoint_every": 1},
            "policies": {
                "ppo": {
                    "trunk": "lstm",
                    "hidden_size": 16,
                    "num_minibatches": 2,
                    "rollout_episodes": 2,
                }
            },
        }
    )


def _train(run_dir: Path, resume: bool = False) -> dict[str, Any]:
    config = load_run_config(run_dir) if resume else _config()
    return api.train(
        config, _pm(), run_dir=run_dir, resume=resume, quiet=True, notify=lambda _m: None
    )


TIMING_KEYS = {"rollout_sps", "update_sps", "update_time"}


def test_interrupted_and_resumed_training_ends_identical(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reference = _train(tmp_path / "straight")

    calls = {"n": 0}
    step = SerialExecutor.step

    def interrupting_step(self, envs, actions):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        # Epoch 2 of update 0 (mid-rollout), epoch 3 of the rollout's second episode, then
        # the last epoch of update 1 (buffer full, update not yet run): Ctrl-C as the
        # run's handler sees it.
        if calls["n"] in (2, 7, 16):
            signal.raise_signal(signal.SIGINT)
        return step(self, envs, actions)

    monkeypatch.setattr(SerialExecutor, "step", interrupting_step)
    run_dir = tmp_path / "interrupted"
    with pytest.raises(Interrupted):
        _train(run_dir)
    mid = load_checkpoint(run_dir / CHECKPOINT)
    assert (mid["outer"], mid["epoch"]) == (0, 2) and mid["policy"]["buffer"]["step"] == 2
    with pytest.raises(Interrupted):
        _train(run_dir, resume=True)
    second = load_checkpoint(run_dir / CHECKPOINT)
    assert (second["outer"], second["rollout_episode"], second["epoch"]) == (0, 1, 3)
    assert second["policy"]["buffer"]["step"] == 7
    with pytest.raises(Interrupted):
        _train(run_dir, resume=True)
    assert load_checkpoint(run_dir / CHECKPOINT)["policy"]["buffer"]["step"] == 8
    resumed = _train(run_dir, resume=True)
    assert calls["n"] == 16

    final_a = load_checkpoint(tmp_path / "straight" / CHECKPOINT)["policy"]
    final_b = load_checkpoint(run_dir / CHECKPOINT)["policy"]
    assert final_a["updates_done"] == 2
    # The greedy evaluations (before update 0 and after the last) are the same too.
    evals = [
        [{k: v for k, v in e.items() if k != "time"} for e in load_checkpoint(d / CHECKPOINT)[k]]
        for d, k in ((tmp_path / "straight", "evaluations"), (run_dir, "evaluations"))
    ]
    assert [(e["policy"], e["update"]) for e in evals[0]] == [("trained", 0), ("trained", 2)]
    assert evals[0] == evals[1]
    assert_same(final_a, final_b, "policy")
    assert [e["final_test_acc"] for e in reference["episodes"]] == [
        e["final_test_acc"] for e in resumed["episodes"]
    ]
    strip = [{k: v for k, v in u.items() if k not in TIMING_KEYS} for u in reference["updates"]]
    assert strip == [
        {k: v for k, v in u.items() if k not in TIMING_KEYS} for u in resumed["updates"]
    ]


def test_cli_trains_then_evaluates_and_rejects_a_mismatching_task(tmp_path: Path) -> None:
    from esper_cli.main import build_cli

    group, _ = build_cli()
    cli = CliRunner()
    common = [
        "--task",
        "tiny",
        "--reward",
        "acc_delta",
        "--set",
        "run.telemetry=[]",
        "--envs",
        "2",
        "--max-epochs",
        "3",
        "--set",
        "policies.ppo.hidden_size=16",
    ]
    out = tmp_path / "trained"
    result = cli.invoke(
        group, ["train", *common, "--updates", "2", "--out", str(out), "--json"], obj={"pm": _pm()}
    )
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.output)["updates"]) == 2
    assert (out / CHECKPOINT).is_file()

    evaluation = [
        "run",
        *common,
        "--policy",
        f"ppo:{out / CHECKPOINT}",
        "--set",
        "policies.ppo.deterministic=true",
        "--json",
    ]
    result = cli.invoke(group, [*evaluation, "--out", str(tmp_path / "eval")], obj={"pm": _pm()})
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["episodes_completed"] == 2

    result = cli.invoke(
        group,
        [*evaluation, "--out", str(tmp_path / "bad"), "--set", 'env.slots=["r0c1"]'],
        obj={"pm": _pm()},
    )
    assert result.exit_code == 2
    assert "slot ids: checkpoint has [r0c0, r0c1], this task has [r0c1]" in result.output

    result = cli.invoke(
        group,
        [
            "run",
            *common,
            "--policy",
            f"ppo:{tmp_path / 'missing.pt'}",
            "--out",
            str(tmp_path / "missing"),
        ],
        obj={"pm": _pm()},
    )
    assert result.exit_code == 2 and "not found" in result.output
