"""The causal-LM family: decoder language models (Llama, Qwen2, Mistral, GPT-2 ...) compressed with the LM loss.

Family ``"causal_lm"``. Its options (all optional):

- ``model``: an asset name (``"smollm2-135m-instruct"``), a local folder, or a hub id for ``from_pretrained``.
  The predecessor is the released model as it is (a recipe's ``predecessor`` phase, if any, fine-tunes it on the
  corpus first). (default: ``"smollm2-135m-instruct"``)
- ``dataset``: the English corpus: ``"bbc-news"`` (2,225 news articles, `theseus_zoo.data.bbc_news`),
  ``"rotten-tomatoes"`` (10,605 review snippets, `theseus_zoo.data.rotten_tomatoes`), or the path of a UTF-8
  ``.txt`` file whose documents are separated by blank lines. (default: ``"bbc-news"``)
- ``split_seed``, ``dev_fraction``, ``test_fraction``: the fixed split by document (the datasets' own split
  functions; a ``.txt`` file's paragraphs are split alike): evaluation text is never trained on.
  (default: 0, 0.1, 0.1)
- ``sequence_length``: tokens per example. Each split's documents are tokenized, joined with the tokenizer's
  end-of-sequence token after each, and cut into consecutive sequences of this length (the rest dropped), so
  no batch has padding. (default: ``128``)
- ``dev_sequences``, ``test_sequences``: evaluate on this many sequences of the split, evenly spaced over it
  (``null``: all of them): the dev perplexity runs at every evaluation, and CPU time is short.
  (default: ``64``, ``256``)
- ``num_layers``, ``init``, ``group_sizes``: as in `theseus_adapters.hf.plan`. (default: ``15``, ``"first"``)
- ``groups``: ``"even"`` (``group_sizes`` and ``init`` as given) or ``"block_influence"``: the groups of
  `theseus_adapters.layer_selection.influence_groups` on ``calibration_sequences`` training sequences, each kept
  layer of ShortGPT beginning a group of the removed layers after it and its successor starting as that layer,
  so that replacing starts from ShortGPT's model (``group_sizes`` unset and ``init`` ``"first"`` then). The
  ``truncated`` baseline with ``truncation: plan`` then starts from ShortGPT's model too. (default: ``"even"``)
- ``truncation``: what the ``truncated`` and ``kd`` baselines start from: ``"plan"`` (the layers the plan's
  ``init`` names, as for every family), ``"shortgpt"`` (the layers of highest Block Influence,
  `theseus_adapters.depth_baselines.shortgpt`) or ``"streamline"`` (the most similar run replaced by one layer
  trained with MSE, `theseus_adapters.depth_baselines.streamline`), both measured on ``calibration_sequences``
  training sequences. The trainer then fine-tunes that model with the LM loss, as LLM-Streamline does after
  its MSE stage. (default: ``"plan"``)
- ``calibration_sequences``: training sequences that ShortGPT and Streamline read. (default: ``64``)
- ``streamline_steps``, ``streamline_lr``: the MSE training of Streamline's layer. (default: ``100``, ``1e-4``)
- ``eval_batch_size``: sequences per evaluation forward. (default: ``8``)

Metric: ``inverse_perplexity``, the geometric mean of the probabilities given to the next tokens (``1 /
perplexity``), so that higher is better as the trainer's early stopping and reports expect and the report's
retention is the predecessor's perplexity over the model's. ``perplexity`` and ``nll`` (mean nats per token)
come with it. Per-sequence NLLs are the per-example predictions, so reports carry bootstrap standard errors
and paired comparisons over test sequences.

Every forward passes ``use_cache=False``: while replacing, a successor keeps the layer index of the layer it was
copied from, so two layers could share a KV-cache slot (`theseus_adapters.hf`). The export is finalized
(`theseus_adapters.hf.sync_config`) and generates with its cache as usual.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

import theseus_core as th

from .options import parse_options

DEFAULT_MODEL = "smollm2-135m-instruct"
CORPORA = ("bbc-news", "rotten-tomatoes", "a .txt file of documents separated by blank lines")


@dataclass(frozen=True)
class CausalLMOptions:
    """The causal_lm family's options (the module docstring says what each means)."""

    model: str = DEFAULT_MODEL
    dataset: str = "bbc-news"
    split_seed: int = field(default=0, metadata={"min": 0})
    dev_fraction: float = field(default=0.1, metadata={"above": 0})
    test_fraction: float = field(default=0.1, metadata={"above": 0})
    sequence_length: int = field(default=128, metadata={"min": 2})
    dev_sequences: int | None = field(default=64, metadata={"min": 1})
    test_sequences: int | None = field(default=256, metadata={"min": 1})
    num_layers: int = field(default=15, metadata={"min": 1})
    init: str | tuple[int, ...] = "first"
    group_sizes: tuple[int, ...] | None = None
    groups: Literal["even", "block_influence"] = "even"
    truncation: Literal["plan", "shortgpt", "streamline"] = "plan"
    calibration_sequences: int = field(default=64, metadata={"min": 1})
    streamline_steps: int = field(default=100, metadata={"min": 1})
    streamline_lr: float = field(default=1e-4, metadata={"above": 0})
    eval_batch_size: int = field(default=8, metadata={"min": 1})


