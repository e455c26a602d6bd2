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
NOTE_FONTSIZE = 7.5


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


def note_lines(notes: list[DecisionNote], outer_name: str, figure_width: float) -> list[str]:
    """The numbered lines, one per drawn note, wrapped to fit a figure ``figure_width``
    inches wide: a long reason ran off the image's right edge. The figure's height
    counts these lines, so it is computed before the figure is made."""
    import textwrap

    # A monospace character is 0.6 em wide; a margin for the layout's padding.
    columns = int(0.97 * figure_width * 72 / (0.61 * NOTE_FONTSIZE))
    lines = ["Why (the policy's reason for each decision other than WAIT):"]
    for i, n in enumerate(notes[:MAX_NOTES], start=1):
        line = f"{i}. env {n.key[0]} · {outer_name} {n.key[1]}, after epoch {n.boundary}: {n.text}"
        lines += textwrap.wrap(line, width=columns, subsequent_indent="    ")
    if len(notes) > MAX_NOTES:
        lines.append(f"… and {len(notes) - MAX_NOTES} more decisions (report.md lists them all)")
    return lines


def write_notes(ax: Any, lines: list[str]) -> None:
    """The lines of :func:`note_lines` in an axis of their own (no frame)."""
    from matplotlib.transforms import blended_transform_factory

    ax.axis("off")
    # From the figure's left edge, not the axis's (which lines up with the lanes, right
    # of their labels): the whole width of the figure is what note_lines wraps to.
    ax.text(
        0.01,
        1.0,
        "\n".join(lines),
        transform=blended_transform_factory(ax.figure.transFigure, ax.transAxes),
        va="top",
        ha="left",
        fontsize=NOTE_FONTSIZE,
        family="monospace",
    )
