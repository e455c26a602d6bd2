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

The host's own growth (the ``host_growth_*`` events, schema 4) is a jump: at the epoch a
growth started, the path goes from the host's parameters before it (a point with no
label) to those after (``host_grew``, whose ``note`` names the operator, its parameter
factor and, where the next epoch was trained, the factor of the training FLOPs per epoch:
"width 4x: parameters x14.1, FLOPs per epoch x11.0"). The training FLOPs are cumulative,
so on that axis the jump is the steeper climb that follows. ``host_fossilized`` and
``host_pruned`` label the epochs it was folded in or removed. For a policy whose seeds are
fixed at birth (``static``) only the host's growth makes points: its seeds are its
architecture, not growth.

No path (``None``): the run never put a seed in its forward pass nor grew its host (its
point is all there is to draw), or it did not record what a path needs (no
``events.jsonl``: the ``jsonl`` backend was off, or the file cannot be read as events;
events from before the epoch events carried ``train_flops``). An event that reads but
holds what no run writes (a ``val_acc`` of 1e300) is refused in one line, by the checks
``esper report`` applies (:func:`esper_core.run.event_fields.check_fields`): its number
would otherwise be drawn, and written to results.json, as measured.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
from attrs import field, frozen

from esper_core.compare.metric import ACCURACY
from esper_core.compare.result_key import FIXED_ARCHITECTURE
from esper_core.lifecycle.rules import BLENDED_STAGES
from esper_core.lifecycle.stages import Stage
from esper_core.run.event_fields import check_fields
from esper_core.run.telemetry import (
    EpisodeFinished,
    EpochCompleted,
    HostGrowthFossilized,
    HostGrowthPruned,
    HostGrowthStarted,
    RunStarted,
    SchemaError,
    event_from_dict,
)

if TYPE_CHECKING:
    from esper_core.compare.cell_result import CellResult
    from esper_core.compare.experiment import Experiment

EVENTS_FILE = "events.jsonl"  # the jsonl telemetry backend's file in a run directory
# Slot stages as the events spell them.
BLENDED = frozenset(stage.value for stage in BLENDED_STAGES)
FOSSILIZED = Stage.FOSSILIZED.value
# The validation metric that stands for a frontier metric along the path.
VALIDATION = {"final_test_acc": "val_acc", "final_test_loss": "val_loss"}
HostGrowthEvent = HostGrowthStarted | HostGrowthFossilized | HostGrowthPruned
HOST_KINDS = {
    HostGrowthStarted.kind: "host_grew",
    HostGrowthFossilized.kind: "host_fossilized",
    HostGrowthPruned.kind: "host_pruned",
}
# run_started for its max_epochs, the bound of every epoch the checks read.
READ_KINDS = frozenset({RunStarted.kind, EpochCompleted.kind, EpisodeFinished.kind, *HOST_KINDS})


@frozen
class PathPoint:
    epoch: int
    params_forward: float
    train_flops: float
    value: float
    metric: str  # val_acc / val_loss along the path; the frontier's test metric at the end
    # start, grew, fossilized, pruned, host_grew, host_fossilized, host_pruned, last, end
    events: list[str] = field(factory=list)
    note: str = ""  # a host_grew point: the operator and its jump (see the module's doc)


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


def _jump(started: HostGrowthStarted, ordered: Sequence[EpochCompleted]) -> str:
    """``width 4x: parameters x14.1, FLOPs per epoch x11.0`` (the FLOPs where the epochs
    on both sides of the growth were trained)."""
    before, after = started.widths_before, started.widths_after
    ratios = {round(after[k] / v, 3) for k, v in before.items() if v and after.get(k, v) != v}
    shape = f"{ratios.pop():g}x" if len(ratios) == 1 else started.plan
    note = f"{started.operator} {shape}: parameters x{started.params_after / max(started.params_before, 1):.1f}"
    flops = {e.epoch: e.train_flops for e in ordered}
    e = started.epoch
    if e in flops and e + 1 in flops and (e - 1 in flops or e == 1):
        was = flops[e] - flops.get(e - 1, 0)
        now = flops[e + 1] - flops[e]
        if was > 0:
            note += f", FLOPs per epoch x{now / was:.1f}"
    return note


