"""Convolutions of the shared trunk: exact, and no work on kernel taps that read only padding.

A k x k convolution with padding k // 2 of an input narrower than its kernel has taps that see
nothing but the zero padding: on a 1 x 1 input (a ResNet's res5 at a 32-pixel crop, the demo's
shape) only the centre tap reaches the input, on a 2 x 2 input at stride 2 only a 2 x 2 corner of
a 3 x 3 kernel. Those taps add exact zeros to the output and get exactly zero gradient, yet the
CPU kernels compute them in full, and badly: on an AVX2-only CPU (oneDNN's AVX2 kernels, torch
2.13) the forward + backward of res5's 512-channel 3 x 3 convolution of a 1 x 1 input takes
about 14x as long as the centre tap alone, about half of a TSM-ResNet-18 training step at the
demo's shape (docs/benchmarks.md, "The demo on an AVX2-only CPU"). So `Conv2d` convolves with
the taps that reach the input only: the same output up to the order of the additions, the same
gradients, the other taps' gradients exactly 0 as before. The parameters and `state_dict` are
`nn.Conv2d`'s / `nn.Conv3d`'s.

The 1 x 1 case (for `Conv3d`, the spatially strided one only) is computed as a matrix product,
and it must be on the CPU in bfloat16: torch 2.13's oneDNN kernels get it wrong in the backward
pass. The weight gradient of a stride-2 3 x 3
convolution of a 1 x 1 input reads uninitialised memory (NaN or 1e33 where the other taps'
gradients are 0), so one such step ruins a model (multigrid's coarsest crops hit it: a 16^2 crop
through a ResNet reaches res5's strided convolution at 1 x 1); and on CPUs without AMX the bf16
kernels also return garbage weight gradients for a temporal convolution of 1 x 1 pixels (seen on
an AMD EPYC host), hence a matrix product over the channels x temporal taps of the unfolded clip
rather than a 1 x 1 convolution. Every other input takes the module's usual path.
"""

from __future__ import annotations

from functools import cache

import torch.nn.functional as F
from torch import Tensor, nn


def _centre_only(kernel: tuple[int, ...], padding: object) -> bool:
    """Whether a 1-pixel input reaches only the centre tap: odd kernel, 'same' padding (any
    stride: the output is 1 pixel too)."""
    return isinstance(padding, tuple) and all(
        k % 2 == 1 and p == k // 2 for k, p in zip(kernel, padding, strict=True)
    )


@cache  # a pure function of four ints, asked at every forward
def reached_taps(size: int, kernel: int, stride: int, padding: int) -> tuple[int, int, int]:
    """The kernel taps [first, last) that read the input at some output position along one
    dimension, and the padding that keeps every output position where it was with only those
    taps. Returns (0, kernel, padding) where that cannot be said with symmetric padding."""
    out = (size + 2 * padding - kernel) // stride + 1
    reached = [
        j for j in range(kernel) if any(0 <= i * stride - padding + j < size for i in range(out))
    ]
    if not reached:
        return 0, kernel, padding
    first, last = reached[0], reached[-1] + 1
    new_padding = padding - first
    if new_padding < 0 or (size + 2 * new_padding - (last - first)) // stride + 1 != out:
        return 0, kernel, padding
    return first, last, new_padding


class Conv2d(nn.Conv2d):
    """`nn.Conv2d` (same parameters and state_dict) that skips the taps reading only padding
    and is exact on 1 x 1 inputs (module docstring)."""

    def forward(self, input: Tensor) -> Tensor:
        k, s = self.kernel_size, self.stride
        plain = self.groups == 1 and self.dilation == (1, 1)
        if not plain or not isinstance(self.padding, tuple):
            return super().forward(input)
        (h0, h1, ph), (w0, w1, pw) = (
            reached_taps(int(n), k[d], s[d], int(self.padding[d]))  # type: ignore[arg-type]
            for d, n in enumerate(input.shape[-2:])
        )
        if (h1 - h0, w1 - w0) == k:
            return super().forward(input)
        weight = self.weight[:, :, h0:h1, w0:w1]
        if (h1 - h0, w1 - w0) == input.shape[-2:] and (ph, pw) == (0, 0):
            # One output pixel whose window is the whole input (the centre tap of a 1 x 1
            # input, a 2 x 2 corner at stride 2): a matrix product.
            return F.linear(input.flatten(1), weight.flatten(1), self.bias)[..., None, None]
        return F.conv2d(input, weight, self.bias, s, (ph, pw))


class Conv3d(nn.Conv3d):
    """`nn.Conv3d` (same parameters and state_dict) exact on inputs of 1 x 1 pixels, whatever
    their length in time (module docstring)."""

    def forward(self, input: Tensor) -> Tensor:
        _, kh, kw = self.kernel_size
        st, sh, sw = self.stride
        # Spatially strided only, the case the bf16 kernels get wrong: a matrix product in the
        # stride-1 case too would make the rounding depend on the batch size, which sub-batch
        # BN over a few 1 x 1 values amplifies past its exactness test (I3D at 16^2).
        spatial_special = max(sh, sw) > 1 and _centre_only((kh, kw), self.padding[1:])  # type: ignore[index]
        plain = self.groups == 1 and self.dilation == (1, 1, 1)
        if input.shape[-2:] == (1, 1) and plain and spatial_special:
            centre = self.weight[:, :, :, kh // 2, kw // 2]  # (out, in, kt)
            out_channels, in_channels, kt = centre.shape
            pt = int(self.padding[0])  # type: ignore[index, arg-type]
            clip = F.pad(input[..., 0, 0], (pt, pt))  # (n, in, t + 2 pt)
            windows = clip.unfold(2, kt, st)  # (n, in, t_out, kt)
            windows = windows.permute(0, 2, 1, 3).reshape(len(input), -1, in_channels * kt)
            out = F.linear(windows, centre.reshape(out_channels, in_channels * kt), self.bias)
            return out.transpose(1, 2)[..., None, None]  # (n, out, t_out, 1, 1)
        return super().forward(input)
