"""What a campaign is and which runs it asks for: `Campaign` and `CampaignRun` (`benchmarks.campaign` runs them).

A campaign is committed as ``benchmarks/campaigns/NAME.json``: its cells (a recipe, with optional recipe overrides),
its methods (names of `theseus_zoo.methods`), each with named settings (recipe overrides: a learning rate,
``kd_alpha``, ...), the seeds of its grid and its final seeds. Its runs (`Campaign.runs`): every (cell, method,
setting, grid seed); then, once a method's grid is finished in a cell, the setting with the best mean dev metric
over the grid seeds (`Campaign.chosen`) at every final seed. Each run trains its one method (``--methods``), so a
run's numbers are its own (`theseus_zoo.training.rng.RunRng.start_stream`). A run is done when its raw result is in
the archive, ``benchmarks/results/campaigns/NAME/<cell>/<method>/<setting>/seed<N>/report.json``.

Closed grids: with ``edge_extensions`` N > 0, a method whose best setting in a cell has the lowest or highest of its
learning rates gets one more setting there, that setting at the next rate beyond the edge (the grid's own ratio
between the edge and its neighbour), run on the grid seeds before anything is chosen; up to N times per cell and
method (`Campaign.settings`). A setting that sets a learning rate is named by it (``lr2e-4``, ``lr2e-4-warmup0.5``,
`rate_token`), and its extension by the new rate (``lr8e-4-warmup0.5``).

A cell runs every method of the campaign, or the ones its ``methods`` lists (a cell that searches a successor per
group under a ``budget`` trains the best variant alone, and is compared ``against`` the cells whose uniform
successors it should beat: cells on the same predecessors, `benchmarks.campaign_results`). With ``search_from:
METHOD``, the cell's other methods (``kd+searched``) train, seed by seed, the architecture METHOD's run at its chosen
setting chose (the recipe's ``budget.chosen``: a latency search chooses anew in every run, by its measurements), and
wait for that run (`Campaign.search_source`).

Predecessors: one per (cell, seed), shared by the seed's methods (`Campaign.predecessor_record`); a cell with
``predecessor_from: OTHER`` takes OTHER's predecessor of each seed (recipes whose predecessor phase is the same,
e.g. one network compressed into two kinds of successor).

Compute matching: a cell with ``compute_matched: [METHOD, ...]`` also runs those methods, once every grid is
finished, at their chosen settings with the steps that make their training cost the best Theseus variant's, on the
final seeds (`Campaign.matched_setting`); the steps come from the timing protocol of `benchmarks.run_cost`, run by
hand when ``status`` asks for it, whose ``run-cost.json`` lies beside the cell's raw results.

Devices: a seed runs on one device, its predecessor and every method (CPU and GPU numbers differ, and a
predecessor's checkpoint stays where it was fine-tuned). A cell's ``gpu_seeds`` are the GPU's, run in lent GPU
sessions (`benchmarks.campaign_gpu`); the others, and those of a cell with ``predecessor_from``'s source, are the
CPU's (`Campaign.device_of`); each archived run records its ``campaign_device`` (`Campaign.misplaced`).
"""

from __future__ import annotations

import copy
import json
import statistics
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from theseus_zoo.methods import parse_method
from theseus_zoo.recipes import get_recipe
from theseus_zoo.training.results import REPORT, Report
from theseus_zoo.training.run_directory import CHECKPOINT

from .compare import phase_of

CAMPAIGNS = Path(__file__).parent / "campaigns"
ARCHIVE = Path(__file__).parent / "results" / "campaigns"
DEVICES = ("cpu", "gpu")
"""Where a campaign's runs run: here, on the CPU, or on a lent GPU machine (`benchmarks.campaign_gpu`)."""
PROVENANCE = "provenance.json"
"""Beside each archived report: the command and config it ran with, and the commit and machine it ran on."""


