"""policies.static names a growth operator: its requests carry widen_operator and
deepen_operator (empty by default: the one the host declares sites for)."""

from __future__ import annotations

from typing import Any

from esper_tamiyo_heuristic.static import StaticOptions, StaticPolicy


def test_the_named_operators_ride_on_the_requests(build: Any) -> None:
    options = StaticOptions(
        widen_at=0.25, widen_operator="inner/width", deepen_at=0.5, deepen_operator="cnn/depth"
    )
    widen, deepen = StaticPolicy(options, build.context()).host_growths()
    assert (widen.kind, widen.operator) == ("width", "inner/width")
    assert (deepen.kind, deepen.operator) == ("depth", "cnn/depth")
    (default,) = StaticPolicy(StaticOptions(widen_at=0.25), build.context()).host_growths()
    assert default.operator == ""
