"""`vidscale prepare`: decode every video once into JPEG frame shards plus an index (DESIGN §4).

Each video is decoded sequentially (one pass, no seeks), optionally resampled to a fixed frame
rate, resized so its short side is `short_side` (never enlarged: the clip transforms resize
anyway), JPEG-encoded, and packed by the parent process into `out/<split>/shard-NNNNN.tar`.
Worker processes decode and encode; only the parent writes. Videos go into shards in a random
order drawn from `seed` (so a shard is a random sample of classes, which streaming relies on),
and results are consumed in that order, so the same inputs and seed give byte-identical shards.

Resumable and idempotent: a re-run keeps the videos of completed shards (see `shards`),
discards half-written ones and prepares only what is left; a finished directory is left as is.
Unreadable videos are skipped and listed with the reason in `manifest.json`; they never stop
the run. Output: `classes.txt`, `index_train.jsonl`, `index_val.jsonl`, `manifest.json`,
`prepare_options.json` and the shard directories.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any, NamedTuple, TypedDict, Unpack

import cv2
import numpy as np
from tqdm import tqdm

from vidscale.data.annotations import VideoRecord, read_class_names
from vidscale.data.decode import DecodeError, decode_all, probe
from vidscale.data.layouts import LayoutSplits, read_layout
from vidscale.data.shards import (
    SHARD_PATTERN,
    ShardEntry,
    ShardWriter,
    atomic_write,
    completed_shards,
    discard_incomplete,
    encode_jpeg,
    read_index,
    safe_video_id,
    sidecar_path,
    write_index,
)

SPLITS = ("train", "val")


class PrepareError(RuntimeError):
    """The output directory holds a preparation made with different options or classes."""


@dataclass(frozen=True)
class Manifest:
    """What `prepare` produced: source, options, counts and every skipped video with why."""

    source: dict[str, str]
    options: dict[str, Any]
    classes: int
    counts: dict[str, int]
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def save(self, path: Path) -> None:
        atomic_write(Path(path), (json.dumps(asdict(self), indent=2) + "\n").encode())

    def __str__(self) -> str:
        c = self.counts
        return (
            f"prepared {c['train']} train + {c['val']} val videos ({c['frames']} frames, "
            f"{c['shards']} shards, {c['bytes'] / 1e9:.2f} GB); skipped {len(self.skipped)}"
        )


class PreparedData(NamedTuple):
    classes: list[str]
    train: list[ShardEntry]
    val: list[ShardEntry]


@dataclass(frozen=True)
class EncodedVideo:
    frames: list[bytes]  # JPEG data in frame order
    fps: float
    width: int
    height: int


def resize_short_side(frame_HWC: np.ndarray, short_side: int) -> np.ndarray:
    """Shrink so that min(H, W) == short_side (INTER_AREA); smaller frames and 0 keep size."""
    h, w = frame_HWC.shape[:2]
    if short_side <= 0 or min(h, w) <= short_side:
        return frame_HWC
    if h <= w:
        size = (max(1, round(w * short_side / h)), short_side)
    else:
        size = (short_side, max(1, round(h * short_side / w)))
    return cv2.resize(frame_HWC, size, interpolation=cv2.INTER_AREA)


def repeat_counts(source_fps: float, fps: float | None) -> Iterator[int]:
    """How often each source frame appears when resampling to `fps` (output frame k shows
    source frame floor(k * source_fps / fps)); all ones without resampling."""
    if fps is None:
        while True:
            yield 1
    if source_fps <= 0:
        raise DecodeError("unknown frame rate: cannot resample")
    ratio = Fraction(fps).limit_denominator(100_000) / Fraction(source_fps).limit_denominator(
        100_000
    )
    i = 0
    while True:
        # Frames k with i <= k / ratio < i + 1, i.e. ceil(i * ratio) <= k < ceil((i + 1) * ratio).
        yield -(-(i + 1) * ratio // 1) - -(-i * ratio // 1)
        i += 1


def encode_video(path: Path, *, short_side: int, fps: float | None, quality: int) -> EncodedVideo:
    """Decode `path` once and return its (resampled, resized) frames as JPEG bytes."""
    meta = probe(path)  # frame rate, and the frame count its packet index promises
    source_fps, expected = meta.fps, meta.num_frames
    frames: list[bytes] = []
    shape: tuple[int, ...] = (0, 0)
    decoded = 0
    for frame, repeat in zip(decode_all(path), repeat_counts(source_fps, fps), strict=False):
        decoded += 1
        if repeat:
            small = resize_short_side(frame, short_side)
            shape = small.shape
            frames.extend([encode_jpeg(small, quality=quality)] * repeat)
    if not frames:
        raise DecodeError("no frames decoded")
    if decoded != expected:
        # A truncated file can keep its index while its last packets are gone; the threaded
        # decoder then stops early without an error. Training would sample frames past the end.
        raise DecodeError(f"decoded {decoded} of the {expected} frames in its index (truncated?)")
    return EncodedVideo(frames, float(fps or source_fps), width=shape[1], height=shape[0])


@dataclass(frozen=True)
class _Job:
    split: str
    video_id: str
    path: str
    label: int
    short_side: int
    fps: float | None
    quality: int


def _work(job: _Job) -> tuple[_Job, EncodedVideo | str]:
    """Runs in a worker: the encoded video, or the reason it could not be read."""
    try:
        return job, encode_video(
            Path(job.path), short_side=job.short_side, fps=job.fps, quality=job.quality
        )
    except Exception as err:  # any library error from one foreign file must not end the run
        return job, f"{type(err).__name__}: {err}"


def _init_worker() -> None:
    cv2.setNumThreads(1)  # parallelism comes from the processes


def _options(short_side: int, fps: float | None, quality: int) -> dict[str, Any]:
    return {"short_side": short_side, "fps": fps, "quality": quality}


def _check_resume(out: Path, options: dict[str, Any], classes: list[str]) -> None:
    """Refuse to mix frames prepared with other options or label numbering."""
    saved = out / "prepare_options.json"
    current = {"options": options, "classes": classes}
    if saved.is_file():
        previous = json.loads(saved.read_text())
        if previous != current:
            raise PrepareError(
                f"{out} was prepared with {previous['options']} and "
                f"{len(previous['classes'])} classes; now {options} and {len(classes)} classes. "
                "Use a new output directory."
            )
    else:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write(saved, (json.dumps(current, indent=2) + "\n").encode())


def _done(out: Path, split: str) -> tuple[dict[str, ShardEntry], int]:
    """Videos of completed shards (by source path) and the next free shard number."""
    directory = out / split
    discard_incomplete(directory)
    done: dict[str, ShardEntry] = {}
    numbers = [-1]
    for shard in completed_shards(directory):
        for entry in read_index(sidecar_path(shard), root=out):
            done.setdefault(entry.path, entry)
        match = SHARD_PATTERN.match(shard.name)
        assert match is not None
        numbers.append(int(match.group(1)))
    return done, max(numbers) + 1


def _source(record: VideoRecord) -> str:
    """The key a video is known by across runs: its absolute path."""
    return str(Path(record.path).absolute())


def _plan(
    splits: LayoutSplits, done: dict[str, dict[str, ShardEntry]], options: dict[str, Any], seed: int
) -> tuple[list[_Job], list[tuple[str, str]]]:
    """Jobs for the videos not yet prepared, each split in a seeded random order."""
    used = {e.id for d in done.values() for e in d.values()}
    jobs: list[_Job] = []
    skipped: list[tuple[str, str]] = []
    rng = np.random.default_rng(seed)
    for split, records in (("train", splits.train), ("val", splits.val)):
        seen: set[str] = set()
        for i in rng.permutation(len(records)):
            path, label = _source(records[i]), records[i].label
            if path in seen:
                skipped.append((path, f"listed twice in {split}; prepared once"))
                continue
            seen.add(path)
            if path in done[split]:
                continue
            video_id = base = safe_video_id(Path(path).stem)
            k = 1
            while video_id in used:  # same file name in two class folders
                video_id, k = f"{base[:70]}-{k}", k + 1
            used.add(video_id)
            jobs.append(_Job(split, video_id, path, label, **options))
    return jobs, skipped


def _results(jobs: Sequence[_Job], workers: int) -> Iterator[tuple[_Job, EncodedVideo | str]]:
    if workers <= 1 or len(jobs) <= 1:
        _init_worker()
        yield from map(_work, jobs)
        return
    # spawn: the parent may hold threads (torch, FFmpeg) that fork would copy mid-state.
    with mp.get_context("spawn").Pool(workers, initializer=_init_worker) as pool:
        # imap, not imap_unordered: shard contents then depend on the seed, not on timing.
        yield from pool.imap(_work, jobs, chunksize=1)


def prepare_dataset(
    splits: LayoutSplits,
    out: Path,
    *,
    short_side: int = 256,
    fps: float | None = None,
    quality: int = 90,
    shard_bytes: int = 1 << 30,
    workers: int = 0,
    seed: int = 0,
    progress: bool = True,
    source: dict[str, str] | None = None,
) -> Manifest:
    """Prepare `splits` into `out` (see the module docstring); `workers=0` uses every core."""
    out = Path(out)
    options = _options(short_side, fps, quality)
    _check_resume(out, options, list(splits.classes))
    state = {split: _done(out, split) for split in SPLITS}
    jobs, skipped = _plan(splits, {s: d for s, (d, _) in state.items()}, options, seed)
    skipped = list(splits.missing) + skipped
    writers = {
        split: ShardWriter(out / split, root=out, max_bytes=shard_bytes, first_number=n)
        for split, (_, n) in state.items()
    }
    workers = workers or os.cpu_count() or 1
    bar = tqdm(total=len(jobs), unit="video", desc="prepare", disable=not progress)
    for job, result in _results(jobs, workers):
        bar.update()
        if isinstance(result, str):
            skipped.append((job.path, result))
            continue
        writers[job.split].add(
            job.video_id,
            result.frames,
            label=job.label,
            fps=result.fps,
            path=job.path,
            width=result.width,
            height=result.height,
        )
    bar.close()
    for writer in writers.values():
        writer.close()
    return _finish(out, splits, options, skipped, source or {"layout": "records"}, shard_bytes)


def _finish(
    out: Path,
    splits: LayoutSplits,
    options: dict[str, Any],
    skipped: list[tuple[str, str]],
    source: dict[str, str],
    shard_bytes: int,
) -> Manifest:
    """Write classes, indices (only videos of the current lists) and the manifest."""
    atomic_write(out / "classes.txt", ("\n".join(splits.classes) + "\n").encode())
    counts = {"frames": 0, "shards": 0, "bytes": 0}
    for split, records in (("train", splits.train), ("val", splits.val)):
        label_of = {_source(r): r.label for r in records}
        shards = completed_shards(out / split)
        # Labels from the current lists: a corrected annotation needs no re-encoding.
        entries = [
            replace(e, label=label_of[e.path])
            for shard in shards
            for e in read_index(sidecar_path(shard), root=out)
            if e.path in label_of
        ]
        write_index(out / f"index_{split}.jsonl", entries, root=out)
        counts[split] = len(entries)
        counts["frames"] += sum(e.num_frames for e in entries)
        counts["shards"] += len(shards)
        counts["bytes"] += sum(s.stat().st_size for s in shards)
    manifest = Manifest(
        source=source,
        options={**options, "shard_bytes": shard_bytes},
        classes=len(splits.classes),
        counts=counts,
        skipped=sorted(skipped),
    )
    manifest.save(out / "manifest.json")
    return manifest


class PrepareSettings(TypedDict, total=False):
    """`prepare_dataset`'s keyword settings, which `prepare_from_layout` passes through."""

    short_side: int
    fps: float | None
    quality: int
    shard_bytes: int
    workers: int
    seed: int
    progress: bool


