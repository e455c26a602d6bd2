"""``telemetry.console``: the live terminal display of a run (rich).

Progress bars for episodes (or PPO updates) and for the epoch within them, a table
with a row per env (epoch, accuracies, reward, each slot's stage in its colour, alpha
and blueprint) and the latest lifecycle events. Event handling only updates a few
fields; the display is rebuilt and redrawn from ``handle()`` at most
``refresh_per_second`` times per second, with no background thread, so it costs
training next to nothing (see benchmarks/telemetry_overhead.py).

A quiet context (``--quiet``, ``--json``, ``run.quiet``) shows nothing. When the output
is not a terminal (a log file, CI) there is no live display either: a plain progress line
every ``progress_epochs`` epochs or ``progress_seconds`` seconds, whichever comes first,
one line per finished episode and a short aligned block of statistics per PPO update.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from typing import IO, Any, ClassVar

from esper_core import TelemetryContext, hookimpl
from esper_core.run.telemetry import (
    EpisodeFinished,
    EpochCompleted,
    Event,
    PolicyUpdate,
    RunStarted,
)
from esper_telemetry.common import RunInfo, describe_lifecycle
from esper_telemetry.console_options import ConsoleOptions
from esper_telemetry.console_view import (
    ACTION_WIDTH,
    BAR_WIDTH,
    HIDE_BLUEPRINT,
    ROW_WIDTH,
    SLOT_WIDTH,
    EnvView,
    SlotView,
    clock,
    slot_cell,
)
from esper_telemetry.update_text import update_block, update_summary, where


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"


class ConsoleBackend:
    """Live progress and slot table while a run trains."""

    name: ClassVar[str] = "console"
    description: ClassVar[str] = (
        "live terminal display: progress, per-env slot stages, rewards, accuracy"
    )
    Options: ClassVar[type] = ConsoleOptions

    def __init__(self, options: ConsoleOptions, context: TelemetryContext) -> None:
        self.options = options
        self.enabled = not context.quiet
        self.file = context.path(options.file, self.name) if options.file else None
        self.info: RunInfo | None = None
        self.envs: dict[int, EnvView] = {}
        self.recent: deque[str] = deque(maxlen=max(options.recent_events, 1))
        self.last_update: tuple[int, dict[str, float]] | None = None
        self.outer = 0
        self.episode = 0  # run-wide index of the episode in progress
        self.epoch = 0
        self._returns: list[float] = []  # the episode returns of the update in progress
        self._update_began: float | None = None  # when it began (None: before a resume)
        self._console: Any = None
        self._stream: IO[str] | None = None
        self._live: Any = None
        self._spans: dict[tuple[str, Any], tuple[float, float]] = {}
        self._last_draw = 0.0
        self._interval = 1.0 / options.refresh_per_second
        self._last_line = time.monotonic()  # when the last plain progress line was printed
        self._line_due = False  # an epoch ended since the last plain progress line

    # ------------------------------------------------------------ output

    def _start(self) -> None:
        """Open the console on first use, so a quiet or idle backend never touches the terminal."""
        if self._console is not None:
            return
        from rich.console import Console

        if self.file is not None:
            self._stream = open(self.file, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._console = Console(
            file=self._stream,
            stderr=self._stream is None,
            force_terminal=self.options.force_terminal,
            width=self.options.width,
        )
        if not self._console.is_terminal:
            return
        from rich.live import Live

        # No refresh thread: the display is redrawn from handle(), at most
        # refresh_per_second times a second, so it never competes with training.
        self._live = Live(
            self._renderable(),
            console=self._console,
            auto_refresh=False,
            transient=self.options.transient,
        )
        self._live.start()

    def _say(self, text: str) -> None:
        if self._console is not None and self._live is None:
            self._console.print(text, highlight=False, soft_wrap=True)

    # ------------------------------------------------------------ rendering
    # Plain fixed-width lines rather than rich Tables and Progress: laying those out
    # costs several milliseconds per redraw, these a fraction of one.

    def _bar(self, label: str, done: float, total: int, span: Any) -> Any:
        """A progress bar; elapsed time and ETA count from when this ``span`` was first drawn
        (the run for the outer bar, the episode for the epoch bar), so a resumed run's ETA
        reflects its own pace."""
        from rich.text import Text

        now = time.monotonic()
        since, done_then = self._spans.setdefault((label, span), (now, done))
        fraction = min(max(done / total, 0.0), 1.0) if total > 0 else 0.0
        filled = round(fraction * BAR_WIDTH)
        elapsed = now - since
        progress = done - done_then
        eta = clock((total - done) * elapsed / progress) if progress > 0 else "-:--:--"
        return Text.assemble(
            (f"{label:>8} ", "bold"),
            ("━" * filled, "magenta"),
            ("━" * (BAR_WIDTH - filled), "grey30"),
            f" {int(done)}/{total}".rjust(10) + f"  {clock(elapsed)}  eta {eta}",
            no_wrap=True,
            overflow="ellipsis",
        )

    def _rows(self) -> list[Any]:
        """A header and a line per env; the slots go on the same line when the console is
        wide enough, otherwise on an indented line of their own below it."""
        from rich.text import Text

        info = self.info or RunInfo()
        slot_ids = info.slot_ids or sorted({s for view in self.envs.values() for s in view.slots})
        inline = ROW_WIDTH + len(slot_ids) * (SLOT_WIDTH + 1) <= self._console.width
        header = Text(
            f"{'env':>4} {'epoch':>7} {'val%':>6} {'test%':>6} {'reward':>7} {'return':>7}  "
            f"{'action':<{ACTION_WIDTH}}",
            style="bold",
            no_wrap=True,
            overflow="ellipsis",
        )
        if inline:
            for slot_id in slot_ids:
                header.append(f" {slot_id:<{SLOT_WIDTH}}")
        lines = [header]
        shown = sorted(self.envs)[: self.options.max_envs]
        for index in shown:
            view = self.envs[index]
            action = view.action
            if len(action) > ACTION_WIDTH:
                action = action[: ACTION_WIDTH - 1] + "…"
            line = Text(
                f"{index:>4} {f'{view.epoch}/{info.max_epochs}':>7} {_pct(view.val_acc):>6} "
                f"{_pct(view.test_acc):>6} {_num(view.reward):>7} {view.episode_reward:>+7.3f}  "
                f"{action:<{ACTION_WIDTH}}",
                no_wrap=True,
                overflow="ellipsis",
            )
            if not inline:
                lines.append(line)
                line = Text("     ", no_wrap=True, overflow="ellipsis")
            for slot_id in slot_ids:
                line.append(" " if inline else f" {slot_id} ")
                line.append_text(slot_cell(view.slots.get(slot_id)))
            lines.append(line)
        hidden = len(self.envs) - len(shown)
        if hidden > 0:
            lines.append(Text(f"… {hidden} more env(s) (console.max_envs)", style="dim"))
        return lines

    def _renderable(self) -> Any:
        from rich.console import Group
        from rich.text import Text

        info = self.info or RunInfo()
        parts: list[Any] = []
        if info.run_name:
            parts.append(
                Text(f"{info.run_name}  {info.task} / {info.policy} / {info.reward}", style="bold")
            )
        # Within an update, its rollout episodes run one after another: the outer bar
        # moves on through each of them rather than going back at every episode's start.
        per = max(info.episodes_per_update, 1) if info.mode == "train" else 1
        within = (self.episode - self.outer * per) % per if per > 1 else 0
        done = min(
            self.outer + (within + self.epoch / max(info.max_epochs, 1)) / per, info.outer_total
        )
        parts.append(self._bar(info.outer_name + "s", done, info.outer_total, None))
        parts.append(self._bar("epoch", self.epoch, info.max_epochs, self.outer))
        parts.extend(self._rows())
        if self.last_update is not None:
            parts.append(
                Text(
                    update_summary(*self.last_update),
                    style="cyan",
                    no_wrap=True,
                    overflow="ellipsis",
                )
            )
        if self.options.recent_events:
            parts.extend(
                Text(line, style="dim", no_wrap=True, overflow="ellipsis") for line in self.recent
            )
        return Group(*parts)

    def _draw(self, force: bool = False) -> None:
        if self._live is None:
            return
        now = time.monotonic()
        if not force and now - self._last_draw < self._interval:
            return
        self._last_draw = now
        self._live.update(self._renderable(), refresh=True)

    # ------------------------------------------------------------ events

    def handle(self, events: Sequence[Event]) -> None:
        for event in events:
            # Kept even when quiet: the checkpoint carries it, so a resume that is not
            # quiet still counts updates out of the run's total.
            if isinstance(event, RunStarted):
                self.info = RunInfo.from_event(event)
                self._update_began = time.monotonic()
            elif not self.enabled:
                continue
            elif isinstance(event, EpochCompleted):
                self._epoch(event)
            elif isinstance(event, EpisodeFinished):
                self._episode(event)
            elif isinstance(event, PolicyUpdate):
                self.last_update = (event.update, dict(event.diagnostics))
                self.outer = event.update + 1
                if self.outer < (self.info or RunInfo()).outer_total:
                    self.epoch = 0
                self._start()
                now = time.monotonic()
                seconds = None if self._update_began is None else now - self._update_began
                for line in update_block(
                    self.info or RunInfo(), event.update, event.diagnostics, self._returns, seconds
                ):
                    self._say(line)
                self._returns, self._update_began = [], now
            else:
                line = describe_lifecycle(event)
                if line is not None:
                    self.recent.append(line)
        if self.enabled:
            self._start()
            self._draw()

    def _epoch(self, e: EpochCompleted) -> None:
        view = self.envs.setdefault(e.env, EnvView())
        if view.episode != e.episode:
            view.episode, view.episode_reward = e.episode, 0.0
        view.epoch, view.val_acc, view.reward, view.action = e.epoch, e.val_acc, e.reward, e.action
        view.episode_reward += e.reward
        if e.test_acc is not None:
            view.test_acc = e.test_acc
        view.slots = {s.slot_id: SlotView(s.stage, s.alpha, s.blueprint) for s in e.slots}
        self.outer = e.update if e.update is not None else e.episode
        self.episode = e.episode
        self.epoch = e.epoch
        self._line_due = True

    def _progress_line(self) -> None:
        """Off a terminal, one plain line every few epochs or seconds: a run in CI or piped
        to a file shows it is alive long before its first episode ends."""
        if self._live is not None or self._console is None or not self._line_due:
            return
        info = self.info or RunInfo()
        now = time.monotonic()
        every, seconds = self.options.progress_epochs, self.options.progress_seconds
        by_epoch = every > 0 and self.epoch % every == 0
        by_time = seconds > 0 and now - self._last_line >= seconds
        if not (by_epoch or by_time) or not 0 < self.epoch < info.max_epochs:
            # the last epoch of an episode gets its episode line instead; epoch 0 is the
            # boundary after an update, not progress
            return
        self._line_due, self._last_line = False, now
        views = list(self.envs.values())
        vals = [v.val_acc for v in views if v.val_acc is not None]
        tests = [v.test_acc for v in views if v.test_acc is not None]
        line = (
            f"{where(info, self.outer, self.episode, self.epoch)}: val {_pct(_mean(vals))}% "
            f"test {_pct(_mean(tests))}%"
        )
        if len(views) > 1:
            line += f" (mean of {len(views)} envs)"
        elif views:
            stages = [
                f"{slot_id} {slot.stage}"
                + (
                    f" {slot.blueprint.split('/', 1)[-1]}"
                    if slot.blueprint and slot.stage not in HIDE_BLUEPRINT
                    else ""
                )
                for slot_id, slot in views[0].slots.items()
                if slot.stage != "DORMANT"
            ]
            line += f" reward {views[0].episode_reward:+.3f}"
            if stages:
                line += " | " + ", ".join(stages)
        self._say(line)

    def _episode(self, e: EpisodeFinished) -> None:
        info = self.info or RunInfo()
        if info.mode == "run":
            self.outer = e.episode + 1
            if self.outer < info.outer_total:
                self.epoch = 0
        self._start()
        test = "-" if e.final_test_acc is None else f"{e.final_test_acc:.2f}%"
        self._returns.append(e.total_reward)
        outer = e.update if e.update is not None else e.episode
        self._say(
            f"{where(info, outer, e.episode)} env {e.env}: val {e.final_val_acc:.2f}% test {test} reward {e.total_reward:+.3f} "
            f"params +{e.params_added:,} fossilized {e.seeds_fossilized} pruned {e.seeds_pruned} "
            f"rollbacks {e.rollbacks}"
        )

    def flush(self) -> None:
        if self.enabled:
            self._progress_line()
        self._draw()

    def close(self) -> None:
        if self._live is not None:
            self._draw(force=True)
            self._live.stop()
            self._live = None
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def state_dict(self) -> dict[str, Any]:
        return {"info": None if self.info is None else self.info.to_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("info") is not None:
            self.info = RunInfo.from_state(state["info"])


@hookimpl
def esper_register_telemetry(register: Any) -> None:
    register(ConsoleBackend)
