"""What every checkpoint format provides to `vidscale.weights.import_weights`.

A format is a module with the members of `CheckpointFormat`: its name, the vidscale models it
covers (each with the clips, head dropout and input normalisation of the source's configs, a
`Source`), how to read
its file into named tensors, how to rename them onto a vidscale model's state_dict, and the
class count its classifier has. `vidscale.weights.FORMATS` lists the registered ones.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from torch import Tensor

from vidscale.data.clip import ClipSpec
from vidscale.data.transforms import IMAGENET_RGB_MEAN, IMAGENET_RGB_STD
from vidscale.errors import InputError


@dataclass(frozen=True)
class Source:
    """What a source model is in vidscale: its configs (zoo names), the head's dropout, the
    clips of its configs' pipelines and the RGB normalisation it was trained with (`mean`,
    `std`: 0..1 scale, RGB order, the run's `data.mean`/`data.std`; ImageNet's unless the
    format says otherwise, `normalised_as`)."""

    configs: tuple[str, ...]
    dropout: float
    train_clip: ClipSpec
    eval_clip: ClipSpec
    mean: tuple[float, float, float] = IMAGENET_RGB_MEAN
    std: tuple[float, float, float] = IMAGENET_RGB_STD


def normalised_as(
    sources: Mapping[str, Source],
    *,
    mean: tuple[float, float, float],
    std: tuple[float, float, float],
) -> dict[str, Source]:
    """`sources` with the input normalisation `mean`/`std` (0..1 scale, RGB order): a format
    whose every model was trained on the same normalisation states it once."""
    return {name: dataclasses.replace(s, mean=mean, std=std) for name, s in sources.items()}


def source_of(
    name: str,
    *,
    fmt: str,
    sources: Mapping[str, Source],
    refused: Mapping[str, str],
    otherwise: str,
) -> Source:
    """`sources[name]`; any other model is an `InputError` naming the flag, the format, the
    reason (`refused`'s, else `otherwise`) and the models covered."""
    if name in sources:
        return sources[name]
    reason = refused.get(name, otherwise)
    raise InputError(
        f"--model {name}: not importable from {fmt} ({reason}); covered: {', '.join(sources)}"
    )


class CheckpointFormat(Protocol):
    """The members a format module defines (see the module docstring)."""

    @property
    def FORMAT(self) -> str:  # a module constant, read-only here
        """The `--format` name."""
        ...

    @property
    def SOURCES(self) -> Mapping[str, Source]:  # a module constant, read-only here
        """The vidscale models this format covers, with their sources."""
        ...

    def check_model(self, name: str) -> Source:
        """The source of vidscale model `name`; any other is an `InputError` saying why."""
        ...

    def read(self, path: Path) -> dict[str, Tensor]:
        """The file's state dict (its named tensors); a file that is none is an `InputError`."""
        ...

    def convert(
        self, given: Mapping[str, Tensor], target: Mapping[str, Tensor], *, model: str
    ) -> dict[str, Tensor]:
        """`given` renamed onto `target`'s keys, in its dtypes; a key or shape that does not fit
        is an `InputError` naming the first few of each kind."""
        ...

    def classes_in(self, state: Mapping[str, Tensor]) -> int:
        """The checkpoint's class count (the classifier's rows)."""
        ...
