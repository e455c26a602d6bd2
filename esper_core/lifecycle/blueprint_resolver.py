"""The blueprint resolver a seed slot rebuilds its seed with when a state loads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from esper_core.components.blueprint import Blueprint
from esper_core.errors import CheckpointError


class BlueprintResolver:
    """The blueprint resolver a slot rebuilds its seed with when a state loads. A copy of
    the slot (``copy.deepcopy``, an EMA model) shares it; a pickle (``torch.save(model)``)
    drops it, since it belongs to the env that built the slot, which is not saved."""

    def __init__(self, resolve: Callable[[str], Blueprint] | None) -> None:
        self._resolve = resolve

    def __call__(self, name: str) -> Blueprint:
        if self._resolve is None:
            raise CheckpointError(
                f"this slot was loaded from a pickle (torch.load of a grown model) and cannot "
                f"build a {name!r} seed; load the state into a model grown by a Grower "
                "(grower.load_state_dict), or load the pickled model whole"
            )
        return self._resolve(name)

    def __deepcopy__(self, memo: dict[int, Any]) -> BlueprintResolver:
        return self

    def __reduce__(self) -> tuple[type[BlueprintResolver], tuple[None]]:
        return (BlueprintResolver, (None,))
