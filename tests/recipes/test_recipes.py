"""Every registered recipe builds, validates and round-trips through its saved JSON form."""

from pathlib import Path

import pytest

from vidscale.config import load_config, save_config, validate
from vidscale.models.registry import list_models
from vidscale.recipes import get_recipe, list_recipes


@pytest.mark.parametrize("name", list_recipes())
def test_recipe_builds_and_validates(name: str, tmp_path: Path) -> None:
    cfg = get_recipe(name)
    assert cfg.recipe == name
    validate(cfg)
    assert cfg.model.name in list_models()
    save_config(cfg, tmp_path / "c.json")
    assert load_config(tmp_path / "c.json") == cfg


def test_unknown_recipe_lists_known_ones() -> None:
    with pytest.raises(ValueError, match="known"):
        get_recipe("nope")
