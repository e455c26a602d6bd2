"""``telemetry.wandb``: Weights & Biases logging, offline by default.

``mode = "offline"`` (the default) needs no account and no network: wandb writes the
run into ``RUN_DIR/wandb/offline-run-*``; ``wandb sync RUN_DIR/wandb/offline-run-*``
uploads it later. Each metric group has its own step metric declared with
``define_metric``, so every group's x axis increases on its own and wandb never drops
a row for going "back in time":

- ``epoch/env{i}/<metric>``, ``epoch/mean/<metric>``, ``epoch/total/<lifecycle count>``
  against ``global_epoch`` (= episode × max_epochs + epoch);
- ``episode/env{i}/<metric>``, ``episode/mean/<metric>`` against ``episode_index``;
- ``ppo/<diagnostic>`` against ``ppo_update``.

Rows are collected while an epoch's events arrive and logged at ``flush()``, one row
per group and step, in step order.

Resuming continues the same wandb run id (wandb writes a new offline directory for the
resumed segment). The interrupted process may have logged steps after its checkpoint;
``wandb/esper-wandb.json`` records the last step logged per group, and the resumed run
skips those steps instead of logging them twice.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, ClassVar

from attrs import define

from esper_core import TelemetryContext, hookimpl
from esper_core.converter import one_of, options_field
from esper_core.errors import PluginError
from esper_core.run.telemetry import (
    EpisodeFinished,
    EpochCompleted,
    Event,
    GovernorRollback,
    PolicyUpdate,
    RunFinished,
    RunStarted,
    SeedFossilized,
    SeedGerminated,
    SeedPruned,
)
from esper_telemetry.common import (
    RunInfo,
    StepMeans,
    episode_metrics,
    epoch_metrics,
    finite,
    lifecycle_epoch,
)

# group -> the step metric its x axis uses
STEP_METRICS = {"epoch": "global_epoch", "episode": "episode_index", "ppo": "ppo_update"}
LIFECYCLE_COUNTS = {
    SeedGerminated: "germinated",
    SeedFossilized: "fossilized",
    SeedPruned: "pruned",
    GovernorRollback: "rollbacks",
}
STATE_FILE = "esper-wandb.json"


@define
class WandbOptions:
    mode: str = options_field(
        "offline",
        one_of("offline", "online", "disabled"),
        "offline: write locally, sync later; online needs a login.",
    )
    project: str = options_field("esper", doc="wandb project.")
    entity: str | None = options_field(None, doc="wandb entity (user or team).")
    group: str | None = options_field(None, doc="wandb run group.")
    tags: list[str] = options_field([], doc="wandb run tags.")
    per_env: bool = options_field(True, doc="Log each env's metrics, not only the means over envs.")


class WandbBackend:
    """Logs epoch, episode and PPO metrics to a wandb run (offline by default)."""

    name: ClassVar[str] = "wandb"
    description: ClassVar[str] = (
        "Weights & Biases (offline by default): epoch, episode and PPO metrics"
    )
    Options: ClassVar[type] = WandbOptions

    def __init__(self, options: WandbOptions, context: TelemetryContext) -> None:
        if importlib.util.find_spec("wandb") is None:
            raise PluginError(
                "telemetry backend 'wandb' needs the wandb package: pip install 'esper-telemetry[wandb]'"
            )
        self.options = options
        # wandb writes RUN_DIR/wandb/...: that path must stay inside the run directory.
        self.dir = context.path("wandb", self.name).parent
        self.info = RunInfo()
        self.config: dict[str, Any] = {}
        self.run: Any = None
        self.run_id: str | None = None
        self.resumed = False
        self.logged: dict[str, int] = {}  # group -> last step handed to wandb
        self.skip: dict[str, int] = {}  # group -> steps up to this one are already logged
        self._rows: dict[str, dict[int, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
        self._epoch_means = StepMeans()
        self._episode_means = StepMeans()

    # ------------------------------------------------------------ the wandb run

    def _ensure_run(self) -> Any:
        if self.run is not None:
            return self.run
        import wandb

        opts = self.options
        mode: Any = opts.mode  # validated by WandbOptions
        self.dir.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=opts.project,
            entity=opts.entity,
            group=opts.group,
            tags=list(opts.tags) or None,
            name=self.info.run_name or None,
            id=self.run_id,
            resume="allow" if self.resumed else None,
            dir=str(self.dir),
            mode=mode,
            config=self.config or None,
            reinit="create_new",
            settings=wandb.Settings(
                silent=True,
                console="off",
                disable_git=True,
                save_code=False,
                disable_job_creation=True,
            ),
        )
        self.run_id = self.run.id
        for group, step_metric in STEP_METRICS.items():
            self.run.define_metric(step_metric)
            self.run.define_metric(f"{group}/*", step_metric=step_metric)
        return self.run

    # ------------------------------------------------------------ events

    def handle(self, events: Sequence[Event]) -> None:
        for event in events:
            if isinstance(event, RunStarted):
                self.info = RunInfo.from_event(event)
                self.config = {
                    **event.config,
                    "esper": {
                        "mode": event.mode,
                        "task": event.task,
                        "policy": event.policy,
                        "reward": event.reward,
                        "n_envs": event.n_envs,
                        "max_epochs": event.max_epochs,
                        "host_params": event.host_params,
                        "version": event.esper_version,
                    },
                }
                self._ensure_run()
            elif isinstance(event, EpochCompleted):
                step = self.info.global_epoch(event.episode, event.epoch)
                metrics = epoch_metrics(event)
                for slot in event.slots:
                    metrics[f"alpha/{slot.slot_id}"] = slot.alpha
                self._per_env("epoch", step, event.env, metrics)
                self._epoch_means.add(step, metrics)
                totals = self._rows["epoch"][step]
                for kind in LIFECYCLE_COUNTS.values():
                    totals.setdefault(f"epoch/total/{kind}", 0.0)
            elif isinstance(event, EpisodeFinished):
                metrics = episode_metrics(event)
                self._per_env("episode", event.episode, event.env, metrics)
                self._episode_means.add(event.episode, metrics)
            elif isinstance(event, PolicyUpdate):
                row = self._rows["ppo"][event.update]
                row.update(
                    {f"ppo/{k}": float(v) for k, v in event.diagnostics.items() if finite(v)}
                )
            elif isinstance(event, RunFinished):
                self._finish_summary(event)
            elif type(event) in LIFECYCLE_COUNTS:
                step = self.info.global_epoch(event.episode, lifecycle_epoch(event))  # type: ignore[attr-defined]
                key = f"epoch/total/{LIFECYCLE_COUNTS[type(event)]}"
                row = self._rows["epoch"][step]
                row[key] = row.get(key, 0.0) + 1.0

    def _per_env(self, group: str, step: int, env: int, metrics: dict[str, float]) -> None:
        if not self.options.per_env:
            return
        row = self._rows[group][step]
        row.update({f"{group}/env{env}/{k}": float(v) for k, v in metrics.items() if finite(v)})

    def _finish_summary(self, event: RunFinished) -> None:
        run = self._ensure_run()
        run.summary["status"] = event.status
        for key, value in event.summary.items():
            if isinstance(value, bool | int | str) or (isinstance(value, float) and finite(value)):
                run.summary[key] = value

    def flush(self) -> None:
        for step, means in self._epoch_means.drain():
            self._rows["epoch"][step].update({f"epoch/mean/{k}": v for k, v in means.items()})
        for step, means in self._episode_means.drain():
            self._rows["episode"][step].update({f"episode/mean/{k}": v for k, v in means.items()})
        if not any(self._rows.values()):
            return
        run = self._ensure_run()
        for group, step_metric in STEP_METRICS.items():
            rows = self._rows.pop(group, {})
            for step in sorted(rows):
                if step <= self.skip.get(group, -1):
                    continue  # logged by the process that was interrupted after the checkpoint
                run.log({step_metric: step, **rows[step]})
                self.logged[group] = step
        self._write_marks()

    def _write_marks(self) -> None:
        # Plain write + rename, no fsync: this only avoids logging steps twice after a resume.
        path = self.dir / "wandb" / STATE_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({"run_id": self.run_id, "logged": self.logged}), encoding="utf-8")
        os.replace(tmp, path)

    def _read_marks(self) -> dict[str, int]:
        path = self.dir / "wandb" / STATE_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("run_id") != self.run_id:
            return {}
        return {str(k): int(v) for k, v in dict(data.get("logged") or {}).items()}

    def close(self) -> None:
        self.flush()
        if self.run is not None:
            self.run.finish()
            self.run = None

    def state_dict(self) -> dict[str, Any]:
        self.flush()
        return {"info": self.info.to_state(), "run_id": self.run_id, "logged": dict(self.logged)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.info = RunInfo.from_state(state["info"])
        self.run_id = state.get("run_id")
        self.resumed = self.run_id is not None
        self.logged = {str(k): int(v) for k, v in dict(state.get("logged") or {}).items()}
        marks = self._read_marks()
        self.skip = {g: max(marks.get(g, -1), self.logged.get(g, -1)) for g in STEP_METRICS}


@hookimpl
def esper_register_telemetry(register: Any) -> None:
    register(WandbBackend)
