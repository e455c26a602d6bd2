"""What the live display keeps of each env (its last epoch, reward, action and slots)
and how a slot is drawn in the env table: the table's widths and a slot's cell."""

from __future__ import annotations

from typing import Any

from attrs import define, field

from esper_telemetry.stages import stage_colour


@define
class SlotView:
    stage: str
    alpha: float
    blueprint: str | None


@define
class EnvView:
    episode: int = 0
    epoch: int = 0
    val_acc: float | None = None
    test_acc: float | None = None
    reward: float | None = None
    episode_reward: float = 0.0
    action: str = ""
    slots: dict[str, SlotView] = field(factory=dict)


BAR_WIDTH = 32
ACTION_WIDTH = 24
SLOT_WIDTH = 24
ROW_WIDTH = 4 + 8 + 7 + 7 + 8 + 8 + 2 + ACTION_WIDTH  # the env line without its slots
HIDE_BLUEPRINT = ("DORMANT", "EMBARGOED", "RESETTING", "PRUNED")


def clock(seconds: float) -> str:
    seconds = max(int(seconds), 0)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def slot_cell(slot: SlotView | None) -> Any:
    """A slot's stage in its colour, alpha while blending and the blueprint, SLOT_WIDTH wide."""
    from rich.text import Text

    cell = Text()
    if slot is not None:
        cell.append(slot.stage, style=f"bold {stage_colour(slot.stage)}")
        if slot.stage == "BLENDING":
            cell.append(f" α{slot.alpha:.2f}")
        if slot.blueprint and slot.stage not in HIDE_BLUEPRINT:
            cell.append(" " + slot.blueprint.split("/", 1)[-1], style="dim")
    cell.truncate(SLOT_WIDTH, overflow="ellipsis", pad=True)
    return cell
