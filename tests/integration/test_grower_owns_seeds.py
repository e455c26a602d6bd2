"""The grown model is the user's module: the seeds live under it
(``model.esper_slots``), so everything that walks ``model.parameters()``, its
``state_dict()``, ``.to()``, ``train()``/``eval()``, ``torch.save(model)`` and
``copy.deepcopy(model)`` covers them, and the grower's own paths (host parameters, the
governor's snapshot, resume) still see the host alone."""

from __future__ import annotations

import copy
import io
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from esper_core.errors import CheckpointError, HostError
from esper_core.grow.grower import Grower
from esper_core.grow.module_host import SLOTS_ATTRIBUTE
from esper_core.lifecycle.stages import Stage
from tests.integration.own_model_helpers import grower_kwargs
from tests.integration.test_grower_schedulers import SLOTS, TinyNet, _batches

X = _batches(0)[0][0]
BIRTH = ['policies.static.seeds=["conv_small@block2"]']


def _grower(model: nn.Module, opt: torch.optim.Optimizer | None, **extra: Any) -> Grower:
    kwargs = grower_kwargs(optimizer=opt, max_epochs=4, **extra)
    kwargs.setdefault("policy", "wait")
    return Grower(model, SLOTS, example_input=X, **kwargs)


def _fossil(seed: int = 0) -> tuple[TinyNet, torch.optim.Optimizer, Grower]:
    """A model whose block2 holds a FOSSILIZED seed (alpha 1) that changes its output."""
    torch.manual_seed(seed)
    model = TinyNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    grower = _grower(model, opt, policy="static", overrides=BIRTH)
    slot = grower.model.slot("block2")
    assert slot.stage == Stage.FOSSILIZED
    with torch.no_grad():
        for p in slot.seed_parameters():
            p.normal_(0.0, 0.5)  # born the identity; now it computes something
    return model, opt, grower


def _seed_ids(grower: Grower) -> set[int]:
    return {id(p) for p in grower.model.seed_parameters()}


def _bare_output(model: TinyNet, grower: Grower) -> torch.Tensor:
    with grower.model.host_alone(), torch.no_grad():
        return model.eval()(X)


def test_model_parameters_hold_a_seed_from_germination_to_prune() -> None:
    torch.manual_seed(0)
    model = TinyNet()
    bare = {id(p) for p in model.parameters()}
    grower = _grower(model, torch.optim.SGD(model.parameters(), lr=0.05))
    slot = grower.model.slot("block2")
    slot.germinate("s1", grower.env.blueprints["cnn/conv_small"], "linear_add")
    seeds = _seed_ids(grower)
    names = {id(p): name for name, p in model.named_parameters()}
    assert seeds and seeds <= set(names)
    assert all(names[i].startswith(f"{SLOTS_ATTRIBUTE}.block2.") for i in seeds)
    assert grower.model.host_param_count() == sum(p.numel() for p in TinyNet().parameters())
    slot.prune()
    assert {id(p) for p in model.parameters()} == bare


def test_clip_grad_norm_over_model_parameters_clips_the_seeds() -> None:
    model, _, grower = _fossil()
    model.train()
    nn.functional.cross_entropy(model(X), _batches(0)[0][1]).backward()
    seeds = grower.model.seed_parameters()
    every = [p for p in grower.model.parameters() if p.grad is not None]
    expected = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in every]))
    seed_norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in seeds]))
    total = nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
    torch.testing.assert_close(total, expected)
    clipped = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in seeds]))
    torch.testing.assert_close(clipped, seed_norm * 1e-3 / (expected + 1e-6))


def test_model_state_dict_holds_the_seeds_and_loads_into_a_fresh_grown_model() -> None:
    model, _, grower = _fossil()
    state = model.state_dict()
    assert f"{SLOTS_ATTRIBUTE}.block2._extra_state" in state
    seed_keys = [k for k in state if k.startswith(f"{SLOTS_ATTRIBUTE}.block2.seed.")]
    assert seed_keys
    expected = model.eval()(X)
    assert not torch.equal(expected, _bare_output(model, grower))

    torch.manual_seed(1)  # other host weights: all of them must come from the state
    fresh = TinyNet()
    _grower(fresh, torch.optim.SGD(fresh.parameters(), lr=0.05))  # empty slots
    fresh.load_state_dict(state)  # the slot's lifecycle state rebuilds the seed first
    torch.testing.assert_close(fresh.eval()(X), expected, rtol=0, atol=0)


def test_torch_save_of_the_model_keeps_and_runs_the_seeds() -> None:
    model, _, grower = _fossil()
    expected = model.eval()(X)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert isinstance(getattr(loaded, SLOTS_ATTRIBUTE), nn.ModuleDict)
    torch.testing.assert_close(loaded.eval()(X), expected, rtol=0, atol=0)
    assert not torch.equal(expected, _bare_output(model, grower))
    # Without the env that built it, a loaded slot cannot build a seed from a state.
    with pytest.raises(CheckpointError, match="loaded from a pickle") as info:
        loaded.load_state_dict(model.state_dict())
    assert "\n" not in str(info.value)


