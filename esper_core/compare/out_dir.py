"""The experiment directory: what a comparison writes there, and the check before it does.

``esper compare --out`` (or ``out =``) may name any directory, ``.`` in a project
included. A comparison's own directory (its ``experiment.json``, written before anything
else) is continued when the command runs again; any other directory holding a file or
folder a comparison writes is the user's, and is refused rather than written over (a
``cells`` folder that does not look like finished runs would even be removed).
"""

from __future__ import annotations

from pathlib import Path

from esper_core.compare.experiment import CELLS_DIR, LOCKS_DIR
from esper_core.errors import RunDirError

RESULTS_JSON = "results.json"
RESULTS_MD = "results.md"
PLOT = "intervals.png"
PARETO_PLOT = "pareto.png"
EXPERIMENT_JSON = "experiment.json"
TUNING_DIR = "tuning"  # the search's cells (esper_core.compare.tuning)


def check_out(out: Path) -> None:
    """Refuse an ``out`` that holds what a comparison writes but is not one's directory."""
    if (out / EXPERIMENT_JSON).exists():
        return
    ours = (RESULTS_JSON, RESULTS_MD, PLOT, PARETO_PLOT, CELLS_DIR, LOCKS_DIR, TUNING_DIR)
    for name in ours:
        if (out / name).exists() or (out / name).is_symlink():
            raise RunDirError(
                f"{out} holds {name!r} but no {EXPERIMENT_JSON}, so it is not a comparison's "
                "directory and esper compare would write over it; choose another --out "
                "(a new or empty directory), or move that file away"
            )
