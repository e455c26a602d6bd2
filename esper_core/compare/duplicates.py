"""Cells that would repeat another cell's run: trained once, copied for the others.

Two cells with the same settings that decide a result (:func:`result_key`) give the same
result: the size sweep's point at the policies' own host size is ``wait`` (``sweep.small``
of examples/growth-glyphs.toml), and the ``static-final`` twin of a run that did not grow
is ``wait`` too. In a search, ``wait`` and the sweep's size of the same host try the same
points, and grid points that differ only in a setting an arm does not use (a heuristic
option, for ``wait``) are one run of that arm. The first such cell runs; each other one becomes a copy of its finished
directory, so every table, plot and later run of the experiment reads it as an ordinary
finished cell. A plain copy, not hard links: a later write into one directory (a report,
an appended log) must not change the other.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from esper_core.compare.cell_dirs import CellState, cell_state
from esper_core.compare.experiment import Cell
from esper_core.compare.result_key import result_key


def originals(cells: Sequence[Cell], before: Sequence[Cell] = ()) -> dict[Cell, Cell]:
    """Each cell of ``cells`` that repeats an earlier one (of ``before`` or ``cells``),
    mapped to the first cell of its settings."""
    first: dict[str, Cell] = {}
    for cell in before:
        first.setdefault(result_key(cell.config), cell)
    out: dict[Cell, Cell] = {}
    for cell in cells:
        original = first.setdefault(result_key(cell.config), cell)
        if original is not cell:
            out[cell] = original
    return out


def copy_finished(duplicates: dict[Cell, Cell], root: Path) -> list[Cell]:
    """Copy each finished original over its duplicate's directory; the duplicates copied."""
    copied = []
    for cell, original in duplicates.items():
        source, target = original.directory(root), cell.directory(root)
        if cell_state(source) is not CellState.COMPLETED:
            continue
        if cell_state(target) is CellState.COMPLETED:
            continue  # copied (or run) before
        if target.exists():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(source, target)
        copied.append(cell)
    return copied


def repeats(searched: Sequence[Cell], cells: Sequence[Cell]) -> dict[Cell, Cell]:
    """The cells of the search and of the evaluation that repeat an earlier one of their
    phase. None repeats one of the other phase: tuning seeds are never evaluation seeds."""
    return {**originals(searched), **originals(cells)}
