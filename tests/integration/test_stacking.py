"""Stacking births (lifecycle.stack_blocks, G_stack): a transformer/block seed that starts
as a copy of the host block before its slot, through the unchanged lifecycle."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from esper_blueprints.transformer_modules import BlockSeed
from esper_tasks.hosts.transformer import Block, TransformerHost

from esper_core.config import load_config
from esper_core.env.gym import make_env
from esper_core.plugins import PluginManager
from esper_core.run.api import run
from tests.plugins.esper_tasks.growth_checks import assert_resumes_identically


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
        "lifecycle.stack_blocks=true",
        "run.telemetry=[]",
        *overrides,
    ]


def test_a_block_seed_that_inherits_computes_what_the_block_does() -> None:
    torch.manual_seed(0)
    block = Block(16, n_head=2)
    for p in block.parameters():  # not the zero-initialised projections of a fresh seed
        torch.nn.init.normal_(p, std=0.3)
    seed = BlockSeed(16)
    x = torch.randn(3, 7, 16)
    assert torch.equal(seed(x), x)  # the identity at birth
    with torch.no_grad():
        seed.inherit(block)
    assert torch.equal(seed(x), block(x))


def test_inheriting_from_a_block_of_another_shape_names_what_is_missing() -> None:
    with pytest.raises(ValueError, match="GPT-style block"):
        BlockSeed(16).inherit(torch.nn.Linear(16, 16))


def test_a_stacking_birth_copies_the_block_before_its_slot_and_ramps_up_from_alpha_0(
    pm: PluginManager, tmp_path: Path
) -> None:
    env = make_env(load_config(overrides=_charlm(tmp_path, "env.max_epochs=4")), pm)
    env.reset(0)
    host = env.model.host
    assert isinstance(host, TransformerHost)
    x = next(iter(env.train_batches()))[0]
    before = env.model(x).detach()
    env.apply_action(env.space.germinate("r0c0", "transformer/block", "linear_add"))
    slot = env.model.slot("r0c0")
    source = host.block_before("r0c0")
    assert source is host.segments[0][-1]
    seed_state, block_state = slot.seed.state_dict(), source.state_dict()
    assert torch.equal(seed_state["attention.qkv.weight"], block_state["attn.qkv.weight"])
    assert torch.equal(seed_state["mlp.fc2.weight"], block_state["mlp.fc2.weight"])
    # Blending from germination (isolation none), the ramp rises from alpha 0 in `tempo`
    # ticks: the first epoch trains at the first tick, a fifth of the copied block.
    assert slot.stage.value == "BLENDING" and slot.state.alpha == pytest.approx(0.2)
    assert not torch.equal(env.model(x).detach(), before)


def test_without_stacking_the_block_is_born_as_the_identity(
    pm: PluginManager, tmp_path: Path
) -> None:
    overrides = _charlm(tmp_path, "env.max_epochs=4", "lifecycle.stack_blocks=false")
    env = make_env(load_config(overrides=overrides), pm)
    env.reset(0)
    env.apply_action(env.space.germinate("r0c0", "transformer/block", "linear_add"))
    seed = env.model.slot("r0c0").seed
    assert not seed.state_dict()["mlp.fc2.weight"].any()


def test_a_stacked_run_resumes_identically(pm: PluginManager, tmp_path: Path) -> None:
    base = _charlm(tmp_path, "run.policy=random", "env.max_epochs=6", "run.checkpoint_every=1")
    reference = run(load_config(overrides=base), pm, run_dir=tmp_path / "ref", quiet=True)
    assert reference["episodes"][0]["seeds_germinated"] > 0
    assert_resumes_identically(pm, tmp_path, base, reference, at_epoch=3)


def test_a_stacked_seed_is_isolated_like_any_seed_that_is_not_the_identity(
    pm: PluginManager, tmp_path: Path
) -> None:
    overrides = _charlm(tmp_path, "env.max_epochs=4", "lifecycle.isolation_non_identity=full")
    env = make_env(load_config(overrides=overrides), pm)
    env.reset(0)
    env.apply_action(env.space.germinate("r0c0", "transformer/block", "linear_add"))
    assert env.model.slot("r0c0").stage.value == "GERMINATED"  # isolated TRAINING first


# charlm ``small``'s shape: 2 heads at d_model 64, where num_heads(64) is 4, so a seed
# rebuilt from its blueprint alone would attend with the wrong head count.
WIDE = ("tasks.charlm.d_model=64", "tasks.charlm.n_head=2")


def _stacked_env(pm: PluginManager, tmp_path: Path, *overrides: str) -> Any:
    charlm = [o for o in _charlm(tmp_path, "env.max_epochs=4", *overrides) if "d_model" not in o]
    env = make_env(load_config(overrides=[*charlm, *WIDE]), pm)
    env.reset(0)
    env.apply_action(env.space.germinate("r0c0", "transformer/block", "linear_add"))
    return env


def test_a_block_seed_keeps_its_inherited_head_count_through_a_state_dict() -> None:
    torch.manual_seed(0)
    block = Block(64, n_head=2)
    for p in block.parameters():
        torch.nn.init.normal_(p, std=0.3)
    seed = BlockSeed(64)
    assert seed.attention.n_head == 4
    with torch.no_grad():
        seed.inherit(block)
    rebuilt = BlockSeed(64)
    rebuilt.load_state_dict(seed.state_dict())
    x = torch.randn(3, 7, 64)
    assert rebuilt.attention.n_head == 2
    assert torch.equal(rebuilt(x), block(x))


def test_a_stacked_seed_resumes_and_rolls_back_with_its_hosts_head_count(
    pm: PluginManager, tmp_path: Path
) -> None:
    env = _stacked_env(pm, tmp_path)
    slot = env.model.slot("r0c0")
    assert slot.seed.attention.n_head == 2
    x = next(iter(env.train_batches()))[0]
    with torch.no_grad():
        expected = env.model(x)
    resumed = make_env(env.config, pm)
    resumed.reset(0)
    resumed.model.load_state_dict(env.model.state_dict())
    assert resumed.model.slot("r0c0").seed.attention.n_head == 2
    with torch.no_grad():
        assert torch.equal(resumed.model(x), expected)
    # A governor snapshot of the slot (as after a fossilize) restores it the same way.
    fresh = make_env(env.config, pm)
    fresh.reset(0)
    fresh.model.slot("r0c0").load_state_dict(slot.state_dict())
    assert fresh.model.slot("r0c0").seed.attention.n_head == 2