@dataclass(frozen=True, order=True)
class CampaignRun:
    """One run of a campaign: ``method`` at ``setting`` on ``cell``'s recipe with ``seed``."""

    cell: str
    method: str
    setting: str
    seed: int

    @property
    def path(self) -> Path:
        """Where it lives, under the runs and the archive alike."""
        return Path(self.cell, self.method, self.setting, f"seed{self.seed}")

    def __str__(self) -> str:
        return str(self.path)


@dataclass
class Campaign:
    """A campaign's definition (module doc), read with `Campaign.load`, and where its runs and results lie."""

    name: str
    cells: dict[str, dict[str, Any]]
    methods: dict[str, dict[str, dict[str, Any]]]
    grid_seeds: list[int]
    final_seeds: list[int]
    archive: Path = ARCHIVE
    runs_root: Path = Path("runs/campaigns")
    description: str = ""
    edge_extensions: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    """Guards the predecessor records while runs finish side by side (`benchmarks.campaign.execute`)."""
    _dev: dict[CampaignRun, float] = field(default_factory=dict, repr=False)  # of done runs: they never change

    @classmethod
    def load(cls, path: Path, *, archive: Path | None = None, runs_root: Path | None = None) -> Campaign:
        """The campaign in ``path`` (JSON: ``cells``, ``methods``, ``grid_seeds``, ``final_seeds``), checked; its
        archive and runs in a folder of its name under ``archive`` and ``runs_root`` (default:
        ``benchmarks/results/campaigns``, ``runs/campaigns``). Raises `ValueError` in one line for a bad
        definition."""
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError:
            known = ", ".join(sorted(p.stem for p in Path(path).parent.glob("*.json")))
            raise ValueError(f"no campaign {Path(path).stem!r}; campaigns: {known}") from None
        name = data.get("name", Path(path).stem)
        for key in ("cells", "methods", "grid_seeds", "final_seeds"):
            if key not in data:
                raise ValueError(f"campaign {name}: {key} is missing")
        for cell, definition in data["cells"].items():
            if "recipe" not in definition:
                raise ValueError(f"campaign {name}: cell {cell} names no recipe")
            methods = definition.get("methods", list(data["methods"]))
            if not isinstance(methods, list) or not methods or set(methods) - set(data["methods"]):
                raise ValueError(
                    f"campaign {name}: cell {cell}'s methods must be a list of the campaign's methods "
                    f"{sorted(data['methods'])}, got {methods!r}"
                )
            unknown = set(definition.get("compute_matched", [])) - set(methods)
            if unknown or any(parse_method(m).base == "theseus" for m in definition.get("compute_matched", [])):
                raise ValueError(
                    f"campaign {name}: cell {cell} matches the compute of {sorted(definition['compute_matched'])}: "
                    "methods of the cell that are not Theseus variants (they are matched to the best variant)"
                )
            source = definition.get("predecessor_from")
            against = definition.get("against", [])
            own_source = source or cell
            if against and definition.get("compute_matched"):
                raise ValueError(
                    f"campaign {name}: cell {cell} is compared against other cells and matches compute: its "
                    "comparisons are across cells, where the matched runs have no place; match compute in the cells "
                    "it is compared against"
                )
            if not isinstance(against, list) or any(
                other not in data["cells"]
                or other == cell
                or data["cells"][other].get("predecessor_from", other) != own_source
                for other in against
            ):
                raise ValueError(
                    f"campaign {name}: cell {cell} is compared against {against!r}: other cells of the campaign on "
                    "the same predecessors (the same cell's, or predecessor_from's)"
                )
            if source is not None and (source not in data["cells"] or "predecessor_from" in data["cells"][source]):
                raise ValueError(
                    f"campaign {name}: cell {cell} takes its predecessors from {source!r}, which is not a cell that "
                    "fine-tunes its own"
                )
            gpu_seeds = definition.get("gpu_seeds", [])
            if not isinstance(gpu_seeds, list) or not all(isinstance(s, int) and s >= 0 for s in gpu_seeds):
                raise ValueError(f"campaign {name}: cell {cell}'s gpu_seeds must be a list of seeds, got {gpu_seeds!r}")
            if gpu_seeds and source is not None:
                raise ValueError(
                    f"campaign {name}: cell {cell} takes its predecessors, and so their devices, from {source}: give "
                    f"gpu_seeds to {source}"
                )
            if gpu_seeds and definition.get("compute_matched"):
                raise ValueError(
                    f"campaign {name}: cell {cell} has gpu_seeds and compute_matched: the run costs are timed on the "
                    "CPU (benchmarks.run_cost), so a cell that matches compute runs on the CPU alone"
                )
        extensions = data.get("edge_extensions", 0)
        if not isinstance(extensions, int) or isinstance(extensions, bool) or extensions < 0:
            raise ValueError(f"campaign {name}: edge_extensions must be a whole number >= 0, got {extensions!r}")
        for method, settings in data["methods"].items():
            parse_method(method)  # one vocabulary: an unknown name fails here, before any run
            if not settings:
                raise ValueError(f"campaign {name}: method {method} has no settings")
            for setting, values in settings.items():
                rate = learning_rate(values)
                if extensions and rate is not None and not setting.startswith(f"lr{rate_token(rate)}"):
                    raise ValueError(
                        f"campaign {name}: {method} setting {setting!r} has learning rate {rate:g}: with edge "
                        f"extensions its name starts with lr{rate_token(rate)} (the extension is named by its rate)"
                    )
        campaign = cls(
            name,
            data["cells"],
            data["methods"],
            list(data["grid_seeds"]),
            list(data["final_seeds"]),
            description=data.get("description", ""),
            edge_extensions=extensions,
        )
        campaign.archive = (archive or ARCHIVE) / name
        campaign.runs_root = (runs_root or Path("runs/campaigns")) / name
        for cell in campaign.cells:  # every run's recipe as it would train, before any run (nothing is built)
            source = campaign.cells[cell].get("search_from")
            if source is not None and (
                source not in campaign.methods_of(cell) or "budget" not in campaign.cells[cell].get("overrides", {})
            ):
                raise ValueError(
                    f"campaign {name}: cell {cell} takes its architecture from {source!r}'s runs (search_from): a "
                    "method of the cell, which has a budget"
                )
            for method in campaign.methods_of(cell):
                for setting, values in campaign.methods[method].items():  # as written: no archive read
                    try:
                        get_recipe(campaign.cells[cell]["recipe"]).with_overrides(campaign.merged(cell, method, values))
                    except (KeyError, ValueError) as error:
                        message = error.args[0] if isinstance(error, KeyError) and error.args else error
                        raise ValueError(f"campaign {name}: cell {cell}, {method} at {setting}: {message}") from None
        return campaign

    # ------------------------------------------------------------------------------------------- what to run
    def methods_of(self, cell: str) -> list[str]:
        """The methods ``cell`` runs: its ``methods``, or the campaign's, in the campaign's order."""
        own = self.cells[cell].get("methods")
        return [method for method in self.methods if own is None or method in own]

    def settings(self, cell: str, method: str) -> dict[str, dict[str, Any]]:
        """``method``'s settings in ``cell``: the campaign's, then each edge extension its finished grid asked for
        (module doc), in order."""
        settings = dict(self.methods[method])
        for _ in range(self.edge_extensions):
            best = self._best(cell, method, settings)
            extension = None if best is None else edge_extension(settings, best)
            if extension is None:
                break
            settings[extension[0]] = extension[1]
        return settings

    def grid(self) -> list[CampaignRun]:
        """Every (cell, method, setting, grid seed), cell by cell, seed by seed."""
        return [
            CampaignRun(cell, method, setting, seed)
            for cell in self.cells
            for seed in self.grid_seeds
            for method in self.methods_of(cell)
            for setting in self.settings(cell, method)
        ]

    def report(self, run: CampaignRun) -> Report | None:
        """The archived report of ``run``, if it is done."""
        path = self.archive / run.path / REPORT
        return Report.load(path) if path.exists() else None

    def dev(self, run: CampaignRun) -> float | None:
        """The dev metric of the state ``run`` kept (its method's last stage's best), if it is done."""
        if run not in self._dev:
            report = self.report(run)
            if report is None:
                return None
            self._dev[run] = report.phases[phase_of(run.method)]["best_metric"]
        return self._dev[run]

    def dev_means(self, cell: str, method: str, settings: dict[str, Any] | None = None) -> dict[str, float] | None:
        """Mean dev metric over the grid seeds of each of ``method``'s settings in ``cell`` (`settings`, or those
        given), once every grid run of them is done; ``None`` before."""
        means = {}
        for setting in settings if settings is not None else self.settings(cell, method):
            values = [self.dev(CampaignRun(cell, method, setting, seed)) for seed in self.grid_seeds]
            if any(value is None for value in values):
                return None
            means[setting] = statistics.mean(values)
        return means

    def _best(self, cell: str, method: str, settings: dict[str, Any]) -> str | None:
        means = self.dev_means(cell, method, settings)
        # equal means (to 1e-6: runs store float32 scores) go to the first in the campaign's order
        return None if means is None else max(means, key=lambda setting: round(means[setting], 6))

    def chosen(self, cell: str, method: str) -> str | None:
        """The setting of ``method`` in ``cell`` with the best mean dev metric over the grid seeds, once every grid
        run of it (edge extensions included) is done (ties: the first in the campaign's order); ``None`` before."""
        return self._best(cell, method, self.settings(cell, method))

    def runs(self) -> list[CampaignRun]:
        """Every run known now, cell by cell: the cell's grid, then the final seeds of each of its methods whose grid
        is finished."""
        runs = []
        for cell in self.cells:
            runs += [run for run in self.grid() if run.cell == cell]
            for method in self.methods_of(cell):
                setting = self.chosen(cell, method)
                if setting is not None:
                    runs += [CampaignRun(cell, method, setting, seed) for seed in self.final_seeds]
            for method in self.methods_of(cell):
                if (matched := self.matched_setting(cell, method)) is not None:
                    runs += [CampaignRun(cell, method, matched[0], seed) for seed in self.final_seeds]
        return list(dict.fromkeys(runs))

    def at_edge(self, cell: str, method: str, setting: str) -> bool:
        """Whether ``setting``'s learning rate is the lowest or highest of ``method``'s settings in ``cell``: a grid
        to extend until the choice is interior."""
        settings = self.settings(cell, method)
        return edge_extension(settings, setting) is not None

    # ------------------------------------------------------------------------------------------- compute matching
    def best_variant(self, cell: str) -> str | None:
        """The Theseus variant of ``cell`` with the best mean dev metric at its chosen setting (ties: the first in
        the campaign's order), once every variant has chosen; ``None`` before."""
        best, best_dev = None, None
        for method in self.methods_of(cell):
            if parse_method(method).base != "theseus":
                continue
            chosen = self.chosen(cell, method)
            if chosen is None:
                return None
            dev = round(self.dev_means(cell, method)[chosen], 6)
            if best_dev is None or dev > best_dev:
                best, best_dev = method, dev
        return best

    def run_cost_path(self, cell: str) -> Path:
        """Where `benchmarks.run_cost` leaves the cell's run costs and matched steps."""
        return self.archive / cell / "run-cost.json"

    def run_cost(self, cell: str) -> dict[str, Any] | None:
        """The cell's run costs (`benchmarks.run_cost`) if they were measured at the settings chosen now, against
        the best variant now; ``None`` otherwise (not measured yet, or measured before a choice changed)."""
        path = self.run_cost_path(cell)
        if not path.exists():
            return None
        costs = json.loads(path.read_text())
        methods = [costs["reference"], *self.cells[cell].get("compute_matched", [])]
        if costs["reference"] != self.best_variant(cell) or any(
            method not in costs["methods"] or costs["methods"][method]["setting"] != self.chosen(cell, method)
            for method in methods
        ):
            return None
        return costs

    def matched_setting(self, cell: str, method: str) -> tuple[str, dict[str, Any]] | None:
        """``method``'s compute-matched setting in ``cell``: its chosen setting with the steps of its last stage that
        make its run cost the best variant's (`run_cost`), named ``<chosen>-matched<N>``; ``None`` when the cell
        does not match ``method`` or the costs are not measured yet."""
        if method not in self.cells[cell].get("compute_matched", []) or (costs := self.run_cost(cell)) is None:
            return None
        chosen = self.chosen(cell, method)
        steps = costs["methods"][method]["matched_steps"]
        setting = copy.deepcopy(self.settings(cell, method)[chosen])
        replacing = setting.setdefault("replacing", {})
        replacing["steps"] = steps
        eval_every = replacing.get("eval_every", get_recipe(self.cells[cell]["recipe"]).replacing.eval_every)
        replacing["eval_every"] = min(eval_every, steps)
        return f"{chosen}-matched{steps}", setting

    def all_settings(self, cell: str, method: str) -> dict[str, dict[str, Any]]:
        """`settings`, and the compute-matched one where there is one (`matched_setting`)."""
        settings = self.settings(cell, method)
        if (matched := self.matched_setting(cell, method)) is not None:
            settings[matched[0]] = matched[1]
        return settings

    def wants_run_cost(self, cell: str) -> bool:
        """Whether ``cell`` matches methods' compute and its choices are made, but their run costs are not measured
        (`benchmarks.run_cost --campaign NAME --cell CELL`)."""
        matched = self.cells[cell].get("compute_matched", [])
        ready = all(self.chosen(cell, method) is not None for method in self.methods_of(cell))
        return bool(matched) and ready and self.run_cost(cell) is None

    def waiting(self) -> list[tuple[str, str]]:
        """The (cell, method) pairs whose final runs wait on their grid."""
        return [
            (cell, method)
            for cell in self.cells
            for method in self.methods_of(cell)
            if self.chosen(cell, method) is None
        ]

    def done(self, run: CampaignRun) -> bool:
        return (self.archive / run.path / REPORT).exists()

    # ------------------------------------------------------------------------------------------- devices
    def device_of(self, run: CampaignRun) -> str:
        """The device that runs ``run``: ``"gpu"`` for a seed in its predecessor cell's ``gpu_seeds``, else
        ``"cpu"`` (module doc: a seed's predecessor and every method on one device)."""
        return "gpu" if run.seed in self.cells[self.predecessor_cell(run.cell)].get("gpu_seeds", []) else "cpu"

    def archived_device(self, run: CampaignRun) -> str | None:
        """The device a done run ran on, as its provenance says (``campaign_device``; ``"cpu"`` for runs archived
        before devices were recorded); ``None`` when it is not done."""
        if not self.done(run):
            return None
        provenance = self.archive / run.path / PROVENANCE
        recorded = json.loads(provenance.read_text()) if provenance.exists() else {}
        return recorded.get("campaign_device", "cpu")

    def misplaced(self) -> list[CampaignRun]:
        """Done runs archived from another device than their seed's now (``gpu_seeds`` changed after they ran)."""
        return [run for run in self.runs() if self.done(run) and self.archived_device(run) != self.device_of(run)]

    # ------------------------------------------------------------------------------------------- running one
    def overrides(self, run: CampaignRun) -> dict[str, Any]:
        """The recipe overrides ``run`` trains with: the cell's, the setting's, and its one method; in a cell with
        ``search_from``, the architecture that method's run of the seed chose (`search_source`) as the budget's
        ``chosen``. Raises `ValueError` while that run is not archived (`waits_for_search`)."""
        overrides = self.overrides_of(run.cell, run.method, run.setting)
        if self.waits_for_search(run):
            method = self.cells[run.cell]["search_from"]
            raise ValueError(
                f"{run} takes the architecture {method}'s run of its seed chose, which is not archived yet"
            )
        source = self.search_source(run)
        if source is not None:
            report = self.report(source)
            assert report is not None and report.search is not None  # done, and searched: its method has the budget
            overrides["budget"] = {**overrides["budget"], "chosen": report.search["chosen"]}
        return overrides

    def search_source(self, run: CampaignRun) -> CampaignRun | None:
        """In a cell with ``search_from`` (a method of the cell), the run whose searched architecture ``run`` trains
        (that method's, at its chosen setting, of the same seed): every method of the cell then trains one
        architecture per seed, where a latency search would choose anew, by its measurements, in every run. ``None``
        for a cell without it, for that method's own runs, and before its grid has chosen."""
        method = self.cells[run.cell].get("search_from")
        if method is None or run.method == method:
            return None
        setting = self.chosen(run.cell, method)
        return None if setting is None else CampaignRun(run.cell, method, setting, run.seed)

    def waits_for_search(self, run: CampaignRun) -> bool:
        """Whether ``run`` must wait for the run whose architecture it takes (`search_source`) to be archived."""
        if self.cells[run.cell].get("search_from") in (None, run.method):
            return False
        source = self.search_source(run)
        return source is None or not self.done(source)

    def overrides_of(self, cell_name: str, method: str, setting_name: str) -> dict[str, Any]:
        """The recipe overrides of ``method`` at ``setting_name`` in ``cell_name`` (`overrides`)."""
        return self.merged(cell_name, method, self.all_settings(cell_name, method)[setting_name])

    def merged(self, cell_name: str, method: str, setting: dict[str, Any]) -> dict[str, Any]:
        """The cell's overrides with ``setting``'s over them and ``method`` alone to train (`overrides_of`)."""
        cell = dict(self.cells[cell_name].get("overrides", {}))
        merged = {**cell, **setting, "methods": [method]}
        for phase in ("options", "predecessor", "replacing", "refine"):  # these merge field by field
            if isinstance(cell.get(phase), dict) and isinstance(setting.get(phase), dict):
                merged[phase] = {**cell[phase], **setting[phase]}
        return merged

    def assets(self, runs: Iterable[CampaignRun] | None = None) -> list[str]:
        """The assets (``theseus fetch NAME``) that ``runs`` (default: every run) read, model and data, sorted: each
        (cell, method, setting)'s task built from its recipe with the run's overrides (nothing loaded;
        `theseus_zoo.tasks.protocols.assets_read`)."""
        from theseus_zoo.tasks import build_task
        from theseus_zoo.tasks.protocols import assets_read

        names: set[str] = set()
        for cell, method, setting in {
            (run.cell, run.method, run.setting) for run in (self.runs() if runs is None else runs)
        }:
            recipe = get_recipe(self.cells[cell]["recipe"]).with_overrides(self.overrides_of(cell, method, setting))
            names.update(assets_read(build_task(recipe.family, recipe.options, recipe.seed)))
        return sorted(names)

    def predecessor_cell(self, cell: str) -> str:
        """The cell whose predecessors ``cell`` takes: its ``predecessor_from``, or itself."""
        return self.cells[cell].get("predecessor_from", cell)

    def predecessor_key(self, run: CampaignRun) -> tuple[str, int]:
        """The runs of one key share one predecessor."""
        return self.predecessor_cell(run.cell), run.seed

    def predecessor_record(self, run: CampaignRun) -> Path:
        return self.runs_root / self.predecessor_cell(run.cell) / "predecessors" / f"seed{run.seed}"

    def predecessor_source(self, run: CampaignRun) -> Path | None:
        """The run directory holding the fine-tuned predecessor of ``run``'s (cell, seed), if it is still there."""
        record = self.predecessor_record(run)
        if not record.exists():
            return None
        source = Path(record.read_text().strip())
        return source if (source / CHECKPOINT).exists() else None

    # ------------------------------------------------------------------------------------------- status
    def seconds(self, run: CampaignRun) -> float | None:
        """Wall-clock of a done run: its process's, start to report (`PROVENANCE`), or, for a run archived without
        it, its phases' (its predecessor's when it fine-tuned one, not a borrowed one's) from its report, which
        leave out starting, testing and exporting."""
        report = self.report(run)
        if report is None:
            return None
        provenance = self.archive / run.path / PROVENANCE
        if provenance.exists() and "wall_seconds" in (recorded := json.loads(provenance.read_text())):
            return recorded["wall_seconds"]
        return sum(phase["seconds"] for phase in report.phases.values() if "from" not in phase)

    def status(self, running: set[CampaignRun] = frozenset(), threads: int = 1) -> dict[str, Any]:
        """Done / running / left per (cell, method) and per device, the runs waiting on a grid, and the hours left
        (each run left at its `estimate`): ``cpu_hours_left`` for the CPU's runs (their wall-clock times
        ``threads``), ``devices["gpu"]["run_hours_left"]`` for the GPU's (their wall-clock, several at a time on the
        one GPU)."""
        runs = self.runs()
        rows, seconds = {}, {}
        devices = {device: {"done": 0, "running": 0, "left": 0, "run_hours_left": None} for device in DEVICES}
        for run in runs:
            row = rows.setdefault((run.cell, run.method), {"done": 0, "running": 0, "left": 0})
            state = "done" if self.done(run) else "running" if run in running else "left"
            row[state] += 1
            devices[self.device_of(run)][state] += 1
            if state == "done":
                seconds.setdefault((self.archived_device(run), run.cell, run.method), []).append(self.seconds(run))
        waiting = self.waiting()
        later = [  # the final runs a waiting grid will add (its chosen setting is unknown, the count is not)
            (self.device_of(CampaignRun(cell, method, "", seed)), cell, method)
            for cell, method in waiting
            for seed in self.final_seeds
            if seed not in self.grid_seeds
        ]
        unfinished = [(self.device_of(run), run.cell, run.method) for run in runs if not self.done(run)] + later
        for device, counts in devices.items():
            counts["left"] += sum(1 for other, _, _ in later if other == device)
            if any(other == device for other, _, _ in seconds):
                left = sum(
                    estimate(seconds, device, cell, method) for other, cell, method in unfinished if other == device
                )
                counts["run_hours_left"] = left / 3600
        cpu = devices["cpu"]["run_hours_left"]
        return {
            "rows": rows,
            "done": sum(row["done"] for row in rows.values()),
            "running": sum(row["running"] for row in rows.values()),
            "left": sum(row["left"] for row in rows.values()) + len(later),
            "waiting": waiting,
            "devices": devices,
            "cpu_hours_left": None if cpu is None else cpu * threads,
            "misplaced": self.misplaced(),
        }


