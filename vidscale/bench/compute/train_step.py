"""One model's training step on random clips at a fixed fast-path setting, ready to time or
profile: what `bench throughput`, `bench profile` and `bench shard-train` run.

It is the one benchmark subject (`fastpath.subject.Subject`): the trainer's step (forward and
cross-entropy under the setting's autocast, backward, the gradient norm, SGD with momentum and
weight decay), each step's update counted. The setting is given (e.g. "bf16+cl"), never probed,
so a run on a lent GPU spends no time deciding it.
"""

from __future__ import annotations

import functools
import gc
from dataclasses import dataclass

import torch

from vidscale.errors import InputError
from vidscale.fastpath.settings import Candidate
from vidscale.fastpath.subject import ProbeShape, Subject
from vidscale.models.costs import model_info
from vidscale.models.registry import ModelConfig, build_model, default_frames


@dataclass(frozen=True)
class StepShape:
    """The clips of one step: `batch` x 3 x `frames` x `size` x `size` (frames 0: the model's)."""

    model: str
    batch: int
    size: int = 224
    frames: int = 0
    num_classes: int = 400

    @property
    def clip_frames(self) -> int:
        return self.frames or default_frames(self.model)

    @property
    def input(self) -> str:
        return f"{self.clip_frames}x3x{self.size}x{self.size}"

    def model_config(self) -> ModelConfig:
        return ModelConfig(name=self.model, num_classes=self.num_classes, frames=self.clip_frames)

    def probe_shape(self) -> ProbeShape:
        return ProbeShape(self.batch, 3, self.clip_frames, self.size, self.num_classes)

    def train_flops_per_clip(self) -> int:
        """The paper's convention: backward ≈ 2x forward, so a step is 3x the forward FLOPs."""
        info = model_info(self.model_config(), frames=self.clip_frames, size=self.size)
        return 3 * info.flops


def train_subject(
    shape: StepShape,
    *,
    device: torch.device,
    setting: Candidate,
    compile_backend: str | None = None,
) -> Subject:
    """`shape`'s model at `setting` on `device` with its random batch, the one benchmark subject
    (`fastpath.subject.Subject`: the trainer's step, every step's update counted);
    `compile_backend` compiles it with `torch.compile` (None: eager), and the first steps then
    include compilation."""
    return Subject.build(
        functools.partial(build_model, shape.model_config()),
        setting=setting,
        shape=shape.probe_shape(),
        device=device,
        compile_backend=compile_backend,
    )


def check_trainable(name: str, *, frames: int, size: int, batch: int) -> None:
    """Raise `InputError` when `name` cannot train on (batch, 3, frames, size, size) clips: too few
    frames or pixels for its strides, or one value per channel at a BatchNorm. Checked on the
    meta device, so it costs milliseconds and fails before any timing starts."""
    with torch.device("meta"):
        model = build_model(ModelConfig(name=name, num_classes=2))
        clips = torch.empty(batch, 3, frames, size, size)
    try:
        with torch.no_grad():
            model.train()(clips)
    except (RuntimeError, ValueError) as err:
        shape = f"{batch}x3x{frames}x{size}x{size}"
        raise InputError(f"{name} cannot train on {shape} clips: {err}") from err


def release(device: torch.device) -> None:
    """Give back what finished steps held, so the next model starts with the whole device;
    compiled graphs are dropped too."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    torch._dynamo.reset()


def is_out_of_memory(err: BaseException) -> bool:
    """True for the device running out of memory (CUDA's error, or the CPU allocator's)."""
    if isinstance(err, torch.cuda.OutOfMemoryError):
        return True
    return isinstance(err, RuntimeError) and "out of memory" in str(err).lower()
