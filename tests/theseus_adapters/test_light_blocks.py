"""Heterogeneous ResNet successors: light blocks picked by name in `resnet.plan`, trained in place of
groups of BasicBlocks / Bottlenecks, finalized into an ordinary module tree that a saved config rebuilds
without theseus."""

import copy
import json
import textwrap

import pytest
import timm
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from timm.models import resnet as timm_resnet
from torch import nn
from torchvision.models import resnet as tv_resnet

import theseus_core as th
from tests.hypothesis_profiles import examples
from tests.theseus_adapters.test_hf import WITHOUT_THESEUS, run_without_theseus
from tests.theseus_adapters.test_resnet import randomize_batch_norms_
from theseus_adapters import resnet
from theseus_adapters.resnet import successor_blocks as light_blocks

KINDS = tuple(light_blocks.BLOCKS)
NARROW = light_blocks.NarrowBasic.kind  # a narrower BasicBlock: it refuses groups of Bottlenecks
CASES = [(kind, bottleneck) for kind in KINDS for bottleneck in (False, True) if not (bottleneck and kind == NARROW)]

REBUILD = WITHOUT_THESEUS + textwrap.dedent(
    """
    import importlib.util

    spec = importlib.util.spec_from_file_location("light_blocks", sys.argv[1])  # the file alone, as a user copies it
    light_blocks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(light_blocks)
    for folder in sys.argv[2:]:
        with open(f"{folder}/config.json") as file:
            model = light_blocks.build_from_config(json.load(file))
        model.load_state_dict(torch.load(f"{folder}/model.pt"), strict=True)
        with torch.no_grad():
            torch.save(model.eval()(torch.load(f"{folder}/images.pt")), f"{folder}/logits.pt")
    """
)


def tiny_torchvision(bottleneck: bool) -> torch.nn.Module:
    torch.manual_seed(0)
    block, layers = (tv_resnet.Bottleneck, [1, 2, 1, 1]) if bottleneck else (tv_resnet.BasicBlock, [2, 2, 2, 2])
    return tv_resnet.ResNet(block, layers, num_classes=3).eval()


def images(size: int = 32) -> torch.Tensor:
    return torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1))


def compress(model: torch.nn.Module, kind: str, blocks: tuple = (1, 1, 1, 1)) -> torch.nn.Module:
    """Replacing with light successors, one training step at rate 0.5, then finalize."""
    theseus = th.replace_(model, resnet.plan(model, blocks, successor=kind), example_inputs=(images(),))
    theseus.rate = 0.5
    optimizer = torch.optim.SGD(theseus.successor_parameters(), lr=0.01)
    model.train()
    model(images()).sum().backward()  # with rate 0.5 and 4 groups, seed 0 takes some successor
    optimizer.step()
    return theseus.finalize().eval()


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory):
    """Per (kind, block type): the finalized model's logits, and those of the model a process without theseus
    rebuilt from the saved config and state_dict."""
    folder = tmp_path_factory.mktemp("light")
    results, folders = {}, []
    for kind, bottleneck in CASES:
        compact = compress(tiny_torchvision(bottleneck), kind, (1, 1, 1, 1) if bottleneck else (1, 2, 1, 1))
        case = folder / f"{kind}-{bottleneck}"
        case.mkdir()
        (case / "config.json").write_text(json.dumps(light_blocks.export_config(compact)))
        torch.save(compact.state_dict(), case / "model.pt")
        torch.save(images(), case / "images.pt")
        with torch.no_grad():
            results[kind, bottleneck] = {"model": compact, "logits": compact(images())}
        folders.append(str(case))
    run_without_theseus(REBUILD, light_blocks.__file__, *folders)
    for entry, case in zip(results.values(), folders, strict=True):
        entry["rebuilt"] = torch.load(f"{case}/logits.pt")
    return results


@pytest.mark.parametrize(("kind", "bottleneck"), CASES)
def test_finalized_model_is_rebuilt_from_its_config_without_theseus(rebuilt, kind, bottleneck):
    entry = rebuilt[kind, bottleneck]
    torch.testing.assert_close(entry["rebuilt"], entry["logits"], rtol=0, atol=0)
    compact = entry["model"]
    stages = [compact.layer1, compact.layer2, compact.layer3, compact.layer4]
    assert all(isinstance(block, light_blocks.BLOCKS[kind]) for stage in stages for block in stage)
    assert not any(isinstance(module, (th.ReplacementSite, th.Projected)) for module in compact.modules())


