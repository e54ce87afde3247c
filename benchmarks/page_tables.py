"""The results tables of docs/results/, docs/deployment.md and docs/performance.md, each rendered from committed JSON
in ``benchmarks/results/`` alone (`benchmarks.tables` puts them between a page's markers and checks them).

Every number comes from the JSON, at the precision the page has always given it; what a page adds by hand is words: row
labels, which entries are bold, why a path was (not) chosen. A renderer reads the JSON through the benchmark modules'
own readers where they have one (`benchmarks.compare.merged`, `benchmarks.recipes.paired_comparison`,
`benchmarks.llm_seeds.compare`: the same deterministic bootstrap as the run that wrote the table).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from theseus_zoo.training.results import Report

from . import compare, llm_seeds, recipes
from .harness import markdown_table

RESULTS = Path(__file__).resolve().parent / "results"


def load(relative: str) -> dict[str, Any]:
    return json.loads((RESULTS / relative).read_text())


def signed(value: float, digits: int = 2) -> str:
    return f"{value:+.{digits}f}".replace("-", "−")


def points(fraction: float, digits: int = 1) -> str:
    """A difference of two metrics (fractions) in signed points, as the pages write it: ``−2.9``."""
    return signed(100 * fraction, digits)


def points_interval(found: dict[str, Any], digits: int = 1) -> str:
    return f"[{points(found['low'], digits)}, {points(found['high'], digits)}]"


def bold(text: str, flag: bool = True) -> str:
    return f"**{text}**" if flag else text


def millions(count: float) -> str:
    """A count in millions: one decimal from a million up, two below (``21.3M``, ``0.47M``)."""
    return f"{count / 1e6:.1f}M" if count >= 1e6 else f"{count / 1e6:.2f}M"


def report_at(relative: str) -> Report:
    return Report.from_dict(load(relative))


# --- BERT (docs/results/bert.md) ---


def headroom_table() -> str:
    """The headroom scan: per cell, the predecessor and truncated fine-tuning (± bootstrap standard errors) and the
    cost of truncation in points, bold from the 3 points a cell needs."""
    labels = {"five": "five grades", "regression": "valence regression", "binary": "binary sentiment"}
    rows = []
    for name, cell in load("headroom.json")["cells"].items():
        kind, layers = name.rsplit("-", 1)
        rows.append(
            [
                f"{labels[kind]}, 6 → {layers.removesuffix('l')}",
                f"{cell['predecessor']:.3f} ± {cell['predecessor_se']:.3f}",
                f"{cell['truncated']:.3f} ± {cell['truncated_se']:.3f}",
                bold(f"{cell['cost_points']:.1f}", cell["cost_points"] >= 3),
            ]
        )
    return markdown_table(
        ["cell (labels, layers kept)", "predecessor (6 layers)", "truncated", "cost of truncation (points)"], rows
    )


def cells_table() -> str:
    """The first look at two cells with headroom, seed 0: every model's test metric (the best compressed one bold)
    and Theseus minus truncated fine-tuning (and KD, where it ran), paired over test examples."""
    rows = []
    for name, label in (
        ("minilm-rt-regression-1l", "valence regression, 6 → 1"),
        ("minilm-rt-five-1l", "five grades, 6 → 1 (`make demo`)"),
    ):
        report = report_at(f"cells/{name}-seed0.json")
        compressed = {
            model: report.test(model)
            for model in ("theseus", "baseline:truncated", "baseline:kd")
            if model in report.models
        }
        best = max(compressed.values())
        shown = [
            bold(f"{compressed[model]:.3f}", compressed[model] == best) if model in compressed else "(not run)"
            for model in ("theseus", "baseline:truncated", "baseline:kd")
        ]
        differences = report.comparisons
        text = f"{points(differences['baseline:truncated']['difference'])} points " + points_interval(
            differences["baseline:truncated"]
        )
        if "baseline:kd" in differences:
            kd = differences["baseline:kd"]
            text += f" (KD: {points(kd['difference'])} {points_interval(kd)})"
        rows.append([label, f"{report.test('predecessor'):.3f}", *shown, text])
    return markdown_table(
        [
            "cell, seed 0",
            "predecessor",
            "Theseus",
            "truncated",
            "vanilla KD",
            "Theseus − truncated (95% paired bootstrap)",
        ],
        rows,
    )


def rate(lr: float) -> str:
    """A learning rate as the pages write it: ``2e-4``."""
    mantissa, exponent = f"{lr:e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


def trained(report: Report) -> str:
    """The one model a `benchmarks.compare` run trained (its report's other model is the predecessor): read from the
    report, since archived runs carry method names that `theseus_zoo.methods` no longer parses."""
    (model,) = (name for name in report.models if name != "predecessor")
    return model


def compared(relative: str) -> tuple[dict[str, Any], dict[str, list[Report]]]:
    """A `benchmarks.compare` result and its reports, per method in seed order."""
    data = load(relative)
    reports = {
        method: [Report.from_dict(by[seed]) for seed in sorted(by, key=int)] for method, by in data["reports"].items()
    }
    return data, reports


def compare_2l_table() -> str:
    """The powered comparison, regression 6 → 2: each method's rate (dev metric at every grid rate, the chosen one
    bold), test metric per seed, mean, median (the better bold) and range."""
    data, reports = compared("compare/compare-minilm-rt-regression-2l.json")
    first = reports["theseus"][0]
    labels = {"theseus": "Theseus", "truncated": "truncated fine-tuning"}
    rows = [
        [
            f"predecessor (6 layers, {millions(first.models['predecessor'].parameters)} parameters)",
            "",
            f"{first.test('predecessor'):.3f}",
            "",
            "",
            "",
        ]
    ]
    medians = {method: statistics.median(r.test(trained(r)) for r in by) for method, by in reports.items()}
    for method, by in reports.items():
        model = trained(by[0])
        values = [report.test(model) for report in by]
        chosen = data["chosen_lr"][method]
        grid = sorted(
            (float(key.rpartition("lr=")[2]), dev)
            for key, dev in data["tuning_dev"].items()
            if key.rpartition(" lr=")[0] == method
        )
        dev = " / ".join(bold(f"{value:.3f}", lr == chosen) for lr, value in grid)
        layers = by[0].recipe["options"]["num_layers"]
        rows.append(
            [
                f"{labels[method]} ({layers} layers, {millions(by[0].models[model].parameters)})",
                f"{rate(chosen)} ({dev})",
                ", ".join(f"{value:.3f}" for value in values),
                f"{statistics.mean(values):.3f}",
                bold(f"{medians[method]:.3f}", medians[method] == max(medians.values())),
                f"{min(values):.3f}–{max(values):.3f}",
            ]
        )
    lrs = " / ".join(rate(lr) for lr in sorted({float(key.rpartition("lr=")[2]) for key in data["tuning_dev"]}))
    return markdown_table(
        [
            "method",
            f"lr (dev: {lrs})",
            f"test score, seeds {min(map(int, data['reports']['theseus']))}-"
            f"{max(map(int, data['reports']['theseus']))}",
            "mean",
            "median",
            "range",
        ],
        rows,
    )


def archived_pair(method: str, other: str, lr: float, seed: int = 0) -> dict[str, Any]:
    """``method`` minus ``other`` from the archived `benchmarks.compare` reports of ``minilm-rt-regression-2l`` at
    ``lr`` (one seed, paired over test examples)."""

    def report(name: str) -> dict[str, Any]:
        return load(f"compare/minilm-rt-regression-2l/{name}/lr{lr:g}/seed{seed}/report.json")

    merged = compare.merged({method: {seed: report(method)}, other: {seed: report(other)}}, other, method)
    return recipes.paired_comparison(merged, "a", "b")


def extensions_table() -> str:
    """The extensions and vanilla KD at seed 0, lr 2e-4: test metric (the best bold), Theseus minus each, and the
    step cost of each method relative to Theseus' at p = 0.5 and p = 1 (`benchmarks.step_cost`)."""
    data, reports = compared("compare/extensions-minilm-rt-regression-2l.json")
    cost = load("step-cost-minilm-rt-regression-2l.json")
    tests = {method: by[0].test(trained(by[0])) for method, by in reports.items()}

    def step_cost(method: str) -> str:
        return " / ".join(f"{cost[f'{method} p={p}']['ratio_to_theseus']:.2f}" for p in ("0.5", "1"))

    def row(method: str, label: str) -> list[str]:
        best = tests[method] == max(tests.values())
        difference = data["comparisons"].get(method)
        return [
            bold(label, best),
            bold(f"{tests[method]:.3f}", best),
            f"{points(difference['mean'])} points {points_interval(difference)}" if difference else "",
            step_cost(method),
        ]

    theseus = row("theseus", "Theseus (the paper)")
    milliseconds = " / ".join(f"{1000 * cost[f'theseus p={p}']['median_seconds']:,.0f}" for p in ("0.5", "1"))
    theseus[3] += f" ({milliseconds} ms)"
    kd_lr = 1e-4
    logit_kd = report_at(f"compare/minilm-rt-regression-2l/theseus+kd/lr{kd_lr:g}/seed0/report.json")
    versus = archived_pair("theseus", "theseus+kd", kd_lr)
    logit_kd_label = (
        f"Theseus + logit KD (`kd_weight` {logit_kd.recipe['kd_weight']:g}; run at lr {rate(kd_lr)} only: "
        f"{logit_kd.test('theseus'):.3f}, the same as Theseus there, {points(versus['mean'])} "
        f"{points_interval(versus)})"
    )
    return markdown_table(
        ["method", "test score", "Theseus − method (95% paired bootstrap)", "step cost × Theseus' (p = 0.5 / p = 1)"],
        [
            theseus,
            row("theseus+unfreeze-all", "Theseus + unfreeze all at p = 1 (`unfreeze_at_one: all`)"),
            row("theseus+consistency", "Theseus + consistency (`consistency_weight` 1)"),
            [logit_kd_label, "", "", step_cost("theseus+kd")],
            row("truncated", "truncated fine-tuning"),
            row("kd", "vanilla KD"),
        ],
    )


