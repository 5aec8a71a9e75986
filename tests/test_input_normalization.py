"""A run's RGB normalisation (`data.mean`/`data.std`): recorded in config.json, validated, used
by every command that feeds the run's model, and ImageNet's for every run that does not say.

The imported-run proof (`test_a_pytorchvideo_import_predicts_on_its_sources_input`, slow):
a PyTorchVideo checkpoint imported as a run records PyTorchVideo's 0.45 / 0.225, and `predict`
on a real H.264 clip gives the probabilities of the same model run on the same decoded frames
normalised by hand as PyTorchVideo's transform does ((x / 255 - 0.45) / 0.225), and not those
of ImageNet-normalised frames.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.test_predict import make_run, write_clip
from tests.weights.test_pytorchvideo import import_cli, write_ptv_checkpoint
from vidscale.config import (
    ConfigError,
    DataConfig,
    RunConfig,
    apply_overrides,
    read_config_file,
    save_config,
    to_dict,
    validate,
)
from vidscale.data.clip import ClipSpec
from vidscale.data.inputs import ModelInput
from vidscale.data.transforms import (
    IMAGENET_MEAN,
    IMAGENET_RGB_MEAN,
    IMAGENET_RGB_STD,
    IMAGENET_STD,
    normalize,
)
from vidscale.export import export
from vidscale.features.extract import ExtractOptions, extract_features
from vidscale.models.registry import ModelConfig
from vidscale.predict import load_run, run_probabilities, sample_views
from vidscale.predict_window import predict_timeline
from vidscale.train import builders
from vidscale.weights import mmaction2, pyslowfast, pytorchvideo, to_mmaction2, tsm

Triple = tuple[float, float, float]
PTV_MEAN: Triple = (0.45, 0.45, 0.45)
PTV_STD: Triple = (0.225, 0.225, 0.225)
CUSTOM_MEAN: Triple = (0.5, 0.4, 0.3)
CUSTOM_STD: Triple = (0.2, 0.25, 0.3)


def with_normalization(run: Path, mean: Triple, std: Triple) -> Path:
    """Rewrite run's config.json with `data.mean`/`data.std`."""
    cfg = read_config_file(run / "config.json")
    data = dataclasses.replace(cfg.data, mean=mean, std=std)
    save_config(dataclasses.replace(cfg, data=data), run / "config.json")
    return run


# -- the config ----------------------------------------------------------------------------------


def test_custom_mean_and_std_round_trip(tmp_path: Path) -> None:
    cfg = apply_overrides(RunConfig(), ["data.mean=0.5,0.4,0.3", "data.std=[0.2,0.25,0.3]"])
    assert (cfg.data.mean, cfg.data.std) == (CUSTOM_MEAN, CUSTOM_STD)
    save_config(cfg, tmp_path / "config.json")
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["data"]["mean"] == list(CUSTOM_MEAN) and saved["data"]["std"] == list(CUSTOM_STD)
    back = read_config_file(tmp_path / "config.json")
    assert back == cfg and isinstance(back.data.mean, tuple)


def test_an_old_config_without_the_fields_loads_with_imagenets(tmp_path: Path) -> None:
    old: dict[str, Any] = to_dict(RunConfig())
    del old["data"]["mean"], old["data"]["std"]
    (tmp_path / "config.json").write_text(json.dumps(old))
    cfg = read_config_file(tmp_path / "config.json")
    assert (cfg.data.mean, cfg.data.std) == (IMAGENET_RGB_MEAN, IMAGENET_RGB_STD)
    # bit for bit the statistics (and so the input) every run had before the fields existed
    model_input = builders.model_input(cfg)
    assert model_input.statistics() == (IMAGENET_MEAN, IMAGENET_STD)
    clip = torch.randint(0, 256, (2, 3, 2, 4, 4), dtype=torch.uint8)
    assert torch.equal(model_input.normalize(clip), normalize(clip))
    assert torch.equal(ModelInput("rgb", 3).normalize(clip), normalize(clip))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("data.mean", "0.5,0,0.5"),
        ("data.mean", "0.5,-0.1,0.5"),
        ("data.std", "0.2,Infinity,0.2"),
        ("data.std", "NaN,0.2,0.2"),
    ],
)
def test_a_bad_mean_or_std_is_one_line_naming_it(key: str, value: str) -> None:
    cfg = apply_overrides(RunConfig(), [f"{key}={value}"])
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    message = str(err.value)
    assert message.startswith(f"{key} must be 3 positive finite numbers") and "\n" not in message


