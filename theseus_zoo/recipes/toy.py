"""The toy family's recipe."""

from __future__ import annotations

from .recipe import Phase, Recipe, register_recipe

TOY = register_recipe(
    Recipe(
        name="toy",
        family="toy",
        description="8-block residual MLP -> 3 blocks on a synthetic 4-class problem (seconds on a CPU)",
        options={"num_blocks": 8, "width": 64, "num_layers": 3},
        predecessor=Phase(steps=400, lr=3e-3, batch_size=64, eval_every=100),
        replacing=Phase(steps=800, lr=1e-3, batch_size=64, eval_every=100),
        steps_to_one=400,
        patience=3,
    )
)
