"""The policy's reasons on the swimlane: each decision other than WAIT gets a number on
its lane at the epoch boundary where it was taken, and the number's line under the lanes
says what the policy chose and why (report.md's Decisions table has every epoch)."""

from __future__ import annotations

from typing import Any

from attrs import frozen

from esper_telemetry.report.data import Key, RunData

# A long run's notes would bury the lanes: the first ones are drawn, the rest counted.
MAX_NOTES = 12
MAX_REASON = 110


@frozen
class DecisionNote:
    key: Key
    boundary: int  # the epoch boundary where the decision was taken (epoch trained - 1)
    slot: str | None  # the slot the action names, None when it names none of the lanes'
    text: str


def decision_notes(data: RunData, groups: list[Key]) -> list[DecisionNote]:
    """Every decision other than WAIT (and every refused one) of ``groups``, in order."""
    notes = []
    for key in groups:
        for row in data.epochs.get(key, []):
            if row.action == "WAIT" and not row.action_refused:
                continue
            words = row.action.split()
            slot = words[1] if len(words) > 1 and words[1] in data.slot_ids else None
            action = row.action + (
                f" (refused: {row.action_refused})" if row.action_refused else ""
            )
            reason = row.reason or "no reason given"
            if len(reason) > MAX_REASON:
                reason = reason[: MAX_REASON - 1] + "…"
            notes.append(DecisionNote(key, row.epoch - 1, slot, f"{action}: {reason}"))
    return notes


def number_decisions(
    ax: Any, notes: list[DecisionNote], lane_y: dict[tuple[Key, str], int], fallback: str
) -> None:
    """A numbered tag on each drawn note's lane, below the event markers."""
    for i, note in enumerate(notes[:MAX_NOTES], start=1):
        lane = (note.key, note.slot or fallback)
        if lane not in lane_y:
            continue
        ax.annotate(
            str(i),
            (note.boundary, lane_y[lane]),
            xytext=(-4, -13),
            textcoords="offset points",
            fontsize=6.5,
            color="#1d3557",
            bbox={"boxstyle": "circle,pad=0.15", "fc": "white", "ec": "#1d3557", "lw": 0.6},
        )


def write_notes(ax: Any, notes: list[DecisionNote], outer_name: str) -> None:
    """The numbered lines, one per drawn note, in an axis of their own (no frame)."""
    ax.axis("off")
    lines = [
        f"{i}. env {n.key[0]} · {outer_name} {n.key[1]}, after epoch {n.boundary}: {n.text}"
        for i, n in enumerate(notes[:MAX_NOTES], start=1)
    ]
    if len(notes) > MAX_NOTES:
        lines.append(f"… and {len(notes) - MAX_NOTES} more decisions (report.md lists them all)")
    ax.text(
        0.0,
        1.0,
        "Why (the policy's reason for each decision other than WAIT):\n" + "\n".join(lines),
        transform=ax.transAxes,
        va="top",
        ha="left",
        fontsize=7.5,
        family="monospace",
    )
