"""summary.json: what a finished (or stopped) run reports, as one typed value."""

from __future__ import annotations

import math
import statistics
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from attrs import field, frozen

from esper_core.converter import unstructure
from esper_core.lifecycle.seed_spec import seed_spec
from esper_core.run.checkpoint import write_json
from esper_core.run.ledger import HostGrowthRecord, SeedRecord
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
    # Parameters added to the forward pass per episode: seeds that reached the output and
    # the host's own growth (host_params_added_mean of them).
    params_added_mean: float | None
    host_params: int | None  # the host as built, before any growth of its own
    params_forward_mean: float | None  # host + seeds blended into the output at the end
    params_held_mean: float | None  # host + every seed held at the end
    train_flops_mean: float | None  # forward + backward FLOPs of training, per episode
    growth: str  # one line: did the run grow, and what the growth it kept contributes
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
    # Cross-entropy on the test split (every task's loss), and its exp: the perplexity by
    # which a language model is judged (charlm's frontier is measured in loss, not accuracy).
    final_test_loss_mean: float | None = None
    final_test_perplexity_mean: float | None = None
    language_model: bool = False  # the task says so (Task.language_model): shown in perplexity
    # The host's own growth: parameters it added per episode (in params_added_mean too),
    # and each growth with its fate (host_growth_* events; empty when the host kept its shape).
    host_params_added_mean: float | None = None
    host_growths: list[HostGrowthRecord] = field(factory=list)


def _mean(values: list[Any]) -> float | None:
    return statistics.fmean(values) if values else None


def perplexity(loss: float | None) -> float | None:
    """exp(mean cross-entropy); None for no loss, a non-finite one or one too large for a float."""
    if loss is None or not math.isfinite(loss):
        return None
    try:
        return math.exp(loss)
    except OverflowError:
        return None


def is_language_model(task: Any) -> bool:
    """A task (class or instance) declares itself a language model with a ``language_model``
    class attribute set to True (optional: a task without it is a classifier)."""
    return bool(getattr(task, "language_model", False))


# Seeds that shape the output at the end of an episode: fossils, and live seeds blended in.
FINAL_FATES = ("fossilized",)
FINAL_LIVE_STAGES = ("BLENDING", "HOLDING")


def final_seeds(
    seeds: list[dict[str, Any]], env: int = 0, episode: int = 0
) -> list[dict[str, Any]]:
    """The summary's rows of the seeds in the forward pass at the end of one episode, in
    germination order. A seed left half-blended counts (at alpha 1 there)."""
    rows = [
        s
        for s in seeds
        if s["env"] == env
        and s["episode"] == episode
        and (
            s["fate"] in FINAL_FATES
            or (s["fate"] == "live" and s["last_stage"] in FINAL_LIVE_STAGES)
        )
    ]
    return sorted(rows, key=lambda s: (s["germinated_epoch"], s["seed_id"]))


def final_architecture(seeds: list[dict[str, Any]], env: int = 0, episode: int = 0) -> list[str]:
    """:func:`final_seeds` as ``blueprint@slot[:style]``: what ``policies.static`` installs
    to train that architecture from scratch."""
    rows = final_seeds(seeds, env, episode)
    return [seed_spec(s["blueprint"], s["slot_id"], s.get("style")) for s in rows]


NAMED_SEEDS = 3  # fossils named in the growth line; more are counted, not listed


def _kept_names(kept: list[SeedRecord]) -> str:
    names = list(dict.fromkeys(f"{r.blueprint.split('/', 1)[-1]}@{r.slot_id}" for r in kept))
    shown = ", ".join(names[:NAMED_SEEDS]) + (", ..." if len(names) > NAMED_SEEDS else "")
    return f" ({shown})" if shown else ""


def _flops(episodes: list[dict[str, Any]]) -> str:
    """The training FLOPs the growth cost over the host alone on the same batches, where every
    episode measured the host's (it trained an epoch without a seed); else the FLOPs alone."""
    flops = [e["train_flops"] for e in episodes if e.get("train_flops")]
    if not flops:
        return ""
    hosts = [e.get("host_train_flops") or 0 for e in episodes]
    if len(flops) < len(episodes) or not all(hosts):
        return f", {statistics.fmean(flops):.3g} training FLOPs per episode"
    extra = statistics.fmean(flops) - statistics.fmean(hosts)
    return (
        f", {extra:+.3g} training FLOPs per episode "
        f"({100 * extra / statistics.fmean(hosts):+.0f}% over the host alone)"
    )


HOST_FATES = {
    "fossilized": "",
    "live": " (still ramping in at the end)",
    "pruned": " (pruned)",
    "pruned_by_rollback": " (pruned by a governor rollback)",
}


def _host_growth(growth: HostGrowthRecord) -> str:
    """``host widened 4x at epoch 7: 1,702 -> 24,058 parameters``, and its fate."""
    factor = growth.factor()
    verb = f"host {growth.operator} growth ({growth.plan})"
    if growth.operator == "width":
        every = all(growth.widths_after.get(k) != v for k, v in growth.widths_before.items())
        verb = (
            "host widened"
            + (f" {factor:g}x" if factor is not None else "")
            + ("" if every and factor is not None else f" ({growth.plan})")
        )
    elif growth.operator == "depth":
        verb = (
            "host deepened" + (f" {factor:g}x" if factor is not None else "") + f" ({growth.plan})"
        )
    return (
        f"{verb} at epoch {growth.started_epoch}: {growth.params_before:,} -> "
        f"{growth.params_after:,} parameters{HOST_FATES.get(growth.fate, '')}"
    )