@pytest.mark.parametrize(("kind", "bottleneck"), CASES)
def test_light_successors_take_the_groups_stride_and_widths(kind, bottleneck):
    model = tiny_torchvision(bottleneck)  # Bottleneck: layer1 widens 64 -> 256 at stride 1; layer2 downsamples
    theseus = th.replace_(model, resnet.plan(model, (1, 1, 1, 1), successor=kind), example_inputs=(images(),))
    blocks = {site.path: site.successor.inner for site in theseus.sites}
    widths = (64, 256, 512, 1024, 2048) if bottleneck else (64, 64, 128, 256, 512)
    assert [(b.in_channels, b.out_channels, b.stride) for b in blocks.values()] == [
        (widths[0], widths[1], 1),
        (widths[1], widths[2], 2),
        (widths[2], widths[3], 2),
        (widths[3], widths[4], 2),
    ]
    predecessor = sum(p.numel() for site in theseus.sites for p in site.predecessor.parameters())
    assert sum(p.numel() for p in theseus.successor_parameters()) < predecessor


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("in_channels", "out_channels", "stride"), [(8, 8, 1), (8, 16, 2), (8, 16, 1), (16, 8, 2)])
def test_light_blocks_map_shapes_as_their_config_says(kind, in_channels, out_channels, stride):
    block = light_blocks.BLOCKS[kind](in_channels, out_channels, stride)
    assert block(torch.randn(2, in_channels, 9, 9)).shape == (
        2,
        out_channels,
        5 if stride == 2 else 9,
        5 if stride == 2 else 9,
    )
    again = light_blocks.build_block(json.loads(json.dumps(block.config())))
    assert again.config() == block.config() and again.state_dict().keys() == block.state_dict().keys()


def test_timm_resnets_take_light_successors_too():
    torch.manual_seed(0)
    model = timm.create_model("resnet26d", pretrained=False, num_classes=3).eval()  # deep stem, avg-pool shortcut
    compact = compress(model, "shufflenet_v2", (1, 1, 1, 1))
    assert isinstance(compact.layer2[0], light_blocks.ShuffleUnit) and compact(images()).shape == (2, 3)
    with pytest.raises(ValueError, match="describes torchvision ResNets"):
        light_blocks.export_config(compact)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"successor": "mobilenet_v2", "width": 0.5}, ValueError, "leave width at 1"),
        ({"successor": "mobilenet"}, LookupError, r"no successor 'mobilenet' .*'mobilenet_v2', .*'shufflenet_v2'"),
        (  # a misspelt option was dropped
            {"successor": "mobilenet_v2", "options": {"hiden_channels": 96}},
            TypeError,
            r"mobilenet_v2 takes no option 'hiden_channels'; its options are \['hidden_channels'",
        ),
        ({"successor": "mobilenet_v2", "options": {"hidden_channels": 0}}, ValueError, "a positive integer, got 0"),
    ],
)
def test_named_successors_are_checked(options, error, message):
    model = tiny_torchvision(bottleneck=False)
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(error, match=message):
        th.replace_(model, resnet.plan(model, (1, 1, 1, 1), **options))
    assert all(torch.equal(tensor, before[key]) for key, tensor in model.state_dict().items())


def test_a_users_own_alternative_is_picked_by_name():
    private = th.SuccessorRegistry()

    @private.register(tv_resnet.BasicBlock, "plain_conv")
    def plain_conv(group, *, in_channels, out_channels, stride):
        return torch.nn.Sequential(torch.nn.Conv2d(in_channels, out_channels, 3, stride, 1), torch.nn.ReLU())

    model = tiny_torchvision(bottleneck=False)
    plan = resnet.plan(model, (1, 1, 1, 1), successor="plain_conv")
    theseus = th.replace_(model, plan, registry=private, example_inputs=(images(),))
    assert all(isinstance(site.successor.inner, torch.nn.Sequential) for site in theseus.sites)


# ------------------------------------------------------------------ the narrow BasicBlock, started from a BasicBlock
def basic_block(library: str, in_channels: int, out_channels: int, stride: int, seed: int) -> nn.Module:
    """A torchvision or timm BasicBlock with a projection shortcut where the shape changes, every weight and
    batch-norm statistic random, in eval mode."""
    torch.manual_seed(seed)
    downsample = None
    if stride != 1 or in_channels != out_channels:
        downsample = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, 1, stride, bias=False), nn.BatchNorm2d(out_channels)
        )
    block_type = tv_resnet.BasicBlock if library == "torchvision" else timm_resnet.BasicBlock
    return randomize_batch_norms_(block_type(in_channels, out_channels, stride, downsample), seed).eval()


def narrow_successor(block: nn.Module, stride: int, hidden_channels: int | None) -> light_blocks.NarrowBasic:
    widths = {"in_channels": block.conv1.in_channels, "out_channels": block.conv2.out_channels, "stride": stride}
    return resnet.LIGHT_SUCCESSORS[NARROW]([block], **widths, hidden_channels=hidden_channels).eval()


