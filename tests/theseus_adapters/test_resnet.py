"""The ResNet adapter on tiny random torchvision and timm ResNets, and the core on other timm families."""

import copy
import itertools
import re

import pytest
import timm
import torch
import torchvision
from hypothesis import given, settings
from hypothesis import strategies as st
from timm.layers import BlurPool2d
from timm.models import resnet as timm_resnet
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torchvision.models import resnet as tv_resnet

import theseus_core as th
from tests.hypothesis_profiles import examples
from theseus_adapters import resnet
from theseus_core.testing import assert_replacement_equivalence

NUM_CLASSES = 10


def images(seed: int = 0, batch_size: int = 2) -> torch.Tensor:
    return torch.randn(batch_size, 3, 32, 32, generator=torch.Generator().manual_seed(seed))


def randomize_batch_norms_(model: nn.Module, seed: int = 0) -> nn.Module:
    """Non-trivial statistics and affine parameters, so that eval mode depends on every batch norm."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, _BatchNorm):
                size = module.num_features
                module.running_mean.copy_(0.1 * torch.randn(size, generator=generator))
                module.running_var.copy_(0.5 + torch.rand(size, generator=generator))
                module.weight.copy_(0.5 + torch.rand(size, generator=generator))
                module.bias.copy_(0.1 * torch.randn(size, generator=generator))
    return model


def tiny_timm_resnet(layers=(2, 2, 2, 2), bottleneck=False, seed=0, **options) -> timm_resnet.ResNet:
    """A timm ResNet with planes 8..64 per stage (zero_init_last off, so every block's branch matters)."""
    torch.manual_seed(seed)
    block = timm_resnet.Bottleneck if bottleneck else timm_resnet.BasicBlock
    model = timm_resnet.ResNet(
        block,
        list(layers),
        num_classes=NUM_CLASSES,
        channels=(8, 16, 32, 64),
        stem_width=8,
        zero_init_last=False,
        **options,
    )
    return randomize_batch_norms_(model, seed)


def state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.clone() for name, tensor in module.state_dict().items()}


def assert_same_state(actual: dict, expected: dict) -> None:
    assert list(actual) == list(expected)
    for name, tensor in expected.items():
        assert torch.equal(actual[name], tensor), name


def batch_norms(module: nn.Module) -> list[_BatchNorm]:
    return [m for m in module.modules() if isinstance(m, _BatchNorm)]


def finalized(model: nn.Module, plan: th.Plan) -> nn.Module:
    return th.replace_(copy.deepcopy(model), plan).finalize()


# ------------------------------------------------------------- resnet34 → 18


def test_resnet34_compressed_to_2_2_2_2_is_exactly_resnet18():
    torch.manual_seed(0)
    model = randomize_batch_norms_(torchvision.models.resnet34(num_classes=NUM_CLASSES))
    source = copy.deepcopy(model.layer1[1])  # init="first": layer1's second successor starts from it
    theseus = th.replace_(model, resnet.plan(model, (2, 2, 2, 2)), example_inputs=(images(),))
    optimizer = torch.optim.SGD(theseus.successor_parameters(), lr=0.01)
    theseus.rate = 1.0
    for step in range(2):
        model.train()
        loss = nn.functional.cross_entropy(model(images(step)), torch.tensor([1, 2]))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    compact = theseus.finalize().eval()

    resnet18 = torchvision.models.resnet18(num_classes=NUM_CLASSES)
    resnet18.load_state_dict(compact.state_dict(), strict=True)
    resnet18.eval()
    assert repr(compact) == repr(resnet18)
    assert not torch.equal(resnet18.layer1[1].conv1.weight, source.conv1.weight)  # trained, not a stale copy
    with torch.no_grad():
        assert torch.equal(compact(images(5)), resnet18(images(5)))


def test_plan_groups_each_stage_into_consecutive_uneven_groups():
    model = torchvision.models.resnet34(num_classes=NUM_CLASSES)  # blocks (3, 4, 6, 3)
    paths = [spec.path for spec in resnet.plan(model, (2, 2, 2, 2))]
    assert paths == [
        "layer1[0:2]",
        "layer1[2:3]",
        "layer2[0:2]",
        "layer2[2:4]",
        "layer3[0:3]",
        "layer3[3:6]",
        "layer4[0:2]",
        "layer4[2:3]",
    ]
    explicit = resnet.plan(model, ((1, 2), 1, (1, 1, 4), 3))
    assert [spec.path for spec in explicit] == [
        "layer1[0:1]",
        "layer1[1:3]",
        "layer2[0:4]",
        "layer3[0:1]",
        "layer3[1:2]",
        "layer3[2:6]",
        "layer4[0:1]",
        "layer4[1:2]",
        "layer4[2:3]",
    ]
    mixed = resnet.plan(model, (1, 1, 1, 1), width=(1.0, 0.5, 1.0, 0.25))
    successors = [th.build_successor(model, spec) for spec in mixed]
    assert [type(successor).__name__ for successor in successors] == ["BasicBlock", "Projected"] * 2
    assert successors[3].inner.conv1.out_channels == 512 // 4


