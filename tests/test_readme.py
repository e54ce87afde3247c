"""The README runs as written: every python block in order, each block standing alone or saying in its first line
that it continues the ones above, and the CLI block pasting in order (no two runs into one ``--out``)."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
CONTINUES = "# Continues "


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)


def run(code: str, cwd: Path) -> subprocess.CompletedProcess:
    script = cwd / "readme.py"
    script.write_text(code)
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=cwd)


def test_every_python_block_runs_in_order(tmp_path):
    """All of them in one process, as a reader pasting the README top to bottom would (a minute on one core: tiny
    models only, the Lightning and Trainer examples train 20-30 steps)."""
    code = "\n".join(python_blocks())
    result = run(code + "\nassert len(compact.blocks) == 3 and compact.blocks[0].inner.width == 32\n", tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "'blocks[0:3]': 3 × Block" in result.stdout
    assert (tmp_path / "runs" / "hf-trainer" / "compact" / "config.json").exists()  # the Trainer example's export


def test_each_block_stands_alone_or_says_what_it_continues(tmp_path):
    """A block that does not begin with ``# Continues`` runs alone: each in a namespace of its own, one process (the
    first, the quick start, runs alone in the test above)."""
    blocks = python_blocks()
    assert not blocks[0].startswith(CONTINUES)
    alone = [block for block in blocks[1:] if not block.startswith(CONTINUES)]
    assert len(alone) >= 2  # the API's import, the Trainer example
    runner = "\n".join(
        f"exec(compile({block!r}, 'README block {index}', 'exec'), {{'__name__': '__main__'}})"
        for index, block in enumerate(alone)
    )
    result = run(runner + "\n", tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]


def test_the_cli_block_pastes_in_order():
    """Every ``theseus compress`` of the command section (but ``--resume``) writes to an ``--out`` of its own."""
    text = README.read_text()
    section = text[text.index("## The command: `theseus compress`") :]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL).group(1)
    outs = []
    for line in block.splitlines():
        words = shlex.split(line.split("  #")[0])
        if "compress" not in words or "--resume" in words:
            continue
        recipe = words[words.index("--recipe") + 1]
        outs.append(words[words.index("--out") + 1] if "--out" in words else f"runs/{recipe}")
    assert len(outs) >= 5 and len(set(outs)) == len(outs), outs
    assert "overrides.json" not in block or "> overrides.json" in block  # written before it is read
