"""The README and every page of docs/ run as written: each page's python blocks in order in one process, each
block alone or in the namespace its first line says it continues (the quick start's, or the block above's), the
README's quick start the same as the docs', and the command page's CLI block pasting in order (no two runs into one
``--out``)."""

import importlib.util
import re
import shlex
from pathlib import Path

import pytest

from tests.page_process import run_page
from theseus_zoo.recipes import list_recipes
from theseus_zoo.tasks import FAMILY_EXTRAS

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]
CONTINUES = "# Continues "
QUICK_START = "# Continues the quick start"


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), re.DOTALL | re.MULTILINE)


def name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def run(code: str, folder: Path) -> tuple[int, str, str]:
    """``(exit code, stdout, stderr)`` of ``code`` run as a script in a process of its own (`page_process`), this
    checkout first on its path whatever is installed, in an empty working directory under ``folder``."""
    script, cwd = folder / "page.py", folder / "page"
    script.write_text(code)
    cwd.mkdir()
    return run_page(script, cwd, pythonpath=ROOT, timeout=600)


RUNNABLE = [page for page in PAGES if python_blocks(page)]
AFTER = {  # what a page's run must have shown, beyond running
    "docs/getting-started.md": "\nassert len(compact.blocks) == 3 and compact.blocks[0].inner.width == 32\n",
    "docs/guides/training-loops.md": "\nimport os\nassert os.path.isfile('runs/hf-trainer/compact/config.json')\n",
}


def test_the_readme_and_the_docs_have_one_quick_start():
    (readme_quick_start,) = python_blocks(README)  # the README shows the quick start alone
    assert python_blocks(DOCS / "getting-started.md")[0] == readme_quick_start


def page_script(page: Path) -> str:
    """A script running the page's blocks in order, each in the namespace it says it continues: a block beginning
    with ``# Continues the quick start`` in the quick start's (run first; every such block of the page shares it),
    one with another ``# Continues`` in the block above's, any other in a fresh namespace of its own (so it must stand
    alone)."""
    blocks = python_blocks(page)
    lines = ["fresh = lambda: {'__name__': '__main__'}"]
    if any(block.startswith(QUICK_START) for block in blocks):
        lines += [
            "quick_start = fresh()",
            f"exec(compile({python_blocks(README)[0]!r}, 'the quick start', 'exec'), quick_start)",
        ]
    for index, block in enumerate(blocks):
        if block.startswith(QUICK_START):
            lines.append("namespace = quick_start")
        elif not block.startswith(CONTINUES):
            lines.append("namespace = fresh()")
        lines.append(f"exec(compile({block!r}, '{name(page)}, block {index}', 'exec'), namespace)")
    if name(page) in AFTER:
        lines.append(f"exec({AFTER[name(page)]!r}, namespace)")
    return "\n".join(lines) + "\n"


def test_every_block_stands_alone_or_says_what_it_continues():
    """A page's first block does not continue the block above (there is none), only the quick start."""
    for page in RUNNABLE:
        first = python_blocks(page)[0]
        assert not first.startswith(CONTINUES) or first.startswith(QUICK_START), name(page)


@pytest.mark.parametrize("page", [page for page in RUNNABLE if page != README], ids=name)
def test_every_python_block_of_a_page_runs_in_order(page, tmp_path):
    """All of a page's blocks in one process, as a reader pasting the page top to bottom would, each block alone
    or in the namespace it says it continues (`page_script`; tiny models only: the Lightning and Trainer examples
    train 20-30 steps). The README's one block is the getting-started page's first
    (`test_the_readme_and_the_docs_have_one_quick_start`), run there."""
    returncode, stdout, stderr = run(page_script(page), tmp_path)
    assert returncode == 0, f"{name(page)}:\n{stderr[-3000:]}"
    if name(page) == "docs/getting-started.md":
        assert "'blocks[0:3]': 3 × Block" in stdout  # the handle's repr, as the quick start prints it


def test_the_cli_block_pastes_in_order():
    """Every ``theseus compress`` of the command page's first block (but ``--resume``) writes to an ``--out`` of its
    own."""
    text = (DOCS / "command.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.DOTALL).group(1)
    outs = []
    for line in block.splitlines():
        words = shlex.split(line.split("  #")[0])
        if "compress" not in words or "--resume" in words:
            continue
        recipe = words[words.index("--recipe") + 1]
        outs.append(words[words.index("--out") + 1] if "--out" in words else f"runs/{recipe}")
    assert len(outs) >= 5 and len(set(outs)) == len(outs), outs
    assert "overrides.json" not in block or "> overrides.json" in block  # written before it is read


def test_no_page_speaks_of_issues_or_cells():
    """The product says what things are; the history is git's."""
    pattern = re.compile(r"issue ?#?[0-9]|cell \([a-e]\)", re.IGNORECASE)
    for page in PAGES:
        assert not pattern.search(page.read_text()), name(page)


def test_the_recipe_table_lists_every_recipe_with_its_extras():
    """The table docs/recipes.md shows is built from the registry by the site's hook (``make docs`` runs it)."""
    spec = importlib.util.spec_from_file_location("generated", DOCS / "hooks" / "generated.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    page = hook.on_page_markdown((DOCS / "recipes.md").read_text())
    assert hook.RECIPE_TABLE in (DOCS / "recipes.md").read_text() and hook.RECIPE_TABLE not in page
    for recipe in list_recipes():
        extras = ",".join(FAMILY_EXTRAS[recipe.family])
        assert f"| `{recipe.name}` | `{recipe.family}` | `[{extras}]` |" in page, recipe.name