def test_a_mean_of_two_values_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"^data\.std: expected 3 values"):
        apply_overrides(RunConfig(), ["data.std=0.2,0.2"])


def test_flow_keeps_its_own_normalization() -> None:
    flow = ClipSpec(modality="flow", flow_stack=2)
    data = DataConfig(train_clip=flow, eval_clip=flow, mean=CUSTOM_MEAN, std=CUSTOM_STD)
    cfg = RunConfig(model=ModelConfig(in_channels=4), data=data)
    validate(cfg)
    assert builders.model_input(cfg).statistics() == ((127.5,) * 4, (127.5,) * 4)


def test_the_statistics_are_the_fields_on_the_0_255_scale() -> None:
    data = DataConfig(mean=PTV_MEAN, std=PTV_STD)
    assert ModelInput.of(data.eval_clip, data).statistics() == ((114.75,) * 3, (57.375,) * 3)
    clip = torch.randint(0, 256, (2, 3, 2, 4, 4), dtype=torch.uint8)
    by_hand = (clip.float() / 255 - 0.45) / 0.225
    ours = ModelInput.of(data.eval_clip, data).normalize(clip)
    torch.testing.assert_close(ours, by_hand, rtol=1e-6, atol=1e-6)


# -- the sources ---------------------------------------------------------------------------------


def test_each_source_states_its_frameworks_normalization() -> None:
    for form in (pytorchvideo, pyslowfast):
        assert form.SOURCES
        for source in form.SOURCES.values():
            assert (source.mean, source.std) == (PTV_MEAN, PTV_STD)
    for form in (mmaction2, tsm):
        for source in form.SOURCES.values():
            assert (source.mean, source.std) == (IMAGENET_RGB_MEAN, IMAGENET_RGB_STD)


# -- every use of a run --------------------------------------------------------------------------


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[tuple[tuple[float, ...], tuple[float, ...]]]:
    """The 0..255 statistics of every `ModelInput.normalize` call, as it happens."""
    calls: list[tuple[tuple[float, ...], tuple[float, ...]]] = []
    original = ModelInput.normalize

    def spy(self: ModelInput, clips: torch.Tensor) -> torch.Tensor:
        calls.append(self.statistics())
        return original(self, clips)

    monkeypatch.setattr(ModelInput, "normalize", spy)
    return calls


def test_predict_window_and_extract_features_use_the_runs(
    tmp_path: Path, seen: list[tuple[tuple[float, ...], tuple[float, ...]]]
) -> None:
    run = with_normalization(make_run(tmp_path), CUSTOM_MEAN, CUSTOM_STD)
    expected = ((127.5, 102.0, 76.5), (51.0, 63.75, 76.5))
    video = write_clip(tmp_path / "clip.mp4", frames=30)
    loaded = load_run(run)
    predict_timeline(video, loaded, window=1.0, stride=1.0)
    out = tmp_path / "features.npz"
    extract_features(ExtractOptions(run=run, out=out, videos=(video,)))
    assert out.exists() and len(seen) >= 3 and set(seen) == {expected}


def test_predict_normalises_with_the_runs(tmp_path: Path) -> None:
    run = with_normalization(make_run(tmp_path), CUSTOM_MEAN, CUSTOM_STD)
    video = write_clip(tmp_path / "clip.mp4")
    loaded = load_run(run)
    ours = run_probabilities(video, loaded, num_clips=1, num_crops=1)
    views = sample_views(video, loaded.cfg.data.eval_clip)
    mean = torch.tensor(CUSTOM_MEAN).view(1, 3, 1, 1, 1)
    std = torch.tensor(CUSTOM_STD).view(1, 3, 1, 1, 1)
    with torch.no_grad():
        by_hand = loaded.model((views.float() / 255 - mean) / std).softmax(-1)[0]
        imagenet = loaded.model(normalize(views)).softmax(-1)[0]
    torch.testing.assert_close(ours, by_hand, rtol=1e-5, atol=1e-6)
    assert (ours - imagenet).abs().max() > 1e-4


