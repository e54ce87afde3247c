"""The old name of the depth-pruning baselines and the layer selection they rest on, kept because the README and the
tests use it: `theseus_adapters.depth_baselines` (ShortGPT, LLM-Streamline) and `theseus_adapters.layer_selection`
(layer similarities, Block Influence, the most similar run, Theseus groups around ShortGPT's kept layers) in one
namespace. ``_record_run`` and ``_run_mse`` are here for the test that checks the MSE Streamline reports."""

from .depth_baselines import DepthPruned, _record_run, _run_mse, keep_layers, shortgpt, streamline
from .hf_stack import layer_stack
from .layer_selection import block_influence, influence_groups, layer_similarities, most_similar_run

__all__ = [
    "DepthPruned",
    "_record_run",
    "_run_mse",
    "block_influence",
    "influence_groups",
    "keep_layers",
    "layer_similarities",
    "layer_stack",
    "most_similar_run",
    "shortgpt",
    "streamline",
]
