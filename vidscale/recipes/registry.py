"""The recipe registry: one decorated function per public recipe name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from vidscale.config import ConfigError, RunConfig

RecipeFn = Callable[[], RunConfig]
RECIPES: dict[str, RecipeFn] = {}


def register_recipe(fn: RecipeFn) -> RecipeFn:
    if fn.__name__ in RECIPES:
        raise ValueError(f"recipe {fn.__name__!r} registered twice")
    RECIPES[fn.__name__] = fn
    return fn


def list_recipes() -> list[str]:
    return sorted(RECIPES)


def get_recipe(name: str) -> RunConfig:
    """A fresh config for recipe `name`, with its name recorded in `cfg.recipe`."""
    if name not in RECIPES:
        raise ConfigError(f"--recipe: unknown recipe {name!r}; known: {list_recipes()}")
    return replace(RECIPES[name](), recipe=name)
