"""`vidscale export`: TorchScript and ONNX files that reproduce the PyTorch model's logits."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.test_predict import CLASSES, FRAMES, SIZE, make_run
from vidscale.export import ATOL, export


def test_torchscript_round_trip_of_a_tsm_run(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    result = export(run, fmt="torchscript", out=tmp_path / "out" / "model.pt")
    assert result.max_abs_diff is not None and result.max_abs_diff <= ATOL
    assert result.precision == "fp32" and "in fp32" in result.check
    model = torch.jit.load(str(result.path))
    clips = torch.randn(3, 3, FRAMES, SIZE, SIZE)
    assert model(clips).shape == (3, len(CLASSES))
    meta = json.loads((tmp_path / "out" / "model.pt.json").read_text())
    assert meta["classes"] == CLASSES
    assert meta["input"]["shape"] == ["N", 3, FRAMES, SIZE, SIZE]


def test_unknown_format_and_too_old_opset_are_rejected(tmp_path: Path) -> None:
    run = make_run(tmp_path, name="tsn_resnet18")
    with pytest.raises(ValueError, match="format"):
        export(run, fmt="keras", out=tmp_path / "m")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="opset must be >= 11"):
        export(run, fmt="onnx", out=tmp_path / "m.onnx", opset=10)
    assert not (tmp_path / "m.onnx").exists()


def _opset_of(path: Path) -> int:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


@pytest.mark.slow
@pytest.mark.parametrize("opset", [18, 17])  # torch.export-based exporter; TorchScript-based
def test_onnx_export_of_a_tsm_run_matches_pytorch(tmp_path: Path, opset: int) -> None:
    pytest.importorskip("onnx")
    pytest.importorskip("onnxscript")
    run = make_run(tmp_path)
    out = tmp_path / "model.onnx"
    result = export(run, fmt="onnx", out=out, opset=opset, checkpoint="epoch_0001")
    assert result.path.stat().st_size > 1_000_000  # ResNet-18 weights are inside
    assert _opset_of(out) == opset
    assert json.loads((tmp_path / "model.onnx.json").read_text())["opset"] == opset
    if importlib.util.find_spec("onnxruntime") is None:
        assert result.max_abs_diff is None and "skipped" in result.check
        return
    assert result.max_abs_diff is not None and result.max_abs_diff <= ATOL
    import onnxruntime

    # Any batch size: the exported batch dimension is free.
    session = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    logits = session.run(None, {"clips": np.zeros((4, 3, FRAMES, SIZE, SIZE), np.float32)})[0]
    assert logits.shape == (4, len(CLASSES))
