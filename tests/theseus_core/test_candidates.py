"""theseus_core.candidates: keep and skip, the candidates every group has, and splice_, which takes them out."""

import pytest
import torch
from torch import nn

import theseus_core as th
from theseus_core.candidates import Kept, Skip, keep_specs, skip_specs, splice_


def _stack(width=6, depth=6):
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(depth)]).eval()


@pytest.mark.parametrize("container", [nn.Sequential, nn.ModuleList])
def test_splice_flattens_kept_groups_drops_skips_and_keeps_the_container(container):
    a, b, c, d = (nn.Linear(2, 2) for _ in range(4))
    modules = [Kept([a, b]), Skip(), c, Kept([d]), Skip()]
    stack = container(*modules) if container is nn.Sequential else container(modules)
    splice_(stack)
    assert list(stack) == [a, b, c, d]
    assert [name for name, _ in stack.named_children()] == ["0", "1", "2", "3"]


def test_keep_computes_what_its_group_computed_and_skip_passes_the_input_on():
    model, x = _stack(), torch.randn(5, 6)
    expected = model(x)
    groups = ["[0:3]", "[3:4]"]  # several layers (a Kept), and one (a copy of it)
    handle = th.replace_(model, keep_specs([th.ModuleSpec(path) for path in groups]), example_inputs=[(x,)])
    handle.rate = 1.0
    assert torch.allclose(model(x), expected)
    successors = [site.successor.inner for site in handle.sites]
    assert isinstance(successors[0], Kept) and len(successors[0].layers) == 3
    assert not isinstance(successors[1], Kept)
    assert all(p.data_ptr() != q.data_ptr() for p in successors[1].parameters() for q in model[3].parameters())
    assert torch.equal(Skip()(x, "any", other=1), x)


def test_a_searched_stack_finalizes_into_the_layers_it_kept():
    """keep on one group, skip on another, spliced by the plan's hook: an ordinary Sequential of the kept layers."""
    model, x = _stack(), torch.randn(5, 6)
    kept = [model[0], model[1], model[2]]
    specs = [*keep_specs([th.ModuleSpec("[0:3]")]), *skip_specs([th.ModuleSpec("[3:6]")])]
    handle = th.replace_(model, th.Plan(specs, on_finalize=splice_), example_inputs=[(x,)])
    handle.rate = 1.0
    expected = model(x)
    final = handle.finalize()
    assert len(final) == 3 and all(isinstance(layer, nn.Sequential) for layer in final)
    assert not any(isinstance(module, (Kept, Skip)) for module in final.modules())
    assert all(
        torch.equal(p, q)
        for layer, old in zip(final, kept, strict=True)
        for p, q in zip(layer.parameters(), old.parameters(), strict=True)
    )
    assert torch.allclose(final(x), expected)
