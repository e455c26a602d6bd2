"""Training FLOPs in the user's loop: the Grower counts what the
user's epochs cost as ``esper run`` counts its own, so the observation's FLOPs ratio,
``price = "flops"`` and the FLOPs rent see growth in the library path too."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from esper_core.env.cost import count_train_flops
from esper_core.grow.grower import Grower
from tests.integration.own_model_helpers import grower_kwargs
from tests.integration.test_grower_schedulers import SLOTS, TinyNet, _batches, _germinate


def _setup() -> tuple[TinyNet, torch.optim.Optimizer, Grower]:
    torch.manual_seed(0)
    model = TinyNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    kwargs = grower_kwargs(policy="wait", optimizer=opt, max_epochs=6)
    return model, opt, Grower(model, SLOTS, example_input=_batches(0)[0][0], **kwargs)


def _epoch(model: TinyNet, opt: torch.optim.Optimizer, grower: Grower) -> float:
    model.train()
    for x, y in _batches(1):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return grower.end_epoch(_batches(2)).observation.train_flops_ratio


def _per_sample(model: torch.nn.Module) -> float:
    """Counted in eval mode (the same FLOPs), so the count is not a training forward."""
    x, y = _batches(2)[0]
    model.eval()
    flops = count_train_flops(model, torch.nn.functional.cross_entropy, x, y) / x.shape[0]
    model.train()
    return flops


def test_the_users_epochs_are_counted_as_samples_times_flops_per_sample() -> None:
    model, opt, grower = _setup()
    assert _epoch(model, opt, grower) == 1.0  # the host alone
    samples = sum(x.shape[0] for x, _ in _batches(1))
    assert grower.env.stats.train_samples == samples
    assert grower.env.stats.train_flops == round(_per_sample(model) * samples)
    assert grower.env.stats.host_flops_per_sample == pytest.approx(_per_sample(model))


def test_a_blended_seed_raises_the_flops_ratio_and_validation_is_not_counted() -> None:
    model, opt, grower = _setup()
    _epoch(model, opt, grower)
    host = _per_sample(model)
    _germinate(grower, "block2", "cnn/conv_light")
    grower.model.slot("block2").advance()  # TRAINING: the seed runs in every forward
    grower.env.begin_epoch()
    ratio = _epoch(model, opt, grower)
    assert ratio == pytest.approx(_per_sample(grower.model) / host)
    assert ratio > 1.0
    samples = sum(x.shape[0] for x, _ in _batches(1))
    assert grower.env.stats.train_samples == 2 * samples  # counting passes do not count


def test_a_resumed_grower_sees_the_same_flops_ratio(tmp_path: Path) -> None:
    model, opt, grower = _setup()
    _epoch(model, opt, grower)
    _germinate(grower, "block2", "cnn/conv_light")
    grower.model.slot("block2").advance()  # TRAINING: the seed runs in every forward
    grower.env.begin_epoch()
    ratio = _epoch(model, opt, grower)
    assert ratio > 1.0
    torch.save(grower.state_dict(), tmp_path / "g.pt")
    _model2, _opt2, resumed = _setup()
    resumed.load_state_dict(torch.load(tmp_path / "g.pt", weights_only=True))
    assert resumed.observation.train_flops_ratio == ratio
