"""An error boundary for callers of the library API outside the CLI (e.g. compare cells).

The run package itself lets every exception propagate; whoever runs it decides where
errors are explained. This is that decision, packaged: inside ``explained_failures``,
out-of-memory, dead workers, full disks and plugin exceptions become one clear
:class:`~esper_core.errors.EsperError`; bugs keep their traceback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from esper_core.plugins import PluginManager
from esper_core.run.failures import explain, plugin_modules


@contextlib.contextmanager
def explained_failures(pm: PluginManager, run_dir: Path | None, mode: str) -> Iterator[None]:
    """Re-raise what :func:`~esper_core.run.failures.explain` can explain as its EsperError,
    naming the last checkpoint in ``run_dir`` and the ``esper MODE --resume`` to continue."""
    try:
        yield
    except Exception as exc:
        explained = explain(exc, plugin_modules(pm), run_dir, mode)
        if explained is None:
            raise
        raise explained from exc
