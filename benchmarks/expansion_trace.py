"""Per epoch, what the heuristic's expansion probe reads on a model that does not grow.

Trains a model with no growth (the ``wait`` arm) and after every epoch prints the
probe's numbers on the validation split (what the env reads) and on the training
split: the host's score ``||mean dL/dtheta||^2``, the best slot's score
``||mean dL/dV||^2`` and their ratio (``Observation.expansion``); each score split into
its signal (the inner product of the two halves' mean gradients, an unbiased estimate
of the squared norm of the expected gradient) and its sampling noise; the ratio of the
slot's score with random ReLU features to its score with linear features ``phi = h``
(both gradients pass through the same downstream weights); and the training and
validation losses; and ``ratio_relative``, the same ratio with each side measured for a
step proportional to its weights' scale (host: ``sum over weight matrices of
||dL/dW||^2 x mean(W^2)``; slot: ``||dL/dV||^2 / features``, a fresh module of unit
gain), which does not change when the layers around a ReLU are rescaled. ``--rescale C``
ends by multiplying the first layer by ``C`` and dividing the second by ``C`` (the same
function) and printing both ratios at ``C``. For diagnosing where the trigger fires though
growth does not pay.

    OMP_NUM_THREADS=1 python benchmarks/expansion_trace.py spirals --hidden 16 --layers 1 --seed 0
    OMP_NUM_THREADS=1 python benchmarks/expansion_trace.py tabular --hidden 64 --seed 100

Prints JSON (per epoch and split: ``ratio``, ``host``, ``slot_score``, ``host_signal``,
``host_noise``, ``slot_signal``, ``slot_noise``, ``nonlinear_over_linear``,
``ratio_relative``, ``loss``; with ``--rescale``, ``rescaled``) and, on stderr, one line
per epoch.

``spirals``: examples/own_model_spirals.py's data, model, AdamW at its rate, 24 epochs.
``tabular``: examples/benchmark_models.py's tabular problem and MLP (``--hidden`` 8 is
mlp_narrow, 64 mlp_wide), SGD with momentum 0.9 at ``--lr`` (0.03), 30 epochs, batch 64.
CPU budget: seconds per model and seed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from esper_core.env.expansion_score import FEATURES_PER_CHANNEL, _features, expansion_scores
from esper_core.env.pending import fetch

ROOT = Path(__file__).resolve().parents[1]
Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _module(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gradients(
    model: nn.Module, site: nn.Module, x: torch.Tensor, y: torch.Tensor, projection: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The host's mean gradient, the slot module's ``dL/dV`` on random ReLU features
    and on linear features, each flattened, on one batch (eval mode)."""
    captured: dict[str, torch.Tensor] = {}
    handle = site.register_forward_hook(lambda _m, _i, out: captured.__setitem__("h", out))
    was_training = model.training
    model.eval()
    try:
        loss = nn.functional.cross_entropy(model(x), y)
    finally:
        handle.remove()
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, [*params, captured["h"]])
    model.train(was_training)
    h, g = captured["h"].detach(), grads[-1]
    host = torch.cat([t.flatten() for t in grads[:-1]])
    return host, (g.T @ _features(h, projection)).flatten(), (g.T @ h).flatten()


def relative_ratio(
    model: nn.Module, site: nn.Module, data: tuple[torch.Tensor, torch.Tensor], seed: int
) -> float:
    """The slot's score over the host's, each for a step scaled to its weights: the
    host's ``||dL/dW||^2`` weighted by ``mean(W^2)`` per weight matrix (invariant when a
    ReLU's neighbours are rescaled by ``c`` and ``1/c``), the slot's ``||dL/dV||^2`` over
    its feature count (a fresh module whose weights have variance ``1/features``)."""
    x, y = data
    out_width = _width(model, site, x[:2])
    features = FEATURES_PER_CHANNEL * out_width
    draw = torch.randn(out_width, features, generator=torch.Generator().manual_seed(seed))
    host, slot, _linear = gradients(model, site, x, y, draw / out_width**0.5)
    params = [p for p in model.parameters() if p.requires_grad]
    weighted, start = 0.0, 0
    for p in params:
        g = host[start : start + p.numel()]
        start += p.numel()
        if p.dim() > 1:
            weighted += float(g.pow(2).sum()) * float(p.detach().pow(2).mean())
    return float(slot.pow(2).sum()) / features / max(weighted, 1e-30)


def rescaled_ratios(
    model: nn.Module, sites: dict[str, nn.Module], data: TensorDataset, c: float, seed: int
) -> dict[str, float]:
    """Both ratios of the best slot after scaling the first Linear (weight and bias) by
    ``c`` and the second Linear's weight by ``1/c``: the same function, other weights."""
    import copy

    clone = copy.deepcopy(model)
    names = {id(m): n for n, m in model.named_modules()}
    clone_sites = {sid: clone.get_submodule(names[id(m)]) for sid, m in sites.items()}
    first, second = [m for m in clone.modules() if isinstance(m, nn.Linear)][:2]
    with torch.no_grad():
        first.weight.mul_(c)
        first.bias.mul_(c)
        second.weight.div_(c)
    row = epoch_numbers(clone, clone_sites, {"val": data}, seed)["val"]
    return {
        "c": c,
        "ratio": row["ratio"],
        "ratio_relative": row["ratio_relative"],
        "loss": row["loss"],
    }


