"""What a user installs: imports that stay light, extras that bring what their code needs, metadata that
matches the code."""

import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def run(script: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


BLOCK_HYPOTHESIS = """
import sys

sys.modules["hypothesis"] = None  # as if not installed: importing it raises ImportError
"""


def test_importing_theseus_core_does_not_load_dynamo():
    out = run(
        """
        import sys
        import theseus_core as th
        import theseus_core.testing
        print("torch._dynamo" in sys.modules)
        """
    )
    assert out.strip() == "False"


def test_toy_models_and_the_equivalence_check_need_no_hypothesis():
    out = run(
        BLOCK_HYPOTHESIS
        + """
import theseus_core as th
from theseus_core.testing import ToyStack, assert_replacement_equivalence
model = ToyStack()
assert_replacement_equivalence(model, [th.ModuleSpec("blocks[0:2]", th.copy_module(0))], model.example_inputs())
try:
    from theseus_core.testing import replacement_cases
except ImportError as error:
    print("strategies:", error)
"""
    )
    assert "strategies: theseus_core.testing's strategies need hypothesis" in out


def test_the_recipes_command_needs_no_hypothesis():
    out = run(BLOCK_HYPOTHESIS + "from theseus_zoo.cli import main\nmain(['recipes'])\n")
    assert "toy" in out


def test_python_floor_matches_the_code():
    uses_add_note = any("add_note(" in path.read_text() for path in (ROOT / "theseus_core").rglob("*.py"))
    floor = tuple(
        int(part) for part in re.fullmatch(r">=(\d+)\.(\d+)", PYPROJECT["project"]["requires-python"]).groups()
    )
    assert not uses_add_note or floor >= (3, 11), "BaseException.add_note needs Python 3.11"
    assert PYPROJECT["tool"]["ruff"]["target-version"] == f"py{floor[0]}{floor[1]}"


def test_the_bert_extra_brings_what_the_trainer_callback_needs():
    assert any(
        requirement.startswith("accelerate") for requirement in PYPROJECT["project"]["optional-dependencies"]["bert"]
    )


def test_theseus_core_ships_its_type_marker():
    assert (ROOT / "theseus_core" / "py.typed").exists()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["theseus_core"]


def test_every_folder_of_python_modules_is_a_package_that_a_wheel_would_ship():
    for package in ("theseus_core", "theseus_adapters", "theseus_quant", "theseus_zoo"):
        for folder in {path.parent for path in (ROOT / package).rglob("*.py")}:
            assert (folder / "__init__.py").exists(), f"{folder.relative_to(ROOT)} has no __init__.py"
