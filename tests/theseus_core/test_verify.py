"""replace_ verifies before it accepts: with example inputs it runs the model at rate 0 after the surgery,
and undoes the surgery unless the original comes back exactly."""

import pytest
import torch
from torch import nn

import theseus_core as th
from theseus_core import runs
from theseus_core.runs import ExampleRun, Trace
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


class AuxiliaryLoss(nn.Module):
    """The loop sums what every layer returns beside its hidden states (a per-layer auxiliary loss)."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Layer() for _ in range(4)])

    def forward(self, x):
        total = 0
        for layer in self.layers:
            x, aux = layer(x, position_bias=torch.ones(8))
            total = total + aux.sum() * x.mean()
        return x, total


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            AuxiliaryLoss,
            r"output differs .* reads what the layers of group 'layers\[0:2\]' return beside the tensor that flows",
        ),
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


@pytest.mark.parametrize("build", [StatePassing, ConvAfterFirst, AuxiliaryLoss])
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


class CalibratesOnFirstCall(nn.Module):
    """A successor that takes a scale from its first input (as LSQ quantizers do), drawing from the RNG too."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.scale = nn.Parameter(torch.ones(1))
        self.register_buffer("calibrated", torch.zeros((), dtype=torch.bool))

    def forward(self, x):
        if not self.calibrated:
            self.scale.data.fill_(x.abs().mean().item() + torch.rand(()).item())
            self.calibrated.fill_(True)
            self.seen = x.shape
        return self.linear(x) * self.scale


def test_checking_the_successors_on_example_inputs_leaves_them_as_built():
    """replace_ runs each successor on its group's example input; a successor that calibrates on its first call
    must still calibrate on the first training batch, and the RNG must not move."""
    spec = [th.ModuleSpec("blocks[0:2]", lambda group: CalibratesOnFirstCall(16))]
    examples = ToyStack(num_blocks=4).example_inputs()
    drawn_next = []
    for example_inputs in (None, examples):  # building the successor draws; checking it must not
        torch.manual_seed(0)
        theseus = th.replace_(ToyStack(num_blocks=4), spec, example_inputs=example_inputs)
        drawn_next.append(torch.rand(()))
    assert torch.equal(*drawn_next)
    (successor,) = [site.successor.inner for site in theseus.sites]
    assert not successor.calibrated and successor.scale.item() == 1.0 and not hasattr(successor, "seen")
    assert successor.training


def test_a_successor_holding_lazy_modules_materialises_on_the_check():
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
    spec = [th.ModuleSpec("[0:2]", lambda group: nn.Sequential(nn.LazyLinear(8), nn.ReLU()))]
    theseus = th.replace_(model, spec, example_inputs=(torch.randn(2, 8),))
    (successor,) = [site.successor.inner for site in theseus.sites]
    assert successor[0].weight.shape == (8, 8) and successor.training
    theseus.rate = 1.0
    model(torch.randn(2, 8)).sum().backward()
    assert successor[0].weight.grad is not None


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


