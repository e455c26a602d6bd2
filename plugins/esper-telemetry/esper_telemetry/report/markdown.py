"""``report.md``: the run at a glance, every episode and every seed with its fate.

Seeds come from :class:`esper_core.run.ledger.SeedLedger` over the run's events, the same
records the runner's ``summary.json`` holds.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from typing import Any

from esper_core.run.ledger import SeedRecord
from esper_core.run.telemetry import EpochCompleted, GovernorRollback
from esper_telemetry.report.data import Key, RunData

REPORT_TITLE = "# Esper run report: "  # report.md's first line: how a report is known

FATES = {
    "fossilized": "fossilized",
    "pruned": "pruned (policy)",
    "pruned_by_rollback": "pruned (rollback)",
    "live": "live at the end",
}


def _fmt(value: Any, digits: int = 2, signed: bool = False) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


# What text from the run may not carry into report.md as markup: a newline (it would
# start a heading, a list or a raw HTML block of its own), HTML (a <script> tag, shown
# by some viewers), a link or image ([...](...)), a code span, a table cell's end.
_MARKUP = {"\\": "\\\\", "`": "\\`", "[": "\\[", "]": "\\]"}
_MARKUP_LINE = str.maketrans(_MARKUP)
_MARKUP_TABLE = str.maketrans({**_MARKUP, "|": "\\|"})
_LINE_BREAKS = re.compile(r"[\x00-\x1f\x7f\u0085\u2028\u2029]+")
# Only a "<" followed by a letter, "/", "!" or "?" can open a tag, a comment or an
# autolink (CommonMark), and only an "&" followed by a letter or "#" an entity: those are
# escaped, so a reason such as "loss 0.310 < 0.8" or "-> 2x" reads as it was written.
_HTML = re.compile(r"<(?=[A-Za-z/!?])|&(?=[A-Za-z#])")
_ENTITIES = {"<": "&lt;", "&": "&amp;"}


def plain(value: object, table: bool = False) -> str:
    """``value`` (a string from the run's events, which anyone can edit) as text in
    report.md: on one line, its markup characters escaped, so it reads as what it
    says and renders as nothing else."""
    text = _LINE_BREAKS.sub(" ", str(value))
    text = _HTML.sub(lambda m: _ENTITIES[m.group()], text)
    # A ">" opening the text would quote the line (a blockquote) where it starts one.
    if text.startswith(">"):
        text = "&gt;" + text[1:]
    return text.translate(_MARKUP_TABLE if table else _MARKUP_LINE)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> list[str]:
    def cell(text: str) -> str:
        return plain(text, table=True)

    lines = [
        "| " + " | ".join(cell(h) for h in header) + " |",
        "|" + "|".join(":---" if a == "l" else "---:" for a in align) + "|",
    ]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return lines


def last_contribution(data: RunData, record: SeedRecord) -> float | None:
    """The contribution the ledger recorded, or for a live seed the last one measured."""
    if record.contribution is not None or record.fate != "live":
        return record.contribution
    for row in reversed(data.epochs.get((record.env, record.episode), [])):
        for slot in row.slots:
            if slot.seed_id == record.seed_id and slot.contribution is not None:
                return slot.contribution
    return None


def lifespan(data: RunData, record: SeedRecord) -> str:
    if record.lifespan is not None:
        return str(record.lifespan)
    alive = data.last_epoch((record.env, record.episode)) - record.germinated_epoch
    return f"≥ {alive}"


# The env-episodes whose decisions report.md lists (the last ones, as the swimlanes show),
# and the most rows each gets: a long run of WAITs for one reason is one row anyway.
DECISION_GROUPS = 4
DECISION_ROWS = 40


def decision_runs(rows: Sequence[EpochCompleted]) -> list[tuple[int, int, EpochCompleted]]:
    """(first epoch, last epoch, row) for each run of epochs trained under the same
    action, refusal and reason."""
    runs: list[tuple[int, int, EpochCompleted]] = []
    for row in rows:
        same = runs and runs[-1][1] == row.epoch - 1
        if same and (runs[-1][2].action, runs[-1][2].action_refused, runs[-1][2].reason) == (
            row.action,
            row.action_refused,
            row.reason,
        ):
            runs[-1] = (runs[-1][0], row.epoch, runs[-1][2])
        else:
            runs.append((row.epoch, row.epoch, row))
    return runs


def decisions(data: RunData) -> list[str]:
    """Every decision of the last env-episodes with the policy's reason for it."""
    groups: list[Key] = data.env_episodes()[-DECISION_GROUPS:]
    if not any(row.reason for key in groups for row in data.epochs.get(key, [])):
        return []  # a policy that gives no reasons, or events written before schema 2
    out = ["", "## Decisions", ""]
    out.append(
        "What the policy chose at each epoch boundary and why (its reason as it gave it); "
        "*epochs*: the epochs trained under that action."
    )
    for key in groups:
        runs = decision_runs(data.epochs.get(key, []))
        out += ["", f"### env {key[0]}, {data.outer_name} {key[1]}", ""]
        shown = runs[:DECISION_ROWS]
        table = [
            [
                str(first) if first == last else f"{first}–{last}",
                row.action + (f" (refused: {row.action_refused})" if row.action_refused else ""),
                row.reason or "–",
            ]
            for first, last, row in shown
        ]
        out += _table(["epochs", "action", "reason"], table, "lll")
        if len(runs) > len(shown):
            out.append(f"\n… and {len(runs) - len(shown)} more (events.jsonl has them all).")
    return out


HOST_FATES = {
    "fossilized": "folded in at epoch {end}",
    "live": "still ramping in at the end",
    "pruned": "pruned at epoch {end}",
    "pruned_by_rollback": "pruned by a rollback at epoch {end}",
}


def _host_growth_lines(data: RunData) -> list[str]:
    """One bullet per growth of the host itself (none when it kept its shape)."""
    out = []
    for g in data.growth_ledger.rows():
        fate = HOST_FATES.get(g.fate, g.fate).format(end=g.ended_epoch)
        out.append(
            f"- **host growth** {plain(g.growth_id)} (env {g.env}, {data.outer_name} "
            f"{g.episode}): {plain(g.operator)}, {plain(g.plan)}, at epoch {g.started_epoch}: "
            f"{g.params_before:,} -> {g.params_after:,} parameters, {plain(fate)}"
        )
    return out


def _command(mode: str) -> str:
    return f"`esper {mode}`" if mode in ("run", "train") else f"esper {plain(mode)}"


def render(data: RunData, figures: Sequence[str]) -> str:
    s = data.started
    out = [f"{REPORT_TITLE}{plain(data.name)}", ""]
    if s is not None:
        out += [
            # In a code span nothing can be escaped: only a mode a run writes goes there.
            f"- **command**: {_command(s.mode)}, task **{plain(s.task)}**, policy "
            f"**{plain(s.policy)}**, reward **{plain(s.reward)}**, executor {plain(s.executor)}",
            f"- **envs**: {s.n_envs}, {data.outer_name}s: {s.episodes}, epochs per episode: "
            f"{s.max_epochs}, slots: {plain(', '.join(s.slot_ids))}, host parameters: "
            f"{s.host_params:,}",
            f"- **Esper version**: {plain(s.esper_version)}",
        ]
    status = data.finished.status if data.finished else "not finished (no RunFinished event)"
    if data.finished is not None and data.finished.error:
        status += f" ({data.finished.error})"
    status = plain(status)
    out.append(
        f"- **status**: {status}"
        + (f" after {data.finished.wall_time:.1f} s" if data.finished else "")
    )
    tests = [e.final_test_acc for e in data.episodes if e.final_test_acc is not None]
    if data.episodes:
        out.append(
            f"- **final accuracy** (mean over {len(data.episodes)} env-{data.outer_name}s): validation "
            f"{statistics.fmean(e.final_val_acc for e in data.episodes):.2f}%"
            + (f", test {statistics.fmean(tests):.2f}%" if tests else "")
        )
    records = data.ledger.rows()
    fates = {fate: sum(1 for r in records if r.fate == fate) for fate in FATES}
    out.append(
        f"- **seeds**: {len(records)} germinated: {fates['fossilized']} fossilized, {fates['pruned']} pruned by the "
        f"policy, {fates['pruned_by_rollback']} pruned by a rollback, {fates['live']} live at the end"
    )
    out += _host_growth_lines(data)
    out += ["", "## Figures", ""]
    captions = {
        "accuracy.png": "Validation and test accuracy",
        "training.png": "Loss (or perplexity) with lifecycle events, and parameters per epoch",
        "lifecycle.png": "Seed lifecycle per slot",
        "rewards.png": "Reward components",
        "learning.png": "Learning curve: return, greedy evaluation, entropy, KL, clipping, "
        "explained variance",
    }
    for name in figures:
        out += [f"![{captions.get(name, name)}]({name})", ""]

    out += ["## Episodes", ""]
    if data.episodes:
        rows = [
            [
                str(e.env),
                str(e.episode),
                str(e.seed),
                _fmt(e.final_val_acc),
                _fmt(e.final_test_acc),
                _fmt(e.total_reward, 3, signed=True),
                _fmt(e.params_added),
                _fmt(e.params_unblended),
                str(e.seeds_germinated),
                str(e.seeds_fossilized),
                str(e.seeds_pruned),
                str(e.rollbacks),
                str(e.refused_actions),
            ]
            for e in sorted(data.episodes, key=lambda e: (e.episode, e.env))
        ]
        out += _table(
            [
                "env",
                data.outer_name,
                "random seed",
                "val acc %",
                "test acc %",
                "return",
                "params added",
                "never blended",
                "germinated",
                "fossilized",
                "pruned",
                "rollbacks",
                "refused",
            ],
            rows,
            "lllrrrrrrrrrr",
        )
        out += [
            "",
            "*params added*: parameters of the seeds that reached the output (blended or "
            "fossilized) at the episode's end, and those the host's own growth added; "
            "*never blended*: those of seeds still germinated or training then, which "
            "change nothing the host computes.",
        ]
    else:
        out.append("No episode finished.")

    out += ["", "## Seeds", ""]
    if records:
        rows = [
            [
                str(r.env),
                str(r.episode),
                r.seed_id,
                r.blueprint,
                r.slot_id,
                r.style,
                str(r.germinated_epoch),
                _fmt(r.ended_epoch),
                lifespan(data, r),
                FATES.get(r.fate, r.fate),
                _fmt(last_contribution(data, r), signed=True),
                _fmt(r.params),
            ]
            for r in records
        ]
        out += _table(
            [
                "env",
                data.outer_name,
                "seed",
                "blueprint",
                "slot",
                "style",
                "germinated",
                "ended",
                "lifespan (epochs)",
                "fate",
                "contribution (pts)",
                "params",
            ],
            rows,
            "lllllllrrlrr",
        )
        out += [
            "",
            "Epochs are epoch boundaries: a seed germinated at 0 trains from the first epoch. "
            "Contribution = validation accuracy with the seed minus without it, in points "
            "(the last measurement; for live seeds the last epoch's).",
        ]
    else:
        out.append("No seed was germinated.")

    out += decisions(data)

    rollbacks = [
        e
        for key in data.env_episodes()
        for e in data.lifecycle.get(key, [])
        if isinstance(e, GovernorRollback)
    ]
    if rollbacks:
        out += ["", "## Governor rollbacks", ""]
        out += _table(
            ["env", data.outer_name, "epoch", "reason", "val loss", "restored to epoch", "penalty"],
            [
                [
                    str(e.env),
                    str(e.episode),
                    str(e.epoch),
                    e.reason,
                    _fmt(e.val_loss, 4),
                    str(e.snapshot_epoch),
                    _fmt(e.penalty),
                ]
                for e in rollbacks
            ],
            "lllllrr",
        )
    if data.updates:
        out += ["", "## PPO updates", ""]
        keys = list(dict.fromkeys(k for u in data.updates for k in u.diagnostics))
        out += _table(
            ["update", *keys],
            [[str(u.update), *(_fmt(u.diagnostics.get(k), 4) for k in keys)] for u in data.updates],
            "l" + "r" * len(keys),
        )
    return "\n".join(out) + "\n"
