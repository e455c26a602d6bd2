"""Width growth of the tasks' transformer host (esper_operators.width_transformer):
bit-identity at birth, the ramp, the fold, prune, the optimizer's state, the cost meter,
the slots, and runs that grow d_model (resume and rollback included)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from esper_operators.host_width import HostWidthGrowth, plan_by_factor
from esper_operators.width_transformer_modules import (
    MaskedLayerNorm,
    MaskedLinear,
    WidenedEmbedding,
)
from esper_tasks.hosts.transformer import CausalSelfAttention, TransformerHost
from torch import nn

from esper_core.components.blueprint import Blueprint
from esper_core.components.policy import WidthGrowthSpec
from esper_core.config import load_config
from esper_core.env import epoch_end, host_growth
from esper_core.env.cost import CostMeter, architecture, params_forward
from esper_core.env.events import StepEvents
from esper_core.env.gym import make_env
from esper_core.env.optimizers import carry_state, embedding_parameters
from esper_core.errors import ConfigError
from esper_core.lifecycle.actions import WAIT
from esper_core.lifecycle.host_growth import WidthError
from esper_core.lifecycle.model import MorphogeneticModel
from esper_core.lifecycle.stages import Stage
from esper_core.plugins import PluginManager
from esper_core.run.api import run
from tests.plugins.esper_tasks.growth_checks import (
    OPERATORS,
    assert_resumes_identically,
    grown_with_state_carried,
)

VOCAB, BLOCK = 11, 8


def _no_blueprint(key: str) -> Blueprint:
    raise AssertionError(f"no seed grows in these tests ({key})")


def _host(d_model: int = 16, n_head: int = 2) -> TransformerHost:
    torch.manual_seed(0)
    return TransformerHost(VOCAB, BLOCK, d_model, n_layer=2, n_head=n_head, n_segments=2)


def _model(d_model: int = 16, n_head: int = 2) -> MorphogeneticModel:
    return MorphogeneticModel(_host(d_model, n_head), _no_blueprint)


X = torch.randint(0, VOCAB, (4, BLOCK), generator=torch.Generator().manual_seed(3))
Y = torch.randint(0, VOCAB, (4, BLOCK), generator=torch.Generator().manual_seed(4))


def _loss(model: nn.Module) -> torch.Tensor:
    logits = model(X)
    return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), Y.reshape(-1))


def _train(model: nn.Module, steps: int = 3) -> None:
    """A few SGD steps, so no weight is at its init (the new ones included)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(steps):
        opt.zero_grad()
        _loss(model).backward()
        opt.step()


def _grow(model: MorphogeneticModel, factor: float = 2.0, **kw: object) -> HostWidthGrowth:
    gen = torch.Generator().manual_seed(7)
    growth = HostWidthGrowth(model, plan_by_factor(model.host, factor), generator=gen, **kw)  # type: ignore[arg-type]
    model.host_growths.append(growth)
    return growth


def _heads(host: nn.Module) -> set[int]:
    return {m.n_head for m in host.modules() if isinstance(m, CausalSelfAttention)}


