from pathlib import Path

import pytest

from vidscale.config import (
    ConfigError,
    RunConfig,
    apply_overrides,
    load_config,
    resolve,
    save_config,
    validate,
)


def test_overrides_are_typed_and_do_not_mutate_the_input() -> None:
    base = RunConfig()
    cfg = apply_overrides(
        base,
        [
            "optim.accumulate=4",
            "optim.lr_per_8_clips=0.01",
            "model.name=tsn_resnet18",
            "data.train_clip.frames=16",
            "data.train_clip.scales=1,0.875",
            "train.progress=false",
            "model.pretrained=null",
        ],
    )
    assert cfg.optim.accumulate == 4 and isinstance(cfg.optim.lr_per_8_clips, float)
    assert cfg.model.name == "tsn_resnet18"
    assert cfg.data.train_clip.frames == 16
    assert cfg.data.train_clip.scales == (1.0, 0.875)
    assert cfg.train.progress is False
    assert base.optim.accumulate == 1 and base.data.train_clip.frames == 8


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("optim.acumulate=2", "acumulate"),
        ("nosuch.x=1", "nosuch"),
        ("optim.accumulate=two", "optim.accumulate"),
        ("train.amp=fp8", "train.amp"),
        ("train.progress=maybe", "train.progress"),
        ("optim", "key=value"),
    ],
)
def test_bad_overrides_name_the_field(override: str, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        apply_overrides(RunConfig(), [override])


def test_validate_names_the_field() -> None:
    cfg = apply_overrides(RunConfig(), ["data.batch_size=0"])
    with pytest.raises(ConfigError, match="data.batch_size"):
        validate(cfg)
    cfg = apply_overrides(RunConfig(), ["optim.accumulate=0"])
    with pytest.raises(ConfigError, match="accumulate"):
        validate(cfg)


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    cfg = apply_overrides(RunConfig(), ["data.train_clip.scales=1,0.75", "optim.name=lars"])
    save_config(cfg, tmp_path / "config.json")
    assert load_config(tmp_path / "config.json") == cfg


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("data.train_clip.area=[0.5,0.2]", "data.train_clip.area"),
        ("data.eval_clip.num_crops=2", "data.eval_clip"),
        ("data.train_clip.ratio=[0,1]", "data.train_clip.ratio"),
    ],
)
def test_impossible_clip_specs_fail_validation_naming_the_field(override: str, field: str) -> None:
    from vidscale.recipes import get_recipe

    cfg = apply_overrides(get_recipe("demo_tsm_r18_8f_b32_e12"), [override])
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        validate(cfg)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["aavg.adaptive_batch=true"],
            "multigrid and aavg.adaptive_batch both set the batch size: choose one",
        ),
        (
            ["lr.schedule=step", "lr.milestone_unit=step"],
            "multigrid needs lr.milestone_unit=epoch (its stages are epochs)",
        ),
        (
            ["lr.schedule=poly"],
            "multigrid has no polynomial LR policy: use lr.schedule=cosine or step",
        ),
    ],
)
def test_settings_multigrid_cannot_run_fail_at_resolution(
    overrides: list[str], message: str
) -> None:
    multigrid = ["multigrid.long_cycle=true", *overrides]
    resolve(RunConfig(), overrides)  # without multigrid each is a valid run
    with pytest.raises(ConfigError) as err:
        resolve(RunConfig(), multigrid)
    assert str(err.value) == message


def test_resolve_applies_the_overrides_and_validates() -> None:
    assert resolve(RunConfig(), ["data.batch_size=3"]).data.batch_size == 3
    with pytest.raises(ConfigError, match="^data.batch_size must be >= 1$"):
        resolve(RunConfig(), ["data.batch_size=0"])
