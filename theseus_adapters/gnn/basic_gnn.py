"""A ``BasicGNN`` (GCN, GraphSAGE, GIN, GAT, PNA, EdgeCNN) to stepped form and back: its convs and norms become
`GNNStep` s in one `GNNStack`, its class a `SteppedGNN`."""

from __future__ import annotations

import copy
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from torch import nn
from torch_geometric.nn.models.basic_gnn import BasicGNN

from .layers import LAYERS
from .records import _finish_conversion, _has_state, _Record, _shared_modules, _unshare
from .steps import BASIC_GNN_INPUTS, GNNStack, GNNStep, SteppedGNN, _Function, _layout

_LAYER_TYPES = tuple(LAYERS.values())


@dataclass
@dataclass
class _BasicGNNRecord(_Record):
    cls: type[BasicGNN]
    module_order: tuple[str, ...]
    conv_type: type[nn.Module]  # the class's own conv kind: every layer is one, or one of LAYERS
    post_layout: tuple[Any, ...]  # layout of a step with post-processing, for checking successors


def _basic_gnn_to_steps(model: BasicGNN) -> None:
    name = type(model).__name__
    if model.jk_mode not in (None, "last", "max"):
        raise ValueError(
            f"{name}(jk={model.jk_mode!r}) feeds every layer's output to its head, whose size then depends on "
            f"the number of layers; Theseus supports jk=None, 'last' or 'max'"
        )
    if isinstance(model.act, nn.Module) and _has_state(model.act):
        raise ValueError(f"{name}'s activation {type(model.act).__name__} has parameters shared by every layer")
    if not len(model.convs) == len(model.norms) == model.num_layers:
        raise ValueError(
            f"{name} has {len(model.convs)} convs, {len(model.norms)} norms, num_layers={model.num_layers}"
        )
    conv_kwargs = [
        kw for kw, on in (("edge_weight", model.supports_edge_weight), ("edge_attr", model.supports_edge_attr)) if on
    ]
    norm_args = ("batch", "batch_size") if model.supports_norm_batch else ()
    steps = []
    for index, (conv, norm) in enumerate(zip(model.convs, model.norms, strict=True)):
        post: list[nn.Module] = []
        # BasicGNN.forward: no activation / norm / dropout after the last layer unless jumping knowledge.
        if index < model.num_layers - 1 or model.jk_mode is not None:
            post = _basic_post(model, norm)
        post_args = [norm_args if module is norm else () for module in post]
        steps.append(GNNStep(conv, post, conv_args=("edge_index",), conv_kwargs=conv_kwargs, post_args=post_args))
    post = _basic_post(model, model.norms[0])
    post_layout = tuple((type(module), norm_args if module is model.norms[0] else ()) for module in post)
    shared = _shared_modules(steps, name)
    # --- nothing above this line changes the model ---
    record = _BasicGNNRecord(
        stack_name="steps",
        unshared=_unshare(steps, shared),
        cls=type(model),
        module_order=tuple(model._modules),
        conv_type=next(
            (type(conv) for conv in model.convs if not isinstance(conv, _LAYER_TYPES)), type(model.convs[0])
        ),
        post_layout=post_layout,
    )
    children: OrderedDict[str, nn.Module | None] = OrderedDict()
    for key, child in model._modules.items():
        if key == "convs":
            children["steps"] = GNNStack(*steps, input_names=BASIC_GNN_INPUTS)
        elif key != "norms":
            children[key] = child
    model._modules.clear()
    model._modules.update(children)
    model.__dict__["_steps_record"] = record
    model.__class__ = SteppedGNN


def _basic_post(model: BasicGNN, norm: nn.Module) -> list[nn.Module]:
    """The modules ``BasicGNN.forward`` applies after a conv, in its order: [act], norm, [act], dropout.

    The activation and dropout are stateless and shared by all layers in the model; each step gets its own
    copy so that steps share no module (the core requires disjoint groups) and follow ``train()``/``eval()``.
    """
    act = model.act
    if act is not None:
        act = copy.deepcopy(act) if isinstance(act, nn.Module) else _Function(act)
    before, after = ([act], []) if model.act_first else ([], [act])
    modules = [*before, norm, *after, copy.deepcopy(model.dropout)]
    return [module for module in modules if module is not None]


def _basic_gnn_from_steps(model: nn.Module, record: _BasicGNNRecord) -> str | None:
    steps = list(model._modules[record.stack_name])
    jk = model.jk_mode is not None
    kwargs = tuple(
        kw
        for kw, on in (("edge_weight", record.cls.supports_edge_weight), ("edge_attr", record.cls.supports_edge_attr))
        if on
    )
    for index, step in enumerate(steps):
        if not isinstance(step, GNNStep):
            return f"layer {index} is a {type(step).__name__} (a successor with projections), not a plain GNNStep"
        if type(step.conv) is not record.conv_type and not isinstance(step.conv, _LAYER_TYPES):
            return (
                f"layer {index} is a {type(step.conv).__name__}, neither a {record.conv_type.__name__} like the rest "
                f"of this {record.cls.__name__} nor one of the layers {', '.join(LAYERS)} "
                f"(theseus_adapters.gnn.layers)"
            )
        expected = record.post_layout if index < len(steps) - 1 or jk else ()
        if step.conv_args != ("edge_index",) or step.conv_kwargs != kwargs or _layout(step) != expected:
            return f"layer {index} is not called as a {record.cls.__name__} calls its layers"
    norm_index = 1 if model.act is not None and model.act_first else 0
    convs = nn.ModuleList(step.conv for step in steps)
    norms = nn.ModuleList(step.post[norm_index] if len(step.post) else nn.Identity() for step in steps)
    current = dict(model._modules)
    model._modules.clear()
    for key in record.module_order:
        model._modules[key] = {"convs": convs, "norms": norms}.get(key, current.get(key))
    model.num_layers = len(steps)
    model.__class__ = record.cls
    _finish_conversion(model, record)
    return None
