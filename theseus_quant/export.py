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
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from .layers import QuantEmbedding, QuantLinear
from .quantizers import dequantize

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


def save_packed(model: nn.Module, path: str | os.PathLike) -> ExportReport:
    """Writes ``model`` with packed ternary / binary weights; returns an `ExportReport`.

    Raises:
        ValueError: The model has no quantized layer (nothing to pack), or holds non-tensor state.
    """
    layers = _quantized_prefixes(model)
    if not layers:
        raise ValueError(f"this {type(model).__name__} has no quantized layer; quantize_ it first")
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
    path = os.fspath(path)
    if save_file is not None:
        save_file(tensors, path, metadata={_METADATA_KEY: metadata})
    else:  # pragma: no cover - exercised by monkeypatching save_file away
        torch.save({_METADATA_KEY: metadata, "tensors": tensors}, path)
    state_bytes = sum(t.numel() * t.element_size() for t in state.values() if isinstance(t, torch.Tensor))
    return ExportReport(path, os.path.getsize(path), state_bytes, len(layers))


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
