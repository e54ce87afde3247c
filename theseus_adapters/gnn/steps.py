"""The stepped form's modules: `GNNStep` (one layer and what follows it), `GNNStack`, `SteppedGNN`.

Also what the conversion and the successor factories read off a step: the widths and the post-processing layout
of a conv. The package docstring (``theseus_adapters.gnn``) explains the design.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from torch import Tensor, nn
from torch_geometric.nn.conv import EdgeConv

from theseus_core.checks import is_int

LAYER_OUTPUTS = "layer_outputs"
"""Input name under which a step appends its output to a list (for jumping knowledge)."""

BASIC_GNN_INPUTS = ("edge_index", "edge_weight", "edge_attr", "batch", "batch_size")
"""The inputs a stepped ``BasicGNN`` hands to every step, in ``BasicGNN.forward`` order."""


# ----------------------------------------------------------------------------------------------- steps
class _Function(nn.Module):
    """A plain function (``act=torch.tanh``) as a stateless module, so that a step can hold it."""

    def __init__(self, function: Callable[[Tensor], Tensor]) -> None:
        super().__init__()
        self.function = function

    def forward(self, x: Tensor) -> Tensor:
        return self.function(x)

    def extra_repr(self) -> str:
        return getattr(self.function, "__name__", repr(self.function))


class GNNStep(nn.Module):
    """One message-passing layer and the modules applied after it: ``conv → post[0] → post[1] → ...``.

    Called as ``step(x, **inputs)``: ``inputs`` holds the graph (``edge_index=...``, ``edge_weight=...``);
    the step picks what its layers take. When ``inputs[LAYER_OUTPUTS]`` is a list, the output is appended
    to it (jumping knowledge).

    Args:
        conv: The message-passing layer, called
            ``conv(x, *[inputs[n] for n in conv_args], **{n: inputs.get(n) for n in conv_kwargs})``.
        post: Modules applied in order to the conv's output (activation, norm, dropout), each called
            ``post[i](x, *[inputs.get(n) for n in post_args[i]])``. (default: none)
        conv_args: Names of the inputs passed positionally after ``x``. (default: ``("edge_index",)``)
        conv_kwargs: Names of the inputs passed by keyword. (default: those of ``edge_weight`` and
            ``edge_attr`` that ``conv.forward`` takes)
        post_args: Per post module, the names of the inputs passed after ``x``. (default: none)

    Shapes:
        ``x``: ``[num_nodes, in_channels]`` → ``[num_nodes, out_channels]``.
    """

    def __init__(
        self,
        conv: nn.Module,
        post: Sequence[nn.Module] = (),
        *,
        conv_args: Sequence[str] = ("edge_index",),
        conv_kwargs: Sequence[str] | None = None,
        post_args: Sequence[Sequence[str]] | None = None,
    ) -> None:
        super().__init__()
        self.conv = conv
        self.post = nn.ModuleList(post)
        self.conv_args = tuple(conv_args)
        if conv_kwargs is None:
            conv_kwargs = [name for name in ("edge_weight", "edge_attr") if name in _forward_parameters(conv)]
        self.conv_kwargs = tuple(conv_kwargs)
        self.post_args = tuple(tuple(names) for names in post_args) if post_args is not None else ((),) * len(post)
        if len(self.post_args) != len(self.post):
            raise ValueError(f"post_args has {len(self.post_args)} entries for {len(self.post)} post modules")

    @property
    def in_channels(self) -> int | None:
        """Width of the step's input (``None`` when the conv does not tell, e.g. lazy ``-1``)."""
        return _conv_widths(self.conv)[0]

    @property
    def out_channels(self) -> int | None:
        """Width of the step's output."""
        return _conv_widths(self.conv)[1]

    def forward(self, x: Tensor, **inputs: Any) -> Tensor:
        missing = [name for name in self.conv_args if name not in inputs]
        if missing:
            raise TypeError(f"GNNStep needs the inputs {missing}; call it as step(x, edge_index=..., ...)")
        keywords = {name: inputs.get(name) for name in self.conv_kwargs}
        x = self.conv(x, *(inputs[name] for name in self.conv_args), **keywords)
        for module, names in zip(self.post, self.post_args, strict=True):
            x = module(x, *(inputs.get(name) for name in names))
        outputs = inputs.get(LAYER_OUTPUTS)
        if outputs is not None:
            outputs.append(x)
        return x

    def extra_repr(self) -> str:
        return f"conv_args={self.conv_args}, conv_kwargs={self.conv_kwargs}"


