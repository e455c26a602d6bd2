"""The registered component and the shape of the package."""

from __future__ import annotations

import ast
from pathlib import Path

import esper_tamiyo_ppo
import torch
from esper_tamiyo_ppo.options import PPOOptions
from esper_tamiyo_ppo.policy import PPOPolicy

from esper_core.components.policy import Trainable
from esper_core.plugins import PluginManager

from .helpers import BanditEnv, context, run_updates

PACKAGE = Path(esper_tamiyo_ppo.__file__).parent


def test_the_registered_component_builds_a_trainable_that_forwards_to_ppo_policy() -> None:
    component = PluginManager(extra=["policies.ppo"], autoload=False).get("policies", "ppo")
    options = PPOOptions(hidden_size=16)
    front = component(options, context(n_envs=2, max_epochs=4, total_updates=2))
    assert type(front) is component and isinstance(front, Trainable)

    def hook(grads: list[torch.Tensor]) -> None:
        pass

    front.gradient_sync = hook  # where the distributed executor puts its all-reduce
    assert front.policy.learner.gradient_sync is hook and front.gradient_sync is hook
    front.gradient_sync = None

    direct = PPOPolicy(options, context(n_envs=2, max_epochs=4, total_updates=2))
    ran = [run_updates(p, [BanditEnv(i, 4) for i in range(2)], 2)[1] for p in (front, direct)]  # type: ignore[arg-type]
    assert ran[0] == ran[1]
    ours, theirs = front.policy.net.state_dict(), direct.net.state_dict()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)


def _imports_inside_the_package(path: Path) -> set[str]:
    """Every module of the package that ``path`` imports, anywhere (lazy imports and
    TYPE_CHECKING blocks included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        found |= {n.split(".")[1] for n in names if n.startswith("esper_tamiyo_ppo.")}
    return found & {p.stem for p in PACKAGE.glob("*.py")}


def test_the_modules_import_each_other_without_a_cycle() -> None:
    graph = {p.stem: _imports_inside_the_package(p) - {p.stem} for p in PACKAGE.glob("*.py")}
    order: list[str] = []
    while graph:
        leaves = sorted(m for m, deps in graph.items() if deps <= set(order))
        assert leaves, f"import cycle among {sorted(graph)}: {graph}"
        order += leaves
        for m in leaves:
            del graph[m]


def test_every_module_stays_small() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in PACKAGE.glob("*.py")}
    assert max(sizes.values()) <= 400, sizes


def test_evaluating_without_a_checkpoint_is_refused_unless_allowed() -> None:
    """`esper run --policy ppo` with no checkpoint used to evaluate random weights silently."""
    import pytest

    from esper_core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"name one with --policy ppo:DIR/checkpoint\.pt"):
        PPOPolicy(PPOOptions(), context(n_envs=1, max_epochs=4))
    PPOPolicy(PPOOptions(allow_untrained=True), context(n_envs=1, max_epochs=4))
    PPOPolicy(PPOOptions(), context(n_envs=1, max_epochs=4, total_updates=2))  # training


def test_evaluation_acts_greedily_by_default_and_samples_on_request() -> None:
    """The most likely action of each head, every time, unless deterministic=false."""
    assert PPOOptions().deterministic is True

    def actions(options: PPOOptions, seed: int) -> list[str]:
        policy = PPOPolicy(options, context(n_envs=4, max_epochs=4, seed=0))
        envs = [BanditEnv(i, 4) for i in range(4)]
        observations = [env.reset(seed) for env in envs]
        policy.reset(range(4))
        policy.generator.manual_seed(seed)
        return [str(a) for a in policy.act(observations)]

    greedy = PPOOptions(allow_untrained=True)
    assert actions(greedy, 1) == actions(greedy, 2)
    sampling = PPOOptions(allow_untrained=True, deterministic=False)
    draws = {tuple(actions(sampling, s)) for s in range(6)}
    assert len(draws) > 1
