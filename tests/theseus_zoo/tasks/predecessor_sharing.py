"""Whether `--predecessor-from` lets a recipe with other options take a run's fine-tuned predecessor: the family's
`CompressionOptions` are the options it may differ in."""

import pytest

from theseus_zoo.recipes import get_recipe
from theseus_zoo.training import run_directory
from theseus_zoo.training.checkpoints import write_checkpoint
from theseus_zoo.training.state import RunState, StageRecord


def assert_shares_predecessor(recipe: str, change: dict, shared: bool, compression_options: tuple, tmp_path) -> None:
    """Writes a run of ``recipe`` with its predecessor phase done to ``tmp_path``; the recipe with its options
    ``change``-d takes that predecessor if ``shared``, and is refused otherwise."""
    base = get_recipe(recipe)
    record = StageRecord(weights={}, best_metric=0.5, best_step=1, steps=1, seconds=0.0)
    write_checkpoint(
        RunState(done={"predecessor": record}, recipe=base.to_dict()).to_dict(), tmp_path / "checkpoint.pt"
    )
    other = base.with_overrides({"options": {**base.options, **change}})
    if shared:
        assert run_directory.finished_predecessor(tmp_path, other, compression_options) == record
    else:
        with pytest.raises(run_directory.RunError, match="has another options"):
            run_directory.finished_predecessor(tmp_path, other, compression_options)
