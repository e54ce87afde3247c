"""Campaigns: long lists of runs that outlive a session, run a few one-thread jobs at a time, raw results kept.

    python -m benchmarks.campaign run NAME [--jobs 2] [--threads 1] [--runs runs/campaigns] [--hours H] [--device cpu]
    python -m benchmarks.campaign status NAME

What a campaign is, and which runs it asks for when (grids, closed grids, final seeds, compute matching, devices):
`benchmarks.campaign_plan`. This module runs them.

``run`` starts what is not done, ``--jobs`` processes of ``--threads`` threads at a time (``theseus compress`` each,
`theseus_zoo.training.runners.CompressProcess`), in the campaign's order, until nothing is left or ``--hours`` have
passed (then it starts nothing new and waits for the runs in flight). A run is done when its raw result is in the
archive, ``benchmarks/results/campaigns/NAME/<cell>/<method>/<setting>/seed<N>/report.json`` (written the moment the
run finishes, as compact JSON (`archive_report`), with ``provenance.json``: the command, config, commit and machine;
commit them); a done run never runs again. A run killed midway resumes from its checkpoint. The first run of a seed
fine-tunes its predecessor, the others take it (``--predecessor-from``); a predecessor lost with a machine is
fine-tuned again by the next run that needs it, and must give the archived reports' predecessor outputs
(`benchmarks.compare.same_predecessor`) or the campaign stops. A finished run's checkpoints and exported model are
deleted, but for the run that holds its seed's predecessor. ``run`` starts only its ``--device``'s seeds (default
``cpu``; `Campaign.device_of`), and stops if a done run's seed has changed device since (`Campaign.misplaced`).
``--finish-hours`` starts a run only if it should end in time (a GPU call's limit).

``status`` prints done / running / left per cell and method and the CPU-hours left, estimated from the finished
runs (the mean wall-clock of the method's runs in the cell, else in any cell, predecessor phases included, times
``--threads``; `Campaign.seconds`, `campaign_plan.estimate`),
and with GPU seeds, done / running / left and the runs' hours left per device.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from theseus_zoo.data.assets import cache_dir, missing_assets
from theseus_zoo.training.results import REPORT, Report
from theseus_zoo.training.run_directory import CHECKPOINT
from theseus_zoo.training.runners import CompressProcess, ensure_run

from .campaign_plan import (
    ARCHIVE,
    CAMPAIGNS,
    DEVICES,
    PROVENANCE,
    Campaign,
    CampaignRun,
    edge_extension,
    learning_rate,
    rate_token,
)
from .compare import predecessor_outputs, same_predecessor
from .harness import environment

__all__ = [  # the definition, from benchmarks.campaign_plan, and the runner
    "ARCHIVE",
    "CAMPAIGNS",
    "DEVICES",
    "PROVENANCE",
    "Campaign",
    "CampaignRun",
    "edge_extension",
    "execute",
    "learning_rate",
    "main",
    "next_runs",
    "rate_token",
    "run_campaign",
]


def execute(campaign: Campaign, run: CampaignRun, threads: int) -> Report:
    """Runs (or resumes) ``run`` of ``campaign`` in a process of its own, archives its report at once, checks its
    predecessor against the archived reports of its (cell, seed), and cleans its directory (module doc)."""
    directory = campaign.runs_root / run.path
    directory.parent.mkdir(parents=True, exist_ok=True)
    config = directory.parent / f"seed{run.seed}.config.json"
    config.write_text(json.dumps(campaign.overrides(run), indent=2) + "\n")
    source = campaign.predecessor_source(run)
    arguments = ["--config", str(config), "--seed", str(run.seed)]
    recipe = campaign.cells[run.cell]["recipe"]
    runner = CompressProcess(recipe, arguments, threads, log=directory.parent / f"seed{run.seed}.log", name=str(run))
    started = time.monotonic()
    report = ensure_run(None, directory, predecessor_from=source, runner=runner)
    wall_seconds = time.monotonic() - started
    siblings = [
        other
        for other in campaign.runs()
        if campaign.predecessor_key(other) == campaign.predecessor_key(run) and other != run and campaign.done(other)
    ]
    outputs = predecessor_outputs(report.to_dict())
    for other in siblings[:1]:
        if not same_predecessor(outputs, predecessor_outputs(campaign.report(other).to_dict())):
            provenance = campaign.archive / other.path / PROVENANCE
            archived = json.loads(provenance.read_text()).get("environment", {}) if provenance.exists() else {}
            raise RuntimeError(
                f"{run}: its predecessor differs from the archived {other}'s (that one fine-tuned on "
                f"{machine(archived)}, this one on {machine(environment())}: a seed continues only where its "
                "predecessor fine-tunes alike): the campaign stops; the run's report is kept in its run directory, "
                "not archived"
            )
    target = campaign.archive / run.path
    target.mkdir(parents=True, exist_ok=True)
    provenance = {
        "command": shlex.join(["theseus", "compress", "--recipe", recipe, *arguments, "--threads", str(threads)]),
        "config": campaign.overrides(run),
        "predecessor_from": None if source is None else str(source),
        "wall_seconds": wall_seconds,  # of this process's part: a resumed run's earlier part is not in it
        "campaign_device": campaign.device_of(run),
        "environment": {**environment(), "torch_threads": threads},
    }
    (target / PROVENANCE).write_text(json.dumps(provenance, indent=2) + "\n")
    archive_report(directory / REPORT, target / REPORT)
    with campaign.lock:
        if source is None and campaign.predecessor_source(run) is None:
            campaign.predecessor_record(run).parent.mkdir(parents=True, exist_ok=True)
            campaign.predecessor_record(run).write_text(str(directory.resolve()) + "\n")
        if campaign.predecessor_source(run) != directory.resolve():
            clean(directory)
    return report


def machine(environment: dict[str, Any]) -> str:
    """A provenance's machine in words: processor, torch."""
    return f"{environment.get('processor') or 'an unrecorded processor'}, torch {environment.get('torch', '?')}"


