"""Packed export: ternary weights at 2 bits, binary weights at 1 bit, plus their scales.

`save_packed` writes every quantized layer's weight as codes packed into ``uint8`` (4 ternary or
8 binary codes a byte, little end first) and its per-group scales; everything else (biases,
LayerNorm, activation clips, layers kept in full precision, buffers) is stored as is. The file is
safetensors when the ``safetensors`` package is installed, else a ``torch.save`` archive that
``torch.load(..., weights_only=True)`` reads (tensors and one JSON string only).

`load_packed` fills a model of the same structure (built by you, or by a factory) from such a
file. The quantized layers' latent weights become the quantized weights ŵ themselves; the
quantizers are idempotent (see `theseus_quant.quantizers`), so the loaded model computes the same
outputs bit for bit. Training can go on from there, from ŵ rather than the lost latent weights.
A weight tied between layers (a masked LM's word embeddings and output projection) is one
Parameter, so the file can give it one ŵ: `save_packed` writes it when every layer holding it
quantizes it alike (the same bits and granularity: the same ŵ) and refuses otherwise, before
writing anything.

`save_quantized` / `load_quantized` own a quantized model's folder: the packed weights plus ``quantization.json``, a
versioned `QuantizedLayout` saying which layer is ternary, binary or a TWS pair, with which weight granularity, at
which activation bits, and which attention modules were quantized; `load_quantized` rebuilds that structure on a float
model a caller builds.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from .layers import BinarySplitEmbedding, BinarySplitLinear, QuantEmbedding, QuantizedInPlace, QuantLinear
from .quantizers import GRANULARITIES, LSQQuantizer, UniformQuantizer, _check_activation_bits, dequantize

FORMAT = "theseus_quant.packed/1"
_METADATA_KEY = "theseus_quant"

try:  # optional: the smaller, mmap-able, pickle-free format
    from safetensors import safe_open
    from safetensors.torch import save_file
except ImportError:  # pragma: no cover - depends on the environment
    safe_open = save_file = None


def pack_codes(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Packs ternary (``bits=2``: −1, 0, 1) or binary (``bits=1``: −1, 1) codes into a flat
    ``uint8`` tensor; the last byte is zero-padded."""
    flat = codes.reshape(-1).to(torch.int16)
    if bits == 2:
        symbols = flat + 1  # {0, 1, 2}
    elif bits == 1:
        symbols = (flat > 0).to(torch.int16)  # −1 → 0, 1 → 1
    else:
        raise ValueError(f"bits must be 2 or 1, got {bits!r}")
    per_byte = 8 // bits
    padding = (-flat.numel()) % per_byte
    symbols = torch.cat([symbols, symbols.new_zeros(padding)]).reshape(-1, per_byte)
    shifts = torch.arange(per_byte, device=symbols.device, dtype=torch.int16) * bits
    return (symbols << shifts).sum(dim=1).to(torch.uint8)


def unpack_codes(packed: torch.Tensor, bits: int, shape: torch.Size | tuple[int, ...]) -> torch.Tensor:
    """Inverse of `pack_codes`: int8 codes of ``shape``."""
    if bits not in (1, 2):
        raise ValueError(f"bits must be 2 or 1, got {bits!r}")
    per_byte = 8 // bits
    shifts = torch.arange(per_byte, device=packed.device, dtype=torch.int16) * bits
    symbols = (packed.to(torch.int16).unsqueeze(1) >> shifts) & ((1 << bits) - 1)
    numel = 1
    for size in shape:
        numel *= size
    symbols = symbols.reshape(-1)[:numel]
    codes = symbols - 1 if bits == 2 else symbols * 2 - 1
    return codes.to(torch.int8).reshape(tuple(shape))


@dataclass(frozen=True)
class ExportReport:
    """Where `save_packed` wrote, the file's size, and the bytes the model's state_dict takes in
    memory (latent weights in their float dtype) for comparison."""

    path: str
    bytes_on_disk: int
    state_dict_bytes: int
    packed_layers: int

    @property
    def ratio(self) -> float:
        return self.state_dict_bytes / self.bytes_on_disk

    def __str__(self) -> str:
        return (
            f"{self.path}: {self.bytes_on_disk:,} bytes on disk ({self.packed_layers} packed layers), "
            f"{self.state_dict_bytes:,} bytes as a float state_dict: {self.ratio:.1f}× smaller"
        )


def _quantized_prefixes(model: nn.Module) -> dict[str, QuantLinear | QuantEmbedding]:
    return {
        name: module
        for name, module in model.named_modules(remove_duplicate=False)
        if isinstance(module, (QuantLinear, QuantEmbedding))
    }