# ------------------------------------------------------------- initialisation


@pytest.mark.parametrize(
    ("init", "sources"),
    [("first", (0, 1)), ("every_other", (0, 3)), ("last", (4, 5)), ([(0,), (0,), (5, 2), (0,)], (5, 2))],
)
def test_each_successor_starts_from_its_source_block_and_keeps_the_stage_downsampling(init, sources):
    model = tiny_timm_resnet(layers=(1, 1, 6, 1), bottleneck=True)
    stage = model.layer3
    plan = resnet.plan(model, (1, 1, 2, 1), init=init)
    first_group, second_group = [spec for spec in plan if spec.path.startswith("layer3")]
    downsampling = th.build_successor(model, first_group)
    plain = th.build_successor(model, second_group)

    assert_same_state(state(plain), state(stage[sources[1]]))
    assert downsampling.conv2.stride == stage[0].conv2.stride == (2, 2)
    assert_same_state(state(downsampling.downsample), state(stage[0].downsample))
    source = stage[sources[0]]
    # conv1's input width differs between the downsampling block and the others: it stays the stage's own
    assert torch.equal(downsampling.conv1.weight, stage[0].conv1.weight)
    for name in ("bn1", "conv2", "bn2", "conv3", "bn3"):
        assert_same_state(state(getattr(downsampling, name)), state(getattr(source, name)))


def test_downsampling_block_as_source_of_a_later_group_gives_a_shape_preserving_successor():
    model = tiny_timm_resnet(layers=(1, 3, 1, 1))
    plan = resnet.plan(model, (1, 2, 1, 1), init=[(0,), (1, 0), (0,), (0,)])
    successor = th.build_successor(model, plan[2])
    assert successor.downsample is None and successor.conv1.stride == (1, 1)
    assert torch.equal(successor.conv2.weight, model.layer2[0].conv2.weight)
    assert torch.equal(successor.conv1.weight, model.layer2[2].conv1.weight)  # block 0's takes 8 channels, not 16


def test_fresh_successor_has_the_group_configuration_and_new_weights():
    model = tiny_timm_resnet(bottleneck=True)
    group = list(model.layer2)
    fresh = th.build_successor(model, resnet.plan(model, init="fresh")[2])
    expected = {name: tensor.shape for name, tensor in group[0].state_dict().items()}
    assert {name: tensor.shape for name, tensor in fresh.state_dict().items()} == expected
    assert fresh.conv2.stride == (2, 2) and fresh.downsample is not None
    predecessor_tensors = [t for block in group for t in block.state_dict().values() if t.dim() == 4]
    for name, tensor in fresh.state_dict().items():
        if tensor.dim() == 4:
            assert not any(torch.equal(tensor, t) for t in predecessor_tensors if t.shape == tensor.shape), name
    for norm in batch_norms(fresh):
        assert torch.equal(norm.running_mean, torch.zeros_like(norm.running_mean))
        assert torch.equal(norm.running_var, torch.ones_like(norm.running_var))
        assert torch.equal(norm.weight, torch.ones_like(norm.weight))


# ------------------------------------------------------------- narrower successors


def tiny_torchvision_bottleneck_resnet():
    torch.manual_seed(0)
    return randomize_batch_norms_(tv_resnet.ResNet(tv_resnet.Bottleneck, [2, 1, 1, 1], num_classes=NUM_CLASSES))


