"""In-place conversion: `quantize_`, `dequantize_`, and the `quantized_copy` successor factory.

`quantize_` follows the rules of `theseus_core.replace_`: everything is checked
before the first change (on any error the model is untouched), the modules are
snapshotted before any is swapped, an empty match raises, and the returned
record says what was replaced.

`quantize_`, `dequantize_`, `theseus_quant.split_ternary_` and `theseus_quant.to_integer_` swap module objects: the
model's parent modules then hold new objects (sharing the old ones' parameters where they can). What belongs to the
old object does not carry over: attributes set on it, and hooks, which these verbs refuse (naming the module) rather
than drop. A layer whose parent reads its ``weight`` directly instead of calling it (`WEIGHT_READERS`) is refused
too: the swapped layer would be bypassed.
"""

from __future__ import annotations

import copy
import fnmatch
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from torch import nn

from theseus_core.checks import is_int

from .layers import QUANTIZED_TYPES, QuantEmbedding, QuantizedInPlace, QuantLinear, _check_weight_bits
from .quantizers import GRANULARITIES, Granularity, _check_activation_bits

DEFAULT_SKIP = ("classifier", "pooler", "position_embeddings", "token_type_embeddings")
"""What BinaryBERT keeps in full precision besides LayerNorm and biases (which `quantize_` never
touches): the classifier, the pooler, and the position and token-type embeddings."""


WEIGHT_READERS: tuple[tuple[type[nn.Module], tuple[str, ...]], ...] = (
    (nn.TransformerEncoderLayer, ("linear1", "linear2")),
    (nn.MultiheadAttention, ("out_proj",)),
)
"""``(module type, children)``: modules whose ``forward`` reads those children's ``weight`` instead of calling them.
``nn.TransformerEncoderLayer`` does in PyTorch's fast path (eval mode without gradients; ``nn.TransformerEncoder``'s
nested-tensor path reads its first layer's), ``nn.MultiheadAttention`` on every call. A quantized or integer layer
swapped in there would be bypassed (the float latent weight used instead) or break the call (a layer holding no
``weight``), so the verbs that swap modules refuse such a child unless its parent's class overrides ``forward``.
(``nn.MultiheadAttention``'s own ``out_proj`` is a subclass of ``nn.Linear``, which `quantize_` leaves alone anyway.)"""

_HOOKS = {
    "_forward_pre_hooks": "forward pre-hooks",
    "_forward_hooks": "forward hooks",
    "_backward_pre_hooks": "backward pre-hooks",
    "_backward_hooks": "backward hooks",
    "_state_dict_pre_hooks": "state_dict pre-hooks",
    "_state_dict_hooks": "state_dict hooks",
    "_load_state_dict_pre_hooks": "load_state_dict pre-hooks",
    "_load_state_dict_post_hooks": "load_state_dict post-hooks",
}


@dataclass(frozen=True)
class QuantizationRecord:
    """What `quantize_` did: ``quantized`` maps each replaced module's qualified name to a
    description; ``skipped`` names the Linear / Embedding modules left in full precision by the
    skip patterns; ``not_converted`` maps the other modules holding a weight matrix that stay in
    full precision, because their type is not exactly ``nn.Linear`` / ``nn.Embedding``
    (``nn.MultiheadAttention`` and its ``out_proj``, convolutions, ``nn.EmbeddingBag``, ...),
    to their class names."""

    quantized: dict[str, str]
    skipped: tuple[str, ...]
    weight_bits: int
    activation_bits: int | None
    not_converted: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        kind = {2: "ternary", 1: "binary"}[self.weight_bits]
        acts = "full-precision" if self.activation_bits is None else f"{self.activation_bits}-bit"
        lines = [f"quantize_: {len(self.quantized)} modules → {kind} weights, {acts} activations"]
        lines += [f"  {name}: {description}" for name, description in self.quantized.items()]
        if self.skipped:
            lines.append(f"  kept in full precision: {', '.join(self.skipped)}")
        if self.not_converted:
            others = ", ".join(f"{name} ({kind})" for name, kind in self.not_converted.items())
            lines.append(f"  not an nn.Linear / nn.Embedding, left in full precision: {others}")
        return "\n".join(lines)


