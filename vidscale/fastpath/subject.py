"""The benchmark subject: a model at a fast-path setting, training on one fixed random batch with
the trainer's step. What the fast-path probe (`trials`) and the benches that time a model's step
(`bench models`, `throughput`, `profile`, `shard-train`, `multigrid`, `scaling`, the network
bench's hook cost) build, one way, so that they time the same thing:

- the weights and the batch come from one seed (`SEED`): the model is built right after
  `torch.manual_seed(SEED)`, the clips (float, N(0, 1), on the device) and labels drawn after it,
  so every subject of one model and shape starts from the same weights and trains on the same
  clips, whichever bench builds it;
- the setting is applied as training applies it (`apply_to_model`: channels-last parameters;
  the setting's autocast around forward and loss) and the device options training turns on
  process-wide (`set_device_options`: TF32 and cudnn autotuning on CUDA) are set once, here;
- the step is the trainer's (`step.fixed_batch.FixedBatchStep`: forward and loss inside the
  autocast, backward, gradient norm, agreement, the update if finite, gradients zeroed), with
  the benches' SGD (`step.fixed_batch.bench_sgd`), on its batch (`__call__`), on other clips
  (`on`: other shapes, decoded batches) or on a loader's batches (`loaded`: `bench scaling`),
  through a wrapper of the model where a bench trains one (`through`: DDP, a data-parallel
  strategy over its ranks);
- every step's result is counted (`applied`, `step.applied.AppliedSteps`): a bench reports how
  many of its steps applied their update and refuses a row where none did.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from vidscale.fastpath.settings import Candidate, FastPath, apply_to_model, set_device_options
from vidscale.step.applied import AppliedSteps
from vidscale.step.fixed_batch import FixedBatchStep
from vidscale.step.objective import CROSS_ENTROPY, Objective
from vidscale.step.run import MicroBatchSync, PrepareInput, StepResult, no_sync_needed

SEED = 0  # every subject's weights, clips and labels


@dataclass(frozen=True)
class ProbeShape:
    """What one process trains on: `batch` clips of `channels` x `frames` x `crop`²."""

    batch: int
    channels: int
    frames: int
    crop: int
    num_classes: int

    @property
    def clips(self) -> tuple[int, int, int, int, int]:
        return (self.batch, self.channels, self.frames, self.crop, self.crop)

    def text(self) -> str:
        return "x".join(str(n) for n in self.clips)


def random_batch(shape: ProbeShape, device: torch.device) -> tuple[Tensor, Tensor]:
    """A subject's batch of `shape`: float N(0, 1) clips and uniform labels, on `device`, drawn
    from the global generator (`Subject.build` draws its own right after `SEED`)."""
    clips = torch.randn(shape.clips, device=device)
    labels = torch.randint(shape.num_classes, (shape.batch,), device=device)
    return clips, labels


class Subject:
    """A model (`model`, the setting applied; `forward`, what runs forward: the model, compiled,
    or a wrapper of it) with its fixed batch (`clips`, `labels`) and the trainer's step on it.
    Calling it runs one step (`StepResult`), counted in `applied`."""

    def __init__(
        self,
        model: nn.Module,
        *,
        fast: FastPath,
        clips: Tensor,
        labels: Tensor,
        forward: nn.Module | None = None,
    ) -> None:
        self.model, self.fast = model, fast
        self.forward = forward if forward is not None else model
        self.clips, self.labels = clips, labels
        self.step = FixedBatchStep(self.forward, clips, labels, autocast=fast.autocast())
        self.applied = AppliedSteps()

    @classmethod
    def build(
        cls,
        build: Callable[[], nn.Module],
        *,
        setting: Candidate,
        shape: ProbeShape,
        device: torch.device,
        compile_backend: str | None = None,
    ) -> Subject:
        """`build()`'s model (built under `SEED`, on the CPU) on `device` at `setting`, in
        training mode, with `shape`'s random batch; `compile_backend` compiles what runs
        forward with `torch.compile` (its first steps then include compilation)."""
        fast = FastPath(device, setting.bf16, setting.channels_last, compile_backend is not None)
        set_device_options(device)
        torch.manual_seed(SEED)
        model = apply_to_model(build().to(device), fast).train()
        forward = model
        if compile_backend is not None:
            compiled = torch.compile(model, backend=compile_backend)
            assert isinstance(compiled, nn.Module)
            forward = compiled
        clips, labels = random_batch(shape, device)
        return cls(model, fast=fast, clips=clips, labels=labels, forward=forward)

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.step.optimizer

    def through(
        self,
        forward: nn.Module,
        *,
        micro_batch: MicroBatchSync = no_sync_needed,
        world_size: int = 1,
        objective: Objective = CROSS_ENTROPY,
    ) -> None:
        """Train through `forward` from now on: a wrapper of `model` (one-rank DDP with a
        gradient hook; a data-parallel strategy's, with its `micro_batch` context, agreeing
        over `world_size` ranks), keeping the batch, the optimizer and the count; `objective`
        for multi-label batches."""
        self.forward = forward
        self.step = FixedBatchStep(
            forward,
            self.clips,
            self.labels,
            optimizer=self.optimizer,
            autocast=self.fast.autocast(),
            micro_batch=micro_batch,
            world_size=world_size,
            objective=objective,
        )

    def __call__(self) -> StepResult:
        return self.on(self.clips, self.labels)

    def on(self, clips: Tensor, labels: Tensor, *, accumulate: int = 1) -> StepResult:
        """One step on other clips of the same kind (float, on the device): a bench that feeds
        decoded batches, or times other shapes (`accumulate` micro-batches of them a step)."""
        result = self.step.on(clips, labels, accumulate=accumulate)
        self.applied.add(result)
        return result

    def loaded(
        self, batches: Iterator[dict[str, Any]], *, prepare: PrepareInput, clips: int
    ) -> StepResult:
        """One step on the next batch of a loader (`FixedBatchStep.loaded`: the data wait
        timed, the inputs moved and normalised by `prepare`), counted."""
        result = self.step.loaded(batches, prepare=prepare, clips=clips)
        self.applied.add(result)
        return result

    @torch.inference_mode()
    def infer(self) -> Tensor:
        """One forward pass on the batch in evaluation mode, inside the setting's autocast."""
        self.model.eval()
        try:
            with self.fast.autocast()():
                return self.forward(self.clips)
        finally:
            self.model.train()
