"""mkdocs hooks: the pages' parts made from data at build time.

- ``<!-- recipe-table -->`` becomes the table of every recipe in the registry (`theseus_zoo.recipes`), with the
  extras its family needs (`theseus_zoo.tasks.FAMILY_EXTRAS`): a recipe added to the catalogue is documented by
  the next build.
- The plots of ``benchmarks/results`` join the site under the same path, so that a results page shows them where
  the repository keeps them.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
RECIPE_TABLE = "<!-- recipe-table -->"


def recipe_table() -> str:
    if str(ROOT) not in sys.path:  # the checkout being documented, whatever is installed (mkdocs resets sys.path)
        sys.path.insert(0, str(ROOT))
    from theseus_zoo.recipes import list_recipes
    from theseus_zoo.tasks import FAMILY_EXTRAS

    rows = ["| recipe | family | extras | what it runs |", "|---|---|---|---|"]
    for recipe in list_recipes():
        extras = ",".join(FAMILY_EXTRAS.get(recipe.family, ()))
        description = recipe.description.replace("|", "\\|")
        rows.append(f"| `{recipe.name}` | `{recipe.family}` | `[{extras}]` | {description} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, **kwargs) -> str:
    if RECIPE_TABLE in markdown:
        markdown = markdown.replace(RECIPE_TABLE, recipe_table())
    return markdown


def on_files(files: Files, config) -> Files:
    for plot in sorted((ROOT / "benchmarks" / "results").rglob("*.png")):
        uri = plot.relative_to(ROOT).as_posix()
        files.append(File.generated(config, uri, abs_src_path=str(plot)))
    return files
