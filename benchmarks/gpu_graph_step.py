"""Would one CUDA graph per env's training step make N envs on one GPU scale?

benchmarks/gpu_streams.py found N envs launch-bound on an H200: every env's ~110 kernel
launches per batch come from one Python thread, so N envs run no faster than one, with
or without streams. This script measures the fix before it is built into Esper: the
digits ``base`` host trained in plain PyTorch (forward, cross-entropy, backward, global
gradient clipping, SGD with momentum: the recipe's step, no seeds), N copies of it,

- ``eager``: each env's steps launched one by one, envs in turn (what ``serial`` does);
- ``graphs``: each env's whole step captured once in a ``torch.cuda.CUDAGraph`` on the
  env's own stream and replayed (one launch per step), envs in turn, each on its stream.

Samples per second over all envs between CUDA events after a warm-up, on random
digit-shaped batches already on the GPU (the training step alone: no data loading, no
validation). The ratio ``graphs N / (N x eager 1)`` is the acceptance figure of
gpu_streams.py's streams row, for the step alone.

    python benchmarks/gpu_graph_step.py --device cuda [--envs 1 2 4 8] [--steps 200]

``--smoke``: CPU, eager only, a few steps (same path and JSON keys; ``graphs`` rows are
null there because CUDA graphs need CUDA).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from esper_core.config import load_config
from esper_core.plugins import PluginManager
from esper_core.run.resolve import resolve


def build_host(device: torch.device, seed: int) -> nn.Module:
    cfg = load_config(overrides=["run.task=digits", "tasks.digits.preset=base"])
    task = resolve(cfg, PluginManager()).make_task(quiet=True)
    torch.manual_seed(seed)
    return task.build_host().to(device)


class Env:
    """One host, its optimizer and static batch buffers (a graph reads fixed addresses)."""

    def __init__(self, device: torch.device, seed: int, batch: int) -> None:
        self.model = build_host(device, seed)
        self.opt = torch.optim.SGD(
            self.model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4
        )
        gen = torch.Generator(device=device).manual_seed(seed)
        self.x = torch.randn(batch, 1, 8, 8, device=device, generator=gen)
        self.y = torch.randint(0, 10, (batch,), device=device, generator=gen)
        self.loss = torch.zeros((), device=device)
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.graph: Any = None

    def step(self) -> None:
        self.opt.zero_grad(set_to_none=False)  # a graph replays into the same .grad tensors
        loss = F.cross_entropy(self.model(self.x), self.y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0, foreach=True)
        self.opt.step()
        self.loss.copy_(loss.detach())

    def capture(self) -> None:
        """Warm up on a side stream (as torch's docs require), then capture one step."""
        assert self.stream is not None
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            for _ in range(3):
                self.step()
        torch.cuda.current_stream().wait_stream(self.stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, stream=self.stream):
            self.step()

    def replay(self) -> None:
        with torch.cuda.stream(self.stream):
            self.graph.replay()


def timed(envs: list[Env], mode: str, steps: int, warmup: int, batch: int) -> dict[str, float]:
    device = envs[0].x.device
    cuda = device.type == "cuda"

    def one_round() -> None:
        for env in envs:
            env.replay() if mode == "graphs" else env.step()

    for _ in range(warmup):
        one_round()
    if cuda:
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    t0 = time.perf_counter()
    for _ in range(steps):
        one_round()
    host_s = time.perf_counter() - t0
    if cuda:
        # Replays run on the envs' streams: the end event waits for every one of them.
        for env in envs:
            if env.stream is not None:
                torch.cuda.current_stream().wait_stream(env.stream)
        end.record()
        end.synchronize()
        gpu_s = start.elapsed_time(end) / 1000.0
    else:
        gpu_s = host_s
    samples = len(envs) * steps * batch
    return {"samples_per_s": samples / gpu_s, "host_s": host_s, "gpu_s": gpu_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--smoke", action="store_true", help="CPU, seconds: same path and keys")
    args = parser.parse_args()
    if args.smoke:
        args.device, args.envs, args.steps, args.warmup = "cpu", [1, 2], 3, 1
    device = torch.device(args.device)
    modes = ["eager", "graphs"] if device.type == "cuda" else ["eager"]
    rows = []
    for n in args.envs:
        envs = [Env(device, seed, args.batch) for seed in range(n)]
        for mode in modes:
            if mode == "graphs":
                for env in envs:
                    env.capture()
            row = {"envs": n, "mode": mode}
            row.update(
                {
                    k: round(v, 4)
                    for k, v in timed(envs, mode, args.steps, args.warmup, args.batch).items()
                }
            )
            rows.append(row)
    one = (
        next(r["samples_per_s"] for r in rows if r["envs"] == 1 and r["mode"] == "eager")
        if 1 in args.envs
        else None
    )
    scaling = {
        f"{r['mode']}/N={r['envs']}": round(r["samples_per_s"] / (r["envs"] * one), 3)
        if one
        else None
        for r in rows
    }
    if device.type != "cuda":
        scaling.update({f"graphs/N={n}": None for n in args.envs})
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(
        json.dumps(
            {
                "benchmark": "gpu_graph_step",
                "device": f"{name} (torch {torch.__version__})",
                "rows": rows,
                "scaling": scaling,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
