"""Sub-batch BatchNorm: BN statistics over a fixed number of clips when the batch size changes.

Multigrid training (Wu et al. 2020, "A Multigrid Method for Efficiently Training Video Models",
§3.3) grows the per-process batch at small clip shapes (e.g. 64 clips) and shrinks it at the base
shape (8 clips), yet BN should normalise over a fixed "BN base size" of clips. With 64 clips and
base size 8 the batch is cut into `splits` = 8 sub-batches, each normalised with its own
statistics and each keeping its own running statistics; evaluation uses those running statistics
aggregated into one set. This is PySlowFast's `SubBatchNorm3d` and `aggregate_sub_bn_stats`
(`slowfast/models/batchnorm_helper.py`), extended to the 2D "frames" layout of TSN/TSM.

Contracts (N clips, C channels, k = splits):

- **Sub-batches are interleaved clips.** Clip n belongs to split n % k, as PySlowFast's view
  (N, C, ...) -> (N/k, C·k, ...) gives. Clips, never frames, are split: in the "frames" layout
  (rows n·T + t of an (N·T, C, H, W) batch) the module must be told N per forward
  (`set_batch_clips`; `ResNet.forward_features` does it for its trunk). N % k != 0 raises a
  ValueError naming both numbers.
- **Training** normalises split j with its own batch statistics and updates split j's running
  statistics with the BN's momentum (or the cumulative average when momentum is None, as
  `nn.BatchNorm`). The affine weight and bias are shared: one per channel.
- **The plain buffers hold the aggregate at all times.** After every training forward,
  `running_mean` / `running_var` are set to PySlowFast's `aggregate_stats` of the split
  statistics: mean = mean of the split means; var = mean of the split vars + mean of
  (split mean − mean)². Evaluation is therefore plain BN on those buffers, and `state_dict()` has
  exactly the keys of `nn.BatchNorm2d/3d` (weight, bias, running_mean, running_var,
  num_batches_tracked) with the aggregated statistics: a plain model loads it strictly.
- **The per-split statistics are not in `state_dict()`** (non-persistent buffers, so they still
  move with `.to()` and are in `model.buffers()`, which `BatchNormSnapshot` restores). An exact
  resume saves `split_state(model)` beside the state_dict and, after
  `model.load_state_dict(...)`, calls `load_split_state(model, state)`. `load_state_dict` alone
  sets every split to the loaded aggregate, which is what converting a plain checkpoint does.
- **Switching modes in place:** `set_batchnorm_splits(model, k)` replaces every
  `nn.BatchNorm2d/3d` by a sub-batch BN with k splits (k = 1: plain BN again), aggregating old
  split statistics and starting new splits from the aggregate (PySlowFast's checkpoint
  conversion). The learnt weight/bias Parameters and the running-statistics tensors are carried
  over as the same objects, so an optimizer built before the switch keeps updating them. The
  modules and the split buffers are new: whatever holds BN modules or the model's buffer list
  must look again after a switch (hooks on BN modules are not carried over; a
  `DistributedDataParallel` wrapper keeps the buffer list it was built with, so switch before
  wrapping or wrap again; `BatchNormSnapshot.take` re-reads the buffers).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm


def aggregate_split_stats(split_mean: Tensor, split_var: Tensor) -> tuple[Tensor, Tensor]:
    """PySlowFast's `aggregate_stats`: one (mean, var) from k splits' (k, C) statistics.

    mean = mean_j(mean_j); var = mean_j(var_j) + mean_j((mean_j − mean)²): the variance of the
    k equally weighted sub-populations pooled. E.g. means (0, 2) and variances (1, 1) give
    mean 1 and variance 2.
    """
    mean = split_mean.mean(0)
    var = split_var.mean(0) + (split_mean - mean).pow(2).mean(0)
    return mean, var


class _SubBatchNorm(_BatchNorm, ABC):
    """The layout-free part of sub-batch BN; `SubBatchNorm2d` / `SubBatchNorm3d` add the layout.

    Buffers beyond `nn.BatchNorm`'s: `split_mean` and `split_var`, shape (k·C,) with split j's
    channel c at j·C + c (the channel order of the (N/k, k·C, ...) view, so they feed
    `F.batch_norm` directly); non-persistent, see the module docstring.
    """

    split_mean: Tensor
    split_var: Tensor

    def __init__(
        self,
        num_features: int,
        *,
        splits: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        device: torch.device | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        if splits < 1:
            raise ValueError(f"splits must be >= 1, got {splits}")
        super().__init__(num_features, eps, momentum, affine, True, device=device, dtype=dtype)
        self.splits = splits
        size = splits * num_features
        self.register_buffer(
            "split_mean", torch.zeros(size, device=device, dtype=dtype), persistent=False
        )
        self.register_buffer(
            "split_var", torch.ones(size, device=device, dtype=dtype), persistent=False
        )

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, splits={self.splits}"

    def reset_running_stats(self) -> None:
        # `torch.optim.swa_utils.update_bn` (precise BN) resets every _BatchNorm through this.
        super().reset_running_stats()
        if hasattr(self, "split_mean"):  # _NormBase.__init__ calls this before they exist
            self.split_mean.zero_()
            self.split_var.fill_(1.0)

    @torch.no_grad()
    def init_splits_from_running_stats(self) -> None:
        """Every split starts from the plain running statistics (PySlowFast's conversion of a
        plain checkpoint: `split_bn.running_mean = bn.running_mean.repeat(k)`)."""
        assert self.running_mean is not None and self.running_var is not None
        self.split_mean.copy_(self.running_mean.repeat(self.splits))
        self.split_var.copy_(self.running_var.repeat(self.splits))

    @torch.no_grad()
    def aggregate(self) -> None:
        """Write the aggregate of the split statistics into `running_mean` / `running_var`."""
        assert self.running_mean is not None and self.running_var is not None
        k, c = self.splits, self.num_features
        mean, var = aggregate_split_stats(self.split_mean.view(k, c), self.split_var.view(k, c))
        self.running_mean.copy_(mean)
        self.running_var.copy_(var)

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: dict[str, Any],
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        # A state_dict carries the aggregate only: the splits restart from it, so that they
        # agree with the loaded buffers until `load_split_state` brings the exact ones.
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        self.init_splits_from_running_stats()

    @abstractmethod
    def _clips(self, x: Tensor) -> int:
        """Number of clips in the batch `x` (the layout decides)."""

    @abstractmethod
    def _to_splits(self, x: Tensor, clips: int) -> Tensor:
        """x -> (N/k, k·C, T, H, W) with clip n's channel c at n // k, (n % k)·C + c."""

    @abstractmethod
    def _from_splits(self, y: Tensor, like: Tensor, clips: int) -> Tensor:
        """The inverse of `_to_splits`, shaped like `like`."""

    def forward(self, input: Tensor) -> Tensor:
        self._check_input_dim(input)
        if not self.training or self.splits == 1:
            # Evaluation: plain BN on the aggregated buffers. One split is plain BN outright.
            return super().forward(input)
        clips = self._clips(input)
        if clips % self.splits != 0:
            raise ValueError(
                f"sub-batch BatchNorm needs the clips per batch ({clips}) divisible by "
                f"splits ({self.splits})"
            )
        assert self.num_batches_tracked is not None
        self.num_batches_tracked.add_(1)
        # As nn.BatchNorm: momentum None is the cumulative average (precise BN sets it).
        factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        k = self.splits
        # The shared affine, repeated per split inside the fused kernel; autograd sums the k
        # copies' gradients into the one Parameter.
        weight = None if self.weight is None else self.weight.repeat(k)
        bias = None if self.bias is None else self.bias.repeat(k)
        y = F.batch_norm(
            self._to_splits(input, clips),
            self.split_mean,
            self.split_var,
            weight,
            bias,
            True,
            factor,
            self.eps,
        )
        # Eagerly, so that running_mean / running_var are the aggregate at every moment (for
        # evaluation, state_dict, snapshots, model averaging), for a few per-channel kernels.
        self.aggregate()
        out = self._from_splits(y, input, clips)
        # The (N/k, k·C) regrouping costs a copy of channels-last inputs (k and C cannot merge
        # into one stride there); give the next layer the memory format it was given.
        if not input.is_contiguous():
            fmt = torch.channels_last if input.dim() == 4 else torch.channels_last_3d
            if input.is_contiguous(memory_format=fmt):
                out = out.contiguous(memory_format=fmt)
        return out


