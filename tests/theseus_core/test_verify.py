"""replace_ verifies before it accepts: with example inputs it runs the model at rate 0 after the surgery,
and undoes the surgery unless the original comes back exactly."""

import pytest
import torch
from torch import nn

import theseus_core as th
from theseus_core.testing import ToyConvNet, ToyStack, assert_replacement_equivalence


def snapshot(model):
    return (
        repr(model),
        {name: tensor.clone() for name, tensor in model.state_dict().items()},
        [p.requires_grad for p in model.parameters()],
        [m.training for m in model.modules()],
        [getattr(m, "track_running_stats", None) for m in model.modules()],
    )


def assert_untouched(model, before):
    after = snapshot(model)
    assert after[0] == before[0]
    assert list(after[1]) == list(before[1])
    for name, tensor in before[1].items():
        assert torch.equal(after[1][name], tensor), name
    assert after[2:] == before[2:]


class Layer(nn.Module):
    def __init__(self, width=8, first=False):
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.bias = nn.Parameter(torch.randn(width)) if first else None

    def forward(self, x, position_bias=None):
        if position_bias is None:  # like T5: the first layer computes it, later ones get it from the loop
            position_bias = self.bias if self.bias is not None else torch.zeros_like(x[0])
        return torch.relu(self.linear(x) + position_bias), position_bias


class StatePassing(nn.Module):
    """The loop hands the first layer's position_bias to the next layers (T5's encoder)."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Layer(first=True), Layer(), Layer(), Layer()])

    def forward(self, x):
        bias = None
        for layer in self.layers:
            x, bias = layer(x, position_bias=bias)
        return x


class ConvAfterFirst(nn.Module):
    """The loop applies a module after layer 0 (DeBERTa-v2 with conv_kernel_size)."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(4)])
        self.conv = nn.Linear(8, 8)

    def forward(self, x):
        for index, layer in enumerate(self.layers):
            x = layer(x)
            if index == 0:
                x = x + self.conv(x)
        return x


class Indexing(nn.Module):
    """The loop indexes its list by a fixed count (ALBERT's layer groups)."""

    def __init__(self):
        super().__init__()
        self.num_layers = 4
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(4)])

    def forward(self, x):
        for index in range(self.num_layers):
            x = self.layers[index](x)
        return x


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            StatePassing,
            r"group 'layers\[0:2\]' differs by up to .* calls layer 1 of the group with another 'position_bias'",
        ),
        (ConvAfterFirst, r"group 'layers\[0:2\]' differs .* changes the hidden states between layers 0 and 1 of the"),
        (Indexing, r"raised IndexError outside the sites, after group 'layers\[2:4\]' ran.*`layers` reads its"),
    ],
)
def test_a_container_that_does_more_than_call_its_layers_is_refused_and_left_untouched(build, message):
    model = build()
    before = snapshot(model)
    specs = th.plan(model, "layers", group_sizes=[2, 2], successor=th.copy_module(0))
    inputs = (torch.randn(3, 8),)
    rng = torch.get_rng_state()
    with pytest.raises(th.VerificationError, match=message):
        th.replace_(model, specs, example_inputs=inputs)
    assert_untouched(model, before)
    assert torch.equal(torch.get_rng_state(), rng)


@pytest.mark.parametrize("build", [StatePassing, ConvAfterFirst])
def test_groups_of_one_pass_where_only_the_grouping_was_wrong(build):
    model = build()
    specs = th.plan(model, "layers", num_groups=4, successor=th.copy_module(0))
    th.replace_(model, specs, example_inputs=(torch.randn(3, 8),))


def test_without_example_inputs_nothing_is_verified():
    model = StatePassing()
    th.replace_(model, th.plan(model, "layers", group_sizes=[2, 2], successor=th.copy_module(0)))


def test_verification_leaves_the_routes_as_a_fresh_handle_takes_them():
    model, twin = ToyStack(num_blocks=4), ToyStack(num_blocks=4)
    twin.load_state_dict(model.state_dict())
    spec = [th.ModuleSpec("blocks[0:2]", th.copy_module(0))]
    verified = th.replace_(model, spec, seed=3, example_inputs=model.example_inputs())
    plain = th.replace_(twin, spec, seed=3)
    assert verified.route_counts == plain.route_counts == {"blocks[0:2]": (0, 0)}
    verified.rate = plain.rate = 0.5
    for _ in range(10):
        model.train()(*model.example_inputs())
        twin.train()(*twin.example_inputs())
        assert verified.last_routes == plain.last_routes


# ------------------------------------------------------- the nn.Transformer family


