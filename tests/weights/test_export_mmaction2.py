"""`vidscale export RUN --format mmaction2`: MMAction2's own models load the file and agree.

The proof (`test_mmaction2_loads_the_export_and_agrees`, slow, needs the peer environment of
conftest.py): vidscale builds each covered model with random weights and BN statistics (those of
one training pass over the clip) and writes it as a run; `vidscale export` writes the MMAction2
checkpoint; MMAction2 1.2 builds its model from the config file in its package and loads the
file with MMEngine's `load_checkpoint(..., strict=True)`; both run the same random clip in
float64 eval mode. The logits agree to 1e-10 relative, and bitwise (`torch.equal`) for every
model but TSN, whose head averages features before its fc where vidscale averages logits after
it, a rounding apart (`test_mmaction2.BITWISE`).
`test_a_swapped_export_is_caught` shows it can fail: the export with two tensors of one shape
exchanged loads into MMAction2's model, and its logits are not the run's.

The other tests need no peer: the round trip import(export(run)) is the run exactly, and a run
MMAction2 has no model of is refused in one line before any weights are read.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from tests.weights.test_mmaction2 import (
    BITWISE,
    CLASSES,
    PEER_SCRIPT,
    RTOL,
    _config,
    clip_frames,
    layout,
    run_cli,
    swapped_pair,
)
from vidscale.cli import main
from vidscale.config import RunConfig, save_config
from vidscale.data.transforms import normalize
from vidscale.models.registry import ModelConfig, build_model
from vidscale.predict import load_run
from vidscale.weights.mmaction2 import SOURCES, convert
from vidscale.weights.run_dir import write_run
from vidscale.weights.to_mmaction2 import mmaction2_state


def _randomise(model: nn.Module, clip: torch.Tensor, seed: int) -> None:
    """Every weight random, BN scales near 1 (non-local output BNs included, which start at
    zero), then BN statistics of one training pass over `clip` (momentum 1)."""
    g = torch.Generator().manual_seed(seed)
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Conv2d | nn.Conv3d | nn.Linear):
                fan_in = m.weight[0].numel()
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * (2.0 / fan_in) ** 0.5)
                if m.bias is not None:
                    m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))
        for bn in bns:
            bn.weight.copy_(0.5 + torch.rand(bn.weight.shape, generator=g))
            bn.bias.copy_(0.1 * torch.randn(bn.bias.shape, generator=g))
            bn.momentum = 1.0
        model.train()
        model(clip)
    for bn in bns:
        bn.momentum = 0.1
    model.eval()


def write_random_run(
    run: Path, model: str, *, num_classes: int = CLASSES, clip: torch.Tensor | None = None
) -> Path:
    """A run of vidscale model `model` with random weights (and BN statistics of `clip`)."""
    torch.manual_seed(0)
    net = build_model(ModelConfig(name=model, num_classes=num_classes))
    if clip is not None:
        _randomise(net, clip.float(), seed=sorted(SOURCES).index(model))
    cfg = RunConfig(model=ModelConfig(name=model, num_classes=num_classes))
    classes = [f"action_{i}" for i in range(num_classes)]
    weights = {k: v.detach().clone() for k, v in net.state_dict().items()}
    write_run(run, cfg=cfg, classes=classes, weights=weights, source={"test": model})
    return run


# -- without the peer ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(SOURCES))
def test_one_table_both_ways(name: str) -> None:
    """import(export(state)) is `state`, tensor for tensor, for every covered model."""
    state = build_model(ModelConfig(name=name, num_classes=3)).state_dict()
    back = convert(mmaction2_state(state, model=name), state, model=name)
    assert list(back) == list(state) and all(torch.equal(back[k], state[k]) for k in state)


@pytest.mark.slow
def test_import_of_the_export_is_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_random_run(tmp_path / "run", "tsm_resnet50", num_classes=4)
    out = tmp_path / "tsm.pth"
    code, stdout, err = run_cli(
        capsys, "export", str(run), "--format", "mmaction2", "--out", str(out), "--json"
    )
    assert code == 0, err
    result = json.loads(stdout)
    assert result["format"] == "mmaction2" and result["max_abs_diff"] == 0.0
    assert "imports back as tsm_resnet50 tensor for tensor (320 tensors)" in result["check"]
    saved = torch.load(out, weights_only=True)
    assert set(saved) == {"state_dict", "meta"}
    assert "backbone.layer1.0.conv1.conv.net.weight" in saved["state_dict"]
    assert saved["meta"]["dataset_meta"]["classes"] == [f"action_{i}" for i in range(4)]
    sidecar = json.loads(out.with_name("tsm.pth.json").read_text())
    assert sidecar["format"] == "mmaction2" and sidecar["num_classes"] == 4
    assert sidecar["config"] == "configs/" + _config("tsm_resnet50")

    (tmp_path / "classes.txt").write_text((run / "classes.txt").read_text())
    code, _, err = run_cli(
        capsys, "import-weights", str(out), "--format", "mmaction2", "--model", "tsm_resnet50",
        "--classes", str(tmp_path / "classes.txt"), "--out", str(tmp_path / "back"),
    )  # fmt: skip
    assert code == 0, err
    ours, back = load_run(run).model.state_dict(), load_run(tmp_path / "back").model.state_dict()
    assert list(back) == list(ours) and all(torch.equal(back[k], ours[k]) for k in ours)


def _config_only_run(run: Path, model: ModelConfig) -> Path:
    """A run whose checkpoint is no checkpoint: a refusal must come before reading it."""
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.pt").write_bytes(b"")
    (run / "classes.txt").write_text("a\nb\n")
    save_config(RunConfig(model=model), run / "config.json")
    return run


@pytest.mark.parametrize(
    ("model", "says"),
    [
        (ModelConfig(name="online_tsm_resnet50", num_classes=2), "its shift is causal"),
        (ModelConfig(name="slowfast_resnet50_8x8", num_classes=2), "covered: i3d_resnet50_ref"),
        (
            ModelConfig(name="tsm_resnet50", num_classes=2, shift_div=4),
            "model.shift_div=4 is not the network of MMAction2's config",
        ),
    ],
)
def test_a_refused_run_ends_in_one_line(
    model: ModelConfig, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _config_only_run(tmp_path / "run", model)
    out = tmp_path / "out.pth"
    code, _, err = run_cli(capsys, "export", str(run), "--format", "mmaction2", "--out", str(out))
    assert code == 2 and err.count("\n") == 1 and err.startswith("vidscale: error: ")
    assert f"({model.name}): not exportable to mmaction2" in err and says in err
    assert not out.exists()


# -- against MMAction2 itself (the peer environment) --------------------------------------------


@pytest.fixture(scope="module")
def export_outputs(mmaction2_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every covered model as a random run exported (NAME.pth), the same file with two tensors
    of one shape exchanged (NAME.swapped.pth), vidscale's float64 logits of the run
    (NAME.ours.pt) and MMAction2's of each file loaded `strict=True` (NAME[.swapped]_logits.pt),
    on one random clip (clip_float64.pt)."""
    work = tmp_path_factory.mktemp("export_mmaction2")
    clip = torch.randint(
        0, 256, (2, 3, 16, 64, 64), generator=torch.Generator().manual_seed(1), dtype=torch.uint8
    )
    clip64 = normalize(clip, dtype=torch.float64)
    torch.save(clip64, work / "clip_float64.pt")
    requests = []
    for name in SOURCES:
        part = clip64[:, :, : clip_frames(name)]
        run = write_random_run(work / name, name, clip=part)
        out = work / f"{name}.pth"
        code = main(["export", str(run), "--format", "mmaction2", "--out", str(out)])
        assert code == 0, name
        with torch.no_grad():
            torch.save(load_run(run).model.double()(part), work / f"{name}.ours.pt")
        swapped = _swap(out, work / f"{name}.swapped.pth", swapped_pair(name))
        for label, file in ((name, out), (f"{name}.swapped", swapped)):
            requests.append(
                {"name": label, "config": _config(name), "num_classes": CLASSES, "seed": 0,
                 "layout": layout(name), "frames": clip_frames(name), "checkpoint": str(file)}
            )  # fmt: skip
    (work / "request.json").write_text(json.dumps(requests))
    done = subprocess.run(
        [str(mmaction2_python), str(PEER_SCRIPT), str(work)],
        capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return work


def _swap(src: Path, dst: Path, keys: tuple[str, str]) -> Path:
    """`src`'s checkpoint with the tensors of `keys` (one shape, other values) exchanged."""
    ckpt = torch.load(src, weights_only=True)
    state, (a, b) = ckpt["state_dict"], keys
    assert state[a].shape == state[b].shape and not torch.equal(state[a], state[b])
    state[a], state[b] = state[b], state[a]
    torch.save(ckpt, dst)
    return dst


def export_logits(work: Path, name: str, label: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The logits of the run `name`, and MMAction2's on the file `label`."""
    ours = torch.load(work / f"{name}.ours.pt", weights_only=True)
    theirs = torch.load(work / f"{label}_logits.pt", weights_only=True)
    assert ours.shape == theirs.shape == (2, CLASSES)
    return ours, theirs


def export_diff(work: Path, name: str, label: str) -> float:
    """max |logit diff| / max |logit| of the run `name` and MMAction2 on the file `label`."""
    ours, theirs = export_logits(work, name, label)
    return float((ours - theirs).abs().max() / theirs.abs().max())


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SOURCES))
def test_mmaction2_loads_the_export_and_agrees(name: str, export_outputs: Path) -> None:
    diff = export_diff(export_outputs, name, name)
    print(f"{name}: max |logit diff| / max |logit| = {diff:.3g}", file=sys.stderr)
    assert diff <= RTOL
    if name in BITWISE:
        assert torch.equal(*export_logits(export_outputs, name, name))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SOURCES))
def test_a_swapped_export_is_caught(name: str, export_outputs: Path) -> None:
    """The proof can fail: the export with two tensors of one shape exchanged loads into
    MMAction2's model (`strict=True`: names and shapes fit), and its logits are not the run's."""
    diff = export_diff(export_outputs, name, f"{name}.swapped")
    print(f"{name}, swapped: {diff:.3g}", file=sys.stderr)
    assert diff > 1e-3