def test_to_moves_the_seeds_with_the_model() -> None:
    model, _, grower = _fossil()
    expected = model.eval()(X).double()
    model.to(torch.float64)
    assert {p.dtype for p in grower.model.seed_parameters()} == {torch.float64}
    torch.testing.assert_close(model(X.double()), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_to_cuda_moves_the_seeds_with_the_model() -> None:
    model, _, grower = _fossil()
    expected = model.eval()(X)
    model.to("cuda")
    assert {p.device.type for p in grower.model.seed_parameters()} == {"cuda"}
    torch.testing.assert_close(model(X.cuda()).cpu(), expected, rtol=1e-4, atol=1e-5)


def test_a_deepcopy_is_an_ema_copy_running_its_own_seeds() -> None:
    model, _, grower = _fossil()
    model.eval()
    expected = model(X)
    ema = copy.deepcopy(model).eval()
    torch.testing.assert_close(ema(X), expected, rtol=0, atol=0)
    copied = getattr(ema, SLOTS_ATTRIBUTE)["block2"].seed_parameters()
    assert not _seed_ids(grower) & {id(p) for p in copied}
    with torch.no_grad():
        for p in copied:
            p.mul_(0.5)  # an EMA step on the copy's seed
    assert not torch.equal(ema(X), expected)
    torch.testing.assert_close(model(X), expected, rtol=0, atol=0)
    ema.load_state_dict(model.state_dict())  # the usual EMA reset
    torch.testing.assert_close(ema(X), expected, rtol=0, atol=0)


def test_train_and_eval_reach_the_seeds() -> None:
    model, _, grower = _fossil()
    seed = grower.model.slot("block2").seed
    assert seed is not None
    model.eval()
    assert not any(m.training for m in seed.modules())
    model.train()
    assert all(m.training for m in seed.modules())


def test_an_optimizer_built_after_the_grower_holds_each_seed_once() -> None:
    torch.manual_seed(0)
    model = TinyNet()
    grower = _grower(model, None, policy="static", overrides=BIRTH)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)  # the birth seed is in there
    grower.attach_optimizer(opt)
    held = [id(p) for g in opt.param_groups for p in g["params"]]
    assert len(held) == len(set(held))
    assert _seed_ids(grower) <= set(held)
    grower.end_epoch(_batches(99))  # the grower's own sync keeps it so
    held = [id(p) for g in opt.param_groups for p in g["params"]]
    assert len(held) == len(set(held))


def test_the_governor_snapshot_and_host_parameters_are_the_hosts_alone() -> None:
    model, _, grower = _fossil()
    snapshot = grower.env.governor.snapshot_state
    assert snapshot is not None
    assert not any(SLOTS_ATTRIBUTE in key for key in snapshot["host"])
    assert set(snapshot["host"]) == {f"module.{k}" for k in TinyNet().state_dict()}
    assert not _seed_ids(grower) & {id(p) for p in grower.model.host_parameters()}
    assert hasattr(model, SLOTS_ATTRIBUTE)  # given back after the snapshot
    with torch.no_grad():
        model.head.weight.add_(1.0)
    grower.env.governor.rollback(grower.model)  # loads the host's own state, strictly
    torch.testing.assert_close(model.head.weight, snapshot["host"]["module.head.weight"])


def test_close_gives_the_module_back_as_it_was() -> None:
    model, _, grower = _fossil()
    bare = set(TinyNet().state_dict())
    grower.close()
    assert not hasattr(model, SLOTS_ATTRIBUTE)
    assert set(model.state_dict()) == bare
    assert any(k.startswith("slots.block2.seed.") for k in grower.model.state_dict())


def test_a_copy_of_a_grown_model_is_refused_by_a_new_grower_in_one_line() -> None:
    model, _, _ = _fossil()
    with pytest.raises(HostError) as info:
        _grower(copy.deepcopy(model), None)
    message = str(info.value)
    assert "\n" not in message and "already holds grown seeds" in message


def test_a_model_with_its_own_esper_slots_attribute_is_refused() -> None:
    model = TinyNet()
    model.esper_slots = nn.Linear(2, 2)
    with pytest.raises(HostError, match="rename that attribute"):
        _grower(model, None)


def test_a_state_with_slots_under_the_grown_model_still_loads() -> None:
    """``grower.model`` states of earlier versions held the slots as ``slots.*``."""
    model, _, grower = _fossil()
    prefix = f"host.module.{SLOTS_ATTRIBUTE}."
    state = grower.model.state_dict()
    assert any(k.startswith(prefix) for k in state)
    old = {
        (k.replace(prefix, "slots.", 1) if k.startswith(prefix) else k): v for k, v in state.items()
    }
    expected = model.eval()(X)
    torch.manual_seed(1)
    fresh = TinyNet()
    fresh_grower = _grower(fresh, None)
    fresh_grower.model.load_state_dict(old)
    torch.testing.assert_close(fresh.eval()(X), expected, rtol=0, atol=0)


def test_a_grower_that_fails_to_start_leaves_the_module_as_given(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = TinyNet()
    before = model.eval()(X)
    with pytest.raises(CheckpointError):  # after the slots were put on the module
        _grower(model, None, policy=f"ppo:{tmp_path / 'none.pt'}")
    assert not hasattr(model, SLOTS_ATTRIBUTE)
    torch.testing.assert_close(model(X), before, rtol=0, atol=0)
    _grower(model, None).close()  # a retry grows it


def test_a_sequential_model_passes_through_its_slots_entry() -> None:
    """An nn.Sequential calls every child: the slots' container is its last, an identity."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    x = torch.randn(4, 8)
    before = model(x)
    grower = Grower(model, ["1"], example_input=x, **grower_kwargs(policy="wait", max_epochs=2))
    assert model[-1] is getattr(model, SLOTS_ATTRIBUTE)
    torch.testing.assert_close(model(x), before, rtol=0, atol=0)
    slot = grower.model.slot("1")
    slot.germinate("s1", grower.env.blueprints["mlp/residual"], "linear_add")
    with torch.no_grad():
        for p in slot.seed_parameters():
            p.normal_(0.0, 0.5)
    assert _seed_ids(grower) <= {id(p) for p in model.parameters()}
    assert not torch.equal(model(x), before)  # the seed runs, from the hook on model[1]