class Counter(nn.Module):
    """Counts its training-mode calls in a buffer (a statistic theseus_core does not hold still)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("seen", torch.zeros(()))
        self.linear = nn.Linear(8, 8)

    def forward(self, x):
        if self.training:
            self.seen += 1
        return self.linear(x)


@pytest.mark.parametrize(
    ("layers", "group", "message"),
    [
        ("CLL", "[1:3]", r"frozen module 0 \(Counter\) changed its buffer 'seen' .* \(train_others=True\)"),
        # named as in the original, whose container the surgery renumbers (the site is [0] now, the Counter [1])
        ("LLC", "[0:2]", r"frozen module 2 \(Counter\) changed its buffer 'seen' .* \(train_others=True\)"),
        # in a group, train_others cannot help: the group's modules are the predecessor, frozen whatever it says
        ("CLL", "[0:2]", r"frozen module 0 \(Counter\) .* in eval mode while replacing \(predecessor_eval=True\)"),
    ],
)
def test_a_frozen_module_that_writes_another_buffer_is_refused_by_its_name_with_what_helps(layers, group, message):
    model = nn.Sequential(*(Counter() if kind == "C" else nn.Linear(8, 8) for kind in layers))
    before = snapshot(model)
    with pytest.raises(th.VerificationError, match=message):
        th.replace_(model, [th.ModuleSpec(group, th.copy_module(0))], example_inputs=(torch.randn(2, 8),))
    assert_untouched(model, before)
    if "predecessor_eval" in message:  # what it advises works
        th.replace_(
            model, [th.ModuleSpec(group, th.copy_module(0))], example_inputs=(torch.randn(2, 8),), predecessor_eval=True
        )


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


# -------------------------------------------------------- both modes, several batches, the original checked first


class EvalFastPath(nn.Module):
    """In eval mode the loop calls each layer's fused path by name, which a site passes to its first layer."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(4)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x) if self.training else nn.functional.linear(x, layer.weight, layer.bias)
        return x


def test_eval_mode_is_verified_as_well_as_training_mode():
    model = EvalFastPath()
    before = snapshot(model)
    specs = th.plan(model, "layers", num_groups=2, successor=th.copy_module(0))
    with pytest.raises(th.VerificationError, match=r"at rate 0 \(the example batch in eval mode\)"):
        th.replace_(model, specs, example_inputs=(torch.randn(3, 8),))
    assert_untouched(model, before)


class WindowedStack(nn.Module):
    """Layer i sees only the last 4 positions when i is even (a sliding window): for 4 positions or fewer every
    layer gets the same mask."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Masked() for _ in range(4)])

    def forward(self, x):
        positions = torch.arange(x.shape[1])
        window = (positions[:, None] - positions[None, :]).abs() < 4
        full = torch.ones_like(window)
        for index, layer in enumerate(self.layers):
            x = layer(x, mask=window if index % 2 == 0 else full)
        return x


class Masked(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x, mask):
        return self.linear(torch.einsum("st,btd->bsd", mask.float() / mask.sum(1, keepdim=True), x))


def test_several_example_batches_catch_what_a_short_one_hides():
    model = WindowedStack()
    specs = th.plan(model, "layers", num_groups=2, successor=th.copy_module(0))
    short, long = torch.randn(2, 4, 8), torch.randn(2, 9, 8)
    th.replace_(model, specs, example_inputs=(short,)).restore()  # every mask is full at 4 positions
    before = snapshot(model)
    with pytest.raises(th.VerificationError, match=r"example batch 1 .*another 'mask' than layer 0"):
        th.replace_(model, specs, example_inputs=[(short,), (long,)])
    assert_untouched(model, before)


@pytest.mark.parametrize(
    ("examples", "error", "message"),
    [([], ValueError, "empty list"), ([torch.randn(2, 8)], TypeError, r"example_inputs\[0\] must be a tuple")],
)
def test_example_batches_are_checked_before_anything_runs(examples, error, message):
    model = ToyStack()
    with pytest.raises(error, match=message):
        th.replace_(model, [th.ModuleSpec("blocks[0:2]", th.copy_module(0))], example_inputs=examples)


def test_a_plan_adds_batches_of_its_own():
    model = WindowedStack()
    specs = th.plan(model, "layers", num_groups=2, successor=th.copy_module(0))
    longer = th.Plan(specs.specs, more_examples=lambda args, kwargs: [((torch.cat([args[0]] * 3, 1),), kwargs)])
    with pytest.raises(th.VerificationError, match=r"example batch 1 .*another 'mask'"):
        th.replace_(model, longer, example_inputs=(torch.randn(2, 4, 8),))


class NumpyNoise(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(4)])

    def forward(self, x):
        import numpy as np

        if self.training:  # an augmentation drawn from numpy, as SpecAugment's masks
            x = x * torch.from_numpy(np.random.rand(*x.shape).astype("float32"))
        for layer in self.layers:
            x = layer(x)
        return x


class Rebuilding(nn.Module):
    """Swaps a layer for another on a short batch (BigBird switching to full attention)."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(4)])

    def forward(self, x):
        if x.shape[0] < 4:
            self.layers[2] = nn.Linear(8, 8)
        for layer in self.layers:
            x = layer(x)
        return x


