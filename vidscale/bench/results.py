"""The benches' typed results as JSON: what every `<Bench>Result` is built on.

A bench's `run(config, *, out_json, ...)` returns a frozen dataclass whose `to_dict()` is the
JSON document it writes (JSON-native values: lists, not tuples) and whose `from_dict(data,
source=...)` and `read(path)` parse that document back. They parse with `Fields`: typed getters
over one JSON object that raise `InputError` (a `ValueError`) in one line naming the source (the
file) and the key's path (`runs[2].compute_s`) when a key is missing or holds another type.
Numbers are kept as the JSON holds them (an int stays an int), so `to_dict(from_dict(d)) == d`
down to the text `json.dumps` writes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vidscale.atomic import atomic_write_json
from vidscale.errors import InputError

DEFAULT_SOURCE = "the result"


@dataclass(frozen=True)
class Fields:
    """One JSON object of a `what` (e.g. "`vidscale bench scaling`") document read from
    `source`, at `path` inside it ("" at the top). Each getter returns the key's value checked
    to be of its type, or raises `InputError` naming `source` and the key's full path."""

    data: Mapping[str, Any]
    source: str
    what: str
    path: str = ""

    def at(self, key: str) -> str:
        """The key's path in the document: `runs[0].compute_s`."""
        return f"{self.path}.{key}" if self.path else key

    def missing(self, key: str) -> InputError:
        where = f" in {self.path}" if self.path else ""
        return InputError(f"{self.source}: not a complete {self.what} JSON (no {key!r}{where})")

    def bad(self, key: str, expected: str, value: object) -> InputError:
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return InputError(
            f"{self.source}: bad {self.what} JSON ({self.at(key)}: expected {expected}, "
            f"got {shown})"
        )

    def has(self, key: str) -> bool:
        return key in self.data

    def value(self, key: str) -> Any:
        """The key's value, of any JSON type."""
        if key not in self.data:
            raise self.missing(key)
        return self.data[key]

    def integer(self, key: str) -> int:
        value = self.value(key)
        if not _is_int(value):
            raise self.bad(key, "an integer", value)
        return int(value)

    def opt_integer(self, key: str) -> int | None:
        """An integer or null."""
        return None if self.value(key) is None else self.integer(key)

    def number(self, key: str) -> float:
        """A number, returned as the JSON holds it (an integer stays one)."""
        value = self.value(key)
        if not _is_number(value):
            raise self.bad(key, "a number", value)
        return value

    def opt_number(self, key: str) -> float | None:
        """A number or null."""
        return None if self.value(key) is None else self.number(key)

    def text(self, key: str) -> str:
        value = self.value(key)
        if not isinstance(value, str):
            raise self.bad(key, "a string", value)
        return value

    def flag(self, key: str) -> bool:
        value = self.value(key)
        if not isinstance(value, bool):
            raise self.bad(key, "true or false", value)
        return value

    def obj(self, key: str) -> Fields:
        """A nested object, to read field by field."""
        value = self.value(key)
        if not isinstance(value, Mapping):
            raise self.bad(key, "an object", value)
        return Fields(value, self.source, self.what, self.at(key))

    def mapping(self, key: str) -> dict[str, Any]:
        """A nested object kept as it is (free-form facts no reader depends on)."""
        return dict(self.obj(key).data)

    def objs(self, key: str) -> list[Fields]:
        """A list of objects, each to read field by field (paths `key[i]`)."""
        items = self._list(key)
        out = []
        for i, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise self.bad(f"{key}[{i}]", "an object", item)
            out.append(Fields(item, self.source, self.what, f"{self.at(key)}[{i}]"))
        return out

    def numbers(self, key: str) -> tuple[float, ...]:
        """A list of numbers, as the JSON holds them."""
        items = self._list(key)
        for i, item in enumerate(items):
            if not _is_number(item):
                raise self.bad(f"{key}[{i}]", "a number", item)
        return tuple(items)

    def opt_numbers(self, key: str) -> tuple[float | None, ...]:
        """A list of numbers and nulls."""
        items = self._list(key)
        for i, item in enumerate(items):
            if item is not None and not _is_number(item):
                raise self.bad(f"{key}[{i}]", "a number or null", item)
        return tuple(items)

    def integers(self, key: str) -> tuple[int, ...]:
        items = self._list(key)
        for i, item in enumerate(items):
            if not _is_int(item):
                raise self.bad(f"{key}[{i}]", "an integer", item)
        return tuple(int(item) for item in items)

    def texts(self, key: str) -> tuple[str, ...]:
        items = self._list(key)
        for i, item in enumerate(items):
            if not isinstance(item, str):
                raise self.bad(f"{key}[{i}]", "a string", item)
        return tuple(items)

    def flags(self, key: str) -> tuple[bool, ...]:
        items = self._list(key)
        for i, item in enumerate(items):
            if not isinstance(item, bool):
                raise self.bad(f"{key}[{i}]", "true or false", item)
        return tuple(items)

    def _list(self, key: str) -> list[Any]:
        value = self.value(key)
        if not isinstance(value, list):
            raise self.bad(key, "a list", value)
        return value


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def fields_of(data: object, *, source: str, what: str) -> Fields:
    """`data` (a parsed JSON document) as the top-level `Fields` of a `what` document; an
    `InputError` naming `source` when it is not a JSON object."""
    if not isinstance(data, Mapping):
        raise InputError(f"{source}: not a {what} JSON (not a JSON object)")
    return Fields(data, source, what)


