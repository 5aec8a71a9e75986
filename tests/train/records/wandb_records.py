"""What an offline W&B run wrote, read back from its `run-ID.wandb` transaction log.

The installed wandb SDK has no Python reader of its own log any more (its writer lives in the
wandb-core binary), but it ships the protobuf schema of every record (`wandb.proto`). The file
is a LevelDB log (github.com/google/leveldb doc/log_format.md) behind a 7-byte W&B header:
32 KiB blocks of chunks `crc32 (of type + data), length, type, data`, a record split into
FIRST/MIDDLE/LAST chunks where it crosses a block, block tails too short for a chunk header
zero-filled. W&B's checksum is zlib's CRC-32 seeded with the CRC of the type byte.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import struct
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HEADER = struct.Struct("<4sHB")  # ident, magic, version
CHUNK = struct.Struct("<IHB")  # checksum, length, type
BLOCK = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> Iterator[Any]:
    """Every record of the log at `path` (a `wandb_internal_pb2.Record`), in order; a damaged
    chunk fails the read."""
    # Imported here, not at the top: a host without wandb (a CUDA image running `pytest -m
    # cuda`) must still collect the modules that import this one. Typed Any: protobuf builds
    # the module's message classes at import time, so there is no static `Record` to check.
    pb: Any = importlib.import_module("wandb.proto.wandb_internal_pb2")

    data = path.read_bytes()
    ident, magic, version = HEADER.unpack_from(data)
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0), f"{path}: not a W&B log"
    pos, pending = HEADER.size, b""
    while pos + CHUNK.size <= len(data):
        room = BLOCK - pos % BLOCK
        if room < CHUNK.size:  # the block's zero-filled tail
            pos += room
            continue
        checksum, length, kind = CHUNK.unpack_from(data, pos)
        chunk = data[pos + CHUNK.size : pos + CHUNK.size + length]
        assert zlib.crc32(chunk, zlib.crc32(bytes([kind]))) == checksum, f"{path}: bad chunk"
        pos += CHUNK.size + length
        pending = chunk if kind in (FULL, FIRST) else pending + chunk
        if kind in (FULL, LAST):
            record = pb.Record()
            record.ParseFromString(pending)
            yield record


@dataclass
class WandbRun:
    """One `.wandb` file: its run id, start time, config and history rows by step."""

    run_id: str = ""
    start_time: float = 0.0
    config: dict[str, Any] = field(default_factory=dict)
    rows: dict[int, dict[str, Any]] = field(default_factory=dict)


def _items(items: Any) -> Iterator[tuple[str, Any]]:
    for item in items:
        key = item.key or "/".join(item.nested_key)
        yield key, json.loads(item.value_json)


def read_run(path: Path) -> WandbRun:
    """The run in one transaction log: config updates applied in order, history rows with
    their scalars (W&B's own `_step`, `_runtime`, `_timestamp` left out)."""
    run = WandbRun()
    for record in records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run.run_id = record.run.run_id
            run.start_time = record.run.start_time.ToNanoseconds() / 1e9
            run.config.update(_items(record.run.config.update))
        elif kind == "config":
            run.config.update(_items(record.config.update))
        elif kind == "history":
            row = dict(_items(record.history.item))
            step = row.pop("_step")
            run.rows[step] = {k: v for k, v in row.items() if not k.startswith("_")}
    run.config.pop("_wandb", None)
    return run


def _complete(path: Path) -> bool:
    """The log ends with the run's exit record (a chunk cut short reads as the end)."""
    last = None
    with contextlib.suppress(AssertionError, struct.error):
        for record in records(path):
            last = record.WhichOneof("record_type")
    return last == "exit"


def offline_runs(wandb_dir: Path, *, timeout_s: float = 30.0) -> list[WandbRun]:
    """The finished offline runs under `wandb_dir` (what W&B wrote in DIR/wandb/), oldest
    first. `run.finish()` returns before wandb-core has flushed the log: wait for each log's
    exit record."""
    paths = list(wandb_dir.glob("wandb/offline-run-*/run-*.wandb"))
    deadline = time.monotonic() + timeout_s
    while not all(_complete(p) for p in paths):
        assert time.monotonic() < deadline, f"{paths}: no exit record after {timeout_s}s"
        time.sleep(0.1)
    return sorted((read_run(p) for p in paths), key=lambda run: run.start_time)
