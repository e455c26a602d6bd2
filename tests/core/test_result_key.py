"""Which settings decide a finished cell's result: a blueprint set matters only to a policy
that can germinate, and a difference is shown as itself."""

from __future__ import annotations

import attrs

from esper_core.compare.result_key import config_differences, describe_difference, result_key
from esper_core.config import RunConfig


def config(policy: str, blueprints: list[str], **policies: dict) -> RunConfig:  # type: ignore[type-arg]
    base = RunConfig()
    return attrs.evolve(
        base,
        run=attrs.evolve(base.run, policy=policy),
        env=attrs.evolve(base.env, blueprints=blueprints),
        policies=policies,
    )


OLD = ["cnn/conv_heavy", "cnn/conv_light"]
NEW = [*OLD, "cnn/dilated"]  # a blueprint package was installed since


def test_a_blueprint_set_matters_only_to_a_policy_that_can_germinate() -> None:
    assert config_differences(config("wait", OLD), config("wait", NEW)) == []
    static = {"static": {"seeds": ["conv_heavy@r0c0"]}}
    assert (
        config_differences(config("static", OLD, **static), config("static", NEW, **static)) == []
    )
    (difference,) = config_differences(config("heuristic", OLD), config("heuristic", NEW))
    assert difference == 'env.blueprints: "cnn/dilated" added'


def test_static_without_seeds_is_its_wait_twin() -> None:
    unused = {"heuristic": {"min_epoch": 3}}  # a section the run does not use
    assert result_key(config("static", OLD, static={"seeds": []}, **unused)) == result_key(
        config("wait", NEW)
    )
    grown = {"static": {"seeds": ["conv_heavy@r0c0"]}}
    assert result_key(config("static", OLD, **grown)) != result_key(config("wait", OLD))


def test_static_that_widens_the_host_is_not_its_wait_twin() -> None:
    widened = {"static": {"seeds": [], "widen_at": 0.35, "widen_factor": 4.0}}
    assert result_key(config("static", OLD, **widened)) != result_key(config("wait", OLD))


def test_a_long_value_is_shown_where_it_differs() -> None:
    there = "x" * 100 + "alpha"
    now = "x" * 100 + "omega"
    text = describe_difference("tasks.dataset.module", there, now)
    assert "alpha" in text and "omega" in text  # not cut at the same point on both sides


def test_width_options_without_a_width_growth_keep_an_older_static_cell() -> None:
    # A static-final cell stored before policies.static had width options: its stored
    # options lack them; today's carry their defaults, which shape nothing.
    seeds = ["conv_heavy@r0c0"]
    before = config("static", OLD, static={"seeds": seeds})
    now = config("static", OLD, static={"seeds": seeds, "widen_at": None, "widen_factor": 2.0})
    assert config_differences(before, now) == []
    widened = config("static", OLD, static={"seeds": seeds, "widen_at": 0.5, "widen_factor": 2.0})
    assert config_differences(before, widened) != []


def test_static_that_deepens_the_host_is_its_own_cell() -> None:
    deepened = {"static": {"seeds": [], "deepen_at": 0.2, "deepen_mode": "stack"}}
    assert result_key(config("static", OLD, **deepened)) != result_key(config("wait", OLD))
    # Depth options without a depth growth shape nothing: an older cell is kept.
    seeds = ["conv_heavy@r0c0"]
    before = config("static", OLD, static={"seeds": seeds})
    now = config("static", OLD, static={"seeds": seeds, "deepen_at": None, "deepen_factor": 2})
    assert config_differences(before, now) == []
    identity = {"static": {"seeds": [], "deepen_at": 0.2, "deepen_mode": "identity"}}
    assert result_key(config("static", OLD, **identity)) != result_key(
        config("static", OLD, **deepened)
    )
