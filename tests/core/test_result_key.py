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


def test_static_that_widens_its_host_is_not_wait() -> None:
    # No seeds, but the host itself grows: a different run from wait's (issue 36).
    widened = {"static": {"seeds": [], "widen_at": 0.35, "widen_factor": 4.0}}
    assert result_key(config("static", OLD, **widened)) != result_key(config("wait", OLD))


def test_a_long_value_is_shown_where_it_differs() -> None:
    there = "x" * 100 + "alpha"
    now = "x" * 100 + "omega"
    text = describe_difference("tasks.dataset.module", there, now)
    assert "alpha" in text and "omega" in text  # not cut at the same point on both sides