class RewritingWeights(nn.Module):
    """Rescales its layers' weights in place in eval mode and back in training mode (RWKV's rescale_every)."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(4)])
        self.rescaled = False

    def forward(self, x):
        if self.rescaled == self.training:
            with torch.no_grad():
                for layer in self.layers:
                    layer.weight.mul_(2.0 if self.training else 0.5)
            self.rescaled = not self.training
        for layer in self.layers:
            x = layer(x)
        return x


class WritingThenSwapping(nn.Module):
    """Writes into a layer's weight in place, then puts a copy of the weight as it was in its place: the run's check
    compares the copy (unchanged), and what is put back must still be the original, with its values."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(4)])

    def forward(self, x):
        weight = self.layers[1].weight
        copy = nn.Parameter(weight.detach().clone())
        with torch.no_grad():
            weight.mul_(3.0)
        self.layers[1].weight = copy
        for layer in self.layers:
            x = layer(x)
        return x


class ResizingWeight(nn.Module):
    """Sets a weight's ``.data`` to a tensor of another shape and uses it (a cache grown in place): the run must put
    the original's shape back, not only its values."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(4)])

    def forward(self, x):
        head = self.layers[3]
        head.weight.data = torch.cat([head.weight.data, head.weight.data])
        head.bias.data = torch.cat([head.bias.data, head.bias.data])
        for layer in self.layers:
            x = layer(x)
        return x


class Counting(nn.Module):
    """On every run writes into a buffer and into a weight in place, and into another weight: in training mode by
    setting its ``.data`` to a larger tensor, in eval mode in place."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(2)])
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        with torch.no_grad():
            self.calls += 1
            self.layers[0].weight.mul_(2.0)
        head = self.layers[1]
        if self.training:
            head.weight.data = torch.cat([head.weight.data, head.weight.data])
        else:
            with torch.no_grad():
                head.weight.mul_(3.0)
        return x @ self.layers[0].weight.T + self.calls + head.weight.sum()


def test_runs_sharing_one_copy_each_start_from_the_model_as_it_was_and_leave_it_so():
    model = Counting()
    before = snapshot(model)
    run = ExampleRun(model, [((torch.randn(3, 8),), {})], seed=0, frozen=[])
    with run.one_copy():
        traces = [run(Trace(), run.batches[0], training, lambda: None) for training in (True, False, True)]
        assert_untouched(model, before)
    for trace in traces:  # each run found the same writes: it started from the values as they were
        assert sorted(key for _, key in trace.written) == ["calls", "weight", "weight"]
    assert torch.equal(traces[2].output, traces[0].output)  # the same mode, the same result
    assert run._copies is None  # the copies go with the block


