"""Convolutions of the shared trunk, exact on inputs one pixel wide.

With padding k // 2, a spatially strided k x k convolution of a 1 x 1 input has a 1 x 1 output
that only the kernel's centre tap reaches. The CPU bfloat16 kernels of torch 2.13 (oneDNN, both
2D and 3D, channels-last or not) get that case wrong in the backward pass: the weight gradient
of a stride-2 3 x 3 convolution of a 1 x 1 input reads uninitialised memory (NaN or 1e33 where
the other taps' gradients are 0), so one such step ruins a model. Multigrid's coarsest crops hit
it: a 16^2 crop through a ResNet reaches res5's strided convolution at 1 x 1. These modules
compute that case with the centre tap alone, as a matrix product (over the channels, and for 3D
over the channels x temporal taps of the unfolded clip): the same output and the same
gradients, the other taps' gradients exactly 0, on every device and dtype. A matrix product
rather than a 1 x 1 convolution, because the bf16 convolution kernels on CPUs without AMX also
return garbage weight gradients for a temporal convolution of 1 x 1 pixels (seen on an AMD EPYC
host). Every other input takes the module's usual path.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn


def _centre_only(kernel: tuple[int, ...], stride: tuple[int, ...], padding: object) -> bool:
    """Whether a 1-pixel input is the special case: strided, odd kernel, 'same' padding."""
    return (
        isinstance(padding, tuple)
        and any(s > 1 for s in stride)
        and all(k % 2 == 1 and p == k // 2 for k, p in zip(kernel, padding, strict=True))
    )


class Conv2d(nn.Conv2d):
    """`nn.Conv2d` (same parameters and state_dict) exact on 1 x 1 inputs (module docstring)."""

    def forward(self, input: Tensor) -> Tensor:
        k, s = self.kernel_size, self.stride
        plain = self.groups == 1 and self.dilation == (1, 1)
        if input.shape[-2:] == (1, 1) and plain and _centre_only(k, s, self.padding):
            centre = self.weight[:, :, k[0] // 2, k[1] // 2]  # (out, in)
            return F.linear(input.flatten(1), centre, self.bias)[..., None, None]
        return super().forward(input)


class Conv3d(nn.Conv3d):
    """`nn.Conv3d` (same parameters and state_dict) exact on inputs of 1 x 1 pixels, whatever
    their length in time (module docstring)."""

    def forward(self, input: Tensor) -> Tensor:
        _, kh, kw = self.kernel_size
        st, sh, sw = self.stride
        spatial_special = _centre_only((kh, kw), (sh, sw), self.padding[1:])  # type: ignore[index]
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
