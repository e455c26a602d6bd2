"""Copies between host and device outside the training step: validation builds its
counterfactual masks on the device, governor snapshots copy without blocking."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from esper_core.env.pending import fetch
from esper_core.lifecycle.actions import WAIT
from tests.fakes import drive_to, make_env


def two_blended_seeds() -> Any:
    env = make_env("env.max_epochs=30")
    drive_to(env, "r0c0", "BLENDING")
    drive_to(env, "r0c1", "BLENDING", blueprint="res_random")
    return env


def test_an_epoch_validation_copies_nothing_from_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import esper_core.env.env as env_module

    env = two_blended_seeds()
    copies: list[Any] = []
    validating = [False]
    original_tensor, original_validate = torch.tensor, env_module.validate_pending

    def tensor(*args: Any, **kwargs: Any) -> torch.Tensor:
        if validating[0]:
            copies.append(args)
        return original_tensor(*args, **kwargs)

    def validate_pending(*args: Any, **kwargs: Any) -> Any:
        validating[0] = True
        try:
            return original_validate(*args, **kwargs)
        finally:
            validating[0] = False

    monkeypatch.setattr(torch, "tensor", tensor)
    monkeypatch.setattr(env_module, "validate_pending", validate_pending)
    for _ in range(2):
        result = env.step(WAIT)
        assert set(env.last_eval.contributions) == {"r0c0", "r0c1"} and not result.rolled_back
    assert copies == []  # torch.tensor(list, device=...) is a host -> device copy


def test_validation_builds_its_masks_once_per_batch_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from esper_core.env.evaluation import VariantMasks, validate_pending

    env = two_blended_seeds()
    made: list[Any] = []
    original = torch.tensor

    def tensor(*args: Any, **kwargs: Any) -> torch.Tensor:
        made.append(args[0] if args else kwargs.get("data"))
        return original(*args, **kwargs)

    monkeypatch.setattr(torch, "tensor", tensor)
    masks = VariantMasks()
    batches = list(env._eval_batches(env.data.val))
    assert len(batches) >= 2  # several batches, so a per-batch copy would show
    first = fetch(validate_pending(env.model, env.task, batches, masks=masks))[0]
    built = masks.get(
        ["r0c0", "r0c1"], [set(), {"r0c0"}, {"r0c1"}, {"r0c0", "r0c1"}], 64, env.device
    )
    second = fetch(validate_pending(env.model, env.task, batches, masks=masks))[0]
    assert made == []  # torch.tensor(list, device=...) is a host -> device copy
    assert first == second and set(first.contributions) == {"r0c0", "r0c1"}
    # Built once per batch size and reused by the next epoch's validation.
    again = masks.get(
        ["r0c0", "r0c1"], [set(), {"r0c0"}, {"r0c1"}, {"r0c0", "r0c1"}], 64, env.device
    )
    assert all(again[k] is built[k] for k in built)
    assert built["r0c0"].tolist() == [1.0] * 64 + [0.0] * 64 + [1.0] * 64 + [0.0] * 64


def test_the_variant_masks_switch_each_seed_off_in_its_variants() -> None:
    from esper_core.env.evaluation import VariantMasks

    masks = VariantMasks().get(
        ["a", "b"], [set(), {"a"}, {"b"}, {"a", "b"}], 2, torch.device("cpu")
    )
    assert masks["a"].tolist() == [1, 1, 0, 0, 1, 1, 0, 0]
    assert masks["b"].tolist() == [1, 1, 1, 1, 0, 0, 0, 0]


def test_governor_snapshots_are_non_blocking_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    env = make_env("governor.snapshot_every=1")
    drive_to(env, "r0c0", "FOSSILIZED")
    copies: list[bool] = []
    blocking: list[Any] = []
    original_copy, original_to = torch.Tensor.copy_, torch.Tensor.to

    def copy_(self: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> Any:
        copies.append(non_blocking)
        return original_copy(self, src, non_blocking)

    def to(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if "cpu" in [str(a) for a in (*args, kwargs.get("device"))]:
            blocking.append(args)
        return original_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "copy_", copy_)
    monkeypatch.setattr(torch.Tensor, "to", to)
    env.governor.take_snapshot(env.model, env.epoch)
    monkeypatch.undo()
    n_tensors = len(env.model.host.state_dict()) + sum(
        isinstance(v, torch.Tensor) for v in env.model.slot("r0c0").state_dict().values()
    )
    assert blocking == []
    assert copies == [True] * n_tensors
    # The snapshot still restores: a rollback brings the snapshot's host back.
    snapshot = {k: v.clone() for k, v in env.governor.snapshot_state["host"].items()}
    with torch.no_grad():
        for p in env.model.host.parameters():
            p.add_(1.0)
    env.governor.rollback(env.model)
    assert all(torch.equal(v, snapshot[k]) for k, v in env.model.host.state_dict().items())


def test_a_host_copy_is_a_copy_not_a_view() -> None:
    from esper_core.lifecycle.host_copy import HostCopy

    source = {"w": torch.ones(3), "nested": {"b": torch.zeros(2), "n": 4}}
    copy = HostCopy(source)
    source["w"].add_(1.0)
    got = copy.get()
    assert torch.equal(got["w"], torch.ones(3)) and got["nested"]["n"] == 4


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_snapshots_land_in_pinned_memory_behind_one_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = {f"t{i}": torch.randn(1000, device="cuda") for i in range(20)}
    waits: list[Any] = []
    original = torch.cuda.Event.synchronize

    def synchronize(self: Any) -> None:
        waits.append(self)
        original(self)

    monkeypatch.setattr(torch.cuda.Event, "synchronize", synchronize)
    from esper_core.lifecycle.host_copy import HostCopy

    copy = HostCopy(source)
    got = copy.get()
    copy.get()
    assert len(waits) == 1
    assert all(t.is_pinned() and t.device.type == "cpu" for t in got.values())
    assert all(torch.equal(got[k], v.cpu()) for k, v in source.items())
