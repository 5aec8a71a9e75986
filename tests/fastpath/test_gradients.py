"""The probe's gradient check: healthy bf16 passes on real models, a wrong kernel's gradients do
not, and the probe leaves a setting with wrong gradients out, or refuses one it was asked for.

The wrong gradients come two ways: a test model whose backward in bf16 scales its gradient by
1e17 (what torch 2.13's bf16 conv3d backward gives on an AVX512-BF16 CPU for a depth-2 input,
docs/benchmarks.md), so that every machine checks the rejection; and that kernel itself, where
the machine running the test has it.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.fastpath.test_isolation import QUICK, SHORT
from tests.fastpath.test_probe import SHAPE, TinyClipNet
from vidscale.fastpath.gradients import NORM_FACTOR, gradients, wrong_gradient
from vidscale.fastpath.isolation import ProbeFailed, probe_isolated
from vidscale.fastpath.settings import Candidate, FastPath
from vidscale.fastpath.trials import ProbeShape, probe
from vidscale.models.registry import ModelConfig, build_model

CPU = torch.device("cpu")
FP32, BF16, BF16_CL = Candidate(False, False), Candidate(True, False), Candidate(True, True)
GARBAGE = 1e17  # the scale of the broken kernel's weight gradients, against fp32's ~100


def _grads(model: nn.Module, clips: torch.Tensor, labels: torch.Tensor, *, bf16: bool) -> Any:
    fast = FastPath(CPU, bf16, False, compile=False)
    return gradients(model, clips, labels, autocast=fast.autocast())


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "frames", "size", "batch"),
    [("tsm_resnet18", 8, 32, 8), ("tsn_resnet18", 8, 32, 8), ("tsm_resnet50", 8, 64, 2)],
)
def test_healthy_bf16_gradients_pass_though_far_from_fp32s_in_direction(
    name: str, frames: int, size: int, batch: int
) -> None:
    """bf16 at random initialisation: far from fp32 in direction (cosine well under 1), every
    tensor's norm near fp32's; and a candidate differing in one tensor by the broken kernel's
    scale, or by a NaN, is caught, naming that tensor."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(name=name, num_classes=10, frames=frames)).train()
    clips, labels = torch.randn(batch, 3, frames, size, size), torch.randint(10, (batch,))
    fp32 = _grads(model, clips, labels, bf16=False)
    bf16 = _grads(model, clips, labels, bf16=True)
    assert wrong_gradient(fp32, bf16) is None
    cosine = F.cosine_similarity(
        torch.cat([g.flatten() for g in fp32.values()]),
        torch.cat([g.flatten() for g in bf16.values()]),
        dim=0,
    )
    assert cosine < 0.999  # not fp32's arithmetic: the check passes real rounding
    target = "trunk.layer2.0.conv1.weight"
    assert wrong_gradient(fp32, bf16 | {target: fp32[target] * GARBAGE}) == (
        f"{target}'s gradient norm is {float(fp32[target].norm()) * GARBAGE:.3g} against "
        f"fp32's {float(fp32[target].norm()):.3g}"
    )
    nan = fp32[target].clone()
    nan[0] = float("nan")
    assert wrong_gradient(fp32, bf16 | {target: nan}) == (
        f"{target}'s gradient is not finite (fp32's norm {float(fp32[target].norm()):.3g})"
    )


def test_the_norm_bounds_are_both_ways_and_spare_tensors_near_zero() -> None:
    ref = {"a": torch.full((4,), 1.0), "b": torch.full((4,), 1.0), "tiny": torch.full((4,), 1e-9)}
    within = {"a": ref["a"] * (NORM_FACTOR * 0.9), "b": ref["b"] / (NORM_FACTOR * 0.9)}
    assert wrong_gradient(ref, within | {"tiny": torch.full((4,), 1e-5)}) is None
    past = NORM_FACTOR * 1.1
    assert "a's gradient norm is" in str(wrong_gradient(ref, ref | {"a": ref["a"] * past}))
    assert "b's gradient norm is" in str(wrong_gradient(ref, ref | {"b": ref["b"] / past}))
    # "tiny" is below the floor: only a norm past NORM_FACTOR times the floor is wrong
    assert "tiny's" in str(wrong_gradient(ref, ref | {"tiny": torch.full((4,), 10.0)}))
    assert wrong_gradient(ref, {"a": ref["a"], "b": ref["b"]}) == (
        "tiny has no gradient (fp32's norm 2e-09)"
    )