def archive_report(source: Path, target: Path) -> None:
    """Writes the report ``source`` holds to ``target`` as compact JSON on one line: the same values (floats round
    trip exactly), a third of the bytes of the run's indented file, whose per-example predictions take a line each;
    hundreds of raw results stay small in the repository."""
    target.write_text(json.dumps(json.loads(source.read_text()), separators=(",", ":")) + "\n")


def clean(directory: Path) -> None:
    """Deletes a finished run's checkpoints and exported model (hundreds of MB for MiniLM); keeps its report,
    metrics and curves."""
    for name in (CHECKPOINT, CHECKPOINT + ".previous"):
        (directory / name).unlink(missing_ok=True)
    shutil.rmtree(directory / "model", ignore_errors=True)


def running_file(campaign: Campaign) -> Path:
    return campaign.runs_root / "running.json"


def read_running(campaign: Campaign) -> set[CampaignRun]:
    """The runs a live ``run`` process says it has in flight (none when that process is gone)."""
    path = running_file(campaign)
    if not path.exists():
        return set()
    data = json.loads(path.read_text())
    try:
        os.kill(data["pid"], 0)
    except (OSError, KeyError):
        return set()
    return {CampaignRun(**entry) for entry in data["runs"]}


def write_running(campaign: Campaign, runs: set[CampaignRun]) -> None:
    path = running_file(campaign)
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = [{"cell": r.cell, "method": r.method, "setting": r.setting, "seed": r.seed} for r in sorted(runs)]
    path.write_text(json.dumps({"pid": os.getpid(), "runs": entries}, indent=2) + "\n")