@pytest.mark.parametrize("factor", [2.0, 1.5])
def test_the_host_computes_the_same_bits_at_birth(factor: float) -> None:
    model = _model()
    _train(model)
    old = dict(model.host.named_parameters())
    model.zero_grad()
    before = _loss(model)
    before.backward()
    grads = {n: p.grad.clone() for n, p in old.items() if p.grad is not None}
    model.zero_grad()
    _grow(model, factor)
    after = _loss(model)
    after.backward()
    assert torch.equal(model(X), model(X)) and torch.equal(after, before)
    assert all(torch.equal(old[n].grad, g) for n, g in grads.items())  # type: ignore[arg-type]
    wide = round(16 * factor)
    assert model.host.stage_channels() == (wide,)
    assert _heads(model.host) == {wide // 8}  # heads keep their dimension, 8
    assert [s.spec.channels for s in model.iter_slots()] == [wide, wide]


def test_every_module_on_the_residual_width_is_masked() -> None:
    model = _model()
    _grow(model)
    host = model.host
    assert isinstance(host.tok_emb, WidenedEmbedding) and isinstance(host.pos_emb, WidenedEmbedding)
    assert isinstance(host.ln_f, MaskedLayerNorm) and isinstance(host.head, MaskedLinear)
    block = host.segments[1][0]
    assert isinstance(block.ln1, MaskedLayerNorm) and isinstance(block.ln2, MaskedLayerNorm)
    for linear in (block.attn.qkv, block.attn.proj, block.mlp.fc1, block.mlp.fc2):
        assert isinstance(linear, MaskedLinear)
    # The tied head reads the embedding's new columns: one parameter, not a copy.
    assert host.head.cross_weight is host.tok_emb.new.weight
    # New weights start as the host's own: normal(0.02), residual projections smaller.
    assert block.attn.qkv.out_weight.std().item() == pytest.approx(0.02, rel=0.2)
    assert block.attn.proj.out_weight.std().item() == pytest.approx(0.01, rel=0.2)
    assert not block.attn.qkv.out_bias.any() and bool((block.ln1.weight == 1).all())


def test_the_ramp_changes_the_output_continuously() -> None:
    model = _model()
    _train(model)
    before = model(X).detach()
    growth = _grow(model)

    def at(alpha: float) -> torch.Tensor:
        growth.set_alpha(alpha)
        return model(X).detach()

    assert torch.equal(at(0.0), before)
    full = (at(1.0) - before).abs().max()
    assert full > 1e-3  # the new width changes the function once it is in
    # A small step of the mask moves the output by a proportionally small amount.
    for alpha in (0.0, 0.5, 0.999):
        step = (at(alpha + 1e-3) - at(alpha)).abs().max()
        assert step < 1e-3 * full * 20


def test_zero_cross_init_starts_the_old_outputs_deaf_to_the_new_inputs() -> None:
    model = _model()
    _grow(model, cross_init="zero")
    qkv = model.host.segments[0][0].attn.qkv
    assert isinstance(qkv, MaskedLinear) and qkv.cross_weight is not None
    assert not qkv.cross_weight.any()


@pytest.mark.parametrize("factor", [2.0, 1.5])
def test_fossilizing_folds_the_masks_into_plain_modules(factor: float) -> None:
    model = _model()
    growth = _grow(model, factor, tempo=2)
    growth.tick()
    _train(model)  # at alpha 1/2: every new weight has moved off its init
    growth.tick()
    assert growth.stage == Stage.HOLDING
    expected = model(X).detach()
    folded = growth.fossilize()
    assert growth.stage == Stage.FOSSILIZED and folded
    host = model.host
    masked = (MaskedLinear, MaskedLayerNorm, WidenedEmbedding)
    assert not any(isinstance(m, masked) for m in host.modules())
    torch.testing.assert_close(model(X), expected, atol=1e-6, rtol=0)
    assert host.head.weight is host.tok_emb.weight  # tied again
    # A host built at the new width, given the folded weights, is the same function.
    wide = round(16 * factor)
    fresh = _host(wide, wide // 8)
    fresh.load_state_dict(host.state_dict())
    assert torch.equal(fresh(X), model(X))
    assert model.host_param_count() == sum(p.numel() for p in fresh.parameters())
    assert host.injection_specs() == fresh.injection_specs()


def test_pruning_restores_the_old_function_and_parameters() -> None:
    model = _model()
    original = dict(model.host.named_parameters())
    specs = model.host.injection_specs()
    growth = _grow(model)
    growth.set_alpha(0.6)
    _train(model)  # the old parameters train on alongside the new ones
    growth.set_alpha(0.0)
    at_zero = model(X).detach()
    growth.prune()
    assert growth.stage == Stage.PRUNED
    assert torch.equal(model(X), at_zero)
    assert dict(model.host.named_parameters()) == original  # the very same parameters
    assert model.host.injection_specs() == specs and _heads(model.host) == {2}
    with pytest.raises(Exception, match="illegal"):
        growth.prune()


def test_a_width_that_splits_no_heads_and_named_stages_are_refused_in_one_line() -> None:
    host = _host()
    with pytest.raises(WidthError, match="not a multiple of the head dimension 8"):
        plan_by_factor(host, 1.3)
    with pytest.raises(WidthError, match="leave widen_stages empty"):
        plan_by_factor(host, 2.0, [0])


# ------------------------------------------------------------ the optimizer


def test_old_parameters_keep_their_state_new_ones_start_fresh() -> None:
    model = _model()
    growth, opt = grown_with_state_carried(model, _loss, _grow)
    new = growth.new_parameters()
    assert new and all(p not in opt.state for p in new)
    # The embedding's new columns are an embedding table for the weight-decay rule.
    assert id(model.host.tok_emb.new.weight) in embedding_parameters(model.modules())
    opt.zero_grad()
    _loss(model).backward()
    opt.step()
    for p in new:  # fresh moments: zero, then one step of their running means
        assert p.grad is not None
        assert torch.allclose(opt.state[p]["exp_avg"], 0.1 * p.grad)
        assert int(opt.state[p]["step"]) == 1


def test_folding_assembles_the_optimizer_state_of_the_pieces() -> None:
    model = _model()
    growth = _grow(model, tempo=1)
    growth.tick()
    opt = torch.optim.AdamW(model.host.parameters(), lr=0.01)
    opt.zero_grad()
    _loss(model).backward()
    opt.step()
    qkv = model.host.segments[0][0].attn.qkv
    assert isinstance(qkv, MaskedLinear) and qkv.out_weight is not None
    old = opt.state[qkv.base.weight]["exp_avg"].clone()  # [48, 16]: q, k, v of 16 each
    cross = opt.state[qkv.cross_weight]["exp_avg"].clone()  # [48, 16]
    out = opt.state[qkv.out_weight]["exp_avg"].clone()  # [48, 32]: new q, k, v rows
    table = opt.state[model.host.tok_emb.new.weight]["exp_avg"].clone()
    folded = growth.fossilize()
    wide_opt = torch.optim.AdamW(model.host.parameters(), lr=0.01)
    carry_state(opt, wide_opt, folded)
    wide = model.host.segments[0][0].attn.qkv
    assert isinstance(wide, nn.Linear) and wide.weight.shape == (96, 32)
    state = wide_opt.state[wide.weight]["exp_avg"]
    for part in range(3):  # q, k, v: the old rows, then the new ones
        rows = slice(32 * part, 32 * part + 16)
        assert torch.equal(state[rows, :16], old[16 * part : 16 * part + 16])
        assert torch.equal(state[rows, 16:], cross[16 * part : 16 * part + 16])
        assert torch.equal(state[32 * part + 16 : 32 * part + 32], out[16 * part : 16 * part + 16])
    assert torch.equal(wide_opt.state[model.host.tok_emb.weight]["exp_avg"][:, 16:], table)
    assert all(p in wide_opt.state for p in model.host.parameters())


# ------------------------------------------------------------ costs


def test_the_cost_meter_counts_the_widened_model() -> None:
    model = _model()
    loss = nn.functional.cross_entropy

    def flops(m: MorphogeneticModel) -> int:
        meter = CostMeter(OPERATORS)
        meter.begin_epoch(m)
        return meter.batch_flops(
            m, lambda out, y: loss(out.reshape(-1, VOCAB), y.reshape(-1)), X, Y
        )

    small, params, key = flops(model), params_forward(model), architecture(model, OPERATORS)
    growth = _grow(model)
    assert architecture(model, OPERATORS) != key
    assert params_forward(model) == params + sum(p.numel() for p in growth.new_parameters())
    growing = flops(model)
    growth.set_alpha(1.0)
    growth.stage = Stage.HOLDING
    growth.fossilize()
    reference = MorphogeneticModel(_host(32, 4), _no_blueprint)
    assert flops(model) == flops(reference)
    assert params_forward(model) == params_forward(reference)
    assert 3 * small < flops(model) and growing == pytest.approx(flops(model), rel=0.1)


# ------------------------------------------------------------ in an env and a run


def _charlm(tmp_path: Path, *overrides: str) -> list[str]:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("def f(x):\n    return x + 1\n" * 120, encoding="utf-8")
    return [
        'run.task="charlm"',
        f'tasks.charlm.path="{corpus.as_posix()}"',
        "tasks.charlm.max_chars=3000",
        "tasks.charlm.block_size=16",
        "tasks.charlm.d_model=16",
        "tasks.charlm.n_head=2",
        "tasks.charlm.n_layer=2",
        "tasks.charlm.n_segments=2",
        'env.blueprints=["transformer/block"]',
        'run.policy="static"',
        "run.telemetry=[]",
        *overrides,
    ]


def test_an_env_widens_d_model_at_its_epoch_and_folds_after_the_ramp(
    pm: PluginManager, tmp_path: Path
) -> None:
    env = make_env(load_config(overrides=_charlm(tmp_path, "env.max_epochs=5")), pm)
    env.schedule_host_growth([WidthGrowthSpec(at=0.4, tempo=3)])  # epoch 2
    env.reset(0)
    small = env.host_params
    widths = []
    for _ in range(5):
        env.step(WAIT)
        growth = env.model.host_growth
        widths.append((env.model.host.stage_channels(), growth and round(growth.alpha, 3)))
        state = env.trainer.host_optimizer.state
        assert all(p in state for p in env.model.host.parameters() if p.grad is not None)
    # Born before epoch 2 at alpha 0 and ticked at once; folded at the end of epoch 3.
    assert widths == [
        ((16,), None),
        ((32,), pytest.approx(1 / 3, abs=1e-3)),
        ((32,), pytest.approx(2 / 3, abs=1e-3)),
        ((32,), None),
        ((32,), None),
    ]
    assert env.host_params > 3 * small
    trained = {id(p) for g in env.trainer.host_optimizer.param_groups for p in g["params"]}
    assert trained == {id(p) for p in env.model.host.parameters()}


def test_a_growth_is_refused_while_a_slot_holds_a_seed_and_later_seeds_are_wide(
    pm: PluginManager, tmp_path: Path
) -> None:
    env = make_env(load_config(overrides=_charlm(tmp_path, "env.max_epochs=6")), pm)
    env.reset(0)
    env.apply_action(env.space.germinate("r0c1", "transformer/block", "linear_add"))
    with pytest.raises(WidthError, match="r0c1, which holds a live seed"):
        spec = WidthGrowthSpec(at=0.0, factor=2.0, tempo=1, curve="linear", cross_init="random")
        host_growth.start(env, spec)
    assert env.model.host.stage_channels() == (16,)

    env = make_env(load_config(overrides=_charlm(tmp_path, "env.max_epochs=6")), pm)
    env.schedule_host_growth([WidthGrowthSpec(at=0.0, tempo=2)])  # folded after epoch 0
    env.reset(0)
    assert env.model.host_growth is not None
    assert not env.fits.any()  # no seed may germinate while the width grows
    env.step(WAIT)
    assert env.model.host_growth is None and env.model.host.stage_channels() == (32,)
    assert env.fits.any()
    env.apply_action(env.space.germinate("r0c0", "transformer/block", "linear_add"))
    seed = env.model.slot("r0c0").seed
    assert seed is not None and seed.state_dict()["attention.qkv.weight"].shape == (96, 32)
    env.step(WAIT)  # trains with the wide seed


def test_a_schedule_that_cannot_widen_a_transformer_is_refused_in_one_line(
    pm: PluginManager, tmp_path: Path
) -> None:
    env = make_env(load_config(overrides=_charlm(tmp_path, "env.max_epochs=10")), pm)
    with pytest.raises(ConfigError, match="leave widen_stages empty"):
        env.schedule_host_growth([WidthGrowthSpec(at=0.1, stages=(0,))])
    with pytest.raises(ConfigError, match="not a multiple of the head dimension"):
        env.schedule_host_growth([WidthGrowthSpec(at=0.1, factor=1.3)])


def test_a_widened_run_resumes_mid_ramp_identically(pm: PluginManager, tmp_path: Path) -> None:
    base = _charlm(
        tmp_path,
        "env.max_epochs=5",
        "policies.static.widen_at=0.2",  # epoch 1, folded at the end of epoch 3
        "policies.static.widen_tempo=4",
        "run.checkpoint_every=1",
    )
    reference = run(load_config(overrides=base), pm, run_dir=tmp_path / "ref", quiet=True)
    wide = [*base, "tasks.charlm.d_model=32", "tasks.charlm.n_head=4"]
    built_wide = make_env(load_config(overrides=wide), pm).model.host_param_count()
    assert reference["episodes"][0]["host_params"] == built_wide
    # Interrupted mid-ramp (after epoch 2), resumed: the same run to the last bit.
    assert_resumes_identically(pm, tmp_path, base, reference)


def test_a_rollback_prunes_a_growth_in_flight_and_restores_the_snapshot(
    pm: PluginManager, tmp_path: Path
) -> None:
    overrides = _charlm(tmp_path, "env.max_epochs=10", "governor.snapshot_every=1")
    env = make_env(load_config(overrides=overrides), pm)
    env.schedule_host_growth([WidthGrowthSpec(at=0.1, tempo=5)])  # born before epoch 1
    env.reset(0)
    small = env.host_params
    env.step(WAIT)
    assert env.model.host_growth is not None
    snapshot_epoch = env.governor.snapshot_epoch
    env.step(WAIT)
    assert env.governor.snapshot_epoch == snapshot_epoch  # none taken mid-growth
    epoch_end.rollback(env, "test", 1.0, StepEvents(env=0, episode=0, epoch=env.epoch))
    assert env.model.host_growth is None
    assert env.model.host.stage_channels() == (16,) and _heads(env.model.host) == {2}
    params = {id(p) for g in env.trainer.host_optimizer.param_groups for p in g["params"]}
    assert params == {id(p) for p in env.model.host.parameters()}
    assert env.host_params == small
    env.step(WAIT)  # trains on at the old width


def test_the_growth_event_names_d_model(pm: PluginManager, tmp_path: Path) -> None:
    overrides = _charlm(
        tmp_path,
        "env.max_epochs=3",
        "policies.static.widen_at=0.34",
        "policies.static.widen_tempo=1",
        'run.telemetry=["jsonl"]',
    )
    run(load_config(overrides=overrides), pm, run_dir=tmp_path / "r", quiet=True)
    events = [json.loads(line) for line in (tmp_path / "r" / "events.jsonl").open()]
    (started,) = [e for e in events if e["kind"] == "host_growth_started"]
    assert started["plan"] == "d_model 16 -> 32"
    assert (started["widths_before"], started["widths_after"]) == ({"d_model": 16}, {"d_model": 32})