class CausalLMTask:
    """`Task` for transformers causal language models; options in `CausalLMOptions` and the module doc."""

    metric = "inverse_perplexity"
    scores_examples = True
    compression_options = (
        "num_layers",
        "init",
        "group_sizes",
        "groups",
        "truncation",
        "calibration_sequences",
        "streamline_steps",
        "streamline_lr",
    )
    """Options that shape the successor or the baselines only."""

    def __init__(self, options: dict[str, Any], seed: int) -> None:
        self.options = parse_options(CausalLMOptions, options, "causal_lm")
        self.seed = seed
        dataset = self.options.dataset
        if dataset not in ("bbc-news", "rotten-tomatoes") and not (
            dataset.endswith(".txt") and Path(dataset).is_file()
        ):
            raise ValueError(f"unknown dataset {dataset!r} (no such .txt file); give one of: {', '.join(CORPORA)}")
        if self.options.groups == "block_influence" and (
            self.options.group_sizes is not None or self.options.init != "first"
        ):
            raise ValueError(
                "groups='block_influence' chooses the group sizes and the layers the successors start from: "
                "leave group_sizes unset and init at 'first'"
            )
        self._sequences: dict[str, torch.Tensor] | None = None
        self._weights: dict[str, torch.Tensor] = {}
        self._influence_groups: tuple[tuple[int, ...], tuple[int, ...]] | None = None

    # ------------------------------------------------------------ model and data
    @property
    def assets(self) -> tuple[str, ...]:
        """The model and corpus where they are assets (`ReadsAssets`)."""
        from ..data.assets import ASSETS

        return tuple(name for name in (self.options.model, self.options.dataset) if name in ASSETS)

    def model_path(self) -> str:
        """The folder or hub id ``from_pretrained`` gets: an asset's cached folder for asset names."""
        from ..data.assets import ASSETS, asset_path

        name = self.options.model
        return str(asset_path(name)) if name in ASSETS else name

    def config(self) -> Any:
        from transformers import AutoConfig

        try:
            return AutoConfig.from_pretrained(self.model_path())  # a missing asset raises, naming the fetch command
        except OSError as error:
            if isinstance(error, FileNotFoundError):
                raise
            raise ValueError(
                f"cannot load the model {self.options.model!r} ({str(error).splitlines()[0]}); give options.model "
                f"as a local folder, an asset name, or a hub id with a network"
            ) from None

    def tokenizer(self) -> Any:
        from transformers import AutoTokenizer

        if not hasattr(self, "_tokenizer"):
            self._tokenizer = AutoTokenizer.from_pretrained(self.model_path())
            if self._tokenizer.eos_token_id is None:
                raise ValueError(
                    f"the tokenizer of {self.options.model!r} has no end-of-sequence token, which separates the "
                    f"corpus's documents; give a tokenizer with eos_token"
                )
        return self._tokenizer

    def check(self) -> None:
        config = self.config()
        layers = getattr(config, "num_hidden_layers", None)
        if not isinstance(layers, int):
            raise ValueError(f"{self.options.model}: its config has no num_hidden_layers; causal_lm needs a decoder")
        num_layers = self.options.num_layers
        if not 1 <= num_layers < layers:
            raise ValueError(f"num_layers must be in [1, {layers}) for {self.options.model}, got {num_layers}")
        from transformers import AutoModelForCausalLM

        with torch.device("meta"):  # the adapter's own checks (group sizes, init, per-layer types) without memory
            self.plan(AutoModelForCausalLM.from_config(config))
        sequences = self.sequences()  # loads and tokenizes: a missing corpus fails here, before training
        for split, tensor in sequences.items():
            if not len(tensor):
                raise ValueError(
                    f"the {split} split of {self.options.dataset} has no sequence of {self.options.sequence_length} "
                    f"tokens; lower sequence_length or give more text"
                )

    def build_predecessor(self) -> nn.Module:
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_pretrained(self.model_path(), dtype=torch.float32)

    def documents(self) -> dict[str, list[str]]:
        """``{"train", "validation", "test"}``: the corpus's documents, split by document."""
        split = {
            "seed": self.options.split_seed,
            "dev_fraction": self.options.dev_fraction,
            "test_fraction": self.options.test_fraction,
        }
        if self.options.dataset == "bbc-news":
            from ..data.bbc_news import load_bbc_news

            return {name: list(data["text"]) for name, data in load_bbc_news(**split).items()}
        if self.options.dataset == "rotten-tomatoes":
            from ..data.rotten_tomatoes import load_rotten_tomatoes

            return {name: list(data["text"]) for name, data in load_rotten_tomatoes(**split).items()}
        from ..data.splits import stratified_split

        text = Path(self.options.dataset).read_text(encoding="utf-8")
        paragraphs = [" ".join(part.split()) for part in text.split("\n\n")]
        paragraphs = [paragraph for paragraph in paragraphs if paragraph]
        splits = stratified_split(
            list(enumerate(paragraphs)), identity=lambda item: item[0], stratum=lambda item: 0, **split
        )
        return {name: [paragraph for _, paragraph in items] for name, items in splits.items()}

    def sequences(self) -> dict[str, torch.Tensor]:
        """``{"train", "dev", "test"}``: ``(count, sequence_length)`` token ids, dev and test thinned to their
        ``*_sequences`` evenly spaced ones."""
        if self._sequences is None:
            tokenizer, length = self.tokenizer(), self.options.sequence_length
            limits = {"train": None, "dev": self.options.dev_sequences, "test": self.options.test_sequences}
            names = {"train": "train", "dev": "validation", "test": "test"}
            documents = self.documents()
            self._sequences = {}
            for split, source in names.items():
                ids: list[int] = []
                for encoded in tokenizer(documents[source], add_special_tokens=False)["input_ids"]:
                    ids += [*encoded, tokenizer.eos_token_id]
                count = len(ids) // length
                tensor = torch.tensor(ids[: count * length], dtype=torch.long).view(count, length)
                limit = limits[split]
                if limit is not None and count > limit:
                    tensor = tensor[[i * count // limit for i in range(limit)]]
                self._sequences[split] = tensor
        return self._sequences

    def dataset(self, split: str) -> torch.Tensor:
        return self.sequences()[split]

    def collate(self, examples: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"input_ids": torch.stack(examples)}

    # ------------------------------------------------------------------ training
    def logits(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The next-token logits of every position but the last, as ``(tokens, vocabulary)`` rows: a token is an
        example for the loss and for the ``kd`` baseline's soft loss."""
        logits = model(input_ids=batch["input_ids"], use_cache=False).logits
        return logits[:, :-1].reshape(-1, logits.shape[-1])

    def criterion(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Next-token cross-entropy, averaged over tokens."""
        return F.cross_entropy(logits, batch["input_ids"][:, 1:].reshape(-1))

    @torch.no_grad()
    def predictions(self, model: nn.Module, split: str) -> torch.Tensor:
        """Per sequence of the split: the mean next-token NLL (nats)."""
        model.eval()
        device = next(model.parameters()).device
        sequences = self.dataset(split)
        losses = []
        for start in range(0, len(sequences), self.options.eval_batch_size):
            input_ids = sequences[start : start + self.options.eval_batch_size].to(device)
            logits = model(input_ids=input_ids, use_cache=False).logits[:, :-1]
            targets = input_ids[:, 1:]
            nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1), reduction="none")
            losses.append(nll.view(targets.shape).mean(1).cpu())
        return torch.cat(losses)

    def labels(self, split: str) -> torch.Tensor:
        """Sequences have no label: per sequence, the number of tokens its NLL averages (its weight in
        `score`), in the order of `predictions`."""
        if split not in self._weights:
            self._weights[split] = torch.full((len(self.dataset(split)),), self.options.sequence_length - 1.0)
        return self._weights[split]

    def score(self, predictions: torch.Tensor, split: str, chosen: torch.Tensor | None = None) -> dict[str, float]:
        """Perplexity metrics of per-sequence NLLs (of the sequences ``chosen``, with repeats, when given)."""
        weights = self.labels(split)
        if chosen is not None:
            predictions, weights = predictions[chosen], weights[chosen]
        nll = float((predictions * weights).sum() / weights.sum())
        return {"inverse_perplexity": math.exp(-nll), "perplexity": math.exp(nll), "nll": nll}

    def evaluate(self, model: nn.Module, split: str) -> dict[str, float]:
        return self.score(self.predictions(model, split), split)

    def plan(self, model: nn.Module) -> th.Plan:
        from theseus_adapters import hf

        init, group_sizes = self.options.init, self.options.group_sizes
        if self.options.groups == "block_influence" and not next(model.parameters()).is_meta:
            # measured once, on the model first planned (the predecessor), and kept for the truncated baseline
            if self._influence_groups is None:
                from theseus_adapters import layer_selection

                batches = self.calibration_batches()
                self._influence_groups = layer_selection.influence_groups(model, self.options.num_layers, batches)
            group_sizes, init = self._influence_groups
        return hf.plan(model, self.options.num_layers, init=init, group_sizes=group_sizes)

    def candidates(self, model: nn.Module) -> tuple[dict[str, list[th.ModuleSpec]], Any]:
        """`OffersCandidates`: per group of the plan, ``keep``, ``skip``, ``one`` (the plan's copied layer) and one
        layer without attention, without FFN, or with a half or a quarter of its FFN
        (`theseus_adapters.hf_candidates`): the search chooses which layers a decoder keeps, and in what form."""
        from theseus_adapters import hf_candidates

        return hf_candidates.candidates(model, self.plan(model))

    def calibration_batches(self) -> list[dict[str, torch.Tensor]]:
        """``calibration_sequences`` training sequences, evenly spaced, in batches of ``eval_batch_size``."""
        train = self.dataset("train")
        count = min(self.options.calibration_sequences, len(train))
        chosen = train[[i * len(train) // count for i in range(count)]]
        size = self.options.eval_batch_size
        return [{"input_ids": chosen[start : start + size]} for start in range(0, count, size)]

    def shard_units(self, model: nn.Module) -> list[nn.Module]:
        """`ShardsLayers`: the decoder layers (`theseus_adapters.hf.layer_units`)."""
        from theseus_adapters import hf

        return hf.layer_units(model)

    def truncated(self, predecessor: nn.Module) -> nn.Module:
        """The successor-sized model the ``truncated`` and ``kd`` baselines fine-tune, as ``truncation`` says."""
        if self.options.truncation == "plan":
            model = copy.deepcopy(predecessor)
            return th.replace_(model, self.plan(model)).finalize()
        from theseus_adapters import depth_baselines

        if self.options.truncation == "shortgpt":
            return depth_baselines.shortgpt(predecessor, self.options.num_layers, self.calibration_batches()).model
        return depth_baselines.streamline(
            predecessor,
            self.options.num_layers,
            self.calibration_batches(),
            steps=self.options.streamline_steps,
            lr=self.options.streamline_lr,
            seed=self.seed,
        ).model

    def scratch(self) -> nn.Module:
        from transformers import AutoModelForCausalLM

        config = self.config()
        if isinstance(getattr(config, "layer_types", None), list):  # one entry per layer: the first ones
            config.layer_types = config.layer_types[: self.options.num_layers]
        config.num_hidden_layers = self.options.num_layers
        return AutoModelForCausalLM.from_config(config)

    def latency_batch(self) -> dict[str, torch.Tensor]:
        """A prefill of ``eval_batch_size`` test sequences."""
        return self.collate(list(self.dataset("test")[: self.options.eval_batch_size]))

    def forward(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> Any:
        return model(**batch, use_cache=False).logits

    def example_inputs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """What `replace_` runs the model on to verify the surgery: two training sequences, without the cache."""
        return (), {"input_ids": self.dataset("train")[:2], "use_cache": False}

    def export_onnx(self, model_dir: Path, out: Path) -> list[Any]:
        """`ExportsOnnx`: refused; a decoder deploys through llama.cpp (GGUF)."""
        from ..export.onnx import ExportRefusedError

        raise ExportRefusedError("the causal_lm family deploys to llama.cpp (GGUF), not ONNX: see `make bench-deploy`")

    def export(self, model: nn.Module, directory: Path) -> list[Path]:
        """``save_pretrained`` of the model and the tokenizer: ``AutoModelForCausalLM`` loads it (a budget search's
        layers of several forms: `theseus_adapters.hf.load_pretrained`) with every key and computes what ``model``
        does, or the export refuses (`theseus_zoo.tasks.exported.hold_export`)."""
        from theseus_adapters.hf import load_pretrained

        from .exported import hold_export, strictly

        directory.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(directory)
        self.tokenizer().save_pretrained(directory)
        files = sorted(path for path in directory.iterdir() if path.is_file())
        reload = lambda: strictly(load_pretrained(directory, output_loading_info=True))  # noqa: E731
        return hold_export(files, model, reload, self.forward, self.latency_batch())