def estimate(seconds: dict[tuple[str, str, str], list[float]], device: str, cell: str, method: str) -> float:
    """The expected wall-clock of a run of ``method`` in ``cell`` on ``device``: the mean of that cell's done runs
    of the method there, else of the method's in every cell (a searched cell's runs take longer than the same
    method's elsewhere), else of every done run on the device."""
    for matches in (
        lambda key: key == (device, cell, method),
        lambda key: key[0] == device and key[2] == method,
        lambda key: key[0] == device,
    ):
        found = [value for key, values in seconds.items() if matches(key) for value in values]
        if found:
            return statistics.mean(found)
    raise ValueError(f"no done run on {device} to estimate from")


def learning_rate(setting: dict[str, Any]) -> float | None:
    """The replacing learning rate a setting sets, if it sets one."""
    return setting.get("replacing", {}).get("lr")


def rate_token(rate: float) -> str:
    """A learning rate as settings are named by it: ``2e-4``, ``1.6e-1``."""
    mantissa, exponent = f"{rate:e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def edge_extension(settings: dict[str, dict[str, Any]], best: str) -> tuple[str, dict[str, Any]] | None:
    """The setting that extends a grid whose ``best`` setting has its lowest or highest learning rate: ``best`` at
    the next rate beyond that edge (the edge's ratio to its neighbour), named by that rate; ``None`` when ``best``
    is interior or the settings do not vary the rate."""
    rate = learning_rate(settings[best])
    rates = sorted({learning_rate(values) for values in settings.values()} - {None})
    if rate is None or len(rates) < 2 or rate not in (rates[0], rates[-1]):
        return None
    new = rate * rate / rates[-2] if rate == rates[-1] else rate * rate / rates[1]
    new = float(f"{new:.6g}")
    extended = copy.deepcopy(settings[best])
    extended["replacing"]["lr"] = new
    return f"lr{rate_token(new)}" + best.removeprefix(f"lr{rate_token(rate)}"), extended
