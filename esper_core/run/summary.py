"""summary.json: what a finished (or stopped) run reports, as one typed value."""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING, Any

from attrs import field, frozen

from esper_core.converter import unstructure
from esper_core.run.checkpoint import write_json
from esper_core.run.ledger import SeedRecord
from esper_core.run.run_dir import SUMMARY, run_file
from esper_core.run.telemetry import RunFinished

if TYPE_CHECKING:
    from esper_core.run.session import Session


@frozen
class RunSummary:
    """The contents of summary.json; ``esper compare`` and ``esper report`` read it back."""

    run_name: str
    mode: str  # "run" or "train"
    status: str  # "completed", "interrupted", "failed"
    task: str
    policy: str
    reward: str
    seed: int
    n_envs: int
    episodes_completed: int
    final_test_acc_mean: float | None
    final_val_acc_mean: float | None
    params_added_mean: float | None
    host_params: int | None
    seeds_fossilized: int
    seeds_pruned: int
    rollbacks: int
    refused_actions: int
    reward_components: dict[str, float]  # summed over every episode
    episodes: list[dict[str, Any]]  # each an EpisodeFinished event, without its time
    seeds: list[SeedRecord]
    updates: list[dict[str, float]]  # the diagnostics of each policy update (train)
    wall_time: float
    # Telemetry backends disabled after a bug in them (name -> what it raised): their
    # records stop there, which the summary says rather than leaving it to a log line.
    telemetry_disabled: dict[str, str] = field(factory=dict)


def _mean(values: list[Any]) -> float | None:
    return statistics.fmean(values) if values else None


def build_summary(session: Session, status: str) -> RunSummary:
    cfg = session.config
    episodes = session.episodes
    totals: dict[str, float] = {}
    for e in episodes:
        for key, value in e["reward_components"].items():
            totals[key] = totals.get(key, 0.0) + value
    return RunSummary(
        run_name=session.run_dir.name,
        mode=session.mode,
        status=status,
        task=cfg.run.task,
        policy=cfg.run.policy,
        reward=cfg.run.reward,
        seed=cfg.run.seed,
        n_envs=len(session.envs),
        episodes_completed=len(episodes),
        final_test_acc_mean=_mean(
            [e["final_test_acc"] for e in episodes if e["final_test_acc"] is not None]
        ),
        final_val_acc_mean=_mean([e["final_val_acc"] for e in episodes]),
        params_added_mean=_mean([e["params_added"] for e in episodes]),
        host_params=session.envs[0].host_params if session.envs else None,
        seeds_fossilized=sum(e["seeds_fossilized"] for e in episodes),
        seeds_pruned=sum(e["seeds_pruned"] for e in episodes),
        rollbacks=sum(e["rollbacks"] for e in episodes),
        refused_actions=sum(e["refused_actions"] for e in episodes),
        reward_components=totals,
        episodes=[{k: v for k, v in e.items() if k != "time"} for e in episodes],
        seeds=session.ledger.rows(),
        updates=session.updates,
        wall_time=session.elapsed_before + time.time() - session.started,
        telemetry_disabled=dict(session.hub.disabled),
    )


def finish(session: Session, status: str) -> dict[str, Any]:
    """Write summary.json (on the writing rank) and announce the end; return the summary."""
    summary: dict[str, Any] = unstructure(build_summary(session, status))
    if session.writer:
        write_json(run_file(session.run_dir, SUMMARY), summary)
    session.hub.emit([RunFinished(status=status, wall_time=summary["wall_time"], summary=summary)])
    return summary
