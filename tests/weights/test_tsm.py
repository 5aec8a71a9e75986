"""`vidscale import-weights --format tsm`: checkpoints of the TSM authors' code.

The proof (`test_logits_equal_mmaction2s_tsm`, slow, needs the MMAction2 peer of conftest.py):
MMAction2's TSM-R50 (ported from the TSM code, and proven equal to `tsm_resnet50` by
`test_mmaction2.py`) gets random weights; its tensors are written under the TSM code's names,
as its `main.py` saves them (`module.` prefix, `state_dict`, `epoch`, `arch`, `best_prec1`, a
`.pth.tar`), by `mmaction2_to_tsm`, a table written here from the two codes (the TSM code's
`ops/models.py`, `ops/temporal_shift.py`, torchvision's ResNet; MMAction2's `ResNetTSM`), not
from vidscale's; vidscale imports the file and both run one clip in float64 eval mode.

The other tests need no peer: random checkpoints written with `vidscale.weights.tsm`'s table.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import torch

from tests.weights.at_work import check_at_work, import_run
from tests.weights.test_mmaction2 import CLASSES, PEER_SCRIPT, RTOL, _config, run_cli
from vidscale.data.transforms import normalize
from vidscale.models.registry import ModelConfig, build_model
from vidscale.predict import load_run
from vidscale.weights.tsm import vidscale_to_tsm

# MMAction2 key -> the TSM code's (after `module.`): torchvision's ResNet under `base_model`
# (`TSN._prepare_base_model`), each block's conv1 wrapped by `TemporalShift` as `.net`
# (`make_temporal_shift`, place "blockres"), the classifier `new_fc` (`TSN._prepare_tsn`).
MMACTION2_TO_TSM = (
    (r"^backbone\.conv1\.conv\.", "base_model.conv1."),
    (r"^backbone\.conv1\.bn\.", "base_model.bn1."),
    (r"^backbone\.(layer\d\.\d+)\.conv1\.conv\.net\.", r"base_model.\1.conv1.net."),
    (r"^backbone\.(layer\d\.\d+)\.conv(\d)\.conv\.", r"base_model.\1.conv\2."),
    (r"^backbone\.(layer\d\.\d+)\.conv(\d)\.bn\.", r"base_model.\1.bn\2."),
    (r"^backbone\.(layer\d\.\d+)\.downsample\.conv\.", r"base_model.\1.downsample.0."),
    (r"^backbone\.(layer\d\.\d+)\.downsample\.bn\.", r"base_model.\1.downsample.1."),
    (r"^cls_head\.fc_cls\.", "new_fc."),
)


def mmaction2_to_tsm(key: str) -> str:
    for pattern, replacement in MMACTION2_TO_TSM:
        renamed, hits = re.subn(pattern, replacement, key)
        if hits:
            return renamed
    raise KeyError(key)


def save_as_main_py(path: Path, state: dict[str, torch.Tensor], *, prefix: str = "module.") -> Path:
    """`state` (the TSM code's names) in the file the TSM code's `main.py` saves."""
    wrapped = {prefix + k: v for k, v in state.items()}
    torch.save({"epoch": 50, "arch": "resnet50", "state_dict": wrapped, "best_prec1": 71.2}, path)
    return path


def write_tsm_checkpoint(
    path: Path, model: str, num_classes: int, *, prefix: str = "module.", seed: int = 0
) -> Path:
    """A random vidscale `model` saved as the TSM code's `main.py` saves one."""
    torch.manual_seed(seed)
    state = build_model(ModelConfig(name=model, num_classes=num_classes)).state_dict()
    renamed = {vidscale_to_tsm(k, model=model): v for k, v in state.items()}
    return save_as_main_py(path, renamed, prefix=prefix)


def import_tsm(
    capsys: pytest.CaptureFixture[str], src: Path, model: str, out: Path, *extra: str
) -> tuple[int, str, str]:
    return run_cli(
        capsys, "import-weights", str(src), "--format", "tsm", "--model", model, "--out",
        str(out), *extra,
    )  # fmt: skip


# -- without the peer ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "says"),
    [
        ("tsm_resnet101", "the TSM code shifts every other block of a ResNet-101"),
        ("online_tsm_resnet50", "its shift is causal"),
        ("i3d_resnet50_ref", "no conversion from the TSM code's checkpoints"),
    ],
)
def test_a_refused_model_ends_in_one_line(
    model: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "any.pth.tar"
    src.write_bytes(b"")
    code, _, err = import_tsm(capsys, src, model, tmp_path / "run")
    assert code == 2 and err.count("\n") == 1 and err.startswith("vidscale: error: ")
    assert f"--model {model}: not importable from tsm ({says}" in err
    assert "covered: tsm_resnet50, tsn_resnet50" in err and not (tmp_path / "run").exists()


@pytest.mark.slow
@pytest.mark.parametrize("prefix", ["module.", ""])
def test_with_or_without_the_wrapper_the_tensors_are_the_same(
    prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A `.pth.tar` with DataParallel's `module.` or without it imports the same tensors."""
    src = write_tsm_checkpoint(tmp_path / "tsm.pth.tar", "tsm_resnet50", 5, prefix=prefix)
    code, out, err = import_tsm(capsys, src, "tsm_resnet50", tmp_path / "run", "--json")
    assert code == 0, err
    assert json.loads(out)["tensors"] == 320
    torch.manual_seed(0)
    state = build_model(ModelConfig(name="tsm_resnet50", num_classes=5)).state_dict()
    imported = load_run(tmp_path / "run").model.state_dict()
    assert all(torch.equal(imported[k], state[k]) for k in state)


@pytest.mark.slow
def test_a_classifier_without_dropout_is_base_model_fc(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Trained with dropout 0, the TSM code keeps the classifier as `base_model.fc`."""
    torch.manual_seed(0)
    state = build_model(ModelConfig(name="tsn_resnet50", num_classes=4)).state_dict()
    renamed = {vidscale_to_tsm(k, model="tsn_resnet50"): v for k, v in state.items()}
    renamed = {k.replace("new_fc.", "base_model.fc."): v for k, v in renamed.items()}
    src = save_as_main_py(tmp_path / "tsn.pth", renamed)
    code, _, err = import_tsm(capsys, src, "tsn_resnet50", tmp_path / "run")
    assert code == 0, err
    imported = load_run(tmp_path / "run").model.state_dict()
    assert torch.equal(imported["trunk.fc.weight"], state["trunk.fc.weight"])


@pytest.mark.slow
def test_a_tsn_checkpoint_is_not_a_tsm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write_tsm_checkpoint(tmp_path / "tsn.pth", "tsn_resnet50", 5)
    code, _, err = import_tsm(capsys, src, "tsm_resnet50", tmp_path / "run")
    assert code == 2 and err.count("\n") == 1
    assert "not a TSM-code tsm_resnet50 checkpoint: 16 missing: " in err
    assert "base_model.layer1.0.conv1.net.weight, base_model.layer1.1.conv1.net.weight" in err
    assert "(+13 more); 16 unexpected: base_model.layer1.0.conv1.weight" in err


@pytest.mark.slow
def test_a_flow_checkpoint_names_the_first_conv(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The TSM code's flow model (5 stacked flows: 10 input channels) is not an RGB one."""
    torch.manual_seed(0)
    cfg = ModelConfig(name="tsm_resnet50", num_classes=5, in_channels=10)
    state = build_model(cfg).state_dict()
    renamed = {vidscale_to_tsm(k, model="tsm_resnet50"): v for k, v in state.items()}
    src = save_as_main_py(tmp_path / "flow.pth", renamed)
    code, _, err = import_tsm(capsys, src, "tsm_resnet50", tmp_path / "run")
    assert code == 2 and err.count("\n") == 1
    assert "1 of another shape (checkpoint vs model): base_model.conv1.weight " in err
    assert "(64, 10, 7, 7) vs (64, 3, 7, 7)" in err


@pytest.mark.slow
def test_the_class_count_must_fit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write_tsm_checkpoint(tmp_path / "tsm.pth", "tsm_resnet50", 5)
    code, _, err = import_tsm(capsys, src, "tsm_resnet50", tmp_path / "run", "--num-classes", "3")
    assert code == 2 and err.count("\n") == 1
    assert "--num-classes 3: 3 classes, but the checkpoint's classifier has 5" in err


@pytest.mark.slow
def test_an_imported_tsm_predicts_evaluates_exports_and_fine_tunes(
    tiny_demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exported to MMAction2 too: the authors' TSM-R50 and MMAction2's are one network."""
    src = write_tsm_checkpoint(tmp_path / "tsm.pth.tar", "tsm_resnet50", 8)
    run = tmp_path / "run"
    classes = tiny_demo / "classes.txt"
    report = import_run(capsys, src, fmt="tsm", model="tsm_resnet50", classes=classes, run=run)
    assert report["eval_views"] == "1 clips x 1 crops of 8 frames"

    out = tmp_path / "tsm_mmaction2.pth"
    code, _, err = run_cli(capsys, "export", str(run), "--format", "mmaction2", "--out", str(out))
    assert code == 0, err
    saved = torch.load(out, weights_only=True)["state_dict"]
    given = torch.load(src, weights_only=True)["state_dict"]
    assert {mmaction2_to_tsm(k) for k in saved} == {k.removeprefix("module.") for k in given}
    for key, value in saved.items():
        assert torch.equal(value, given["module." + mmaction2_to_tsm(key)])

    check_at_work(capsys, run, data=tiny_demo, tmp_path=tmp_path)


# -- against MMAction2's TSM-R50 (the peer environment) ------------------------------------------


@pytest.mark.slow
def test_logits_equal_mmaction2s_tsm(
    mmaction2_python: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clip = torch.randint(
        0, 256, (2, 3, 8, 64, 64), generator=torch.Generator().manual_seed(2), dtype=torch.uint8
    )
    clip64 = normalize(clip, dtype=torch.float64)
    torch.save(clip64, tmp_path / "clip_float64.pt")
    request = {"name": "tsm", "config": _config("tsm_resnet50"), "num_classes": CLASSES,
               "seed": 3, "layout": "2d"}  # fmt: skip
    (tmp_path / "request.json").write_text(json.dumps([request]))
    done = subprocess.run(
        [str(mmaction2_python), str(PEER_SCRIPT), str(tmp_path)],
        capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    theirs_state = torch.load(tmp_path / "tsm.pth", weights_only=True)["state_dict"]
    renamed = {mmaction2_to_tsm(k): v for k, v in theirs_state.items()}
    src = save_as_main_py(tmp_path / "TSM_kinetics_RGB_resnet50.pth.tar", renamed)

    code, _, err = import_tsm(capsys, src, "tsm_resnet50", tmp_path / "run")
    assert code == 0, err
    with torch.no_grad():
        ours = load_run(tmp_path / "run").model.double()(clip64)
    theirs = torch.load(tmp_path / "tsm_logits.pt", weights_only=True)
    assert ours.shape == theirs.shape == (2, CLASSES)
    diff = float((ours - theirs).abs().max() / theirs.abs().max())
    with capsys.disabled():
        print(f"tsm via the TSM code's names: max |logit diff| / max |logit| = {diff:.3g}")
    assert diff <= RTOL
    assert torch.equal(ours, theirs)  # the same operations in the same order: bit for bit

    # The proof can fail: two shifted convs of one shape exchanged.
    a, b = "base_model.layer1.1.conv1.net.weight", "base_model.layer1.2.conv1.net.weight"
    renamed[a], renamed[b] = renamed[b], renamed[a]
    swapped = save_as_main_py(tmp_path / "swapped.pth.tar", renamed)
    code, _, err = import_tsm(capsys, swapped, "tsm_resnet50", tmp_path / "run_swapped")
    assert code == 0, err
    with torch.no_grad():
        wrong = load_run(tmp_path / "run_swapped").model.double()(clip64)
    assert float((wrong - theirs).abs().max() / theirs.abs().max()) > 1e-3
