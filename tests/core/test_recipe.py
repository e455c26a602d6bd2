"""Training recipes: the schedule, weight decay by parameter kind, one recipe for host
and seeds, one gradient-norm budget, and the recipe a run records."""

from __future__ import annotations

import itertools
import math

import attrs
import pytest
import torch
from torch import nn

from esper_core.config import load_config
from esper_core.env.gradients import clip_gradients
from esper_core.env.optimizers import decays, embedding_parameters, make_optimizer, param_groups
from esper_core.errors import ConfigError
from esper_core.lifecycle.actions import WAIT
from esper_core.plugins import PluginManager
from esper_core.recipe import (
    CNN_RECIPE,
    LEGACY_SGD,
    TRANSFORMER_RECIPE,
    Recipe,
    family_recipe,
    lr_factor,
    recipe_overrides,
    resolve_recipe,
    task_recipe,
)
from esper_core.run.resolve import resolve
from tests.fakes import drive_to, make_env

COSINE = Recipe(optimizer="adamw", lr=1.0, schedule="cosine", warmup=0.1, min_lr=0.1)


# ---------------------------------------------------------------- the schedule


def test_warm_up_rises_linearly_to_the_peak() -> None:
    factors = [lr_factor(COSINE, step, 100) for step in range(10)]
    assert factors == pytest.approx([(i + 1) / 10 for i in range(10)])


