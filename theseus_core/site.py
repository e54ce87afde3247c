"""The modules that `replace_` puts into a model.

A `ReplacementSite` stands where a predecessor group stood. It holds the group
as a `PredecessorChain` and the successor as a `Projected` (projections around
it, either optional) and picks one of the two per call through a `Router`
owned by the `Theseus` handle.

Calling convention: a site is called like the group's first module. The first
argument (the *primary* input, e.g. hidden states or an image batch) flows
through the group; every other argument (attention masks, ``edge_index``, ...)
is passed unchanged to every module of the group and to the successor. Between
two modules of a group, the primary input of the next is the previous output,
or its first element when that output is a tuple or a mapping (Hugging Face
layers return tuples).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import nn


def primary_output(output: Any) -> torch.Tensor:
    """The tensor that flows on from a module's output: the output itself, or its first element."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (tuple, list)) and output:
        return output[0]
    if isinstance(output, Mapping) and output:
        return next(iter(output.values()))
    raise TypeError(
        f"cannot tell which part of a {type(output).__name__} output flows to the next module; "
        f"group modules must return a tensor, or a tuple / mapping whose first item is the tensor"
    )


def with_primary_output(output: Any, value: torch.Tensor) -> Any:
    """``output`` with its primary tensor replaced by ``value`` (same container type)."""
    if isinstance(output, torch.Tensor):
        return value
    if isinstance(output, (tuple, list)):
        items = [value, *output[1:]]
        return type(output)(*items) if hasattr(output, "_fields") else type(output)(items)
    if isinstance(output, Mapping):
        first = next(iter(output))
        updated = output.copy() if hasattr(output, "copy") else dict(output)
        updated[first] = value
        return updated
    raise TypeError(f"cannot project an output of type {type(output).__name__}")


def _first_parameter(module: nn.Module) -> inspect.Parameter | None:
    """The first parameter of ``module.forward``, if its signature can be read and it has one."""
    try:
        parameters = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):
        return None
    return next(iter(parameters), None)


def primary_parameter_name(module: nn.Module) -> str | None:
    """Name of the first parameter of ``module.forward``, for callers that pass it by keyword."""
    first = _first_parameter(module)
    return first.name if first is not None and first.kind in (first.POSITIONAL_OR_KEYWORD, first.KEYWORD_ONLY) else None


def keyword_only_primary(module: nn.Module) -> str | None:
    """The name of ``module.forward``'s first parameter when it can only be passed by keyword
    (``forward(self, *, x)``), else ``None``: such a module gets its primary input by that name."""
    first = _first_parameter(module)
    return first.name if first is not None and first.kind is first.KEYWORD_ONLY else None