def budget_table() -> str:
    """The budget curve (`benchmarks.budget`): Theseus and truncated fine-tuning per budget, and their difference."""
    rows = [
        [
            f"{row['steps']:,}",
            f"{row['theseus']:.3f}",
            f"{row['truncated']:.3f}",
            f"{points(row['difference']['mean'])} points {points_interval(row['difference'])}",
        ]
        for row in load("compare/budget-minilm-rt-regression-2l.json")["rows"]
    ]
    return markdown_table(
        ["replacing steps", "Theseus", "truncated", "Theseus − truncated (95% paired bootstrap)"], rows
    )


def schedules_table() -> str:
    """The paper's Table 6: each schedule's best dev and test metric (the best test bold), and the curriculum minus
    each ablation."""
    data, reports = compared("compare/table6-minilm-rt-regression-2l.json")
    tests = {method: by[0].test("theseus") for method, by in reports.items()}
    labels = {
        "theseus": "curriculum (the paper's)",
        "theseus-constant": f"constant p = {reports['theseus-constant'][0].recipe['schedule_base']:g}",
        "theseus-anti-curriculum": "anti-curriculum",
    }
    rows = []
    for method, label in labels.items():
        difference = data["comparisons"].get(method)
        rows.append(
            [
                label,
                f"{reports[method][0].phases['replacing']['best_metric']:.3f}",
                bold(f"{tests[method]:.3f}", tests[method] == max(tests.values())),
                f"{points(difference['mean'])} points {points_interval(difference)}" if difference else "",
            ]
        )
    return markdown_table(
        ["schedule", "dev score (best)", "test score", "curriculum − schedule (95% paired bootstrap)"], rows
    )


