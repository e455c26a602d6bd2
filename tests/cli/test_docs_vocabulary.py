"""The user-facing docs speak to users: no references to the project's issue tracker
("issue 16", "the issue-16 merge"), which a reader cannot follow."""

from __future__ import annotations

import re

from tests.cli.docs_commands import DOCS
from tests.plugin_set import REPO

TRACKER = re.compile(r"\bissues? \d+|\bissue-\d+", re.I)


def test_no_user_facing_doc_names_the_issue_tracker() -> None:
    named = {
        str(path.relative_to(REPO))
        for path in DOCS
        if TRACKER.search(path.read_text(encoding="utf-8"))
    }
    assert named == set(), "tracker vocabulary in user-facing docs"
