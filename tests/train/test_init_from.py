"""`model.init_from=RUN`: a model starts from a run directory's checkpoint (AAVG §V)."""

import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from vidscale.config import save_config
from vidscale.models.registry import ModelConfig, build_model
from vidscale.models.transfer import TransferReport
from vidscale.recipes.registry import get_recipe
from vidscale.run.checkpoint import save_checkpoint
from vidscale.run.metrics import MetricsLog
from vidscale.train.init_from import (
    checkpoint_file,
    describe,
    initialise_from,
    normalisation_warning,
)

RGB_CLASSES = 5
STEM = "trunk.conv1.weight"
HEAD = ("trunk.fc.weight", "trunk.fc.bias")
# The checkpoints of the run below: name -> seed of its weights. Epoch 1 validates best.
CHECKPOINTS = {"epoch_0001": 1, "epoch_0002": 2, "last": 3}


def rgb_weights(seed: int) -> dict[str, Tensor]:
    """A TSN-ResNet-18 RGB model's state dict with every tensor random (BN statistics too), so
    that a fresh initialisation never passes for a loaded tensor."""
    torch.manual_seed(seed)
    model = build_model(ModelConfig(name="tsn_resnet18", num_classes=RGB_CLASSES))
    with torch.no_grad():
        for key, tensor in model.state_dict().items():
            if key.endswith("num_batches_tracked"):
                tensor.fill_(100 + seed)
            elif key.endswith("running_var"):
                tensor.uniform_(0.5, 1.5)
            else:
                tensor.normal_(0.0, 0.1)
    return model.state_dict()


def write_run(run: Path, weights: dict[str, dict[str, Tensor]]) -> None:
    """A run directory as training leaves it: config, classes, metrics, checkpoints holding
    the model, optimizer and progress under the trainer's keys."""
    (run / "checkpoints").mkdir(parents=True)
    cfg = get_recipe("demo_tsn_r18_8f_b32_e12")
    save_config(
        replace(cfg, model=replace(cfg.model, num_classes=RGB_CLASSES)), run / "config.json"
    )
    (run / "classes.txt").write_text("".join(f"class_{i}\n" for i in range(RGB_CLASSES)))
    log = MetricsLog(run, enabled=True)
    for epoch, top1 in ((1, 60.0), (2, 40.0)):
        log.write("epoch", step=10 * epoch, epoch=epoch, val_top1=top1)
    log.close()
    for name, state in weights.items():
        model = build_model(ModelConfig(name="tsn_resnet18", num_classes=RGB_CLASSES))
        model.load_state_dict(state)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        checkpoint = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "progress": {"epoch": 2, "step": 20, "step_in_epoch": 0},
            "model_name": "tsn_resnet18",
            "num_classes": RGB_CLASSES,
        }
        save_checkpoint(checkpoint, run / "checkpoints" / f"{name}.pt")


@pytest.fixture(scope="module")
def rgb_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, Tensor]]]:
    run = tmp_path_factory.mktemp("runs") / "rgb"
    weights = {name: rgb_weights(seed) for name, seed in CHECKPOINTS.items()}
    write_run(run, weights)
    return run, weights


def flow_model(name: str = "tsn_resnet18", *, num_classes: int = RGB_CLASSES) -> nn.Module:
    return build_model(ModelConfig(name=name, num_classes=num_classes, in_channels=20))


@pytest.mark.parametrize("name", ["tsn_resnet18", "tsm_resnet18"])
def test_flow_model_starts_from_the_rgb_run(
    rgb_run: tuple[Path, dict[str, dict[str, Tensor]]], name: str
) -> None:
    run, weights = rgb_run
    model = flow_model(name)
    report = initialise_from(model, run)
    loaded, rgb = model.state_dict(), weights["last"]
    # AAVG §V: every one of the 20 flow channels gets the mean of the 3 RGB channels' filters.
    assert torch.equal(loaded[STEM], rgb[STEM].mean(dim=1, keepdim=True).repeat(1, 20, 1, 1))
    others = [k for k in rgb if k != STEM]
    assert all(torch.equal(loaded[k], rgb[k]) for k in others)
    assert describe(report) == (
        f"initialised from {run}/checkpoints/last.pt: {len(others)} tensors copied; "
        f"{STEM} cross-modality: mean over 3 input channels, repeated to 20"
    )
    assert model(torch.randn(1, 20, 2, 32, 32)).shape == (1, RGB_CLASSES)