def test_training_and_evaluation_take_the_runs() -> None:
    cfg = RunConfig(data=DataConfig(mean=CUSTOM_MEAN, std=CUSTOM_STD))
    model_input = builders.model_input(cfg)
    assert (model_input.rgb_mean, model_input.rgb_std) == (CUSTOM_MEAN, CUSTOM_STD)


def test_an_export_records_the_runs(tmp_path: Path) -> None:
    run = with_normalization(make_run(tmp_path), PTV_MEAN, PTV_STD)
    export(run, fmt="torchscript", out=tmp_path / "out" / "model.pt")
    meta = json.loads((tmp_path / "out" / "model.pt.json").read_text())
    assert meta["normalize"] == {"scale": "0..255", "mean": [114.75] * 3, "std": [57.375] * 3}


def test_an_mmaction2_export_carries_the_preprocessor_it_needs(tmp_path: Path) -> None:
    model = ModelConfig(name="tsm_resnet50", num_classes=2)
    args: dict[str, Any] = {"classes": ["a", "b"], "checkpoint": tmp_path / "last.pt"}
    out = tmp_path / "tsm.pth"
    imagenet = to_mmaction2.sidecar(RunConfig(model=model), out=out, **args)
    assert imagenet["data_preprocessor"] == {"mean": list(IMAGENET_MEAN), "std": list(IMAGENET_STD)}
    assert "data_preprocessor" not in imagenet["usage"]
    data = DataConfig(mean=PTV_MEAN, std=PTV_STD)
    theirs = to_mmaction2.sidecar(RunConfig(model=model, data=data), out=out, **args)
    assert theirs["data_preprocessor"] == {"mean": [114.75] * 3, "std": [57.375] * 3}
    assert theirs["normalize"]["mean"] == [114.75] * 3
    assert "model.data_preprocessor.mean=[114.75, 114.75, 114.75]" in theirs["usage"]
    assert "model.data_preprocessor.std=[57.375, 57.375, 57.375]" in theirs["usage"]


# -- an imported run -----------------------------------------------------------------------------


@pytest.mark.slow
def test_a_pytorchvideo_import_predicts_on_its_sources_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "slowfast_resnet50_8x8"
    src = write_ptv_checkpoint(tmp_path / "sf.pyth", name, 5)
    run = tmp_path / "run"
    code, _, err = import_cli(capsys, src, name, run)
    assert code == 0, err
    saved = json.loads((run / "config.json").read_text())["data"]
    assert saved["mean"] == list(PTV_MEAN) and saved["std"] == list(PTV_STD)
    # The normalisation is what is tested, not the views: one small view keeps the test quick.
    cfg = read_config_file(run / "config.json")
    spec = dataclasses.replace(
        cfg.data.eval_clip, crop_size=64, short_side=64, num_clips=1, num_crops=1
    )
    save_config(
        dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, eval_clip=spec)),
        run / "config.json",
    )

    video = write_clip(tmp_path / "clip.mp4", frames=40)
    loaded = load_run(run)
    ours = run_probabilities(video, loaded)
    views = sample_views(video, loaded.cfg.data.eval_clip)
    assert views.shape == (1, 3, 32, 64, 64)
    with torch.no_grad():  # PyTorchVideo's transform: x / 255, then NormalizeVideo(0.45, 0.225)
        by_hand = loaded.model((views.float() / 255 - 0.45) / 0.225).softmax(-1)[0]
        imagenet = loaded.model(normalize(views)).softmax(-1)[0]
    torch.testing.assert_close(ours, by_hand, rtol=1e-5, atol=1e-6)
    assert (ours - imagenet).abs().max() > 1e-4