block_shapes = st.tuples(
    st.sampled_from(["torchvision", "timm"]),
    st.integers(1, 12),  # in_channels
    st.integers(1, 12),  # out_channels
    st.sampled_from([1, 2]),  # stride
    st.integers(0, 2**16),  # seed
)


@settings(max_examples=examples(30), deadline=None)
@given(block_shapes)
def test_a_narrow_block_as_wide_inside_as_the_basicblock_it_starts_from_computes_exactly_what_it_does(shape):
    library, in_channels, out_channels, stride, seed = shape
    block = basic_block(library, in_channels, out_channels, stride, seed)
    narrow = narrow_successor(block, stride, hidden_channels=out_channels)
    x = torch.randn(2, in_channels, 9, 9, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        torch.testing.assert_close(narrow(x), block(x), rtol=0, atol=0)


@settings(max_examples=examples(30), deadline=None)
@given(block_shapes.filter(lambda shape: shape[2] >= 2), st.data())
def test_a_narrow_block_keeps_the_basicblocks_strongest_inner_channels(shape, data):
    """It computes what the BasicBlock does with its other inner channels cut (their weights in ``conv2``
    zeroed), and every ``conv1`` filter it keeps has an L1 norm at least that of every filter it drops."""
    library, in_channels, out_channels, stride, seed = shape
    hidden = data.draw(st.integers(1, out_channels - 1), label="hidden_channels")
    block = basic_block(library, in_channels, out_channels, stride, seed)
    narrow = narrow_successor(block, stride, hidden)
    norms = block.conv1.weight.abs().flatten(1).sum(dim=1)
    kept = [i for i in range(out_channels) if any(torch.equal(block.conv1.weight[i], w) for w in narrow.conv1.weight)]
    assert len(kept) == hidden == narrow.config()["hidden_channels"]
    assert torch.equal(narrow.conv1.weight, block.conv1.weight[kept])  # in the BasicBlock's order
    dropped = [i for i in range(out_channels) if i not in kept]
    assert norms[kept].min() >= norms[dropped].max()
    x = torch.randn(2, in_channels, 9, 9, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        block.conv2.weight[:, dropped] = 0
        torch.testing.assert_close(narrow(x), block(x))


@settings(max_examples=examples(30), deadline=None)
@given(st.integers(1, 64), st.integers(2, 64), st.sampled_from([1, 2]))
def test_a_narrow_block_at_its_default_width_has_fewer_parameters_than_a_basicblock(in_channels, out_channels, stride):
    block = basic_block("torchvision", in_channels, out_channels, stride, seed=0)
    narrow = light_blocks.NarrowBasic(in_channels, out_channels, stride)
    assert narrow.hidden_channels == out_channels // 2
    assert sum(p.numel() for p in narrow.parameters()) < sum(p.numel() for p in block.parameters())


def test_a_narrow_block_wider_inside_than_the_group_is_fresh_and_a_bottleneck_group_is_refused():
    block = basic_block("torchvision", 8, 8, 1, seed=0)
    wider = narrow_successor(block, 1, hidden_channels=16)
    assert wider.config() == {"kind": NARROW, "in_channels": 8, "out_channels": 8, "stride": 1, "hidden_channels": 16}
    assert not torch.equal(wider.conv1.weight[:8], block.conv1.weight)
    model = tiny_torchvision(bottleneck=True)
    with pytest.raises(ValueError, match=r"narrow_basic replaces groups of BasicBlocks .* starts with a Bottleneck"):
        th.replace_(model, resnet.plan(model, (1, 1, 1, 1), successor=NARROW), example_inputs=(images(),))


@pytest.mark.parametrize("extra", ["se", "aa"])
def test_a_narrow_block_refuses_a_timm_block_with_parts_it_would_drop(extra):
    if extra == "se":
        block, stride = timm_resnet.BasicBlock(8, 8, attn_layer="se"), 1
    else:  # anti-aliasing runs where the block downsamples
        shortcut = nn.Sequential(nn.Conv2d(8, 8, 1, 2, bias=False), nn.BatchNorm2d(8))
        block, stride = timm_resnet.BasicBlock(8, 8, stride=2, downsample=shortcut, aa_layer=nn.AvgPool2d), 2
    with pytest.raises(ValueError, match=f"also has {extra}, which it would drop"):
        narrow_successor(block.eval(), stride, None)


def test_a_narrow_block_refuses_a_dilated_block():
    """A ResNet of output_stride 8 dilates its last stages' convolutions, which a NarrowBasic does not."""
    block = timm_resnet.BasicBlock(8, 8, dilation=2, first_dilation=2)
    with pytest.raises(ValueError, match=r"dilated \(2, 2\) .* use another successor"):
        narrow_successor(block.eval(), 1, None)
