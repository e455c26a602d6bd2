"""The policies in real runs of the fast fake task (tests/fake_plugin.py)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from esper_tamiyo_heuristic.heuristic import HeuristicPolicy

from esper_core.components.policy import Policy, Trainable
from esper_core.config import load_config
from esper_core.plugins import PluginManager
from esper_core.run import api
from esper_core.run.interrupts import Interrupted
from esper_core.run.run_dir import load_run_config

# A lifecycle that fits in the tiny task's short episodes.
FAST = [
    "run.task=tiny",
    "run.reward=acc_delta",
    "run.telemetry=[]",
    "run.quiet=true",
    "env.max_epochs=14",
    "lifecycle.min_training_epochs=2",
    "lifecycle.tempos=[1, 2, 3]",
    "lifecycle.default_tempo=2",
    "policies.heuristic.min_epoch=1",
    "policies.heuristic.tempo=2",
    'policies.heuristic.blueprint_order=["res"]',
    # The toy task is learnt in a few epochs: any expansion score fires the trigger
    # (and with the capacity trigger, any host is capacity-limited)...
    "policies.heuristic.expansion_ratio=1e-9",
    "policies.heuristic.underfit_loss_ratio=0.0",
    "policies.heuristic.flat_max_drop=100.0",
    # Seeds alone (no host widening, no fit gate): these tests exercise seed mechanics.
    'policies.heuristic.host_growth="off"',
    "policies.heuristic.fit_loss_ratio=0",
    # ...and the zero-init residual's contribution (or gain) there is noise: admit any.
    "policies.heuristic.min_contribution=-100.0",
    "policies.heuristic.min_gain=-100.0",
    "policies.heuristic.regression_points=100.0",
]


def run(pm: PluginManager, tmp_path: Path, name: str, sets: list[str]) -> dict:
    config = load_config(overrides=[*FAST, *sets])
    return api.run(config, pm, run_dir=tmp_path / name, quiet=True, notify=lambda _m: None)


def test_policies_are_registered_and_follow_the_protocol(pm: PluginManager, build) -> None:
    assert {"heuristic", "random", "wait"} <= set(pm.registry("policies").names())
    assert pm.get("policies", "heuristic") is HeuristicPolicy
    for name in ("heuristic", "random", "wait"):
        cls = pm.get("policies", name)
        policy = cls(cls.Options(), build.context())
        assert isinstance(policy, Policy)
        assert not isinstance(policy, Trainable)


def test_heuristic_is_the_default_policy_and_completes_a_lifecycle(pm, tmp_path: Path) -> None:
    summary = run(pm, tmp_path, "default", [])
    assert summary["policy"] == "heuristic"
    assert summary["refused_actions"] == 0
    episode = summary["episodes"][0]
    assert episode["seeds_germinated"] >= 1
    assert episode["seeds_fossilized"] >= 1
    fates = [s["fate"] for s in summary["seeds"]]
    assert "fossilized" in fates


def test_random_and_wait_runs(pm, tmp_path: Path) -> None:
    wait = run(pm, tmp_path, "wait", ["run.policy=wait"])
    assert wait["episodes"][0]["seeds_germinated"] == 0
    assert wait["refused_actions"] == 0
    rnd = run(pm, tmp_path, "random", ["run.policy=random", "run.n_envs=2"])
    assert rnd["refused_actions"] == 0  # a random legal action is never refused as illegal
    assert sum(e["seeds_germinated"] for e in rnd["episodes"]) >= 1


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["heuristic", "random"])
def test_an_interrupted_run_resumes_exactly(pm, tmp_path: Path, monkeypatch, policy: str) -> None:
    sets = [f"run.policy={policy}", "run.n_envs=2", "run.episodes=2"]
    straight = run(pm, tmp_path, "straight", sets)

    cls = pm.get("policies", policy)
    calls = {"n": 0}
    original = cls.act

    def act_then_interrupt(self, observations):
        calls["n"] += 1
        if calls["n"] == 19:  # mid second episode: the policy has memory and RNG state to restore
            signal.raise_signal(signal.SIGINT)  # what Ctrl-C does: stop at the epoch's end
        return original(self, observations)

    monkeypatch.setattr(cls, "act", act_then_interrupt)
    with pytest.raises(Interrupted):
        run(pm, tmp_path, "resumed", sets)
    monkeypatch.setattr(cls, "act", original)
    resumed = api.run(
        load_run_config(tmp_path / "resumed"),
        pm,
        run_dir=tmp_path / "resumed",
        resume=True,
        quiet=True,
        notify=lambda _m: None,
    )

    def outcome(summary: dict) -> list:
        return [
            (
                e["env"],
                e["episode"],
                e["final_test_acc"],
                e["seeds_germinated"],
                e["seeds_fossilized"],
                e["seeds_pruned"],
                e["total_reward"],
            )
            for e in summary["episodes"]
        ]

    assert outcome(resumed) == outcome(straight)
    assert resumed["seeds"] == straight["seeds"]
