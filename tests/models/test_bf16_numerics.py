"""bf16 autocast against fp32 for the 3D-convolution models, on the CPU and on CUDA.

A torch / cuDNN stack can compute bf16 3D convolutions wrongly (pytorch#163539: cuDNN 9.8-9.10)
or slowly (pytorch#166122); the GPU acceptance run (`scripts/gpu_checks.sh`, `-m cuda`) checks one
bf16 forward of I3D and of SlowFast against fp32 so that a bad stack fails here, named by its
versions, instead of passing for vidscale's accuracy or speed. The tolerance, 3% of the logits'
L2 norm, is 5x the 0.4-0.6% these forwards differ by on the CPU, a miscomputed convolution far
more (docs/benchmarks.md, "bf16 against fp32 for I3D and SlowFast on the CPU").
"""

from __future__ import annotations

import pytest
import torch

from vidscale.models.registry import ModelConfig, build_model

TOLERANCE = 0.03  # relative L2 difference of the logits, bf16 autocast against fp32
MODELS = (("i3d_resnet50_3x3x3", 8), ("slowfast_resnet50_8x8", 32))  # (name, frames)


def stack() -> str:
    """The versions a wrong result would be blamed on."""
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {cudnn}"


def relative_difference(name: str, frames: int, device: str, size: int) -> float:
    """||bf16 logits - fp32 logits|| / ||fp32 logits|| for one random batch of 2 clips."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(name=name, num_classes=400, frames=frames)).to(device).eval()
    clips = torch.randn(2, 3, frames, size, size, device=device)
    with torch.no_grad():
        reference = model(clips).float()
        with torch.autocast(device, dtype=torch.bfloat16):
            low = model(clips).float()
    return float((low - reference).norm() / reference.norm())


# The CPU at a small size on every run; CUDA at 224^2 in the GPU run (`-m cuda`).
DEVICES = (("cpu", 64), pytest.param("cuda", 224, marks=pytest.mark.cuda))


@pytest.mark.parametrize(("device", "size"), DEVICES)
@pytest.mark.parametrize(("name", "frames"), MODELS)
def test_bf16_forward_matches_fp32(name: str, frames: int, device: str, size: int) -> None:
    difference = relative_difference(name, frames, device, size=size)
    assert difference < TOLERANCE, f"{name}: bf16 off fp32 by {difference:.1%} ({stack()})"
