"""``telemetry.tensorboard``: TensorBoard event files in ``RUN_DIR/tensorboard``.

Tags (x axis in brackets):
- ``env{i}/<metric>`` and ``mean/<metric>`` [global epoch = episode × max_epochs + epoch]:
  train/val/test loss and accuracy, reward, ``reward/<component>``, seed parameters,
  ``alpha/<slot>``; the means are over envs, written once the epoch is complete;
- ``episode/env{i}/<metric>`` and ``episode/mean/<metric>`` [episode]: final accuracies,
  total reward, parameters added, seed and rollback counts;
- ``ppo/<diagnostic>`` [PPO update]: everything ``PolicyUpdate`` reports;
- text ``lifecycle/env{i}`` [global epoch]: germinate / fossilize / prune / rollback lines;
- hyperparameters from ``RunStarted.config`` for the HParams dashboard, with the final
  accuracies (``hparams/*``) as its metrics.

Resuming truncates the event files back to the checkpoint and removes files written
after it; the resumed process then appends a new event file (TensorBoard reads every
file of the directory).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from attrs import define

from esper_core import TelemetryContext, hookimpl
from esper_core.config_limits import MAX_SECONDS
from esper_core.converter import in_range, options_field, relative_path
from esper_core.errors import RunDirError
from esper_core.run.telemetry import (
    EpisodeFinished,
    EpochCompleted,
    Event,
    PolicyUpdate,
    RunFinished,
    RunStarted,
)
from esper_telemetry.common import (
    RunInfo,
    StepMeans,
    describe_lifecycle,
    episode_metrics,
    epoch_metrics,
    finite,
    flatten_config,
    lifecycle_epoch,
)

EVENT_FILE_MARK = "tfevents"
HPARAM_METRICS = ("final_val_acc_mean", "final_test_acc_mean", "params_added_mean")


@define
class TensorBoardOptions:
    subdir: str = options_field(
        "tensorboard", relative_path, "Directory inside the run directory for the event files."
    )
    per_env: bool = options_field(
        True, doc="Write each env's curves, not only the means over envs."
    )
    lifecycle_text: bool = options_field(True, doc="Write lifecycle events as text.")
    hparams: bool = options_field(True, doc="Write the run config to the HParams dashboard.")
    flush_secs: float = options_field(
        5.0,
        in_range(0, MAX_SECONDS),
        "Most seconds between writes of the event file to disk (0: every epoch); "
        "checkpoints and the end of the run always write.",
    )


class TensorBoardBackend:
    """Scalars, lifecycle text, hyperparameters and PPO diagnostics for TensorBoard."""

    name: ClassVar[str] = "tensorboard"
    description: ClassVar[str] = (
        "TensorBoard event files: per-env and mean curves, lifecycle text, hparams, PPO"
    )
    Options: ClassVar[type] = TensorBoardOptions

    def __init__(self, options: TensorBoardOptions, context: TelemetryContext) -> None:
        self.options = options
        self.logdir = context.path(options.subdir, self.name)
        self.info = RunInfo()
        self._writer: Any = None
        self._epoch_means = StepMeans()
        self._episode_means = StepMeans()

    @property
    def writer(self) -> Any:
        # Created at the first write, after a resume has cleaned up the directory.
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self.logdir.mkdir(parents=True, exist_ok=True)
            # tensorboard's own thread writes the file every flush_secs; checkpoints and
            # close() flush it explicitly. A large queue keeps add_scalar from blocking.
            self._writer = SummaryWriter(
                log_dir=str(self.logdir),
                max_queue=100_000,
                flush_secs=max(self.options.flush_secs, 0.1),
            )
        return self._writer

    def _scalars(self, prefix: str, metrics: dict[str, float], step: int) -> None:
        writer = self.writer
        for name, value in metrics.items():
            if finite(value):
                writer.add_scalar(f"{prefix}/{name}", value, step)

    def handle(self, events: Sequence[Event]) -> None:
        texts: dict[tuple[int, int], list[str]] = defaultdict(list)
        for event in events:
            if isinstance(event, RunStarted):
                self.info = RunInfo.from_event(event)
                if self.options.hparams:
                    self._hparams_start(event)
            elif isinstance(event, EpochCompleted):
                step = self.info.global_epoch(event.episode, event.epoch)
                metrics = epoch_metrics(event)
                for slot in event.slots:
                    metrics[f"alpha/{slot.slot_id}"] = slot.alpha
                if self.options.per_env:
                    self._scalars(f"env{event.env}", metrics, step)
                self._epoch_means.add(step, metrics)
            elif isinstance(event, EpisodeFinished):
                metrics = episode_metrics(event)
                if self.options.per_env:
                    self._scalars(f"episode/env{event.env}", metrics, event.episode)
                self._episode_means.add(event.episode, metrics)
            elif isinstance(event, PolicyUpdate):
                self._scalars("ppo", event.diagnostics, event.update)
            elif isinstance(event, RunFinished):
                self._hparams_end(event)
            elif self.options.lifecycle_text:
                line = describe_lifecycle(event)
                if line is not None:
                    step = self.info.global_epoch(event.episode, lifecycle_epoch(event))  # type: ignore[attr-defined]
                    texts[(event.env, step)].append(line)  # type: ignore[attr-defined]
        for (env, step), lines in texts.items():
            self.writer.add_text(f"lifecycle/env{env}", "  \n".join(lines), step)

    def _hparams_start(self, event: RunStarted) -> None:
        from torch.utils.tensorboard.summary import hparams

        values: dict[str, Any] = {
            "mode": event.mode,
            "task": event.task,
            "policy": event.policy,
            "reward": event.reward,
            "n_envs": event.n_envs,
            "max_epochs": event.max_epochs,
            "host_params": event.host_params,
        }
        values.update(flatten_config(event.config))
        experiment, session_start, _ = hparams(
            values, {f"hparams/{m}": 0.0 for m in HPARAM_METRICS}
        )
        self.writer.file_writer.add_summary(experiment)
        self.writer.file_writer.add_summary(session_start)

    def _hparams_end(self, event: RunFinished) -> None:
        if not self.options.hparams or event.status != "completed":
            return
        from torch.utils.tensorboard.summary import hparams

        for metric in HPARAM_METRICS:
            value = event.summary.get(metric)
            if isinstance(value, int | float) and finite(float(value)):
                self.writer.add_scalar(f"hparams/{metric}", float(value), 0)
        _, _, session_end = hparams({}, {})
        self.writer.file_writer.add_summary(session_end)

    def flush(self, to_disk: bool | None = None) -> None:
        """Write the completed epoch's means; put the file on disk if it is time to."""
        for step, means in self._epoch_means.drain():
            self._scalars("mean", means, step)
        for step, means in self._episode_means.drain():
            self._scalars("episode/mean", means, step)
        if to_disk is None:
            to_disk = self.options.flush_secs == 0
        if to_disk and self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        self.flush(to_disk=True)
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _event_files(self) -> list[Path]:
        if not self.logdir.is_dir():
            return []
        return sorted(p for p in self.logdir.iterdir() if p.is_file() and EVENT_FILE_MARK in p.name)

    def state_dict(self) -> dict[str, Any]:
        self.flush(to_disk=True)
        return {
            "info": self.info.to_state(),
            "files": {p.name: p.stat().st_size for p in self._event_files()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.info = RunInfo.from_state(state["info"])
        sizes: dict[str, int] = state["files"]
        present = {p.name: p for p in self._event_files()}
        missing = sorted(set(sizes) - set(present))
        if missing:
            raise RunDirError(
                f"{self.logdir}: event file(s) {', '.join(missing)} named by the checkpoint are gone"
            )
        for name, path in present.items():
            if name not in sizes:
                path.unlink()  # written after the checkpoint: the resumed run writes it again
                continue
            if path.stat().st_size < sizes[name]:
                raise RunDirError(
                    f"{path} is shorter than the checkpoint expects ({sizes[name]} bytes): it was "
                    "truncated or replaced after the checkpoint"
                )
            with open(path, "r+b") as fh:
                fh.truncate(sizes[name])


@hookimpl
def esper_register_telemetry(register: Any) -> None:
    register(TensorBoardBackend)
