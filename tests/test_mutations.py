"""The mutation check in CI (see tests/mutations.py): each listed one-line bug in the
PPO loss, the GAE, the heuristic's rules and the reward families' terminal terms must
make at least one fast test fail."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.mutant_fork import Forker
from tests.mutations import MUTATIONS, Mutation, applies, run


@pytest.fixture(scope="module")
def forker() -> Iterator[Forker]:
    forker = Forker()
    yield forker
    forker.close()


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.name)
def test_the_mutation_still_applies(mutation: Mutation) -> None:
    """The source still holds the snippet each mutation replaces (a rename must update
    the table, not silently retire a mutation)."""
    assert applies(mutation) is None, applies(mutation)


@pytest.mark.slow
@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.name)
def test_the_fast_tests_catch_the_mutation(mutation: Mutation, forker: Forker) -> None:
    outcome = run(mutation, forker)
    assert outcome.caught, (
        f"mutation {mutation.name!r} SURVIVED: {mutation.original!r} -> {mutation.mutated!r} "
        f"in {mutation.package}/{mutation.module}, and every test of "
        f"{', '.join(mutation.tests)} still passes:\n{outcome.output[-2000:]}"
    )
