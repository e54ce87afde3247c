"""The in-place conversion: `to_steps_` and `from_steps_`, for a ``BasicGNN`` (`theseus_adapters.gnn.basic_gnn`)
and a ``torch_geometric.nn.Sequential`` (`theseus_adapters.gnn.sequential`).

`to_steps_` checks everything before its first change and leaves a record on the model from which `from_steps_`
(or the plan's ``on_finalize``) converts back.
"""

from __future__ import annotations

from torch import nn
from torch_geometric.nn import Sequential as PygSequential
from torch_geometric.nn.models.basic_gnn import BasicGNN

from theseus_core import Projected

from .basic_gnn import _basic_gnn_from_steps, _basic_gnn_to_steps, _BasicGNNRecord
from .records import _Record
from .sequential import _sequential_from_steps, _sequential_to_steps
from .steps import GNNStep


def to_steps_(model: nn.Module) -> nn.Module:
    """Converts a ``BasicGNN`` or a ``torch_geometric.nn.Sequential`` into stepped form, in place.

    Outputs stay bit-identical (same tensors, same ops in the same order). Everything is checked before
    the first change: on any error the model is untouched.

    Args:
        model: The GNN itself: a ``BasicGNN`` subclass (GCN, GraphSAGE, GIN, GAT, PNA, EdgeCNN) with
            ``jk`` in ``None``, ``"last"``, ``"max"``, or a ``Sequential`` with a run of message-passing
            layers each followed by norm / activation / dropout modules (`GNNStep` tells the calls).

    Returns:
        The same object: a `SteppedGNN` for a ``BasicGNN``; a ``Sequential`` with one `GNNStack` child.

    Raises:
        TypeError: ``model`` is neither kind. ValueError: it cannot be compressed (``jk="cat"`` or
            ``"lstm"``, layers sharing parameters, no message-passing run), naming the reason.
    """
    if "_steps_record" in model.__dict__:
        raise ValueError(f"{type(model).__name__} is already in stepped form; use from_steps_ to convert it back")
    if isinstance(model, BasicGNN):
        _basic_gnn_to_steps(model)
    elif isinstance(model, PygSequential):
        _sequential_to_steps(model)
    else:
        raise TypeError(
            f"to_steps_ takes a torch_geometric BasicGNN (GCN, GraphSAGE, GIN, GAT, PNA, EdgeCNN) or a "
            f"torch_geometric.nn.Sequential, got {type(model).__name__}; for your own layers use theseus_core.plan"
        )
    return model


def from_steps_(model: nn.Module) -> nn.Module:
    """Converts a stepped GNN back, in place: the undo of `to_steps_`, also after `Theseus.restore`.

    After ``to_steps_`` (and ``replace_`` then ``restore``), this gives back the original model: same class,
    same conv and norm module objects, state_dict with the same keys in the same order and values. After
    ``finalize`` (which calls it through the plan), the successors become the layers of an ordinary model.

    Raises:
        ValueError: ``model`` is not stepped, or its steps cannot form the original kind (see `plan`).
        RuntimeError: a Theseus handle is still active on it: ``finalize()`` or ``restore()`` first.
    """
    record = model.__dict__.get("_steps_record")
    if record is None:
        raise ValueError(f"{type(model).__name__} is not in stepped form (see to_steps_)")
    reason = _convert_back(model, record)
    if reason is not None:
        raise ValueError(f"cannot convert this stepped GNN back: {reason}; it stays a working stepped model")
    return model


def _convert_back(model: nn.Module, record: _Record) -> str | None:
    """Converts back when possible; returns why not otherwise (leaving the model unchanged)."""
    stack = model._modules[record.stack_name]
    for child in stack:
        if not isinstance(child, (GNNStep, Projected)):
            raise RuntimeError(
                f"{type(model).__name__} still holds a Theseus site ({type(child).__name__}); call finalize() or "
                f"restore() on the handle first"
            )
    if isinstance(record, _BasicGNNRecord):
        return _basic_gnn_from_steps(model, record)
    return _sequential_from_steps(model, record)
