"""The per-rank memory model of a Theseus replacing stage under DDP and FSDP2 (``theseus compress --parallel``).

``python -m benchmarks.fsdp_memory`` prints the table of docs/past-one-gpu.md: for SmolLM2-135M 30 -> 15,
Llama-3-8B 32 -> 16 and Llama-3-70B 80 -> 40 on 1, 2, 4 and 8 GPUs, the bytes each rank holds on its device.
`benchmarks.fsdp_measure` checks it against the peaks measured on CPUs (SmolLM2, 1 and 2 processes).

The model (what `theseus_zoo.training.sharding` puts on a GPU):

- **predecessor**: its frozen layers and what is outside the layers (embeddings, final norm, head). DDP keeps them
  whole in fp32 on every rank; FSDP2 splits them over the N ranks, the layers stored in bf16 (frozen all stage:
  the mixed-precision policy casts them to bf16 before every all-gather anyway), the rest in fp32 (the root unit).
- **successors**: fp32 master weights (4 bytes a parameter), **gradients** fp32 (4; FSDP2 reduces in fp32) and
  **optimizer** AdamW's two moments (8); whole on every rank under DDP, a 1/N share each under FSDP2.
- **gathered** (FSDP2 only): what is unsharded at a time in the backward pass: the root unit (embeddings and head,
  bf16) for the whole step, two layers in flight (the one computing, the one prefetched, bf16) and one layer's
  unreduced gradients. In the forward pass and at the loss, the root alone (each layer is resharded after its
  forward).
- **activations**: what autograd keeps for the backward pass, for ``tokens`` tokens per rank. The most a step keeps
  is when the first group runs its successor and every later one its predecessor: every layer after the first
  group keeps its tensors. Autograd keeps only what a gradient it has to compute needs, so a frozen predecessor
  layer (no weight needs a gradient) keeps fewer than a trained one: per token ``4·hidden + 2·kv_width +
  3·intermediate`` values (the rotated q and k, v and the attention output that attention's backward reads, the
  residual after attention, the layer's output, SwiGLU's gate, up and activation) against ``9·hidden + 2·kv_width +
  4·intermediate`` for the trained successor (also every linear layer's input: both norms' normalised inputs and
  outputs, the attention output as ``o_proj`` reads it, SwiGLU's product). In bf16 under FSDP2 on a GPU, fp32
  otherwise. With activation checkpointing a layer keeps only its input, and one layer's tensors exist at a time,
  recomputed.
- **logits**: the loss's tensors over the vocabulary when the backward pass begins, four of them: the logits the
  loss reads (a copy: the last position dropped), the log-softmax cross-entropy keeps, and the log-softmax's
  gradient in and out (bf16 under FSDP2 on a GPU, fp32 otherwise).

The **total** is what is held all stage (predecessor, successors, optimizer) plus the larger of the step's two
peaks: when the backward pass begins (activations, logits and, under FSDP2, the root unsharded), or when it ends
(every gradient, and under FSDP2 what is gathered in the backward pass); in between a layer's gradients replace
its activations. Checked on CPUs (`benchmarks.fsdp_measure`: fp32, ``gpu=False``): within 1% of the measured peak
for SmolLM2 on 1 and 2 processes, where the peak is the start of the backward pass.

What the model leaves out: the CUDA context and allocator slack (about 0.5-1 GB a GPU), NCCL buffers, DDP's
gradient buckets (a second copy of the successors' gradients, from 2 ranks), and host memory (each rank also holds
the whole predecessor and the model under replacement in CPU memory until the stage shards its copy:
`theseus_zoo.training.sharding`).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

GB = 1e9
PARTS = ("predecessor", "successors", "gradients", "optimizer", "gathered", "activations", "logits", "total")
"""The keys of `per_rank`'s parts, in order."""


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
        return (
            2 * self.hidden * self.hidden
            + 2 * self.hidden * self.kv_width
            + 3 * self.hidden * self.intermediate
            + 2 * self.hidden
        )

    @property
    def outside_parameters(self) -> int:
        return self.vocabulary * self.hidden * (1 if self.tied else 2) + self.hidden

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.hidden // self.heads

    def trained_values(self) -> int:
        """Values autograd keeps per token for a trained layer, its output included (the module doc)."""
        return 9 * self.hidden + 2 * self.kv_width + 4 * self.intermediate

    def frozen_values(self) -> int:
        """Values autograd keeps per token for a frozen layer after a trained one, its output included."""
        return 4 * self.hidden + 2 * self.kv_width + 3 * self.intermediate


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
    """Bytes per rank of each part (`PARTS`, the module doc) for a replacing stage of ``model`` to ``successors``
    layers on ``ranks`` ranks, ``tokens`` tokens per rank per step; ``gpu`` False: FSDP2 in fp32, as on CPUs."""
    sharded = parallel == "fsdp"
    share = ranks if sharded else 1
    low = 2 if sharded and gpu else 4  # bytes of a bf16 / fp32 value
    layer, outside = model.layer_parameters, model.outside_parameters
    frozen = model.layers - model.layers // successors  # the predecessor's layers after the first group
    if checkpointing:
        kept = (frozen + 1) * model.hidden + model.trained_values()
    else:
        kept = frozen * model.frozen_values() + model.trained_values()
    parts = {
        "predecessor": (model.layers * layer * low + outside * 4) / share,
        "successors": successors * layer * 4 / share,
        "gradients": successors * layer * 4 / share,
        "optimizer": successors * layer * 8 / share,
        "gathered": (outside * low + 2 * layer * low + layer * 4) if sharded else 0.0,
        "activations": tokens * kept * low,
        "logits": 4 * tokens * model.vocabulary * low,
    }
    held = parts["predecessor"] + parts["successors"] + parts["optimizer"]
    backward_begins = parts["activations"] + parts["logits"] + (outside * low if sharded else 0.0)
    backward_ends = parts["gradients"] + parts["gathered"]
    parts["total"] = held + max(backward_begins, backward_ends)
    return parts


def table(tokens_per_step: int = 8 * 512) -> str:
    """The markdown table of docs/past-one-gpu.md: GB per rank, ``tokens_per_step`` split over the ranks."""
    header = (
        "| model | parallel | GPUs | predecessor | successors | gradients | optimizer | gathered | activations "
        "| logits | total | total with activation checkpointing |"
    )
    lines = [header, "|" + "---|" * 12]
    for model, successors in CASES:
        for parallel in ("ddp", "fsdp"):
            for ranks in (1, 2, 4, 8):
                tokens = tokens_per_step // ranks
                parts = per_rank(model, successors, ranks, parallel, tokens=tokens)
                checkpointed = per_rank(model, successors, ranks, parallel, tokens=tokens, checkpointing=True)
                cells = [f"{parts[key] / GB:.2f}" for key in ("predecessor", "successors", "gradients", "optimizer")]
                cells += [f"{parts[key] / GB:.2f}" for key in ("gathered", "activations", "logits")]
                total = f"{parts['total'] / GB:.1f}"
                with_ac = f"{checkpointed['total'] / GB:.1f}" if parallel == "fsdp" else "-"
                name = f"{model.name} {model.layers} -> {successors}"
                lines.append(f"| {name} | {parallel} | {ranks} | " + " | ".join([*cells, total, with_ac]) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8 * 512, help="tokens per step, over every rank")
    print(table(parser.parse_args().tokens))
