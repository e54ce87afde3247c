"""BERT-family encoders: `theseus_adapters.hf` under the name of the paper's reference setup.

`plan` is `theseus_adapters.hf.plan`, which takes any transformers model; this module keeps the names that
BERT users and the zoo import. Tested here on BERT (``BertModel`` and every ``BertFor*`` head; MiniLM is a
BERT), RoBERTa, and MPNet (whose layers take a relative-position bias computed once by the encoder: the site
passes it through to every layer).

Example::

    from transformers import AutoModelForSequenceClassification
    import theseus_core as th
    from theseus_adapters import bert

    model = AutoModelForSequenceClassification.from_pretrained(path)  # fine-tuned, 12 layers
    batch = tokenizer(["a sentence", "another"], return_tensors="pt")  # replace_ verifies the surgery on it
    theseus = th.replace_(model, bert.plan(model, num_layers=6, init="first"), example_kwargs=dict(batch))
    ...  # train with a schedule (README quick start)
    theseus.finalize().save_pretrained("out")  # a plain 6-layer model
"""

from __future__ import annotations

from torch import nn

from theseus_adapters.hf import INITS, layer_stack, plan
from theseus_adapters.hf import sync_config as fix_layer_indices

__all__ = ["INITS", "SUPPORTED_MODEL_TYPES", "encoder_layers_path", "fix_layer_indices", "plan"]

SUPPORTED_MODEL_TYPES = ("bert", "roberta", "mpnet")
"""The families this module's tests cover; `plan` takes the others `theseus_adapters.hf` does."""


def encoder_layers_path(model: nn.Module) -> str:
    """Path of the model's ``nn.ModuleList`` of layers (``"bert.encoder.layer"``, ``"encoder.layer"``, ...).

    Raises:
        ValueError: ``model`` is not a transformers model `theseus_adapters.hf` supports.
    """
    return layer_stack(model).path
