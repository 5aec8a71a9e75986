"""A finished run's `summary.json`: its one writer and its one reader.

`RunSummary` holds every key the trainer writes, typed, and any other key in `extra` (a key of
an earlier version, or one a caller added), so that nothing written is lost. `write()` is the
one writer (atomic); `RunSummary.read(path)` the one reader: a file that is not a JSON object,
a key missing or of the wrong type, is one `UnreadableSummary` line naming the file and the
key. No other module opens the file (tests/run/test_summary.py); they name it through
`summary_path`.

Keys are written in one order, the trainer's: what every version wrote (model ... skipped),
then what later versions added in the order they write it. A summary of an earlier version
reads with the keys it lacks as None: before 0915475 no `bad_steps`, before c4e069b no
`val_videos`/`val_unreadable`, before 9f7ef07 no `comm_*` (then `allreduce_bytes_per_step`,
kept in `extra`), before 72d5882 no `skipped_steps`/`applied_steps`; the run's recipe, its
machine and its scoring arithmetic came later still. `val_map`, `best_val_map`,
`val_map_history` and `chance_map` are written for multi-label runs only.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from vidscale.atomic import atomic_write_text
from vidscale.errors import InputError

SUMMARY_FILE = "summary.json"

T = TypeVar("T")


def summary_path(run_dir: Path) -> Path:
    """Where the run in `run_dir` writes its summary (a finished run has one)."""
    return run_dir / SUMMARY_FILE


class PathReason(NamedTuple):
    """An input left out, and why: written as {"path": ..., "reason": ...}."""

    path: str
    reason: str


class UnreadableSummary(InputError):
    """A summary file that is not what the trainer writes; the message names the file and,
    for a bad value, its key."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: not a readable run summary ({reason})")
        self.path, self.reason = Path(path), reason


@dataclass(frozen=True)
class RunSummary:
    """What a finished run reports of itself; the fields in the order they are written. A
    field with a default that is None is not written (its version did not write it, see the
    module docstring), except `val_videos` and `chance_map`: null beside `val_unreadable` and
    `val_map_history`, which a version that writes them always writes."""

    model: str
    world_size: int
    global_batch: int
    epochs: int
    num_classes: int
    chance_top1: float
    val_top1: float | None  # the last evaluation's; None when the run never evaluated
    best_val_top1: float | None
    val_top1_history: tuple[float, ...]
    wall_seconds: float
    train_steps: int
    clips_per_second: float
    data_wait_fraction: float  # the TSM paper's Fig. 3b metric, max over ranks
    # Rank 0's data-parallel communication over the run (`distributed.traffic.Traffic`).
    comm_bytes: int | None = None
    comm_seconds: float | None = None
    comm_rounds: int | None = None
    comm_bytes_per_step: float | None = None
    skipped: tuple[PathReason, ...] = ()  # unreadable training inputs replaced, by path
    bad_steps: tuple[int, ...] | None = None  # steps not finite on some rank: no update
    skipped_steps: int | None = None
    applied_steps: int | None = None
    val_videos: int | None = None  # the last evaluation's readable videos (null: none ran)
    val_unreadable: tuple[PathReason, ...] | None = None
    val_map: float | None = None  # multi-label runs: mAP 0..1, last, best and every one
    best_val_map: float | None = None
    val_map_history: tuple[float, ...] | None = None
    chance_map: float | None = None
    recipe: str | None = None
    base_lr: float | None = None
    strategy: str | None = None
    batch_history: tuple[tuple[int, int], ...] | None = None  # (epochs done, global batch)
    host_memory_retained: bool | None = None
    eval_precision: str | None = None
    fast_path: str | None = None
    fast_path_choice: Mapping[str, Any] | None = None  # `FastPathDecision.record()`
    cpus: int | None = None
    threads: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # every other key, in its order

    def record(self) -> dict[str, Any]:
        """The summary as JSON values, keys in their written order."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "extra":
                out.update(value)
            elif f.name in _ALWAYS or getattr(self, _WRITTEN_WITH.get(f.name, f.name)) is not None:
                out[f.name] = _plain(value)
        return out

    def write(self, path: Path) -> None:
        """Write `record()` to `path` atomically (a reader never sees half a file)."""
        atomic_write_text(path, json.dumps(self.record(), indent=2) + "\n")

    @classmethod
    def read(cls, path: Path) -> RunSummary:
        """The summary in file `path`; `UnreadableSummary` naming it (and the key) when it is
        not JSON, not an object, or a key is missing or of the wrong type."""
        try:
            data = json.loads(Path(path).read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise UnreadableSummary(path, f"not JSON: {err}") from None
        if not isinstance(data, dict):
            raise UnreadableSummary(path, f"a JSON {_type_name(data)}, not an object")
        try:
            return _parse(data)
        except _BadKey as err:
            raise UnreadableSummary(path, f"key {err.key!r}: {err.why}") from None

    @classmethod
    def of_record(cls, record: Mapping[str, Any]) -> RunSummary:
        """The summary a run's counters and fields make (`summary.MergedCounters.summary`);
        a value of the wrong type there is a bug (TypeError), not bad input."""
        try:
            return _parse(record)
        except _BadKey as err:
            raise TypeError(f"run summary key {err.key!r}: {err.why}") from None


class _BadKey(Exception):
    def __init__(self, key: str, why: str) -> None:
        super().__init__(key, why)
        self.key, self.why = key, why


def _parse(data: Mapping[str, Any]) -> RunSummary:
    values: dict[str, Any] = {}
    for name, convert in _CONVERTERS.items():
        if name not in data:
            if name in _ALWAYS:
                raise _BadKey(name, "missing")
            continue
        value = data[name]
        if value is None and name in _NULLABLE:
            values[name] = None
            continue
        try:
            values[name] = convert(value)
        except _Malformed as err:
            raise _BadKey(name, str(err)) from None
    extra = {k: v for k, v in data.items() if k not in _CONVERTERS}
    return RunSummary(**values, extra=extra)


class _Malformed(Exception):
    """Why a value is not what its key holds."""


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _of_type(kind: type[T]) -> Callable[[Any], T]:
    def convert(value: Any) -> T:
        # bool is an int to isinstance, never a count here; a flag must be a bool.
        if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
            raise _Malformed(f"{_type_name(value)}, not {kind.__name__}")
        return value

    return convert


def _number(value: Any) -> float:
    # An int stays an int, so a summary reads back and writes as it was.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Malformed(f"{_type_name(value)}, not a number")
    return value


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise _Malformed(f"{_type_name(value)}, not a list")
    return value


def _numbers(value: Any) -> tuple[float, ...]:
    return tuple(_number(v) for v in _list(value))


def _counts(value: Any) -> tuple[int, ...]:
    return tuple(_of_type(int)(v) for v in _list(value))


def _path_reasons(value: Any) -> tuple[PathReason, ...]:
    items = []
    for item in _list(value):
        if not isinstance(item, dict) or set(item) != {"path", "reason"}:
            raise _Malformed(f"an entry {item!r}, not {{'path': ..., 'reason': ...}}")
        items.append(PathReason(_of_type(str)(item["path"]), _of_type(str)(item["reason"])))
    return tuple(items)


def _batch_history(value: Any) -> tuple[tuple[int, int], ...]:
    pairs = []
    for pair in _list(value):
        epoch_batch = _counts(pair)
        if len(epoch_batch) != 2:
            raise _Malformed(f"an entry {pair!r}, not [epochs done, global batch]")
        pairs.append((epoch_batch[0], epoch_batch[1]))
    return tuple(pairs)


def _mapping(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Malformed(f"{_type_name(value)}, not an object")
    return dict(value)


def _plain(value: Any) -> Any:
    """A field's JSON value: tuples as lists, an input left out as {"path", "reason"}."""
    if isinstance(value, PathReason):
        return {"path": value.path, "reason": value.reason}
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return dict(value)
    return value


