"""When a real backward makes each layer's gradients ready, measured on one process: the
stand-in's per-layer backward waits (DESIGN §14: a stand-in's backward takes "the time a
one-node measurement gave, per layer, in backward order, so buckets become ready when they
really would").

The layers' MACs are not their time. On one core, a ResNet's backward spends longer per MAC
in its late, wide layers, which hold most parameters and come first in backward, than in its
early, high-resolution ones: most gradients come later in backward than the layers' MACs say,
and MAC shares would have DDP's big buckets ready, and all-reduced, earlier than a real rank
has them. The forward's share of a step is measured here too, not assumed.

`measure_backward` runs the real model's training step, one thread, hooks on every parameter
noting when its gradient is accumulated, and keeps each stand-in layer's median ready time.
In the stand-in's chain (`standin.owned_layers`, backward releasing the layers in reverse
forward order) a layer can release its gradients no earlier than the one before it, so each
layer's share is how much later than every layer after it in forward order its gradients
were ready; what backward takes after the last layer's gradients goes to that layer.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from vidscale.bench.cluster.config import ClipShape
from vidscale.bench.cluster.standin import layer_params, owned_layers
from vidscale.models.costs import model_costs
from vidscale.models.registry import ModelConfig, build_model
from vidscale.step.fixed_batch import FixedBatchStep

_WARMUP = 2  # the allocator's first fills and the kernels' first choices


@dataclass(frozen=True)
class BackwardTiming:
    """`fraction`: backward's share of a step's forward and backward; `ready`: when each
    stand-in layer's gradients were ready, as a fraction of backward (the median over the
    measured steps), in forward order (`standin.owned_layers`); `sizes`: each layer's
    parameter count, in the same order."""

    fraction: float
    ready: tuple[float, ...]
    sizes: tuple[int, ...]

    @property
    def shares(self) -> tuple[float, ...]:
        """Each layer's share of backward, in forward order, summing to 1 (`chain_shares`)."""
        return chain_shares(self.ready)

    @property
    def half_ready(self) -> float:
        """The fraction of backward by which half the parameters had their gradients."""
        done = 0
        for ready, size in sorted(zip(self.ready, self.sizes, strict=True)):
            done += size
            if 2 * done >= sum(self.sizes):
                return ready
        return 1.0


def measure_backward(model: str, shape: ClipShape, *, reps: int = 4) -> BackwardTiming:
    """`model`'s training step (`step.fixed_batch`, the benches' one) on this process with one
    thread, at `shape`, its backward timed layer by layer (see the module docstring); the
    median over `reps` steps after a warm-up. Backward ends with the stem's gradients (nothing
    before the stem needs one)."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    net = build_model(
        ModelConfig(name=model, num_classes=shape.num_classes, frames=shape.frames, dropout=0.0)
    )
    costs = model_costs(model, frames=shape.frames, size=shape.size, num_classes=shape.num_classes)
    layers = [module for module, _ in owned_layers(net, costs)]
    stamps = [0.0] * len(layers)
    forward = [0.0, 0.0]  # its start and end

    def noting(index: int) -> Callable[[torch.Tensor], None]:
        def note(_: torch.Tensor) -> None:
            stamps[index] = max(stamps[index], time.perf_counter())

        return note

    def forward_starts(*_: object) -> None:
        forward[0] = time.perf_counter()
        stamps[:] = [0.0] * len(layers)

    def forward_ends(*_: object) -> None:
        forward[1] = time.perf_counter()

    handles = [
        param.register_post_accumulate_grad_hook(noting(index))
        for index, module in enumerate(layers)
        for param in layer_params(module)
    ]
    handles += [net.register_forward_pre_hook(forward_starts)]
    handles += [net.register_forward_hook(forward_ends)]
    step = FixedBatchStep(
        net,
        torch.randn(shape.batch, 3, shape.frames, shape.size, shape.size),
        torch.zeros(shape.batch, dtype=torch.long),
    )
    fractions: list[float] = []
    readies: list[list[float]] = []
    try:
        for rep in range(_WARMUP + reps):
            step()
            (start, middle), end = forward, max(stamps)
            if rep >= _WARMUP:
                fractions.append((end - middle) / (end - start))
                readies.append([(stamp - middle) / (end - middle) for stamp in stamps])
    finally:
        for handle in handles:
            handle.remove()
    ready = tuple(statistics.median(column) for column in zip(*readies, strict=True))
    sizes = tuple(sum(p.numel() for p in layer_params(module)) for module in layers)
    return BackwardTiming(statistics.median(fractions), ready, sizes)


def chain_shares(ready: tuple[float, ...]) -> tuple[float, ...]:
    """Each layer's share of backward (forward order) from its gradients' ready times
    (fractions of backward, forward order): in reverse order, each how much later than all
    the layers after it, the remainder to backward's end added to the first layer's."""
    shares = [0.0] * len(ready)
    done = 0.0
    for index in reversed(range(len(ready))):
        later = max(done, min(1.0, ready[index]))
        shares[index], done = later - done, later
    if shares:
        shares[0] += 1.0 - done
    return tuple(shares)
