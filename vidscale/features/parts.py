"""The unfinished work of an extraction: `OUT.parts/`, beside the output file.

`plan.json` holds the `Plan` (videos in row order and the settings); each `chunk-*.npz` holds
finished videos, written atomically (`atomic.atomic_write`: a killed writer leaves at most a
`*.tmp` file, cleared at the next start), so a chunk on disk is whole and a video is in at most
one chunk. A chunk holds `indices` (rows of the plan), `clip_features` (float32, n x views x F),
and the videos found unreadable as `skipped` (rows) with `reasons`: an unreadable video is
finished too, and a rerun does not try it again. `assemble` writes the output from the chunks
and removes the directory.
"""

from __future__ import annotations

import json
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from vidscale.atomic import atomic_write, atomic_write_json, remove_stale_tmp
from vidscale.errors import InputError
from vidscale.features.listing import Plan

PLAN_FILE = "plan.json"
CHUNK_GLOB = "chunk-*.npz"


def parts_dir(out: Path) -> Path:
    """Where the chunks of `out` are kept until it is assembled."""
    return out.with_name(out.name + ".parts")


def open_parts(out: Path, plan: Plan) -> Path:
    """Create `OUT.parts` with `plan`, or check that an existing one holds the same plan.

    Raises `InputError` naming `--out` when the unfinished extraction there has another plan
    (other videos, run, checkpoint or views)."""
    parts = parts_dir(out)
    wanted = json.loads(json.dumps(plan.as_json()))
    path = parts / PLAN_FILE
    if path.is_file():
        if json.loads(path.read_text()) != wanted:
            raise InputError(
                f"--out: {parts} holds an unfinished extraction with other videos or settings; "
                "rerun its own command, or remove that directory"
            )
    else:
        parts.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, wanted)
    remove_stale_tmp(parts)
    return parts


def finished_rows(parts: Path) -> set[int]:
    """The plan rows some chunk holds (extracted or found unreadable)."""
    done: set[int] = set()
    for chunk in sorted(parts.glob(CHUNK_GLOB)):
        with np.load(chunk) as data:
            done.update(int(i) for i in data["indices"])
            done.update(int(i) for i in data["skipped"])
    return done


@dataclass
class ChunkWriter:
    """This rank's finished videos, written as one chunk every `size` videos and at `flush`."""

    parts: Path
    rank: int
    size: int
    rows: list[int] = field(default_factory=list)
    features: list[np.ndarray] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    written: int = 0

    def add(self, row: int, clip_features: np.ndarray) -> None:
        self.rows.append(row)
        self.features.append(clip_features.astype(np.float32, copy=False))
        self._maybe_flush()

    def skip(self, row: int, reason: str) -> None:
        self.skipped.append(row)
        self.reasons.append(reason)
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        if len(self.rows) + len(self.skipped) >= self.size:
            self.flush()

    def flush(self) -> None:
        """Write what is pending as one chunk (nothing when nothing is)."""
        if not self.rows and not self.skipped:
            return
        arrays: dict[str, np.ndarray] = {
            "indices": np.asarray(self.rows, dtype=np.int64),
            "clip_features": np.stack(self.features) if self.features else np.zeros((0, 0, 0)),
            "skipped": np.asarray(self.skipped, dtype=np.int64),
            "reasons": np.asarray(self.reasons, dtype=np.str_),
        }
        # A random part keeps names apart across launches (a rerun's rank 0 is another writer).
        name = f"chunk-r{self.rank:04d}-{self.written:06d}-{uuid.uuid4().hex[:8]}.npz"
        atomic_write(self.parts / name, lambda f: _savez(f, arrays))
        self.written += 1
        self.rows, self.features, self.skipped, self.reasons = [], [], [], []


def assemble(out: Path, parts: Path, plan: Plan, meta: dict[str, Any]) -> dict[str, Any]:
    """Write `out` (the documented .npz, see `vidscale.features.extract`) from every chunk in
    row order, atomically, then remove `parts`. Returns what it holds: `videos`, `dim`,
    `views`, and `unreadable` as [{"path", "reason"}] in row order.

    Raises `RuntimeError` if a plan row is in no chunk (the ranks did not finish)."""
    items = plan.listing.items
    features: dict[int, np.ndarray] = {}
    reasons: dict[int, str] = {}
    for chunk in sorted(parts.glob(CHUNK_GLOB)):
        with np.load(chunk) as data:
            for row, clip in zip(data["indices"], data["clip_features"], strict=True):
                features.setdefault(int(row), clip)
            for row, reason in zip(data["skipped"], data["reasons"], strict=True):
                reasons.setdefault(int(row), str(reason))
    missing = [i for i in range(len(items)) if i not in features and i not in reasons]
    if missing:
        raise RuntimeError(
            f"{len(missing)} videos are in no chunk of {parts}, e.g. row {missing[0]}"
        )
    rows = [i for i in range(len(items)) if i in features]
    clips = np.stack([features[i] for i in rows]) if rows else np.zeros((0, 0, 0), np.float32)
    unreadable = [{"path": items[i].path, "reason": reasons[i]} for i in sorted(reasons)]
    arrays: dict[str, np.ndarray] = {
        "features": clips.mean(axis=1, dtype=np.float64).astype(np.float32),
        "clip_features": clips,
        "paths": np.asarray([items[i].path for i in rows], dtype=np.str_),
        "labels": np.asarray([items[i].label for i in rows], dtype=np.int64),
        "splits": np.asarray([items[i].split for i in rows], dtype=np.str_),
        "classes": np.asarray(plan.listing.classes, dtype=np.str_),
        "unreadable_paths": np.asarray([u["path"] for u in unreadable], dtype=np.str_),
        "unreadable_reasons": np.asarray([u["reason"] for u in unreadable], dtype=np.str_),
        "meta": np.asarray(json.dumps(meta)),
    }

    atomic_write(out, lambda f: _savez(f, arrays))
    shutil.rmtree(parts)
    views = int(clips.shape[1]) if rows else 0
    dim = int(clips.shape[2]) if rows else 0
    return {"videos": len(rows), "dim": dim, "views": views, "unreadable": unreadable}


def _savez(f: IO[bytes], arrays: dict[str, np.ndarray]) -> None:
    # numpy's stubs type `**kwds` of savez against its `allow_pickle` flag.
    np.savez(f, **arrays)  # type: ignore[arg-type]