def minilm_rotten_tomatoes_table() -> str:
    """The old binary-sentiment recipe over 3 seeds (`benchmarks.recipes`): median and range of the test metric (the
    best compressed median bold), retention (Theseus' bold: the bar it is held to), parameters and speedup."""
    data = load("recipe-minilm-rotten-tomatoes.json")
    summary = data["summary"]
    models = summary["models"]
    layers = data["reports"]["0"]["recipe"]["options"]["num_layers"]
    labels = {
        "predecessor": "predecessor (6 layers)",
        "theseus": f"Theseus ({layers} layers)",
        "baseline:truncated": "truncated fine-tuning",
        "baseline:kd": "vanilla KD",
    }
    best = max(entry["median"] for name, entry in models.items() if name != "predecessor")
    rows = []
    for name, label in labels.items():
        entry = models[name]
        compressed = name != "predecessor"
        rows.append(
            [
                label,
                bold(f"{entry['median']:.3f}", compressed and entry["median"] == best),
                f"{entry['min']:.3f}–{entry['max']:.3f}" if entry["min"] != entry["max"] else "(one run)",
                bold(f"{entry['median_retention_percent']:.1f}%", name == "theseus"),
                millions(entry["parameters"]),
                f"{summary['median_speedup']:.2f}×" if compressed else "1×",
            ]
        )
    return markdown_table(["model", "test accuracy (median)", "range", "retention", "parameters", "speedup"], rows)