def test_a_comparison_that_raises_still_puts_everything_back(monkeypatch):
    """A comparison can raise (``torch.equal`` across devices, a tensor type without it): the run's writes are put
    back all the same, in every module, before the error goes on."""
    model = Counting()
    before = snapshot(model)
    run = ExampleRun(model, [((torch.randn(3, 8),), {})], seed=0, frozen=[])
    compared = runs._changed

    def failing(tensor, saved):
        if tensor.dim() == 0:  # the buffer, written by the run
            raise NotImplementedError("no equal for this tensor")
        return compared(tensor, saved)

    monkeypatch.setattr(runs, "_changed", failing)
    with pytest.raises(NotImplementedError):
        run(Trace(), run.batches[0], True, lambda: None)
    assert_untouched(model, before)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (NumpyNoise, r"two training-mode runs of the original .* outside torch's RNG"),
        (WritingThenSwapping, r"replaced its own parameter 'weight' of layers\.1 \(Linear\)"),
        (Rebuilding, r"replaced its own submodule '2' of layers \(ModuleList\).*rebuilds itself"),
        (RewritingWeights, r"in eval mode wrote into its own weights \(layers\.0\.weight"),
        (ResizingWeight, r"in training mode wrote into its own weights \(layers\.3\.weight, in place\)"),
    ],
)
def test_the_original_is_checked_against_itself_before_the_sites_are_blamed(build, message):
    model = build()
    before, layers = snapshot(model), list(model.layers)
    specs, inputs = th.plan(model, "layers", num_groups=2, successor=th.copy_module(0)), (torch.randn(3, 8),)
    rng = torch.get_rng_state()
    with pytest.raises(th.VerificationError, match=message):
        th.replace_(model, specs, example_inputs=inputs)
    assert_untouched(model, before)
    assert all(a is b for a, b in zip(model.layers, layers, strict=True))  # the same modules, not equal ones
    assert vars(model).get("rescaled", False) is False
    assert torch.equal(torch.get_rng_state(), rng)


def test_an_error_from_inside_the_model_stays_chained():
    model = Indexing()
    with pytest.raises(th.VerificationError) as raised:
        th.replace_(
            model,
            th.plan(model, "layers", num_groups=2, successor=th.copy_module(0)),
            example_inputs=(torch.randn(3, 8),),
        )
    assert isinstance(raised.value.__cause__, IndexError)


class ConvUnit(nn.Module):
    """Declares in_channels / out_channels like a torch-geometric layer, but is a convolution (timm's ConvNormAct)."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.bn = nn.BatchNorm2d(out_channels)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


class MatrixUnit(nn.Module):
    """Declares its widths and holds a raw weight matrix (features last), like a message-passing layer."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.weight = nn.Parameter(torch.randn(in_channels, out_channels) / 4)

    def forward(self, x):
        return x @ self.weight


@pytest.mark.parametrize(
    ("unit", "inputs", "projection"),
    [(ConvUnit, torch.randn(2, 8, 5, 5), nn.Conv2d), (MatrixUnit, torch.randn(2, 8), nn.Linear)],
)
def test_boundary_widths_follow_the_weight_layout(unit, inputs, projection):
    torch.manual_seed(0)
    model = nn.Sequential(*(unit(8, 8) for _ in range(4)))
    spec = th.ModuleSpec("[0:2]", lambda group: unit(8, 4), out_proj="linear")
    assert_replacement_equivalence(model, [spec], (inputs,))
    assert isinstance(th.replace_(model, [spec]).sites[0].successor.out_proj, projection)


def test_a_registered_example_check_refuses_the_batches_before_any_change():
    from theseus_core import prepare

    def needs_eight_rows(model, batches):
        rows = max(args[0].shape[0] for args, _ in batches)
        return None if rows > 8 else f"model.rows = 8, and the longest batch has {rows} rows"

    th.register_example_check(needs_eight_rows)
    try:
        with pytest.raises(ValueError, match="registered as an example check already"):
            th.register_example_check(needs_eight_rows)
        model = ToyStack()
        specs = [th.ModuleSpec("blocks[0:2]", th.copy_module(0))]
        before = snapshot(model)
        with pytest.raises(th.VerificationError, match=r"^model.rows = 8, and the longest batch has 4 rows\. The "):
            th.replace_(model, specs, example_inputs=(torch.randn(4, 8),))
        assert_untouched(model, before)
        th.replace_(model, specs, example_inputs=[(torch.randn(4, 8),), (torch.randn(9, 8),)]).restore()
    finally:
        prepare._EXAMPLE_CHECKS.remove(needs_eight_rows)