def matches(name: str, pattern: str) -> bool:
    """Whether a module's qualified ``name`` falls under a skip ``pattern``.

    A pattern is an ``fnmatch`` glob matched against the name and each of its
    ancestors, anchored at the root or at any dot: ``"pooler"`` matches
    ``bert.pooler`` and ``bert.pooler.dense``; ``"encoder.layer.0.*"`` matches
    everything in layer 0. A pattern that starts with ``/`` is anchored at the
    root only: ``"/0"`` matches the root's child ``0`` and what it holds, not
    ``encoder.0``.
    """
    rooted = pattern.startswith("/")
    parts = name.split(".")
    for end in range(1, len(parts) + 1):
        prefix = ".".join(parts[:end])
        if rooted:
            if fnmatch.fnmatchcase(prefix, pattern[1:]):
                return True
        elif fnmatch.fnmatchcase(prefix, pattern) or fnmatch.fnmatchcase(prefix, f"*.{pattern}"):
            return True
    return False


def _children(module: nn.Module) -> list[tuple[nn.Module, str, str, nn.Module]]:
    """Every (parent, key, qualified name, child) edge, shared modules once per parent."""
    edges = []
    for parent_name, parent in module.named_modules(remove_duplicate=False):
        for key, child in parent._modules.items():
            if child is not None:
                edges.append((parent, key, f"{parent_name}.{key}" if parent_name else key, child))
    return edges


def _parent_name(name: str) -> str:
    return name.rpartition(".")[0]


def _check_hooks(edges: list[tuple[nn.Module, str, str, nn.Module]], verb: str) -> None:
    """Raises ``ValueError`` naming the first module of ``edges`` (as `_children` gives them) that carries hooks:
    ``verb`` replaces the module object, and the new one would not have them."""
    for _, _, name, child in edges:
        kinds = [words for attribute, words in _HOOKS.items() if getattr(child, attribute, None)]
        if kinds:
            raise ValueError(
                f"{name} carries {', '.join(kinds)}, which {verb} would lose: it replaces the module object; "
                f"remove them (handle.remove()) and register them on the new module after {verb}"
            )


def _check_not_bypassed(edges: list[tuple[nn.Module, str, str, nn.Module]], verb: str) -> None:
    """Raises ``ValueError`` naming the first module of ``edges`` whose parent reads its weight directly
    (`WEIGHT_READERS`): the layer ``verb`` would put there would be bypassed."""
    for parent, key, name, _ in edges:
        for kind, children in WEIGHT_READERS:
            if key in children and isinstance(parent, kind) and type(parent).forward is kind.forward:
                owner = _parent_name(name)
                raise ValueError(
                    f"{verb} cannot swap {name}: its parent {owner or '(the root)'} is an nn.{kind.__name__}, whose "
                    f"forward reads {key}.weight directly instead of calling it, so a quantized layer there would be "
                    f"bypassed; keep {owner or 'it'} in full precision (quantize_'s skip=[..., {owner!r}])"
                )


def _check_skip(skip: Sequence[str] | None) -> tuple[tuple[str, ...], bool]:
    if skip is None:
        return DEFAULT_SKIP, False
    if isinstance(skip, str) or not all(isinstance(pattern, str) for pattern in skip):
        raise TypeError(f"skip must be a list of name patterns such as ['classifier', 'pooler'], got {skip!r}")
    return tuple(skip), True


def _describe(layer: nn.Module) -> str:
    kind = {2: "ternary", 1: "binary"}[layer.weight_bits]
    if isinstance(layer, QuantLinear):
        acts = "fp" if layer.act_quant is None else f"{layer.act_quant.bits}-bit"
        return f"Linear({layer.in_features}→{layer.out_features}), {kind}/{layer.granularity}, inputs {acts}"
    return f"Embedding({layer.num_embeddings}×{layer.embedding_dim}), {kind}/{layer.granularity}"


