"""Temporal Shift Module (TSM; Lin, Gan, Han, "Training Kinetics in 15 Minutes", §2, Fig. 1).

Shifting a fraction of the channels one frame along time lets a 2D network mix information
between neighbouring frames with zero FLOPs and zero parameters. Every function here returns
a new tensor and leaves its input untouched: the official in-place variant aliased its input and
was disabled upstream.

Shape legend:
    N   clips in the batch              T   frames per clip
    C   channels                        H, W  spatial size
    NT  N*T: frames folded into the batch (the layout of a 2D trunk)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

ShiftPlace = Literal["residual", "block"]


@dataclass(frozen=True)
class ShiftSpec:
    """Where and how a trunk shifts: the data that turns a 2D ResNet into TSM.

    `place="residual"` shifts only the input of each residual branch's first conv (the identity
    path keeps the unshifted features; TSM's default); `"block"` shifts the block input before the
    branch/identity split. A block is shifted when its index within its stage is a multiple of
    `every` (2: every other block). `causal` selects the online, past-only shift.
    """

    fold_div: int = 8
    place: ShiftPlace = "residual"
    every: int = 1
    causal: bool = False

    def __post_init__(self) -> None:
        if self.fold_div < 2:
            raise ValueError(f"fold_div must be >= 2, got {self.fold_div}")
        if self.every < 1:
            raise ValueError(f"shift every must be >= 1, got {self.every}")
        if self.place not in ("residual", "block"):
            raise ValueError(f"shift place must be 'residual' or 'block', got {self.place!r}")


def _clips_view(x_NT_C_H_W: Tensor, num_frames: int) -> Tensor:
    nt, c, h, w = x_NT_C_H_W.shape
    if num_frames < 1 or nt % num_frames:
        raise ValueError(f"batch of {nt} frames is not a whole number of {num_frames}-frame clips")
    return x_NT_C_H_W.view(nt // num_frames, num_frames, c, h, w)


Direction = Literal["next", "prev"]


def _in_graph_capture() -> bool:
    """True while torch.jit, torch.compile/torch.export or the ONNX exporter records the model."""
    return (
        torch.jit.is_tracing()
        or torch.jit.is_scripting()
        or torch.compiler.is_compiling()
        or torch.onnx.is_in_onnx_export()
    )


def _shift_folds(x_N_T_C_H_W: Tensor, *, fold: int, directions: tuple[Direction, ...]) -> Tensor:
    """Channel fold i (channels [i*fold, (i+1)*fold)) takes frame t+1 ("next") or t-1 ("prev"),
    zero-filled at the clip end it runs off; channels after the last fold are copied.

    Eagerly this is a clone (one dense, vectorised copy in the input's memory format) whose folds
    are then overwritten in place, which is faster than concatenation, which copies the folds
    twice and the untouched channels as many small strided rows (docs/benchmarks.md, "Time
    spent in the shift inside a training step"). While a graph is
    recorded, the concatenation form is used instead: traced in-place writes are fragile in the
    exporters, Inductor fuses the concatenation into one pass anyway, and Inductor (CPU, torch
    2.13) read uninitialised memory from slice writes into an empty tensor inside a ResNet.
    """
    if _in_graph_capture():
        return _shift_folds_by_concat(x_N_T_C_H_W, fold=fold, directions=directions)
    out = x_N_T_C_H_W.clone(memory_format=torch.preserve_format)
    for i, direction in enumerate(directions):
        src, dst = x_N_T_C_H_W.narrow(2, i * fold, fold), out.narrow(2, i * fold, fold)
        if direction == "next":
            dst[:, :-1].copy_(src[:, 1:])
            dst[:, -1:].zero_()
        else:
            dst[:, 1:].copy_(src[:, :-1])
            dst[:, :1].zero_()
    return out


def _shift_folds_by_concat(
    x_N_T_C_H_W: Tensor, *, fold: int, directions: tuple[Direction, ...]
) -> Tensor:
    """`_shift_folds` as out-of-place concatenations, for graph capture.

    Channels-last activations are concatenated in their dense (N, T, H, W, C) order so that they
    stay channels-last. The loop runs over at most two folds, never over time.
    """
    channels_last = x_N_T_C_H_W.stride(2) == 1 and x_N_T_C_H_W.shape[2] > 1
    x = x_N_T_C_H_W.permute(0, 1, 3, 4, 2) if channels_last else x_N_T_C_H_W
    cdim = 4 if channels_last else 2
    parts = []
    for i, direction in enumerate(directions):
        slab = x.narrow(cdim, i * fold, fold)
        edge = torch.zeros_like(slab[:, :1])
        pair = (slab[:, 1:], edge) if direction == "next" else (edge, slab[:, :-1])
        parts.append(torch.cat(pair, dim=1))
    rest = len(directions) * fold
    parts.append(x.narrow(cdim, rest, x.shape[cdim] - rest))
    out = torch.cat(parts, dim=cdim)
    return out.permute(0, 1, 4, 2, 3) if channels_last else out


def _directions(*, causal: bool, adjoint: bool) -> tuple[Direction, ...]:
    """The shift's folds, or those of its adjoint (each fold's direction reversed)."""
    if causal:
        return ("next",) if adjoint else ("prev",)
    return ("prev", "next") if adjoint else ("next", "prev")


def _shift(x_N_T_C_H_W: Tensor, *, fold_div: int, causal: bool) -> Tensor:
    """The forward shift as plain tensor ops."""
    directions = _directions(causal=causal, adjoint=False)
    return _shift_folds(x_N_T_C_H_W, fold=x_N_T_C_H_W.shape[2] // fold_div, directions=directions)


class _ShiftFunction(torch.autograd.Function):
    """A shift whose backward is the opposite shift of the gradient (its adjoint).

    Autograd through the slices would materialise a full-size gradient per slice (several times
    slower than the forward); the adjoint is one more pass, so TSM costs about what TSN does.
    Only the tensor and constants cross `apply` (the fold is derived inside): a size read from a
    traced tensor would reach `apply` as a traced value, which torch.jit.trace cannot handle.
    """

    @staticmethod
    def forward(ctx, x_N_T_C_H_W: Tensor, fold_div: int, causal: bool) -> Tensor:  # type: ignore[override]
        ctx.fold, ctx.causal = x_N_T_C_H_W.shape[2] // fold_div, causal
        return _shift(x_N_T_C_H_W, fold_div=fold_div, causal=causal)

    @staticmethod
    def backward(ctx, grad_N_T_C_H_W: Tensor) -> tuple[Tensor, None, None]:  # type: ignore[override]
        directions = _directions(causal=ctx.causal, adjoint=True)
        return _shift_folds(grad_N_T_C_H_W, fold=ctx.fold, directions=directions), None, None


def _apply_shift(x_NT_C_H_W: Tensor, *, num_frames: int, fold_div: int, causal: bool) -> Tensor:
    x_N_T_C_H_W = _clips_view(x_NT_C_H_W, num_frames)
    if torch.is_grad_enabled() and x_N_T_C_H_W.requires_grad:
        out = _ShiftFunction.apply(x_N_T_C_H_W, fold_div, causal)
    else:
        # No gradient wanted (evaluation, export): plain tensor ops, which torch.jit.trace and
        # the ONNX exporters record, unlike a custom autograd Function.
        out = _shift(x_N_T_C_H_W, fold_div=fold_div, causal=causal)
    return out.view(x_NT_C_H_W.shape)


def temporal_shift(x_NT_C_H_W: Tensor, *, num_frames: int, fold_div: int = 8) -> Tensor:
    """Bidirectional temporal shift (TSM §2): a new tensor, the input is left untouched.

    With fold = C // fold_div, output frame t takes channels [0, fold) from frame t+1 and
    [fold, 2*fold) from frame t-1 (zeros where that frame is outside the clip); the remaining
    channels are copied unchanged.
    """
    return _apply_shift(x_NT_C_H_W, num_frames=num_frames, fold_div=fold_div, causal=False)


def causal_temporal_shift(x_NT_C_H_W: Tensor, *, num_frames: int, fold_div: int = 8) -> Tensor:
    """Past-only shift for online recognition (online TSM): frame t never sees frame t+1.

    Channels [0, fold) of output frame t come from frame t-1 (zeros at t = 0); the rest are
    unchanged. A network built from it can run frame by frame (`CachedShift`).
    """
    return _apply_shift(x_NT_C_H_W, num_frames=num_frames, fold_div=fold_div, causal=True)


class TemporalShift(nn.Module):
    """Parameter-free layer: `temporal_shift` (or `causal_temporal_shift`) on (NT, C, H, W)."""

    def __init__(self, fold_div: int = 8, *, causal: bool = False) -> None:
        super().__init__()
        self.fold_div = fold_div
        self.causal = causal

    def forward(self, x_NT_C_H_W: Tensor, *, num_frames: int) -> Tensor:
        shift = causal_temporal_shift if self.causal else temporal_shift
        return shift(x_NT_C_H_W, num_frames=num_frames, fold_div=self.fold_div)

    def extra_repr(self) -> str:
        return f"fold_div={self.fold_div}, causal={self.causal}"


class CachedShift(nn.Module):
    """Streaming form of `causal_temporal_shift`: one frame per call, the past kept in a cache.

    Each call receives the current frame of every clip (num_frames = 1), replaces channels
    [0, fold) by those cached from the previous call (zeros after `reset`) and caches the current
    frame's slice for the next call. Fed the frames of a clip in order, it reproduces the offline
    causal shift exactly. The cache is not a buffer, so it never enters a state_dict.
    """

    def __init__(self, fold_div: int = 8) -> None:
        super().__init__()
        self.fold_div = fold_div
        self._past: Tensor | None = None

    def reset(self) -> None:
        self._past = None

    def forward(self, x_N_C_H_W: Tensor, *, num_frames: int = 1) -> Tensor:
        if num_frames != 1:
            raise ValueError(f"CachedShift takes one frame per call, got num_frames={num_frames}")
        fold = x_N_C_H_W.shape[1] // self.fold_div
        current = x_N_C_H_W[:, :fold]
        past = torch.zeros_like(current) if self._past is None else self._past
        if past.shape != current.shape:
            raise ValueError(f"frame shape changed mid-stream: {past.shape} -> {current.shape}")
        self._past = current.detach().clone()
        return torch.cat((past, x_N_C_H_W[:, fold:]), dim=1)

    def extra_repr(self) -> str:
        return f"fold_div={self.fold_div}"