# --- ResNet, BinaryBERT, GNN, LLM, slim and heterogeneous successors (docs/results/) ---


def resnet_recipe_table() -> str:
    """`resnet-fashion-mnist` over 3 seeds: every model's median test metric (the best compressed one bold, Theseus'
    retention beside it), parameters and speedup."""
    summary = load("recipe-resnet-fashion-mnist.json")["summary"]
    models = summary["models"]
    best = max(entry["median"] for name, entry in models.items() if name != "predecessor")
    cells = {
        name: bold(f"{entry['median']:.3f}", name != "predecessor" and entry["median"] == best)
        for name, entry in models.items()
    }
    cells["theseus"] += f" ({models['theseus']['median_retention_percent']:.1f}%)"
    order = ("predecessor", "theseus", "baseline:truncated", "baseline:scratch", "baseline:kd")
    return markdown_table(
        ["recipe", "predecessor", "Theseus", "truncated", "scratch", "vanilla KD", "parameters", "speedup"],
        [
            [
                "`resnet-fashion-mnist`",
                *(cells[name] for name in order),
                f"{millions(models['predecessor']['parameters'])} → {millions(models['theseus']['parameters'])}",
                f"{summary['median_speedup']:.1f}×",
            ]
        ],
    )


def binarybert_table() -> str:
    """`minilm-rt-binarybert` over 3 seeds: bit widths, median test metric with each seed's (the best compressed
    median bold), size on disk, and Theseus minus each model (mean over seeds, 95% paired bootstrap, per seed)."""
    summary = load("recipe-minilm-rt-binarybert.json")["summary"]
    models, comparisons = summary["models"], summary["comparisons"]
    labels = {
        "predecessor": ("predecessor", "fp32 / fp32"),
        "theseus": ("Theseus: ternary successors → TWS → binary", "1 / 8 bits"),
        "baseline:kd": ("KD: ternary, no replacing → TWS → binary", "1 / 8 bits"),
        "baseline:direct": ("direct binarization (BWN)", "1 / 8 bits"),
    }
    best = max(entry["median"] for name, entry in models.items() if name != "predecessor")
    rows = []
    for name, (label, bits) in labels.items():
        entry = models[name]
        accuracy = bold(f"{entry['median']:.3f}", name != "predecessor" and entry["median"] == best)
        if name != "predecessor":
            accuracy += f" ({', '.join(f'{value:.3f}' for value in entry['per_seed'])})"
        versus = "—"
        if name in comparisons:
            found = comparisons[name]
            per_seed = ", ".join(points(value) for value in found["per_seed"].values())
            versus = f"{points(found['mean'])} points {points_interval(found)} ({per_seed})"
        rows.append([label, bits, accuracy, f"{entry['median_size_on_disk_bytes'] / 1e6:.1f}", versus])
    seeds = ", ".join(str(seed) for seed in range(len(models["theseus"]["per_seed"])))
    return markdown_table(
        [
            f"model (`minilm-rt-binarybert`, {len(models['theseus']['per_seed'])} seeds)",
            "weights / activations",
            f"test accuracy, median (seeds {seeds})",
            "size on disk (MB)",
            "Theseus − model (mean over seeds, 95% paired bootstrap; per seed)",
        ],
        rows,
    )


