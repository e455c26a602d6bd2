"""The expansion score (esper_core.env.expansion_score): what a new module at a slot
would buy at first order, over what the host's own next step buys."""

from __future__ import annotations

import math

import torch
from torch import nn

from esper_core.env.expansion_score import ExpansionScores, expansion_scores
from esper_core.env.pending import fetch
from tests.fakes import make_env


def _fit(model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int = 3000) -> None:
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def _scores(model: nn.Sequential, x: torch.Tensor, y: torch.Tensor) -> ExpansionScores:
    pending = expansion_scores(
        model,
        {"slot": model[0]},
        list(model.parameters()),
        [(x, y)],
        nn.functional.mse_loss,
        generator=torch.Generator().manual_seed(0),
    )
    return fetch(pending)[0]


def test_a_host_stuck_at_its_best_has_a_high_score_a_host_that_fits_a_low_one() -> None:
    """Two linear hosts trained to their optimum: one on a linear target (it fits: the
    loss wants nothing more), one on a nonlinear target (the best line still leaves a
    residual that new nonlinear features could reduce). The host's mean gradient is ~0
    in both; the slot's score is large only where capacity is short."""
    torch.manual_seed(0)
    x = torch.randn(256, 2)
    linear_target = x @ torch.tensor([[1.0], [-2.0]])
    nonlinear_target = (x[:, :1] * x[:, 1:]).abs()
    ratios = {}
    for name, y in (("fits", linear_target), ("stuck", nonlinear_target)):
        model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
        _fit(model, x, y)
        ratios[name] = _scores(model, x, y).ratio("slot")
    assert ratios["stuck"] > 100 * max(ratios["fits"], 1e-12), ratios
    assert ratios["stuck"] > 10, ratios


def test_the_probe_changes_nothing_in_the_model() -> None:
    """No .grad, no BatchNorm statistics, the same mode: training is the same with it."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 1))
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x, y = torch.randn(16, 3), torch.randn(16, 1)
    scores = _scores(model, x, y)
    assert model.training
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert scores.batches == 1 and math.isfinite(scores.host) and scores.slots["slot"] > 0


def test_the_env_observes_one_score_per_slot_and_none_when_the_probe_is_off() -> None:
    env = make_env()
    ratios = env.observation.expansion
    assert len(ratios) == len(env.model.slot_ids)
    assert all(math.isfinite(r) and r >= 0 for r in ratios), ratios
    again = make_env()  # the same model and data: the same scores, bit for bit
    assert again.observation.expansion == ratios
    off = make_env("env.expansion_batches=0")
    assert off.observation.expansion == ()
