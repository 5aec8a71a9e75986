"""`vidscale export RUN --format torchscript|onnx|trunk|mmaction2 --out FILE`: a trained model
for deployment, its ResNet trunk for the video models, or an MMAction2 checkpoint.

The exported model takes float clips (N, C, T, S, S) normalised as in training ((x - mean) / std
on the 0..255 scale, with the run's statistics: `data.mean`/`data.std` x 255 for RGB) and
returns logits (N, K); T and S are the run's evaluation clip (frames, crop size), N is free.
`FILE.json` beside it records the class names, input shape, mean, std, sampling and, for a
multi-label run, how the logits are read (`"multi_label": true`, `outputs`: independent sigmoid
probabilities), so a deployment needs nothing else from the run.

Every export is checked: the saved file is loaded back and run on a random clip of a batch size
other than the one it was traced with, and its logits must match the PyTorch model's. Export
runs without gradients, where TSM's shift is plain tensor ops (`models/temporal_shift.py`), so
every exporter used here records it. TorchScript uses `torch.jit.trace`. ONNX at opset >= 18 uses the
`torch.export`-based exporter (`dynamo=True`, needing `onnx` and `onnxscript`); it cannot write
older opsets for this model (its down-conversion fails and it keeps 18), so opsets 11-17, which
older runtimes need, use the TorchScript-based exporter. The ONNX check runs the file in
onnxruntime when it is installed (the `onnx` extra) and is reported as skipped otherwise. The
check compares fp32 logits (`scoring.precision`'s rule: no autocast on either side), and the
result says so (`precision`).

`trunk` hands an ImageNet run's weights to the video models (`export_trunk`): FILE is the run's
2D ResNet as a torchvision-format state_dict (`conv1.weight`, `bn1.*`, `layer1.0.conv1.weight`,
..., `fc.*`), the file `model.pretrained` takes: as-is for TSN/TSM, inflated for I3D.

`mmaction2` is the reverse of `vidscale import-weights --format mmaction2` (`export_mmaction2`):
FILE is an MMAction2 1.x checkpoint of the same network (`vidscale.weights.to_mmaction2`).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from vidscale.atomic import atomic_write, atomic_write_text
from vidscale.data.inputs import ModelInput
from vidscale.errors import InputError
from vidscale.models.image import torchvision_resnet
from vidscale.models.registry import ModelConfig, build_model, list_models
from vidscale.models.resnet import ResNet
from vidscale.predict import LoadedRun, load_run
from vidscale.run.ref import run_config

Format = Literal["torchscript", "onnx", "trunk", "mmaction2"]
MIN_ONNX_OPSET = 11  # the oldest opset the check passes with
DYNAMO_MIN_OPSET = 18  # the torch.export-based exporter's oldest opset
ATOL, RTOL = 1e-4, 1e-3


class ExportMismatch(RuntimeError):
    """The exported model's outputs differ from PyTorch's beyond the tolerance."""


@dataclass(frozen=True)
class ExportResult:
    path: Path
    format: Format
    max_abs_diff: float | None  # None: the exported file could not be run here
    check: str  # what was compared, or why the comparison was skipped
    # the arithmetic of the logits compared (`scoring.precision`); None: tensors compared as saved
    precision: str | None = None


def export(
    run: Path,
    *,
    fmt: Format,
    out: Path,
    opset: int = DYNAMO_MIN_OPSET,
    checkpoint: str = "last",
    batch: int = 1,
) -> ExportResult:
    """Export the run's `checkpoint` ("last", "best", an epoch name or a file) to `out` in
    `fmt`, traced at batch size `batch`, and check it against PyTorch; `"trunk"` is
    `export_trunk` and `"mmaction2"` `export_mmaction2` (neither traced nor batched)."""
    if fmt == "trunk":
        return export_trunk(run, out=out, checkpoint=checkpoint)
    if fmt == "mmaction2":
        return export_mmaction2(run, out=out, checkpoint=checkpoint)
    if fmt not in ("torchscript", "onnx"):
        raise ValueError(
            f"format must be 'torchscript', 'onnx', 'trunk' or 'mmaction2', got {fmt!r}"
        )
    if fmt == "onnx" and opset < MIN_ONNX_OPSET:
        raise ValueError(f"opset must be >= {MIN_ONNX_OPSET}, got {opset}")
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    loaded = load_run(run, checkpoint=checkpoint, device="cpu")
    spec, c = loaded.cfg.data.eval_clip, loaded.cfg.model.in_channels
    shape = (c, spec.frames, spec.crop_size, spec.crop_size)
    gen = torch.Generator().manual_seed(0)
    example = torch.randn(batch, *shape, generator=gen)
    probe_clip = torch.randn(batch + 1, *shape, generator=gen)  # another batch size
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # fp32 on both sides (no autocast; the file is traced from the fp32 model): the scoring
    # rule's default, so the check compares the logits `eval` and `predict` compute.
    with torch.no_grad():
        expected = loaded.model(probe_clip).numpy()
        match fmt:
            case "torchscript":
                got: np.ndarray | None = _torchscript(loaded, example, probe_clip, out)
                how = "torch.jit.load"
            case "onnx":
                got = _onnx(loaded, example, probe_clip, out, opset=opset)
                how = f"onnxruntime (opset {opset})"
    _write_metadata(loaded, out, fmt=fmt, shape=shape, opset=opset if fmt == "onnx" else None)
    if got is None:
        return ExportResult(out, fmt, None, "skipped: onnxruntime is not installed")
    diff = float(np.abs(got - expected).max())
    if not np.allclose(got, expected, atol=ATOL, rtol=RTOL):
        raise ExportMismatch(f"{out}: outputs differ from PyTorch's by up to {diff:.3g}")
    check = f"{how} on a random {tuple(probe_clip.shape)} clip in fp32: max |diff| {diff:.2g}"
    return ExportResult(out, fmt, diff, check, "fp32")


def _torchscript(
    loaded: LoadedRun, example: torch.Tensor, probe_clip: torch.Tensor, out: Path
) -> np.ndarray:
    with warnings.catch_warnings():
        # The trace fixes the shift's shape and layout tests (T, strides); T and S are fixed
        # by the export's contract, and the batch size enters none of them.
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        traced = torch.jit.trace(loaded.model, (example,), check_trace=False)
    torch.jit.save(traced, str(out))
    reloaded = torch.jit.load(str(out), map_location="cpu")
    result: np.ndarray = reloaded(probe_clip).numpy()
    return result


def _onnx(
    loaded: LoadedRun, example: torch.Tensor, probe_clip: torch.Tensor, out: Path, *, opset: int
) -> np.ndarray | None:
    if opset >= DYNAMO_MIN_OPSET:
        _onnx_dynamo(loaded.model, example, out, opset=opset)
    else:
        _onnx_torchscript(loaded.model, example, out, opset=opset)
    if importlib.util.find_spec("onnxruntime") is None:
        return None
    import onnxruntime

    session = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    result: np.ndarray = session.run(None, {"clips": probe_clip.numpy()})[0]
    return result


def _onnx_dynamo(model: torch.nn.Module, example: torch.Tensor, out: Path, *, opset: int) -> None:
    missing = [m for m in ("onnx", "onnxscript") if importlib.util.find_spec(m) is None]
    if missing:
        raise RuntimeError(
            f"ONNX export needs {' and '.join(missing)}: pip install 'vidscale[onnx]'"
        )
    program = torch.onnx.export(
        model,
        (example,),
        dynamo=True,
        opset_version=opset,
        input_names=["clips"],
        output_names=["logits"],
        dynamic_shapes=({0: torch.export.Dim("batch")},),
    )
    if program is None:
        raise RuntimeError("torch.onnx.export returned no program")
    program.save(str(out))


def _onnx_torchscript(
    model: torch.nn.Module, example: torch.Tensor, out: Path, *, opset: int
) -> None:
    with warnings.catch_warnings():
        # Deliberate: the only exporter that writes opsets below 18 (see the module docstring);
        # its trace fixes shapes that the export's contract fixes anyway (see `_torchscript`).
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        torch.onnx.export(
            model,
            (example,),
            str(out),
            dynamo=False,
            opset_version=opset,
            input_names=["clips"],
            output_names=["logits"],
            dynamic_axes={"clips": {0: "batch"}, "logits": {0: "batch"}},
        )


def _write_metadata(
    loaded: LoadedRun, out: Path, *, fmt: Format, shape: tuple[int, ...], opset: int | None
) -> None:
    spec = loaded.cfg.data.eval_clip
    mean, std = ModelInput.of(spec, loaded.cfg.data).statistics()
    meta = {
        "format": fmt,
        "opset": opset,
        "model": loaded.cfg.model.name,
        "checkpoint": str(loaded.checkpoint),
        "classes": loaded.classes,
        "input": {
            "name": "clips",
            "shape": ["N", *shape],
            "layout": "N, C, T, H, W",
            "modality": spec.modality,
        },
        "normalize": {"scale": "0..255", "mean": list(mean), "std": list(std)},
        "output": {"name": "logits", "shape": ["N", len(loaded.classes)]},
        "sampling": {
            "sampling": spec.sampling,
            "stride": spec.stride,
            "short_side": spec.short_side,
            "flow_stack": spec.flow_stack if spec.modality == "flow" else None,
        },
        # as the evaluator and `vidscale predict` score a video from several views
        "views": {"clips": spec.num_clips, "crops": spec.num_crops, "average": "logits"},
        **_labels_metadata(loaded),
    }
    out.with_name(out.name + ".json").write_text(json.dumps(meta, indent=2) + "\n")


def _labels_metadata(loaded: LoadedRun) -> dict[str, Any]:
    """A multi-label run's logits are each class's own sigmoid, its views combined by the run's
    rule (`data.eval_aggregate`); nothing is added for a single-label run (a softmax)."""
    data = loaded.cfg.data
    if not data.multi_label:
        return {}
    return {
        "multi_label": True,
        "outputs": "independent sigmoid probabilities, one per class (a video has a set)",
        "views_combined": f"{data.eval_aggregate} of the views' sigmoid probabilities",
    }


def export_trunk(run: Path, *, out: Path, checkpoint: str = "last") -> ExportResult:
    """Write the 2D ResNet of the run's `checkpoint` to `out` as a torchvision-format
    state_dict, and `out.json` saying what it is.

    An image ResNet run (`resnet18`, `resnet50`, ...) gives its whole network; a TSN or TSM run
    its trunk and its video classifier (TSM's shift has no weights: the same keys, but features
    learnt with the shift, which the sidecar records). `ValueError` before any weights are read
    for a run without such a trunk: AlexNet, I3D (3D kernels), SlowFast. The file is written
    atomically and checked: read back, equal tensor for tensor, it must load strictly into a
    fresh torchvision-layout ResNet of the same depth. Load it with `model.pretrained=FILE`
    (a new class count re-initialises `fc` only).
    """
    _require_trunk(run)
    loaded = load_run(run, checkpoint=checkpoint, device="cpu")
    trunk = torchvision_resnet(loaded.model)
    state = {k: v.detach().clone() for k, v in trunk.state_dict().items()}
    out = Path(out)
    atomic_write(out, lambda f: torch.save(state, f))
    check = _check_trunk_file(out, state, trunk)
    _write_trunk_metadata(loaded, trunk, out, state=state)
    return ExportResult(out, "trunk", 0.0, check)


def _require_trunk(run: Path) -> None:
    model_cfg = run_config(run).model
    with torch.device("meta"):  # no weights: fail before reading a checkpoint
        model = build_model(
            dataclasses.replace(model_cfg, pretrained=None, num_classes=model_cfg.num_classes or 1)
        )
    try:
        torchvision_resnet(model)
    except ValueError as err:
        raise InputError(f"{run} ({model_cfg.name}): cannot export a trunk: {err}") from err


def _check_trunk_file(out: Path, state: dict[str, torch.Tensor], trunk: ResNet) -> str:
    reloaded = torch.load(out, map_location="cpu", weights_only=True)
    if list(reloaded) != list(state) or not all(torch.equal(reloaded[k], state[k]) for k in state):
        raise ExportMismatch(f"{out}: the tensors read back differ from the run's trunk")
    with torch.device("meta"):  # keys and shapes only: assign=True takes the tensors as they are
        fresh = ResNet(
            trunk.depth,
            num_classes=trunk.fc.out_features,
            in_channels=state["conv1.weight"].shape[1],
        )
    try:
        fresh.load_state_dict(reloaded, assign=True)  # strict: torchvision's keys and shapes
    except RuntimeError as err:
        raise ExportMismatch(f"{out}: not a torchvision ResNet-{trunk.depth}: {err}") from err
    return (
        f"read back equal; loads strictly into a torchvision-layout ResNet-{trunk.depth} "
        f"({len(state)} tensors)"
    )


@functools.cache
def loads_into(depth: int) -> tuple[str, ...]:
    """Registered models whose `model.pretrained` takes a ResNet-`depth` file: a 2D trunk of that
    depth as-is, an inflated one (I3D) through inflation."""
    names = []
    for name in (n for n in list_models() if f"resnet{depth}" in n):  # built to be sure
        with torch.device("meta"):
            model = build_model(ModelConfig(name=name))
        trunk = model if isinstance(model, ResNet) else getattr(model, "trunk", None)
        if isinstance(trunk, ResNet) and trunk.depth == depth:
            names.append(name)
    return tuple(names)


def _write_trunk_metadata(
    loaded: LoadedRun, trunk: ResNet, out: Path, *, state: dict[str, torch.Tensor]
) -> None:
    spec = loaded.cfg.data.eval_clip
    mean, std = ModelInput.of(spec, loaded.cfg.data).statistics()
    meta = {
        "format": "trunk",
        "contents": (
            f"torchvision-format ResNet-{trunk.depth} state_dict: conv1, bn1, layer1..layer4, fc"
        ),
        "architecture": f"resnet{trunk.depth}",
        "tensors": len(state),
        "model": loaded.cfg.model.name,
        "checkpoint": str(loaded.checkpoint),
        "in_channels": state["conv1.weight"].shape[1],
        "num_classes": trunk.fc.out_features,
        "classes": loaded.classes,
        "temporal_shift": any(block.shift is not None for block in trunk.blocks()),
        "normalize": {"scale": "0..255", "mean": list(mean), "std": list(std)},
        "usage": f"--set model.pretrained={out.name}",
        "loads_into": list(loads_into(trunk.depth)),
    }
    atomic_write_text(out.with_name(out.name + ".json"), json.dumps(meta, indent=2) + "\n")


def export_mmaction2(run: Path, *, out: Path, checkpoint: str = "last") -> ExportResult:
    """Write the run's `checkpoint` to `out` as an MMAction2 1.x checkpoint, and `out.json`
    saying what it is and how MMAction2 loads it.

    `InputError` before any weights are read for a run MMAction2 has no model of
    (`vidscale.weights.to_mmaction2.check_exportable`). The file is written atomically and
    checked: read back with `weights_only=True`, equal tensor for tensor, and imported back
    (`vidscale.weights.mmaction2.convert`, the import's own check of keys and shapes) it must
    be the run's state_dict exactly.
    """
    from vidscale.weights import mmaction2, to_mmaction2

    to_mmaction2.check_exportable(run_config(run), Path(run))
    loaded = load_run(run, checkpoint=checkpoint, device="cpu")
    name = loaded.cfg.model.name
    state = loaded.model.state_dict()
    contents = to_mmaction2.mmaction2_checkpoint(
        state, model=name, classes=loaded.classes, checkpoint=loaded.checkpoint
    )
    out = Path(out)
    atomic_write(out, lambda f: torch.save(contents, f))
    reloaded = torch.load(out, map_location="cpu", weights_only=True)
    theirs = reloaded["state_dict"]
    written = contents["state_dict"]
    if list(theirs) != list(written) or not all(torch.equal(theirs[k], written[k]) for k in theirs):
        raise ExportMismatch(f"{out}: the tensors read back differ from the ones written")
    back = mmaction2.convert(theirs, state, model=name)
    if set(back) != set(state) or not all(torch.equal(back[k], state[k]) for k in state):
        raise ExportMismatch(f"{out}: imported back, it is not the run's state_dict")
    meta = to_mmaction2.sidecar(
        loaded.cfg, classes=loaded.classes, checkpoint=loaded.checkpoint, out=out
    )
    atomic_write_text(out.with_name(out.name + ".json"), json.dumps(meta, indent=2) + "\n")
    check = (
        f"read back equal; imports back as {name} tensor for tensor ({len(theirs)} tensors); "
        f"MMAction2 config {meta['config']}"
    )
    return ExportResult(out, "mmaction2", 0.0, check)
