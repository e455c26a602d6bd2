"""The README stays a user's first page: short, its answer to "will this help my model?"
on the first screen, its results table a few one-line rows that each link the page
holding the figures; every results page is listed in docs/results/README.md.

Results pages kept flowing back into the README (it reached 266 lines, with table rows of
769 characters); these limits keep the figures in docs/results/."""

from __future__ import annotations

import re

from tests.plugin_set import REPO

README = REPO / "README.md"
RESULTS = REPO / "docs" / "results"
MAX_LINES = 150
MAX_ROW = 200
MAX_ROWS = 6
FIRST_SCREEN = 50
ANSWER = "## Will it help my model, and when?"
TABLE_HEADER = "| task | what grew | vs not growing |"
LINK = re.compile(r"\]\((docs/results/[^)#]+\.md)(?:#[^)]*)?\)")


def _lines() -> list[str]:
    return README.read_text(encoding="utf-8").splitlines()


def _table(lines: list[str]) -> tuple[str, list[str]]:
    """The results table's header and its rows: the lines after the separator up to the
    first line that is not a table line."""
    (start,) = [i for i, x in enumerate(lines) if x.startswith(TABLE_HEADER)]
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return lines[start], rows


def test_the_readme_is_short() -> None:
    assert len(_lines()) <= MAX_LINES, f"README.md: {len(_lines())} lines > {MAX_LINES}"


def test_the_answer_and_the_table_are_on_the_first_screen() -> None:
    lines = _lines()
    assert ANSWER in lines[:FIRST_SCREEN]
    header, _ = _table(lines)
    assert lines.index(header) < FIRST_SCREEN


def test_every_results_row_is_one_short_line_linking_its_page() -> None:
    header, rows = _table(_lines())
    assert 1 <= len(rows) <= MAX_ROWS, f"{len(rows)} rows in the results table"
    width = header.count("|")
    # Continuation lines of a wrapped row would start without "|" and end the table: a row
    # that is one line has the header's cells and ends with "|".
    for row in rows:
        assert len(row) <= MAX_ROW, f"{len(row)} characters > {MAX_ROW}: {row}"
        assert row.rstrip().endswith("|") and row.count("|") == width, row
        (page,) = LINK.findall(row.split("|")[1])
        assert (REPO / page).is_file(), f"{page} does not exist"


def test_the_results_index_lists_every_results_page() -> None:
    index = (RESULTS / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([^)#]+\.md)\)", index))
    pages = {p.name for p in RESULTS.glob("*.md") if p.name != "README.md"}
    assert pages <= linked, f"not listed in docs/results/README.md: {sorted(pages - linked)}"
    for page in linked:
        assert (RESULTS / page).is_file(), f"docs/results/README.md links {page}, missing"
