"""The oracle: the menu entry with the best validation on the tuning seeds (pure).

The same rule that picks a rate (:mod:`esper_core.compare.tuning_choice`): an entry's
score is the mean of its final validation values over the tuning seeds; an entry that
did not train on some tuning seed (diverged, or stalled far behind its other seeds:
:mod:`esper_core.compare.stalls`) is never chosen; of equal scores the first in menu
order wins, and the menu starts with ``wait``. Test values and evaluation seeds are
never read here: an oracle chosen by the metric it is then scored with would flatter
every controller measured against it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from attrs import frozen

from esper_core.compare.stalls import StallRule, failed_seeds
from esper_core.compare.tuning_choice import choose, score

RULE = (
    "mean final validation value over the tuning seeds, among the entries that trained on "
    "every tuning seed; ties: the first entry in menu order (wait first)"
)


@frozen
class EntryScore:
    """One menu entry on the tuning seeds: per seed its validation value (None: not
    finished, or not finite), their mean, the seeds on which it did not train, and
    whether every seed has finished."""

    label: str
    values: tuple[float | None, ...]
    mean: float | None
    failed: tuple[int, ...] = ()
    complete: bool = True


def entry_score(
    label: str, values: Mapping[int, float], seeds: Sequence[int], higher: bool, rule: StallRule
) -> EntryScore:
    """``values``: the finished seeds' validation values (NaN: the run diverged)."""
    complete = all(s in values for s in seeds)
    got = [values[s] for s in seeds if s in values]
    mean = score(got) if complete else math.nan
    failed = tuple(failed_seeds(dict(values), higher, rule)) if complete else ()
    shown = tuple(values[s] if s in values and math.isfinite(values[s]) else None for s in seeds)
    return EntryScore(label, shown, mean if math.isfinite(mean) else None, failed, complete)


def choose_oracle(entries: Sequence[EntryScore], higher: bool) -> int | None:
    """The index of the oracle's entry; None while any entry has an unfinished seed."""
    if not entries or not all(e.complete for e in entries):
        return None
    eligible = [math.nan if e.failed or e.mean is None else e.mean for e in entries]
    return choose(eligible, higher)
