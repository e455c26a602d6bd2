"""The learning requirement of tasks.digits, as a plain PyTorch loop on the bare host.

``base`` must reach 90% test accuracy within 20 epochs; ``impaired`` must stay clearly
(10+ points) below after 20 and after 30 epochs. That gap is what lets growth show.
"""

from __future__ import annotations

import pytest
import torch
from esper_tasks.digits import DigitsOptions, DigitsTask

from esper_core.env.data import make_loader

# The three of random seeds 0-4 nearest the bounds (measured 2026-11-29): base reached
# 99.4-100 % on all five, lowest on random seed 2; impaired was highest on random seeds 1
# and 4 (80.2 and 81.3 % at 30 epochs, 8-10 points inside the bound). Random seeds 0 and 3
# (impaired at most 73.5 %) brought no case nearer a bound, at 40 % of the test's time.
SEEDS = (1, 2, 4)


def _test_accuracy(preset: str, seed: int, epochs: tuple[int, ...]) -> dict[int, float]:
    task = DigitsTask(DigitsOptions(preset=preset))
    data = task.load_data("cpu")
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        host = task.build_host()
    optimizer = torch.optim.SGD(host.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    generator = torch.Generator().manual_seed(seed)
    train = make_loader(
        data.train, task.default_batch_size, device="cpu", generator=generator, shuffle=True
    )
    test = make_loader(
        data.test, task.default_eval_batch_size, device="cpu", generator=None, shuffle=False
    )
    accuracy = {}
    for epoch in range(1, max(epochs) + 1):
        host.train()
        for x, y in train:
            x, y = task.prepare_batch(x, y, True, generator)
            loss = task.loss(host(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if epoch in epochs:
            host.eval()
            correct = count = 0
            with torch.no_grad():
                for x, y in test:
                    x, y = task.prepare_batch(x, y, False, None)
                    m = task.metrics(host(x), y)
                    correct += int(m.correct)
                    count += int(m.count)
            accuracy[epoch] = 100.0 * correct / count
    return accuracy


@pytest.mark.slow
def test_base_learns_and_impaired_stays_clearly_below() -> None:
    for seed in SEEDS:
        base = _test_accuracy("base", seed, (20,))
        impaired = _test_accuracy("impaired", seed, (20, 30))
        assert base[20] >= 90.0, (seed, base)
        assert impaired[20] <= base[20] - 10.0, (seed, base, impaired)
        assert impaired[30] <= base[20] - 10.0, (seed, base, impaired)
