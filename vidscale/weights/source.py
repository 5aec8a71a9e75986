"""What every checkpoint format provides to `vidscale.weights.import_weights`.

A format is a module with the members of `CheckpointFormat`: its name, the vidscale models it
covers (each with the clips and head dropout of the source's configs, a `Source`), how to read
its file into named tensors, how to rename them onto a vidscale model's state_dict, and the
class count its classifier has. `vidscale.weights.FORMATS` lists the registered ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from torch import Tensor

from vidscale.data.clip import ClipSpec


@dataclass(frozen=True)
class Source:
    """What a source model is in vidscale: its configs (zoo names), the head's dropout and the
    clips of its configs' pipelines."""

    configs: tuple[str, ...]
    dropout: float
    train_clip: ClipSpec
    eval_clip: ClipSpec


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
