"""Grid sweeps of a recipe (`theseus sweep`): one run per grid point, the point with the best dev metric wins.

    theseus sweep --recipe NAME --grid replacing.lr=1e-5,2e-5 --grid steps_to_one=1000,5000 [--out DIR]
    theseus sweep --recipe NAME --paper-grid

A grid field is a recipe field, or a dotted path into ``options`` or a phase
(``options.num_layers``, ``replacing.lr``); values are JSON (numbers, strings,
lists). Points run one after another in ``<out>/point-NN``. When the grid leaves
the predecessor alone (no ``family``, ``options``, ``predecessor`` or ``seed``),
the first point fine-tunes it and the others take it from there. Points skip
the baselines (the sweep tunes the compression). A point whose ``steps_to_one`` lies
beyond the recipe's ``replacing.steps`` (the paper's grid reaches p = 1 at up to 30,000
steps) gets ``replacing.steps`` extended to keep the recipe's successor fine-tuning
after p = 1 (``steps_to_one`` + the recipe's ``replacing.steps - steps_to_one``), and
its row says so. A point whose recipe is still invalid is listed as skipped, with the
reason, in ``sweep.md`` and on stderr. Like `theseus compress`, an interrupted sweep
continues with ``--resume``.
Writes ``<out>/sweep.json`` and ``sweep.md``; the winner is chosen on dev, and its
test metric is what the sweep reports.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..recipes import Recipe

PAPER_GRID: dict[str, list[Any]] = {
    "replacing.lr": [1e-5, 2e-5],
    "schedule_base": [0.1, 0.3],
    "steps_to_one": [1000, 5000, 10000, 30000],
}
"""BERT-of-Theseus §4.2: learning rate, basic replacing rate b, and the step at which p reaches 1 (sets k)."""

_PREDECESSOR_FIELDS = ("family", "options", "predecessor", "seed")


def parse_grid(entries: Sequence[str]) -> dict[str, list[Any]]:
    """``["replacing.lr=1e-5,2e-5", ...]`` -> ``{"replacing.lr": [1e-5, 2e-5], ...}``; raises `ValueError`."""
    grid: dict[str, list[Any]] = {}
    for entry in entries:
        field, separator, values = entry.partition("=")
        if not separator or not field or not values:
            raise ValueError(f"--grid takes FIELD=VALUE,VALUE,..., got {entry!r}")
        if field in grid:
            raise ValueError(f"--grid names {field!r} twice")
        grid[field] = [_value(value) for value in values.split(",")]
    return grid


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def overrides_of(point: Mapping[str, Any]) -> dict[str, Any]:
    """``{"replacing.lr": 1e-5, "seed": 1}`` -> ``{"replacing": {"lr": 1e-5}, "seed": 1}``."""
    overrides: dict[str, Any] = {}
    for field, value in point.items():
        head, _, rest = field.partition(".")
        if rest:
            overrides.setdefault(head, {})[rest] = value
        else:
            overrides[head] = value
    return overrides


def points(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid's values, the first field varying slowest."""
    return [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]


def sweep(
    recipe: Recipe,
    grid: Mapping[str, Sequence[Any]],
    out: Path,
    *,
    resume: bool,
    progress: bool,
    predecessor_from: Path | None = None,
) -> dict:
    """Runs every grid point of ``recipe`` (see the module doc); returns the summary written to sweep.json.
    ``predecessor_from``: a finished run whose fine-tuned predecessor every point takes (when the grid leaves the
    predecessor alone), instead of the first point fine-tuning one."""
    from .run_directory import RunError
    from .runners import ensure_run

    out = Path(out)
    candidates, notes = [], {}
    for number, point in enumerate(points(grid)):
        overrides = {**overrides_of(point), **recipe.theseus_and()}
        note = _extend_for_steps_to_one(recipe, point, overrides)
        try:
            candidate = recipe.with_overrides(overrides)
        except (ValueError, TypeError) as error:
            candidate = error
            print(f"theseus sweep: skipping grid point {point}: {error}", file=sys.stderr)
        if note:
            notes[number] = note
        candidates.append((out / f"point-{number:02d}", point, candidate))
    if all(isinstance(candidate, Exception) for _, _, candidate in candidates):
        raise RunError(f"no grid point gives a valid recipe: {candidates[0][2]}")
    if not resume and out.exists() and any(out.glob("point-*")):
        raise RunError(f"{out} holds a sweep already; pass --resume to continue it, or choose another --out")
    shares_predecessor = recipe.predecessor is not None and not any(
        field.partition(".")[0] in _PREDECESSOR_FIELDS for field in grid
    )
    rows, source = [], predecessor_from
    for number, (directory, point, candidate) in enumerate(candidates):
        if isinstance(candidate, Exception):
            rows.append({"point": point, "skipped": str(candidate)})
            continue
        report = ensure_run(
            candidate,
            directory,
            progress=progress,
            predecessor_from=source if shares_predecessor else None,
        )
        if source is None:
            source = directory
        theseus = report.models["theseus"]
        rows.append(
            {
                "point": point,
                "directory": str(directory),
                "dev": report.phases["replacing"]["best_metric"],
                "test": report.test("theseus"),
                "retention_percent": theseus.retention_percent,
                "predecessor_test": report.test("predecessor"),
                **({"note": notes[number]} if number in notes else {}),
            }
        )
    finished = [row for row in rows if "dev" in row]
    best = max(finished, key=lambda row: row["dev"])
    summary = {"recipe": recipe.to_dict(), "grid": dict(grid), "rows": rows, "best": best}
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "sweep.md").write_text(markdown(summary))
    return summary


def _extend_for_steps_to_one(recipe: Recipe, point: Mapping[str, Any], overrides: dict[str, Any]) -> str | None:
    """Extends ``overrides``' replacing steps in place when the point's ``steps_to_one`` lies beyond them (and the
    grid does not set them itself); returns the note for the point's row, or ``None``."""
    steps_to_one = point.get("steps_to_one")
    if not isinstance(steps_to_one, int) or "replacing.steps" in point:
        return None
    tail = recipe.replacing.steps - recipe.steps_to_one
    if steps_to_one <= recipe.replacing.steps:
        return None
    steps = steps_to_one + tail
    overrides.setdefault("replacing", {})["steps"] = steps
    return f"replacing.steps extended to {steps} ({tail} steps at p = 1, as the recipe has)"


def markdown(summary: Mapping[str, Any]) -> str:
    fields = list(summary["grid"])
    lines = [
        f"# Sweep of `{summary['recipe']['name']}`\n",
        "| " + " | ".join([*fields, "dev (best)", "test", "retention", ""]) + " |",
        "|" + "---|" * (len(fields) + 4),
    ]
    for row in summary["rows"]:
        values = [str(row["point"][field]) for field in fields]
        if "skipped" in row:
            lines.append("| " + " | ".join([*values, "skipped", "", "", row["skipped"]]) + " |")
        else:
            mark = "; ".join(
                text for text in ("best on dev" if row == summary["best"] else "", row.get("note", "")) if text
            )
            cells = [f"{row['dev']:.4f}", f"{row['test']:.4f}", f"{row['retention_percent']:.1f}%", mark]
            lines.append("| " + " | ".join([*values, *cells]) + " |")
    best = summary["best"]
    lines.append(
        f"\nChosen on dev: {best['point']} -> test {best['test']:.4f} ({best['retention_percent']:.1f}% of the "
        f"predecessor's {best['predecessor_test']:.4f})."
    )
    return "\n".join(lines) + "\n"
