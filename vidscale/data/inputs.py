"""Named model inputs: which of a batch's inputs a model takes, and how it is normalised.

A batch carries its clips by name (`batch["inputs"]`: "rgb", "flow"), uint8 as the workers
produced them; a single-stream model takes one of them as float (N, C, T, H, W). `ModelInput`
is that choice and the normalisation that goes with the modality, chosen by name, never by
channel count: the run's RGB statistics (`DataConfig.mean`/`std`, ImageNet's by default) for
RGB, 127.5 for every channel of stacked flow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from vidscale.data.clip import ClipSpec
from vidscale.data.data_config import DataConfig
from vidscale.data.transforms import (
    IMAGENET_RGB_MEAN,
    IMAGENET_RGB_STD,
    input_normalization,
    normalize,
)


@dataclass(frozen=True)
class ModelInput:
    """The input `name` with `channels` channels, normalised for its modality: RGB with
    `rgb_mean`/`rgb_std` (0..1 scale, RGB order), flow with its own fixed statistics."""

    name: str
    channels: int
    rgb_mean: tuple[float, ...] = IMAGENET_RGB_MEAN
    rgb_std: tuple[float, ...] = IMAGENET_RGB_STD

    @classmethod
    def of(cls, spec: ClipSpec, data: DataConfig | None = None) -> ModelInput:
        """The input of clips sampled by `spec`, normalised as the run whose data section is
        `data` says (`data.mean`/`data.std`); ImageNet's statistics without one."""
        if data is None:
            return cls(spec.modality, spec.channels)
        return cls(spec.modality, spec.channels, tuple(data.mean), tuple(data.std))

    def statistics(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """Mean and std per channel on the 0..255 scale of the uint8 clips."""
        return input_normalization(
            self.name, self.channels, rgb_mean=self.rgb_mean, rgb_std=self.rgb_std
        )

    def take(self, inputs: Mapping[str, torch.Tensor], device: torch.device) -> torch.Tensor:
        """This input's uint8 clips moved to `device`; a batch without it is a `KeyError`
        naming what the batch has."""
        if self.name not in inputs:
            raise KeyError(f"the batch has inputs {sorted(inputs)}, the model takes {self.name!r}")
        return inputs[self.name].to(device, non_blocking=True)

    def normalize(self, clips: torch.Tensor) -> torch.Tensor:
        """uint8 (N, C, T, H, W) on the device -> the model's float input."""
        mean, std = self.statistics()
        return normalize(clips, mean=mean, std=std)

    def __call__(self, inputs: Mapping[str, torch.Tensor], device: torch.device) -> torch.Tensor:
        return self.normalize(self.take(inputs, device))
