"""The user-facing docs speak to users: no references to the project's issue tracker
("issue 16", "the issue-16 merge"), which a reader cannot follow; nor do the examples, the
library's code and the tests, whose docstrings and comments say what and why in words."""

from __future__ import annotations

import re
from pathlib import Path

from tests.cli.docs_commands import DOCS
from tests.plugin_set import REPO

# "issue 16", "Issue 21.2", "issues 33", "issue #50", "issue16", "the issue-16 merge".
TRACKER = re.compile(r"\bissues? ?#?\d+|\bissue-\d+", re.I)


def test_no_user_facing_doc_names_the_issue_tracker() -> None:
    named = {
        str(path.relative_to(REPO))
        for path in DOCS
        if TRACKER.search(path.read_text(encoding="utf-8"))
    }
    assert named == set(), "tracker vocabulary in user-facing docs"


def test_no_example_names_the_issue_tracker() -> None:
    # Example configs and scripts are read by users too (their headers explain a study).
    named = {
        str(path.relative_to(REPO))
        for path in sorted((REPO / "examples").rglob("*"))
        if path.suffix in (".toml", ".py", ".md") and TRACKER.search(path.read_text("utf-8"))
    }
    assert named == set(), "tracker vocabulary in examples/"


def test_no_library_module_names_the_issue_tracker() -> None:
    # Docstrings and error messages are read by users (help(), the API docs, a traceback);
    # a comment says why in words, not by a ticket a reader cannot open.
    roots = ("esper_core", "esper_cli", "plugins", "benchmarks")
    named = {
        str(path.relative_to(REPO))
        for root in roots
        for path in sorted((REPO / root).rglob("*.py"))
        if TRACKER.search(path.read_text("utf-8"))
    }
    assert named == set(), "tracker vocabulary in the library's code"


def test_no_test_names_the_issue_tracker() -> None:
    # The tests' docstrings and comments say what is tested and why, as the library's do.
    # This file is left out: it holds the rule and the examples the rule is checked on.
    named = {
        str(path.relative_to(REPO))
        for path in sorted((REPO / "tests").rglob("*.py"))
        if path.resolve() != Path(__file__).resolve() and TRACKER.search(path.read_text("utf-8"))
    }
    assert named == set(), "tracker vocabulary in tests/"


def test_the_tracker_rule_flags_issue_numbers_only() -> None:
    flagged = TRACKER.findall(
        "issue 16; Issue 21.2; issues 33 and 53; (issue #50); issue16; the issue-16 merge; "
        "issue 53's cases"
    )
    assert flagged == [
        *("issue 16", "Issue 21", "issues 33", "issue #50", "issue16", "issue-16"),
        "issue 53",
    ]
    assert TRACKER.findall("an issue with 3 files; the tissue 4; issues: 5; `#33`") == []


# "Seed" is the grown module; the number that seeds a generator is a "random seed". Three
# uses can only mean the number, and each must say "random": a seed set named by its role
# ("tuning seeds", "evaluation seed"), a seed given by its value ("seeds 3000-3009", "seed
# 100"; not `--seed 3` or `run.seed`), and a count of runs ("on 10 of 10 seeds"). The
# module is never named so ("seed 2 germinates" would be "the seed in r0c1").
RANDOM_SEED = (
    re.compile(r"\b(?:tuning|evaluation|eval|training|fresh|split|held-out)[ -]seeds?\b", re.I),
    re.compile(r"(?<![-\w.`'\"/])(?<!random )seeds? \d", re.I),
    re.compile(r"\b\d+ of \d+ (?:(?!random\b)[A-Za-z]+ )?seeds\b"),
)
# configuration.md is generated from the config's help strings (esper_core/config.py);
# architecture.md names modules by what they hold.
NOT_PROSE = ("docs/configuration.md", "docs/architecture.md")


def random_seed_misuses(text: str) -> list[str]:
    return [m.group(0) for rule in RANDOM_SEED for m in rule.finditer(text)]


def test_the_number_is_a_random_seed_in_every_doc() -> None:
    found = {
        where: hits
        for path in DOCS
        if (where := str(path.relative_to(REPO))) not in NOT_PROSE
        and (hits := random_seed_misuses(path.read_text(encoding="utf-8")))
    }
    assert found == {}, 'say "random seed(s)" for the number: ' + repr(found)


def test_the_rule_flags_the_number_and_not_the_module() -> None:
    flagged = random_seed_misuses(
        "tuning seeds 100-102; evaluation seed; seeds 3000-3009; Seed 4; on 10 of 10 seeds; "
        "worse on 4 of 4 fresh seeds"
    )
    assert sorted(flagged) == sorted(
        [
            *("tuning seeds", "evaluation seed", "fresh seeds", "seeds 1", "seeds 3", "Seed 4"),
            *("10 of 10 seeds", "4 of 4 fresh seeds"),
        ]
    )
    assert (
        random_seed_misuses(
            "tuning random seeds 100-102; random seeds 3000-3009; 10 of 10 random seeds; "
            "`--seed 3`, run.seed 3, --seeds 10; each seed's contribution; 2 seeds germinated; "
            "a seed of 27 times the host"
        )
        == []
    )
