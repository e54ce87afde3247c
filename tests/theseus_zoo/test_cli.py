"""`theseus` flags that every running command takes (``--threads`` and ``--no-progress``, set before any work),
and a new user's first hour: each mistake or missing piece answers in one line, without a traceback."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers.utils import logging

from theseus_zoo import cli


@pytest.fixture
def restored(monkeypatch):
    """Puts back what the flags change: torch's threads, the environment, transformers' bars."""
    threads, bars = torch.get_num_threads(), logging.is_progress_bar_enabled()
    for variable in ("TQDM_DISABLE", "HF_DATASETS_DISABLE_PROGRESS_BARS", "HF_HUB_DISABLE_PROGRESS_BARS"):
        monkeypatch.delenv(variable, raising=False)
    yield
    torch.set_num_threads(threads)
    (logging.enable_progress_bar if bars else logging.disable_progress_bar)()


@pytest.mark.parametrize("command", ["compress", "sweep", "analyze"])
def test_threads_and_no_progress_are_set_before_the_recipe_is_read(restored, capsys, command):
    extra = ["--analysis", "budget"] if command == "analyze" else []
    logging.enable_progress_bar()
    assert cli.main([command, "--recipe", "no-such-recipe", "--threads", "2", "--no-progress", *extra]) == 2
    assert "unknown recipe 'no-such-recipe'" in capsys.readouterr().err
    assert torch.get_num_threads() == 2
    assert os.environ["TQDM_DISABLE"] == "1" and not logging.is_progress_bar_enabled()  # transformers' bars too


def test_threads_below_one_end_in_one_line(restored, capsys):
    assert cli.main(["compress", "--recipe", "toy", "--threads", "0"]) == 2
    error = capsys.readouterr().err
    assert error == "theseus: error: --threads must be an integer >= 1, got 0\n"


ROOT = Path(__file__).resolve().parents[2]
WITHOUT = """
import sys
from importlib.abc import MetaPathFinder

class Uninstalled(MetaPathFinder):  # these modules are not installed, as after `pip install .` without extras
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {missing!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)

sys.meta_path.insert(0, Uninstalled())
from theseus_zoo.cli import main
sys.exit(main({argv!r}))
"""


def theseus_without(missing: set[str], argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """`theseus ARGV` in a process where the ``missing`` top-level modules cannot be imported."""
    script = WITHOUT.format(missing=missing, argv=argv)
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=cwd, env=environment, timeout=300
    )


def test_a_missing_extra_is_one_line_naming_the_extra(tmp_path):
    """`pip install .` without extras, then the toy command: tqdm (the zoo extra's) is missing."""
    result = theseus_without({"tqdm"}, ["compress", "--recipe", "toy", "--out", "run"], tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr == (
        "theseus: error: tqdm is not installed; the toy family needs the zoo extra: pip install -e '.[zoo]' in the "
        "clone\n"
    )
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_a_missing_module_of_a_family_names_all_of_its_extras(tmp_path):
    result = theseus_without({"transformers"}, ["compress", "--recipe", "minilm-rt-five-2l", "--out", "run"], tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.count("\n") == 1 and "pip install -e '.[zoo,bert,text]'" in result.stderr


def test_a_missing_module_that_no_extra_brings_keeps_its_traceback():
    error = ModuleNotFoundError("No module named 'no_such_module'", name="no_such_module")
    assert cli._missing(error, "toy") is None  # a bug, not a missing extra: main raises it


def test_no_progress_needs_nothing_the_run_does_not_use(tmp_path):
    """The toy run with ``--no-progress`` and neither transformers nor datasets installed."""
    config = tmp_path / "short.json"
    config.write_text(json.dumps({"predecessor": {"steps": 40}, "replacing": {"steps": 40}, "steps_to_one": 20}))
    argv = ["compress", "--recipe", "toy", "--no-progress", "--config", str(config), "--out", "run"]
    result = theseus_without({"transformers", "datasets"}, argv, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "run" / "report.md").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["compress", "--recipe", "minilm-rt-fiv-2l"],
            "unknown recipe 'minilm-rt-fiv-2l' (did you mean minilm-rt-five-2l, minilm-rt-five-3l or "
            "minilm-rt-five-1l?); `theseus recipes` lists them",
        ),
        (["sweep", "--recipe", "tyo", "--paper-grid"], "unknown recipe 'tyo' (did you mean toy?)"),
        (["compress", "--recipe", "zzz"], "unknown recipe 'zzz'; `theseus recipes` lists them"),
        (["fetch", "smollm"], "unknown asset 'smollm' (did you mean smollm2-135m-instruct?); `theseus assets`"),
    ],
)
def test_an_unknown_recipe_or_asset_gets_at_most_three_names(capsys, argv, message):
    assert cli.main(argv) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1
    assert error.count(",") <= 2  # at most three names, never the catalogue


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"predecessor": {"steps": 40}},
            "theseus: error: predecessor.warmup_steps must be an integer in [0, steps=40], got 70: 70 is recipe "
            "minilm-rt-five-2l's predecessor.warmup_steps, kept when your config set predecessor.steps; set "
            "predecessor.warmup_steps too\n",
        ),
        (
            {"replacing": {"steps": 40}},
            "theseus: error: steps_to_one must be an integer in [1, replacing.steps=40], got 500: 500 is recipe "
            "minilm-rt-five-2l's steps_to_one, kept when your config set replacing.steps; set steps_to_one too (or "
            "--steps-to-one)\n",
        ),
        (  # given by the user: the message names the setting as the config does
            {"predecessor": {"steps": 40, "warmup_steps": 50}},
            "theseus: error: predecessor.warmup_steps must be an integer in [0, steps=40], got 50\n",
        ),
        (  # the other phase shortened, this one given a bad value: nothing is blamed on the shortened one
            {"predecessor": {"steps": 700}, "replacing": {"lr": float("inf")}},
            "theseus: error: replacing.lr must be a finite number > 0, got inf\n",
        ),
        (  # a phase the recipe lacks, given in part
            {"refine": {"steps": 40}},
            "theseus: error: the recipe has no refine phase to take lr from: set refine.lr too\n",
        ),
    ],
)
def test_a_setting_kept_from_the_recipe_is_named_with_its_phase(tmp_path, capsys, overrides, message):
    config = tmp_path / "short.json"
    config.write_text(json.dumps(overrides))
    assert cli.main(["compress", "--recipe", "minilm-rt-five-2l", "--config", str(config)]) == 2
    assert capsys.readouterr().err == message


def test_recipes_lists_what_the_pattern_matches_and_says_so_when_nothing_does(capsys):
    assert cli.main(["recipes", "toy*"]) == 0
    assert capsys.readouterr().out.startswith("toy ")
    assert cli.main(["recipes", "zzz*"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "theseus: error: no recipe matches 'zzz*'; `theseus recipes` lists them all\n"
