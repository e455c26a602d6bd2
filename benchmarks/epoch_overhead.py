"""Esper's epoch vs a plain PyTorch loop on the same host, data and batches.

Prints JSON. Both sides train the digits ``base`` host for one epoch with the same
SGD settings, gradient clipping and batch order, then run one validation pass with
on-device accumulators and a single sync; Esper's side is ``MorphogeneticEnv.step``
with the wait policy, every slot empty and telemetry off. Repetitions are
interleaved so machine noise hits both sides alike. Controller overhead is the time
spent per step outside training and validation: the policy, observation, masks,
reward and bookkeeping.

    OMP_NUM_THREADS=1 python benchmarks/epoch_overhead.py [--reps 15] [--task digits]

The epoch ratio is taken per repetition (the two sides run back to back) and reported
with its spread: median, interquartile range and a bootstrap interval of the median
(``epoch_ratio``), so a reader can tell noise from a regression; the same for the
controller fraction. ``--smoke`` runs two repetitions after one warm-up, of two batches an
epoch on both sides: the same path and JSON keys.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import attrs
import torch

from esper_core.config import load_config
from esper_core.env.data import TensorSplit, make_loader
from esper_core.env.env import MorphogeneticEnv
from esper_core.env.evaluation import validate_pending
from esper_core.env.optimizers import embedding_parameters, make_optimizer, param_groups
from esper_core.env.pending import fetch
from esper_core.lifecycle.actions import WAIT
from esper_core.plugins import PluginManager
from esper_core.recipe import resolve_recipe, task_recipe
from esper_core.run.resolve import resolve

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _spread import spread

WARM_UP = 2
SMOKE_BATCHES = 2  # training batches of a ``--smoke`` epoch, on both sides


def plain_epoch(
    host: torch.nn.Module, task, data, batch_size: int, generator: torch.Generator, cfg
) -> float:  # type: ignore[no-untyped-def]
    """A textbook epoch: train every batch, then validate with a single sync."""
    opt = plain_epoch.opt  # type: ignore[attr-defined]
    host.train()
    loss_sum = torch.zeros((), dtype=torch.float64)
    for x, y in make_loader(
        data.train, batch_size, device="cpu", generator=generator, shuffle=True
    ):
        opt.zero_grad(set_to_none=True)
        out = host(x)
        loss = torch.nn.functional.cross_entropy(out, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(host.parameters(), cfg.training.grad_clip)
        opt.step()
        loss_sum += loss.detach()
    host.eval()
    correct = torch.zeros((), dtype=torch.float64)
    with torch.inference_mode():
        for x, y in make_loader(
            data.val, task.default_eval_batch_size, device="cpu", generator=None, shuffle=False
        ):
            correct += (host(x).argmax(-1) == y).sum()
    return float(correct.item() + loss_sum.item())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--task", default="digits")
    parser.add_argument(
        "--smoke", action="store_true", help="a few seconds: same path and keys, no figures"
    )
    args = parser.parse_args()
    warm_up = WARM_UP
    if args.smoke:
        args.reps, warm_up = 2, 1

    pm = PluginManager()
    cfg = load_config(
        overrides=[
            f"run.task={args.task}",
            # The base host these figures have always used (digits now defaults to impaired).
            *(["tasks.digits.preset=base"] if args.task == "digits" else []),
            "run.policy=wait",
            "run.telemetry=[]",
            "env.eval_test_every=0",
            f"env.max_epochs={10 * args.reps + 10}",
            *([f"env.max_batches={SMOKE_BATCHES}"] if args.smoke else []),
        ]
    )
    resolved = resolve(cfg, pm)
    cfg = resolved.config
    task = resolved.make_task()
    env = MorphogeneticEnv(task, resolved.make_reward(), resolved.blueprints, cfg, 0, "cpu")
    policy = resolved.make_policy([env])
    env.reset(0)
    policy.reset([0])

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        host = task.build_host()
    # The same recipe as esper's epoch, so only the bookkeeping differs.
    recipe = resolve_recipe(cfg.training, task_recipe(task))
    groups = param_groups(host.parameters(), recipe, embedding_parameters(host.modules()))
    plain_epoch.opt = make_optimizer(groups, recipe)
    data = task.load_data(torch.device("cpu"))
    batch_size = env.batch_size
    if args.smoke and isinstance(data.train, TensorSplit):  # the plain side's epoch alike
        n = SMOKE_BATCHES * batch_size
        data = attrs.evolve(data, train=TensorSplit(data.train.inputs[:n], data.train.targets[:n]))
    gen = torch.Generator().manual_seed(0)

    esper_times, plain_times, controller = [], [], []
    for rep in range(args.reps + warm_up):
        t0 = time.perf_counter()
        plain_epoch(host, task, data, batch_size, gen, cfg)
        t1 = time.perf_counter()
        actions = policy.act([env.observation])
        t2 = time.perf_counter()
        env.apply_action(actions[0])
        t3 = time.perf_counter()
        env.begin_epoch()
        for batch in env.train_batches():
            env.train_batch(batch)
        t4 = time.perf_counter()
        env.end_epoch()
        t5 = time.perf_counter()
        # The validation inside end_epoch, timed alone on the same model.
        fetch(validate_pending(env.model, task, env._eval_batches(env.data.val)))
        t6 = time.perf_counter()
        if rep >= warm_up:
            plain_times.append(t1 - t0)
            epoch = (t3 - t2) + (t5 - t3)
            esper_times.append(epoch)
            controller.append(((t2 - t1) + (t3 - t2) + max(0.0, (t5 - t4) - (t6 - t5))) / epoch)
    ratios = spread([e / p for e, p in zip(esper_times, plain_times)])
    fractions = spread(controller)
    print(
        json.dumps(
            {
                "benchmark": "epoch_overhead",
                "task": args.task,
                "reps": args.reps,
                "threads": torch.get_num_threads(),
                "esper_epoch_s_median": statistics.median(esper_times),
                "plain_epoch_s_median": statistics.median(plain_times),
                "epoch_ratio_median": ratios["median"],
                "epoch_ratio": ratios,
                "epoch_ratio_target": 1.05,
                "controller_fraction_median": fractions["median"],
                "controller_fraction": fractions,
                "controller_fraction_target": 0.02,
                "load_average": list(os.getloadavg()),
            },
            indent=2,
        )
    )
    assert WAIT is not None


if __name__ == "__main__":
    main()
