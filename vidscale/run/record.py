"""The run's record in a checkpoint: what it says of how it was made, beside the state.

Every training checkpoint holds the run's `state.StateRegistry` parts (weights, optimizer,
progress, ...) and this record, under fixed top-level keys: "plan" (the `timeline.RunSizes` the
run started with), "config" (its flat config) and "fingerprint" (a hash of that config): what a
resume checks, always written together; "fast_path" (the `fastpath.probe.FastPathDecision` a
resume continues with); "model_name" and "num_classes". An imported run's checkpoint holds its
weights and "imported_from" (where they came from) only.

`RunRecord` is the one writer (`state()`: plain types that `torch.load(weights_only=True)`
reads) and the one reader (`RunRecord.of`, `read_record`): nothing else reads these keys from a
checkpoint (tests/run/test_record.py). Checkpoints written by earlier versions read as
they were written: one from before run sizes were recorded has no `origin`, one from before
fast-path decisions were recorded no `fast_path` (a resume takes the hardware rule).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, get_args

from vidscale.config import RunConfig, to_dict
from vidscale.fastpath.decision import FastPathDecision, Source
from vidscale.run.checkpoint import UnreadableCheckpoint, read_checkpoint
from vidscale.run.timeline import RunSizes

# The record's keys in a checkpoint, as every version wrote them; private, so that no other
# module reads them from a checkpoint (`RECORD_KEYS` names them for the guard that checks it).
_PLAN, _CONFIG, _FINGERPRINT = "plan", "config", "fingerprint"
_FAST_PATH, _MODEL_NAME, _NUM_CLASSES, _IMPORTED_FROM = (
    "fast_path",
    "model_name",
    "num_classes",
    "imported_from",
)
RECORD_KEYS = (_PLAN, _CONFIG, _FINGERPRINT, _FAST_PATH, _MODEL_NAME, _NUM_CLASSES, _IMPORTED_FROM)

T = TypeVar("T")


def flat_config(cfg: RunConfig) -> dict[str, Any]:
    """`section.field` -> value, JSON-normalised (tuples as lists)."""
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        else:
            out[prefix] = json.loads(json.dumps(value))

    walk("", to_dict(cfg))
    return out


def fingerprint(flat: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(flat, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Origin:
    """How a run was made, which a resume checks (`resume.resolve_start`): its sizes at start
    (key "plan"), its flat config (`flat_config`) and that config's `fingerprint`."""

    sizes: RunSizes
    config: Mapping[str, Any]
    fingerprint: str

    @classmethod
    def of_run(cls, cfg: RunConfig, sizes: RunSizes) -> Origin:
        flat = flat_config(cfg)
        return cls(sizes, flat, fingerprint(flat))


@dataclass(frozen=True)
class RunRecord:
    """What a checkpoint says of how it was made; each part None where the checkpoint's
    version did not record it (see the module docstring)."""

    origin: Origin | None = None
    fast_path: FastPathDecision | None = None  # the decision a resume continues with
    model_name: str | None = None
    num_classes: int | None = None
    imported_from: Mapping[str, str] | None = None  # an imported run: where its weights came from

    @classmethod
    def of_run(cls, cfg: RunConfig, sizes: RunSizes, *, fast_path: FastPathDecision) -> RunRecord:
        """The record of a training run: fixed at its start, written into every checkpoint."""
        return cls(
            origin=Origin.of_run(cfg, sizes),
            fast_path=fast_path,
            model_name=cfg.model.name,
            num_classes=cfg.model.num_classes,
        )

    def state(self) -> dict[str, Any]:
        """The record's keys for a checkpoint (merged into its state dict): plain types only,
        the parts that are None left out."""
        out: dict[str, Any] = {}
        if self.origin is not None:
            out[_PLAN] = self.origin.sizes.record()
            out[_CONFIG] = dict(self.origin.config)
            out[_FINGERPRINT] = self.origin.fingerprint
        if self.fast_path is not None:
            out[_FAST_PATH] = self.fast_path.record()
        if self.model_name is not None:
            out[_MODEL_NAME] = self.model_name
        if self.num_classes is not None:
            out[_NUM_CLASSES] = self.num_classes
        if self.imported_from is not None:
            out[_IMPORTED_FROM] = dict(self.imported_from)
        return out

    @classmethod
    def of(cls, state: Mapping[str, Any], *, path: Path | str) -> RunRecord:
        """The record in checkpoint `state` (loaded from `path`). A key of the wrong type, or
        "config" / "fingerprint" missing beside "plan" (always written together), is an
        `UnreadableCheckpoint` naming `path` and the key."""
        read = _Reader(state, Path(path))
        origin = None
        if _PLAN in state:
            origin = Origin(
                read.required(_PLAN, _sizes),
                read.required(_CONFIG, _str_mapping),
                read.required(_FINGERPRINT, _of_type(str)),
            )
        return cls(
            origin=origin,
            fast_path=read.optional(_FAST_PATH, _decision),
            model_name=read.optional(_MODEL_NAME, _of_type(str)),
            num_classes=read.optional(_NUM_CLASSES, _of_type(int)),
            imported_from=read.optional(_IMPORTED_FROM, _strings),
        )


