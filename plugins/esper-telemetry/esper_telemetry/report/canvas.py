"""The canvas every report figure is drawn on: a figure on matplotlib's Agg canvas, its
series colours and grid, and the PNG it is saved as.

No pyplot: nothing here changes matplotlib's global backend or state, so the report can
be built inside any process (a notebook, a test) without side effects.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from esper_core.run.checkpoint import atomic_writer
from esper_telemetry.report.data import Key, RunData

SERIES_COLOURS = "tab10"
GRID = {"alpha": 0.3, "linewidth": 0.6}


def new_figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def save(figure: Any, path: Path, dpi: int) -> Path:
    with atomic_writer(path, "wb") as fh:
        figure.savefig(fh, format="png", dpi=dpi, facecolor="white")
    return path


def palette(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps[SERIES_COLOURS]
    return [cmap(i % cmap.N) for i in range(n)]


def integer_ticks(ax: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def series_label(data: RunData, key: Key) -> str:
    env, episode = key
    return f"env {env} · {data.outer_name} {episode}"
