"""Terminal output that survives a pipe: tables and lines that never split a value.

A table is fitted to the console's width (``COLUMNS`` off a terminal, 80 by default) when
its cells can wrap between words: a list of names or a description takes more lines, a
name stays whole. Where even that does not fit, a terminal folds the long names (never
"…"), and a pipe (``| cat``, ``| grep``, a log file) gets the table at its natural width,
one line per row. Off a terminal prose is never wrapped (``soft_wrap``): a line is as long
as what it says. A table with many columns of intervals (``esper compare``) reads better as
one record per row than as a table of folded cells: :func:`print_records` prints it so
wherever it does not fit.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.measure import Measurement
from rich.segment import Segments
from rich.table import Table

# Wide enough for any table's natural width to be measured rather than capped.
_UNBOUNDED = 100_000


def output_console(stderr: bool = False) -> Console:
    """The console of a command's output. Off a terminal, ``soft_wrap``: a line is as long
    as what it says (rich would otherwise wrap at ``COLUMNS``, 80 by default, mid-sentence)."""
    console = Console(stderr=stderr)
    return console if console.is_terminal else Console(stderr=stderr, soft_wrap=True)


def _measure(console: Console, table: Table) -> Measurement:
    return Measurement.get(console, console.options.update_width(_UNBOUNDED), table)


def natural_width(console: Console, table: Table) -> int:
    """The width ``table`` takes when nothing in it is wrapped."""
    return _measure(console, table).maximum


def fits(console: Console, table: Table) -> bool:
    return natural_width(console, table) <= console.width


def print_table(console: Console, table: Table) -> None:
    """``table`` at the console's width when its cells can wrap between words to fit (a
    list of names, a description); else, on a terminal, with long names folded; off a
    terminal, at its natural width, one line per row. No name is ever cut with "…"."""
    for column in table.columns:
        if not column.no_wrap:
            column.overflow = "fold"  # a word longer than its column folds, never "…"
    if _measure(console, table).minimum <= console.width:
        console.print(table)  # every word fits whole: rich wraps only between words
        return
    if console.is_terminal:
        for column in table.columns:
            # Rich cuts a no_wrap cell that does not fit with "…": fold it instead.
            column.overflow, column.no_wrap = "fold", False
        console.print(table)
        return
    width = natural_width(console, table)
    console.print(Segments(console.render(table, console.options.update_width(width))), crop=False)


def table(title: str, header: Sequence[str]) -> Table:
    """A table whose first column holds names (left) and the others values (right)."""
    out = Table(title=title, title_justify="left")
    for i, column in enumerate(header):
        out.add_column(column, justify="left" if i == 0 else "right", overflow="fold")
    return out


def print_records(
    console: Console, title: str, header: Sequence[str], rows: Sequence[Sequence[str]]
) -> None:
    """One table, as a table where it fits the console (on a terminal), else as one record
    per row: the row's first cell, then each other column as ``name  value`` on its own
    line, so a value such as ``62.63 [58.90, 66.36]`` is never split across lines."""
    shown = table(title, header)
    for row in rows:
        shown.add_row(*row)
    if console.is_terminal and fits(console, shown):
        console.print(shown)
        return
    console.print(title, style="bold", highlight=False)
    pad = max((len(h) for h in header[1:]), default=0)
    for row in rows:
        console.print(f"  {row[0]}", highlight=False, markup=False)
        for name, value in zip(header[1:], row[1:]):
            console.print(f"    {name:<{pad}}  {value}", highlight=False, markup=False)
