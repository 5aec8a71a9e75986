"""The trunk's convolutions are exact on 1-pixel inputs, where torch's CPU bf16 kernels are not."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vidscale.models.conv import Conv2d, Conv3d, reached_taps


def _pair(cls3: bool) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    if cls3:
        ours: nn.Module = Conv3d(16, 32, (3, 3, 3), stride=(1, 2, 2), padding=(1, 1, 1), bias=False)
        ref: nn.Module = nn.Conv3d(
            16, 32, (3, 3, 3), stride=(1, 2, 2), padding=(1, 1, 1), bias=False
        )
    else:
        ours = Conv2d(16, 32, 3, stride=2, padding=1, bias=False)
        ref = nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False)
    ref.load_state_dict(ours.state_dict())
    return ours, ref


@pytest.mark.parametrize("three_d", [False, True])
@pytest.mark.parametrize("size", [1, 2, 5])
def test_same_outputs_and_gradients_as_torch_in_float64(three_d: bool, size: int) -> None:
    ours, ref = _pair(three_d)
    ours.double()
    ref.double()
    shape = (4, 16, 3, size, size) if three_d else (4, 16, size, size)
    x = torch.randn(shape, dtype=torch.float64)
    grads = []
    for conv in (ours, ref):
        xx = x.clone().requires_grad_()
        y = conv(xx)
        y.square().sum().backward()
        grads.append((y.detach(), xx.grad, conv.weight.grad))
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("three_d", [False, True])
def test_bf16_weight_gradient_of_a_one_pixel_input_is_finite_and_repeatable(
    three_d: bool,
) -> None:
    """torch's own module returns garbage here (uninitialised memory): NaN or ~1e33 in the
    taps that no output reaches; ours gives 0 there, the same every time."""
    ours, _ = _pair(three_d)
    layout = torch.channels_last_3d if three_d else torch.channels_last
    ours = ours.to(memory_format=layout)  # type: ignore[call-overload]  # torch accepts it
    shape = (8, 16, 2, 1, 1) if three_d else (8, 16, 1, 1)
    x = torch.randn(shape).contiguous(memory_format=layout)
    seen = []
    for _ in range(3):
        junk = [torch.full((1 << 16,), 1e30) for _ in range(20)]  # dirty the allocator
        del junk
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = ours(x)
        y.float().square().sum().backward()
        grad = ours.weight.grad
        assert grad is not None and torch.isfinite(grad).all()
        off_centre = grad.clone()
        off_centre[..., 1, 1] = 0
        assert torch.count_nonzero(off_centre) == 0
        seen.append(grad.clone())
        ours.zero_grad(set_to_none=True)
    assert all(torch.equal(seen[0], g) for g in seen[1:])
    # And right: within bf16 rounding of the float64 gradient of the bf16-rounded operands
    # (CPUs without AMX returned finite garbage here from a 1 x 1 temporal convolution).
    ref: nn.Module = (
        Conv3d(16, 32, 3, stride=(1, 2, 2), padding=1, bias=False)
        if three_d
        else Conv2d(16, 32, 3, stride=2, padding=1, bias=False)
    ).double()
    assert isinstance(ref.weight, torch.Tensor) and isinstance(ours.weight, torch.Tensor)
    with torch.no_grad():
        ref.weight.copy_(ours.weight.bfloat16().double())
    ref(x.bfloat16().double()).square().sum().backward()
    expected = ref.weight.grad
    assert expected is not None
    error = (seen[0].double() - expected).norm() / expected.norm()
    assert error < 0.02


def test_a_temporally_strided_3d_convolution_of_one_pixel_matches_torch_in_float64() -> None:
    torch.manual_seed(0)
    ours = Conv3d(8, 12, (3, 3, 3), stride=(2, 2, 2), padding=(1, 1, 1), bias=True).double()
    ref = nn.Conv3d(8, 12, (3, 3, 3), stride=(2, 2, 2), padding=(1, 1, 1), bias=True).double()
    ref.load_state_dict(ours.state_dict())
    x = torch.randn((3, 8, 5, 1, 1), dtype=torch.float64)
    results = []
    for conv in (ours, ref):
        xx = x.clone().requires_grad_()
        y = conv(xx)
        y.square().sum().backward()
        assert conv.bias is not None
        results.append((y.detach(), xx.grad, conv.weight.grad, conv.bias.grad))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    ("size", "kernel", "stride", "padding", "expected"),
    [
        (1, 3, 1, 1, (1, 2, 0)),  # res5 of a 32-pixel crop: the centre tap only
        (1, 3, 2, 1, (1, 2, 0)),
        (2, 3, 2, 1, (1, 3, 0)),  # res5's strided conv of a 2 x 2 input: the lower taps
        (2, 3, 1, 1, (0, 3, 1)),  # every tap reaches the input
        (1, 7, 2, 3, (3, 4, 0)),  # a stem on one pixel
        (3, 7, 2, 3, (1, 6, 2)),
        (56, 3, 1, 1, (0, 3, 1)),
        (2, 1, 2, 0, (0, 1, 0)),
    ],
)
def test_reached_taps(
    size: int, kernel: int, stride: int, padding: int, expected: tuple[int, int, int]
) -> None:
    assert reached_taps(size, kernel, stride, padding) == expected


@pytest.mark.parametrize(
    ("size", "kernel", "stride"),
    [(1, 3, 1), (1, 3, 2), (2, 3, 2), (2, 3, 1), (3, 7, 2), (1, 7, 2), (4, 3, 2), (5, 5, 3)],
)
@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
def test_trimmed_convolutions_match_torch_in_float64(
    size: int, kernel: int, stride: int, layout: torch.memory_format
) -> None:
    """Whichever taps are skipped, the output and the gradients (of the input, of every tap
    of the weight, of the bias) are torch's."""
    torch.manual_seed(0)
    ours = Conv2d(6, 10, kernel, stride=stride, padding=kernel // 2, bias=True).double()
    ref = nn.Conv2d(6, 10, kernel, stride=stride, padding=kernel // 2, bias=True).double()
    ref.load_state_dict(ours.state_dict())
    ours = ours.to(memory_format=layout)  # type: ignore[call-overload]  # torch accepts it
    ref = ref.to(memory_format=layout)  # type: ignore[call-overload]
    x = torch.randn((3, 6, size, size + 1 if size > 1 else 1), dtype=torch.float64)
    results = []
    for conv in (ours, ref):
        xx = x.clone().contiguous(memory_format=layout).requires_grad_()
        y = conv(xx)
        y.square().sum().backward()
        assert conv.bias is not None
        results.append((y.detach(), xx.grad, conv.weight.grad, conv.bias.grad))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
