"""MLPs grow: slots on ``[batch, features]`` activations, residual
seeds that are the identity at birth, in the user's plain loop."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from esper_core.grow.grower import Grower
from esper_core.lifecycle.rules import BLENDED_STAGES
from esper_core.plugins import PluginManager
from tests.integration.own_model_helpers import (
    MLP_SLOTS,
    grower_kwargs,
    mlp,
    tabular_batches,
    train_one_epoch,
)
from tests.plugin_set import first_party

EAGER = [
    # The capacity trigger and the gain judgement (the tests pin a lifecycle, not a trigger).
    'policies.heuristic.trigger="capacity"',
    'policies.heuristic.judge="gain"',
    "policies.heuristic.min_epoch=0",
    "policies.heuristic.flat_window=1",
    "policies.heuristic.underfit_loss_ratio=0",
    "policies.heuristic.flat_max_drop=100",
    # Seeds alone (no host widening, no fit gate): these tests exercise seed mechanics.
    'policies.heuristic.host_growth="off"',
    "policies.heuristic.fit_loss_ratio=0",
]


def test_mlp_blueprints_are_registered_and_pass_their_checks() -> None:
    from esper_core.lifecycle.blueprint_check import check_blueprint

    pm = PluginManager(list(first_party()), autoload=False)
    blueprints = pm.blueprints_for("mlp")
    names = {bp.name for bp in blueprints}
    assert {"noop", "norm", "lowrank", "residual", "residual_wide"} <= names
    assert pm.registry("blueprints").plugin_of("mlp/residual") == "blueprints.mlp"
    for bp in blueprints:
        assert bp.identity_at_birth, bp.key
        assert check_blueprint(bp, 24) == [], bp.key  # shape, estimate, identity, no BatchNorm


def test_esper_blueprints_lists_and_checks_the_mlp_seeds(invoke) -> None:  # type: ignore[no-untyped-def]
    listed = invoke("blueprints", "--topology", "mlp", "--json")
    assert listed.exit_code == 0, listed.output
    assert {b["key"] for b in json.loads(listed.output)} >= {"mlp/residual", "mlp/lowrank"}
    checked = invoke("blueprints", "check", "mlp/residual", "--channels", "12")
    assert checked.exit_code == 0, checked.output
    assert checked.output.startswith("ok   mlp/residual (plugin blueprints.mlp, 12 channels)")


def test_a_grower_with_every_slot_empty_is_the_plain_loop_bit_for_bit() -> None:
    weights = []
    for grow in (False, True):
        model = mlp()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        train, val = tabular_batches(3, 1), tabular_batches(2, 2)
        grower = None
        if grow:
            kwargs = grower_kwargs(policy="wait", optimizer=opt, max_epochs=5)
            grower = Grower(model, MLP_SLOTS, example_input=train[0][0], **kwargs)
            assert grower.model.topology == "mlp"
        for _ in range(3):
            train_one_epoch(model, opt, train)
            if grower is not None:
                grower.end_epoch(val)
        # The grown model's state also holds each slot's lifecycle (a dict, no tensor).
        state = model.state_dict().values()
        weights.append([t.clone() for t in state if torch.is_tensor(t)])
    for a, b in zip(*weights, strict=True):
        assert torch.equal(a, b)


def test_an_mlp_grows_in_a_plain_loop_from_an_identity_seed() -> None:
    model = mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    train, val = tabular_batches(3, 1), tabular_batches(2, 2)
    kwargs = grower_kwargs(overrides=EAGER, max_epochs=30, optimizer=opt)
    grower = Grower(model, MLP_SLOTS, example_input=train[0][0], **kwargs)
    probe = val[0][0]
    train_one_epoch(model, opt, train)
    grower.end_epoch(val)  # the trigger has one epoch of losses: it waits
    train_one_epoch(model, opt, train)
    model.eval()
    with torch.no_grad():
        before = model(probe)
    grower.end_epoch(val)  # the eager heuristic germinates an mlp seed now
    decision = grower.decision
    assert decision is not None and decision.action.startswith("GERMINATE body/1 mlp/")
    with torch.no_grad():
        assert torch.equal(model(probe), before)  # the identity at birth, bit for bit
    slot = grower.model.slot("body/1")
    held = {id(p) for g in opt.param_groups for p in g["params"]}
    assert slot.seed_parameters() and all(id(p) in held for p in slot.seed_parameters())
    for _ in range(4):
        train_one_epoch(model, opt, train)
        grower.end_epoch(val)
    reports = {r.slot_id: r for r in grower.reports()}
    grown = reports["body/1"]
    assert grown.blueprint is not None and grown.blueprint.startswith("mlp/")
    assert grown.stage in BLENDED_STAGES and grown.contribution is not None
    assert grown.seed_params > 0


def test_an_mlp_grown_under_cosine_with_clipping_resumes_bit_identically(tmp_path: Path) -> None:
    """The acceptance test for a user MLP in a plain loop: a per-step cosine schedule,
    clipping over model.parameters(), a seed grown by the heuristic, and a resume from
    grower.state_dict() saved mid-blend that ends exactly where the uninterrupted run does."""
    train, val = tabular_batches(3, 1), tabular_batches(2, 2)
    epochs = 6

    def build() -> tuple[nn.Module, torch.optim.Optimizer, Any, Grower]:
        model = mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs * len(train))
        kwargs = grower_kwargs(overrides=EAGER, max_epochs=30, optimizer=opt)
        return model, opt, cosine, Grower(model, MLP_SLOTS, example_input=train[0][0], **kwargs)

    def run(model: nn.Module, opt: torch.optim.Optimizer, cosine: Any, grower: Grower) -> None:
        model.train()
        for x, y in train:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            opt.step()
            cosine.step()
        grower.end_epoch(val)

    model, opt, cosine, grower = build()
    for _ in range(3):
        run(model, opt, cosine, grower)
    assert grower.model.slot("body/1").stage.name == "BLENDING"  # germinated after epoch 2
    torch.save(
        {"grower": grower.state_dict(), "scheduler": cosine.state_dict()}, tmp_path / "ckpt.pt"
    )
    for _ in range(epochs - 3):
        run(model, opt, cosine, grower)

    model2, opt2, cosine2, grower2 = build()
    saved = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    grower2.load_state_dict(saved["grower"])
    cosine2.load_state_dict(saved["scheduler"])
    for _ in range(epochs - 3):
        run(model2, opt2, cosine2, grower2)
    assert grower2.model.seed_param_count() > 0

    def tensors(m: nn.Module, o: torch.optim.Optimizer) -> list[torch.Tensor]:
        out = [t for t in m.state_dict().values() if torch.is_tensor(t)]
        return out + [v for s in o.state.values() for v in s.values() if torch.is_tensor(v)]

    for a, b in zip(tensors(model, opt), tensors(model2, opt2), strict=True):
        assert torch.equal(a, b)
