"""A policy whose host growth is a default (``host_growth_where_possible``, the
heuristic's) trains a host that cannot take it with seeds alone; any other policy's
declared growth is still refused before the run, in one line."""

from __future__ import annotations

import pytest

from esper_core.components.growth_request import WidthGrowthSpec
from esper_core.env.host_growth_online import check_declared, where_possible
from esper_core.env.observation import observe
from esper_core.errors import ConfigError
from tests.fakes import make_env

WIDEN = WidthGrowthSpec(at=0.0, factor=2.0, tempo=5)


def test_a_host_that_cannot_widen_refuses_a_strict_policy_in_one_line() -> None:
    env = make_env()
    with pytest.raises(ConfigError, match="cannot grow in width"):
        check_declared([env], [WIDEN])


def test_a_default_growth_leaves_such_a_host_to_its_seeds() -> None:
    env = make_env()
    why = check_declared([env], [WIDEN], optional=True)
    assert why is not None and "cannot grow in width" in why
    assert tuple(env.online_growth_specs) == ()
    # ...so its observations declare no growth, and the heuristic's host growth never waits.
    assert observe(env, rolled_back=False).host_growth_ready == ()


def test_the_heuristic_is_the_policy_that_grows_where_possible() -> None:
    from esper_tamiyo_heuristic.heuristic import HeuristicPolicy
    from esper_tamiyo_heuristic.static import StaticPolicy

    assert where_possible(HeuristicPolicy) and not where_possible(StaticPolicy)