def test_fine_tuning_on_another_class_list_replaces_only_the_head(
    rgb_run: tuple[Path, dict[str, dict[str, Tensor]]],
) -> None:
    run, weights = rgb_run
    model = build_model(ModelConfig(name="tsn_resnet18", num_classes=7))
    fresh_head = {k: model.state_dict()[k].clone() for k in HEAD}
    report = initialise_from(model, run)
    loaded, rgb = model.state_dict(), weights["last"]
    assert report.replaced == HEAD and report.adapted == {}
    assert all(torch.equal(loaded[k], fresh_head[k]) for k in HEAD)
    assert all(torch.equal(loaded[k], rgb[k]) for k in rgb if k not in HEAD)
    assert describe(report).endswith(f"; trunk.fc.* replaced ({RGB_CLASSES} -> 7 classes)")


def test_another_depth_fails_naming_the_file_and_a_key(
    rgb_run: tuple[Path, dict[str, dict[str, Tensor]]],
) -> None:
    run, _ = rgb_run
    model = build_model(ModelConfig(name="tsn_resnet34", num_classes=RGB_CLASSES))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    last = re.escape(str(run / "checkpoints" / "last.pt"))
    with pytest.raises(ValueError, match=rf"^{last}: .*missing: trunk\.layer1\.2\."):
        initialise_from(model, run)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("", "last"),
        ("last", "last"),
        ("best", "epoch_0001"),  # the higher validation top-1
        ("epoch_0002", "epoch_0002"),
        ("checkpoints/epoch_0002.pt", "epoch_0002"),
    ],
)
def test_checkpoint_refs(
    rgb_run: tuple[Path, dict[str, dict[str, Tensor]]], ref: str, expected: str
) -> None:
    run, weights = rgb_run
    model = flow_model()
    report = initialise_from(model, run / ref if ref else str(run))
    assert report.source == str(run / "checkpoints" / f"{expected}.pt")
    key = "trunk.layer4.1.bn2.running_mean"
    assert torch.equal(model.state_dict()[key], weights[expected][key])


def test_missing_runs_and_checkpoints(
    rgb_run: tuple[Path, dict[str, dict[str, Tensor]]], tmp_path: Path
) -> None:
    run, _ = rgb_run
    (tmp_path / "not_a_run").mkdir()
    cases = {
        str(tmp_path / "nowhere"): "nowhere",
        str(run / "epoch_0009"): "epoch_0009",
        str(tmp_path / "not_a_run"): "no config.json",
        "": "no run given",
    }
    for ref, named in cases.items():
        with pytest.raises(FileNotFoundError, match=named):
            checkpoint_file(ref)
        with pytest.raises(FileNotFoundError, match=named):
            initialise_from(flow_model(), ref)


def test_unreadable_checkpoints_fail_naming_the_file(tmp_path: Path) -> None:
    cfg = get_recipe("demo_tsn_r18_8f_b32_e12")
    (tmp_path / "checkpoints").mkdir()
    save_config(cfg, tmp_path / "config.json")
    damaged = tmp_path / "checkpoints" / "last.pt"
    damaged.write_bytes(b"\x00" * 64)
    with pytest.raises(ValueError, match=f"^{re.escape(str(damaged))}: not a readable"):
        initialise_from(flow_model(), tmp_path)
    save_checkpoint({"step": 3}, damaged)  # a file of another kind: a comm state
    with pytest.raises(ValueError, match=f"^{re.escape(str(damaged))}: .*no 'model'"):
        initialise_from(flow_model(), tmp_path)


def test_describe_groups_what_was_done_alike() -> None:
    inflated = "inflated 2D -> 3D (centre)"
    report = TransferReport(
        copied=("trunk.bn1.weight", "trunk.bn1.bias"),
        adapted={
            "trunk.conv1.weight": "cross-modality: mean over 3 input channels, repeated to 20",
            "trunk.layer1.0.conv1.weight": inflated,
            "trunk.layer1.0.conv2.weight": inflated,
        },
        replaced=HEAD,
        classes=(101, 51),
        source="runs/rgb/checkpoints/last.pt",
    )
    assert describe(report) == (
        "initialised from runs/rgb/checkpoints/last.pt: 2 tensors copied; "
        "trunk.conv1.weight cross-modality: mean over 3 input channels, repeated to 20; "
        f"2 tensors {inflated}; trunk.fc.* replaced (101 -> 51 classes)"
    )


def test_a_source_normalised_otherwise_is_warned_about(
    rgb_run: tuple[Path, dict[str, dict[str, Tensor]]], tmp_path: Path
) -> None:
    run, _ = rgb_run  # ImageNet statistics, as every vidscale recipe
    imagenet = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    assert normalisation_warning(run, mean=imagenet[0], std=imagenet[1]) is None
    note = normalisation_warning(run, mean=(0.45,) * 3, std=(0.225,) * 3)
    assert note is not None and "data.mean and data.std" in note and "0.485" in note
    assert normalisation_warning(tmp_path / "missing", mean=(0.45,) * 3, std=(0.225,) * 3) is None