def quantize_(
    module: nn.Module,
    weight_bits: int = 2,
    activation_bits: int | None = 8,
    *,
    skip: Sequence[str] | None = None,
    embeddings: bool = True,
    linear_granularity: Granularity = "tensor",
    embedding_granularity: Granularity = "row",
) -> QuantizationRecord:
    """Replaces every ``nn.Linear`` (and ``nn.Embedding``) inside ``module`` by its quantized form, in place.

    The new layers are new module objects that share the old ones' parameters
    (an optimizer built before keeps working); attributes set on the old
    modules do not carry over, and a module carrying hooks is refused (see the
    module docstring). Only modules whose type is exactly ``nn.Linear`` /
    ``nn.Embedding`` are converted: a subclass may bypass ``forward`` (as
    ``nn.MultiheadAttention`` does with its ``out_proj``); the record lists the
    other weight matrices left in full precision. A Linear whose parent reads
    its weight directly (``nn.TransformerEncoderLayer``'s ``linear1`` /
    ``linear2``, see `WEIGHT_READERS`) is refused: skip its parent. LayerNorm
    and biases always stay in full precision.

    Args:
        module: The model; changed in place. It must not itself be a Linear /
            Embedding (use `QuantLinear.from_linear`).
        weight_bits: 2 (ternary, TWN) or 1 (binary, BWN). (default: ``2``)
        activation_bits: Inputs of every quantized Linear: 8 (uniform, learnable
            clip), 4 (LSQ) or ``None`` (full precision). (default: ``8``)
        skip: Name patterns (see `matches`) of modules kept in full precision.
            ``None`` uses `DEFAULT_SKIP` (BinaryBERT's choice; patterns that match
            nothing are fine). An explicit list must have every pattern match
            some module, so a typo cannot go unnoticed. (default: ``None``)
        embeddings: Quantize ``nn.Embedding`` tables too (word embeddings, per
            row). (default: ``True``)
        linear_granularity, embedding_granularity: One scale per tensor or per
            row. (default: ``"tensor"``, ``"row"``, as BinaryBERT)

    Returns:
        A `QuantizationRecord` (print it).

    Raises:
        TypeError, ValueError: Bad arguments (bits that are not the integers
            listed), a skip pattern matching nothing, modules already quantized
            or converted to integer kernels, nothing to quantize, a module
            carrying hooks, a Linear whose parent reads its weight directly, an
            embedding with ``max_norm`` or sparse gradients; the model is then
            unchanged.
    """
    from .integer import IntegerLinear  # integer.py builds on this module

    if not isinstance(module, nn.Module):
        raise TypeError(f"quantize_ takes an nn.Module, got {type(module).__name__}")
    _check_weight_bits(weight_bits)
    _check_activation_bits(activation_bits)
    for granularity in (linear_granularity, embedding_granularity):
        if granularity not in GRANULARITIES:
            raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
    patterns, strict = _check_skip(skip)
    names = [name for name, _ in module.named_modules(remove_duplicate=False) if name]
    if strict:
        unmatched = [p for p in patterns if not any(matches(name, p) for name in names)]
        if unmatched:
            raise ValueError(f"skip patterns {unmatched} match no module of this {type(module).__name__}")
    integer = [name or "(root)" for name, m in module.named_modules() if isinstance(m, IntegerLinear)]
    if integer:
        raise ValueError(
            f"this {type(module).__name__} was already converted to integer kernels by to_integer_ "
            f"({', '.join(integer[:3])}{', ...' if len(integer) > 3 else ''}): its other Linears hold quantized "
            "weights already; quantize_ the float model (or load_quantized the saved one)"
        )
    done = [name for name, m in module.named_modules() if isinstance(m, QUANTIZED_TYPES)]
    if isinstance(module, QUANTIZED_TYPES) or done:
        raise ValueError(
            f"this {type(module).__name__} is already quantized ({', '.join(done) or 'the root'}); "
            "quantize_ a fresh full-precision model, or use split_ternary_ on a ternary one"
        )
    kinds = (nn.Linear, nn.Embedding) if embeddings else (nn.Linear,)
    if type(module) in kinds:
        raise ValueError(
            f"quantize_ replaces modules inside a model in place and cannot replace the root "
            f"{type(module).__name__}; use QuantLinear.from_linear / QuantEmbedding.from_embedding"
        )

    edges = [edge for edge in _children(module) if type(edge[3]) in kinds]
    skipped_ids = {id(child) for _, _, name, child in edges if any(matches(name, p) for p in patterns)}
    targets = [edge for edge in edges if id(edge[3]) not in skipped_ids]
    if not targets:
        raise ValueError(
            f"nothing to quantize in this {type(module).__name__}: no nn.Linear"
            f"{' or nn.Embedding' if embeddings else ''} outside the skip patterns {list(patterns)}"
        )
    _check_not_bypassed(targets, "quantize_")
    _check_hooks(targets, "quantize_")
    replacements: dict[int, nn.Module] = {}
    for _, _, name, child in targets:  # build everything first: a failure here leaves the model as it was
        if id(child) in replacements:
            continue
        if type(child) is nn.Linear:
            new = QuantLinear.from_linear(
                child, weight_bits=weight_bits, activation_bits=activation_bits, granularity=linear_granularity
            )
        else:
            try:
                new = QuantEmbedding.from_embedding(child, weight_bits=weight_bits, granularity=embedding_granularity)
            except ValueError as error:
                raise ValueError(f"{name}: {error}") from error
        replacements[id(child)] = new
    not_converted = {
        name or "(root)": type(m).__name__
        for name, m in module.named_modules()
        if type(m) not in (nn.Linear, nn.Embedding)
        and any(p is not None and p.dim() >= 2 for p in m._parameters.values())
        and not any(matches(name, pattern) for pattern in patterns)
    }
    # --- nothing above this line changes the model ---
    quantized = {}
    for parent, key, name, child in targets:
        parent._modules[key] = replacements[id(child)]
        quantized[name] = _describe(replacements[id(child)])
    skipped = tuple(dict.fromkeys(name for _, _, name, child in edges if id(child) in skipped_ids))
    return QuantizationRecord(quantized, skipped, weight_bits, activation_bits, not_converted)


