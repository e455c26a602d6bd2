"""What the console says about where a training run is and how each PPO update went.

A PPO update learns from ``episodes_per_update`` rollout episodes of every env, so a
progress line naming only the update and the epoch read as if the update restarted at
every episode: it names the episode of the update too. An update's diagnostics are some
thirty numbers; the console shows the few a researcher reads first, one per aligned
line, and leaves the rest to events.jsonl and the other backends, which keep them all.
"""

from __future__ import annotations

from collections.abc import Sequence

from esper_telemetry.common import RunInfo

# (diagnostic key, label): the statistics shown after each update, in this order.
SHOWN = (
    ("policy_loss", "policy loss"),
    ("value_loss", "value loss"),
    ("entropy", "entropy"),
    ("approx_kl", "approx KL"),
    ("clip_fraction", "clip fraction"),
    ("explained_variance", "explained variance"),
)
LABEL_WIDTH = max(len(label) for _, label in SHOWN)


def where(info: RunInfo, outer: int, episode: int, epoch: int | None = None) -> str:
    """``update u/U · episode k/n[ · epoch e/E]`` while training (``episode`` is the run-wide
    index, ``outer`` the update), ``episode e/E[ · epoch e/E]`` otherwise."""
    if info.mode == "train":
        per = max(info.episodes_per_update, 1)
        k = episode - outer * per + 1
        text = f"update {outer + 1}/{info.outer_total}"
        if per > 1 and 1 <= k <= per:
            text += f" · episode {k}/{per}"
    else:
        text = f"episode {outer + 1}/{info.outer_total}"
    if epoch is not None:
        text += f" · epoch {epoch}/{info.max_epochs}"
    return text


def _value(value: float) -> str:
    # A space where a positive number has no sign keeps the column aligned; tiny losses
    # in scientific notation rather than a misleading 0.0000.
    return f"{value: .4f}" if abs(value) >= 1e-4 or value == 0 else f"{value: .2e}"


def update_block(
    info: RunInfo,
    update: int,
    diagnostics: dict[str, float],
    returns: Sequence[float],
    seconds: float | None,
) -> list[str]:
    """The lines printed after PPO update ``update``: its episodes' returns and pace, then
    the shown statistics, aligned; ``seconds`` is how long the update's rollout and
    learning took (None when unknown, as after a resume)."""
    head = f"update {update + 1}/{info.outer_total} done"
    if returns:
        head += f" · {len(returns)} episodes"
        if seconds is not None and seconds > 0:
            head += f" in {seconds:.1f}s ({len(returns) / seconds:.2f} episodes/s)"
    lines = [head]
    if returns:
        mean = sum(returns) / len(returns)
        lines.append(
            f"  {'return':<{LABEL_WIDTH}}  {_value(mean)}  "
            f"(min {min(returns):.3f}, max {max(returns):.3f})"
        )
    for key, label in SHOWN:
        if key in diagnostics:
            lines.append(f"  {label:<{LABEL_WIDTH}}  {_value(diagnostics[key])}")
    rest = len(diagnostics) - sum(key in diagnostics for key, _ in SHOWN)
    if rest > 0:
        lines.append(f"  ({rest} more statistics in events.jsonl and summary.json)")
    return lines


def update_summary(update: int, diagnostics: dict[str, float]) -> str:
    """The shown statistics on one line, for the live display."""
    shown = ", ".join(
        f"{label} {diagnostics[key]:.4g}" for key, label in SHOWN if key in diagnostics
    )
    return f"PPO update {update + 1}: {shown}"
