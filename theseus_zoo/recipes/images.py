"""The ResNet family's recipes."""

from __future__ import annotations

from .recipe import Phase, Recipe, register_recipe

RESNET_FASHION_MNIST = register_recipe(
    Recipe(
        name="resnet-fashion-mnist",
        family="resnet",
        description="torchvision ResNet-34 -> ResNet-18 on Fashion-MNIST 28x28, all trained from scratch in ~9 "
        "CPU-minutes: short phases, the predecessor far from converged",
        options={"architecture": "resnet34", "blocks": (2, 2, 2, 2), "dev_size": 1000, "test_size": 5000},
        predecessor=Phase(steps=160, lr=1e-3, batch_size=64, eval_every=80),
        replacing=Phase(steps=100, lr=5e-4, batch_size=64, eval_every=50),
        steps_to_one=25,
        patience=None,
    )
)

RESNET_FASHION_MNIST_GPU = register_recipe(
    Recipe(
        name="resnet-fashion-mnist-gpu",
        family="resnet",
        description="ResNet-34 -> ResNet-18 on Fashion-MNIST, the predecessor trained ~9 epochs (for a GPU; not run "
        "yet)",
        options={"architecture": "resnet34", "blocks": (2, 2, 2, 2), "dev_size": 5000},
        predecessor=Phase(steps=4000, lr=1e-3, batch_size=128, eval_every=500),
        replacing=Phase(steps=3000, lr=3e-4, batch_size=128, eval_every=250),
        steps_to_one=1500,
        patience=4,
    )
)

# Heterogeneous successors (the registry issue): the same comparison with each group of BasicBlocks replaced by one
# block of another kind; the baselines keep ResNet-18's shape, so the report sets a lighter Theseus model against them.
HETEROGENEOUS_FASHION_MNIST = {
    kind: register_recipe(
        Recipe(
            name=f"resnet-fashion-mnist-{kind.replace('_', '-')}",
            family="resnet",
            description=f"ResNet-34 -> 8 {kind} blocks (groups of BasicBlocks replaced by another kind of block) on "
            "Fashion-MNIST, against ResNet-18-shaped baselines; the phases of resnet-fashion-mnist",
            options={**RESNET_FASHION_MNIST.options, "successor": kind},
            predecessor=RESNET_FASHION_MNIST.predecessor,
            replacing=RESNET_FASHION_MNIST.replacing,
            steps_to_one=RESNET_FASHION_MNIST.steps_to_one,
        )
    )
    for kind in ("mobilenet_v2", "shufflenet_v2")
}