class SubBatchNorm3d(_SubBatchNorm, nn.BatchNorm3d):
    """Sub-batch BN for the "volume" layout (N, C, T, H, W): I3D, SlowFast; PySlowFast's
    `SubBatchNorm3d`. A `nn.BatchNorm3d`, so code that looks for BN layers finds it."""

    def _clips(self, x: Tensor) -> int:
        return x.shape[0]

    def _to_splits(self, x: Tensor, clips: int) -> Tensor:
        # A view when contiguous. Sizes as -1 and as read from x, not computed: under
        # torch.compile with dynamic shapes computed sizes become symbolic expressions whose
        # simplification grows layer after layer.
        return x.reshape(-1, self.splits * x.shape[1], *x.shape[2:])

    def _from_splits(self, y: Tensor, like: Tensor, clips: int) -> Tensor:
        return y.reshape(like.shape)


class SubBatchNorm2d(_SubBatchNorm, nn.BatchNorm2d):
    """Sub-batch BN for the "frames" layout (N·T, C, H, W), row n·T + t (TSN, TSM).

    `clips` is N for the next training forward, set by the trunk through `set_batch_clips`
    (T = rows / N is then read at each layer, so a temporal pool inside the trunk is fine).
    None means each row is its own sample (T = 1): an image model's BatchNorm2d.
    """

    clips: int | None = None

    def _clips(self, x: Tensor) -> int:
        rows = x.shape[0]
        if self.clips is None:
            return rows
        if rows % self.clips != 0:
            raise ValueError(f"{rows} rows of frames do not hold {self.clips} equal clips")
        return self.clips

    def _to_splits(self, x: Tensor, clips: int) -> Tensor:
        # (N·T, C, H, W) -> (N, T, C, H, W) -> (N, C, T, H, W) -> (N/k, k·C, T, H, W); -1 and
        # sizes read from tensors, as in SubBatchNorm3d.
        x_N_C_T_H_W = x.reshape(clips, -1, *x.shape[1:]).transpose(1, 2)
        return x_N_C_T_H_W.reshape(-1, self.splits * x.shape[1], *x_N_C_T_H_W.shape[2:])

    def _from_splits(self, y: Tensor, like: Tensor, clips: int) -> Tensor:
        y_N_C_T_H_W = y.reshape(clips, like.shape[1], *y.shape[2:])
        return y_N_C_T_H_W.transpose(1, 2).reshape(like.shape)


