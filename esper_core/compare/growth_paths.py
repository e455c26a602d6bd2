"""Where growth moved a grown run: its path in (cost, metric) on the frontier plot.

A run of a growing policy ends as one point of ``pareto.png`` (its final cost and test
value); its *path* says how it got there. It is read from the run's per-epoch
``epoch_completed`` events (``events.jsonl``, written by the ``jsonl`` telemetry
backend), which record the stage and parameter count of every slot and the training
FLOPs of the episode so far, so nothing is re-run and no checkpoint is read.

A :class:`PathPoint` is the end of an epoch:

- ``params_forward``: the host plus every seed blended into the output then (BLENDING,
  HOLDING, FOSSILIZED), as :func:`esper_core.env.cost.params_forward` counts it;
- ``train_flops``: the training FLOPs (forward + backward) of the episode up to and
  including that epoch;
- ``value``: the **validation** metric of that epoch (``val_acc`` in %, or ``val_loss``
  for a task whose frontier is in loss), because comparisons run with
  ``env.eval_test_every = 0`` and there is no test number along the way. Only the last
  point is the run's final **test** value (``final_test_acc`` / ``final_test_loss``), at
  the run's final cost: the very point the run contributes to the results.

The points: ``start`` (the end of the first epoch: the first with a value and some FLOPs,
so it sits on a log axis), then every epoch where growth changed the forward computation
(``grew``: a seed entered the forward pass, with ``lifecycle.isolation = "none"`` in the
epoch of its germination; ``fossilized``; ``pruned``: a blended seed left it, by the
policy or a rollback), the last epoch (``last``, validation) and ``end`` (test). A seed
pruned while still incubating never touched the output and makes no point.

No path (``None``): the run never put a seed in its forward pass (its point is all there
is to draw), or it did not record what a path needs (no ``events.jsonl``: the ``jsonl``
backend was off, or the file is damaged; events from before the epoch events carried
``train_flops``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from attrs import field, frozen

from esper_core.compare.metric import ACCURACY
from esper_core.compare.result_key import FIXED_ARCHITECTURE
from esper_core.lifecycle.rules import BLENDED_STAGES
from esper_core.lifecycle.stages import Stage
from esper_core.run.telemetry import EpisodeFinished, EpochCompleted, SchemaError, event_from_dict

if TYPE_CHECKING:
    from esper_core.compare.experiment import Experiment
    from esper_core.compare.results import CellResult

EVENTS_FILE = "events.jsonl"  # the jsonl telemetry backend's file in a run directory
# Slot stages as the events spell them.
BLENDED = frozenset(stage.value for stage in BLENDED_STAGES)
FOSSILIZED = Stage.FOSSILIZED.value
# The validation metric that stands for a frontier metric along the path.
VALIDATION = {"final_test_acc": "val_acc", "final_test_loss": "val_loss"}
READ_KINDS = frozenset({EpochCompleted.kind, EpisodeFinished.kind})


@frozen
class PathPoint:
    epoch: int
    params_forward: float
    train_flops: float
    value: float
    metric: str  # val_acc / val_loss along the path; the frontier's test metric at the end
    events: list[str] = field(factory=list)  # start, grew, fossilized, pruned, last, end


@frozen
class GrowthPath:
    task: str
    policy: str
    seed: int
    points: list[PathPoint]


@frozen
class FinalPoint:
    """The run's own point in the results: final cost and test value."""

    params_forward: float
    train_flops: float
    value: float
    metric: str  # final_test_acc or final_test_loss


def _forward(epoch: EpochCompleted) -> dict[str, str]:
    """The seeds in the forward pass at the end of the epoch: slot -> stage."""
    return {f"{s.slot_id}/{s.seed_id}": s.stage for s in epoch.slots if s.stage in BLENDED}


def _forward_params(epoch: EpochCompleted) -> int:
    return epoch.host_params + sum(s.seed_params for s in epoch.slots if s.stage in BLENDED)