def gnn_extensions_table() -> str:
    """The two GNN changes on PolBlogs over 5 seeds: median and range of the test metric (the best bold)."""
    runs = {
        name: load(f"gnn-extensions/{name}/recipe-gcn-polblogs.json")["summary"]
        for name in ("eval-all", "theseus-kd-all")
    }
    rows = [
        ("eval-all", "theseus", "Theseus, frozen groups without dropout (`predecessor_eval`)"),
        ("eval-all", "baseline:truncated", "truncated fine-tuning"),
        ("eval-all", "baseline:scratch", "trained from scratch"),
        (
            "eval-all",
            "baseline:kd",
            "vanilla KD on every node (`distill_on: all`: the teacher's soft labels reach the 1,099 unlabelled nodes)",
        ),
        ("theseus-kd-all", "theseus", "Theseus + KD on every node (`kd_weight` 1, a departure from the paper)"),
    ]
    best = max(runs[run]["models"][model]["median"] for run, model, _ in rows)
    seeds = len(runs["eval-all"]["models"]["theseus"]["per_seed"])
    return markdown_table(
        [f"PolBlogs, 6 → 2 layers (median of {seeds} seeds, range)", "test accuracy"],
        [
            [
                label,
                bold(f"{(entry := runs[run]['models'][model])['median']:.3f}", entry["median"] == best)
                + f" ({entry['min']:.3f}–{entry['max']:.3f})",
            ]
            for run, model, label in rows
        ],
    )


def llm_table() -> str:
    """SmolLM2 30 → 15, seed 0: every model's test perplexity and influence-Theseus' perplexity over it (a ratio,
    paired over test sequences, `benchmarks.llm_seeds.compare`)."""
    runs = RESULTS / "llm"
    influence = runs / "smollm2-30to15-influence"
    rows = [  # (run, model, label, emphasis, compared with influence-Theseus)
        ("smollm2-30to15", "predecessor", "predecessor (30 layers, untouched)", False, False),
        (
            "smollm2-30to15",
            "theseus",
            "Theseus, even groups of 2, successor = each group's last layer (`smollm2-30to15`)",
            False,
            True,
        ),
        ("smollm2-30to15", "baseline:truncated", "truncated: those same 15 layers, fine-tuned", False, True),
        (
            "smollm2-30to15",
            "baseline:kd",
            "vanilla KD into those 15 layers (`-kd`; run inside `smollm2-30to15` before KD became its own recipe)",
            False,
            True,
        ),
        (
            "smollm2-30to15-influence",
            "theseus",
            "**Theseus from ShortGPT's layers** (`groups: block_influence`, `smollm2-30to15-influence`)",
            True,
            False,
        ),
        (
            "smollm2-30to15-streamline",
            "baseline:truncated",
            "LLM-Streamline: layers 3–18 replaced by one (MSE stage), then fine-tuned (`-streamline`)",
            True,
            True,
        ),
        (
            "smollm2-30to15-shortgpt",
            "baseline:truncated",
            "**ShortGPT's 15 layers, fine-tuned** (`-shortgpt`; untrained, the same 15 layers: dev perplexity "
            "about 700)",
            True,
            True,
        ),
    ]
    lines = []
    for run, model, label, emphasis, versus in rows:
        perplexity = Report.load(runs / run).models[model].test["perplexity"]
        shown = f"{perplexity:,.0f}" if perplexity >= 1000 else f"{perplexity:.1f}"
        ratio = ""
        if versus:
            found = llm_seeds.compare([(influence, runs / run)], "theseus", model)
            digits = 3 if found["ratio"] < 1 else 2
            ratio = f"{found['ratio']:.{digits}f} [{found['low']:.{digits}f}, {found['high']:.{digits}f}]"
        lines.append([label, bold(shown, emphasis), ratio])
    return markdown_table(
        [
            "model (30 → 15 layers, 200 steps)",
            "test perplexity",
            "influence-Theseus vs it (ratio of perplexities, paired 95% over sequences)",
        ],
        lines,
    )