_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "model": _of_type(str),
    "world_size": _of_type(int),
    "global_batch": _of_type(int),
    "epochs": _of_type(int),
    "num_classes": _of_type(int),
    "chance_top1": _number,
    "val_top1": _number,
    "best_val_top1": _number,
    "val_top1_history": _numbers,
    "wall_seconds": _number,
    "train_steps": _of_type(int),
    "clips_per_second": _number,
    "data_wait_fraction": _number,
    "comm_bytes": _of_type(int),
    "comm_seconds": _number,
    "comm_rounds": _of_type(int),
    "comm_bytes_per_step": _number,
    "skipped": _path_reasons,
    "bad_steps": _counts,
    "skipped_steps": _of_type(int),
    "applied_steps": _of_type(int),
    "val_videos": _of_type(int),
    "val_unreadable": _path_reasons,
    "val_map": _number,
    "best_val_map": _number,
    "val_map_history": _numbers,
    "chance_map": _number,
    "recipe": _of_type(str),
    "base_lr": _number,
    "strategy": _of_type(str),
    "batch_history": _batch_history,
    "host_memory_retained": _of_type(bool),
    "eval_precision": _of_type(str),
    "fast_path": _of_type(str),
    "fast_path_choice": _mapping,
    "cpus": _of_type(int),
    "threads": _of_type(int),
}
# What every version wrote (the fields without a default, and `skipped`), always written.
_ALWAYS = frozenset(
    f.name for f in dataclasses.fields(RunSummary) if f.default is dataclasses.MISSING
) | {"skipped"}
# Values the trainer writes as null: no evaluation yet, or no chance level for the mAP.
_NULLABLE = frozenset({"val_top1", "best_val_top1", "val_videos", "chance_map"})
# Keys written together with another (since the same version), so null is told from absent.
_WRITTEN_WITH = {
    "val_videos": "val_unreadable",
    "val_map": "val_map_history",
    "best_val_map": "val_map_history",
    "chance_map": "val_map_history",
}