def growth_path(
    epochs: Sequence[EpochCompleted],
    final: FinalPoint,
    host_growths: Sequence[HostGrowthEvent] = (),
    seeds: bool = True,
) -> list[PathPoint] | None:
    """The path of one episode from its epoch events (any order; of an epoch written twice,
    by a resumed run, the last) and its host growth events; ``seeds``: whether its seeds'
    changes are growth (not for a policy that installs them at birth). ``None`` when
    nothing grew or the FLOPs were not recorded."""
    by_epoch = {e.epoch: e for e in epochs}
    ordered = [by_epoch[k] for k in sorted(by_epoch)]
    if not ordered or any(e.train_flops <= 0 for e in ordered):
        return None
    metric = VALIDATION[final.metric]
    first_epoch = ordered[0].epoch
    host: dict[int, list[HostGrowthEvent]] = {}
    for event in host_growths:
        # A growth before the first epoch shows on the first point, as a germination would.
        host.setdefault(max(event.epoch, first_epoch), []).append(event)

    def point(e: EpochCompleted, events: list[str], params: int | None = None) -> PathPoint:
        value = e.val_acc if metric == "val_acc" else e.val_loss
        forward = _forward_params(e) if params is None else params
        return PathPoint(e.epoch, float(forward), float(e.train_flops), value, metric, events)

    points: list[PathPoint] = []
    before: dict[str, str] = {}
    grew = False
    for i, e in enumerate(ordered):
        after = _forward(e)
        changes = _changes(before, after) if seeds else []
        grew = grew or (bool(after) and seeds)
        first, last = i == 0, i == len(ordered) - 1
        hosted = host.get(e.epoch, [])
        started = [h for h in hosted if isinstance(h, HostGrowthStarted)]
        changes += [HOST_KINDS[h.kind] for h in hosted if not isinstance(h, HostGrowthStarted)]
        grew = grew or bool(hosted)
        labels = (["start"] if first else []) + changes
        if started:
            # The jump: the same epoch at the host's size before, then after the growth.
            seeds_forward = _forward_params(e) - e.host_params
            points.append(point(e, labels, started[0].params_before + seeds_forward))
            labels = ["host_grew"] + (["last"] if last else [])
            note = "; ".join(_jump(h, ordered) for h in started)
            points.append(attrs.evolve(point(e, labels), note=note))
        else:
            labels += ["last"] if last else []
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
    read = read_episode(run_dir)
    return None if read is None else read[0]


def read_episode(
    run_dir: Path,
) -> tuple[list[EpochCompleted], list[HostGrowthEvent]] | None:
    """The epoch events and host growth events of the run's (last finished) episode;
    ``None`` without a readable events.jsonl (see :func:`read_epochs`)."""
    path = run_dir / EVENTS_FILE
    if not path.is_file():
        return None
    epochs: list[EpochCompleted] = []
    growths: list[HostGrowthEvent] = []
    last: tuple[int, int] | None = None
    max_epochs: int | None = None
    try:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            # Parsing only the lines a path needs keeps long runs (many gate events) quick.
            if not any(f'"{kind}"' in line for kind in READ_KINDS):
                continue
            data = json.loads(line)
            if data.get("kind") not in READ_KINDS:
                continue
            event = event_from_dict(data, f"{path}:{number}")
            check_fields(data, event, f"{path}:{number}", max_epochs)
            if isinstance(event, RunStarted):
                max_epochs = event.max_epochs if max_epochs is None else max_epochs
            elif isinstance(event, EpochCompleted):
                epochs.append(event)
            elif isinstance(event, EpisodeFinished):
                last = (event.env, event.episode)
            elif isinstance(event, HostGrowthStarted | HostGrowthFossilized | HostGrowthPruned):
                growths.append(event)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, SchemaError):
        return None
    env, episode = last or (0, 0)
    return (
        [e for e in epochs if e.env == env and e.episode == episode],
        [g for g in growths if g.env == env and g.episode == episode],
    )


def read_growth_path(
    run_dir: Path, task: str, policy: str, seed: int, final: FinalPoint, seeds: bool = True
) -> GrowthPath | None:
    read = read_episode(run_dir)
    points = growth_path(read[0], final, read[1], seeds) if read and read[0] else None
    return GrowthPath(task, policy, seed, points) if points else None


def growth_paths(
    experiment: Experiment,
    results: Sequence[CellResult],
    metrics: Mapping[str, str] | None = None,
) -> list[GrowthPath]:
    """The path of every finished cell of a policy arm that grew, in ``results`` order:
    by seeds (any policy but ``wait`` and ``static``) or by its host's own growth (any
    arm, ``static`` with ``widen_at`` too); not a static-final baseline or a sweep size.
    ``metrics``: task label -> its frontier metric (default: test accuracy)."""
    arms = {p.label: p.name not in FIXED_ARCHITECTURE for p in experiment.policies}
    out = []
    for r in results:
        if r.policy not in arms:
            continue
        metric = (metrics or {}).get(r.task, ACCURACY)
        final = FinalPoint(r.params_forward, r.train_flops, r.value(metric), metric)
        path = read_growth_path(
            Path(r.run_dir), r.task, r.policy, r.seed, final, seeds=arms[r.policy]
        )
        if path is not None:
            out.append(path)
    return out
