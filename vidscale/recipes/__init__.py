"""Named recipes: functions returning a complete `RunConfig`.

Names state model, frames, global batch and epochs (e.g. `tsm_r50_k400_8f_b96_e100`).
`registry` holds one function per name; one module per source of recipes: `demo` (the built-in
demo data), `kinetics` (Training Kinetics in 15 Minutes), `ssv2`, `flow` (TSM's flow stream),
`aavg` (the AAVG paper on UCF101 / HMDB51), `multigrid`, `non_local` (I3D-NL), `charades`
(multi-label), `imagenet` (large-batch ImageNet and the image demos).
"""

# Importing the modules fills the registry.
from vidscale.recipes import (  # noqa: F401
    aavg,
    charades,
    demo,
    flow,
    imagenet,
    kinetics,
    multigrid,
    non_local,
    ssv2,
)
from vidscale.recipes.registry import DOCS, RECIPES, get_recipe, list_recipes, register_recipe

__all__ = ["DOCS", "RECIPES", "get_recipe", "list_recipes", "register_recipe"]
