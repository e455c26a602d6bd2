"""Data-parallel updates: two ranks (threads here, with an all-reduce over a barrier) each
compute half of every minibatch and end the update with identical parameters, which
equal a single process's update up to the order of float summation."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch
from esper_tamiyo_ppo.options import PPOOptions

from .helpers import BanditEnv, collect_rollout, make_policy


class ThreadAllReduce:
    """The executor's gradient_sync for ranks that are threads of one process."""

    def __init__(self, world: int) -> None:
        self.world = world
        self.barrier = threading.Barrier(world)
        self.vectors: list[torch.Tensor | None] = [None] * world
        self.calls = [0] * world

    def hook(self, rank: int) -> Any:
        def sync(tensors: list[torch.Tensor]) -> None:
            self.calls[rank] += 1
            self.vectors[rank] = torch.cat([t.detach().reshape(-1) for t in tensors])
            self.barrier.wait()
            mean = torch.stack(self.vectors).mean(0)  # type: ignore[arg-type]
            self.barrier.wait()
            offset = 0
            for t in tensors:
                t.detach().copy_(mean[offset : offset + t.numel()].view_as(t))
                offset += t.numel()

        return sync


def _policy_after_rollout(options: PPOOptions) -> tuple[Any, Any]:
    policy = make_policy(options, n_envs=3, max_epochs=6)
    last = collect_rollout(policy, [BanditEnv(i, 6) for i in range(3)])
    return policy, last


@pytest.mark.parametrize("trunk", ["mlp", "lstm"])
def test_two_ranks_end_an_update_identical_and_equal_to_one_process(trunk: str) -> None:
    options = PPOOptions(hidden_size=16, trunk=trunk, num_minibatches=2, update_epochs=2)
    single, last = _policy_after_rollout(options)
    ranks = [_policy_after_rollout(options) for _ in range(2)]
    reduce = ThreadAllReduce(2)
    for rank, (policy, _) in enumerate(ranks):
        policy.learner.shard = (rank, 2)
        policy.learner.gradient_sync = reduce.hook(rank)
    computed: dict[int, int] = {}  # id(net) -> chunks its forward passes evaluated
    import esper_tamiyo_ppo.update as update_module

    original = update_module.ppo_loss

    def counting(net: Any, o: Any, part: torch.Tensor, *args: Any) -> Any:
        computed[id(net)] = computed.get(id(net), 0) + part.numel()
        return original(net, o, part, *args)

    diagnostics: list[dict[str, float]] = [{}, {}]
    errors: list[BaseException] = []

    def run(rank: int) -> None:
        try:
            policy, observations = ranks[rank]
            diagnostics[rank] = policy.update(observations)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
            reduce.barrier.abort()

    update_module.ppo_loss = counting
    try:
        threads = [threading.Thread(target=run, args=(r,)) for r in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        expected = single.update(last)
    finally:
        update_module.ppo_loss = original
    assert not errors, errors
    (a, _), (b, _) = ranks
    for pa, pb, ps in zip(a.net.parameters(), b.net.parameters(), single.net.parameters()):
        assert torch.equal(pa, pb)  # identical on both ranks
        assert torch.allclose(pa, ps, rtol=1e-4, atol=1e-6)  # the single process's update
    assert reduce.calls[0] == reduce.calls[1] == expected["minibatches_run"]
    # Each rank computed about half of every minibatch: together, what one process did.
    mine = [computed.get(id(policy.net), 0) for policy, _ in ranks]
    assert mine[0] + mine[1] == computed[id(single.net)]
    assert abs(mine[0] - mine[1]) <= expected["minibatches_run"]
    for key in ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction"):
        assert diagnostics[0][key] == diagnostics[1][key]
        assert diagnostics[0][key] == pytest.approx(expected[key], rel=1e-4, abs=1e-6), key
