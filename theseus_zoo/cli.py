"""The `theseus` command.

    theseus recipes [PATTERN]
    theseus compress --recipe NAME [--out DIR] [--config FILE.json] [--seed N] [--steps-to-one N] [--resume]

Bad input ends with one line on stderr that says what to do (exit status 2),
before any training. Ctrl-C keeps the last checkpoint: ``--resume`` continues.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from .recipe import get_recipe, list_recipes, load_overrides

FAMILY_MODULES = ("theseus_zoo.toy", "theseus_zoo.text")  # each registers its family and recipes on import


def _load_catalogue() -> None:
    for module in FAMILY_MODULES:
        importlib.import_module(module)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="theseus", description="Theseus compression (progressive module replacing).")
    commands = parser.add_subparsers(dest="command", required=True)
    recipes = commands.add_parser("recipes", help="list the recipes")
    recipes.add_argument("pattern", nargs="?", default="*", help="glob on recipe names (default: all)")
    compress = commands.add_parser("compress", help="run a recipe: predecessor, compression, baselines, report")
    compress.add_argument("--recipe", required=True, help="a name from `theseus recipes`")
    compress.add_argument("--out", type=Path, help="output directory (default: runs/<recipe>)")
    compress.add_argument("--config", type=Path, help="JSON object of recipe fields to override")
    compress.add_argument("--seed", type=int, help="override the recipe's seed")
    compress.add_argument("--steps-to-one", type=int, help="step at which the replacing rate reaches 1")
    compress.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    compress.add_argument("--no-progress", action="store_true", help="no progress bars")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _load_catalogue()
    try:
        if args.command == "recipes":
            for recipe in list_recipes(args.pattern):
                print(f"{recipe.name:<16} {recipe.family:<8} {recipe.description}")
            return 0
        recipe = get_recipe(args.recipe)
        overrides = load_overrides(args.config) if args.config else {}
        if args.seed is not None:
            overrides["seed"] = args.seed
        if args.steps_to_one is not None:
            overrides["steps_to_one"] = args.steps_to_one
        recipe = recipe.with_overrides(overrides)
        from .trainer import Run  # heavy imports (accelerate) only for a run

        run = Run(recipe, args.out or Path("runs") / recipe.name, resume=args.resume, progress=not args.no_progress)
        report = run.run()
    except (ValueError, KeyError, FileNotFoundError) as error:
        print(f"theseus: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ntheseus: interrupted; the last checkpoint is kept: rerun with --resume", file=sys.stderr)
        return 130
    print((run.out / "report.md").read_text())
    print(f"report, curves.png, metrics.jsonl and the exported model are in {run.out}")
    return 0 if report else 1


if __name__ == "__main__":
    sys.exit(main())