def read_json(path: Path, *, what: str) -> Fields:
    """The JSON object in the file at `path`; `InputError` naming the file when it cannot be
    read, is not JSON, or is not an object."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as err:
        raise InputError(f"{path}: cannot read it ({err.strerror or err})") from None
    except ValueError as err:  # not UTF-8, or not JSON
        raise InputError(f"{path}: not JSON ({err})") from None
    return fields_of(data, source=str(path), what=what)


def write_result(path: Path, document: Any) -> None:
    """`document` (a result's `to_dict()`) as indented JSON at `path`, atomically: a reader
    sees the previous file or this one, whole."""
    atomic_write_json(Path(path), document)


def plain(value: Any) -> Any:
    """`value` with tuples as lists and paths as strings, as JSON reads back."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


HOST_KEYS = ("device", "name", "cores", "torch_threads", "bf16_units", "torch", "load_average")


@dataclass(frozen=True)
class HostInfo:
    """The device a bench ran on, as `fastpath.hardware.describe` states it (a JSON's
    `hardware` or `host` object): the torch device, its CPU model or GPU name, the host's
    cores, torch's CPU threads, whether it computes bf16 natively, the torch version and the
    1-minute load average (None where unknown). `extra`: keys a bench adds after these (`bench
    models`: `load_average_end`), kept in order."""

    device: str
    name: str
    cores: int | None
    torch_threads: int
    bf16_units: bool
    torch: str
    load_average: float | None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, described: Mapping[str, Any]) -> HostInfo:
        """From `hardware.describe(...)`'s dict, with any keys added to it."""
        return cls.from_fields(fields_of(described, source="hardware.describe", what="host"))

    @classmethod
    def from_fields(cls, f: Fields) -> HostInfo:
        return cls(
            device=f.text("device"),
            name=f.text("name"),
            cores=f.opt_integer("cores"),
            torch_threads=f.integer("torch_threads"),
            bf16_units=f.flag("bf16_units"),
            torch=f.text("torch"),
            load_average=f.opt_number("load_average"),
            extra={k: v for k, v in f.data.items() if k not in HOST_KEYS},
        )

    def to_dict(self) -> dict[str, Any]:
        known = {k: getattr(self, k) for k in HOST_KEYS}
        return known | plain(dict(self.extra))
