"""Epoch throughput of N envs on one GPU: ``serial`` vs ``streams`` (samples per second
over all envs), the profile of one ``streams`` epoch at the largest N, and the fixes
tried when streams do not scale.

Hosts: the digits ``base`` host on the digits data, and the CIFAR-10 ``base`` host on
random CIFAR-shaped uint8 images (a throughput-only workload: no download; the task's
own batch preparation, augmentation included, still runs on the GPU). Every env runs
the wait policy, so each epoch is the host's training plus one validation pass.

Timing: after ``--warmup`` epochs, ``--epochs`` epochs between two CUDA events, read
after the last; each executor step already ends in its single fetch (one host sync per
step for streams, one per env for serial). ``host_s`` is the Python wall time of the
same epochs: when it is close to ``gpu_s`` the GPU waits for kernel launches.

``--profile``: one streams epoch at the largest N under ``torch.profiler``: the time
kernels ran (summed, and their union on the timeline) against the epoch's wall time,
and the top operators (written to ``--out``/profile.txt).

``--fixes``: streams at the largest N again with ``training.compile=reduce-overhead``
(CUDA graphs: a replayed graph costs one launch) and with 4x the batch size (more work
per launch), each against serial at N = 1 under the same setting.

    python benchmarks/gpu_streams.py --device cuda [--envs 1 2 4 8] [--profile] [--fixes]

``--smoke``: CPU, N = 1 and 2, one epoch of two batches of 16 (same path and JSON keys).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from esper_core import TaskData
from esper_core.config import load_config
from esper_core.env.data import TensorSplit
from esper_core.env.env import MorphogeneticEnv
from esper_core.lifecycle.actions import WAIT
from esper_core.plugins import PluginManager
from esper_core.run.executor import SerialExecutor
from esper_core.run.resolve import executor_context, resolve

HOSTS = {
    "digits-base": ["run.task=digits", "tasks.digits.preset=base"],
    "cifar-base-random": ["run.task=cifar10", "tasks.cifar10.preset=base"],
}
CIFAR_TRAIN, CIFAR_VAL = 10_000, 2_000
# The same path at the least work: two small batches an epoch, one expansion probe batch.
SMOKE = [
    "env.max_batches=2",
    "env.batch_size=16",
    "env.eval_batch_size=64",
    "env.expansion_batches=1",
]


def random_cifar(n_train: int, n_val: int) -> TaskData:
    """CIFAR-shaped uint8 images and labels from a fixed generator (no download)."""
    gen = torch.Generator().manual_seed(0)

    def split(n: int) -> TensorSplit:
        images = torch.randint(0, 256, (n, 3, 32, 32), generator=gen, dtype=torch.uint8)
        return TensorSplit(images, torch.randint(0, 10, (n,), generator=gen))

    return TaskData(train=split(n_train), val=split(n_val), test=split(n_val))


class Bench:
    """The envs of one host, executor and N, stepped under the wait policy."""

    def __init__(self, host: str, n: int, executor: str, args: argparse.Namespace, *extra: str):
        pm = PluginManager()
        overrides = [
            *HOSTS[host],
            "run.policy=wait",
            "run.telemetry=[]",
            f"run.n_envs={n}",
            f"run.device={args.device}",
            f"run.executor={executor}",
            "env.eval_test_every=0",
            "env.max_epochs=1000",
            "governor.enabled=false",
            *(SMOKE if args.smoke else []),
            *extra,
        ]
        resolved = resolve(load_config(overrides=overrides), pm)
        cfg = resolved.config
        task = resolved.make_task(quiet=True)
        if host.startswith("cifar"):
            n_train, n_val = (256, 128) if args.smoke else (CIFAR_TRAIN, CIFAR_VAL)
            task._load_cpu = lambda: random_cifar(n_train, n_val)  # type: ignore[method-assign]
        self.executor = make_executor(executor, cfg)
        devices = self.executor.env_devices(n)
        self.envs = [
            MorphogeneticEnv(task, resolved.make_reward(), resolved.blueprints, cfg, i, devices[i])
            for i in range(n)
        ]
        for i, env in enumerate(self.envs):
            env.reset(i)
        per_env = len(self.envs[0].data.train.inputs)
        batch = self.envs[0].batch_size
        if cfg.env.max_batches is not None:
            per_env = min(per_env, cfg.env.max_batches * batch)
        self.samples_per_epoch = n * per_env
        self.device = torch.device(args.device)

    def step(self) -> None:
        self.executor.step(self.envs, [WAIT] * len(self.envs))

    def timed(self, warmup: int, epochs: int) -> dict[str, float]:
        for _ in range(warmup):
            self.step()
        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.synchronize(self.device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        for _ in range(epochs):
            self.step()
        host_s = time.perf_counter() - t0
        if cuda:
            end.record()
            end.synchronize()
            gpu_s = start.elapsed_time(end) / 1000.0
        else:
            gpu_s = host_s
        return {
            "gpu_s_per_epoch": gpu_s / epochs,
            "host_s_per_epoch": host_s / epochs,
            "samples_per_s": self.samples_per_epoch * epochs / gpu_s,
        }

    def close(self) -> None:
        self.executor.close()


def make_executor(name: str, cfg: Any) -> Any:
    if name == "serial":
        return SerialExecutor(None, executor_context(cfg))
    from esper_streams.streams import StreamsExecutor, StreamsOptions

    return StreamsExecutor(StreamsOptions(), executor_context(cfg))


def measure(host: str, n: int, executor: str, args: argparse.Namespace, *extra: str) -> dict:
    bench = Bench(host, n, executor, args, *extra)
    try:
        row = {"host": host, "envs": n, "executor": executor, "settings": list(extra)}
        row.update({k: round(v, 5) for k, v in bench.timed(args.warmup, args.epochs).items()})
        # A compile that failed trains eagerly: the row must say so.
        fallbacks = {getattr(e.trainer.forward, "fallback_reason", None) for e in bench.envs}
        row["compile_fallback"] = sorted(str(f) for f in fallbacks if f)
    finally:
        bench.close()
    sys.stderr.write(json.dumps(row) + "\n")
    return row


def scaling(rows: Sequence[dict], hosts: Sequence[str], largest: int) -> dict[str, Any]:
    """Throughput at N over N x one env's (serial, N = 1, same settings): the acceptance ratio."""
    out: dict[str, Any] = {}
    for row in rows:
        one = next(
            (
                r
                for r in rows
                if r["host"] == row["host"]
                and r["envs"] == 1
                and r["executor"] == "serial"
                and r["settings"] == row["settings"]
            ),
            None,
        )
        if one is None or row["host"] not in hosts:
            continue
        key = f"{row['host']}/{row['executor']}/N={row['envs']}" + "".join(
            f"/{s}" for s in row["settings"]
        )
        out[key] = round(row["samples_per_s"] / (row["envs"] * one["samples_per_s"]), 3)
    out["acceptance"] = f"streams at N={largest} >= 0.8 x N x serial N=1"
    return out