def slim_minilm_table() -> str:
    """Slim MiniLM over two seeds against two full layers of the same parameter count: test metric per seed (the
    best bold), Theseus minus each baseline, and the measured speedup (median over every run of the shape)."""
    data, reports = compared("compare/compare-minilm-rt-regression-3l-slim.json")
    _, full = compared("compare/compare-minilm-rt-regression-2l.json")

    def speedup(by_method: dict[str, list[Report]]) -> str:
        return f"{statistics.median(report.speedup for by in by_method.values() for report in by):.1f}×"

    first = reports["theseus"][0]
    layers = first.recipe["options"]["num_layers"]
    tests = {method: [report.test(trained(report)) for report in by] for method, by in reports.items()}
    best = max(statistics.mean(values) for values in tests.values())
    labels = {
        "theseus": f"Theseus, {layers} slim layers",
        "truncated": f"truncated fine-tuning, {layers} slim layers",
        "kd": f"vanilla KD, {layers} slim layers",
    }
    rows = [
        [
            "predecessor (6 layers)",
            millions(first.models["predecessor"].parameters),
            f"{first.test('predecessor'):.3f}",
            "",
            "1×",
        ]
    ]
    for method, label in labels.items():
        difference = data["comparisons"].get(method)
        rows.append(
            [
                label,
                millions(reports[method][0].models[trained(reports[method][0])].parameters),
                bold(" / ".join(f"{value:.3f}" for value in tests[method]), statistics.mean(tests[method]) == best),
                f"{points(difference['mean'])} points {points_interval(difference)}" if difference else "",
                speedup(reports),
            ]
        )
    full_layers = full["theseus"][0].recipe["options"]["num_layers"]
    rows.append(
        [
            f"for reference: {full_layers} full layers (same parameters), Theseus / truncated, seed 0",
            millions(full["theseus"][0].models["theseus"].parameters),
            " / ".join(f"{full[method][0].test(trained(full[method][0])):.3f}" for method in ("theseus", "truncated")),
            "",
            speedup(full),
        ]
    )
    seeds = " / ".join(sorted(data["reports"]["theseus"], key=int))
    return markdown_table(
        [
            "model",
            "parameters",
            f"test score (seeds {seeds})",
            "Theseus − model, mean of seeds (95% paired bootstrap)",
            "measured speedup",
        ],
        rows,
    )


