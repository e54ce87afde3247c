"""The per-rank memory model of a Theseus replacing stage under DDP and FSDP2 (``theseus compress --parallel``).

``python -m benchmarks.fsdp_memory`` prints the table of docs/performance.md: for SmolLM2-135M 30 -> 15,
Llama-3-8B 32 -> 16 and Llama-3-70B 80 -> 40 on 1, 2, 4 and 8 GPUs, the bytes each rank holds on its device.

The model (what `theseus_zoo.training.sharding` puts on a GPU):

- **predecessor**: its frozen layers and what is outside the layers (embeddings, final norm, head). DDP keeps them
  whole in fp32 on every rank; FSDP2 splits them over the N ranks, the layers stored in bf16 (frozen all stage:
  the mixed-precision policy casts them to bf16 before every all-gather anyway), the rest in fp32 (the root unit).
- **successors**: fp32 master weights (4 bytes a parameter), **gradients** fp32 (4; FSDP2 reduces in fp32) and
  **optimizer** AdamW's two moments (8); whole on every rank under DDP, a 1/N share each under FSDP2.
- **gathered** (FSDP2 only): what is unsharded at a time: the root unit (embeddings and head, bf16) for the whole
  step, two layers in flight (the one computing, the one prefetched, bf16) and one layer's unreduced gradients.
- **activations**: what autograd keeps for the backward pass, for ``tokens`` tokens per rank: the most a step keeps
  is when the first group runs its successor and every later one its predecessor, so every layer after the first
  group keeps its tensors: per token and layer about ``8·hidden + 2·kv_width + 4·intermediate`` values (the norms'
  inputs and outputs, q, k, v, the attention output, SwiGLU's gate, up, activation and product), in bf16 under
  FSDP2 on a GPU, fp32 under DDP; plus the logits (bf16) and their fp32 softmax for the loss. With activation
  checkpointing a layer keeps only its input, and one layer's tensors exist at a time, recomputed.

What the model leaves out: the CUDA context and allocator slack (about 0.5-1 GB a GPU), NCCL buffers, and host
memory (each rank also holds the whole predecessor and the model under replacement in CPU memory until the stage
shards its copy: `theseus_zoo.training.sharding`).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

GB = 1e9


@dataclass(frozen=True)
class Decoder:
    """A Llama-shaped decoder: its widths, layer count, vocabulary and whether the head is the embedding."""

    name: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocabulary: int
    tied: bool

    @property
    def layer_parameters(self) -> int:
        kv = self.kv_heads * self.hidden // self.heads
        return (
            2 * self.hidden * self.hidden + 2 * self.hidden * kv + 3 * self.hidden * self.intermediate + 2 * self.hidden
        )

    @property
    def outside_parameters(self) -> int:
        return self.vocabulary * self.hidden * (1 if self.tied else 2) + self.hidden

    def activation_values(self) -> int:
        """Values autograd keeps per token and layer (the module doc)."""
        kv = self.kv_heads * self.hidden // self.heads
        return 8 * self.hidden + 2 * kv + 4 * self.intermediate


SMOLLM2 = Decoder("SmolLM2-135M", 576, 1536, 30, 9, 3, 49152, True)
LLAMA_8B = Decoder("Llama-3-8B", 4096, 14336, 32, 32, 8, 128256, False)
LLAMA_70B = Decoder("Llama-3-70B", 8192, 28672, 80, 64, 8, 128256, False)
CASES = ((SMOLLM2, 15), (LLAMA_8B, 16), (LLAMA_70B, 40))


def per_rank(
    model: Decoder,
    successors: int,
    ranks: int,
    parallel: str,
    *,
    tokens: int,
    gpu: bool = True,
    checkpointing: bool = False,
) -> dict[str, float]:
    """Bytes per rank of each part (the module doc) for a replacing stage of ``model`` to ``successors`` layers on
    ``ranks`` ranks, ``tokens`` tokens per rank per step; ``gpu`` False: FSDP2 in fp32, as on CPUs."""
    sharded = parallel == "fsdp"
    share = ranks if sharded else 1
    low = 2 if sharded and gpu else 4  # bytes of a bf16 / fp32 value
    layer, outside = model.layer_parameters, model.outside_parameters
    group = model.layers // successors
    parts = {
        "predecessor": (model.layers * layer * low + outside * 4) / share,
        "successors": successors * layer * 4 / share,
        "gradients": successors * layer * 4 / share,
        "optimizer": successors * layer * 8 / share,
        "gathered": (outside * low + 2 * layer * low + layer * 4) if sharded else 0.0,
    }
    kept = model.layers - group + 1  # layers that keep their tensors, at worst
    per_layer = tokens * model.activation_values() * low
    saved = kept * tokens * model.hidden * low + per_layer if checkpointing else kept * per_layer
    parts["activations"] = saved + tokens * model.vocabulary * (low + 4)
    parts["total"] = sum(parts.values())
    return parts


def table(tokens_per_step: int = 8 * 512) -> str:
    """The markdown table of docs/performance.md: GB per rank, ``tokens_per_step`` split over the ranks."""
    header = (
        "| model | parallel | GPUs | predecessor | successors | gradients | optimizer | gathered | activations "
        "| total | total with activation checkpointing |"
    )
    lines = [header, "|" + "---|" * 11]
    for model, successors in CASES:
        for parallel in ("ddp", "fsdp"):
            for ranks in (1, 2, 4, 8):
                tokens = tokens_per_step // ranks
                parts = per_rank(model, successors, ranks, parallel, tokens=tokens)
                checkpointed = per_rank(model, successors, ranks, parallel, tokens=tokens, checkpointing=True)
                cells = [f"{parts[key] / GB:.2f}" for key in ("predecessor", "successors", "gradients", "optimizer")]
                cells += [f"{parts['gathered'] / GB:.2f}", f"{parts['activations'] / GB:.2f}"]
                total = f"{parts['total'] / GB:.1f}"
                with_ac = f"{checkpointed['total'] / GB:.1f}" if parallel == "fsdp" else "-"
                name = f"{model.name} {model.layers} -> {successors}"
                lines.append(f"| {name} | {parallel} | {ranks} | " + " | ".join([*cells, total, with_ac]) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8 * 512, help="tokens per step, over every rank")
    print(table(parser.parse_args().tokens))
