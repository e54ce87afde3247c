"""Runs that may be finished already: `ensure_run` reads a finished run's report, resumes a started one or runs it,
in this process (`theseus_zoo.training.run.Run`) or in a ``theseus compress`` process of its own (`CompressProcess`).
`theseus sweep`, `theseus analyze` and the benchmarks build on it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from .results import REPORT, Report
from .run import Run
from .run_directory import CHECKPOINT, RunError, recipe_changes

if TYPE_CHECKING:
    from ..recipes import Recipe


class Runner(Protocol):
    """Runs a recipe into ``out``: resumes it (``resume``), or starts it, taking the fine-tuned predecessor of
    ``predecessor_from`` when given; leaves ``out/report.json``."""

    def __call__(self, out: Path, *, resume: bool, predecessor_from: Path | None) -> object: ...


def ensure_run(
    recipe: Recipe | None,
    out: Path,
    *,
    progress: bool = True,
    predecessor_from: Path | None = None,
    runner: Runner | None = None,
) -> Report:
    """The report of the run in ``out``: read when it is finished, resumed when it has a checkpoint, else run.
    A fresh run takes the fine-tuned predecessor of ``predecessor_from`` (a finished run) when given and its recipe
    has a predecessor phase; a resumed one has its own. ``runner`` runs instead of `theseus_zoo.training.run.Run`
    in this process (`CompressProcess`: a ``theseus compress`` process of its own, with its own thread count); then
    ``recipe`` may be ``None``, the runner knowing it. A finished run whose report records another recipe than
    ``recipe`` is refused (`RunError`), never read as this one's (a sweep resumed with another grid, say)."""
    out = Path(out)
    if not (out / REPORT).exists():
        started = (out / CHECKPOINT).exists()
        without_predecessor = recipe is not None and recipe.predecessor is None  # nothing to take
        source = None if started or without_predecessor else predecessor_from
        if runner is None:
            if recipe is None:
                raise ValueError("ensure_run: give a recipe, or a runner that knows it")
            Run(recipe, out, resume=started, progress=progress, predecessor_from=source).run()
        else:
            runner(out, resume=started, predecessor_from=source)
    report = Report.load(out / REPORT)
    differing = None if recipe is None else recipe_changes(report.recipe, recipe)  # a finished run: is it this one?
    if differing is not None:
        raise RunError(
            f"{out} holds a finished run of another recipe ({differing}): resume with the same --recipe, --config "
            f"and flags (a sweep: the same --grid), or choose another --out"
        )
    return report


@dataclass(frozen=True)
class CompressProcess:
    """A `Runner`: ``theseus compress --recipe RECIPE [ARGUMENTS] --out OUT --no-progress`` in a process of its
    own with ``threads`` OpenMP / MKL threads, its output in ``log`` (``mode`` ``"w"`` or ``"a"``); raises
    `RuntimeError` naming ``name`` and the log when it fails."""

    recipe: str
    arguments: Sequence[str] = ()
    threads: int = 1
    log: Path | None = None
    mode: str = "w"
    name: str | None = None

    def cli_arguments(self, out: Path, *, resume: bool, predecessor_from: Path | None) -> list[str]:
        """The ``theseus`` command line (after the program name) this runner runs for ``out``."""
        arguments = ["compress", "--recipe", self.recipe, *self.arguments, "--out", str(out), "--no-progress"]
        if resume:
            return [*arguments, "--resume"]
        if predecessor_from is not None:
            return [*arguments, "--predecessor-from", str(predecessor_from)]
        return arguments

    def __call__(self, out: Path, *, resume: bool, predecessor_from: Path | None) -> None:
        arguments = self.cli_arguments(out, resume=resume, predecessor_from=predecessor_from)
        command = [sys.executable, "-m", "theseus_zoo.cli", *arguments]
        environment = {**os.environ, "OMP_NUM_THREADS": str(self.threads), "MKL_NUM_THREADS": str(self.threads)}
        log = self.log or out.parent / f"{out.name}.log"
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(log, self.mode) as stream:
            finished = subprocess.run(command, env=environment, stdout=stream, stderr=subprocess.STDOUT)
        if finished.returncode != 0:
            raise RuntimeError(f"{self.name or out} failed (exit {finished.returncode}); see {log}")
