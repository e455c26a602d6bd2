"""Growth in the estimate of ``esper compare --dry-run``: what a growing arm trains is
priced with the FLOPs torch's counter gives it (the env's cost model), from the task's
options alone, so a plan of growing arms is no longer priced as its bare host (the
digits heuristic, whose seed computes about 20 times its host's FLOPs, took twice its
estimate)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from esper_tasks.charlm import CharLMOptions, CharLMTask
from esper_tasks.digits import DigitsOptions, DigitsTask
from esper_tasks.glyphs import GlyphsOptions, GlyphsTask

from esper_core.compare.experiment import build_experiment, parse_experiment, shared_config
from esper_core.compare.growth_work import seed_flops
from esper_core.compare.plan import plan_cells
from esper_core.compare.preview import preview, preview_lines
from esper_core.compare.run_cost import FORWARD_SHARE, CellCosts
from esper_core.env.cost import count_train_flops
from esper_core.plugins import PluginManager

PLUGINS = (
    "tasks.digits",
    "policies.wait",
    "policies.static",
    "policies.heuristic",
    "blueprints.cnn",
    "rewards.pbrs",
)
CONV_HEAVY_R0C0 = "conv_heavy@r0c0"


@pytest.fixture(scope="module")
def pm() -> PluginManager:
    return PluginManager(extra=list(PLUGINS), autoload=False)


def _activations(task: Any, x: torch.Tensor) -> list[torch.Tensor]:
    host = task.build_host()
    out = []
    for i in range(host.num_segments()):
        x = host.forward_segment(i, x)
        out.append(x.detach())
    return out


@pytest.mark.parametrize(
    "task", [DigitsTask(DigitsOptions(preset="impaired")), GlyphsTask(GlyphsOptions())]
)
def test_a_seeds_estimated_flops_are_what_the_counter_measures(task: Any) -> None:
    pm = PluginManager(extra=["blueprints.cnn"], autoload=False)
    side = task.image_side
    acts = _activations(task, torch.randn(2, task.in_channels, side, side))
    sites = task.slot_sites()
    assert [s.spec for s in sites] == list(task.build_host().injection_specs())
    for site, act in zip(sites, acts):
        assert site.positions == act.shape[2] * act.shape[3]
        for bp in pm.blueprints_for("cnn"):
            if bp.name not in ("conv_heavy", "conv_light", "conv_layer", "bottleneck"):
                continue
            seed = bp.build_for(site.spec)
            # A seed's input is the host's activation, whose gradient the backward computes.
            x = act.clone().requires_grad_(True)
            counted = count_train_flops(seed, lambda out, _: out.sum(), x, x) / 2
            assert seed_flops(bp, site) == pytest.approx(counted, rel=0.15), bp.key


def test_a_transformers_slots_sit_on_every_token(tmp_path: Any) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 200)
    task = CharLMTask(CharLMOptions(path=str(corpus), block_size=32, preset="small"))
    sites = task.slot_sites()
    host: Any = task.build_host()
    assert [s.spec for s in sites] == list(host.injection_specs())
    assert {s.positions for s in sites} == {32}


def _plan(pm: PluginManager, policies: list[Any], **more: Any) -> Any:
    data = {
        "policies": policies,
        "tasks": [{"name": "digits", "options": {"preset": "impaired"}}],
        "seeds": 1,
        "config": {
            "run": {"telemetry": [], "reward": "pbrs"},
            "env": {"max_epochs": 10, "eval_test_every": 0},
        },
        **more,
    }
    spec = parse_experiment(data)
    return build_experiment(spec, shared_config(spec), plugins=PLUGINS)


def test_a_growing_arm_is_priced_above_wait_by_what_it_grows(pm: PluginManager) -> None:
    static = {"name": "static", "label": "seeded", "options": {"seeds": [CONV_HEAVY_R0C0]}}
    widened = {"name": "static", "label": "wide", "options": {"widen_at": 0.5}}
    # The heuristic's seeds alone (its default widens the host first: the next test).
    seeds = {"name": "heuristic", "label": "seeds", "options": {"host_growth": "off"}}
    experiment = _plan(pm, ["wait", seeds, static, widened])
    costs = CellCosts(pm)
    by_arm: dict[str, Any] = {c.policy: costs(c.config) for c in plan_cells(experiment, pm, 1)}
    task = DigitsTask(DigitsOptions(preset="impaired"))
    work = task.training_work()
    seed = seed_flops(pm.get("blueprints", "cnn/conv_heavy"), task.slot_sites()[0])
    assert seed > 10 * work.flops_per_sample  # the seed dwarfs its host

    def passes(start: int) -> float:
        """Samples through the grown model from ``start``: training and a third of the
        evaluation (forward only); the test set once at the end."""
        later = 10 - start
        return later * work.train_samples + FORWARD_SHARE * (
            later * work.eval_samples + work.test_samples
        )

    wait = by_arm["wait"].work.gflop
    # Known in advance: the seed from epoch 0, the widened host from epoch 5.
    assert by_arm["seeded"].work.gflop - wait == pytest.approx(passes(0) * seed / 1e9)
    wide = task.grown_flops_per_sample(2.0, 1) - work.flops_per_sample
    # impaired's one conv reads the image and feeds the head: twice as wide, twice the FLOPs.
    assert wide == work.flops_per_sample
    assert by_arm["wide"].work.gflop - wait == pytest.approx(passes(5) * wide / 1e9)
    assert by_arm["seeded"].assumption is None and by_arm["wide"].assumption is None
    # Adaptive: the heuristic's costliest blueprint in its costliest slot from its
    # min_epoch (2), and the estimate says so.
    heuristic = by_arm["seeds"]
    assert heuristic.work.gflop - wait == pytest.approx(passes(2) * seed / 1e9)
    assert (
        heuristic.assumption
        == "heuristic: one cnn/conv_heavy@r0c0 seed from epoch 2 (its min_epoch)"
    )
    assert heuristic.work.samples == by_arm["wait"].work.samples


def test_a_heuristic_that_grows_its_host_germinates_after_it(pm: PluginManager) -> None:
    """With ``host_growth`` on, the heuristic grows no seed before its host grew; with
    ``env.max_seeds = 0`` no seed at all."""
    grows = {"host_growth": "widen", "host_growth_factor": 2.0, "host_growth_min_at": 0.5}
    widen = {"name": "heuristic", "label": "widen", "options": grows}
    no_seeds = {
        "name": "heuristic",
        "label": "no-seeds",
        "options": {"host_growth": "off"},
        "config": {"env": {"max_seeds": 0}},
    }
    experiment = _plan(pm, ["wait", "heuristic", widen, no_seeds])
    costs = CellCosts(pm)
    by_arm: dict[str, Any] = {c.policy: costs(c.config) for c in plan_cells(experiment, pm, 1)}
    wait = by_arm["wait"].work.gflop
    assert by_arm["no-seeds"].work.gflop == wait and by_arm["no-seeds"].assumption is None
    task = DigitsTask(DigitsOptions(preset="impaired"))
    work = task.training_work()
    seed = seed_flops(pm.get("blueprints", "cnn/conv_heavy"), task.slot_sites()[0])
    host = task.grown_flops_per_sample(2.0, 1) - work.flops_per_sample
    later = 5 * work.train_samples + FORWARD_SHARE * (5 * work.eval_samples + work.test_samples)
    assert by_arm["widen"].work.gflop - wait == pytest.approx(later * (seed + host) / 1e9)
    assert by_arm["widen"].assumption == (
        "heuristic: one cnn/conv_heavy@r0c0 seed from epoch 5 (once its host grew); "
        "host widens x2 at epoch 5 (host_growth_min_at)"
    )


def test_the_dry_run_prices_growth_and_states_what_it_assumed(
    pm: PluginManager, tmp_path: Any
) -> None:
    experiment = _plan(pm, ["wait", "heuristic"], baselines=["static-final"])
    p = {g.arm: g for g in preview(experiment, pm, tmp_path / "fresh", threads=1, jobs=1).groups}
    wait, grown, twin = p["wait"], p["heuristic"], p["heuristic.static-final"]
    assert wait.seconds and grown.seconds and twin.seconds
    # The heuristic's seed costs about 20 times its host's FLOPs on every grown epoch.
    assert grown.seconds > 1.3 * wait.seconds
    # The twin trains the final architecture from epoch 0: more than the grown run.
    assert twin.seconds > grown.seconds
    lines = preview_lines(preview(experiment, pm, tmp_path / "fresh", threads=1, jobs=1))
    (line,) = [s for s in lines if "/ heuristic /" in s]
    assert "assumes heuristic: one cnn/conv_heavy@r0c0 seed from epoch 2" in line
    assert "growth counted" in lines[-1] and "not counted" not in lines[-1]
