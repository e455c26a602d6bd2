"""Jobs the multi-process tests run in each rank (module level: worker processes import them).

Each job writes what its rank saw to ``out/rank<R>.json`` so the test can compare ranks.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from esper_streams.distributed import DistributedExecutor, DistributedOptions
from torch import nn

from esper_core.run.resolve import executor_context
from tests.fake_plugin import ScriptedPolicy, ScriptOptions
from tests.fakes import BLUEPRINTS, AccuracyDeltaReward, TinyTask
from tests.plugins.esper_streams.helpers import make_config


def _rank() -> int:
    return int(os.environ["RANK"])


def _write(out: str, data: dict[str, Any]) -> None:
    path = Path(out) / f"rank{_rank()}.json"
    path.write_text(json.dumps(data))


def summarize(result: Any) -> dict[str, Any]:
    m = result.metrics
    return {
        "env": result.env_index,
        "reward": result.reward,
        "val_loss": m.val_loss,
        "val_acc": m.val_acc,
        "train_loss": m.train_loss,
        "batches": m.batches,
        "epoch": result.observation.epoch,
        "seed_params": result.observation.seed_params,
    }


def scripted_episode(n_envs: int, epochs: int) -> tuple[list[Any], list[list[dict[str, Any]]], Any]:
    """Envs, their per-step summaries and the executor, stepped like the runner does."""
    from esper_core.env.env import MorphogeneticEnv

    config = make_config(f"run.n_envs={n_envs}")
    executor = DistributedExecutor(DistributedOptions(timeout=60.0), executor_context(config))
    task = TinyTask()
    devices = executor.env_devices(n_envs)
    envs = [
        MorphogeneticEnv(task, AccuracyDeltaReward(), BLUEPRINTS, config, i, devices[i])
        for i in range(n_envs)
    ]
    observations = executor.reset_envs(envs, list(range(n_envs)), 0)
    policy = ScriptedPolicy(ScriptOptions(seed=0), SimpleNamespace(space=envs[0].space))
    steps = []
    for _ in range(epochs):
        results = executor.step(envs, policy.act(observations))
        steps.append([summarize(r) for r in results])
        observations = [r.observation for r in results]
    return envs, steps, executor


class ToyPolicy:
    """A trainable stand-in whose gradient depends on the rank: only an all-reduce can keep
    the ranks' parameters equal. Its starting weights differ per rank too (bind_policy must
    replace them with rank 0's)."""

    def __init__(self) -> None:
        self.net = nn.Linear(3, 2)
        with torch.no_grad():
            self.net.weight.fill_(float(_rank() + 1))
            self.net.bias.zero_()
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1)
        self.gradient_sync: Any = None

    def state_dict(self) -> dict[str, Any]:
        return {"net": self.net.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.net.load_state_dict(state["net"])
        self.optimizer.load_state_dict(state["optimizer"])

    def update(self) -> None:
        self.optimizer.zero_grad()
        x = torch.full((4, 3), float(_rank() + 1))
        self.net(x).pow(2).sum().backward()
        grads = [p.grad for p in self.net.parameters() if p.grad is not None]
        self.gradient_sync(grads)
        self.optimizer.step()


def split_and_sync_job(out: str) -> None:
    """Steps 3 envs over the ranks, then trains the toy policy for a few updates."""
    envs, steps, executor = scripted_episode(n_envs=3, epochs=3)
    stepped_here = [i for i, env in enumerate(envs) if getattr(env, "_started", False)]
    states = executor.env_states(envs)
    toy = ToyPolicy()
    executor.bind_policy(toy, training=True)
    start = [p.detach().flatten().tolist() for p in toy.net.parameters()]
    mean_grads, params = [], []
    for _ in range(3):
        before = [p.detach().clone() for p in toy.net.parameters()]
        toy.update()
        mean_grads.append([p.grad.flatten().tolist() for p in toy.net.parameters()])  # type: ignore[union-attr]
        params.append([p.detach().flatten().tolist() for p in toy.net.parameters()])
        assert any(not torch.equal(b, p) for b, p in zip(before, toy.net.parameters()))
    _write(
        out,
        {
            "owned": list(executor.owned(3)),
            "stepped_here": stepped_here,
            "steps": steps,
            "states_on_this_rank": None if states is None else len(states),
            "state_envs_epochs": None if states is None else [s["epoch"] for s in states],
            "toy_start": start,
            "toy_grads": mean_grads,
            "toy_params": params,
        },
    )
    executor.close()


def ppo_train_job(out: str, config: Any, fake_plugin: str, run_dir: str) -> dict[str, Any]:
    """``esper train`` with PPO, recording a fingerprint of the policy's parameters after
    each update, the envs this rank built, and how many rollout chunks its update computed."""
    import esper_tamiyo_ppo.update as update_module
    from esper_tamiyo_ppo.policy import PPOPolicy

    from esper_core.env.env import MorphogeneticEnv
    from esper_core.run import api
    from tests.plugin_set import plugin_manager

    fingerprints: list[str] = []
    built: list[int] = []
    chunks = [0]
    original_update, original_init = PPOPolicy.update, MorphogeneticEnv.__init__
    original_loss = update_module.ppo_loss

    def update(self: Any, last_observations: Any) -> Any:
        diagnostics = original_update(self, last_observations)
        h = hashlib.sha256()
        for p in self.net.parameters():
            h.update(p.detach().cpu().numpy().tobytes())
        fingerprints.append(h.hexdigest())
        return diagnostics

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        built.append(self.env_index)

    def ppo_loss(net: Any, options: Any, part: Any, *args: Any) -> Any:
        chunks[0] += int(part.numel())
        return original_loss(net, options, part, *args)

    # This worker process only.
    PPOPolicy.update = update  # type: ignore[method-assign]
    MorphogeneticEnv.__init__ = init  # type: ignore[method-assign]
    update_module.ppo_loss = ppo_loss
    pm = plugin_manager(fake_plugin)
    summary = api.train(config, pm, run_dir=Path(run_dir), quiet=True, notify=lambda _: None)
    _write(out, {"fingerprints": fingerprints, "built": built, "chunks": chunks[0]})
    return summary
