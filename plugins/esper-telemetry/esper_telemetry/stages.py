"""Stage colours shared by the live console and the report figures.

One table, so a stage looks the same in the terminal and in ``lifecycle.png``.
"""

from __future__ import annotations

from esper_core.lifecycle.stages import STAGES, Stage

STAGE_COLOURS: dict[str, str] = {
    Stage.DORMANT.value: "#9e9e9e",
    Stage.GERMINATED.value: "#f2c14e",
    Stage.TRAINING.value: "#3a86ff",
    Stage.BLENDING.value: "#8338ec",
    Stage.HOLDING.value: "#ff8c1a",
    Stage.FOSSILIZED.value: "#2a9d4b",
    Stage.PRUNED.value: "#e63946",
    Stage.EMBARGOED.value: "#9d0208",
    Stage.RESETTING.value: "#6d4c41",
}
STAGE_ORDER: tuple[str, ...] = tuple(stage.value for stage in STAGES)
UNKNOWN_COLOUR = "#000000"


def stage_colour(stage: str) -> str:
    """Hex colour of a stage (black for a stage this version does not know)."""
    return STAGE_COLOURS.get(stage, UNKNOWN_COLOUR)