def next_runs(
    campaign: Campaign,
    in_flight: set[CampaignRun],
    slots: int,
    device: str = "cpu",
) -> list[CampaignRun]:
    """Up to ``slots`` runs of ``device``'s seeds (`Campaign.device_of`) to start now, in the campaign's order: not
    done, not in flight, not waiting for the architecture it takes (`Campaign.waits_for_search`), and not a second
    run of a (cell, seed) whose predecessor is being fine-tuned (its first run must finish before the others can take
    it)."""
    chosen: list[CampaignRun] = []
    busy = {campaign.predecessor_key(run) for run in in_flight if campaign.predecessor_source(run) is None}
    for run in campaign.runs():
        if len(chosen) == slots:
            break
        if campaign.done(run) or run in in_flight or run in chosen or campaign.device_of(run) != device:
            continue
        if campaign.waits_for_search(run):
            continue
        key = campaign.predecessor_key(run)
        if campaign.predecessor_source(run) is None:
            if key in busy:
                continue
            busy.add(key)
        chosen.append(run)
    return chosen


def longest_run(campaign: Campaign, device: str) -> float | None:
    """The longest wall-clock of ``device``'s done runs (`Campaign.seconds`), ``None`` before any: what a run about
    to start is expected to take at most (a first run of a seed fine-tunes its predecessor too)."""
    seconds = [campaign.seconds(run) for run in campaign.runs() if campaign.archived_device(run) == device]
    return max(seconds, default=None)


def run_campaign(
    campaign: Campaign,
    jobs: int,
    threads: int,
    hours: float | None = None,
    *,
    device: str = "cpu",
    finish_hours: float | None = None,
    run_minutes: float = 5.0,
) -> int:
    """Runs what is left of ``device``'s seeds (module doc); returns the number of runs finished. Refuses to start
    (`RuntimeError`) while an asset the runs left read is not fetched (`Campaign.assets`). A failed run is
    reported and left (its directory kept to resume); a predecessor that differs from the archive's stops the
    campaign, as does a done run archived from another device than its seed's now (`Campaign.misplaced`).

    ``hours``: start nothing new after this many hours. ``finish_hours``: start a run only if it is expected to
    finish within this many hours of the start: the longest of the device's done runs (`longest_run`), or
    ``run_minutes`` before any finished."""
    if misplaced := campaign.misplaced():
        raise RuntimeError(
            f"{misplaced[0]} (and {len(misplaced) - 1} more) ran on another device than its seed's now: a seed's "
            "runs stay on the device that ran its first (put the seed back in or out of its cell's gpu_seeds)"
        )
    left = [run for run in campaign.runs() if not campaign.done(run) and campaign.device_of(run) == device]
    if missing := missing_assets(campaign.assets(left)):
        raise RuntimeError(
            f"the runs left read assets not in {cache_dir()}: {', '.join(missing)}; fetch them with: theseus fetch "
            + " ".join(missing)
        )
    started = time.monotonic()
    deadline = None if hours is None else started + hours * 3600

    def in_time() -> bool:
        if deadline is not None and time.monotonic() >= deadline:
            return False
        if finish_hours is None:
            return True
        expected = longest_run(campaign, device)
        return time.monotonic() + (run_minutes * 60 if expected is None else expected) <= started + finish_hours * 3600

    finished = 0
    in_flight: dict[Future, CampaignRun] = {}
    failed: set[CampaignRun] = set()
    with ThreadPoolExecutor(jobs) as pool:
        while True:
            open_slots = jobs - len(in_flight)
            if open_slots and in_time():
                for run in next_runs(campaign, set(in_flight.values()) | failed, open_slots, device):
                    print(f"campaign {campaign.name}: start {run}", flush=True)
                    in_flight[pool.submit(execute, campaign, run, threads)] = run
            write_running(campaign, set(in_flight.values()))
            if not in_flight:
                break
            done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            for future in done:
                run = in_flight.pop(future)
                try:
                    future.result()
                except RuntimeError as error:
                    if "predecessor differs" in str(error):
                        for other in in_flight:
                            other.cancel()
                        raise
                    print(f"campaign {campaign.name}: {run} failed: {error}", file=sys.stderr, flush=True)
                    failed.add(run)
                    continue
                finished += 1
                print(f"campaign {campaign.name}: done {run}", flush=True)
    write_running(campaign, set())
    return finished