def read_record(path: Path) -> RunRecord:
    """The record of checkpoint file `path`, its tensors memory-mapped, not read. A file that
    does not load, or whose record is malformed, is an `UnreadableCheckpoint` naming it."""
    return RunRecord.of(read_checkpoint(path, mmap=True), path=path)


class _Malformed(Exception):
    """Why a record value is not what its key holds (turned into an `UnreadableCheckpoint`)."""


@dataclass(frozen=True)
class _Reader:
    state: Mapping[str, Any]
    path: Path

    def required(self, key: str, convert: Callable[[Any], T]) -> T:
        if key not in self.state:
            missing = f"record key {key!r} missing beside {_PLAN!r}"
            raise UnreadableCheckpoint(self.path, missing)
        return self._convert(key, convert)

    def optional(self, key: str, convert: Callable[[Any], T]) -> T | None:
        return self._convert(key, convert) if key in self.state else None

    def _convert(self, key: str, convert: Callable[[Any], T]) -> T:
        try:
            return convert(self.state[key])
        except _Malformed as err:
            raise UnreadableCheckpoint(self.path, f"record key {key!r}: {err}") from None


def _type_name(value: Any) -> str:
    return type(value).__name__


def _of_type(kind: type[T]) -> Callable[[Any], T]:
    def convert(value: Any) -> T:
        # bool is an int to isinstance, never a count or a name here.
        if isinstance(value, bool) or not isinstance(value, kind):
            raise _Malformed(f"{_type_name(value)}, not {kind.__name__}")
        return value

    return convert


def _str_mapping(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise _Malformed(f"{_type_name(value)}, not a mapping of names")
    return dict(value)


def _strings(value: Any) -> dict[str, str]:
    mapping = _str_mapping(value)
    if not all(isinstance(v, str) for v in mapping.values()):
        raise _Malformed("a mapping with values that are not strings")
    return mapping


def _sizes(value: Any) -> RunSizes:
    mapping = _str_mapping(value)
    fields = {f.name: f for f in dataclasses.fields(RunSizes)}
    unknown = sorted(set(mapping) - set(fields))
    needed = [n for n, f in fields.items() if f.default is dataclasses.MISSING]
    missing = [n for n in needed if n not in mapping]
    if unknown or missing:
        raise _Malformed(f"unknown sizes {unknown}, missing sizes {missing}")
    for name, number in mapping.items():
        kind = (int, float) if name == "base_lr" else (int,)
        if isinstance(number, bool) or not isinstance(number, kind):
            raise _Malformed(f"{name} is {_type_name(number)}, not a number")
    return RunSizes(**mapping)


def _decision(value: Any) -> FastPathDecision:
    mapping = _str_mapping(value)
    flags = (mapping.get("bf16"), mapping.get("channels_last"))
    if not all(isinstance(flag, bool) for flag in flags):
        raise _Malformed("bf16 and channels_last must be true or false")
    if mapping.get("source") not in get_args(Source):
        raise _Malformed(f"source {mapping.get('source')!r} is none of {get_args(Source)}")
    try:
        return FastPathDecision.from_record(mapping)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise _Malformed(f"not a fast-path decision ({type(err).__name__}: {err})") from None
