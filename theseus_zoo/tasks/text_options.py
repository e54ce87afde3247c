"""The bert family's options (`theseus_zoo.tasks.text.TextClassificationTask`): what a recipe or ``--config`` may
say, typed and checked as JSON gives them (`theseus_zoo.tasks.options.parse_options`).

Options (all optional):

- ``model``: an asset name (``"all-minilm-l6-v2"``), a local folder, or a hub id for
  ``from_pretrained``; a classification head of the dataset's size is put on top.
  (default: ``"all-minilm-l6-v2"``)
- ``dataset``: ``"rotten-tomatoes"`` (the asset, `theseus_zoo.data.rotten_tomatoes`), ``"bbc-news"``
  (five topics, `theseus_zoo.data.bbc_news`), ``"glue/<task>"`` (``"glue/sst2"``, ``"glue/mnli"``, ...;
  ``data_dir``: a local GLUE copy, default the hub), or the path of the user's own data: a
  ``.csv``, ``.tsv`` or ``.jsonl`` file or a `datasets` ``save_to_disk`` folder with the columns
  ``text_column`` (default ``"text"``), optionally ``text_pair_column``, and ``label_column``
  (default ``"label"``), and optionally ``split`` (`theseus_zoo.data.tables`).
- ``labels``: what the labels are. Rotten Tomatoes: ``"binary"`` (the default), ``"five"`` valence quintiles or
  ``"regression"`` on the valence. The user's own data: ``"classes"`` or ``"regression"`` (``"binary"``: classes,
  exactly two); left out (``null``), it is inferred from the file only when that leaves no doubt, and the inference
  is printed (`theseus_zoo.data.tables`). BBC News and GLUE have their own (leave it out).
- ``missing_labels``: the user's own rows with no label (empty, ``NaN``, ``NA``, ``null``): ``"refuse"`` them, the
  error naming the rows, or ``"drop"`` them, counted. (default: ``"refuse"``)
- ``split_seed``, ``dev_fraction``, ``test_fraction``: the fixed stratified split of the datasets
  that have none of their own (default: 0, 0.1, 0.1).
- ``num_layers``, ``init``, ``group_sizes``: as in `theseus_adapters.hf.plan`.
- ``heads``, ``intermediate_size``: slim successors (`theseus_adapters.hf.plan`): fewer attention heads and/or a
  narrower FFN at the same hidden size, pruned from the layer each starts from by weight magnitude; the
  ``truncated`` and ``kd`` baselines are pruned the same way and ``scratch`` has the same shape. (default: the
  predecessor's)
- ``quantize``: quantized successors (BinaryBERT, `theseus_quant`): ``"ternary"`` (2-bit TWN weights) or
  ``"binary"`` (1-bit BWN weights) copies of the layers, inputs of every Linear and the attention's Q, K, V and
  probabilities at ``activation_bits``, and the word embeddings (per row) as one more group; position and
  token-type embeddings, LayerNorm, biases, pooler and classifier stay in full precision. ``num_layers`` may then
  equal the predecessor's depth (quantize only). The ``truncated`` and ``kd`` baselines start from the same
  quantized copy of the predecessor, ``scratch`` from a quantized random one. With ``"ternary"``, a recipe's
  ``refine`` phase splits each ternary layer into two binary halves (ternary weight splitting) and the ``direct``
  baseline binarizes the predecessor's weights directly. The export is packed (`theseus_quant.save_packed`,
  `load_exported` rebuilds it). (default: ``None``, full precision)
- ``activation_bits``: with ``quantize``, 8 (uniform, learnable clip) or 4 (LSQ). (default: 8)
- ``max_length``: tokens per example (default: the GLUE task's, 128 or 256; 128 for Rotten Tomatoes);
  batches are padded to their longest example only (dynamic padding).
- ``eval_batch_size``: examples per evaluation forward (default: 128).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

DEFAULT_MODEL = "all-minilm-l6-v2"
WEIGHT_BITS = {"ternary": 2, "binary": 1}
"""Weight bits of each ``quantize`` option."""
DATASETS = ("rotten-tomatoes", "bbc-news", "glue/<task>", "a .csv/.tsv/.jsonl file or a save_to_disk folder")
ROTTEN_TOMATOES_LABELS = ("binary", "five", "regression")
OWN_LABELS = ("classes", "regression")


@dataclass(frozen=True)
class TextOptions:
    """The bert family's options (the module docstring says what each means)."""

    model: str = DEFAULT_MODEL
    dataset: str = "rotten-tomatoes"
    data_dir: str | None = None
    labels: Literal["binary", "five", "regression", "classes"] | None = None
    missing_labels: Literal["refuse", "drop"] = "refuse"
    text_column: str = "text"
    text_pair_column: str | None = None
    label_column: str = "label"
    split_seed: int = field(default=0, metadata={"min": 0})
    dev_fraction: float = field(default=0.1, metadata={"above": 0})
    test_fraction: float = field(default=0.1, metadata={"above": 0})
    num_layers: int = field(default=3, metadata={"min": 1})
    init: str | tuple[int, ...] = "first"
    group_sizes: tuple[int, ...] | None = None
    heads: int | None = field(default=None, metadata={"min": 1})
    intermediate_size: int | None = field(default=None, metadata={"min": 1})
    quantize: Literal["ternary", "binary"] | None = None
    activation_bits: Literal[8, 4] = 8
    max_length: int | None = field(default=None, metadata={"min": 1})
    eval_batch_size: int = field(default=128, metadata={"min": 1})
