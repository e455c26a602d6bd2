"""MorphogeneticModel: bit-identity with every slot empty, checkpoints, slot selection."""

from __future__ import annotations

import copy
import io

import pytest
import torch
from torch import nn

from esper_core.converter import converter
from esper_core.errors import ConfigError
from esper_core.lifecycle.model import MorphogeneticModel
from esper_core.lifecycle.slot_state import SlotState
from esper_core.lifecycle.stages import Stage
from tests.core.lifecycle_helpers import FAST, LIN_RES, drive_to, resolve_any
from tests.fakes import RES, RES_RANDOM, TinyCNNHost


def _task_host(kind: str) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    if kind == "tiny_cnn":
        return TinyCNNHost(width=4, blocks=3), torch.randn(5, 1, 4, 4), torch.randint(0, 4, (5,))
    if kind == "cnn":
        hosts = pytest.importorskip(
            "esper_tasks.hosts.cnn", reason="the esper-tasks plugin is not installed"
        )
        host = hosts.CNNHost(
            in_channels=1, num_classes=10, base_channels=8, n_blocks=3, convs_per_block=2
        )
        return host, torch.randn(5, 1, 8, 8), torch.randint(0, 10, (5,))
    hosts = pytest.importorskip(
        "esper_tasks.hosts.transformer", reason="the esper-tasks plugin is not installed"
    )
    host = hosts.TransformerHost(
        vocab_size=17, block_size=8, d_model=16, n_layer=4, n_head=2, n_segments=2
    )
    return host, torch.randint(0, 17, (3, 8)), torch.randint(0, 17, (3, 8))


def _loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


@pytest.mark.parametrize("kind", ["tiny_cnn", "cnn", "transformer"])
def test_empty_slots_are_bit_identical_to_the_bare_host(kind: str) -> None:
    host, x, y = _task_host(kind)
    bare = copy.deepcopy(host)
    model = MorphogeneticModel(host, resolve_any, FAST)
    assert len(model.slot_ids) == host.num_segments()
    for train in (True, False):
        model.train(train)
        bare.train(train)
        model.zero_grad(set_to_none=True)
        bare.zero_grad(set_to_none=True)
        out, ref = model(x), bare(x)
        assert torch.equal(out, ref)
        _loss(out, y).backward()
        _loss(ref, y).backward()
        named = dict(bare.named_parameters())
        for name, p in model.host.named_parameters():
            assert p.grad is not None and torch.equal(p.grad, named[name].grad), name
    for name, buf in bare.named_buffers():
        assert torch.equal(dict(model.host.named_buffers())[name], buf), name


def test_empty_slots_stay_identical_after_a_prune_cooldown() -> None:
    host, x, _ = _task_host("tiny_cnn")
    bare = copy.deepcopy(host)
    model = MorphogeneticModel(host, resolve_any, FAST)
    slot = drive_to(model.slot("r0c1"), Stage.HOLDING)
    slot.prune()
    model.eval()
    bare.eval()
    assert torch.equal(model(x), bare(x))  # a pruned slot no longer calls its seed
    while slot.stage != Stage.DORMANT:
        slot.end_epoch()
    assert torch.equal(model(x), bare(x))


def test_non_host_is_refused() -> None:
    with pytest.raises(TypeError, match="HostProtocol"):
        MorphogeneticModel(nn.Linear(2, 2), resolve_any)


def test_slot_selection() -> None:
    model = MorphogeneticModel(TinyCNNHost(blocks=3), resolve_any, FAST, slots=["r0c2", "r0c0"])
    assert model.slot_ids == ["r0c0", "r0c2"]  # host order, not request order
    with pytest.raises(
        ConfigError, match=r"env\.slots: unknown slot id\(s\) r9c9; this host has r0c0, r0c1, r0c2"
    ):
        MorphogeneticModel(TinyCNNHost(blocks=3), resolve_any, FAST, slots=["r0c0", "r9c9"])
    with pytest.raises(ConfigError, match=r"env\.slots: slot ids repeat"):
        MorphogeneticModel(TinyCNNHost(blocks=3), resolve_any, FAST, slots=["r0c0", "r0c0"])


