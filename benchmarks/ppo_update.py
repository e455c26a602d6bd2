"""Throughput of one PPO update: Esper's learner vs a minimal CleanRL-style update.

Both sides train the same factored actor-critic (same initial weights, same Adam
settings) on the same rollout for the same K epochs and minibatch count, with the KL
early stop off so both process every sample K times. The CleanRL-style side is the
textbook loop: GAE, then evaluate the stored actions, one joint log-prob ratio, clipped surrogate,
clipped value loss, entropy bonus, backward, global grad clip, Adam step, plus CleanRL's
per-minibatch approx-KL and clip-fraction bookkeeping. Esper's side is
``PPOLearner.update`` (GAE, then the per-head clipped surrogate over the heads the op used, per-head
entropies and per-epoch diagnostics), which uses torch's fused Adam; CleanRL uses the
default Adam, so ``speed_ratio`` compares against that, and ``speed_ratio_same_optimizer``
against the CleanRL loop given the fused Adam too (the cost of the loss alone).
Repetitions are interleaved so machine noise hits every side alike; the median is
reported. Samples/second = n_envs x T x epochs / seconds. Each ratio is also taken per
repetition and printed with its spread (``*_spread``: median, interquartile range,
bootstrap interval of the median). ``--smoke``: a tiny rollout and network, two
repetitions, the same path and JSON keys.

    OMP_NUM_THREADS=1 python benchmarks/ppo_update.py [--envs 8] [--steps 30] [--reps 7] [--trunk mlp]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from esper_tamiyo_ppo.buffer import RolloutBuffer
from esper_tamiyo_ppo.distributions import BatchMasks, run_heads, used_heads_table
from esper_tamiyo_ppo.network import ActorCritic
from esper_tamiyo_ppo.options import PPOOptions
from esper_tamiyo_ppo.update import PPOLearner, compute_gae
from torch import nn

from esper_core.env.observation import feature_dim
from esper_core.lifecycle.actions import OPS, ActionMasks, ActionSpace, LifecycleOp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _spread import paired_ratios, spread

# The shape of the digits task: 3 slots, 8 CNN blueprints, the default lifecycle vocabulary.
SPACE = ActionSpace(
    slot_ids=("r0c0", "r0c1", "r0c2"),
    blueprints=tuple(f"cnn/bp{i}" for i in range(8)),
    styles=("linear_add", "sigmoid_add", "linear_multiply", "gated"),
    tempos=(3, 5, 8),
    alpha_targets=(0.5, 0.7, 1.0),
)
HISTORY = 5
GAMMA = 0.995


def random_masks(g: torch.Generator) -> ActionMasks:
    sizes = SPACE.head_sizes
    slot = torch.rand(len(OPS), sizes["slot"], generator=g) < 0.5
    alpha = torch.rand(sizes["slot"], sizes["alpha_target"], generator=g) < 0.5
    slot[LifecycleOp.SET_ALPHA_TARGET] &= alpha.any(dim=1)
    slot[LifecycleOp.WAIT] = True
    ones = {h: torch.ones(sizes[h], dtype=torch.bool) for h in ("style", "tempo")}
    blueprint = torch.ones(sizes["slot"], sizes["blueprint"], dtype=torch.bool)
    return ActionMasks(
        op=slot.any(dim=1), slot=slot, blueprint=blueprint, alpha_target=alpha, **ones
    )


def make_rollout(
    net: ActorCritic, n_envs: int, n_steps: int, seed: int
) -> tuple[RolloutBuffer, torch.Tensor]:
    """A full rollout sampled from ``net`` itself (so stored log-probs are consistent),
    with random rewards, and the values that bootstrap its last step."""
    g = torch.Generator().manual_seed(seed)
    dim = feature_dim(SPACE, HISTORY)
    rollout = RolloutBuffer.allocate(n_envs, n_steps, dim, net.head_sizes, 0)
    rows = torch.arange(n_envs)
    no_state = (torch.zeros(n_envs, 0), torch.zeros(n_envs, 0))
    for _ in range(n_steps):
        obs = torch.randn(n_envs, dim, generator=g)
        masks = BatchMasks.stack([random_masks(g) for _ in range(n_envs)])
        with torch.no_grad():
            features = net.encoder(obs)
            out = run_heads(net, features, masks, generator=g)
            values = net.value(features)
        rollout.add_actions(
            rows,
            obs=obs,
            raw_obs=obs,
            actions=out.actions,
            log_probs=out.log_probs,
            values=values,
            masks=masks,
            starts=torch.zeros(n_envs, dtype=torch.bool),
            state=no_state,
        )
        rollout.add_outcomes(
            rows, torch.randn(n_envs, generator=g), torch.zeros(n_envs, dtype=torch.bool)
        )
    return rollout, torch.randn(n_envs, generator=g)


def cleanrl_update(
    net: ActorCritic,
    rollout: RolloutBuffer,
    last_values: torch.Tensor,
    o: PPOOptions,
    g: torch.Generator,
    fused: bool = False,
) -> None:
    """CleanRL's ppo.py update loop, written out for the factored policy."""
    optimizer = torch.optim.Adam(
        net.parameters(), lr=o.learning_rate, eps=o.adam_eps, fused=fused or None
    )
    advantages, returns = compute_gae(
        rollout.rewards, rollout.values, rollout.terminals, last_values, GAMMA, o.gae_lambda
    )
    b_obs = rollout.obs.flatten(0, 1)
    b_actions = rollout.actions.flatten(0, 1)
    b_logprobs = rollout.log_probs.flatten(0, 1).sum(1)
    b_values, b_returns = rollout.values.flatten(), returns.flatten()
    b_advantages = advantages.flatten()
    b_masks = rollout.masks().map(lambda m: m.flatten(0, 1))
    table = used_heads_table()
    batch_size = b_obs.shape[0]
    minibatch_size = batch_size // o.num_minibatches
    clipfracs = []
    for _epoch in range(o.update_epochs):
        b_inds = torch.randperm(batch_size, generator=g)
        for start in range(0, batch_size, minibatch_size):
            mb = b_inds[start : start + minibatch_size]
            features = net.encoder(b_obs[mb])
            out = run_heads(
                net,
                features,
                b_masks.map(lambda m, mb=mb: m[mb]),
                actions=b_actions[mb],
                used_table=table,
            )
            newvalue = net.value(features)
            logratio = out.log_probs.sum(1) - b_logprobs[mb]
            ratio = logratio.exp()
            with torch.no_grad():
                approx_kl = ((ratio - 1) - logratio).mean()
                clipfracs += [((ratio - 1.0).abs() > o.clip_coef).float().mean().item()]
            mb_adv = b_advantages[mb]
            mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
            pg_loss = torch.max(
                -mb_adv * ratio, -mb_adv * torch.clamp(ratio, 1 - o.clip_coef, 1 + o.clip_coef)
            ).mean()
            v_unclipped = (newvalue - b_returns[mb]) ** 2
            v_clipped = b_values[mb] + torch.clamp(
                newvalue - b_values[mb], -o.clip_coef, o.clip_coef
            )
            v_loss = 0.5 * torch.max(v_unclipped, (v_clipped - b_returns[mb]) ** 2).mean()
            entropy_loss = out.entropies.sum(1).mean()
            loss = pg_loss - o.ent_coef * entropy_loss + v_loss * o.vf_coef
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(net.parameters(), o.max_grad_norm)
            optimizer.step()
        _ = approx_kl.item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument(
        "--steps", type=int, default=30, help="rollout length T (digits: 30 epochs)"
    )
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument(
        "--smoke", action="store_true", help="a few seconds: same path and keys, no figures"
    )
    args = parser.parse_args()
    if args.smoke:
        args.envs, args.steps, args.reps, args.hidden = 2, 8, 2, 16
    torch.set_num_threads(1)

    options = PPOOptions(hidden_size=args.hidden, target_kl=0.0, anneal_lr=False)
    torch.manual_seed(0)
    template = ActorCritic(feature_dim(SPACE, HISTORY), SPACE.head_sizes, "mlp", args.hidden)
    rollout, last_values = make_rollout(template, args.envs, args.steps, seed=1)
    samples = args.envs * args.steps * options.update_epochs

    def ours() -> float:
        net = copy.deepcopy(template)
        learner = PPOLearner(
            net, options, gamma=GAMMA, total_updates=0, generator=torch.Generator().manual_seed(2)
        )
        t0 = time.perf_counter()
        diagnostics = learner.update(rollout, rollout.rewards, last_values, 0)
        elapsed = time.perf_counter() - t0
        assert diagnostics["epochs_run"] == options.update_epochs
        return elapsed

    def reference(fused: bool = False) -> float:
        net = copy.deepcopy(template)
        t0 = time.perf_counter()
        cleanrl_update(
            net, rollout, last_values, options, torch.Generator().manual_seed(2), fused=fused
        )
        return time.perf_counter() - t0

    ours(), reference(), reference(fused=True)  # warm-up
    times: dict[str, list[float]] = {"esper": [], "cleanrl": [], "cleanrl_fused": []}
    for _ in range(args.reps):
        times["esper"].append(ours())
        times["cleanrl"].append(reference())
        times["cleanrl_fused"].append(reference(fused=True))
    esper_sps = samples / statistics.median(times["esper"])
    cleanrl_sps = samples / statistics.median(times["cleanrl"])
    fused_sps = samples / statistics.median(times["cleanrl_fused"])
    # Samples/s ratio = time ratio inverted, per repetition.
    ratio = spread(paired_ratios(times["cleanrl"], times["esper"]), digits=3)
    ratio_fused = spread(paired_ratios(times["cleanrl_fused"], times["esper"]), digits=3)
    print(
        json.dumps(
            {
                "benchmark": "ppo_update",
                "n_envs": args.envs,
                "rollout_steps": args.steps,
                "update_epochs": options.update_epochs,
                "num_minibatches": options.num_minibatches,
                "hidden_size": args.hidden,
                "samples_per_update": samples,
                "esper_samples_per_s": round(esper_sps, 1),
                "cleanrl_samples_per_s": round(cleanrl_sps, 1),
                "speed_ratio": round(esper_sps / cleanrl_sps, 3),
                "speed_ratio_spread": ratio,
                "target_ratio": 1.0,
                "cleanrl_fused_adam_samples_per_s": round(fused_sps, 1),
                "speed_ratio_same_optimizer": round(esper_sps / fused_sps, 3),
                "speed_ratio_same_optimizer_spread": ratio_fused,
                "torch_threads": torch.get_num_threads(),
                "load_average": list(os.getloadavg()),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