def successors_table() -> str:
    """ResNet-34 and its successors side by side (`benchmarks.successors`): median test metric, parameters and
    multiply-adds per image; the speed is the median of each run's own measurement (its recipe table), not the
    successors run's re-timing on busy cores; Theseus minus each baseline of the same architecture."""
    summary = load("successors-resnet-fashion-mnist.json")["summary"]
    models, comparisons = summary["models"], summary["comparisons"]
    groups = (  # (recipe, suffix of the successors table's labels, speed digits, best bold, row labels)
        (
            "converged",
            "",
            2,
            False,
            ("Theseus, ResNet-18 shape", "truncated fine-tuning, ResNet-18 shape", "vanilla KD, ResNet-18 shape"),
        ),
        (
            "mobilenet-v2",
            " (mobilenet_v2)",
            1,
            True,
            ("Theseus, 8 MobileNetV2 blocks", "the same architecture trained directly", "the same architecture by KD"),
        ),
        (
            "shufflenet-v2",
            " (shufflenet_v2)",
            1,
            True,
            ("Theseus, 8 ShuffleNetV2 units", "the same architecture trained directly", "the same architecture by KD"),
        ),
    )

    def row(label: str, entry: dict[str, Any], speed: str, emphasis: bool, versus: str) -> list[str]:
        return [
            label,
            bold(f"{entry['median']:.3f}", emphasis),
            millions(entry["parameters"]),
            f"{entry['multiply_adds'] / 1e6:.1f}M",
            speed,
            versus,
        ]

    rows = [row("ResNet-34 predecessor", models["predecessor"], "1×", False, "")]
    unit = " points"  # said once, on the first difference
    for recipe, suffix, digits, emphasis, labels in groups:
        speed = f"{load(f'recipe-resnet-fashion-mnist-{recipe}.json')['summary']['median_speedup']:.{digits}f}×"
        theseus = "theseus " + (suffix.strip() if suffix else "(same block)")
        names = (theseus, f"baseline:truncated{suffix}", f"baseline:kd{suffix}")
        best = max(models[name]["median"] for name in names)
        for name, label in zip(names, labels, strict=True):
            versus = ""
            if name != theseus:
                found = comparisons[f"{theseus} − {name}"]
                versus, unit = f"{points(found['mean'])}{unit} {points_interval(found)}", ""
            rows.append(row(label, models[name], speed, emphasis and models[name]["median"] == best, versus))
    seeds = len(models["predecessor"]["per_seed"])
    return markdown_table(
        [
            f"model (median of {seeds} seeds)",
            "test accuracy",
            "parameters",
            "multiply-adds / image",
            "measured speed vs ResNet-34",
            "Theseus − it, mean of seeds (95% paired)",
        ],
        rows,
    )


# --- Deployment and performance (docs/deployment.md, docs/performance.md) ---


def deploy_kernels_table() -> str:
    """One GEMM of each of MiniLM's shapes at 1,024 tokens in every int8 path (`benchmarks.deploy --parts kernels`):
    speed against fp32 ``F.linear`` per shape, whether the integer result is exact, and why a path was (not) chosen
    (the chosen ones bold)."""
    paths = {  # the JSON's path: (the page's label, chosen: its numbers bold, why (not))
        "torch._int_mm": ("`torch._int_mm`", False, "a plain loop on CPU"),
        "fbgemm dynamic Linear (own scales)": (
            "fbgemm dynamic `torch.ao` Linear",
            False,
            "picks its own activation scale per call: cannot reproduce the trained clip",
        ),
        "onednn qlinear_pointwise (u8, zp 128)": (
            "**onednn `qlinear_pointwise`** (u8 with zero point 128, per-row weight scales, fp32 out + bias)",
            True,
            "**chosen for PyTorch**: static input scale = the trained step, exact, fp32 output and bias in one call",
        ),
        "ORT MatMulInteger s8×s8": ("ONNX Runtime `MatMulInteger` s8 × s8", False, "no fast s8 × s8 path without VNNI"),
        "ORT MatMulInteger u8×s8 (zp 128)": (
            "**ONNX Runtime `MatMulInteger` u8 × s8** (zero point 128)",
            True,
            "**chosen for ONNX** (`theseus_quant.onnx`), the fastest here",
        ),
    }
    rows = [row for row in load("deploy-kernels.json")["rows"] if row["shape"].startswith("1024×")]
    shapes = list(dict.fromkeys(row["shape"] for row in rows))
    found = {(row["shape"], row["path"]): row for row in rows}
    lines = []
    for path, (label, chosen, why) in paths.items():
        measured = [found[shape, path] for shape in shapes]
        exact = "yes" if all(row["exact"] is True for row in measured) else "no"
        lines.append([label, *(bold(f"{row['vs_fp32']:.2f}×", chosen) for row in measured), exact, why])
    columns = [" → ".join(shape.split(" · ")[1].split("×")) for shape in shapes]
    return markdown_table(["path", *columns, "exact", "why (not)"], lines)