def test_a_seed_in_an_unselected_position_does_not_exist() -> None:
    host = TinyCNNHost(blocks=2)
    bare = copy.deepcopy(host)
    model = MorphogeneticModel(host, resolve_any, FAST, slots=["r0c1"])
    drive_to(model.slot("r0c1"), Stage.HOLDING, blueprint=RES)
    x = torch.randn(3, 1, 4, 4)
    model.eval()
    bare.eval()
    assert torch.equal(model(x), bare(x))  # RES is the identity at birth


# ---------------------------------------------------------------- checkpoints

STAGED = {
    "r0c0": dict(stage=Stage.GERMINATED, style="linear_multiply"),
    "r0c1": dict(stage=Stage.TRAINING, style="sigmoid_add"),
    "r0c2": dict(stage=Stage.BLENDING, style="gated"),
    "r0c3": dict(stage=Stage.HOLDING, style="linear_add"),
    "r0c4": dict(stage=Stage.FOSSILIZED, style="cosine_add"),
    "r0c5": dict(stage=Stage.EMBARGOED, style="linear_add"),
}


def staged_model(seed: int) -> MorphogeneticModel:
    torch.manual_seed(seed)
    model = MorphogeneticModel(TinyCNNHost(width=2, blocks=6), resolve_any, FAST)
    torch.manual_seed(100 + seed)
    for slot_id, spec in STAGED.items():
        slot = drive_to(model.slot(slot_id), spec["stage"], style=spec["style"], tempo=5)  # type: ignore[arg-type]
        if slot.stage == Stage.BLENDING:
            slot.end_epoch()  # mid-ramp: alpha 0.4 of 5 ticks
            slot.end_epoch()
    # Make every weight (BatchNorm statistics included) differ from a fresh model's.
    model.train()
    for _ in range(2):
        model(torch.randn(8, 1, 4, 4)).sum().backward()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    return model


def _roundtrip(model: MorphogeneticModel, fresh: MorphogeneticModel) -> MorphogeneticModel:
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    fresh.load_state_dict(state)
    return fresh


def test_checkpoint_restores_seeds_in_every_stage_into_a_fresh_model() -> None:
    model = staged_model(seed=0)
    blending = model.slot("r0c2")
    assert blending.state.alpha == pytest.approx(0.6) and not blending.state.alpha_schedule.done
    fresh = MorphogeneticModel(TinyCNNHost(width=2, blocks=6), resolve_any, FAST)
    versions = {s.slot_id: s.param_version for s in fresh.iter_slots()}
    restored = _roundtrip(model, fresh)

    for slot in model.iter_slots():
        other = restored.slot(slot.slot_id)
        assert other.state == slot.state, slot.slot_id
        assert other.state.stage == STAGED[slot.slot_id]["stage"]
        assert isinstance(other.state.stage, Stage)
        assert other.state.alpha_schedule == slot.state.alpha_schedule
        assert float(other.alpha_tensor) == float(slot.alpha_tensor)
        assert other.has_seed == slot.has_seed and (other.gate is None) == (slot.gate is None)
        assert other.param_version != versions[slot.slot_id]  # optimizers must rebuild
        for p, q in zip(slot.seed_parameters(), other.seed_parameters(), strict=True):
            assert torch.equal(p, q)
    assert restored.seed_param_count() == model.seed_param_count()

    x = torch.randn(6, 1, 4, 4)
    y = torch.randint(0, 4, (6,))
    for train in (False, True):
        model.train(train)
        restored.train(train)
        model.zero_grad(set_to_none=True)
        restored.zero_grad(set_to_none=True)
        out, again = model(x), restored(x)
        assert torch.equal(out, again)
        _loss(out, y).backward()
        _loss(again, y).backward()
        for (name, p), q in zip(model.named_parameters(), restored.parameters(), strict=True):
            assert (p.grad is None) == (q.grad is None), name
            if p.grad is not None:
                assert torch.equal(p.grad, q.grad), name

    # The schedules carry on identically after the restore.
    for _ in range(3):
        for a, b in zip(model.iter_slots(), restored.iter_slots()):
            a.end_epoch()
            b.end_epoch()
            assert a.state == b.state