def split_half(
    model: nn.Module, site: nn.Module, data: tuple[torch.Tensor, torch.Tensor], seed: int
) -> dict[str, float]:
    """Signal and noise of the host's and the slot's score from two halves of ``data``
    (even and odd samples), and the slot's nonlinear over linear score."""
    x, y = data
    out_width = _width(model, site, x[:2])
    draw = torch.randn(
        out_width,
        FEATURES_PER_CHANNEL * out_width,
        generator=torch.Generator().manual_seed(seed),
    )
    projection = draw / out_width**0.5
    ha, sa, la = gradients(model, site, x[0::2], y[0::2], projection)
    hb, sb, lb = gradients(model, site, x[1::2], y[1::2], projection)
    linear = float(((la + lb) / 2).pow(2).sum())
    return {
        "host_signal": float(ha @ hb),
        "host_noise": float((ha - hb).pow(2).sum() / 4),
        "slot_signal": float(sa @ sb),
        "slot_noise": float((sa - sb).pow(2).sum() / 4),
        "nonlinear_over_linear": float(((sa + sb) / 2).pow(2).sum()) / max(linear, 1e-30),
    }


def _width(model: nn.Module, site: nn.Module, x: torch.Tensor) -> int:
    captured: dict[str, int] = {}
    handle = site.register_forward_hook(
        lambda _m, _i, out: captured.__setitem__("w", out.shape[-1])
    )
    with torch.no_grad():
        model(x)
    handle.remove()
    return captured["w"]


def epoch_numbers(
    model: nn.Module,
    sites: dict[str, nn.Module],
    splits: dict[str, TensorDataset],
    seed: int,
) -> dict[str, Any]:
    """The probe's numbers on each split (the whole split as one batch)."""
    row: dict[str, Any] = {}
    ce: Loss = nn.functional.cross_entropy
    for name, data in splits.items():
        batch = (data.tensors[0], data.tensors[1])
        gen = torch.Generator().manual_seed(seed)
        pending = expansion_scores(
            model, sites, list(model.parameters()), [batch], ce, generator=gen
        )
        scores = fetch(pending)[0]
        best = scores.best()
        assert best is not None
        slot_id, ratio = best
        halves = split_half(model, sites[slot_id], batch, seed)
        relative = relative_ratio(model, sites[slot_id], batch, seed)
        with torch.no_grad():
            model.eval()
            loss = float(ce(model(batch[0]), batch[1]))
            model.train()
        row[name] = {
            "slot": slot_id,
            "ratio": ratio,
            "host": scores.host,
            "slot_score": scores.slots[slot_id],
            "loss": loss,
            "ratio_relative": relative,
            **halves,
        }
    return row


def _spirals(args: argparse.Namespace) -> tuple[nn.Module, Any, dict[str, TensorDataset], int]:
    ex = _module(ROOT / "examples" / "own_model_spirals.py")
    torch.manual_seed(args.seed)
    train, val, _test = ex.make_splits(args.seed)
    model = ex.SpiralMLP(args.hidden, args.layers)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr or ex.LR)
    slots = ex.slots_of(args.layers)
    return model, (opt, slots), {"train": train, "val": val}, args.epochs or 24


def _tabular(args: argparse.Namespace) -> tuple[nn.Module, Any, dict[str, TensorDataset], int]:
    bm = _module(ROOT / "examples" / "benchmark_models.py")
    torch.manual_seed(args.seed)
    train, val, _test = bm.tabular()
    model = bm.MLP(args.hidden)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr or 0.03, momentum=0.9)
    return model, (opt, ["body.1", "body.3"]), {"train": train, "val": val}, args.epochs or 30


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problem", nargs="?", choices=["spirals", "tabular"], default="spirals")
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument(
        "--rescale", type=float, default=None, help="end with both ratios after a ReLU rescaling"
    )
    parser.add_argument(
        "--smoke", action="store_true", help="2 epochs and a rescaling: the path and keys only"
    )
    args = parser.parse_args()
    if args.smoke:
        args.epochs = 2
        args.rescale = args.rescale or 4.0
    build = _spirals if args.problem == "spirals" else _tabular
    model, (opt, slots), splits, epochs = build(args)
    sites = {s: model.get_submodule(s) for s in slots}
    loader = DataLoader(splits["train"], batch_size=64, shuffle=True)
    rows = []
    for epoch in range(1, epochs + 1):
        model.train()
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        rows.append(
            {"epoch": epoch, **epoch_numbers(model, sites, splits, args.seed * 100_003 + epoch)}
        )
        r = rows[-1]
        print(
            f"{epoch:3d}: val ratio {r['val']['ratio']:6.2f} train ratio "
            f"{r['train']['ratio']:6.2f} val relative {r['val']['ratio_relative']:5.2f} "
            f"train loss {r['train']['loss']:.3f} "
            f"val loss {r['val']['loss']:.3f}",
            file=sys.stderr,
            flush=True,
        )
    result: dict[str, Any] = {"args": vars(args), "epochs": rows}
    if args.rescale is not None:
        result["rescaled"] = [
            rescaled_ratios(model, sites, splits["val"], c, args.seed * 100_003 + epochs)
            for c in (1.0, args.rescale)
        ]
        print(f"rescaled: {result['rescaled']}", file=sys.stderr)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