def transformer_cases():
    torch.manual_seed(0)
    layer = dict(d_model=8, nhead=2, dim_feedforward=16, dropout=0.1, batch_first=True)
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(**layer), num_layers=4, enable_nested_tensor=False)
    decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(**layer), num_layers=4)
    transformer = nn.Transformer(**layer, num_encoder_layers=4, num_decoder_layers=4)
    src, tgt = torch.randn(2, 5, 8), torch.randn(2, 3, 8)
    return [
        ("encoder", encoder, th.plan(encoder, "layers", num_groups=2, successor=th.copy_module(0)), (src,)),
        ("decoder", decoder, th.plan(decoder, "layers", num_groups=2, successor=th.copy_module(0)), (tgt, src)),
        (
            "transformer",
            transformer,
            [
                *th.plan(transformer, "encoder.layers", num_groups=2, successor=th.copy_module(0)),
                *th.plan(transformer, "decoder.layers", num_groups=2, successor=th.copy_module(-1)),
            ],
            (src, tgt),
        ),
    ]


@pytest.mark.parametrize("index", range(3), ids=["encoder", "decoder", "transformer"])
def test_the_torch_transformer_family_works_through_attribute_pass_through(index):
    _, model, specs, inputs = transformer_cases()[index]
    assert_replacement_equivalence(model, specs, inputs)
    theseus = th.replace_(model, specs, example_inputs=inputs)
    site = theseus.sites[0]
    assert site.self_attn is site.predecessor.layers[0].self_attn  # what TransformerEncoder reads
    with pytest.raises(AttributeError, match="nor has its group's first module"):
        site.no_such_attribute  # noqa: B018


# ------------------------------------------------------------ frozen means frozen


def test_frozen_batch_norms_compute_with_batch_statistics_but_never_write_them():
    model = ToyConvNet()
    (x,) = model.example_inputs()
    torch.manual_seed(0)
    expected = model.train()(x)
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    theseus = th.replace_(model, [th.ModuleSpec("blocks[0:2]", th.copy_module(0))])
    model.train()
    theseus.rate = 0.0
    assert torch.equal(model(x), expected)  # the training forward of the original, batch statistics
    theseus.rate = 1.0
    model(x)
    successor_bn = theseus.sites[0].successor.inner.bn
    assert successor_bn.num_batches_tracked.item() == 2  # the successor's own statistics train
    theseus.restore()
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, before[name]), name
    assert all(m.track_running_stats for m in model.modules() if isinstance(m, nn.BatchNorm2d))


@pytest.mark.parametrize("train_others", [False, True])
def test_batch_norms_outside_the_groups_are_frozen_unless_train_others(train_others):
    model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4), nn.Sequential(*(nn.Conv2d(4, 4, 1) for _ in range(2))))
    stem_bn = model[1]
    theseus = th.replace_(model, [th.ModuleSpec("2[0:2]", th.copy_module(0))], train_others=train_others)
    theseus.rate = 0.5
    model.train()(torch.randn(2, 3, 4, 4))
    assert stem_bn.num_batches_tracked.item() == (1 if train_others else 0)
    theseus.finalize()
    assert stem_bn.track_running_stats


def test_a_frozen_module_that_writes_another_buffer_is_refused():
    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("seen", torch.zeros(()))
            self.linear = nn.Linear(8, 8)

        def forward(self, x):
            if self.training:
                self.seen += 1
            return self.linear(x)

    model = nn.Sequential(Counter(), nn.Linear(8, 8), nn.Linear(8, 8))
    before = snapshot(model)
    with pytest.raises(th.VerificationError, match=r"frozen module 0 \(Counter\) changed its buffer 'seen'"):
        th.replace_(model, [th.ModuleSpec("[1:3]", th.copy_module(0))], example_inputs=(torch.randn(2, 8),))
    assert_untouched(model, before)


class AppendingLinear(nn.Linear):
    def __init__(self):
        super().__init__(8, 8)

    def forward(self, x, seen):
        x = super().forward(x)
        seen.append(x)
        return x


class JumpingKnowledge(nn.Module):
    """The loop hands every layer a list to append its output to, and pools the list (PyG's jk)."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([AppendingLinear() for _ in range(4)])

    def forward(self, x):
        seen = []
        for layer in self.layers:
            x = layer(x, seen=seen)
        return torch.stack(seen).amax(0)


def test_verification_leaves_what_the_layers_receive_alone():
    """The layers must append to the loop's list, not to a copy the verification keeps for itself."""
    model = JumpingKnowledge()
    assert_replacement_equivalence(
        model, th.plan(model, "layers", num_groups=2, successor=th.copy_module(0)), (torch.randn(2, 8),)
    )


def test_a_refused_model_keeps_every_module_mode():
    model = StatePassing().train()
    model.layers[1].eval()  # a mode the container's train() would not give back
    before = snapshot(model)
    with pytest.raises(th.VerificationError, match="another 'position_bias' than layer 0"):
        th.replace_(
            model,
            th.plan(model, "layers", num_groups=2, successor=th.copy_module(0)),
            example_inputs=(torch.randn(3, 8),),
        )
    assert_untouched(model, before)


def test_a_model_under_replacement_can_be_copied_and_pickled():
    import copy
    import pickle

    model = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 4, enable_nested_tensor=False)
    th.replace_(model, th.plan(model, "layers", num_groups=2, successor=th.copy_module(0)))
    for twin in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert twin.layers[0].self_attn is twin.layers[0].predecessor.layers[0].self_attn
        twin.eval()(torch.randn(2, 3, 8))