def _host_growths(growths: list[HostGrowthRecord], n_episodes: int) -> list[str]:
    """Each distinct host growth once, with the number of episodes it happened in when
    that is not every one of them."""
    counts = Counter(_host_growth(g) for g in growths)
    return [
        text if count == n_episodes or n_episodes == 1 else f"{text} in {count} episode(s)"
        for text, count in counts.items()
    ]


def birth_host_params(episode: dict[str, Any]) -> int:
    """The host of an episode as built, before any growth of its own."""
    return int(episode["host_params"]) - int(episode.get("host_params_added") or 0)


def growth_verdict(
    episodes: list[dict[str, Any]],
    seeds: list[SeedRecord],
    host_growths: list[HostGrowthRecord] | None = None,
) -> str:
    """One line on what grew (the host itself; which seeds), what it cost (parameters over
    the host's as built; training FLOPs) and what it contributes (the kept seeds'
    counterfactual contribution). Only what was measured is stated."""
    if not episodes:
        return "no episode finished"
    hosts = _host_growths(list(host_growths or []), len(episodes))
    host_grew = any(e.get("host_params_added") for e in episodes)
    germinated = sum(e["seeds_germinated"] for e in episodes)
    if germinated == 0 and not hosts:
        notes = [e["growth_note"] for e in episodes if e.get("growth_note")]
        # The most frequent reason the policy gave, the first on a tie (episodes agree).
        why = f" ({Counter(notes).most_common(1)[0][0]})" if notes else ""
        return f"no growth: no seed was germinated{why}"
    kept = [r for r in seeds if r.fate == "fossilized"]
    live = [r for r in seeds if r.fate == "live"]
    if not kept and not live and not host_grew:
        tried = f"{germinated} seed(s) tried and pruned" if germinated else ""
        return "no growth kept: " + "; ".join([*hosts, tried] if tried else hosts)
    host = birth_host_params(episodes[0]) or 1
    added = statistics.fmean(e["params_added"] for e in episodes)
    parts = list(hosts)
    if kept:
        parts.append(f"{len(kept)} seed(s) fossilized{_kept_names(kept)}")
    if live:
        parts.append(f"{len(live)} still live at the end")
    cost = _flops(episodes)
    gain = _contribution(kept, len(episodes))
    born = sum(1 for r in kept if r.gain is None and r.germinated_epoch == 0)
    birth = f", {born} installed at birth" if born else ""
    return (
        f"growth kept: {', '.join(parts)}, +{added:,.0f} parameters per episode "
        f"(+{100 * added / host:.0f}% of the host){cost}{gain}{birth}"
    )


def _contribution(kept: list[SeedRecord], episodes: int) -> str:
    """What the kept seeds add to the model they are in: each one's counterfactual
    contribution (validation accuracy with it minus with it switched off, at its last
    measurement), summed per episode, averaged over episodes. Not the accuracy gained
    since a seed's germination: that holds all of the host's own learning meanwhile
    (+54.60 points on the main job once, where the seeds' contribution was +16.99)."""
    measured = [r for r in kept if r.contribution is not None]
    if not measured:
        return ""
    total = math.fsum(r.contribution or 0.0 for r in measured) / episodes
    return (
        f", counterfactual contribution {total:+.2f} points (validation accuracy with the "
        f"kept seed{'s' if len(measured) > 1 else ''} minus switched off)"
    )


def build_summary(session: Session, status: str) -> RunSummary:
    cfg = session.config
    episodes = session.episodes
    totals: dict[str, float] = {}
    for e in episodes:
        for key, value in e["reward_components"].items():
            totals[key] = totals.get(key, 0.0) + value
    test_loss = _mean([e["final_test_loss"] for e in episodes if e["final_test_loss"] is not None])
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
        host_params=session.envs[0].birth_host_params if session.envs else None,
        params_forward_mean=_mean([e["params_forward"] for e in episodes]),
        params_held_mean=_mean([e["params_held"] for e in episodes]),
        train_flops_mean=_mean([e["train_flops"] for e in episodes]),
        growth=growth_verdict(episodes, session.ledger.rows(), session.growth_ledger.rows()),
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
        final_test_loss_mean=test_loss,
        final_test_perplexity_mean=perplexity(test_loss),
        language_model=bool(session.envs) and is_language_model(session.envs[0].task),
        host_params_added_mean=_mean([e.get("host_params_added") or 0 for e in episodes]),
        host_growths=session.growth_ledger.rows(),
    )


def finish(session: Session, status: str) -> dict[str, Any]:
    """Write summary.json (on the writing rank) and announce the end; return the summary."""
    summary: dict[str, Any] = unstructure(build_summary(session, status))
    if session.writer:
        write_json(run_file(session.run_dir, SUMMARY), summary)
    session.hub.emit([RunFinished(status=status, wall_time=summary["wall_time"], summary=summary)])
    return summary
