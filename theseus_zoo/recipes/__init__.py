"""Recipes: typed, validated, named configs of a compression run (`Recipe`, `Phase`), and the catalogue.

The catalogue's modules (`theseus_zoo.recipes.text`, ``.images``, ``.graphs``, ``.toy``, ``.causal_lm``) are data
only: listing or looking up a recipe imports no model library. Packages add their own through the
``theseus_zoo.recipes`` entry-point group, or call `register_recipe`.
"""

from .recipe import (
    BASELINES,
    LR_SCHEDULES,
    SCHEDULES,
    UNFREEZE,
    Phase,
    Recipe,
    get_recipe,
    list_recipes,
    load_overrides,
    register_recipe,
    with_defaults,
)

__all__ = [
    "BASELINES",
    "LR_SCHEDULES",
    "SCHEDULES",
    "UNFREEZE",
    "Phase",
    "Recipe",
    "get_recipe",
    "list_recipes",
    "load_overrides",
    "register_recipe",
    "with_defaults",
]
