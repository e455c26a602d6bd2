"""The run directory: its name, its files, and the checks before a run writes or resumes it."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from esper_core.config import RunConfig, dump_toml, load_config
from esper_core.errors import RunDirError
from esper_core.run.checkpoint import write_text
from esper_core.run.resolve import PolicyRef

CHECKPOINT = "checkpoint.pt"
SUMMARY = "summary.json"
CONFIG = "config.toml"


def default_run_dir(config: RunConfig, mode: str) -> Path:
    """``run.out_dir/run.name``, else ``run.out_dir/TASK-POLICY-MODE-TIMESTAMP``."""
    if config.run.name:
        return Path(config.run.out_dir) / config.run.name
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    policy = PolicyRef.parse(config.run.policy).name
    return Path(config.run.out_dir) / f"{config.run.task}-{policy}-{mode}-{stamp}"


def prepare_run_dir(path: Path, config: RunConfig, resume: bool) -> None:
    """Check ``path`` can be resumed (or holds no run yet) and write its config.toml."""
    if resume:
        if not (path / CHECKPOINT).is_file():
            raise RunDirError(f"cannot resume {path}: it has no {CHECKPOINT}")
        # A process killed mid-write leaves its temporary file; the target itself is intact.
        for stale in path.glob(".*.tmp"):
            stale.unlink()
        return
    if path.exists() and ((path / CHECKPOINT).exists() or (path / SUMMARY).exists()):
        raise RunDirError(
            f"{path} already holds a run; resume it with --resume {path}, or choose another --out"
        )
    path.mkdir(parents=True, exist_ok=True)
    write_text(path / CONFIG, dump_toml(config))


def load_run_config(path: Path) -> RunConfig:
    """The config a run directory was started with (to resume it)."""
    if not (path / CONFIG).is_file():
        raise RunDirError(f"{path} is not a run directory: {CONFIG} is missing")
    return load_config(path / CONFIG)
