"""A learned method trained in several independent runs, one checkpoint each.

A policy entry with ``checkpoints`` (``name = "ppo"``, ``checkpoints = [A, B, C]``)
becomes one ordinary arm per training run, ``LABEL.run-1`` with spec ``ppo:A`` and so
on, each reported like any other policy; the :class:`TrainingGroup` names them together
so the method is also reported across its training runs
(:mod:`esper_core.compare.training_runs`). One training run says how well one trained
policy does, not how well the training method does: that needs several.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
from attrs import frozen

from esper_core.compare.labels import label_problem
from esper_core.run.run_dir import CHECKPOINT

if TYPE_CHECKING:
    from esper_core.compare.entries import PolicyEntry

MIN_TRAINING_RUNS = 2


@frozen
class TrainingGroup:
    """One method trained in several independent runs: its arms, one per checkpoint."""

    label: str
    arms: tuple[str, ...]  # the arms' labels, LABEL.run-1 ... in checkpoint order
    checkpoints: tuple[str, ...]


def run_label(label: str, k: int) -> str:
    return f"{label}.run-{k}"


def same_run_key(checkpoint: str) -> str:
    """What tells two entries of ``checkpoints`` apart: the file they name (a run
    directory names its checkpoint.pt; ``./``, ``..`` and links resolved, as the policy
    resolves them when it loads), or, for a file that exists, its content (a copied run
    directory is the same training run)."""
    path = Path(checkpoint).expanduser()
    if path.is_dir():
        path = path / CHECKPOINT
    try:
        with path.open("rb") as f:
            return "sha256:" + hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:  # not there (yet): the path alone
        return os.path.realpath(path)


def _problem(i: int, entry: PolicyEntry, name: str) -> str | None:
    checkpoints = entry.checkpoints
    if ":" in name:
        bare = name.partition(":")[0].strip()
        return (
            f"policies[{i}].name: {name!r} takes no argument with checkpoints; "
            f'write name = "{bare}" and list every training run\'s checkpoint in checkpoints'
        )
    if len(checkpoints) < MIN_TRAINING_RUNS:
        return (
            f"policies[{i}] ({name}): checkpoints lists {len(checkpoints)} training run; list "
            f'at least {MIN_TRAINING_RUNS}, or write name = "{name}:{checkpoints[0]}" for one policy'
        )
    seen: dict[str, str] = {}
    for c in checkpoints:
        key = same_run_key(c)
        if key in seen:
            # The same policy twice is one training run counted twice, not two runs.
            same = (
                "is listed twice"
                if seen[key] == c
                else f"is the same training run as {seen[key]!r} (the same file, or a copy)"
            )
            return (
                f"policies[{i}] ({name}): checkpoint {c!r} {same}; "
                "list each independent training run's checkpoint once"
            )
        seen[key] = c
    problem = label_problem(entry.label or name)
    return f"policy {name!r}: label: {problem}; give it a `label`" if problem else None


def expand_training_groups(
    entries: Sequence[PolicyEntry],
) -> tuple[list[PolicyEntry], list[TrainingGroup], list[str]]:
    """The entries with each one that has ``checkpoints`` replaced by one entry per
    training run; the groups; the problems (an entry with one is left out)."""
    out: list[PolicyEntry] = []
    groups: list[TrainingGroup] = []
    problems: list[str] = []
    for i, entry in enumerate(entries):
        name = (entry.name or "").strip()
        if not entry.checkpoints or not name:
            out.append(entry)  # a missing name is reported with every other entry's
            continue
        problem = _problem(i, entry, name)
        if problem is not None:
            problems.append(problem)
            continue
        label = entry.label or name
        runs = [
            attrs.evolve(
                entry,
                name=f"{name}:{c}",
                label=run_label(label, k),
                options=dict(entry.options),
                checkpoints=[],
            )
            for k, c in enumerate(entry.checkpoints, 1)
        ]
        out += runs
        arms = tuple(run_label(label, k) for k in range(1, len(runs) + 1))
        groups.append(TrainingGroup(label, arms, tuple(entry.checkpoints)))
    return out, groups, problems


def group_problems(
    groups: Sequence[TrainingGroup], labels: Sequence[str], baseline: str | None
) -> list[str]:
    """A method's label is no policy's: neither another arm's label nor the baseline."""
    problems = [
        f"label {g.label!r} names both a method trained in several runs and a policy; "
        "give them distinct `label`s"
        for g in groups
        if g.label in labels
    ]
    problems += [
        f"baseline {baseline!r} is a method trained in {len(g.arms)} runs, not one policy; "
        "name one policy as the baseline: the method is compared against it across its runs"
        for g in groups
        if g.label == baseline
    ]
    return problems
