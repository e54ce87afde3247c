"""Figures for the files a run writes, through matplotlib's object API: no pyplot, so the caller's backend and
pyplot's list of open figures are left as they are (a notebook that runs `theseus_zoo` in-process keeps its inline
plots), and a figure is freed by the garbage collector like any object (pyplot keeps each until closed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

DPI = 110


def new_figure(rows: int = 1, columns: int = 1, **options: Any) -> tuple[Any, Any]:
    """``(figure, axes)`` as ``pyplot.subplots(rows, columns, **options)`` returns them; ``figsize`` and
    ``constrained_layout`` go to the figure, the rest (``sharex``, ...) to its subplots."""
    from matplotlib.figure import Figure

    figure_options = {key: options.pop(key) for key in ("figsize", "constrained_layout") if key in options}
    figure = Figure(**figure_options)
    return figure, figure.subplots(rows, columns, **options)


def save(figure: Any, png: Path) -> None:
    """``figure`` as a PNG at the runs' resolution (rendered by Agg, whatever the caller's backend)."""
    figure.savefig(png, dpi=DPI)
