"""`theseus_zoo.training.results`: the typed report reads and writes report.json as it is; ensure_run decides."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from theseus_zoo.training.results import REPORT, ModelResult, Report
from theseus_zoo.training.run_directory import CHECKPOINT
from theseus_zoo.training.runners import ensure_run

ARCHIVE = Path(__file__).parents[3] / "benchmarks" / "results"
WRITTEN = [path for path in sorted(ARCHIVE.rglob(REPORT)) if "campaigns" not in path.relative_to(ARCHIVE).parts]
"""Reports as `theseus compress` wrote them (a campaign's archive keeps them as compact JSON instead)."""
COMPACT = sorted((ARCHIVE / "campaigns").rglob(REPORT))


@pytest.mark.parametrize(
    "path",
    WRITTEN[:6] or [pytest.param(None, marks=pytest.mark.skip("no archived reports"))],
    ids=lambda path: str(path.parent.name) if path else "none",
)
def test_an_archived_report_loads_and_saves_byte_for_byte(path, tmp_path):
    report = Report.load(path)
    assert report.version == 1  # written before reports had a version field
    report.save(tmp_path / REPORT)
    assert (tmp_path / REPORT).read_bytes() == path.read_bytes()


@pytest.mark.parametrize(
    "path",
    COMPACT[:4] or [pytest.param(None, marks=pytest.mark.skip("no campaign reports"))],
    ids=lambda path: "/".join(path.parent.parts[-3:]) if path else "none",
)
def test_a_compact_campaign_report_loads_every_value_it_holds(path):
    data = json.loads(path.read_text())
    assert Report.load(path).to_dict() == data


def test_fields_in_their_order_a_null_retention_and_unknown_fields_kept(tmp_path):
    data = {
        "recipe": {"name": "r", "refine": {"steps": 3}},
        "metric": "accuracy",
        "models": {"predecessor": {"test": {"accuracy": 0.0}, "parameters": 4, "retention_percent": None}},
        "refinement": None,
        "speedup": 1.5,
        "phases": {},
        "from_the_future": [1],
    }
    report = Report.from_dict(data)
    assert report.test("predecessor") == 0.0 and report.models["predecessor"].retention_percent is None
    assert list(report.to_dict()) == list(data) and report.to_dict() == data
    report.save(tmp_path / REPORT)
    assert (tmp_path / REPORT).read_text() == json.dumps(data, indent=2) + "\n"
    assert ModelResult(test={"accuracy": 1.0}, parameters=2).to_dict() == {
        "test": {"accuracy": 1.0},
        "parameters": 2,
        "retention_percent": None,
    }


def test_a_newer_report_is_refused_and_a_later_version_writes_its_number():
    with pytest.raises(ValueError, match="newer than this theseus_zoo reads"):
        Report.from_dict({"version": 99, "metric": "accuracy", "models": {}})
    report = Report.from_dict({"metric": "accuracy", "models": {}})
    report.version = 2
    assert next(iter(report.to_dict())) == "version"


class Recorder:
    """A runner that records how it was called and leaves a minimal report."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def __call__(self, out: Path, *, resume: bool, predecessor_from: Path | None) -> None:
        self.calls.append({"resume": resume, "predecessor_from": predecessor_from})
        out.mkdir(parents=True, exist_ok=True)
        (out / REPORT).write_text(json.dumps({"metric": "accuracy", "models": {"theseus": {"test": {"accuracy": 1}}}}))


def test_ensure_run_runs_fresh_resumes_started_and_reads_finished(tmp_path):
    runner, source = Recorder(), tmp_path / "source"
    assert ensure_run(None, tmp_path / "fresh", predecessor_from=source, runner=runner).test("theseus") == 1
    (tmp_path / "started").mkdir()
    (tmp_path / "started" / CHECKPOINT).write_bytes(b"")
    ensure_run(None, tmp_path / "started", predecessor_from=source, runner=runner)
    assert runner.calls == [
        {"resume": False, "predecessor_from": source},
        {"resume": True, "predecessor_from": None},  # a started run has its own predecessor
    ]
    ensure_run(None, tmp_path / "fresh", runner=runner)  # finished: read, not run
    assert len(runner.calls) == 2
    with pytest.raises(ValueError, match="give a recipe"):
        ensure_run(None, tmp_path / "nothing")


def test_ensure_run_refuses_a_finished_run_of_another_recipe(tmp_path):
    """A sweep resumed with another grid read each point's old report as the new point's, and reported it under the
    new values; a finished run is now read only for the recipe its report records."""
    from theseus_zoo.recipes import get_recipe
    from theseus_zoo.training.run_directory import RunError

    recipe = get_recipe("toy")
    recorded = json.loads(json.dumps(recipe.to_dict()))  # as report.json gives it back: tuples as lists
    del recorded["budget"]  # a report written before a field existed matches with that field at its default
    (tmp_path / "run").mkdir()
    report = {"recipe": recorded, "metric": "accuracy", "models": {"theseus": {"test": {"accuracy": 1}}}}
    (tmp_path / "run" / REPORT).write_text(json.dumps(report))
    assert ensure_run(recipe, tmp_path / "run").test("theseus") == 1
    other = recipe.with_overrides({"replacing": {"lr": 1e-2}})
    named = r"another recipe \(replacing\.lr: 0\.001 in the run, 0\.01 given now\): .* the same --grid"
    with pytest.raises(RunError, match=named):
        ensure_run(other, tmp_path / "run")


def test_a_crash_while_saving_leaves_the_previous_report_whole(tmp_path, monkeypatch):
    """report.json marks a finished run (`ensure_run` reads it as such): it is written whole or not at all."""
    import os

    old = Report.from_dict({"metric": "accuracy", "models": {"theseus": {"test": {"accuracy": 0.5}}}})
    old.save(tmp_path / REPORT)
    before = (tmp_path / REPORT).read_bytes()
    new = Report.from_dict({"metric": "accuracy", "models": {"theseus": {"test": {"accuracy": 0.9}}}})

    def killed(source, target):  # the process dies between writing the new report and putting it in place
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        new.save(tmp_path / REPORT)
    assert (tmp_path / REPORT).read_bytes() == before