def set_batch_clips(module: nn.Module, clips: int) -> None:
    """Tell every `SubBatchNorm2d` in `module` that the next forward's (N·T, C, H, W) batch
    holds `clips` = N clips of T contiguous frames, so that it splits clips and not frames.

    The owner of a "frames" trunk calls it before each training forward (`ResNet.
    forward_features` does). Plain BN layers ignore it; evaluation does not need it.
    """
    for m in module.modules():
        if isinstance(m, SubBatchNorm2d):
            m.clips = clips


def _batchnorms(model: nn.Module) -> Iterator[tuple[nn.Module, str, _BatchNorm]]:
    """(parent, attribute name, BN) for every nn.BatchNorm2d/3d child, each occurrence."""
    for parent in model.modules():
        for name, child in parent.named_children():
            if isinstance(child, nn.BatchNorm2d | nn.BatchNorm3d):
                yield parent, name, child


def _splits_of(bn: _BatchNorm) -> int:
    return bn.splits if isinstance(bn, _SubBatchNorm) else 1


def share_tensors(new: _BatchNorm, old: _BatchNorm) -> _BatchNorm:
    """`new` holding `old`'s Parameters and running buffers, in `old`'s mode; returns `new`.

    The same objects, not copies: an optimizer holds the Parameters, and the running statistics
    keep their storage (and their values). Every in-place swap of BN layers goes through this."""
    new.weight, new.bias = old.weight, old.bias
    new.running_mean, new.running_var = old.running_mean, old.running_var
    new.num_batches_tracked = old.num_batches_tracked
    return new.train(old.training)


