"""The README's quick start runs as written."""

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_quick_start_and_api_examples_run_as_written(tmp_path):
    text = README.read_text()
    code = "\n".join(re.findall(r"```python\n(.*?)```", text[text.index("## Quick start") :], re.DOTALL))
    script = tmp_path / "quick_start.py"
    script.write_text(code + "\nassert len(compact.blocks) == 3 and compact.blocks[0].inner.width == 32\n")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "'blocks[0:3]': 3 × Block" in result.stdout
