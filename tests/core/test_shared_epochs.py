"""Envs of a seed group share their epochs while their actions agree
(:mod:`esper_core.run.shared_epochs`): fewer epochs trained, the same run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import torch

import esper_core.env.env as env_module
from esper_core.lifecycle.actions import WAIT, Action, LifecycleOp
from esper_core.run import api
from esper_core.run.checkpoint import load_checkpoint
from esper_core.run.executor import SerialExecutor
from esper_core.run.loops import TrainLoop
from esper_core.run.session import Session
from esper_core.run.shared_epochs import SharedEpochs
from esper_core.run.telemetry import EpisodeFinished, EpochCompleted, read_events
from tests.core.test_mixed_training import _pm
from tests.core.test_seed_groups import _config
from tests.fakes import make_env

GERMINATE = Action(op=LifecycleOp.GERMINATE, slot=0, blueprint=0)


class _Unshared(TrainLoop):
    def __init__(self, session: Session) -> None:
        super().__init__(session, share_epochs=False)


def _counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Env indices of every epoch trained (the serial executor's one step function)."""
    trained: list[int] = []
    real = env_module.run_epoch

    def run_epoch(env: Any, action: Any) -> Any:
        trained.append(env.env_index)
        return real(env, action)

    monkeypatch.setattr(env_module, "run_epoch", run_epoch)
    return trained


def _train(loop: type[TrainLoop], run_dir: Path) -> dict[str, Any]:
    config = _config(6, 3)
    config = attrs.evolve(
        config,
        env=attrs.evolve(config.env, max_epochs=4),
        train=attrs.evolve(config.train, updates=1),
    )
    return api.drive(loop, config, _pm(), run_dir=run_dir, quiet=True, notify=lambda _m: None)


def _rows(run_dir: Path) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    for e in read_events(run_dir / "events.jsonl"):
        if isinstance(e, EpochCompleted):
            scores = (e.train_loss, e.val_loss, e.test_acc, e.reward, e.train_flops)
            step = (e.action, e.host_params, e.seed_params, e.reason)
            rows.append((e.update, e.episode, e.env, e.epoch, *scores, *step))
        elif isinstance(e, EpisodeFinished):
            rows.append((e.update, e.episode, e.env, e.seed, e.pair, e.total_reward))
    return rows


def test_a_run_that_shares_its_groups_epochs_is_the_run_that_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six envs in two groups of three, an update of two 4-epoch episodes: the same
    events, returns and learned policy, from fewer epochs trained."""
    trained = _counted(monkeypatch)
    alone = _train(_Unshared, tmp_path / "alone")
    epochs_alone = len(trained)
    trained.clear()
    shared = _train(TrainLoop, tmp_path / "shared")
    assert epochs_alone == 2 * 6 * 4
    assert len(trained) < epochs_alone  # some epochs were taken from a lead
    assert _rows(tmp_path / "shared") == _rows(tmp_path / "alone")
    assert shared["final_val_acc_mean"] == alone["final_val_acc_mean"]
    policies = [
        load_checkpoint(tmp_path / d / "checkpoint.pt")["policy"] for d in ("alone", "shared")
    ]
    weights = [p["network"] for p in policies]
    assert weights[0].keys() == weights[1].keys()
    for name, tensor in weights[0].items():
        assert torch.equal(tensor, weights[1][name]), name


class _Recording:
    """An executor double: which envs it stepped, and the state each had then."""

    def __init__(self) -> None:
        self.stepped: list[list[int]] = []
        self.serial = SerialExecutor()

    def step(self, envs: Any, actions: Any) -> Any:
        self.stepped.append([env.env_index for env in envs])
        return self.serial.step(envs, actions)


def test_a_part_splits_where_actions_part_and_its_new_lead_starts_from_the_old_leads_state() -> (
    None
):
    envs = [make_env(env_index=i, seed=5) for i in range(3)]
    shared, executor = SharedEpochs.of(3, 3), _Recording()
    shared.restart(envs)
    assert shared.leads == [0, 0, 0]
    first = shared.step(executor, envs, [WAIT, WAIT, WAIT])
    assert executor.stepped == [[0]] and shared.trained == 1
    assert [r.env_index for r in first] == [0, 1, 2]
    assert [r.observation.env_index for r in first] == [0, 1, 2]
    assert {e.env for r in first for e in r.events} == {0, 1, 2}
    assert [r.metrics.epoch_time > 0 for r in first] == [True, False, False]  # one trained
    assert len({r.observation.val_loss for r in first}) == 1
    # Env 2 germinates, envs 0 and 1 wait: env 2 takes env 0's state (one epoch trained)
    # before training its own; env 1 still takes env 0's results.
    second = shared.step(executor, envs, [WAIT, WAIT, GERMINATE])
    assert shared.leads == [0, 0, 2] and executor.stepped[-1] == [0, 2]
    assert envs[2].epoch == envs[0].epoch == 2 and envs[1].epoch == 0  # env 1 never trained
    alone = make_env(seed=5)
    alone.step(WAIT)
    reference = alone.step(GERMINATE)
    assert second[2].observation.val_loss == reference.observation.val_loss
    assert second[2].observation.seed_params == reference.observation.seed_params > 0


def test_a_checkpoint_gives_an_env_that_took_its_leads_epochs_a_copy_of_the_leads_state() -> None:
    envs = [make_env(env_index=i, seed=5) for i in range(2)]
    shared = SharedEpochs.of(2, 2)
    shared.restart(envs)
    shared.step(SerialExecutor(), envs, [WAIT, WAIT])
    states = shared.states(envs)
    assert states[1]["epoch"] == states[0]["epoch"] == 1
    # A copy: two envs loading one optimizer state would share its momentum tensors.
    lead, copy = _tensors(states[0]), _tensors(states[1])
    assert len(lead) == len(copy) > 0
    for a, b in zip(lead, copy, strict=True):
        assert torch.equal(a, b) and a.data_ptr() != b.data_ptr()


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value] if value.numel() else []
    if isinstance(value, dict):
        return [t for key in value for t in _tensors(value[key])]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    return []


def test_groups_on_two_devices_do_not_share() -> None:
    class _On:
        def __init__(self, device: str) -> None:
            self.device = torch.device(device)

    shared = SharedEpochs.of(4, 2)
    shared.restart([_On("cpu"), _On("cpu"), _On("cpu"), _On("meta")])
    assert shared.leads == [0, 0, 2, 3]
