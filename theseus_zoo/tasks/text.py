"""The BERT family: sequence classification and regression with Hugging Face encoders.

Family ``"bert"``; its options (all optional) are `theseus_zoo.tasks.text_options.TextOptions`, each described
there.

Metrics: accuracy for classes; ``score``, the mean of Pearson and Spearman as for STS-B, for
regression. GLUE's test labels are hidden, so, as in the paper, ``dev`` (early stopping) is the
task's first dev split and ``test`` reports the task's score over all its dev splits (MNLI: the
mean of matched and mismatched).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import theseus_core as th

from .exported import hold_export, strictly
from .options import parse_options
from .text_data import TextData
from .text_options import DATASETS, OWN_LABELS, ROTTEN_TOMATOES_LABELS, WEIGHT_BITS, TextOptions

PACKED, QUANTIZATION = "model.packed.safetensors", "quantization.json"
"""The files of a quantized export besides the config and tokenizer: packed weights, and which layer is what."""


class TextClassificationTask(TextData):
    """`Task` for transformers sequence classifiers (BERT, RoBERTa, MiniLM, MPNet); options in `TextOptions` and
    the module doc."""

    compression_options = (
        "num_layers",
        "init",
        "group_sizes",
        "heads",
        "intermediate_size",
        "quantize",
        "activation_bits",
    )
    """Options that shape the successor only: runs that differ in them can share a fine-tuned predecessor."""

    def __init__(self, options: dict[str, Any], seed: int) -> None:
        parsed = parse_options(TextOptions, options, "bert")
        self.model_name, self.dataset_name, self.data_dir = parsed.model, parsed.dataset, parsed.data_dir
        self.label_kind = parsed.labels
        self.missing_labels = parsed.missing_labels
        self.text_column, self.text_pair_column = parsed.text_column, parsed.text_pair_column
        self.label_column = parsed.label_column
        self.split = {
            "seed": parsed.split_seed,
            "dev_fraction": parsed.dev_fraction,
            "test_fraction": parsed.test_fraction,
        }
        self.num_layers, self.init, self.group_sizes = parsed.num_layers, parsed.init, parsed.group_sizes
        self.heads, self.intermediate_size = parsed.heads, parsed.intermediate_size
        self.quantize, self.activation_bits = parsed.quantize, parsed.activation_bits
        if self.quantize is None and "activation_bits" in options:
            raise ValueError("activation_bits goes with quantize (ternary or binary successors); set both, or neither")
        self.max_length, self.eval_batch_size = parsed.max_length, parsed.eval_batch_size
        self.glue = None
        if self.dataset_name.startswith("glue/"):
            from ..data.glue import get_task

            self.glue = get_task(self.dataset_name.removeprefix("glue/"))
            self.max_length = self.max_length or self.glue.max_length
        elif self.dataset_name not in ("rotten-tomatoes", "bbc-news") and not Path(self.dataset_name).exists():
            raise ValueError(
                f"unknown dataset {self.dataset_name!r} (no such file either); give one of: {', '.join(DATASETS)}"
            )
        self._check_labels()
        self.max_length = self.max_length or 128
        self._examples: dict[str, list[dict[str, Any]]] | None = None
        self._table = None
        self._labels: dict[str, torch.Tensor] = {}

    def _check_labels(self) -> None:
        """Each dataset's ``labels`` values; a value meant for another names the one to use instead."""
        kind, name = self.label_kind, self.dataset_name
        if name == "rotten-tomatoes":
            self.label_kind = kind or "binary"
            if self.label_kind not in ROTTEN_TOMATOES_LABELS:
                raise ValueError(
                    f"labels={kind!r} is for your own data; Rotten Tomatoes takes labels "
                    f"{', '.join(map(repr, ROTTEN_TOMATOES_LABELS))}"
                )
        elif name == "bbc-news" or self.glue is not None:
            if kind is not None and not (name == "bbc-news" and kind == "classes"):
                raise ValueError(f"labels={kind!r}: {name} has labels of its own; leave labels out (null)")
        elif kind is not None and kind not in (*OWN_LABELS, "binary"):  # binary: classes, two of them (checked)
            raise ValueError(
                f"labels={kind!r} is a Rotten Tomatoes option; for {name} set labels to 'classes' (class labels) or "
                f"'regression' (numbers to predict), or to null to infer it from the file"
            )
        if self.missing_labels != "refuse" and (name in ("rotten-tomatoes", "bbc-news") or self.glue is not None):
            raise ValueError(f"missing_labels is for your own data; {name} has a label on every row")

    # ------------------------------------------------------------ model and data
    @property
    def assets(self) -> tuple[str, ...]:
        """The model and dataset where they are assets (`ReadsAssets`)."""
        from ..data.assets import ASSETS

        return tuple(name for name in (self.model_name, self.dataset_name) if name in ASSETS)

    def model_path(self) -> str:
        """The folder or hub id ``from_pretrained`` gets: an asset's cached folder for asset names."""
        from ..data.assets import ASSETS, asset_path

        return str(asset_path(self.model_name)) if self.model_name in ASSETS else self.model_name

    def check(self) -> None:
        config = self.config()
        layers = config.num_hidden_layers
        deepest = layers if self.quantize else layers - 1  # quantized successors may keep every layer
        if not isinstance(self.num_layers, int) or not 1 <= self.num_layers <= deepest:
            interval = f"[1, {layers}]" if self.quantize else f"[1, {layers}) (or {layers} with quantize)"
            raise ValueError(
                f"num_layers must be an integer in {interval} for {self.model_name}, got {self.num_layers}"
            )
        from transformers import AutoModelForSequenceClassification

        with torch.device("meta"):  # the adapter's own checks (group sizes, init, slim shapes) without memory
            self.plan(AutoModelForSequenceClassification.from_config(config))
        self.examples()  # loads and tokenizes: a missing dataset or column fails here, before training

    @property
    def num_labels(self) -> int:
        """1 for regression, else the number of classes."""
        if self.glue is not None:
            return self.glue.num_labels
        if self.dataset_name == "rotten-tomatoes":
            return {"binary": 2, "five": 5, "regression": 1}[self.label_kind]
        if self.dataset_name == "bbc-news":
            from ..data.bbc_news import TOPICS

            return len(TOPICS)
        return self._load_table().num_labels

    @property
    def metric(self) -> str:
        """``"score"`` for GLUE (the paper's per-task metric) and regression (mean of Pearson and Spearman), else
        ``"accuracy"``."""
        return "score" if self.glue is not None or self.num_labels == 1 else "accuracy"

    @property
    def scores_examples(self) -> bool:
        """Whether `predictions` and `score` serve this dataset (not GLUE, whose test score may span two splits)."""
        return self.glue is None

    def config(self) -> Any:
        """The checkpoint's config with a head for this dataset (one fine-tuned on another task has another)."""
        from transformers import AutoConfig

        try:
            config = AutoConfig.from_pretrained(self.model_path())  # a missing asset raises, naming the fetch command
        except OSError as error:
            if isinstance(error, FileNotFoundError):
                raise
            raise ValueError(
                f"cannot load the model {self.model_name!r} ({str(error).splitlines()[0]}); give options.model as a "
                f"local folder, an asset name, or a hub id with a network"
            ) from None
        config.problem_type = "regression" if self.num_labels == 1 else "single_label_classification"
        if config.num_labels != self.num_labels:
            config.num_labels = self.num_labels  # also resets the label names
        names = self.label_names
        if names is not None and len(names) == self.num_labels:  # predictions map back to the data's classes
            config.id2label = dict(enumerate(names))
            config.label2id = {name: index for index, name in enumerate(names)}
        return config

    def tokenizer(self) -> Any:
        from transformers import AutoTokenizer

        if not hasattr(self, "_tokenizer"):
            self._tokenizer = AutoTokenizer.from_pretrained(self.model_path())
        return self._tokenizer

    def build_predecessor(self) -> nn.Module:
        from transformers import AutoModelForSequenceClassification
        from transformers.utils import logging

        verbosity, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
        logging.set_verbosity_error()  # "some weights are newly initialized": the head, as intended
        logging.disable_progress_bar()
        try:
            model = AutoModelForSequenceClassification.from_pretrained(
                self.model_path(),
                config=self.config(),
                ignore_mismatched_sizes=True,  # another head size: replaced
            )
        finally:
            logging.set_verbosity(verbosity)
            if bars:
                logging.enable_progress_bar()
        return model

    def examples(self) -> dict[str, list[dict[str, Any]]]:
        """Every split tokenized once (lists of token ids and the label)."""
        if self._examples is None:
            if self.glue is not None:
                columns = self.glue.text_columns
            else:
                columns = ("text", "text_pair") if self.text_pair_column else ("text",)
            tokenizer, examples = self.tokenizer(), {}
            for split, data in self._splits().items():
                missing = [c for c in (*columns, "label") if c not in data.column_names]
                if missing:
                    raise ValueError(f"the {split} split has no column {missing}; its columns: {data.column_names}")
                encoded = tokenizer(*(list(data[c]) for c in columns), truncation=True, max_length=self.max_length)
                labels = list(data["label"])
                examples[split] = [
                    {**{key: values[i] for key, values in encoded.items()}, "labels": labels[i]}
                    for i in range(len(labels))
                ]
            self._examples = examples
        return self._examples

    def dataset(self, split: str) -> list[dict[str, Any]]:
        return self.examples()[self._split_name(split)]

    def collate(self, examples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """Pads to the longest example of the batch."""
        batch = self.tokenizer().pad(
            [{k: v for k, v in e.items() if k != "labels"} for e in examples], return_tensors="pt"
        )
        labels = [e["labels"] for e in examples]
        batch["labels"] = torch.tensor(labels, dtype=torch.float if self.num_labels == 1 else torch.long)
        return dict(batch)

    # ------------------------------------------------------------------ training
    def criterion(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Cross-entropy, or the mean squared error for regression (as transformers' own loss)."""
        if self.num_labels == 1:
            return F.mse_loss(logits.squeeze(-1), batch["labels"])
        return F.cross_entropy(logits, batch["labels"])

    def is_head(self, name: str) -> bool:
        """The pooler and the classifier (``unfreeze_at_one="head"``)."""
        return "pooler" in name.split(".") or name.startswith("classifier")

    def logits(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return model(**{k: v for k, v in batch.items() if k != "labels"}).logits

    @torch.no_grad()
    def predict(self, model: nn.Module, examples: list[dict[str, Any]]) -> torch.Tensor:
        """Logits of ``examples`` in their order, batched by length (little padding)."""
        model.eval()
        device = next(model.parameters()).device
        order = sorted(range(len(examples)), key=lambda i: len(examples[i]["input_ids"]))
        logits = torch.empty(len(examples), self.num_labels)
        for start in range(0, len(order), self.eval_batch_size):
            chosen = order[start : start + self.eval_batch_size]
            batch = self.collate([examples[i] for i in chosen])
            batch.pop("labels")
            logits[chosen] = model(**{k: v.to(device) for k, v in batch.items()}).logits.float().cpu()
        return logits

    def predictions(self, model: nn.Module, split: str) -> torch.Tensor:
        """Per example of the split: the predicted class, or the predicted value for regression."""
        logits = self.predict(model, self.dataset(split))
        return logits[:, 0] if self.num_labels == 1 else logits.argmax(1).float()

    def labels(self, split: str) -> torch.Tensor:
        """The split's labels, in the order of `predictions` (as floats)."""
        if split not in self._labels:  # scored a thousand times over by the bootstrap: built once
            self._labels[split] = torch.tensor([e["labels"] for e in self.dataset(split)], dtype=torch.float)
        return self._labels[split]

    def score(self, predictions: torch.Tensor, split: str, chosen: torch.Tensor | None = None) -> dict[str, float]:
        """Metrics of per-example ``predictions`` (of the examples ``chosen``, with repeats, when given)."""
        labels = self.labels(split)
        if chosen is not None:
            predictions, labels = predictions[chosen], labels[chosen]
        if self.num_labels > 1:
            return {"accuracy": (predictions == labels).float().mean().item()}
        from ..metrics import pearson, spearman

        correlations = {"pearson": pearson(predictions, labels), "spearman": spearman(predictions, labels)}
        return {**correlations, "score": (correlations["pearson"] + correlations["spearman"]) / 2}

    def evaluate(self, model: nn.Module, split: str) -> dict[str, float]:
        if self.glue is None:
            return self.score(self.predictions(model, split), split)
        from ..data.glue import compute_metrics, task_score

        names = [self.glue.dev_splits[0]] if split == "dev" else list(self.glue.dev_splits)
        results = {}
        for name in names:
            examples = self.examples()[name]
            logits = self.predict(model, examples)
            predictions = logits[:, 0] if self.num_labels == 1 else logits.argmax(1)
            results[name] = compute_metrics(self.glue, predictions.numpy(), [e["labels"] for e in examples])
        metrics = {f"{name}/{key}": value for name, result in results.items() for key, value in result.items()}
        return {**metrics, "score": task_score(self.glue, results) if split != "dev" else results[names[0]]["score"]}

    def candidates(self, model: nn.Module) -> tuple[dict[str, list[th.ModuleSpec]], Any]:
        """`OffersCandidates`: per group of the plan, ``keep``, ``skip``, ``one`` (the plan's successor) and one
        layer without attention, without FFN, or with a half or a quarter of its FFN
        (`theseus_adapters.hf_candidates`). Not with ``quantize``, whose extra group is the embeddings."""
        if self.quantize is not None:
            raise ValueError(
                "a budget search chooses among layers; with quantize, the plan quantizes the embeddings too"
            )
        from theseus_adapters import hf_candidates

        return hf_candidates.candidates(model, self.plan(model))

    def plan(self, model: nn.Module) -> th.Plan:
        """`theseus_adapters.hf.plan`; with ``quantize``, quantized copies of its successors and one more group, the
        word embeddings, whose successor is their quantized copy (BinaryBERT quantizes them too)."""
        from theseus_adapters import hf

        plan = hf.plan(
            model,
            self.num_layers,
            init=self.init,
            group_sizes=self.group_sizes,
            heads=self.heads,
            intermediate_size=self.intermediate_size,
            successor=self._quantized_successor(),
        )
        if self.quantize is None:
            return plan
        from theseus_quant import quantized_copy

        embeddings = model.get_input_embeddings()
        path = next(name for name, module in model.named_modules() if module is embeddings)
        words = th.ModuleSpec(path, quantized_copy(WEIGHT_BITS[self.quantize], None))
        return th.Plan((*plan.specs, words), on_finalize=plan.on_finalize)

    def _quantized_successor(self) -> th.spec.SuccessorFactory | None:
        """With ``quantize``: `theseus_adapters.hf.layer_successor` (the layer a group starts from, slim if asked)
        as a `theseus_quant.quantized_copy`, attention included; else ``None`` (the registry's default)."""
        if self.quantize is None:
            return None
        from theseus_adapters.hf import layer_successor
        from theseus_quant import quantized_copy

        quantized = quantized_copy(WEIGHT_BITS[self.quantize], self.activation_bits)

        def successor(group: list[nn.Module], model: nn.Module, **options: Any) -> nn.Module:
            return quantized([layer_successor(group, model, **options)])

        return successor

    def truncated(self, predecessor: nn.Module) -> nn.Module:
        """The predecessor with only the layers the successors start from (the bottom ones for ``init="first"``),
        pruned as the successors are when they are slim, quantized as they are with ``quantize``."""
        model = copy.deepcopy(predecessor)
        return th.replace_(model, self.plan(model)).finalize()

    def scratch(self) -> nn.Module:
        from transformers import AutoModelForSequenceClassification

        config = self.config()
        config.num_hidden_layers = self.num_layers
        if self.heads is not None:
            config.num_attention_heads = self.heads
        if self.intermediate_size is not None:
            config.intermediate_size = self.intermediate_size
        model = AutoModelForSequenceClassification.from_config(config)
        if self.quantize is None:
            return model
        return th.replace_(model, self.plan(model)).finalize()  # a quantized copy of every layer (same depth)

    @property
    def refinement(self) -> str | None:
        """What `refine_` does before a recipe's ``refine`` phase: ternary weight splitting with
        ``quantize="ternary"``; else ``None`` (nothing to refine)."""
        if self.quantize != "ternary":
            return None
        return "ternary weight splitting: each ternary layer becomes two binary halves with the same output"

    def refine_(self, model: nn.Module) -> None:
        """Ternary weight splitting (`theseus_quant.split_ternary_`) of every ternary layer of ``model``, in place;
        nothing for a model that has none (the ``direct`` baseline is binary already)."""
        from theseus_quant import split_ternary_

        if _quantized_layers(model, ternary_only=True):
            split_ternary_(model)

    def direct(self, predecessor: nn.Module) -> nn.Module:
        """The ``direct`` baseline: `truncated` with every ternary layer binarized from its full-precision weights
        (BWN, `theseus_quant.binarize_`), BinaryBERT's weak baseline."""
        from theseus_quant import binarize_

        if self.quantize is None:
            raise ValueError("the direct baseline binarizes quantized successors: set options.quantize")
        model = self.truncated(predecessor)
        if _quantized_layers(model, ternary_only=True):
            binarize_(model)
        return model

    def latency_batch(self) -> dict[str, torch.Tensor]:
        batch = self.collate(self.dataset("test")[:32])
        batch.pop("labels")
        return batch

    def forward(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> Any:
        return model(**batch).logits

    def example_inputs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """What `replace_` runs the model on to verify the surgery: ``model(*args, **kwargs)``."""
        batch = self.collate(self.dataset("train")[:4])
        batch.pop("labels")
        return (), batch

    def export_onnx(self, model_dir: Path, out: Path) -> list[Any]:
        """`ExportsOnnx`: ``model.onnx`` (inputs ``input_ids``, ``attention_mask`` and ``token_type_ids`` when the
        tokenizer makes them; output ``logits``), and for a quantized model ``model.int8.onnx`` on integer kernels."""
        from ..export.onnx import QUANTIZED_TOLERANCE, SENTENCES, TOLERANCE, Logits, export_onnx, text_inputs

        model = load_exported(model_dir).eval()
        model.config.return_dict = True
        inputs = text_inputs(model_dir)
        axes = {name: {0: "batch", 1: "length"} for name in inputs}
        others = [text_inputs(model_dir, SENTENCES[:1]), text_inputs(model_dir, [SENTENCES[2] * 3] * 5)]
        import theseus_quant as tq

        quantized = bool(tq.quantized_layers(model))
        tolerance = QUANTIZED_TOLERANCE if quantized else TOLERANCE
        exports = [
            export_onnx(
                Logits(model), inputs, out / "model.onnx", dynamic_axes=axes, check_inputs=others, tolerance=tolerance
            )
        ]
        if quantized:
            import copy

            from theseus_quant.onnx import TRANSLATIONS

            integer = copy.deepcopy(model)
            tq.to_integer_(integer)
            exports.append(
                export_onnx(
                    Logits(integer),
                    inputs,
                    out / "model.int8.onnx",
                    dynamic_axes=axes,
                    check_inputs=others,
                    translations=TRANSLATIONS,
                    reference=Logits(model),  # the integer graph must match the simulated model it came from
                    tolerance=tolerance,
                )
            )
        return exports

    def export(self, model: nn.Module, directory: Path) -> list[Path]:
        """``save_pretrained`` of the model and the tokenizer: ``AutoModelForSequenceClassification`` loads it (a
        budget search's layers of several forms: `theseus_adapters.hf.load_pretrained`, `load_exported`). A
        quantized model is written by `theseus_quant.save_quantized` instead (2 or 1 bits a weight plus scales, and
        ``quantization.json``) with its config and the tokenizer; `load_exported` rebuilds it. Either reloads with
        every key and computes what ``model`` does, or the export refuses (`theseus_zoo.tasks.exported.hold_export`)."""
        directory.mkdir(parents=True, exist_ok=True)
        if _quantized_layers(model):
            from theseus_quant import save_quantized

            model.config.save_pretrained(directory)
            save_quantized(model, directory, self.activation_bits)
        else:
            model.save_pretrained(directory)
        self.tokenizer().save_pretrained(directory)
        files = sorted(path for path in directory.iterdir() if path.is_file())
        return hold_export(files, model, lambda: load_exported(directory), self.forward, self.latency_batch())


def _quantized_layers(model: nn.Module, ternary_only: bool = False) -> dict[str, str]:
    """`theseus_quant.quantized_layers`: ``{qualified name: "ternary" | "binary" | "split"}``."""
    from theseus_quant import quantized_layers

    return quantized_layers(model, ternary_only)


def load_exported(directory: str | Path) -> nn.Module:
    """The model `TextClassificationTask.export` wrote to ``directory``: a quantized export rebuilt as it was
    trained (the same quantized, split and binarized layers, `theseus_quant.load_quantized`: the same outputs bit
    for bit), else `theseus_adapters.hf.load_pretrained` (plain ``from_pretrained`` unless a budget search chose
    layers of several forms), strictly. Its inputs are the tokenizer's, saved beside it."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    directory = Path(directory)
    if not (directory / QUANTIZATION).exists():
        from theseus_adapters.hf import load_pretrained

        return strictly(load_pretrained(directory, output_loading_info=True))
    from theseus_quant import load_quantized

    config = AutoConfig.from_pretrained(directory)
    return load_quantized(directory, lambda: AutoModelForSequenceClassification.from_config(config))
