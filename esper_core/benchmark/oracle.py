"""The oracle: the menu entry with the best validation on the tuning seeds (pure).

The same rule that picks a rate (:mod:`esper_core.compare.tuning_choice`): an entry's
score is the mean of its final validation values over the tuning seeds; an entry that
did not train on some tuning seed (diverged, or stalled far behind its other seeds:
:mod:`esper_core.compare.stalls`) is never chosen; of equal scores the first in menu
order wins, and the menu starts with ``wait``. A growth entry's run that ends better
than ``wait`` on the same seed trained, however far below the entry's other runs it
is: the entry's spread is then its own (glyphs' tiny host widened at 0.1 of the run ends
1-8 points above ``wait`` on the three tuning seeds where it falls far below its median,
and 11.6 above on average), and calling it a stall would call growth not worth it where
it wins on every seed. Test values and evaluation seeds are
never read here: an oracle chosen by the metric it is then scored with would flatter
every controller measured against it.

The best entry must also beat ``wait`` by more than the tuning seeds' noise
(:func:`clear_of_noise`): the bootstrap interval of the IQM of its paired differences
over ``wait`` lies above zero. Otherwise growth does not pay on the pair and the oracle
is ``wait``: an oracle whose gain is noise makes ``(policy - wait) / (oracle - wait)``
divide by a number near zero, and scores the pair on nothing where it should be scored
on what growth costs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from attrs import frozen

from esper_core.compare.stalls import StallRule, failed_seeds
from esper_core.compare.stats import Interval, iqm_interval
from esper_core.compare.tuning_choice import choose, score

RULE = (
    "mean final validation value over the tuning seeds, among the entries that trained on "
    "every tuning seed (a run better than wait's on its seed trained); ties: the first "
    "entry in menu order (wait first); wait unless the "
    "best entry's paired difference over wait on the tuning seeds has its interval above 0"
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
    label: str,
    values: Mapping[int, float],
    seeds: Sequence[int],
    higher: bool,
    rule: StallRule,
    others: Sequence[Mapping[int, float]] = (),
    wait: Mapping[int, float] | None = None,
) -> EntryScore:
    """``values``: the finished seeds' validation values (NaN: the run diverged);
    ``others``: the menu's other entries' (a seed hard for all of them is no stall);
    ``wait``: wait's, for a growth entry (a run better than wait's on its seed trained)."""
    complete = all(s in values for s in seeds)
    got = [values[s] for s in seeds if s in values]
    mean = score(got) if complete else math.nan
    failed = tuple(
        s
        for s in (failed_seeds(dict(values), higher, rule, others) if complete else ())
        if wait is None or not _beats(values[s], wait.get(s), higher)
    )
    shown = tuple(values[s] if s in values and math.isfinite(values[s]) else None for s in seeds)
    return EntryScore(label, shown, mean if math.isfinite(mean) else None, failed, complete)


def _beats(value: float, wait: float | None, higher: bool) -> bool:
    if wait is None or not (math.isfinite(value) and math.isfinite(wait)):
        return False
    return value > wait if higher else value < wait


def choose_oracle(entries: Sequence[EntryScore], higher: bool) -> int | None:
    """The index of the oracle's entry; None while any entry has an unfinished seed."""
    if not entries or not all(e.complete for e in entries):
        return None
    eligible = [math.nan if e.failed or e.mean is None else e.mean for e in entries]
    return choose(eligible, higher)


def margin(
    entry: EntryScore, wait: EntryScore, higher: bool, settings: tuple[float, int, int]
) -> Interval | None:
    """The IQM of ``entry - wait`` over the tuning seeds both have (oriented: + is better),
    with its bootstrap interval; None without a common seed. ``settings``: confidence,
    resamples, bootstrap seed."""
    sign = 1.0 if higher else -1.0
    diffs = [
        sign * (a - b) for a, b in zip(entry.values, wait.values) if a is not None and b is not None
    ]
    if not diffs:
        return None
    confidence, resamples, seed = settings
    return iqm_interval([diffs], confidence, resamples, seed)


def clear_of_noise(
    entries: Sequence[EntryScore],
    index: int | None,
    higher: bool,
    settings: tuple[float, int, int],
) -> tuple[int | None, str | None]:
    """The oracle's index once the best entry (``index``) has to beat ``wait`` (entry 0)
    by more than the tuning seeds' noise, and, when it does not, a line saying so."""
    if index is None or index == 0:
        return index, None
    found = margin(entries[index], entries[0], higher, settings)
    if found is not None and found.low is not None and found.low > 0:
        return index, None
    shown = "no common seed" if found is None else _interval(found)
    return 0, (
        f"the best entry, {entries[index].label}, beat wait by {shown} on the tuning seeds: "
        "within their noise, so growth does not pay here"
    )


def _interval(found: Interval) -> str:
    if found.low is None or found.high is None:
        return f"{found.estimate:+.4g}"
    return f"{found.estimate:+.4g} [{found.low:+.4g}, {found.high:+.4g}]"