def call_with_primary(
    module: nn.Module, keyword: str | None, primary: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``module(primary, *args, **kwargs)``, or with ``primary`` passed as ``keyword`` (`keyword_only_primary`)."""
    if keyword is None:
        return module(primary, *args, **kwargs)
    return module(*args, **{keyword: primary}, **kwargs)


def split_primary(
    args: tuple[Any, ...], kwargs: dict[str, Any], primary_name: str | None, where: str
) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """(primary input, other positional args, other keyword args) of a call made as to the group."""
    if args:
        return args[0], args[1:], kwargs
    if primary_name is not None and primary_name in kwargs:
        kwargs = dict(kwargs)
        return kwargs.pop(primary_name), (), kwargs
    raise TypeError(f"{where} was called without its primary input ({primary_name or 'first positional argument'})")


class PassThrough(nn.Module):
    """A module that stands for another and reads the attributes it lacks from it.

    A replacement wrapper must look, to the code around it, like the module it stands for: a container that reads
    its layers' attributes (``nn.TransformerEncoder`` reads ``layers[0].self_attn``) keeps working after `replace_`
    and after `Theseus.finalize`. The rule, for every subclass:

    - **Forwarded**: reading an attribute that ordinary lookup does not find on the wrapper (its ``__dict__``, its
      class, its own parameters, buffers and submodules) returns the target's, the very object, not a copy. The
      target is what `_pass_through` names; the wrapper's own attributes always win.
    - **Not forwarded**: writing and deleting (``setattr`` and ``delattr`` act on the wrapper alone, as on any
      module); dunder names (``__deepcopy__``, ``__getstate__``, ``__reduce_ex__``, ...), which ``copy``,
      ``pickle`` and other protocols look up by ``getattr`` to learn how to treat the wrapper itself: the
      target's answer would treat the target in its place; and anything while the target is not registered yet.
    - **No recursion**: the target is found in the registered submodules (``self.__dict__["_modules"]``) only,
      never through attribute access on the wrapper, so a lookup on a half-made wrapper (inside ``__init__``
      before ``super().__init__()``, or on the empty object that ``copy.deepcopy`` and unpickling create before
      they restore its ``__dict__``) raises ``AttributeError`` as Python expects instead of recursing.

    A name that neither has raises ``AttributeError`` naming both classes.
    """

    _passes_to = "the module it stands for"
    """How the error names the target."""

    def _pass_through(self, modules: Mapping[str, nn.Module]) -> nn.Module | None:
        """The target among the wrapper's registered ``modules``, or ``None`` while it is not there. Reads only
        ``modules`` (never ``self``: see the class doc)."""
        raise NotImplementedError

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            target = None if name.startswith("__") else self._pass_through(self.__dict__.get("_modules", {}))
            if target is None:
                raise
        try:
            return getattr(target, name)
        except AttributeError:
            raise AttributeError(
                f"{type(self).__name__!r} object has no attribute {name!r}, nor has {self._passes_to} "
                f"({type(target).__name__})"
            ) from None


class PredecessorChain(nn.Module):
    """Runs a group's modules in order, threading the primary input through them."""

    def __init__(self, modules: list[nn.Module]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(modules)
        self.keywords = [keyword_only_primary(module) for module in modules]  # how each layer takes its input

    def forward(self, primary: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        last = len(self.layers) - 1
        for index, (layer, keyword) in enumerate(zip(self.layers, self.keywords, strict=True)):
            output = call_with_primary(layer, keyword, primary, args, kwargs)
            if index < last:
                primary = primary_output(output)
        return output


class Projected(PassThrough):
    """A successor with optional projections on its primary input and output.

    After `Theseus.finalize`, a site whose successor needs projections becomes
    this module (one without projections becomes the bare successor). It is
    called as the group was: ``primary_name`` is the name under which callers
    may pass the primary input by keyword. Attributes it lacks are read from the
    successor it wraps (`PassThrough`), so that a container that reads its
    layers' attributes (``nn.TransformerEncoder`` reads ``layers[0].self_attn``)
    reads them through the projections.
    """

    _passes_to = "the successor it wraps"

    def __init__(
        self,
        inner: nn.Module,
        in_proj: nn.Module | None = None,
        out_proj: nn.Module | None = None,
        primary_name: str | None = None,
    ) -> None:
        super().__init__()
        self.in_proj = in_proj
        self.inner = inner
        self.out_proj = out_proj
        self.primary_name = primary_name
        self.inner_keyword = keyword_only_primary(inner)  # the inner module's input name when keyword-only

    @property
    def has_projections(self) -> bool:
        return self.in_proj is not None or self.out_proj is not None

    def stands_bare(self, positionally: bool = True, by_keyword: bool = False) -> bool:
        """Whether the inner module alone can stand where the group stood: it has no projections, and it takes its
        primary input as callers passed the group's: ``positionally``, ``by_keyword`` (as ``primary_name``)."""
        if self.has_projections:
            return False
        if by_keyword and primary_parameter_name(self.inner) != self.primary_name:
            return False
        return not positionally or self.inner_keyword is None

    def _pass_through(self, modules: Mapping[str, nn.Module]) -> nn.Module | None:
        return modules.get("inner")

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        primary, args, kwargs = split_primary(args, kwargs, self.primary_name, type(self).__name__)
        if self.in_proj is not None:
            primary = self.in_proj(primary)
        output = call_with_primary(self.inner, self.inner_keyword, primary, args, kwargs)
        if self.out_proj is not None:
            output = with_primary_output(output, self.out_proj(primary_output(output)))
        return output


def _declares_width(layer: nn.Module) -> bool:
    if isinstance(layer, (nn.Linear, nn.modules.conv._ConvNd)):
        return True
    # e.g. torch-geometric message-passing layers
    return isinstance(getattr(layer, "in_channels", None), int) and isinstance(
        getattr(layer, "out_channels", None), int
    )


def _conv_dims(layer: nn.Module, side: str = "in") -> int:
    """How the layer lays out its features, from its weights rather than its attribute names (timm's
    ``ConvNormAct`` declares ``in_channels`` like a torch-geometric layer but is a convolution): the number of
    spatial dimensions of its first (``side="in"``) or last convolution, 0 when that weight is a matrix (features
    last)."""
    if isinstance(layer, nn.modules.conv._ConvNd):
        return len(layer.kernel_size)
    weighted = [m for m in layer.modules() if isinstance(getattr(m, "weight", None), torch.Tensor)]
    weighted = [m for m in weighted if m.weight.dim() > 1]
    if not weighted:
        return 0
    inner = weighted[0] if side == "in" else weighted[-1]
    if isinstance(inner, nn.modules.conv._ConvNd):
        return len(inner.kernel_size)
    return 0 if isinstance(inner, (nn.Linear, nn.Embedding)) or inner.weight.dim() == 2 else inner.weight.dim() - 2


def _boundary_layer(module: nn.Module, side: str) -> nn.Module | None:
    """The first (``side="in"``) or last (``"out"``) layer of ``module`` that declares a width.

    A module that declares its own widths is trusted over its insides. On the output side only layers of the
    input side's kind count: a channel-attention Conv1d at the end of a Conv2d block (ECA) is no boundary."""
    if _declares_width(module):
        return module
    layers = [layer for layer in list(module.modules())[1:] if _declares_width(layer)]
    if not layers:
        return None
    if side == "in":
        return layers[0]
    kind = _conv_dims(layers[0], "in")
    return next((layer for layer in reversed(layers) if _conv_dims(layer, "out") == kind), layers[-1])


def boundary_width(module: nn.Module, side: str) -> tuple[int, int] | None:
    """(width, conv_dims) at a module's input or output side, or ``None`` when unknown.

    ``conv_dims`` is 1, 2 or 3 when the boundary layer is a convolution (features
    are channel-first) and 0 when the feature width is the last dimension.
    """
    layer = _boundary_layer(module, side)
    if layer is None:
        return None
    if isinstance(layer, nn.Linear):
        return (layer.in_features if side == "in" else layer.out_features), 0
    return (layer.in_channels if side == "in" else layer.out_channels), _conv_dims(layer, side)


def group_boundary_width(modules: Sequence[nn.Module], side: str) -> tuple[int, int] | None:
    """`boundary_width` of a group of consecutive modules: the first module's that has one on the input side, the
    last module's on the output side (a group may end in an activation or a norm), of the input side's kind when
    one is (a channel-attention Conv1d after the group's Conv2d layers is no boundary); ``None`` when no module has
    one."""
    widths = [width for module in modules if (width := boundary_width(module, side)) is not None]
    if not widths or side == "in":
        return widths[0] if widths else None
    first = group_boundary_width(modules, "in")
    return next((width for width in reversed(widths) if first is not None and width[1] == first[1]), widths[-1])


def make_projection(in_width: int, out_width: int, conv_dims: int) -> nn.Module:
    """A learned map between widths: ``nn.Linear`` on the last dimension, or a 1×1 convolution."""
    if conv_dims == 0:
        return nn.Linear(in_width, out_width)
    conv = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[conv_dims]
    return conv(in_width, out_width, kernel_size=1)


class Router:
    """Route decisions for every site of one `Theseus` handle.

    In training mode each call of a site draws one Bernoulli(``rate``) from the
    handle's own generator (never the global RNG): the whole batch takes the
    same route, rate 0 leaves the global RNG exactly as the original model
    would, and ranks with the same seed agree. A uniform is drawn on every
    training call whatever the rate, so the routes of a run depend only on the
    seed, the number of calls, and the rates. A training call inside a backward
    (activation checkpointing recomputing a segment that holds the site) takes
    the site's last training route, drawing and counting nothing: the route its
    forward took when each backward follows one forward that called the site
    once (two forwards before one backward, or a site called twice in one
    forward, would replay the last route for both). A ``"hybrid"`` evaluation draws
    from a generator of its own (seeded from the seed, not saved with the
    routing state), so evaluating, however often, never changes them.
    """

    EVAL_ROUTES = ("successor", "predecessor", "hybrid")
    _EVAL_STREAM = 0x9E3779B97F4A7C15
    """Added to the seed for the generator of ``"hybrid"`` evaluation's routes, a stream apart from training's."""

    def __init__(self, seed: int, num_sites: int) -> None:
        self.seed = seed
        self.generator = torch.Generator()
        self.eval_generator = torch.Generator()
        self.rate = 0.0
        self.eval_route = "successor"
        self.num_sites = num_sites
        self.reset()

    def reset(self) -> None:
        """Back to the state of a new router: the generator at its seed, no draws counted."""
        self.generator.manual_seed(self.seed)
        self.eval_generator.manual_seed((self.seed + self._EVAL_STREAM) % 2**64)
        self.calls = [0] * self.num_sites  # training-mode draws per site
        self.successor_calls = [0] * self.num_sites
        self.last_routes: list[bool | None] = [None] * self.num_sites
        self._replay: list[bool | None] = [None] * self.num_sites  # per site, its last training route

    def choose(self, site_index: int, training: bool) -> bool:
        """True when the site runs its successor for this call."""
        if not training and self.eval_route != "hybrid":
            return self.eval_route == "successor"
        if training and torch._C._current_graph_task_id() != -1 and self._replay[site_index] is not None:
            return self._replay[site_index]  # a forward inside a backward: activation checkpointing's recompute
        generator = self.generator if training else self.eval_generator  # evaluating never moves training's routes
        use_successor = torch.rand((), generator=generator).item() < self.rate
        if training:
            self.calls[site_index] += 1
            self.successor_calls[site_index] += use_successor
            self._replay[site_index] = use_successor
        self.last_routes[site_index] = use_successor
        return use_successor


class ReplacementSite(PassThrough):
    """Stands in for one predecessor group while `Theseus` replacement trains.

    Attributes the site does not have are read from the group's first module
    (`PassThrough`), so that a container that inspects its first layer
    (``nn.TransformerEncoder`` reads ``self.layers[0].self_attn``) sees what it
    saw before.

    Attributes:
        path: The `ModuleSpec` path this site replaced.
        predecessor: The group's original modules, frozen, as a `PredecessorChain`.
        successor: The trainable successor (with any projections), as a `Projected`.
    """

    _passes_to = "its group's first module"

    def __init__(
        self,
        path: str,
        index: int,
        predecessor: PredecessorChain,
        successor: Projected,
        router: Router,
        predecessor_eval: bool,
    ) -> None:
        super().__init__()
        _keep_sites_out_of_graphs()
        self.path = path
        self.index = index
        self.predecessor = predecessor
        self.successor = successor
        self._router = router
        self._predecessor_eval = predecessor_eval
        self.primary_passed: set[str] = set()  # how callers passed the primary input: "positionally", "by_keyword"
        self.train(predecessor.training)

    def _pass_through(self, modules: Mapping[str, nn.Module]) -> nn.Module | None:
        predecessor = modules.get("predecessor")
        return None if predecessor is None else predecessor.layers[0]

    @contextlib.contextmanager
    def running(self, module: nn.Module) -> Iterator[None]:
        """Within: the site's predecessor branch runs ``module`` (a candidate, the site's own successor) instead of
        the group, while what the model reads through the site still reaches the group's first module. With the
        handle's eval route on ``"predecessor"``, one site runs ``module`` in an otherwise original model: what
        scores a single successor."""
        group = self.predecessor
        self.predecessor = _InPlaceOf(module, group)
        try:
            yield
        finally:
            self.predecessor = group

    def train(self, mode: bool = True) -> ReplacementSite:
        super().train(mode)
        if self._predecessor_eval:
            self.predecessor.train(False)
        return self

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        use_successor, primary, args, kwargs = self._route(args, kwargs)
        branch = self.successor if use_successor else self.predecessor
        return branch(primary, *args, **kwargs)

    def _route(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[bool, Any, tuple, dict]:
        self.primary_passed.add("positionally" if args else "by_keyword")  # what finalize needs of a bare successor
        primary, args, kwargs = split_primary(args, kwargs, self.successor.primary_name, f"the site at {self.path!r}")
        return self._router.choose(self.index, self.training), primary, args, kwargs

    def extra_repr(self) -> str:
        return f"path={self.path!r}"


class _InPlaceOf(nn.Module):
    """`ReplacementSite.running`'s stand-in for the group: runs ``module``, and keeps the group's ``layers`` for the
    site's pass-through."""

    def __init__(self, module: nn.Module, group: PredecessorChain) -> None:
        super().__init__()
        self.module, self.layers = module, group.layers

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)


def _keep_sites_out_of_graphs() -> None:
    """The route is decided in plain Python that dynamo never traces: torch.compile breaks the graph at the
    site and compiles each branch on its own, so a draw is never baked into a graph (pytorch/pytorch#95425)
    and a new route never recompiles anything. ``torch.compiler.disable`` imports torch._dynamo (a second
    or more), so it is applied when the first site is made, not when theseus_core is imported."""
    global _sites_kept_out_of_graphs
    if not _sites_kept_out_of_graphs:
        ReplacementSite.forward = torch.compiler.disable(ReplacementSite.forward, recursive=False)
        ReplacementSite._route = torch.compiler.disable(ReplacementSite._route)
        _sites_kept_out_of_graphs = True


_sites_kept_out_of_graphs = False