def deploy_accuracy_table() -> str:
    """A trained BinaryBERT run's test predictions in each runtime (`benchmarks.deploy --parts accuracy`)."""
    rows = load("deploy-accuracy.json")["rows"]
    labels = {
        "simulated": "simulated (PyTorch fp32, as exported)",
        "integer (PyTorch)": "integer, PyTorch (`to_integer_`, onednn)",
        "int8 (ONNX Runtime)": "int8, ONNX Runtime (`model.int8.onnx`)",
    }
    simulated = rows["simulated"]["accuracy"]
    lines = []
    for name, label in labels.items():
        row = rows[name]
        if name == "simulated":
            lines.append([label, f"{row['accuracy']:.4f}", "—", "—"])
            continue
        moved = row["accuracy"] - simulated
        shift = "±0.0" if moved == 0 else f"{points(moved, 2)} points"
        lines.append(
            [
                label,
                f"{row['accuracy']:.4f} ({shift})",
                str(row["changed_predictions"]),
                f"{row['max_abs_logit_diff']:.2g}",
            ]
        )
    return markdown_table(["runtime", "test accuracy", "predictions changed vs simulated", "max abs logit diff"], lines)


def performance_table() -> str:
    """`benchmarks.run`'s four cases in one table: parameters, the successor's eager speedup per size, the layer (or
    FLOP) ratio, torch.compile's gain on the successor, a replacing step against fine-tuning at p = 1 (time, memory),
    the engine's overhead at p = 0 and the graphs compiled after warm-up."""
    cases = (  # (results file, row label, sizes shown as, what the ideal ratio counts)
        ("bert-base", "BERT-base 12→6, seq 64", "batch", ""),
        ("minilm", "MiniLM-L6 6→3 (asset), seq 64", "batch", ""),
        ("resnet", "ResNet-34→18, 64×64", "batch", " (FLOPs)"),
        ("gnn", "GCN 6→2, degree 10", "nodes", ""),
    )

    def count(value: int) -> str:
        return millions(value) if value >= 1e6 else f"{value / 1e3:.0f}k"

    rows = []
    for name, label, unit, counted in cases:
        data = load(f"{name}.json")
        eager = data["inference"]["eager"]
        sizes = " / ".join(f"{int(size) // 1000}k" if unit == "nodes" else size for size in eager)
        sizes = f"{sizes} nodes" if unit == "nodes" else f"batch {sizes}"
        (compiled,) = data["inference"]["compiled"].values()
        training = data["training"]
        replacing, fine_tuning = training["replace p=1"], training["fine-tune predecessor"]
        memory = replacing["memory_mib"]["total"] / fine_tuning["memory_mib"]["total"]
        graphs = "not run on CPU"
        if (found := data.get("recompilation")) is not None:
            graphs = (
                f"{found['graphs_compiled_after_warm_up']} ({found['graphs_after_warm_up']} graphs, the last new one "
                f"at step {found['last_new_graph_at_step']}; {found['distinct_route_combinations']} route "
                "combinations)"
            )
        rows.append(
            [
                label,
                f"{count(data['parameters']['predecessor'])} → {count(data['parameters']['successor'])}",
                " / ".join(f"{entry['speedup']:.2f}×" for entry in eager.values()) + f" ({sizes})",
                f"{data['ideal_speedup']:g}{counted}",
                f"{compiled['compile_speedup']:.2f}×",
                f"{replacing['time_vs_fine_tune']:.2f}×, {memory:.2f}×",
                f"{data['overhead']['ratio']:.3f}×",
                graphs,
            ]
        )
    return markdown_table(
        [
            "case",
            "parameters",
            "successor speedup (eager)",
            "layer ratio",
            "compile vs eager (successor)",
            "replacing step vs fine-tuning: time, memory (p = 1)",
            "engine overhead (p = 0)",
            "graphs compiled after warm-up, 200 steps",
        ],
        rows,
    )