def _converted(bn: _BatchNorm, splits: int) -> _BatchNorm:
    """A BN of the same kind with `splits`, sharing `bn`'s Parameters and running buffers."""
    if not bn.track_running_stats or bn.running_mean is None or bn.running_var is None:
        raise ValueError(f"sub-batch BN needs running statistics: {bn} does not track them")
    if isinstance(bn, _SubBatchNorm):
        bn.aggregate()  # already current (see `forward`); kept so that this never depends on it
    three_d = isinstance(bn, nn.BatchNorm3d)
    # Built weightless on "meta": its tensors are replaced by `bn`'s right below.
    meta, dtype = torch.device("meta"), bn.running_mean.dtype
    new: _BatchNorm
    if splits == 1:
        plain = nn.BatchNorm3d if three_d else nn.BatchNorm2d
        new = plain(bn.num_features, bn.eps, bn.momentum, bn.affine, device=meta, dtype=dtype)
    else:
        sub = SubBatchNorm3d if three_d else SubBatchNorm2d
        new = sub(
            bn.num_features,
            splits=splits,
            eps=bn.eps,
            momentum=bn.momentum,
            affine=bn.affine,
            device=meta,
            dtype=dtype,
        )
    share_tensors(new, bn)
    if isinstance(new, _SubBatchNorm):
        like = bn.running_mean
        new.split_mean = torch.empty(splits * bn.num_features, dtype=like.dtype, device=like.device)
        new.split_var = torch.empty_like(new.split_mean)
        new.init_splits_from_running_stats()
    return new.train(bn.training)


def set_batchnorm_splits(model: nn.Module, splits: int) -> int:
    """Make every nn.BatchNorm2d/3d of `model` a sub-batch BN with `splits` (1: plain BN).

    In place; learnt Parameters and running buffers are the same objects afterwards (see the
    module docstring for what must be rebuilt). Old splits are aggregated into the running
    statistics, new splits start from them. Layers already at `splits` are left as they are
    (their split statistics kept). Returns the number of layers replaced. Works for any model
    whose BNs are nn.BatchNorm2d/3d; a "frames" trunk must also call `set_batch_clips`.
    """
    if splits < 1:
        raise ValueError(f"splits must be >= 1, got {splits}")
    done: dict[int, _BatchNorm] = {}  # a BN reachable by two names is converted once
    for parent, name, bn in list(_batchnorms(model)):
        if _splits_of(bn) == splits:
            continue
        if id(bn) not in done:
            done[id(bn)] = _converted(bn, splits)
        setattr(parent, name, done[id(bn)])
    return len(done)


def split_state(model: nn.Module) -> dict[str, Tensor]:
    """The per-split running statistics, keyed by module name: a (2, k, C) tensor, [0] the
    split means and [1] the split variances (copies). Empty for a model without sub-batch BN.
    Names are those of `model.named_modules()`: pass the unwrapped model, not a DDP wrapper."""
    out = {}
    for name, m in model.named_modules():
        if isinstance(m, _SubBatchNorm):
            k, c = m.splits, m.num_features
            out[name] = torch.stack([m.split_mean.view(k, c), m.split_var.view(k, c)]).clone()
    return out


@torch.no_grad()
def load_split_state(model: nn.Module, state: dict[str, Tensor]) -> None:
    """Put back `split_state`'s statistics, after `model.load_state_dict(...)` (which resets
    the splits to the aggregate). Strict: the model must have sub-batch BNs under exactly the
    names of `state` and with the same splits, or a ValueError says what differs. The aggregate
    in `running_mean` / `running_var` is recomputed from the loaded splits."""
    subs = {name: m for name, m in model.named_modules() if isinstance(m, _SubBatchNorm)}
    missing, unexpected = sorted(subs.keys() - state.keys()), sorted(state.keys() - subs.keys())
    if missing or unexpected:
        raise ValueError(
            f"split state does not fit the model: missing {missing}, unexpected {unexpected}"
        )
    for name, m in subs.items():
        saved = state[name]
        shape = (2, m.splits, m.num_features)
        if tuple(saved.shape) != shape:
            raise ValueError(
                f"split state of {name!r} has shape {tuple(saved.shape)}, the model {shape} "
                f"(splits, channels)"
            )
        m.split_mean.copy_(saved[0].reshape(-1))
        m.split_var.copy_(saved[1].reshape(-1))
        m.aggregate()
