"""`theseus` flags that every running command takes: ``--threads`` and ``--no-progress``, set before any work."""

import os

import pytest
import torch
from transformers.utils import logging

from theseus_zoo import cli


@pytest.fixture
def restored(monkeypatch):
    """Puts back what the flags change: torch's threads, the environment, transformers' bars."""
    threads, bars = torch.get_num_threads(), logging.is_progress_bar_enabled()
    for variable in ("TQDM_DISABLE", "HF_DATASETS_DISABLE_PROGRESS_BARS"):
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
