"""The old name of `theseus_adapters.resnet.successor_blocks` (the light successor architectures and the config that
rebuilds a ResNet holding them), kept because the README's examples import it: the same module under this name."""

import sys

from theseus_adapters.resnet import successor_blocks

sys.modules[__name__] = successor_blocks