def dequantize_(module: nn.Module) -> list[str]:
    """Undoes `quantize_`: every `QuantLinear` / `QuantEmbedding` inside ``module`` becomes a plain
    ``nn.Linear`` / ``nn.Embedding`` holding its latent weight (the same parameters); activation
    quantizers are dropped. Modules quantized in place (`QuantizedInPlace`, such as the attention
    of `theseus_quant.bert.quantize_attention_`, root included) get their original class back
    and lose their quantizers. Split layers cannot be merged back and raise (before any change).
    Returns the qualified names dequantized.

    The plain layers are new module objects (the in-place quantized modules excepted): attributes set on the
    quantized ones do not carry over, and a quantized layer carrying hooks is refused (before any change)."""
    edges = [edge for edge in _children(module) if isinstance(edge[3], QUANTIZED_TYPES)]
    split = [name for _, _, name, child in edges if not isinstance(child, (QuantLinear, QuantEmbedding))]
    if split:
        raise ValueError(f"split layers cannot be dequantized: {split}")
    if isinstance(module, QUANTIZED_TYPES):
        raise ValueError("dequantize_ works on the modules inside a model; the root is a quantized layer")
    _check_hooks(edges, "dequantize_")
    in_place = [(name, m) for name, m in module.named_modules() if isinstance(m, QuantizedInPlace)]
    for _, quantized in in_place:
        quantized.dequantize_self_()
    plain: dict[int, nn.Module] = {}
    for parent, key, _, child in edges:
        if id(child) not in plain:
            if isinstance(child, QuantLinear):
                new = nn.Linear(child.in_features, child.out_features, bias=False, device="meta")
                new.weight, new.bias = child.weight, child.bias
            else:
                new = nn.Embedding(child.num_embeddings, child.embedding_dim, child.padding_idx, device="meta")
                new.weight, new.scale_grad_by_freq = child.weight, child.scale_grad_by_freq
            new.train(child.training)
            plain[id(child)] = new
        parent._modules[key] = plain[id(child)]
    return [name for _, _, name, _ in edges] + [name or "(root)" for name, _ in in_place]