def edge_note(campaign: Campaign, cell: str, method: str, chosen: str) -> str:
    if not campaign.at_edge(cell, method, chosen):
        return ""
    if campaign.edge_extensions:
        return f" (still an edge of its grid after {campaign.edge_extensions} extensions)"
    return " (an edge of its grid: extend it)"


def format_status(campaign: Campaign, status: dict[str, Any]) -> str:
    lines = [f"campaign {campaign.name}: {status['done']} done, {status['running']} running, {status['left']} left"]
    for cell in campaign.cells:
        if campaign.wants_run_cost(cell):
            lines.append(
                f"{cell}: its compute-matched runs wait on the run costs at the chosen settings: "
                f"python -m benchmarks.run_cost --campaign {campaign.name} --cell {cell} (then commit them)"
            )
    hours = status["cpu_hours_left"]
    lines.append(
        "CPU-hours left: "
        + ("unknown (no CPU run finished yet)" if hours is None else f"{hours:.1f}")
        + " (estimated from the finished runs' wall-clock)"
    )
    devices = status["devices"]
    if devices["gpu"]["done"] + devices["gpu"]["running"] + devices["gpu"]["left"]:
        for device, counts in devices.items():
            hours = counts["run_hours_left"]
            estimate = "unknown" if hours is None else f"{hours:.1f}"
            lines.append(
                f"  {device}: {counts['done']} done, {counts['running']} running, {counts['left']} left; "
                f"run-hours left {estimate}" + (" (GPU sessions: benchmarks.campaign_gpu)" if device == "gpu" else "")
            )
    if status["misplaced"]:
        lines.append(
            f"ran on another device than their seed's now (gpu_seeds changed?): "
            f"{', '.join(map(str, status['misplaced']))}"
        )
    for (cell, method), row in sorted(status["rows"].items()):
        chosen = campaign.chosen(cell, method)
        lines.append(
            f"  {cell:<26} {method:<18} done {row['done']:>3}  running {row['running']:>2}  left {row['left']:>3}  "
            + (
                f"chosen {chosen}{edge_note(campaign, cell, method, chosen)}"
                if chosen
                else "grid not finished (the final seeds wait on it)"
            )
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("run", "status"))
    parser.add_argument("name", help="a campaign in benchmarks/campaigns/ (its file name without .json)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--hours", type=float, help="start nothing new after this many hours")
    parser.add_argument(
        "--device",
        choices=DEVICES,
        default="cpu",
        help="run the seeds of this device (a cell's gpu_seeds are the GPU's, the rest the CPU's) (default: cpu)",
    )
    parser.add_argument(
        "--finish-hours",
        type=float,
        help="start a run only if it should finish within this many hours (it takes as long as the device's longest "
        "finished run, or --run-minutes before any)",
    )
    parser.add_argument("--run-minutes", type=float, default=5.0, help="see --finish-hours (default: 5)")
    parser.add_argument("--runs", type=Path, default=Path("runs/campaigns"))
    parser.add_argument("--archive", type=Path, default=ARCHIVE)
    parser.add_argument("--campaigns", type=Path, default=CAMPAIGNS)
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.threads < 1:
        parser.error("--jobs and --threads must be at least 1")
    try:
        campaign = Campaign.load(args.campaigns / f"{args.name}.json", archive=args.archive, runs_root=args.runs)
    except ValueError as error:
        print(f"campaign: error: {error}", file=sys.stderr)
        return 2
    if args.command == "run":
        if read_running(campaign):
            print(
                f"campaign: error: {campaign.name} is running already (see {running_file(campaign)})", file=sys.stderr
            )
            return 2
        try:
            run_campaign(
                campaign,
                args.jobs,
                args.threads,
                args.hours,
                device=args.device,
                finish_hours=args.finish_hours,
                run_minutes=args.run_minutes,
            )
        except RuntimeError as error:
            print(f"campaign: error: {error}", file=sys.stderr)
            return 1
    print(format_status(campaign, campaign.status(read_running(campaign), args.threads)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
