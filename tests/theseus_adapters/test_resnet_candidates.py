"""theseus_adapters.resnet.candidates: a searched ResNet is an ordinary ResNet once finalized."""

import copy

import pytest
import torch
from torchvision.models.resnet import BasicBlock, ResNet

import theseus_core as th
from theseus_adapters import resnet
from theseus_adapters.resnet import successor_blocks

pytest.importorskip("scipy")


def forward(model, batch):
    return model(batch)


def test_any_choice_of_candidates_finalizes_into_a_resnet_that_rebuilds_from_its_config():
    torch.manual_seed(0)
    model = ResNet(BasicBlock, [2, 3, 2, 2], num_classes=3).eval()
    images = torch.randn(4, 3, 32, 32)
    blocks = (1, 2, 1, 1)
    library = th.CandidateLibrary(
        model, resnet.candidates(model, blocks), example_inputs=[(images,)], on_finalize=resnet.flatten_stages
    )
    groups = library.paths
    assert len(groups) == sum(blocks)
    # skip only where a group keeps its shape: never a stage's downsampling group
    downsampling = [path for path in groups if "[0:" in path and not path.startswith("layer1")]
    assert len(downsampling) == 3 and all("skip" not in library.names(path) for path in downsampling)
    assert any("skip" in library.names(path) for path in groups)
    assert {"keep", "basic", *resnet.LIGHT_SUCCESSORS} <= set(library.names(groups[0]))
    choice = {path: library.names(path)[index % len(library.names(path))] for index, path in enumerate(groups)}
    choice[groups[0]] = "keep"  # a kept group of several blocks is spliced into its stage
    compressed = copy.deepcopy(model)
    theseus = th.replace_(compressed, library.plan(choice), example_inputs=[(images,)])
    finalized = theseus.finalize().eval()
    config = successor_blocks.export_config(finalized)
    rebuilt = successor_blocks.build_from_config(config)
    rebuilt.load_state_dict(finalized.state_dict(), strict=True)
    with torch.no_grad():
        torch.testing.assert_close(rebuilt.eval()(images), finalized(images))
    assert len(finalized.layer1) == 2  # layer1's one group kept: its two blocks