def _changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    out = []
    if set(after) - set(before):
        out.append("grew")
    if any(after[k] == FOSSILIZED != before.get(k) for k in after):
        out.append("fossilized")
    if set(before) - set(after):
        out.append("pruned")
    return out


def growth_path(epochs: Sequence[EpochCompleted], final: FinalPoint) -> list[PathPoint] | None:
    """The path of one episode from its epoch events (any order; of an epoch written twice,
    by a resumed run, the last); ``None`` when nothing grew or the FLOPs were not recorded."""
    by_epoch = {e.epoch: e for e in epochs}
    ordered = [by_epoch[k] for k in sorted(by_epoch)]
    if not ordered or any(e.train_flops <= 0 for e in ordered):
        return None
    metric = VALIDATION[final.metric]

    def point(e: EpochCompleted, events: list[str]) -> PathPoint:
        value = e.val_acc if metric == "val_acc" else e.val_loss
        return PathPoint(
            e.epoch, float(_forward_params(e)), float(e.train_flops), value, metric, events
        )

    points: list[PathPoint] = []
    before: dict[str, str] = {}
    grew = False
    for i, e in enumerate(ordered):
        after = _forward(e)
        changes = _changes(before, after)
        grew = grew or bool(after)
        first, last = i == 0, i == len(ordered) - 1
        labels = (["start"] if first else []) + changes + (["last"] if last else [])
        if first or changes or last:
            points.append(point(e, labels))
        before = after
    if not grew:
        return None
    end = PathPoint(
        ordered[-1].epoch,
        final.params_forward,
        final.train_flops,
        final.value,
        final.metric,
        ["end"],
    )
    return [*points, end]


def read_epochs(run_dir: Path) -> list[EpochCompleted] | None:
    """The epoch events of the run's (last finished) episode; ``None`` without a readable
    events.jsonl: a path is a figure's detail, so a damaged log draws no path rather than
    stopping the comparison (its numbers come from summary.json, not from here)."""
    path = run_dir / EVENTS_FILE
    if not path.is_file():
        return None
    epochs: list[EpochCompleted] = []
    last: tuple[int, int] | None = None
    try:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            # Parsing only the lines a path needs keeps long runs (many gate events) quick.
            if not any(f'"{kind}"' in line for kind in READ_KINDS):
                continue
            data = json.loads(line)
            if data.get("kind") not in READ_KINDS:
                continue
            event = event_from_dict(data, f"{path}:{number}")
            if isinstance(event, EpochCompleted):
                epochs.append(event)
            elif isinstance(event, EpisodeFinished):
                last = (event.env, event.episode)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, SchemaError):
        return None
    env, episode = last or (0, 0)
    return [e for e in epochs if e.env == env and e.episode == episode]


def read_growth_path(
    run_dir: Path, task: str, policy: str, seed: int, final: FinalPoint
) -> GrowthPath | None:
    epochs = read_epochs(run_dir)
    points = growth_path(epochs, final) if epochs else None
    return GrowthPath(task, policy, seed, points) if points else None


def growth_paths(
    experiment: Experiment,
    results: Sequence[CellResult],
    metrics: Mapping[str, str] | None = None,
) -> list[GrowthPath]:
    """The path of every finished cell of a policy that can grow (not ``wait``, ``static``,
    a static-final baseline or a sweep size), in ``results`` order; ``metrics``: task label
    -> its frontier metric (default: test accuracy)."""
    growing = {p.label for p in experiment.policies if p.name not in FIXED_ARCHITECTURE}
    out = []
    for r in results:
        if r.policy not in growing:
            continue
        metric = (metrics or {}).get(r.task, ACCURACY)
        final = FinalPoint(r.params_forward, r.train_flops, r.value(metric), metric)
        path = read_growth_path(Path(r.run_dir), r.task, r.policy, r.seed, final)
        if path is not None:
            out.append(path)
    return out
