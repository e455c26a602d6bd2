"""The one check every path a run writes goes through: it must stay inside the run directory.

The run directory itself may be anywhere the user names on purpose (``--out``,
``run.out_dir``); what the run writes below it (checkpoint, summary, telemetry files)
is named by the code or by component options, and is resolved here, symbolic links
included, so that neither ``../`` nor a link can take a write elsewhere.
"""

from __future__ import annotations

from pathlib import Path

from esper_core.errors import RunDirError


def inside_run_dir(run_dir: Path, relative: str | Path, what: str) -> Path:
    """``run_dir / relative``, refused with a one-line error unless it resolves strictly
    inside ``run_dir``. ``what`` names the writer in the message (e.g. an option)."""
    root = Path(run_dir).resolve()
    target = (root / relative).resolve()
    if root not in target.parents:
        raise RunDirError(
            f"{what} {str(relative)!r} resolves to {target}, outside the run directory "
            f"{root}; every file a run writes stays inside its run directory"
        )
    return Path(run_dir) / relative


def refuse_overwrite(run_dir: Path, relative: str | Path) -> None:
    """Refuse a new run whose file ``relative`` already exists in ``run_dir``.

    ``--out`` may name any existing directory (``--out .``): a file there that shares a
    name with one the run writes (``config.toml``, ``metrics.csv``, ``events.jsonl``) is
    the user's, or another run's, and a new run never writes over it. A resume writes
    on (its files are its own) and does not come here.
    """
    target = Path(run_dir) / relative
    if target.exists() or target.is_symlink():
        raise RunDirError(
            f"{run_dir} already holds {str(relative)!r}, which this new run would write over; "
            "choose another --out (a new or empty directory), or move that file away"
        )