def test_checkpoint_empties_a_slot_that_was_empty_when_saved() -> None:
    source = MorphogeneticModel(TinyCNNHost(blocks=2), resolve_any, FAST)
    target = MorphogeneticModel(TinyCNNHost(blocks=2), resolve_any, FAST)
    drive_to(target.slot("r0c0"), Stage.HOLDING, style="gated")
    restored = _roundtrip(source, target)
    slot = restored.slot("r0c0")
    assert slot.stage == Stage.DORMANT and slot.seed is None and slot.gate is None
    assert slot.seed_parameters() == []


def test_checkpoint_extra_state_is_plain_data() -> None:
    model = staged_model(seed=1)
    extra = model.slot("r0c2").get_extra_state()

    def plain(value: object) -> bool:
        if isinstance(value, dict):
            return all(type(k) is str and plain(v) for k, v in value.items())
        if isinstance(value, list | tuple):
            return all(plain(v) for v in value)
        return value is None or type(value) in (str, int, float, bool)

    assert plain(extra), extra
    assert converter.structure(extra["state"], SlotState) == model.slot("r0c2").state


def test_transformer_model_checkpoint_roundtrip() -> None:
    hosts = pytest.importorskip(
        "esper_tasks.hosts.transformer", reason="the esper-tasks plugin is not installed"
    )

    def build() -> MorphogeneticModel:
        host = hosts.TransformerHost(
            vocab_size=11, block_size=6, d_model=8, n_layer=2, n_head=2, n_segments=2
        )
        return MorphogeneticModel(host, resolve_any, FAST)

    torch.manual_seed(0)
    model = build()
    drive_to(model.slot("r0c0"), Stage.HOLDING, blueprint=LIN_RES, style="gated")
    drive_to(
        model.slot("r0c1"), Stage.BLENDING, blueprint=LIN_RES, style="linear_multiply", tempo=3
    )
    torch.manual_seed(1)
    restored = _roundtrip(model, build())
    x = torch.randint(0, 11, (2, 6))
    assert torch.equal(model(x), restored(x))
    assert [s.state for s in model.iter_slots()] == [s.state for s in restored.iter_slots()]


# ---------------------------------------------------------------- bookkeeping


def test_parameter_groups_and_counts() -> None:
    model = staged_model(seed=2)
    host_ids = {id(p) for p in model.host_parameters()}
    seed_ids = {id(p) for p in model.seed_parameters()}
    assert not host_ids & seed_ids
    assert host_ids | seed_ids == {id(p) for p in model.parameters()}
    assert model.host_param_count() == sum(p.numel() for p in model.host.parameters())
    assert model.seed_param_count() == sum(p.numel() for p in model.seed_parameters())
    assert model.fossil_param_count() == model.slot("r0c4").seed_param_count() > 0
    assert model.live_seed_count() == 4  # GERMINATED, TRAINING, BLENDING, HOLDING
    assert [r.slot_id for r in model.reports()] == model.slot_ids
    assert model.seed_parameters("r0c5") == []
    assert model.topology == "cnn"


def test_model_moves_seeds_with_dtype() -> None:
    model = MorphogeneticModel(TinyCNNHost(blocks=2), resolve_any, FAST).double()
    drive_to(model.slot("r0c0"), Stage.HOLDING, blueprint=RES_RANDOM, style="gated")
    out = model(torch.randn(2, 1, 4, 4, dtype=torch.float64))
    assert out.dtype == torch.float64
