"""Grow a torchvision resnet18 in your own PyTorch loop (docs/own-model.md).

Runs offline on a CPU in about a minute: resnet18 without pretrained weights, on
generated 3x32x32 images (each class a fixed random pattern plus noise), with fixed
train / validation / test splits. The training loop is plain PyTorch; the only Esper
lines are the ``Grower`` and one ``grower.end_epoch(val_loader)`` per epoch.

    python examples/own_model_resnet18.py                  # the heuristic
    python examples/own_model_resnet18.py --policy random  # any installed policy
"""

from __future__ import annotations

import argparse
import time

import torch
import torchvision
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import esper_core


def make_splits(seed: int = 0, classes: int = 10) -> tuple[TensorDataset, ...]:
    """Train / validation / test: class patterns plus noise (no download)."""
    g = torch.Generator().manual_seed(seed)
    patterns = torch.randn(classes, 3, 32, 32, generator=g)

    def split(n: int) -> TensorDataset:
        y = torch.randint(0, classes, (n,), generator=g)
        x = 0.2 * patterns[y] + torch.randn(n, 3, 32, 32, generator=g)
        return TensorDataset(x, y)

    return split(512), split(256), split(256)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="heuristic", help="any installed policy, or ppo:PATH")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save", help="write grower.state_dict() here (load_state_dict resumes)")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    train, val, test = make_splits(args.seed)
    train_loader = DataLoader(train, batch_size=32, shuffle=True)
    val_loader = DataLoader(val, batch_size=128)
    test_loader = DataLoader(test, batch_size=128)

    model = torchvision.models.resnet18(num_classes=10)  # no weights, no download
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    grower = esper_core.Grower(
        model,
        slots=["layer1", "layer2", "layer3"],
        example_input=next(iter(val_loader))[0][:2],
        policy=args.policy,
        optimizer=opt,
        max_epochs=args.epochs,
        seed=args.seed,
        # The heuristic's defaults wait for a plateau on a 30-epoch run; a short demo
        # lets it germinate as soon as the loss stops falling.
        overrides=["policies.heuristic.min_epoch=1", "policies.heuristic.tempo=3"]
        if args.policy == "heuristic"
        else [],
    )

    started = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        train_one_epoch(model, opt, train_loader)
        step = grower.end_epoch(val_loader)
        slots = ", ".join(
            f"{r.slot_id}={r.stage.value}"
            + (f"({r.blueprint}, {r.contribution:+.1f}pt)" if r.contribution is not None else "")
            for r in grower.reports()
            if r.seed_id is not None
        )
        print(
            f"epoch {epoch}: val {step.metrics.val_acc:.1f}%  "
            f"seeds: {slots or 'none'}  optimizer groups: {len(opt.param_groups)}"
        )
        if grower.decision is not None:  # what the policy does next, and why
            print(f"  next: {grower.decision.action}: {grower.decision.reason}")

    print(f"\ntrained {args.epochs} epochs in {time.perf_counter() - started:.0f}s")
    print(f"test accuracy (the grown model): {accuracy(model, test_loader):.1f}%")
    host, seeds = grower.model.host_param_count(), grower.model.seed_param_count()
    print(f"parameters: host {host:,}, seeds {seeds:,} (+{100 * seeds / host:.2f}%)")
    for r in grower.reports():
        contribution = "-" if r.contribution is None else f"{r.contribution:+.1f}pt"
        print(
            f"  {r.slot_id}: {r.stage.value:<10} blueprint={r.blueprint} alpha={r.alpha:.2f} "
            f"contribution={contribution} params={r.seed_params:,}"
        )
    if args.save:
        torch.save(grower.state_dict(), args.save)


if __name__ == "__main__":
    main()