def test_cosine_decays_from_the_peak_to_min_lr_at_the_last_step() -> None:
    assert lr_factor(COSINE, 10, 100) == pytest.approx(1.0)
    assert lr_factor(COSINE, 99, 100) == pytest.approx(0.1)
    # Halfway through the decay: halfway between the peak and the floor.
    assert lr_factor(COSINE, 10 + 89 // 2, 100) == pytest.approx(0.55, abs=0.02)
    decay = [lr_factor(COSINE, s, 100) for s in range(10, 100)]
    assert all(a >= b for a, b in itertools.pairwise(decay))


def test_constant_schedule_holds_the_peak_after_warm_up() -> None:
    recipe = Recipe(optimizer="sgd", lr=0.1, warmup=0.5)
    assert lr_factor(recipe, 0, 10) == pytest.approx(0.2)
    assert [lr_factor(recipe, s, 10) for s in range(5, 10)] == [1.0] * 5


def test_a_seed_joins_at_the_current_rate_or_ramps_up_with_seed_warmup() -> None:
    at_once = attrs.evolve(COSINE, seed_warmup=0.0)
    assert lr_factor(at_once, 50, 100, born=50) == lr_factor(at_once, 50, 100)
    ramped = attrs.evolve(COSINE, seed_warmup=0.05)
    host = [lr_factor(ramped, s, 100) for s in range(50, 56)]
    seed = [lr_factor(ramped, s, 100, born=50) for s in range(50, 56)]
    assert seed[:5] == pytest.approx([host[i] * (i + 1) / 5 for i in range(5)])
    assert seed[5] == host[5]


# ---------------------------------------------------------------- weight decay by kind


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.conv = nn.Conv2d(1, 2, 3)
        self.norm = nn.LayerNorm(4)
        self.fc = nn.Linear(4, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight  # tied, as the transformer hosts do


def test_matrices_and_kernels_decay_norms_biases_and_embeddings_do_not() -> None:
    model = Tiny()
    emb = embedding_parameters(model.modules())
    r = TRANSFORMER_RECIPE
    assert decays(model.fc.weight, r, emb) and decays(model.conv.weight, r, emb)
    assert not decays(model.fc.bias, r, emb)
    assert not decays(model.norm.weight, r, emb)
    assert not decays(model.embed.weight, r, emb) and not decays(model.head.weight, r, emb)
    everything = attrs.evolve(r, decay_embeddings=True, decay_norms_and_biases=True)
    assert all(decays(p, everything, emb) for p in model.parameters())


def test_param_groups_carry_the_decay_and_leave_out_empty_groups() -> None:
    model = Tiny()
    groups = param_groups(
        model.parameters(), TRANSFORMER_RECIPE, embedding_parameters(model.modules())
    )
    by_decay = {g["weight_decay"]: {id(p) for p in g["params"]} for g in groups}
    assert by_decay[0.1] == {id(model.fc.weight), id(model.conv.weight)}
    only_norm = param_groups(model.norm.parameters(), TRANSFORMER_RECIPE, set())
    assert [g["weight_decay"] for g in only_norm] == [0.0]


def test_the_recipe_builds_the_torch_optimizer_it_names() -> None:
    params = [nn.Parameter(torch.zeros(2, 2))]
    adamw = make_optimizer([{"params": params, "weight_decay": 0.1}], TRANSFORMER_RECIPE)
    assert isinstance(adamw, torch.optim.AdamW)
    assert adamw.defaults["betas"] == (0.9, 0.95)
    sgd = make_optimizer([{"params": params, "weight_decay": 5e-4}], CNN_RECIPE)
    assert isinstance(sgd, torch.optim.SGD) and sgd.defaults["nesterov"]


# ---------------------------------------------------------------- resolution


def test_config_fields_override_the_task_recipe_and_unset_ones_keep_it() -> None:
    cfg = load_config(overrides=["training.lr=0.5", "training.betas=[0.8, 0.9]"])
    recipe = resolve_recipe(cfg.training, TRANSFORMER_RECIPE)
    assert recipe.lr == 0.5 and recipe.betas == (0.8, 0.9)
    assert recipe.optimizer == "adamw" and recipe.warmup == TRANSFORMER_RECIPE.warmup


@pytest.mark.parametrize("recipe", [LEGACY_SGD, TRANSFORMER_RECIPE], ids=["legacy", "adamw"])
def test_recipe_overrides_select_exactly_that_recipe(recipe: Recipe) -> None:
    cfg = load_config(overrides=recipe_overrides(recipe))
    other = CNN_RECIPE if recipe.optimizer == "adamw" else TRANSFORMER_RECIPE
    assert resolve_recipe(cfg.training, other) == recipe


def test_a_task_without_a_recipe_gets_its_family_recipe() -> None:
    class Task:
        topology = "transformer"

    assert task_recipe(Task()) == TRANSFORMER_RECIPE
    assert family_recipe("cnn") == CNN_RECIPE


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ('training.optimizer="adam"', "training.optimizer: expected one of sgd, adamw"),
        ('training.schedule="step"', "training.schedule: expected one of constant, cosine"),
        ("training.betas=[0.9]", "training.betas: expected 2 items, got 1"),
        ("training.warmup=2", "training.warmup: expected a number in [0, 1]"),
    ],
)
def test_bad_recipe_settings_are_named(override: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(overrides=[override])
    assert needle in str(info.value)


def test_the_replaced_per_group_keys_say_what_to_write_instead() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(overrides=["training.host_lr=0.1"])
    assert info.value.problems == [
        "training.host_lr: replaced by training.lr (one recipe trains host and seeds; "
        "see docs/recipes.md)"
    ]


def test_a_run_records_the_recipe_it_resolved() -> None:
    pm = PluginManager(autoload=True)
    resolved = resolve(load_config(overrides=['run.task="charlm"', "training.lr=0.002"]), pm)
    t = resolved.config.training
    assert (t.optimizer, t.lr, t.betas, t.schedule) == ("adamw", 0.002, [0.9, 0.95], "cosine")
    digits = resolve(load_config(), pm).config.training
    assert (digits.optimizer, digits.nesterov, digits.schedule) == ("sgd", True, "cosine")


# ---------------------------------------------------------------- one recipe, host and seeds


def test_a_seed_is_optimised_with_the_host_recipe_at_the_current_rate() -> None:
    env = make_env('training.optimizer="adamw"', 'training.schedule="cosine"', "env.max_epochs=6")
    env.step(WAIT)
    drive_to(env, "r0c0", "TRAINING")
    trainer = env.trainer
    seed = trainer.seed_optimizers["r0c0"]
    assert seed.born > 0
    host_groups, seed_groups = trainer.host_optimizer.param_groups, seed.optimizer.param_groups
    assert type(seed.optimizer) is type(trainer.host_optimizer) is torch.optim.AdamW
    assert {g["lr"] for g in seed_groups} == {host_groups[0]["lr"]}
    assert {g["weight_decay"] for g in seed_groups} <= {g["weight_decay"] for g in host_groups}
    assert seed_groups[0]["betas"] == host_groups[0]["betas"]
    # The schedule moved: the rate is below the peak, for the seed and the host alike.
    assert host_groups[0]["lr"] < trainer.recipe.lr


def test_the_schedule_position_survives_a_checkpoint() -> None:
    env = make_env("env.max_epochs=6")
    drive_to(env, "r0c0", "TRAINING")
    state = env.trainer.state_dict()
    fresh = make_env("env.max_epochs=6")
    drive_to(fresh, "r0c0", "GERMINATED")
    fresh.trainer.load_state_dict(state)
    assert fresh.trainer.step == env.trainer.step > 0
    assert fresh.trainer.seed_optimizers["r0c0"].born == env.trainer.seed_optimizers["r0c0"].born


def _grads(*shapes: tuple[int, ...], value: float) -> list[nn.Parameter]:
    params = [nn.Parameter(torch.zeros(s)) for s in shapes]
    for p in params:
        p.grad = torch.full_like(p, value)
    return params


def _norm(params: list[nn.Parameter]) -> float:
    return math.sqrt(sum(float(p.grad.pow(2).sum()) for p in params if p.grad is not None))


def test_one_gradient_budget_covers_host_and_seeds() -> None:
    cfg = load_config(overrides=["training.grad_clip=1.0"]).training
    host, seed = _grads((4,), value=1.0), _grads((4,), value=1.0)  # norms 2 and 2
    clip_gradients(host, torch.tensor(2.0), {"r0c0": (seed, torch.tensor(2.0))}, cfg, {"r0c0"})
    assert _norm(host + seed) == pytest.approx(1.0, rel=1e-4)
    assert _norm(host) == pytest.approx(_norm(seed))


def test_a_seed_learning_in_isolation_leaves_the_host_budget_alone() -> None:
    """A TRAINING seed's output is not the model's: sharing its budget would change the
    host's update, which must equal the host alone's until the seed blends in."""
    cfg = load_config(overrides=["training.grad_clip=1.0"]).training
    host, seed = _grads((4,), value=1.0), _grads((4,), value=1.0)
    clip_gradients(host, torch.tensor(2.0), {"r0c0": (seed, torch.tensor(2.0))}, cfg, set())
    assert _norm(host) == pytest.approx(1.0, rel=1e-4)
    assert _norm(seed) == pytest.approx(1.0, rel=1e-4)


def test_clip_per_group_gives_each_group_a_budget_of_its_own() -> None:
    cfg = load_config(overrides=["training.clip_per_group=true"]).training
    host, seed = _grads((4,), value=1.0), _grads((4,), value=1.0)
    clip_gradients(host, torch.tensor(2.0), {"r0c0": (seed, torch.tensor(2.0))}, cfg, {"r0c0"})
    assert _norm(host) == pytest.approx(1.0, rel=1e-4)
    assert _norm(seed) == pytest.approx(1.0, rel=1e-4)


# ---------------------------------------------------------------- parity


@pytest.mark.parametrize(
    "recipe",
    [
        ['training.optimizer="adamw"', "training.weight_decay=0.1", "training.warmup=0.2"],
        ['training.optimizer="sgd"', "training.nesterov=true", "training.weight_decay=5e-4"],
    ],
    ids=["adamw", "sgd"],
)
def test_a_fossil_trains_exactly_as_a_host_layer_under_one_optimizer(recipe: list[str]) -> None:
    """The same architecture reached two ways: a host with a fossilized seed, trained by
    esper, against the same parameters under ONE torch optimizer (decay by kind, one clip
    budget, the same schedule). Any extra budget, missing decay or own rate of the seed's
    would separate them (the original system's seed: own clip, no decay)."""
    import copy

    env = make_env(*recipe, "training.grad_clip=0.05", "env.max_epochs=12")
    drive_to(env, "r0c0", "FOSSILIZED")
    trainer = env.trainer
    trainer.reset_optimizers()  # both ways start from fresh optimizer state
    reference = copy.deepcopy(env.model)
    params = list(reference.parameters())
    r = trainer.recipe
    opt = make_optimizer(param_groups(params, r, embedding_parameters(reference.modules())), r)
    gen = torch.Generator().manual_seed(0)
    noise: set[int] = set()
    trainer.begin_epoch()
    for _ in range(6):
        x, y = torch.randn(16, 1, 4, 4, generator=gen), torch.randint(0, 4, (16,), generator=gen)
        step = trainer.step
        trainer.train_batch(x, y)
        for group in opt.param_groups:
            group["lr"] = r.lr * lr_factor(r, step, trainer.total_steps)
        opt.zero_grad()
        env.task.loss(reference(x), y).backward()
        # A conv bias before BatchNorm has a gradient of rounding noise only, which Adam
        # scales up to a full step either way: such parameters are not compared.
        noise |= {i for i, p in enumerate(params) if float(p.grad.abs().max()) < 1e-6}
        torch.nn.utils.clip_grad_norm_(params, 0.05)
        opt.step()
    compared = [
        (name, mine, theirs)
        for i, ((name, mine), theirs) in enumerate(zip(env.model.named_parameters(), params))
        if i not in noise
    ]
    assert any(name.startswith("slots.") for name, _, _ in compared) and len(compared) >= 4
    for name, mine, theirs in compared:
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6, msg=name)
