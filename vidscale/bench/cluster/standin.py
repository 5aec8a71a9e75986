"""A compute stand-in: the real model's parameters, the arithmetic replaced by waiting the time a
one-node measurement gave (docs/design.md "A cluster on one machine"; DESIGN §14).

`StandInModel` keeps the real model as its submodule, so its parameters, their order, DDP's
buckets, gloo's messages and BatchNorm's buffers (DDP's forward broadcast) are the real ones.
Its forward runs a chain of one autograd node per parameter-owning layer, in the order the
real forward runs them (`models.costs`); each node waits its layer's share of the forward time
going forward, and its share of the backward time going backward, then hands its parameters
their gradients. Backward therefore releases the gradients layer by layer, last layer first,
each when the real backward would have, and DDP's buckets fill and all-reduce as they would.
The layers' shares of backward are measured on one process where given (`layer_times`: when
each layer's gradients are ready in a real backward), else their MACs, as the planner's
`overlap.gradient_arrivals` assumes; the forward's shares are the MACs. The gradients are a
small constant: their values do not change what is sent.

`StandInSGD` is torch's SGD whose first step is real (so its momentum buffers exist, and AAVG
averages them with the parameters) and whose later steps wait the measured time instead.

What a wait does not model: memory bandwidth and caches (sixteen waiting ranks do not compete
for them as sixteen computing ones would), and CPU contention between the ranks' computations.
What it keeps: with `shared_core`, a wait is stretched by the CPU time the process's other
threads (gloo's) used meanwhile, as a node whose one core computes and communicates loses that
time from its computation (the planner's `cpu_s_per_byte`; bench network, "the shared core").
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from vidscale.models.costs import ModelCosts
from vidscale.step.fixed_batch import BENCH_LR, SGD_MOMENTUM, SGD_WEIGHT_DECAY

# A stretch shorter than this is not waited again (one sleep's granularity).
_SETTLE_S = 5e-4
# Lateness owed back at most (a longer stall is the machine's, not a sleep's).
_MAX_LATE_S = 0.05
# Every gradient element's value (see `_Layer.backward`).
GRADIENT = 1e-3


@dataclass(frozen=True)
class ComputeProfile:
    """A one-node step split as the stand-in waits it: `forward_s`, `backward_s` and `tail_s`
    (the gradient norm and the optimizer's update). `backward_shares`: each stand-in layer's
    share of `backward_s`, in forward order (`owned_layers`), summing to 1; empty: the layers'
    MACs."""

    forward_s: float
    backward_s: float
    tail_s: float
    backward_shares: tuple[float, ...] = ()

    @classmethod
    def from_step(
        cls,
        step_s: float,
        *,
        tail_s: float,
        backward_fraction: float,
        backward_shares: Sequence[float] = (),
    ) -> ComputeProfile:
        """`step_s` measured on one node, `tail_s` of it after backward; the rest split with
        `backward_fraction` for backward (measured, `layer_times`, or the planner's
        `BACKWARD_FRACTION`)."""
        body = max(0.0, step_s - tail_s)
        return cls(
            body * (1 - backward_fraction),
            body * backward_fraction,
            tail_s,
            tuple(backward_shares),
        )

    @property
    def step_s(self) -> float:
        return self.forward_s + self.backward_s + self.tail_s

    def less(self, own_s: float) -> ComputeProfile:
        """This profile with its waits shortened, in proportion, by `own_s`: the CPU work a
        stand-in step does for real (its gradients' allocation and filling, the gradient norm,
        autograd's chain, `calibrate.own_work_s`), which the measured one-node step already
        holds. Waiting the whole step on top of that work would make the stand-in alone slower
        than the step it stands for."""
        if self.step_s <= 0:
            return self
        scale = max(0.0, self.step_s - own_s) / self.step_s
        return self.scaled(scale)

    def scaled(self, factor: float) -> ComputeProfile:
        """Every wait `factor` times as long; the layers' shares kept."""
        return replace(
            self,
            forward_s=self.forward_s * factor,
            backward_s=self.backward_s * factor,
            tail_s=self.tail_s * factor,
        )


class Clock:
    """Waits without computing; with `shared_core`, also the CPU time the process's other
    threads took during the wait (one core per node: gloo's work delays the computation).

    A sleep ends late by a scheduler's tick or more on a busy machine; the lateness is owed
    back by the next wait (`_late_s`), so that a hundred layers' waits do not add a hundred
    wake-ups to the step."""

    def __init__(self, *, shared_core: bool) -> None:
        self.shared_core = shared_core
        self.stretched_s = 0.0  # what the other threads took, in all
        self._late_s = 0.0

    def wait(self, seconds: float) -> None:
        while seconds > _SETTLE_S:
            process, own = time.process_time(), time.thread_time()
            asked = seconds - self._late_s
            if asked <= 0:
                self._late_s = -asked  # still owed: more than this wait could give back
            else:
                start = time.perf_counter()
                time.sleep(asked)
                self._late_s = min(_MAX_LATE_S, time.perf_counter() - start - asked)
            if not self.shared_core:
                return
            seconds = (time.process_time() - process) - (time.thread_time() - own)
            self.stretched_s += max(0.0, seconds)


class _Layer(torch.autograd.Function):
    """Waits the layer's forward share; in backward its backward share, then hands back its
    parameters' gradients."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        x: torch.Tensor,
        timing: tuple[float, float],
        clock: Clock,
        *params: torch.Tensor,
    ) -> torch.Tensor:
        ctx.backward_s = timing[1]
        ctx.clock = clock
        ctx.params = params
        clock.wait(timing[0])
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        ctx.clock.wait(ctx.backward_s)
        # Fresh, as a layer's backward hands over a new tensor that autograd keeps as `.grad`
        # without a copy. Not garbage (whatever the allocator holds can be subnormal, which the
        # CPU adds many times slower) and not zeros (PowerSGD orthonormalises M Q, and of zeros
        # that is 0/0: the step not finite): a small constant, a gradient of rank one.
        return (grad, None, None, *(torch.full_like(p, GRADIENT) for p in ctx.params))


class StandInModel(nn.Module):
    """The real `model`'s parameters behind waits (see the module docstring). `costs` is the
    model's per-layer table (`models.costs.count_costs`, the names `model.named_modules`
    gives); the output is (batch, num_classes) logits of zeros joined to the chain."""

    def __init__(
        self,
        model: nn.Module,
        costs: ModelCosts,
        profile: ComputeProfile,
        *,
        num_classes: int,
        clock: Clock,
    ) -> None:
        super().__init__()
        self.model = model
        self.num_classes = num_classes
        self.clock = clock
        owners = owned_layers(model, costs)
        total = sum(layer.macs for layer in costs.layers) or 1
        macs = [layer_macs / total for _, layer_macs in owners]
        backward = profile.backward_shares or tuple(macs)
        if len(backward) != len(owners):
            raise ValueError(f"stand-in: {len(backward)} backward shares for {len(owners)} layers")
        self.layers: list[tuple[nn.Module, tuple[float, float]]] = [
            (module, (profile.forward_s * fwd, profile.backward_s * bwd))
            for (module, _), fwd, bwd in zip(owners, macs, backward, strict=True)
        ]

    def forward(self, clips: torch.Tensor) -> torch.Tensor:
        x = torch.zeros(clips.shape[0], 1)
        for module, timing in self.layers:
            x = _Layer.apply(x, timing, self.clock, *layer_params(module))
        return x.expand(clips.shape[0], self.num_classes)


def owned_layers(model: nn.Module, costs: ModelCosts) -> list[tuple[nn.Module, int]]:
    """The modules of `costs`'s layers in forward order, each once (a module run twice in
    forward owns its parameters once), with its MACs (its first run's): the stand-in's chain.
    A `ValueError` if some parameter of `model` is owned by none of them."""
    modules = dict(model.named_modules())
    owners: list[tuple[nn.Module, int]] = []
    seen: set[int] = set()
    for layer in costs.layers:
        module = modules[layer.name]
        if id(module) not in seen:
            seen.add(id(module))
            owners.append((module, layer.macs))
    owned = {id(p) for module, _ in owners for p in module.parameters(recurse=False)}
    missing = [n for n, p in model.named_parameters() if id(p) not in owned]
    if missing:
        raise ValueError(f"stand-in: parameters no layer of the cost table owns: {missing}")
    return owners


def layer_params(module: nn.Module) -> list[torch.Tensor]:
    """The trainable parameters `module` owns itself (not its children's)."""
    return [p for p in module.parameters(recurse=False) if p.requires_grad]


class StandInSGD(torch.optim.SGD):
    """SGD whose first step is real (it makes the momentum buffers) and whose later steps wait
    `step_s` on `clock` instead of updating."""

    def __init__(self, params: Any, *, step_s: float, clock: Clock, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self.stand_in_step_s = step_s
        self.clock = clock
        self.primed = False

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        if not self.primed:
            self.primed = True
            return super().step(closure)
        self.clock.wait(self.stand_in_step_s)
        return None


def stand_in_with_sgd(
    model: nn.Module, costs: ModelCosts, profile: ComputeProfile, *, num_classes: int, clock: Clock
) -> tuple[StandInModel, StandInSGD]:
    """`model`'s stand-in in training mode, and the benches' SGD over it waiting `profile`'s
    tail: what a cluster rank and the one-process calibration both step."""
    standin = StandInModel(model, costs, profile, num_classes=num_classes, clock=clock)
    standin.train()
    optimizer = StandInSGD(
        standin.parameters(),
        step_s=profile.tail_s,
        clock=clock,
        lr=BENCH_LR,
        momentum=SGD_MOMENTUM,
        weight_decay=SGD_WEIGHT_DECAY,
    )
    return standin, optimizer
