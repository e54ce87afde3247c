"""The `theseus` command.

    theseus recipes [PATTERN]
    theseus methods
    theseus assets
    theseus fetch ASSET [ASSET ...]
    theseus compress --recipe NAME [--out DIR] [--config FILE.json] [--seed N] [--steps-to-one N] [--resume]
                     [--predecessor-from RUN_DIR] [--threads N] [--no-progress]
                     [--parallel ddp|fsdp] [--activation-checkpointing]
    theseus sweep --recipe NAME (--grid FIELD=V1,V2,... ... | --paper-grid) [--out DIR] [same flags]
    theseus analyze --recipe NAME --analysis sensitivity|schedules|budget [--out DIR] [same flags]
    theseus export --onnx RUN_DIR [--out DIR]

Bad input ends with one line on stderr that says what to do (exit status 2),
before any training; so does a missing optional dependency, naming the extra
that brings it (``pip install -e '.[zoo]'``). Ctrl-C keeps the last checkpoint:
``--resume`` continues.

``compress`` also runs as several processes, one per CPU share or GPU::

    torchrun --standalone --nproc_per_node 2 -m theseus_zoo.cli compress --recipe NAME ...

``--parallel fsdp`` shards each layer's parameters, gradients and optimizer state across the ranks (FSDP2, for the
causal_lm family; `theseus_zoo.training.sharding`); ``ddp``, the default, gives every rank the whole model.
Rank 0 prints the report (and an error every rank met, once); ``sweep`` and
``analyze`` run in one process.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .data.assets import ASSETS
from .data.assets import fetch as fetch_asset
from .errors import ONE_LINE_ERRORS
from .methods import METHODS, split_methods
from .recipes import Phase, Recipe, get_recipe, list_recipes, load_overrides

DISTRIBUTION = "theseus-compression"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="theseus", description="Theseus compression (progressive module replacing).")
    commands = parser.add_subparsers(dest="command", required=True)
    recipes = commands.add_parser("recipes", help="list the recipes")
    recipes.add_argument("pattern", nargs="?", default="*", help="glob on recipe names (default: all)")
    commands.add_parser("methods", help="list the methods and modifiers --methods names")
    commands.add_parser("assets", help="list the offline assets (real models and data)")
    fetch = commands.add_parser("fetch", help="download, verify (sha256) and cache offline assets")
    fetch.add_argument("names", nargs="+", metavar="ASSET", help="names from `theseus assets`")
    compress = commands.add_parser("compress", help="run a recipe: predecessor, compression, baselines, report")
    sweep = commands.add_parser("sweep", help="run a recipe over a grid of its fields; the best on dev wins")
    analyze = commands.add_parser("analyze", help="the paper's analyses: module sensitivity, schedules, budget")
    export = commands.add_parser("export", help="export a run's model for deployment, verified (ONNX Runtime)")
    export.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a finished `theseus compress` run directory")
    export.add_argument("--onnx", action="store_true", required=True, help="ONNX, checked in ONNX Runtime")
    export.add_argument("--out", type=Path, help="output directory (default: RUN_DIR/model)")
    for command in (compress, sweep, analyze):
        command.add_argument("--recipe", required=True, help="a name from `theseus recipes`")
        command.add_argument("--out", type=Path, help="output directory (default: runs/<recipe>[-sweep])")
        command.add_argument("--config", type=Path, help="JSON object of recipe fields to override")
        command.add_argument("--seed", type=int, help="override the recipe's seed")
        command.add_argument("--steps-to-one", type=int, help="step at which the replacing rate reaches 1")
        command.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
        command.add_argument("--no-progress", action="store_true", help="no progress bars (transformers' too)")
        command.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's, all cores)")
        command.add_argument(
            "--predecessor-from", type=Path, help="a run directory whose fine-tuned predecessor to take (same recipe)"
        )
    compress.add_argument(
        "--methods",
        help="what to train, comma-separated, in place of the recipe's: names from `theseus methods`, modifiers "
        "after theseus, arguments in parentheses (e.g. theseus+warmup+kd,kd(alpha=0.7),truncated)",
    )
    compress.add_argument(
        "--keep-checkpoints",
        action="store_true",
        help="keep checkpoint.pt.previous once the run is finished (by default only checkpoint.pt stays)",
    )
    compress.add_argument(
        "--parallel",
        choices=("ddp", "fsdp"),
        default="ddp",
        help="under torchrun: ddp (every rank the whole model; the default) or fsdp (FSDP2, each layer sharded across "
        "the ranks; causal_lm)",
    )
    compress.add_argument(
        "--activation-checkpointing",
        action="store_true",
        help="with --parallel fsdp: recompute each layer's activations in the backward pass instead of keeping them",
    )
    compress.add_argument(
        "--budget",
        help="search a successor per group so that the model costs at most this fraction of the predecessor's "
        "measured latency, parameters or multiply-adds: latency=0.5, params=0.3 or macs=0.3 (optional ,steps=N and "
        ",lr=X of the blockwise distillation; over a config's budget, whose steps and lr it keeps unless it gives "
        "its own); the Theseus variants and kd+searched / truncated+searched train the choice",
    )
    sweep.add_argument("--grid", action="append", default=[], help="FIELD=V1,V2,... (repeatable; FIELD may be dotted)")
    sweep.add_argument("--paper-grid", action="store_true", help="BERT-of-Theseus' grid: lr, basic rate b, steps to 1")
    analyze.add_argument("--analysis", required=True, choices=("sensitivity", "schedules", "budget"))
    analyze.add_argument("--constant-rate", type=float, default=0.5, help="p of the constant schedule (schedules)")
    analyze.add_argument(
        "--budgets", type=float, nargs="+", default=[0.5, 1.0, 2.0], help="multiples of the replacing steps (budget)"
    )
    return parser


def _recipe(args: argparse.Namespace) -> Recipe:
    overrides = load_overrides(args.config) if args.config else {}
    if args.seed is not None:
        overrides["seed"] = args.seed
    if args.steps_to_one is not None:
        overrides["steps_to_one"] = args.steps_to_one
    if getattr(args, "methods", None) is not None:  # compress only
        overrides["methods"] = split_methods(args.methods)
    if getattr(args, "budget", None) is not None:  # the flag's fields over the config's; its kind replaces theirs
        given = overrides.get("budget")
        # the config's steps and lr only: a budget.chosen there is a choice made, not the search the flag asks for
        kept = {k: v for k, v in given.items() if k in ("steps", "lr")} if isinstance(given, dict) else {}
        overrides["budget"] = {**kept, **parse_budget(args.budget)}
    recipe = get_recipe(args.recipe)
    try:
        return recipe.with_overrides(overrides)
    except ValueError as error:
        raise ValueError(_inherited(recipe, overrides, error)) from None


def _inherited(recipe: Recipe, overrides: Mapping[str, Any], error: ValueError) -> str:
    """The message of an override that fails on a setting the user did not give: a phase's field kept from the
    recipe's phase when the config changed others (shorter ``steps`` under the recipe's ``warmup_steps``), or
    ``steps_to_one`` kept when ``replacing.steps`` shrank. It names the setting, the recipe and phase it came from
    and what to set; any other error is left as it was."""
    message = str(error)
    for phase in ("predecessor", "replacing", "refine"):
        given, current = overrides.get(phase), getattr(recipe, phase)
        if not isinstance(given, Mapping) or not isinstance(current, Phase):
            continue
        for field in dataclasses.fields(Phase):  # the recipe names the failing setting: "predecessor.warmup_steps"
            if field.name not in given and message.startswith(f"{phase}.{field.name} "):
                value = getattr(current, field.name)
                return (
                    f"{message}: {value!r} is recipe {recipe.name}'s {phase}.{field.name}, kept when your config set "
                    f"{phase}.{', '.join(given)}; set {phase}.{field.name} too"
                )
    replacing = overrides.get("replacing")
    if message.startswith("steps_to_one ") and "steps_to_one" not in overrides and isinstance(replacing, Mapping):
        return (
            f"{message}: {recipe.steps_to_one} is recipe {recipe.name}'s steps_to_one, kept when your config set "
            f"replacing.{', '.join(replacing)}; set steps_to_one too (or --steps-to-one)"
        )
    return message


def parse_budget(text: str) -> dict[str, float]:
    """``"latency=0.5,steps=200"`` -> ``{"latency": 0.5, "steps": 200}`` (checked by the recipe)."""
    budget: dict[str, float] = {}
    for item in filter(None, text.split(",")):
        key, equals, value = item.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = None
        if not equals or number is None:
            raise ValueError(f"--budget takes kind=fraction, e.g. latency=0.5 or params=0.3, got {item!r}")
        if key.strip() in budget:
            raise ValueError(f"--budget gives {key.strip()}= twice: {text!r}")
        budget[key.strip()] = int(number) if key.strip() == "steps" and number.is_integer() else number
    return budget


def _settings(args: argparse.Namespace) -> None:
    """``--threads`` and ``--no-progress``, set before any work (and before transformers or datasets draw a bar)."""
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads must be an integer >= 1, got {args.threads}")
    if args.no_progress:  # environment variables only: a run that needs no transformers imports none
        os.environ["TQDM_DISABLE"] = "1"  # every tqdm bar: transformers' loading, datasets' maps
        os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] = "1"
        os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # transformers' own switch starts from this one
        if "transformers" in sys.modules:  # imported already (main called in-process): its switch is set
            from transformers.utils import logging

            logging.disable_progress_bar()
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)


def _own_data(recipe: Recipe, overrides_description: bool) -> Recipe:
    """A recipe run on the user's own data says so: its description (the report's second line) becomes what was
    read (file, columns, classes, split, rows dropped) and its warnings (a class with few examples), printed with what
    was inferred about the labels and the warnings, for a family that describes its data
    (`theseus_zoo.tasks.protocols.DescribesData`). A recipe on its own dataset, one whose description the config sets,
    and a file that fails to load (the run's check then names the problem, once) are left as they are."""
    if overrides_description:
        return recipe
    from .tasks import build_task
    from .tasks.protocols import DescribesData

    try:
        task = build_task(recipe.family, recipe.options, recipe.seed)
        if not isinstance(task, DescribesData):
            return recipe
        description = task.describe_data()
        inference = task.label_inference()
        warnings = task.data_warnings()
    except (ValueError, FileNotFoundError):  # the run raises it again, printed once under torchrun
        return recipe
    if description is None:
        return recipe
    if int(os.environ.get("RANK", "0")) == 0:  # once under torchrun
        print(f"theseus: your data: {description}", flush=True)  # rows dropped for a missing label counted there
        if inference is not None:
            print(f"theseus: {inference}", flush=True)
        for warning in warnings:
            print(f"theseus: warning: {warning}", flush=True)
    warned = "".join(f" Warning: {warning}." for warning in warnings)  # the report's second line
    dataset = recipe.options.get("dataset")  # the report's title: the user's file, not the recipe it borrowed
    title = {"name": Path(str(dataset)).name} if dataset is not None else {}
    return recipe.with_overrides(
        {**title, "description": f"Recipe {recipe.name} on the user's data. {description}{warned}"}
    )


def _extras(module: str) -> list[str]:
    """The extras of this distribution that install ``module`` (its top-level name), read from the installed
    metadata (pyproject's ``optional-dependencies``), ``dev`` last; none when the distribution is not installed."""
    try:
        requirements = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return []
    wanted = re.sub(r"[-_.]+", "-", module).lower()
    extras = []
    for requirement in requirements:
        name = re.match(r"[A-Za-z0-9._-]+", requirement)
        extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", requirement)
        if name and extra and re.sub(r"[-_.]+", "-", name.group()).lower() == wanted:
            extras.append(extra.group(1))
    return sorted(dict.fromkeys(extras), key=lambda extra: extra == "dev")


def _missing(error: ModuleNotFoundError, family: str | None) -> str | None:
    """One line for a missing optional dependency: the extra to install, all of the family's when the run's
    family needs it (`theseus_zoo.tasks.FAMILY_EXTRAS`); ``None`` for a module no extra brings (a bug: its traceback
    is worth more than a line)."""
    module = (error.name or "").partition(".")[0]
    extras = _extras(module)
    if not extras:
        return None
    from .tasks import FAMILY_EXTRAS

    needed = FAMILY_EXTRAS.get(family or "", ())
    if set(needed) & set(extras):
        named = f"the {needed[0]} extra" if len(needed) == 1 else f"the extras {', '.join(needed)}"
        what, extras = f"the {family} family needs {named}", list(needed)
    else:
        what, extras = f"it comes with the {extras[0]} extra", extras[:1]
    return f"{module} is not installed; {what}: pip install -e '.[{','.join(extras)}]' in the clone"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    family = None  # the run's, once its recipe is known: what a missing module's message names
    run_out: Path | None = None  # a compress run's directory, once known: what an interrupt's advice reads
    try:
        if args.command == "recipes":
            recipes = list_recipes(args.pattern)
            if not recipes:
                raise ValueError(f"no recipe matches {args.pattern!r}; `theseus recipes` lists them all")
            width = max((len(recipe.name) for recipe in recipes), default=0)
            for recipe in recipes:
                print(f"{recipe.name:<{width}}  {recipe.family:<6}  {recipe.description}")
            return 0
        if args.command == "methods":
            specs = METHODS.list()
            width = max(len(spec.name) for spec in specs)
            for spec in sorted(specs, key=lambda spec: (spec.is_modifier, spec.name)):
                print(f"{spec.name:<{width}}  {spec.description}")
            return 0
        if args.command == "assets":
            for asset in ASSETS.values():
                print(f"{asset.name:<18}  {asset.description}")
            return 0
        if args.command == "fetch":
            for name in args.names:
                print(f"{name}: {fetch_asset(name)}")
            return 0
        if args.command == "export":
            from .export.onnx import export_run  # needs the onnx extra

            for exported in export_run(args.run_dir, args.out):
                print(exported)
            return 0
        _settings(args)
        recipe = _recipe(args)
        family = recipe.family
        recipe = _own_data(recipe, bool(args.config) and "description" in load_overrides(args.config))
        if args.command in ("sweep", "analyze") and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise ValueError(
                f"theseus {args.command} runs in one process; start it without torchrun (compress runs under it)"
            )
        if args.command == "sweep":
            from .training.run_directory import check_writable
            from .training.sweep import PAPER_GRID, markdown, parse_grid, sweep

            grid = {**(PAPER_GRID if args.paper_grid else {}), **parse_grid(args.grid)}
            if not grid:
                raise ValueError("give --grid FIELD=V1,V2,... (repeatable) or --paper-grid")
            out = args.out or Path("runs") / f"{recipe.name}-sweep"
            check_writable(out)
            summary = sweep(
                recipe,
                grid,
                out,
                resume=args.resume,
                progress=not args.no_progress,
                predecessor_from=args.predecessor_from,
            )
            print(markdown(summary))
            print(f"every point's run, sweep.json and sweep.md are in {out}")
            return 0
        if args.command == "analyze":
            from .training import analyze
            from .training.run_directory import check_writable

            out = args.out or Path("runs") / f"{recipe.name}-{args.analysis}"
            check_writable(out)  # a file: one line, not the traceback of listing it
            if not args.resume and out.exists() and any(out.iterdir()):
                raise ValueError(f"{out} holds an analysis already; pass --resume to continue it, or another --out")
            options = {"progress": not args.no_progress, "predecessor_from": args.predecessor_from}
            if args.analysis == "schedules":
                options["constant_rate"] = args.constant_rate
            elif args.analysis == "budget":
                options["budgets"] = args.budgets
            getattr(analyze, args.analysis)(recipe, out, **options)
            print((out / f"{args.analysis}.md").read_text())
            print(f"the runs, {args.analysis}.json and {args.analysis}.png are in {out}")
            return 0
        from .training.run import Run  # heavy imports (accelerate) only for a run
        from .training.sharding import Parallelism

        parallelism = Parallelism(args.parallel, args.activation_checkpointing)

        out = run_out = args.out or Path("runs") / recipe.name
        run = Run(
            recipe,
            out,
            resume=args.resume,
            progress=not args.no_progress,
            predecessor_from=args.predecessor_from,
            keep_checkpoints=args.keep_checkpoints,
            parallelism=parallelism,
        )
        run.run()  # returns on every rank once rank 0 has written the report
    except ONE_LINE_ERRORS as error:
        if not getattr(error, "quiet", False):  # one line, not one per rank, for an error every rank met
            message = error.args[0] if isinstance(error, KeyError) and error.args else error  # str() would quote it
            print(f"theseus: error: {message}", file=sys.stderr, flush=True)
        if getattr(error, "on_every_rank", False):
            _leave_together()  # rank 0's line is out before the launcher sees a rank exit
        return 2
    except ModuleNotFoundError as error:
        message = _missing(error, family)
        if message is None:
            raise
        print(f"theseus: error: {message}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        if args.command != "compress" or _checkpointed(run_out):
            print("\ntheseus: interrupted; the last checkpoint is kept: rerun with --resume", file=sys.stderr)
        else:
            print(
                "\ntheseus: interrupted before the first checkpoint: nothing to resume, rerun as it was",
                file=sys.stderr,
            )
        return 130
    if run.main:
        print((out / "report.md").read_text())
        plots = "curves.png, search.png" if (out / "search.png").exists() else "curves.png"
        model = " and the exported model (model/)" if (out / "model").is_dir() else ""  # Theseus' alone is exported
        print(f"report, {plots}, metrics.jsonl{model} are in {out}")
    _leave_together()
    return 0


def _checkpointed(out: Path | None) -> bool:
    """Whether an interrupted ``compress`` run left a checkpoint in ``out`` (``None``: interrupted before its
    directory was known, so nothing was written)."""
    if out is None:
        return False
    from .training.run_directory import has_checkpoint  # imported by the run already

    return has_checkpoint(out)


def _leave_together() -> None:
    """Under torchrun, waits for every rank and leaves the process group; nothing in one process."""
    from .training.ranks import leave

    leave()


if __name__ == "__main__":
    sys.exit(main())