def _check_ties(model: nn.Module, layers: dict[str, QuantLinear | QuantEmbedding]) -> None:
    """Raises ``ValueError`` when a quantized layer's weight is tied to a module that quantizes it otherwise (other
    bits or granularity) or not at all: one ŵ in the file could not give both their outputs back."""
    holders: dict[int, list[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        holders.setdefault(id(parameter), []).append(name)
    for prefix, layer in layers.items():
        ours = (layer.weight_bits, layer.granularity)
        for key in holders[id(layer.weight)]:
            owner, _, attribute = key.rpartition(".")
            other = layers.get(owner) if attribute == "weight" else None
            if other is None:
                raise ValueError(
                    f"{prefix}.weight is tied to {key}, which is not a quantized layer's weight: the packed file "
                    f"holds only ŵ, which {owner or 'the root'} would then read; quantize it too, or untie them"
                )
            if (other.weight_bits, other.granularity) != ours:
                raise ValueError(
                    f"{prefix} and {owner} share one weight but quantize it differently ({_kind(layer)} and "
                    f"{_kind(other)}): the packed file holds one ŵ for both, so no model loaded from it computes "
                    "what this one does; quantize tied layers alike (quantize_'s linear_granularity / "
                    "embedding_granularity), or untie them"
                )


def _kind(layer: QuantLinear | QuantEmbedding) -> str:
    return f"{'ternary' if layer.weight_bits == 2 else 'binary'}/{layer.granularity}"


def _packed_state(model: nn.Module) -> tuple[dict[str, torch.Tensor], str, int, int]:
    """``(tensors, metadata, state_dict bytes, packed layers)`` of `save_packed`, every check done, nothing written."""
    layers = _quantized_prefixes(model)
    if not layers:
        raise ValueError(f"this {type(model).__name__} has no quantized layer; quantize_ it first")
    _check_ties(model, layers)
    state = model.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    entries = {}
    for prefix, layer in layers.items():
        codes, scales = layer.codes()
        tensors[f"{prefix}.weight.codes"] = pack_codes(codes, layer.weight_bits).cpu()
        tensors[f"{prefix}.weight.scales"] = scales.detach().cpu().contiguous()
        entries[prefix] = {
            "bits": layer.weight_bits,
            "shape": list(layer.weight.shape),
            "granularity": layer.granularity,
            "dtype": str(layer.weight.dtype).removeprefix("torch."),
        }
    packed_keys = {f"{prefix}.weight" for prefix in layers}
    for key, value in state.items():
        if key in packed_keys:
            continue
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"state_dict entry {key!r} is not a tensor; save_packed stores tensors only")
        tensors[key] = value.detach().cpu().contiguous().clone()  # clone: no shared storage in the file
    metadata = json.dumps({"format": FORMAT, "layers": entries})
    state_bytes = sum(t.numel() * t.element_size() for t in state.values() if isinstance(t, torch.Tensor))
    return tensors, metadata, state_bytes, len(layers)


def _write_packed(packed: tuple[dict[str, torch.Tensor], str, int, int], path: str) -> ExportReport:
    tensors, metadata, state_bytes, count = packed
    if save_file is not None:
        save_file(tensors, path, metadata={_METADATA_KEY: metadata})
    else:  # pragma: no cover - exercised by monkeypatching save_file away
        torch.save({_METADATA_KEY: metadata, "tensors": tensors}, path)
    return ExportReport(path, os.path.getsize(path), state_bytes, count)


def save_packed(model: nn.Module, path: str | os.PathLike) -> ExportReport:
    """Writes ``model`` with packed ternary / binary weights; returns an `ExportReport`.

    Raises:
        ValueError: The model has no quantized layer (nothing to pack), holds non-tensor state, or ties a quantized
            layer's weight to a module that quantizes it otherwise or not at all (module docstring); nothing is
            written then.
    """
    return _write_packed(_packed_state(model), os.fspath(path))


def _read(path: str) -> tuple[dict, dict[str, torch.Tensor]]:
    with open(path, "rb") as file:
        magic = file.read(2)
    if magic == b"PK":  # a torch.save zip archive
        payload = torch.load(path, map_location="cpu", weights_only=True)
        return json.loads(payload[_METADATA_KEY]), payload["tensors"]
    if safe_open is None:  # pragma: no cover - depends on the environment
        raise ImportError(f"{path} is a safetensors file; pip install safetensors to read it")
    with safe_open(path, framework="pt", device="cpu") as file:
        metadata = (file.metadata() or {}).get(_METADATA_KEY)
        tensors = {key: file.get_tensor(key) for key in file.keys()}  # noqa: SIM118 - safe_open is not a dict
    if metadata is None:
        raise ValueError(f"{path} was not written by theseus_quant.save_packed")
    return json.loads(metadata), tensors


def load_packed(model: nn.Module | Callable[[], nn.Module], path: str | os.PathLike) -> nn.Module:
    """Loads a `save_packed` file into ``model`` (or into ``model()`` when given a factory) and
    returns it.

    The model must have the structure of the one saved: the same quantized layers (names, bits,
    granularity, shapes) and the same other state_dict keys; build it the way you built the saved
    one (e.g. ``quantize_`` then ``split_ternary_``), its weights do not matter.

    Raises:
        ValueError: The file's layers do not match the model's (named), or the file is not ours.
    """
    if not isinstance(model, nn.Module):
        if not callable(model):
            raise TypeError(f"load_packed takes an nn.Module or a factory returning one, got {type(model).__name__}")
        model = model()
        if not isinstance(model, nn.Module):
            raise TypeError(f"the factory returned a {type(model).__name__}, not an nn.Module")
    metadata, tensors = _read(os.fspath(path))
    if metadata.get("format") != FORMAT:
        raise ValueError(f"{path}: unknown format {metadata.get('format')!r}; expected {FORMAT!r}")
    layers = _quantized_prefixes(model)
    entries = metadata["layers"]
    if set(entries) != set(layers):
        raise ValueError(
            "the file's quantized layers differ from the model's: only in the file "
            f"{sorted(set(entries) - set(layers))}, only in the model {sorted(set(layers) - set(entries))}"
        )
    state = {key: value for key, value in tensors.items() if not key.endswith((".weight.codes", ".weight.scales"))}
    for prefix, entry in entries.items():
        layer = layers[prefix]
        found = (layer.weight_bits, list(layer.weight.shape), layer.granularity)
        if found != (entry["bits"], entry["shape"], entry["granularity"]):
            raise ValueError(
                f"{prefix}: the file has bits={entry['bits']}, shape={entry['shape']}, "
                f"granularity={entry['granularity']!r}; the model has {found}"
            )
        codes = unpack_codes(tensors[f"{prefix}.weight.codes"], entry["bits"], entry["shape"])
        state[f"{prefix}.weight"] = dequantize(codes, tensors[f"{prefix}.weight.scales"], entry["granularity"])
    model.load_state_dict(state, strict=True)
    return model


# ------------------------------------------------------------ a quantized model's folder: layout + packed weights

LAYOUT_FILE, PACKED_FILE = "quantization.json", "model.packed.safetensors"
"""The two files `save_quantized` writes: which layer is what, and the packed weights."""
LAYOUT_FORMAT, LAYOUT_VERSION = "theseus_quant.layout", 2
LAYOUT_VERSIONS = (1, 2)
"""Versions `QuantizedLayout` reads: 1 has no ``granularity`` (every layer at `quantize_`'s defaults, the only ones
it could rebuild), 2 records it."""
LAYER_KINDS = ("ternary", "binary", "split")


@dataclass(frozen=True)
class QuantizedLayout:
    """How a quantized model was built from its float architecture: a typed, versioned config (like torchao's
    ``config_to_dict``), saved as ``quantization.json``.

    Attributes:
        layers: ``{qualified name: "ternary" | "binary" | "split"}`` (split: TWS's binary pair).
        activation_bits: Of every quantized Linear's inputs (and the quantized attention's): 8, 4 or ``None``.
        attention: Qualified names of the attention modules quantized in place (`QuantizedInPlace`).
        granularity: ``{qualified name: "tensor" | "row"}``, the weight scales of each layer; a layer not listed
            has `quantize_`'s default (per tensor for a Linear, per row for an embedding).
        version: `LAYOUT_VERSION` when written by this code; `LAYOUT_VERSIONS` are read.
    """

    layers: dict[str, str]
    activation_bits: int | None
    attention: tuple[str, ...] = ()
    granularity: dict[str, str] = field(default_factory=dict)
    version: int = LAYOUT_VERSION

    def __post_init__(self) -> None:
        bad = {name: kind for name, kind in self.layers.items() if kind not in LAYER_KINDS}
        if bad:
            raise ValueError(f"layer kinds must be in {LAYER_KINDS}, got {bad}")
        _check_activation_bits(self.activation_bits)
        if self.version not in LAYOUT_VERSIONS:
            raise ValueError(
                f"quantized layout version {self.version} is not one of {LAYOUT_VERSIONS}; upgrade theseus"
            )
        if self.version == 1 and self.granularity:
            raise ValueError(
                "granularity is recorded from quantized layout version 2 on; a version 1 layout has every layer at "
                "quantize_'s defaults"
            )
        bad = {name: g for name, g in self.granularity.items() if name not in self.layers or g not in GRANULARITIES}
        if bad:
            raise ValueError(f"granularity must map layers of the layout to one of {GRANULARITIES}, got {bad}")

    def to_dict(self) -> dict:
        return {
            "format": LAYOUT_FORMAT,
            "version": self.version,
            "layers": dict(self.layers),
            "activation_bits": self.activation_bits,
            "attention": list(self.attention),
            "granularity": dict(self.granularity),
        }

    @classmethod
    def from_dict(cls, data: dict) -> QuantizedLayout:
        """Reads `to_dict`'s output; a dict without ``format`` / ``version`` is the unversioned layout the zoo
        wrote before version 1 (the same three fields, read as version 1)."""
        if data.get("format", LAYOUT_FORMAT) != LAYOUT_FORMAT:
            raise ValueError(f"not a quantized layout: format {data.get('format')!r}")
        return cls(
            layers=dict(data["layers"]),
            activation_bits=data["activation_bits"],
            attention=tuple(data.get("attention", ())),
            granularity=dict(data.get("granularity", {})),
            version=data.get("version", 1),
        )


def quantized_layers(model: nn.Module, ternary_only: bool = False) -> dict[str, str]:
    """``{qualified name: "ternary" | "binary" | "split"}`` of the quantized layers of ``model`` (split: the binary
    pair of ternary weight splitting; its halves are not listed)."""
    layers: dict[str, str] = {}
    for name, module in model.named_modules():
        if isinstance(module, (QuantLinear, QuantEmbedding)) and not any(name.startswith(f"{s}.") for s in layers):
            layers[name] = "ternary" if module.weight_bits == 2 else "binary"
        elif isinstance(module, (BinarySplitLinear, BinarySplitEmbedding)):
            layers[name] = "split"
    return {name: kind for name, kind in layers.items() if kind == "ternary" or not ternary_only}


def _activation_width(quantizer: nn.Module | None, name: str) -> int | None:
    """The activation bits `rebuild_` would give ``quantizer`` back (`theseus_quant.activation_quantizer`'s)."""
    if quantizer is None:
        return None
    if type(quantizer) is UniformQuantizer and quantizer.bits == 8:
        return 8
    if type(quantizer) is LSQQuantizer and quantizer.bits == 4:
        return 4
    raise ValueError(
        f"{name} is a {quantizer!r}, which a QuantizedLayout cannot rebuild (it makes UniformQuantizer(8) for 8 bits, "
        "LSQQuantizer(4) for 4)"
    )


def _model_activation_bits(model: nn.Module) -> int | None:
    """The activation bits of ``model``'s quantized Linears and in-place quantized attention: 8, 4, or ``None`` when
    none quantizes its inputs.

    Raises:
        ValueError: Quantizers of several widths, or of a kind `rebuild_` does not make (named).
    """
    widths: dict[int | None, str] = {}
    for name, module in model.named_modules():
        if isinstance(module, QuantLinear):
            widths.setdefault(_activation_width(module.act_quant, f"{name}.act_quant"), name)
        elif isinstance(module, QuantizedInPlace):
            for key in module.quantizer_names:
                widths.setdefault(_activation_width(getattr(module, key), f"{name}.{key}"), f"{name}.{key}")
    if len(widths) > 1:
        found = ", ".join(f"{bits} ({name})" for bits, name in widths.items())
        raise ValueError(f"this model quantizes activations at several widths: {found}; a QuantizedLayout records one")
    return next(iter(widths), None)


def quantized_layout(model: nn.Module, activation_bits: int | str | None = "auto") -> QuantizedLayout:
    """The `QuantizedLayout` of ``model``: its quantized layers, their granularity, its activation bits
    (read from its quantizers) and its in-place quantized attention.

    Args:
        activation_bits: ``"auto"`` reads them from the model; a value (8, 4, ``None``) must equal the model's.
            (default: ``"auto"``)

    Raises:
        ValueError: Quantizers of several widths, or of a kind `rebuild_` does not make (named), or
            ``activation_bits`` other than the model's.
    """
    found = _model_activation_bits(model)
    if activation_bits != "auto":
        _check_activation_bits(activation_bits)
        if activation_bits != found:
            raise ValueError(
                f"activation_bits={activation_bits!r}, but this model "
                f"{'does not quantize activations' if found is None else f'quantizes activations at {found} bits'}; "
                "leave activation_bits out to read them from the model"
            )
    layers = quantized_layers(model)
    modules = dict(model.named_modules())
    granularity = {}
    for name, kind in layers.items():
        layer = modules[name].first if kind == "split" else modules[name]
        granularity[name] = layer.granularity
    attention = tuple(name for name, module in model.named_modules() if isinstance(module, QuantizedInPlace))
    return QuantizedLayout(layers, found, attention, granularity)


def save_quantized(
    model: nn.Module, directory: str | os.PathLike, activation_bits: int | str | None = "auto"
) -> ExportReport:
    """Writes ``model.packed.safetensors`` (`save_packed`) and ``quantization.json`` (the model's `QuantizedLayout`)
    into ``directory``; returns `save_packed`'s report. The float architecture (e.g. a transformers config) is the
    caller's to save: `load_quantized` asks for a function that builds it.

    Args:
        activation_bits: As `quantized_layout`: ``"auto"`` reads them from the model. (default: ``"auto"``)

    Raises:
        ValueError: As `save_packed` and `quantized_layout` (no quantized layer, tied weights quantized two ways,
            activation bits the layout cannot record or other than the model's); everything is checked before the
            first file is written, so nothing is written then.
    """
    packed = _packed_state(model)
    layout = quantized_layout(model, activation_bits)
    # --- nothing above this line writes ---
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    report = _write_packed(packed, os.path.join(directory, PACKED_FILE))
    with open(os.path.join(directory, LAYOUT_FILE), "w") as file:
        file.write(json.dumps(layout.to_dict(), indent=2) + "\n")
    return report


def read_layout(directory: str | os.PathLike) -> QuantizedLayout | None:
    """The `QuantizedLayout` saved in ``directory``, or ``None`` when it holds no ``quantization.json``."""
    path = os.path.join(os.fspath(directory), LAYOUT_FILE)
    if not os.path.exists(path):
        return None
    with open(path) as file:
        return QuantizedLayout.from_dict(json.load(file))


def rebuild_(model: nn.Module, layout: QuantizedLayout) -> nn.Module:
    """Quantizes a float ``model`` in place into ``layout``'s structure (weights: whatever the model holds): every
    listed layer ternary at its granularity, then the attention, then TWS pairs split and binary layers binarized, as
    training made them. Returns the model in eval mode.

    Raises:
        ValueError: As `theseus_quant.quantize_`, or a layout naming a layer the model does not have.
    """
    from .convert import quantize_, quantize_known_attention_
    from .tws import binarize_, split_ternary_

    kept = [  # anchored at the root: a kept "0" must not keep "encoder.0" too
        f"/{name}"
        for name, module in model.named_modules()
        if type(module) in (nn.Linear, nn.Embedding) and name not in layout.layers
    ]
    quantize_(model, 2, layout.activation_bits, skip=kept)
    modules = dict(model.named_modules())
    for name, granularity in layout.granularity.items():
        if not isinstance(modules.get(name), (QuantLinear, QuantEmbedding)):
            raise ValueError(
                f"the layout quantizes {name}, but this {type(model).__name__} has no Linear or Embedding there"
            )
        modules[name].granularity = granularity
    if layout.attention:
        quantize_known_attention_(model, layout.activation_bits)
    split = [name for name, kind in layout.layers.items() if kind == "split"]
    if split:
        split_ternary_(model, split)
    binary = [name for name, kind in layout.layers.items() if kind == "binary"]
    if binary:
        binarize_(model, binary)
    return model.eval()


def load_quantized(directory: str | os.PathLike, build: Callable[[], nn.Module]) -> nn.Module:
    """The model `save_quantized` wrote to ``directory``: ``build()`` (the float architecture, untrained) quantized by
    `rebuild_` and filled by `load_packed`, so its outputs equal the saved model's bit for bit. Pass the result to
    `theseus_quant.to_integer_` for integer inference.

    Raises:
        FileNotFoundError: ``directory`` holds no ``quantization.json``.
        ValueError: As `load_packed`, or a layout of another version.
    """
    layout = read_layout(directory)
    if layout is None:
        raise FileNotFoundError(f"{directory} holds no {LAYOUT_FILE}: not a save_quantized folder")
    return load_packed(lambda: rebuild_(build(), layout), os.path.join(os.fspath(directory), PACKED_FILE))