class _ScaledInBf16(torch.autograd.Function):
    """Identity forward; backward scales the gradient by `GARBAGE` when the forward ran under
    bf16 autocast: a kernel that is wrong in bf16 only."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.wrong = torch.is_autocast_enabled("cpu")
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * GARBAGE if ctx.wrong else grad


class WrongInBf16(TinyClipNet):
    """`TinyClipNet` whose convolution's gradients are garbage in bf16 (any layout)."""

    def forward(self, clips: torch.Tensor) -> torch.Tensor:
        features = _ScaledInBf16.apply(self.conv(clips))
        return self.head(self.drop(features.relu().mean((2, 3, 4))))


@pytest.mark.slow
def test_the_probe_leaves_out_a_setting_whose_gradients_are_wrong() -> None:
    result = probe_isolated(
        WrongInBf16, [FP32, BF16], device=CPU, shape=SHAPE, settings=QUICK, limits=SHORT
    )
    assert list(result.samples) == ["fp32"] and len(result.samples["fp32"]) == QUICK.repeats
    assert result.failed["bf16"].startswith(
        "its gradients are not fp32's: conv.weight's gradient norm is "
    )


def test_a_healthy_bf16_is_timed_as_before() -> None:
    timed = probe(TinyClipNet, [FP32, BF16], device=CPU, shape=SHAPE, settings=QUICK)
    assert timed.wrong == {} and list(timed.samples) == ["fp32", "bf16"]


@pytest.mark.slow
def test_a_wrong_setting_asked_for_is_refused_in_one_line() -> None:
    """bf16 asked for (the first candidate): the probe fails, naming it and the parameter."""
    with pytest.raises(ProbeFailed, match=r"bf16 would not train here: its gradients are not"):
        probe_isolated(
            WrongInBf16, [BF16, BF16_CL], device=CPU, shape=SHAPE, settings=QUICK, limits=SHORT
        )


class DepthTwoTemporalConv(nn.Module):
    """The layer torch 2.13's bf16 kernel gets wrong on an AVX512-BF16 CPU: a (3, 1, 1) conv3d
    over a depth-2 input (I3D-R50 3x1x1's layer1 at 8 frames)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv3d(3, 64, 1)
        self.temporal = nn.Conv3d(64, 64, (3, 1, 1), padding=(1, 0, 0))
        self.head = nn.Linear(64, 4)

    def forward(self, clips: torch.Tensor) -> torch.Tensor:
        return self.head(self.temporal(self.conv(clips)).mean((2, 3, 4)))


def _kernel_is_wrong_here(threads: int) -> bool:
    """The broken kernel alone, at `threads`: its weight gradient against fp32's."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(0)
        x, w = torch.randn(2, 64, 2, 28, 28), torch.randn(64, 64, 3, 1, 1)
        grads = []
        for bf16 in (False, True):
            weight = w.clone().requires_grad_()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                out = F.conv3d(x, weight, padding=(1, 0, 0))
            out.float().sum().backward()
            assert weight.grad is not None
            grads.append(weight.grad)
        fp32, bf16_grad = (float(g.norm()) for g in grads)
        return not (bf16_grad < NORM_FACTOR * fp32)  # NaN compares False: wrong
    finally:
        torch.set_num_threads(previous)


@pytest.mark.slow
@pytest.mark.parametrize("threads", [1, 2])
def test_the_probe_rejects_bf16_exactly_where_the_real_kernel_is_wrong(threads: int) -> None:
    """On a CPU whose bf16 conv3d backward is wrong for this shape (an AVX512-BF16 EPYC under
    torch 2.13), the probe leaves bf16 out; where it is right, bf16 is timed."""
    wrong_here = _kernel_is_wrong_here(threads)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)  # the probe's child trains with the caller's threads
    try:
        shape = ProbeShape(batch=2, channels=3, frames=2, crop=28, num_classes=4)
        result = probe_isolated(
            DepthTwoTemporalConv, [FP32, BF16], device=CPU, shape=shape, settings=QUICK
        )
    finally:
        torch.set_num_threads(previous)
    assert ("bf16" in result.failed) == wrong_here, result.failed
    assert ("bf16" in result.samples) != wrong_here
    if wrong_here:
        assert "temporal.weight" in result.failed["bf16"]


def test_the_check_builds_from_a_pickled_builder() -> None:
    """The probe's child gets `build` pickled: a partial of the registry's builder works."""
    build = functools.partial(build_model, ModelConfig(name="tsn_resnet18", num_classes=4))
    timed = probe(build, [FP32, BF16], device=CPU, shape=SHAPE, settings=QUICK)
    assert timed.wrong == {}