def prepare_from_layout(
    kind: str,
    root: Path,
    out: Path,
    *,
    split: int = 1,
    skip_missing: bool = False,
    annotations_dir: Path | None = None,
    **settings: Unpack[PrepareSettings],
) -> Manifest:
    """Read a standard layout (`layouts.read_layout`) and prepare it with `settings` (those of
    `prepare_dataset`): `vidscale prepare`."""
    splits = read_layout(
        kind, Path(root), split=split, skip_missing=skip_missing, annotations_dir=annotations_dir
    )
    source = {"layout": kind, "root": str(Path(root).absolute())}
    if kind in ("ucf101", "hmdb51"):
        source["split"] = str(split)
    return prepare_dataset(splits, Path(out), source=source, **settings)


def open_prepared(root: Path) -> PreparedData:
    """Class names and the train/val index of a prepared directory (for training)."""
    root = Path(root)
    if not (root / "index_train.jsonl").is_file():
        raise FileNotFoundError(
            f"{root} is not a prepared dataset (no index_train.jsonl); run `vidscale prepare`"
        )
    classes = read_class_names(root / "classes.txt")
    train = read_index(root / "index_train.jsonl", root=root)
    val = read_index(root / "index_val.jsonl", root=root)
    return PreparedData(classes, train, val)
