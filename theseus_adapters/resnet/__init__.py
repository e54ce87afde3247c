"""ResNets from torchvision and timm: fewer blocks per stage, optionally narrower.

A ResNet is a stem, stages ``layer1`` … ``layerN`` (each an ``nn.Sequential`` of
residual blocks whose first block may downsample: stride 2 and a projection
shortcut) and a head. `plan` cuts every stage into consecutive groups (uneven
allowed: 6 blocks into 2 groups is 3 + 3, 3 blocks into 2 is 2 + 1) and gives
each group one successor block, so ``blocks`` is the number of blocks per stage
after `theseus_core.Theseus.finalize`. The successor of the group that holds a
stage's downsampling block downsamples the same way (same stride, same shortcut).

Supported: torchvision ``ResNet`` (BasicBlock and Bottleneck: resnet18 … 152,
wide_resnet, resnext) and timm ``ResNet`` (the same ``layerN`` naming; its SE /
ECA attention, avg-pool shortcuts and drop path included). At full width the
finalized model is a plain ResNet with the new block counts: torchvision's
resnet34 compressed to ``blocks=(2, 2, 2, 2)`` has exactly resnet18's
architecture, and its state_dict loads into ``torchvision.models.resnet18()``
with ``strict=True``.

The successors come from the registry: this module registers `block_successor` as the default for
torchvision's and timm's ``BasicBlock`` and ``Bottleneck``, and the light blocks of
`theseus_adapters.resnet.successor_blocks` as the alternatives ``"mobilenet_v2"``, ``"shufflenet_v2"``,
``"depthwise_separable"`` and ``"narrow_basic"`` (``plan(model, blocks, successor="mobilenet_v2")``). A user's
registration for these types (a private registry passed to ``replace_``, or ``register_successor(BasicBlock,
replace=True)``) is what the plan then uses; each spec carries the options a factory may need.

Batch norm needs nothing here: `theseus_core.replace_` keeps the statistics of
every frozen batch norm (the predecessor blocks', and the stem's ``bn1`` unless
``train_others``) unchanged while the successors' batch norms train their own,
so ``restore()`` gives back the model that went in. In training mode frozen
batch norms normalise with the batch's statistics, as the original did; pass
``predecessor_eval=True`` to have the predecessor blocks use their running
statistics instead.

Example::

    import torchvision
    import theseus_core as th
    from theseus_adapters import resnet

    model = torchvision.models.resnet34(num_classes=10)  # fine-tuned predecessor, blocks (3, 4, 6, 3)
    theseus = th.replace_(model, resnet.plan(model, blocks=(2, 2, 2, 2)), example_inputs=(images,))
    ...  # train with a schedule (README quick start)
    torchvision.models.resnet18(num_classes=10).load_state_dict(theseus.finalize().state_dict())

The package by job: `planning` (`plan`, `stage_names`), `successors` (`block_successor` and the light successors,
`narrow_basic_successor` among them, registered on import), `narrowing` (`block_widths` and the in-place narrowing
behind ``width``), `successor_blocks` (the light successor architectures and the config that rebuilds a ResNet
holding them, torch and torchvision only),
`candidates` (what a budget search may put in place of each group: `candidates`, `flatten_stages`).
"""

from .candidates import candidates, flatten_stages
from .narrowing import block_widths
from .planning import INITS, BlocksPerStage, plan, stage_names
from .successors import LIGHT_SUCCESSORS, BlockSuccessor, block_successor, narrow_basic_successor

__all__ = [
    "INITS",
    "LIGHT_SUCCESSORS",
    "BlockSuccessor",
    "BlocksPerStage",
    "block_successor",
    "block_widths",
    "candidates",
    "flatten_stages",
    "narrow_basic_successor",
    "plan",
    "stage_names",
]