@pytest.mark.parametrize(
    "make_model",
    [
        tiny_torchvision_bottleneck_resnet,
        lambda: tiny_timm_resnet((2, 1, 1, 1), bottleneck=True, block_args={"attn_layer": "eca"}),
    ],
    ids=["torchvision", "timm-eca"],
)
def test_narrow_bottleneck_successors_get_1x1_projections_of_the_right_widths(make_model):
    # Module order misleads here: the last conv of a block is downsample[0], or ECA's one-channel Conv1d.
    model = make_model()
    plan = resnet.plan(model, (2, 1, 1, 1), width=0.5)
    groups = {}
    for spec in plan:
        name, start, stop = re.fullmatch(r"(layer\d)\[(\d+):(\d+)\]", spec.path).groups()
        groups[spec.path] = list(getattr(model, name))[int(start) : int(stop)]
    theseus = th.replace_(model, plan, example_inputs=(images(),))
    for site in theseus.sites:
        group, projected = groups[site.path], site.successor.inner
        successor, in_proj, out_proj = projected.inner, projected.in_proj, projected.out_proj
        assert in_proj.kernel_size == out_proj.kernel_size == (1, 1)
        in_width, out_width = group[0].conv1.in_channels, group[-1].conv3.out_channels
        assert (
            (in_proj.in_channels, in_proj.out_channels)
            == (in_width, in_width // 2)
            == (in_width, successor.conv1.in_channels)
        )
        assert (out_proj.in_channels, out_proj.out_channels) == (successor.conv3.out_channels, out_width)
        assert successor.conv3.out_channels == out_width // 2
        assert successor.conv2.stride == group[0].conv2.stride
        assert (successor.downsample is None) == (group[0].downsample is None)
        source = group[0].conv2.weight  # init="first": block j of the stage, here the group's first
        assert torch.equal(successor.conv2.weight, source[: source.shape[0] // 2, : source.shape[1] // 2])
    theseus.rate = 0.5
    for training in (True, False):
        assert model.train(training)(images()).shape == (2, NUM_CLASSES)
    compact = theseus.finalize()
    assert all(isinstance(getattr(compact, name)[0], th.Projected) for name in resnet.stage_names(compact))


# ------------------------------------------------------------- equivalence properties


@st.composite
def timm_cases(draw):
    bottleneck = draw(st.booleans())
    layers = draw(st.lists(st.integers(1, 3), min_size=4, max_size=4))
    blocks = []
    for total in layers:
        count = draw(st.integers(1, total))
        blocks.append(count if draw(st.booleans()) else tuple(group_sizes_of(draw, total, count)))
    counts = [b if isinstance(b, int) else len(b) for b in blocks]
    init = draw(
        st.sampled_from(resnet.INITS)
        | st.tuples(
            *(st.lists(st.integers(0, n - 1), min_size=m, max_size=m) for n, m in zip(layers, counts, strict=True))
        )
    )
    options = dict(
        avg_down=draw(st.booleans()),
        drop_path_rate=draw(st.sampled_from([0.0, 0.2])),
        block_args=dict(attn_layer=draw(st.sampled_from([None, "se", "eca"]))),
    )
    if bottleneck:
        options["cardinality"] = draw(st.sampled_from([1, 2]))
    width = draw(st.sampled_from([1.0, 0.5, (1.0, 0.5, 0.75, 0.5)]))
    model = tiny_timm_resnet(layers, bottleneck, seed=draw(st.integers(0, 1000)), **options)
    return model, blocks, counts, init, width


def group_sizes_of(draw, total: int, count: int) -> list[int]:
    cuts = draw(st.sets(st.integers(1, total - 1), min_size=count - 1, max_size=count - 1)) if total > 1 else set()
    return [stop - start for start, stop in itertools.pairwise([0, *sorted(cuts), total])]


@settings(max_examples=examples(20))
@given(timm_cases())
def test_timm_resnets_replace_and_finalize_equivalently(case):
    model, blocks, counts, init, width = case
    plan = resnet.plan(model, blocks, init=init, width=width)
    assert_replacement_equivalence(model, plan, (images(),))

    compact = finalized(model, plan)
    assert [len(getattr(compact, name)) for name in resnet.stage_names(model)] == counts
    with torch.no_grad():
        assert compact.eval()(images()).shape == (2, NUM_CLASSES)
        assert compact.forward_features(images()).shape == model.eval().forward_features(images()).shape


@settings(max_examples=examples(6))
@given(
    bottleneck=st.booleans(),
    layers=st.lists(st.integers(1, 2), min_size=4, max_size=4),
    init=st.sampled_from(resnet.INITS),
    width=st.sampled_from([1.0, 0.5]),
    seed=st.integers(0, 100),
)
def test_torchvision_resnets_replace_and_finalize_equivalently(bottleneck, layers, init, width, seed):
    torch.manual_seed(seed)
    if bottleneck:  # a small ResNeXt: 2 groups of width 16
        model = tv_resnet.ResNet(tv_resnet.Bottleneck, layers, num_classes=NUM_CLASSES, groups=2, width_per_group=16)
    else:
        model = tv_resnet.ResNet(tv_resnet.BasicBlock, layers, num_classes=NUM_CLASSES)
    randomize_batch_norms_(model, seed)
    plan = resnet.plan(model, [1] * 4, init=init, width=width)
    assert_replacement_equivalence(model, plan, (images(seed),))
    if width == 1:  # full width: the finalized model is the plain 1-block-per-stage ResNet
        compact = finalized(model, plan)
        block = type(model.layer1[0])
        plain = tv_resnet.ResNet(
            block, [1, 1, 1, 1], num_classes=NUM_CLASSES, **({"groups": 2, "width_per_group": 16} if bottleneck else {})
        )
        plain.load_state_dict(compact.state_dict(), strict=True)
        with torch.no_grad():
            assert torch.equal(plain.eval()(images()), compact.eval()(images()))


# ------------------------------------------------------------- batch norm


def test_training_at_half_rate_then_restore_gives_back_resnet34_bit_for_bit():
    """Default options, no helper to call after model.train(): frozen batch norms, the stem's included,
    keep their statistics."""
    torch.manual_seed(0)
    model = randomize_batch_norms_(torchvision.models.resnet34(num_classes=NUM_CLASSES))
    before = state(model)
    theseus = th.replace_(model, resnet.plan(model, blocks=(2, 2, 2, 2)), example_inputs=(images(),))
    optimizer = torch.optim.SGD(theseus.successor_parameters(), lr=0.1)
    theseus.rate = 0.5
    for step in range(4):
        model.train()
        nn.functional.cross_entropy(model(images(step)), torch.tensor([1, 2])).backward()
        optimizer.step()
        optimizer.zero_grad()
    assert any(0 < to_successor < calls for calls, to_successor in theseus.route_counts.values())  # both routes ran
    assert_same_state(state(theseus.restore()), before)


@pytest.mark.parametrize("predecessor_eval", [False, True])
def test_predecessor_batch_norms_keep_their_statistics_while_successors_train_theirs(predecessor_eval):
    model = tiny_timm_resnet(layers=(2, 2, 2, 2))
    theseus = th.replace_(model, resnet.plan(model, (1, 1, 1, 1)), predecessor_eval=predecessor_eval, seed=1)
    predecessors = [norm for site in theseus.sites for norm in batch_norms(site.predecessor)]
    successors = [norm for site in theseus.sites for norm in batch_norms(site.successor)]
    predecessors_before, successors_before = [state(n) for n in predecessors], [state(n) for n in successors]
    model.train()
    theseus.rate = 0.5
    for step in range(8):
        model(images(step))
    assert all(0 < to_successor < calls for calls, to_successor in theseus.route_counts.values())  # both routes ran
    # predecessor_eval chooses the statistics frozen batch norms compute with, never whether they change
    assert all(norm.training != predecessor_eval for norm in predecessors) and all(n.training for n in successors)
    for norm, saved in zip(predecessors, predecessors_before, strict=True):
        assert_same_state(state(norm), saved)
    for norm, saved in zip(successors, successors_before, strict=True):
        assert not torch.equal(norm.running_mean, saved["running_mean"])
        assert norm.num_batches_tracked > saved["num_batches_tracked"]


@pytest.mark.parametrize("train_others", [False, True])
def test_the_stem_batch_norm_keeps_its_statistics_unless_train_others(train_others):
    model = tiny_timm_resnet(layers=(1, 1, 1, 1))
    theseus = th.replace_(model, resnet.plan(model, (1, 1, 1, 1)), train_others=train_others)
    stem = state(model.bn1)
    theseus.rate = 1.0
    model.train()(images())
    assert model.bn1.training
    if train_others:
        assert not torch.equal(model.bn1.running_mean, stem["running_mean"])
    else:
        assert_same_state(state(model.bn1), stem)


# ------------------------------------------------------------- errors


def narrowed_and_finalized_resnet():
    model = tiny_timm_resnet(layers=(1, 1, 1, 1))
    return finalized(model, resnet.plan(model, (1, 1, 1, 1), width=0.5))


def late_downsampling_resnet():
    model = tiny_timm_resnet(layers=(1, 2, 1, 1))
    model.layer2 = nn.Sequential(model.layer2[1], model.layer2[0])
    return model


ERROR_CASES = [
    (lambda: nn.Sequential(nn.Conv2d(3, 8, 3)), {}, "supports torchvision and timm ResNets"),
    (tiny_timm_resnet, {"blocks": (2, 2, 2)}, "one entry per stage: this model has 4 stages"),
    (tiny_timm_resnet, {"blocks": "2222"}, "one entry per stage"),
    (tiny_timm_resnet, {"blocks": (3, 2, 2, 2)}, "asks layer1 to grow from 2 blocks"),
    (tiny_timm_resnet, {"blocks": (0, 2, 2, 2)}, "layer1 needs at least 1 block"),
    (tiny_timm_resnet, {"blocks": ((1, 2), 2, 2, 2)}, "must sum to its 2 blocks"),
    (tiny_timm_resnet, {"blocks": (2.0, 2, 2, 2)}, r"blocks\[0\] must be a block count"),
    (tiny_timm_resnet, {"init": "middle"}, "init must be one of"),
    (tiny_timm_resnet, {"init": [(0, 1), (0, 1)]}, "one sequence per stage"),
    (
        tiny_timm_resnet,
        {"init": [(0, 2), (0, 1), (0, 1), (0, 1)]},
        r"init for layer1 must hold 2 block indices in \[0, 2\)",
    ),
    (tiny_timm_resnet, {"init": [(0,), (0, 1), (0, 1), (0, 1)]}, "init for layer1 must hold 2"),
    (tiny_timm_resnet, {"width": 0}, r"in \(0, 1\]"),
    (tiny_timm_resnet, {"width": 1.5}, r"in \(0, 1\]"),
    (tiny_timm_resnet, {"width": (0.5, 0.5)}, "one per stage"),
    (lambda: tiny_timm_resnet(bottleneck=True, cardinality=4), {"width": 0.3}, "not multiples of its groups"),
    (lambda: tiny_timm_resnet(aa_layer=BlurPool2d), {"width": 0.5}, r"cannot narrow layer2\[0\].aa \(BlurPool2d\)"),
    (late_downsampling_resnet, {"blocks": (1, 1, 1, 1)}, r"layer2\[1\] downsamples, but only the first block"),
    (narrowed_and_finalized_resnet, {"blocks": (1, 1, 1, 1)}, r"layer1\[0\] is a narrowed successor"),
]


@pytest.mark.parametrize(("make_model", "arguments", "message"), ERROR_CASES)
def test_bad_arguments_raise_before_anything_changes(make_model, arguments, message):
    model = make_model()
    before, described = state(model), repr(model)
    with pytest.raises(ValueError, match=message):
        resnet.plan(model, **arguments)
    assert_same_state(state(model), before)
    assert repr(model) == described


def test_planning_a_model_under_replacement_raises():
    model = tiny_timm_resnet()
    theseus = th.replace_(model, resnet.plan(model, (1, 1, 1, 1)))
    with pytest.raises(ValueError, match="already under Theseus replacement"):
        resnet.plan(model)
    theseus.restore()
    assert len(resnet.plan(model)) == 8


# ------------------------------------------------------------- the core on other timm families


def tiny_vit():
    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, depth=4, num_classes=NUM_CLASSES)


def convnext_atto():
    torch.manual_seed(0)
    return timm.create_model("convnext_atto", pretrained=False, num_classes=NUM_CLASSES, drop_path_rate=0.1)


def narrow_vit_block(group):
    return timm.models.vision_transformer.Block(dim=96, num_heads=3)


@pytest.mark.parametrize(
    ("make_model", "make_specs", "lengths"),
    [
        (tiny_vit, lambda model: th.plan(model, "blocks", num_groups=2, successor=th.copy_module(0)), {"blocks": 2}),
        (
            tiny_vit,
            lambda model: [
                th.ModuleSpec("blocks[0:3]", narrow_vit_block, in_proj="linear", out_proj="linear"),
                th.ModuleSpec("blocks[3]", th.copy_module(0)),
            ],
            {"blocks": 2},
        ),
        (
            convnext_atto,
            lambda model: [
                th.ModuleSpec("stages[0].blocks[0:2]", th.copy_module(-1)),
                *th.plan(model, "stages.2.blocks", group_sizes=[3, 2, 1], successor=th.copy_module(0)),
            ],
            {"stages.0.blocks": 1, "stages.1.blocks": 2, "stages.2.blocks": 3, "stages.3.blocks": 2},
        ),
    ],
    ids=["vit", "vit-narrow", "convnext"],
)
def test_the_core_alone_compresses_other_timm_families(make_model, make_specs, lengths):
    model = make_model()
    specs = make_specs(model)
    assert_replacement_equivalence(model, specs, (images(),))
    compact = finalized(model, specs)
    assert {path: len(compact.get_submodule(path)) for path in lengths} == lengths
    with torch.no_grad():
        assert compact.eval()(images()).shape == (2, NUM_CLASSES)
