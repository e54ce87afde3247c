"""theseus_zoo.training.figures: a run's figures leave the caller's matplotlib as it was."""

import json

import pytest

from theseus_zoo.training.figures import new_figure
from theseus_zoo.training.report import plot_curves

matplotlib = pytest.importorskip("matplotlib")
pyplot = pytest.importorskip("matplotlib.pyplot")


def test_writing_a_runs_curves_keeps_the_callers_backend_and_open_figures(tmp_path):
    records = [
        {"phase": "replacing", "step": step, "rate": step / 4, **({"dev": {"accuracy": 0.5}} if step % 2 else {})}
        for step in range(5)
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    backend = matplotlib.get_backend()
    pyplot.switch_backend("svg")  # as a notebook's inline backend would be: not Agg
    try:
        opened = pyplot.figure()
        plot_curves(tmp_path / "metrics.jsonl", tmp_path / "curves.png", "accuracy")
        assert matplotlib.get_backend() == "svg" and pyplot.get_fignums() == [opened.number]
        assert (tmp_path / "curves.png").read_bytes().startswith(b"\x89PNG")
    finally:
        pyplot.close("all")
        pyplot.switch_backend(backend)


def test_a_new_figure_has_the_subplots_asked_for():
    figure, axes = new_figure(2, 1, figsize=(4, 3), sharex=True)
    assert axes.shape == (2,) and tuple(figure.get_size_inches()) == (4, 3)
    assert axes[0].get_shared_x_axes().joined(axes[0], axes[1])
