"""How a seed is written in a config: ``blueprint@slot[:style]``.

Torch-free, so a comparison's preview can name a grown run's final architecture without
loading torch.
"""

from __future__ import annotations

DEFAULT_STYLE = "linear_add"  # the blend style a spec without ``:style`` gets


def seed_spec(blueprint: str, slot_id: str, style: str | None = None) -> str:
    """``blueprint@slot`` (``:style`` unless the default): the inverse of the parser."""
    name = f"{blueprint.split('/', 1)[-1]}@{slot_id}"
    return name if style in (None, DEFAULT_STYLE) else f"{name}:{style}"
