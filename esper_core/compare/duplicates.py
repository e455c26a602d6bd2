"""Cells that would repeat another cell's run: trained once, copied for the others.

Two cells with the same settings that decide a result (:func:`result_key`) give the same
result: the size sweep's point at the policies' own host size is ``wait`` (``sweep.small``
of examples/growth-glyphs.toml), and the ``static-final`` twin of a run that did not grow
is ``wait`` too. The first such cell runs; each other one becomes a copy of its finished
directory (hard links: nothing is written twice), so every table, plot and later run of
the experiment reads it as an ordinary finished cell.
"""

from __future__ import annotations

import os
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


def _link(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or links not allowed: a plain copy
        shutil.copy2(source, target)


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
        shutil.copytree(source, target, copy_function=_link)
        copied.append(cell)
    return copied