def profile(host: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    """One streams epoch at N envs under torch.profiler: kernel time vs the epoch's wall."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    bench = Bench(host, n, "streams", args)
    try:
        for _ in range(args.warmup):
            bench.step()
        activities = [ProfilerActivity.CPU]
        if bench.device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
            torch.cuda.synchronize(bench.device)
        t0 = time.perf_counter()
        with torch_profile(activities=activities) as prof:
            bench.step()
        wall_us = (time.perf_counter() - t0) * 1e6
    finally:
        bench.close()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    intervals = sorted((e.time_range.start, e.time_range.end) for e in kernels)
    union, reach = 0.0, float("-inf")
    for start, end in intervals:
        if end > reach:
            union += end - max(start, reach)
            reach = end
    summed = sum(e.time_range.end - e.time_range.start for e in kernels)
    launches = sum(1 for e in prof.events() if "LaunchKernel" in e.name)
    sort_by = "self_cuda_time_total" if kernels else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=sort_by, row_limit=25)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "profile.txt").write_text(table)
    return {
        "host": host,
        "envs": n,
        "epoch_wall_ms": round(wall_us / 1000, 2),
        "kernels": len(kernels),
        "kernel_launches": launches,
        "kernel_ms_summed": round(summed / 1000, 2),
        "gpu_busy_ms_union": round(union / 1000, 2),
        "gpu_busy_fraction": round(union / wall_us, 3) if wall_us else None,
        "overlap": round(summed / union, 3) if union else None,
        "mean_kernel_us": round(
            statistics.fmean(e.time_range.end - e.time_range.start for e in kernels), 2
        )
        if kernels
        else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--hosts", nargs="+", default=list(HOSTS), choices=list(HOSTS))
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--fixes", action="store_true")
    parser.add_argument("--out", default="benchmarks-out", help="folder for profile.txt")
    parser.add_argument("--smoke", action="store_true", help="CPU, seconds: same path and keys")
    args = parser.parse_args()
    if args.smoke:
        args.device, args.envs, args.warmup, args.epochs = "cpu", [1, 2], 1, 1
        args.profile = args.fixes = True
    largest = max(args.envs)
    rows = [
        measure(host, n, executor, args)
        for host in args.hosts
        for n in args.envs
        for executor in ("serial", "streams")
    ]
    result: dict[str, Any] = {"benchmark": "gpu_streams", "device": device_name(args.device)}
    if args.profile:
        result["profile"] = profile(args.hosts[0], largest, args)
    if args.fixes:
        fixes = [["env.batch_size=256"]]
        if torch.device(args.device).type == "cuda":  # CUDA graphs exist on CUDA only
            fixes.insert(0, ["training.compile=reduce-overhead"])
        for extra in fixes:
            host = args.hosts[0]
            rows.append(measure(host, 1, "serial", args, *extra))
            rows.append(measure(host, largest, "streams", args, *extra))
    result["rows"] = rows
    result["scaling"] = scaling(rows, args.hosts, largest)
    print(json.dumps(result, indent=2))


def device_name(device: str) -> str:
    if torch.device(device).type == "cuda":
        return f"{torch.cuda.get_device_name(device)} (torch {torch.__version__})"
    return f"cpu (torch {torch.__version__})"


if __name__ == "__main__":
    main()
