"""The recipe registry: one function per public recipe name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from vidscale.config import ConfigError, RunConfig

RecipeFn = Callable[[], RunConfig]
RECIPES: dict[str, RecipeFn] = {}
DOCS: dict[str, str] = {}


def register_recipe_as(name: str, fn: RecipeFn, *, doc: str) -> RecipeFn:
    if name in RECIPES:
        raise ValueError(f"recipe {name!r} registered twice")
    RECIPES[name] = fn
    DOCS[name] = doc
    return fn


def register_recipe(fn: RecipeFn) -> RecipeFn:
    """Decorator: register `fn` under its own name; the docstring's first line describes it."""
    doc = (fn.__doc__ or "").strip().splitlines()
    return register_recipe_as(fn.__name__, fn, doc=doc[0] if doc else "")


def list_recipes() -> list[str]:
    return sorted(RECIPES)


def get_recipe(name: str) -> RunConfig:
    """A fresh config for recipe `name`, with its name recorded in `cfg.recipe`."""
    if name not in RECIPES:
        raise ConfigError(f"--recipe: unknown recipe {name!r}; known: {list_recipes()}")
    return replace(RECIPES[name](), recipe=name)
