"""The default heuristic grows a model too small for its task, in your own loop.

Runs offline on one CPU core in seconds: three interleaved spirals in the plane
(generated here, no download) and a model of one hidden layer of 16 ReLU units, too few
to carve them apart. The loop is plain PyTorch with AdamW; the only Esper lines are the
``Grower`` (``policy="heuristic"`` with every option at its default) and one
``grower.end_epoch(val_loader)`` per epoch. The slot sits on the hidden activation; the
heuristic germinates a residual MLP seed (``x + W2 gelu(W1 LayerNorm(x))``, ``W2`` zero
at birth) once the slot's expansion score says a module there would lower the loss at
least twice as fast as the model's own next step, and keeps it if it adds a point of
validation accuracy. Figures over random seeds: docs/own-model.md.

    python examples/own_model_spirals.py                    # the heuristic grows it
    python examples/own_model_spirals.py --policy wait      # the same loop, no growth
    python examples/own_model_spirals.py --layers 2 --hidden 32 --policy wait  # static, grown size
"""

from __future__ import annotations

import argparse
import itertools
import math

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import esper_core
from esper_core.run.telemetry import Event, SeedFossilized, SeedGerminated, SeedPruned

ARMS, TURNS, NOISE = 3, 1.5, 0.04
LR = 0.03  # the rate that trains the ungrown model best (docs/own-model.md)
SPLITS = [(0, 1800), (1800, 2400), (2400, 3000)]  # train, validation, test


def make_splits(seed: int) -> tuple[TensorDataset, ...]:
    """Train / validation / test points of three spirals, standardised on train."""
    gen = torch.Generator().manual_seed(seed)
    n = SPLITS[-1][1]
    labels = torch.randint(0, ARMS, (n,), generator=gen)
    radius = torch.rand(n, generator=gen)
    angle = radius * TURNS * 2 * math.pi + labels * (2 * math.pi / ARMS)
    points = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=1)
    points = points + NOISE * torch.randn(n, 2, generator=gen)
    train = points[: SPLITS[0][1]]
    points = (points - train.mean(dim=0)) / train.std(dim=0)
    return tuple(TensorDataset(points[a:b], labels[a:b]) for a, b in SPLITS)


class SpiralMLP(nn.Module):
    """Your model: ``layers`` hidden ReLU layers of ``hidden`` units and a classifier."""

    def __init__(self, hidden: int = 16, layers: int = 1) -> None:
        super().__init__()
        widths = [2] + [hidden] * layers
        body: list[nn.Module] = []
        for a, b in itertools.pairwise(widths):
            body += [nn.Linear(a, b), nn.ReLU()]
        self.body = nn.Sequential(*body)
        self.head = nn.Linear(hidden, ARMS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.body(x))
        return out


def slots_of(layers: int) -> list[str]:
    """Every hidden ReLU output of a ``SpiralMLP``: ``body.1``, ``body.3``, ..."""
    return [f"body.{2 * i + 1}" for i in range(layers)]


def train_one_epoch(model: nn.Module, opt: torch.optim.Optimizer, loader: DataLoader) -> None:
    """Your loop, untouched: Esper never sees it."""
    model.train()
    for x, y in loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


@torch.no_grad()
def accuracy(model: nn.Module, loader: DataLoader) -> float:
    model.eval()
    correct = total = 0
    for x, y in loader:
        correct += int((model(x).argmax(dim=1) == y).sum())
        total += len(y)
    return 100.0 * correct / total


def describe(event: Event) -> str | None:
    if isinstance(event, SeedGerminated):
        return f"{event.slot_id}: germinated {event.blueprint} ({event.params:,} params)"
    if isinstance(event, SeedFossilized):
        return f"{event.slot_id}: fossilized {event.blueprint}: it stays"
    if isinstance(event, SeedPruned):
        return f"{event.slot_id}: pruned {event.blueprint} ({event.reason})"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="heuristic", help="any installed policy, or ppo:PATH")
    parser.add_argument("--epochs", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--layers", type=int, default=1)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    train, val, test = make_splits(args.seed)
    train_loader = DataLoader(train, batch_size=64, shuffle=True)
    val_loader = DataLoader(val, batch_size=600)
    test_loader = DataLoader(test, batch_size=600)

    model = SpiralMLP(args.hidden, args.layers)
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    grower = esper_core.Grower(
        model,
        slots=slots_of(args.layers),  # ["body.1"]: the hidden activation, [batch, 16]
        example_input=next(iter(val_loader))[0][:2],
        policy=args.policy,
        optimizer=opt,
        max_epochs=args.epochs,
        seed=args.seed,
    )
    for epoch in range(1, args.epochs + 1):
        train_one_epoch(model, opt, train_loader)
        step = grower.end_epoch(val_loader)
        print(f"epoch {epoch}: val {step.metrics.val_acc:.1f}%")
        for line in filter(None, map(describe, step.events)):
            print(f"    {line}")
        print(f"  {grower.decision}")  # what the policy does next, and why

    host, seeds = grower.model.host_param_count(), grower.model.seed_param_count()
    print(f"\ntest accuracy: {accuracy(model, test_loader):.1f}%")
    print(f"parameters: model {host:,}, seeds {seeds:,}")


if __name__ == "__main__":
    main()