class quantized_copy:  # noqa: N801 - used like a function: successor=quantized_copy(2, 8)
    """Successor factory (for `theseus_core.ModuleSpec` / `plan`) giving a quantized copy of the group.

    The group's modules (or only those at ``layers``: quantize and compress in
    one run) are deep-copied, chained as the group was called, and passed to
    `quantize_`; with ``attention``, what the attention multiplies is quantized too
    (`quantize_known_attention_`). `theseus_core.replace_` then trains the quantized
    layers against their frozen full-precision neighbours, with the curriculum.
    `quantize_`'s refusals hold for the copy: a group with a Linear that carries
    hooks (deep-copied with it), or whose parent reads its weight directly (an
    ``nn.TransformerEncoderLayer``), is refused when the successor is built.

    Args:
        weight_bits, activation_bits, skip, embeddings: As `quantize_`.
            (default: ``2``, ``8``, ``None``, ``True``)
        layers: Positions in the group of the modules to copy, in order
            (``[0]``: the bottom one, as BERT-of-Theseus). (default: all)
        attention: Also quantize Q, K, V and the attention probabilities at
            ``activation_bits``, as BinaryBERT does, in the attention modules of the
            families theseus_quant knows (BERT's, `theseus_quant.bert`); nothing
            when ``activation_bits`` is ``None``. (default: ``True``)
    """

    def __init__(
        self,
        weight_bits: int = 2,
        activation_bits: int | None = 8,
        layers: Sequence[int] | None = None,
        *,
        skip: Sequence[str] | None = None,
        embeddings: bool = True,
        attention: bool = True,
    ) -> None:
        _check_weight_bits(weight_bits)
        _check_activation_bits(activation_bits)
        if layers is not None and (not layers or not all(is_int(i) for i in layers)):
            raise ValueError(f"layers must be a non-empty list of positions in the group, got {layers!r}")
        self.weight_bits = weight_bits
        self.activation_bits = activation_bits
        self.layers = None if layers is None else tuple(layers)
        self.skip = skip
        self.embeddings = embeddings
        self.attention = attention

    def __call__(self, group: list[nn.Module]) -> nn.Module:
        from theseus_core import PredecessorChain  # the engine's way of chaining modules called like one

        positions = range(len(group)) if self.layers is None else self.layers
        if not all(-len(group) <= i < len(group) for i in positions):
            raise IndexError(f"{self!r} on a group of {len(group)} modules")
        copies = [copy.deepcopy(group[i]) for i in positions]
        successor = copies[0] if len(copies) == 1 else PredecessorChain(copies)
        if type(successor) in (nn.Linear, nn.Embedding):  # quantize_'s check, for a group of one layer
            _check_hooks([(successor, "", f"the copy of group[{positions[0]}]", successor)], "quantized_copy")
        if type(successor) is nn.Linear:
            return QuantLinear.from_linear(
                successor, weight_bits=self.weight_bits, activation_bits=self.activation_bits
            )
        if type(successor) is nn.Embedding and self.embeddings:
            return QuantEmbedding.from_embedding(successor, weight_bits=self.weight_bits)
        quantize_(successor, self.weight_bits, self.activation_bits, skip=self.skip, embeddings=self.embeddings)
        if self.attention and self.activation_bits is not None:
            quantize_known_attention_(successor, self.activation_bits)
        return successor

    def __repr__(self) -> str:
        layers = "" if self.layers is None else f", layers={list(self.layers)}"
        attention = "" if self.attention else ", attention=False"
        return f"quantized_copy({self.weight_bits}, {self.activation_bits}{layers}{attention})"


KNOWN_ATTENTION = (("transformers.models.bert.modeling_bert", "BertSelfAttention", "theseus_quant.bert"),)
"""(module, class, theseus_quant module with ``quantize_attention_``) of each attention whose matmul inputs
theseus_quant knows how to quantize."""


def quantize_known_attention_(module: nn.Module, bits: int) -> tuple[str, ...]:
    """Quantizes, in place, the attention inside ``module`` of every family in `KNOWN_ATTENTION` (its
    ``quantize_attention_``: Q, K, V and probabilities at ``bits``); returns the qualified names of the attention
    modules quantized, none when ``module`` holds no such attention. A family's module is imported only when its
    library already is: a model cannot hold a class whose module was never imported."""
    done: list[str] = []
    for library, class_name, ours in KNOWN_ATTENTION:
        loaded = sys.modules.get(library)
        if loaded is None or not any(type(m) is getattr(loaded, class_name) for m in module.modules()):
            continue
        done += importlib.import_module(ours).quantize_attention_(module, bits).names
    return tuple(done)
