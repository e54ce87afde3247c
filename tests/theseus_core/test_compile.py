"""torch.compile: routes are drawn outside every graph, so new routes never recompile."""

import itertools

import torch
import torch._dynamo
from torch import nn
from torch._dynamo.utils import counters

import theseus_core as th
from theseus_core.prepare import compile_options
from theseus_core.testing import ToyBlock, ToyStack


def test_changing_routes_causes_no_recompilation_after_warm_up():
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = ToyStack(num_blocks=6, container="list", dropout=0.1)
    specs = [
        th.ModuleSpec("blocks[0:3]", th.copy_module(0)),
        th.ModuleSpec("blocks[3:6]", lambda group: ToyBlock(8, tuple_output=True), in_proj="linear", out_proj="linear"),
    ]
    # Recompiles are dynamo's (its guards), whatever backend compiles the graphs: aot_eager traces forward and
    # backward as inductor does but generates no kernels (a minute less; inductor's kernels are checked against
    # eager by test_compiled_routes_follow_the_draws_and_train_as_eager)
    theseus = th.replace_(model, specs, seed=0, compile={"backend": "aot_eager"})
    optimizer = torch.optim.SGD(theseus.successor_parameters(), lr=0.01)
    (x,) = model.example_inputs(batch_size=8)

    def step():
        loss = model(x).square().mean()
        if loss.requires_grad:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad()

    model.train()
    theseus.rate = 0.5
    warm_up = set()
    for _ in range(16):  # with this seed every combination of routes shows up
        step()
        warm_up.add(tuple(theseus.last_routes.values()))
    assert len(warm_up) == 4
    graphs_after_warm_up = counters["stats"]["unique_graphs"]
    # Each branch compiles at most twice: its input needs grad or not (a frozen predecessor
    # behind a trained successor passes gradients on); the rest of the model adds a few graphs.
    assert 0 < graphs_after_warm_up <= 2 * 2 * len(theseus.sites) + 4

    with torch._dynamo.config.patch(error_on_recompile=True):
        for _ in range(30):
            step()
    assert counters["stats"]["unique_graphs"] == graphs_after_warm_up


def test_compiled_routes_follow_the_draws_and_train_as_eager():
    """A draw baked into a graph (pytorch#95425) would repeat the first route forever; inductor's forward and
    backward kernels must give eager's outputs and the successor's gradients, step by step."""
    torch._dynamo.reset()
    model = ToyStack(num_blocks=2, dropout=0.0)
    eager = ToyStack(num_blocks=2, dropout=0.0)
    eager.load_state_dict(model.state_dict())
    spec = [th.ModuleSpec("blocks[0:2]", lambda group: ToyBlock(16, dropout=0.0))]
    compiled = th.replace_(model, spec, seed=4, compile=True)
    reference = th.replace_(eager, spec, seed=4)
    reference.sites[0].successor.load_state_dict(compiled.sites[0].successor.state_dict())
    compiled.rate = reference.rate = 0.5
    (x,) = model.example_inputs()
    routes, trained = [], 0
    for _ in range(12):
        output, expected = model.train()(x), eager.train()(x)
        torch.testing.assert_close(output, expected)
        routes.append(compiled.last_routes["blocks[0:2]"])
        assert routes[-1] == reference.last_routes["blocks[0:2]"]
        assert output.requires_grad == expected.requires_grad  # the predecessor is frozen: only a successor trains
        if output.requires_grad:
            output.square().mean().backward()
            expected.square().mean().backward()
            gradients = [p.grad for p in compiled.successor_parameters()]
            assert all(g is not None for g in gradients)
            for gradient, wanted in zip(gradients, (p.grad for p in reference.successor_parameters()), strict=True):
                torch.testing.assert_close(gradient, wanted)
            trained += 1
    assert set(routes) == {True, False} and trained > 1


def test_finalize_compares_eagerly_and_compiles_nothing():
    """Compiled, the model at rate 1 and the finalized one (graphs of other bounds) may round differently: finalize
    runs both eagerly, so its exact check holds, and it compiles no graph for a check."""
    torch._dynamo.reset()
    counters.clear()
    model = ToyStack(num_blocks=4, dropout=0.0)
    spec = [th.ModuleSpec("blocks[0:2]", lambda group: ToyBlock(16, dropout=0.0))]
    theseus = th.replace_(model, spec, example_inputs=model.example_inputs(), compile={"backend": "aot_eager"})
    theseus.rate = 1.0
    model.train()(*model.example_inputs()).square().mean().backward()
    graphs = counters["stats"]["unique_graphs"]
    assert graphs > 0
    theseus.finalize()
    assert counters["stats"]["unique_graphs"] == graphs


def test_restore_removes_the_compilation():
    model = ToyStack()
    theseus = th.replace_(model, [th.ModuleSpec("blocks[0:2]", th.copy_module(0))], compile={"backend": "eager"})
    assert model._compiled_call_impl is not None
    theseus.restore()
    assert model._compiled_call_impl is None


def test_shapes_are_static_and_recompiles_isolated_unless_the_caller_says_otherwise():
    """The graph break at every site would make dynamo mark sizes dynamic after a recompilation, which
    breaks timm resnet26d and mobilevit and makes Swin take minutes."""
    defaults = {"dynamic": False, "isolate_recompiles": True}
    assert compile_options(True) == defaults
    assert compile_options({"backend": "eager"}) == {**defaults, "backend": "eager"}
    assert compile_options({"dynamic": None}) == {**defaults, "dynamic": None}
    assert compile_options({"isolate_recompiles": False}) == {**defaults, "isolate_recompiles": False}
    assert compile_options(False) is None


def test_many_differently_shaped_sites_stay_within_the_recompile_limit():
    """Every site's branches run through the same wrapper forwards (the predecessor chain's, the projected
    successor's): counted together, seven sites of seven shapes, each compiled with and without grad, passed
    dynamo's recompile_limit of 8 and the rest of them ran eagerly."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    widths = [4, 5, 6, 7, 8, 9, 10, 11]
    model = nn.Sequential(*[nn.Linear(n_in, n_out) for n_in, n_out in itertools.pairwise(widths)])
    theseus = th.replace_(
        model,
        [th.ModuleSpec(str(index), th.copy_module(0)) for index in range(len(model))],
        compile={"backend": "eager"},
    )
    theseus.rate = 0.5
    x = torch.randn(3, widths[0])
    seen = set()
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        for _ in range(12):
            model(x).sum().backward()
            seen.update(theseus.last_routes.items())
    assert len(seen) == 2 * len(theseus.sites)  # every site ran both branches
