"""theseus_adapters.resnet.candidates: a searched ResNet is an ordinary ResNet once finalized."""

import copy
import functools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torchvision.models.resnet import BasicBlock, ResNet

import theseus_core as th
from tests.hypothesis_profiles import examples
from tests.theseus_adapters.test_resnet import tiny_timm_resnet
from theseus_adapters import resnet
from theseus_adapters.resnet import successor_blocks

pytest.importorskip("scipy")

BLOCKS = (1, 2, 1, 1)


@functools.cache
def library_and_inputs():
    """A ResNet with stages of 2, 3, 2, 2 blocks, its library over groups ``BLOCKS`` per stage, and images."""
    torch.manual_seed(0)
    model = ResNet(BasicBlock, [2, 3, 2, 2], num_classes=3).eval()
    images = torch.randn(4, 3, 32, 32)
    library = th.CandidateLibrary(
        model, resnet.candidates(model, BLOCKS), example_inputs=[(images,)], on_finalize=resnet.flatten_stages
    )
    return model, library, images


def test_skip_is_offered_only_where_a_group_keeps_its_shape():
    _, library, _ = library_and_inputs()
    groups = library.paths
    assert len(groups) == sum(BLOCKS)
    downsampling = [path for path in groups if "[0:" in path and not path.startswith("layer1")]
    assert len(downsampling) == 3 and all("skip" not in library.names(path) for path in downsampling)
    assert any("skip" in library.names(path) for path in groups)
    assert {"keep", "basic", *resnet.LIGHT_SUCCESSORS} <= set(library.names(groups[0]))


@settings(max_examples=examples(12), deadline=None)  # a second each: the parameters copied by replace_'s checks
@given(st.data())
def test_any_choice_of_candidates_finalizes_into_a_resnet_that_rebuilds_from_its_config(data):
    """Kept groups are spliced into their stage, skipped ones removed, a stage whose every group is skipped is
    empty; the config describes the result, and the model it builds loads it strictly and computes the same."""
    model, library, images = library_and_inputs()
    choice = {path: data.draw(st.sampled_from(library.names(path)), label=path) for path in library.paths}
    compressed = copy.deepcopy(model)
    theseus = th.replace_(compressed, library.plan(choice), example_inputs=[(images,)])
    finalized = theseus.finalize().eval()
    config = successor_blocks.export_config(finalized)
    rebuilt = successor_blocks.build_from_config(config)
    rebuilt.load_state_dict(finalized.state_dict(), strict=True)
    with torch.no_grad():
        torch.testing.assert_close(rebuilt.eval()(images), finalized(images))
    layer1 = {"keep": 2, "skip": 0}.get(choice["layer1[0:2]"], 1)  # layer1's one group: its two blocks, none, or one
    assert len(finalized.layer1) == len(rebuilt.layer1) == layer1


def test_a_bottleneck_resnets_library_records_narrow_basic_as_refused_and_offers_the_other_light_blocks():
    model = tiny_timm_resnet(layers=(1, 1, 1, 1), bottleneck=True).eval()
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    library = th.CandidateLibrary(model, resnet.candidates(model, (1, 1, 1, 1)), example_inputs=[(images,)])
    narrow = successor_blocks.NarrowBasic.kind
    for path in library.paths:
        assert narrow not in library.names(path)
        assert "starts with a Bottleneck" in library.refused[(path, narrow)]
        assert {"keep", "basic", *resnet.LIGHT_SUCCESSORS} - set(library.names(path)) == {narrow}