class GNNStack(nn.Sequential):
    """Steps run in order: ``x`` flows through, every other input goes to every step unchanged.

    Args:
        *steps: The `GNNStep` modules (or, during replacement, the core's sites standing for groups).
        input_names: Names of the inputs that may be passed positionally after ``x``, in order; keyword
            inputs are accepted too. (default: none)
    """

    def __init__(self, *steps: nn.Module, input_names: Sequence[str] = ()) -> None:
        super().__init__(*steps)
        self.input_names = tuple(input_names)

    def forward(self, x: Tensor, *args: Any, **inputs: Any) -> Tensor:
        if len(args) > len(self.input_names):
            raise TypeError(
                f"GNNStack takes x and at most {len(self.input_names)} positional inputs {self.input_names}"
            )
        inputs.update(zip(self.input_names, args, strict=False))
        for step in self:
            x = step(x, **inputs)
        return x


class SteppedGNN(nn.Module):
    """What a ``BasicGNN`` is while stepped: its layers as a `GNNStack` in ``steps``.

    Not constructed directly: `to_steps_` swaps the class of a ``BasicGNN`` to this one and keeps every
    other attribute (``jk``, ``lin``, ``in_channels``, ...); `from_steps_` swaps it back. Called like
    ``BasicGNN.forward``, minus ``num_sampled_nodes_per_hop`` trimming (a site changes how many layers
    run, so per-layer trimming cannot be known in advance). ``num_layers`` counts the steps.
    """

    def __init__(self) -> None:
        raise TypeError("a SteppedGNN is made by theseus_adapters.gnn.to_steps_(basic_gnn)")

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        edge_weight: Tensor | None = None,
        edge_attr: Tensor | None = None,
        batch: Tensor | None = None,
        batch_size: int | None = None,
        num_sampled_nodes_per_hop: list[int] | None = None,
        num_sampled_edges_per_hop: list[int] | None = None,
    ) -> Tensor:
        if num_sampled_nodes_per_hop is not None or num_sampled_edges_per_hop is not None:
            raise NotImplementedError(
                "a stepped GNN does not trim per layer (num_sampled_nodes_per_hop); call it without, "
                "outputs for the seed nodes are the same"
            )
        layer_outputs: list[Tensor] | None = [] if hasattr(self, "jk") else None
        x = self.steps(
            x,
            edge_index=edge_index,
            edge_weight=edge_weight,
            edge_attr=edge_attr,
            batch=batch,
            batch_size=batch_size,
            **{LAYER_OUTPUTS: layer_outputs},
        )
        if layer_outputs is not None:
            x = self.jk(layer_outputs)
        if hasattr(self, "lin"):
            x = self.lin(x)
        return x

    def extra_repr(self) -> str:
        return f"stepped {self._steps_record.cls.__name__}, num_layers={self.num_layers}"


# ------------------------------------------------------------------------------------------ helpers
def _forward_parameters(module: nn.Module) -> set[str]:
    try:
        return set(inspect.signature(module.forward).parameters)
    except (TypeError, ValueError):
        return set()


def _widths(layer: nn.Module) -> tuple[int, int] | None:
    if isinstance(layer, nn.Linear):
        return layer.in_features, layer.out_features
    widths = getattr(layer, "in_channels", None), getattr(layer, "out_channels", None)
    if all(is_int(w) and w > 0 for w in widths):
        return widths
    return None


def _conv_widths(conv: nn.Module) -> tuple[int | None, int | None]:
    """(input, output) feature widths of a message-passing layer; ``None`` where it cannot tell."""
    own = _widths(conv)
    if own is not None and not isinstance(conv, EdgeConv):
        heads = getattr(conv, "heads", 1)  # GAT, GATv2, Transformer: concatenated heads
        return own[0], own[1] * heads if getattr(conv, "concat", False) and isinstance(heads, int) else own[1]
    layers = [w for w in (_widths(m) for m in conv.modules() if m is not conv) if w is not None]
    if not layers:
        return None, None
    first = layers[0][0] // 2 if isinstance(conv, EdgeConv) else layers[0][0]  # EdgeConv: MLP on [x_i, x_j - x_i]
    return first, layers[-1][1]


def _layout(step: GNNStep) -> tuple[Any, ...]:
    """How a step post-processes: the types of its post modules and their inputs."""
    return tuple((type(module), names) for module, names in zip(step.post, step.post_args, strict=True))
