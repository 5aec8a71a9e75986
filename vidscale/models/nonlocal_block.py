"""The 3D non-local block of Wang, Girshick, Gupta and He, "Non-local Neural Networks" (CVPR 2018).

    z = x + BN(W_z · y),   y_i = Σ_j f(θ(x_i), φ(x_j)) g(x_j)

θ, φ and g are 1x1x1 convolutions to half the input's channels (§3.3); φ and g are then
max-pooled 1x2x2 ("subsampling", §3.3), which quarters the positions j without changing what is
computed at each i. The pairwise function f is either

- **dot product** (eq. 4): f = θ(x_i)ᵀ φ(x_j) / N, N the number of positions j (Q after the
  sub-sampling, as MMAction2 divides), or
- **embedded Gaussian** (eq. 3): f = softmax_j(θ(x_i)ᵀ φ(x_j)), unscaled as in the paper (and
  MMAction2's `use_scale=False`): each row i of weights sums to 1.

W_z is a 1x1x1 convolution back to the input's channels followed by a BatchNorm whose γ starts
at 0 (§4.1), so a new block is the identity and can be put into a trained network without
changing its output. θ, φ, g and W_z start at N(0, 0.01), their biases and BN's β at 0, as in
the reference code; θ, φ and g have biases, W_z none (the BN after it makes one redundant). With
these parameters the block has 2·C² + 3·C/2 + 2·C of them, as MMAction2's `NonLocal3d` with
`norm_cfg=BN3d`: C = 1024 gives 2,100,736.

Shape legend:
    N   clips in the batch          C   channels (C/2 inside the block)
    T, H, W  the input's time and space; P = T·H·W positions i; Q = T·⌈H/2⌉·⌈W/2⌉ positions j
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

NonLocalMode = Literal["dot_product", "embedded_gaussian"]
NON_LOCAL_MODES: tuple[NonLocalMode, ...] = ("dot_product", "embedded_gaussian")

# The state_dict keys of the blocks inside a trunk (`layer2.1.non_local.theta.weight`, with any
# prefix): tensors that a checkpoint of the same network without them cannot provide.
NON_LOCAL_KEY = re.compile(r"(?:^|\.)non_local\.")


@dataclass(frozen=True)
class NonLocalSpec:
    """Where a trunk has non-local blocks, and which kind.

    `after[s][i]` says whether block i of stage s (res2..res5) is followed by a non-local block;
    a stage's tuple has one flag per block, as MMAction2's `non_local` option. `mode` picks f.
    """

    after: tuple[tuple[int, ...], ...]
    mode: NonLocalMode = "dot_product"

    def __post_init__(self) -> None:
        if len(self.after) != 4:
            raise ValueError(f"non-local placement needs 4 stages of flags: {self.after}")
        if any(flag not in (0, 1) for stage in self.after for flag in stage):
            raise ValueError(f"non-local placement flags must be 0 or 1: {self.after}")
        if self.mode not in NON_LOCAL_MODES:
            raise ValueError(f"non-local mode must be one of {NON_LOCAL_MODES}, got {self.mode!r}")

    def has_block(self, stage: int, block: int) -> bool:
        return self.after[stage][block] == 1

    def check_depths(self, counts: tuple[int, ...]) -> None:
        """A ValueError unless each stage has exactly one flag per block of `counts`."""
        lengths = tuple(len(flags) for flags in self.after)
        if lengths != tuple(counts):
            raise ValueError(
                f"non-local placement has {lengths} flags per stage, "
                f"the trunk {tuple(counts)} blocks"
            )


class NonLocalBlock(nn.Module):
    """`forward(x (N, C, T, H, W)) -> z (N, C, T, H, W)`, the identity until BN's γ moves.

    `sub_sample=False` leaves φ and g at full resolution (Q = P). The max-pool rounds up
    (`ceil_mode`), so odd and 1-pixel sizes keep every position: at even sizes it is the usual
    1x2x2 pool.
    """

    def __init__(
        self, channels: int, *, mode: NonLocalMode = "dot_product", sub_sample: bool = True
    ) -> None:
        super().__init__()
        if mode not in NON_LOCAL_MODES:
            raise ValueError(f"non-local mode must be one of {NON_LOCAL_MODES}, got {mode!r}")
        if channels < 2:
            raise ValueError(f"a non-local block needs >= 2 channels, got {channels}")
        self.mode = mode
        inner = channels // 2
        self.theta = nn.Conv3d(channels, inner, 1)
        self.phi = nn.Conv3d(channels, inner, 1)
        self.g = nn.Conv3d(channels, inner, 1)
        self.out = nn.Conv3d(inner, channels, 1, bias=False)
        self.out_bn = nn.BatchNorm3d(channels)
        self.pool = nn.MaxPool3d((1, 2, 2), ceil_mode=True) if sub_sample else nn.Identity()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The initialisation of the reference code: N(0, 0.01) kernels, zero biases, γ = 0."""
        for conv in (self.theta, self.phi, self.g, self.out):
            nn.init.normal_(conv.weight, 0.0, 0.01)
            if conv.bias is not None:
                nn.init.zeros_(conv.bias)
        nn.init.zeros_(self.out_bn.weight)
        nn.init.zeros_(self.out_bn.bias)

    def affinity(self, x: Tensor) -> Tensor:
        """The weights f(θ(x_i), φ(x_j)): (N, P, Q); rows sum to 1 in the embedded-Gaussian form."""
        theta_N_P_Ci = self.theta(x).flatten(2).transpose(1, 2)
        phi_N_Ci_Q = self.pool(self.phi(x)).flatten(2)
        scores_N_P_Q = torch.bmm(theta_N_P_Ci, phi_N_Ci_Q)
        if self.mode == "embedded_gaussian":
            return scores_N_P_Q.softmax(dim=-1)
        return scores_N_P_Q / scores_N_P_Q.shape[-1]

    def forward(self, x: Tensor) -> Tensor:
        n, _, t, h, w = x.shape
        g_N_Q_Ci = self.pool(self.g(x)).flatten(2).transpose(1, 2)
        y_N_P_Ci = torch.bmm(self.affinity(x), g_N_Q_Ci)
        y_N_Ci_T_H_W = y_N_P_Ci.transpose(1, 2).reshape(n, -1, t, h, w)
        return x + self.out_bn(self.out(y_N_Ci_T_H_W))
