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
`prepare_options.json` and the shard directories. A multi-label video's entry also holds its
label set and segments (`ShardEntry.label_set`), taken, like every label, from the current lists.

With `flow`, the same decode also yields the optical flow between consecutive prepared frames
(after the same resampling and resizing, so RGB frame i and flow i are aligned), stored as the
field stores it (DESIGN §9): `out/flow` is a prepared directory of its own, whose entry for a
video has the RGB entry's id, path, label, fps and size, and whose frames 2k and 2k + 1 are the
x and y components of flow k (frame k -> k + 1) as grayscale JPEGs. Each output resumes on its
own: a video both hold is skipped, one only the RGB holds is decoded again for its flow alone.

Images (splits with `media="image"`, from `layouts.IMAGE_LAYOUTS`) go through the same
machinery as one-frame videos: each worker runs `encode.encode_image` instead of `encode_video`
(fps 1.0; the file's own bytes kept when it is a baseline JPEG needing no resize), the entries
are the shard datasets' one-frame records, and `prepare_options.json` records `media: image`,
so a directory of video frames never resumes as images or back. Neither `fps` nor `flow`
applies to images.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, NamedTuple, TypedDict, Unpack

import cv2
import numpy as np
from tqdm import tqdm

from vidscale.atomic import atomic_write_json, atomic_write_text
from vidscale.data.annotations import VideoRecord, read_class_names
from vidscale.data.label_sets import LabelSet
from vidscale.data.layouts import LayoutSplits, Media, layout, read_layout
from vidscale.data.media.flow import FLOW_BOUND, FlowEngine, FlowMethod
from vidscale.data.prepared.encode import EncodedVideo, encode_image, encode_video, flow_engine
from vidscale.data.prepared.shards import (
    SHARD_PATTERN,
    ShardEntry,
    ShardWriter,
    completed_shards,
    discard_incomplete,
    read_index,
    safe_video_id,
    sidecar_path,
    write_index,
)
from vidscale.errors import InputError

SPLITS = ("train", "val")
FLOW_DIR = "flow"  # the optical flow's prepared directory, inside the RGB one
TOO_SHORT = "fewer than 2 frames: no optical flow"


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
    flow: Manifest | None = None  # the optical flow's manifest, when flow was prepared

    def save(self, path: Path) -> None:
        """Write this manifest without `flow`, which `flow/manifest.json` holds."""
        data = {k: v for k, v in asdict(self).items() if k != "flow"}
        atomic_write_json(Path(path), data)

    def __str__(self) -> str:
        c = self.counts
        items = "images" if self.options.get("media") == "image" else "videos"
        text = (
            f"prepared {c['train']} train + {c['val']} val {items} ({c['frames']} frames, "
            f"{c['shards']} shards, {c['bytes'] / 1e9:.2f} GB); skipped {len(self.skipped)}"
        )
        if self.flow is not None:
            f = self.flow.counts
            text += (
                f"; optical flow ({self.flow.options['method']}): {f['train']} train + "
                f"{f['val']} val videos, skipped {len(self.flow.skipped)}"
            )
        return text


class PreparedData(NamedTuple):
    classes: list[str]
    train: list[ShardEntry]
    val: list[ShardEntry]


@dataclass(frozen=True)
class _Job:
    split: str
    video_id: str
    path: str
    label: int
    short_side: int
    fps: float | None
    quality: int
    rgb: bool = True  # False: the RGB frames are prepared already, only the flow is wanted
    flow: FlowMethod | None = None
    media: Media = "video"
    label_set: LabelSet | None = None  # a multi-label video's positives (and segments)


def _work(job: _Job) -> tuple[_Job, EncodedVideo | str]:
    """Runs in a worker: the encoded video or image, or the reason it could not be read."""
    try:
        if job.media == "image":
            return job, encode_image(Path(job.path), short_side=job.short_side, quality=job.quality)
        return job, encode_video(
            Path(job.path),
            short_side=job.short_side,
            fps=job.fps,
            quality=job.quality,
            rgb=job.rgb,
            flow=flow_engine(job.flow) if job.flow else None,
        )
    except Exception as err:  # any library error from one foreign file must not end the run
        return job, f"{type(err).__name__}: {err}"


def _init_worker() -> None:
    cv2.setNumThreads(1)  # parallelism comes from the processes


def _options(short_side: int, fps: float | None, quality: int, media: Media) -> dict[str, Any]:
    options: dict[str, Any] = {"short_side": short_side, "fps": fps, "quality": quality}
    if media == "image":  # only then: video preparations made before images keep resuming
        options["media"] = media
    return options


def _flow_options(method: FlowMethod, options: dict[str, Any]) -> dict[str, Any]:
    return {"method": method, "bound": FLOW_BOUND, **options}


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
        atomic_write_json(saved, current)


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


class _Output:
    """One prepared directory being written (the RGB frames in `out`, the flow in `out/flow`):
    the videos its completed shards hold, its shard writers and the videos it skipped."""

    def __init__(
        self, root: Path, *, options: dict[str, Any], classes: list[str], shard_bytes: int
    ) -> None:
        _check_resume(root, options, classes)
        state = {split: _done(root, split) for split in SPLITS}
        self.root, self.options = root, options
        self.done = {split: done for split, (done, _) in state.items()}
        self.writers = {
            split: ShardWriter(root / split, root=root, max_bytes=shard_bytes, first_number=n)
            for split, (_, n) in state.items()
        }
        self.skipped: list[tuple[str, str]] = []

    def add(self, job: _Job, frames: list[bytes], video: EncodedVideo) -> None:
        self.writers[job.split].add(
            job.video_id,
            frames,
            label=job.label,
            label_set=job.label_set,
            fps=video.fps,
            path=job.path,
            width=video.width,
            height=video.height,
        )

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()


class _Plan(NamedTuple):
    jobs: list[_Job]
    skipped: list[tuple[str, str]]  # by every output
    flow_skipped: list[tuple[str, str]]  # by the flow output alone


def _plan(
    splits: LayoutSplits,
    rgb: _Output,
    flow: _Output | None,
    *,
    method: FlowMethod | None,
    options: dict[str, Any],
    seed: int,
) -> _Plan:
    """Jobs for the videos an output still lacks, each split in a seeded random order.

    The order does not depend on what is done, so the RGB shards of a run with flow, or of a
    resumed run, hold what a fresh RGB-only run writes. A video keeps the id it has in either
    output, so its RGB and flow entries share it.
    """
    outputs = [rgb] if flow is None else [rgb, flow]
    used = {e.id for o in outputs for d in o.done.values() for e in d.values()}
    plan = _Plan([], [], [])
    rng = np.random.default_rng(seed)
    for split, records in (("train", splits.train), ("val", splits.val)):
        seen: set[str] = set()
        for i in rng.permutation(len(records)):
            path, label = _source(records[i]), records[i].label
            if path in seen:
                plan.skipped.append((path, f"listed twice in {split}; prepared once"))
                continue
            seen.add(path)
            have_rgb = rgb.done[split].get(path)
            have_flow = flow.done[split].get(path) if flow is not None else None
            need_flow = flow is not None and have_flow is None
            if need_flow and have_rgb is not None and have_rgb.num_frames < 2:
                plan.flow_skipped.append((path, TOO_SHORT))  # known without decoding again
                need_flow = False
            if have_rgb is not None and not need_flow:
                continue
            known = have_rgb or have_flow
            video_id = known.id if known is not None else _new_id(path, used)
            used.add(video_id)
            plan.jobs.append(
                _Job(
                    split,
                    video_id,
                    path,
                    label,
                    **options,
                    rgb=have_rgb is None,
                    flow=method if need_flow else None,
                    label_set=records[i].label_set,
                )
            )
    return plan


def _new_id(path: str, used: set[str]) -> str:
    video_id = base = safe_video_id(Path(path).stem)
    k = 1
    while video_id in used:  # same file name in two class folders
        video_id, k = f"{base[:70]}-{k}", k + 1
    return video_id


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
    flow: FlowMethod | None = None,
    shard_bytes: int = 1 << 30,
    workers: int = 0,
    seed: int = 0,
    progress: bool = True,
    source: dict[str, str] | None = None,
) -> Manifest:
    """Prepare `splits` into `out` (see the module docstring); `workers=0` uses every core.

    Image splits (`splits.media == "image"`) become one-frame records; `fps` or `flow` with them
    is a `ValueError`.

    With `flow`, also their optical flow into `out/flow` by that method; a method this OpenCV
    build lacks raises `FlowUnavailable` before anything is written. `PrepareError` when `out`
    (or `out/flow`) holds a preparation made with other options or classes.
    """
    out = Path(out)
    if splits.media == "image" and (flow is not None or fps is not None):
        raise InputError("images have one frame: neither fps nor optical flow applies")
    if flow is not None:
        FlowEngine(flow)  # fails here, once, rather than for every video in the workers
    options = _options(short_side, fps, quality, splits.media)
    classes = list(splits.classes)
    rgb = _Output(out, options=options, classes=classes, shard_bytes=shard_bytes)
    flow_out = None
    if flow is not None:
        flow_options = _flow_options(flow, options)
        flow_out = _Output(
            out / FLOW_DIR, options=flow_options, classes=classes, shard_bytes=shard_bytes
        )
    plan = _plan(splits, rgb, flow_out, method=flow, options=options, seed=seed)
    workers = workers or os.cpu_count() or 1
    bar = tqdm(total=len(plan.jobs), unit=splits.media, desc="prepare", disable=not progress)
    for job, result in _results(plan.jobs, workers):
        bar.update()
        _store(job, result, rgb, flow_out)
    bar.close()
    source = source or {"layout": "records"}
    skipped = list(splits.missing) + plan.skipped
    rgb.close()
    manifest = _finish(out, splits, options, skipped + rgb.skipped, source, shard_bytes)
    if flow_out is None:
        return manifest
    flow_out.close()
    flow_skipped = skipped + plan.flow_skipped + flow_out.skipped
    flow_manifest = _finish(
        flow_out.root, splits, flow_out.options, flow_skipped, source, shard_bytes
    )
    return replace(manifest, flow=flow_manifest)


def _store(job: _Job, result: EncodedVideo | str, rgb: _Output, flow: _Output | None) -> None:
    """Write a worker's result to the outputs that asked for it, or record why not."""
    if job.rgb:
        if isinstance(result, str):
            rgb.skipped.append((job.path, result))
        else:
            rgb.add(job, result.frames, result)
    if job.flow is not None and flow is not None:
        if isinstance(result, str):
            flow.skipped.append((job.path, result))
        elif result.flow:
            flow.add(job, result.flow, result)
        else:
            flow.skipped.append((job.path, TOO_SHORT))


def _finish(
    out: Path,
    splits: LayoutSplits,
    options: dict[str, Any],
    skipped: list[tuple[str, str]],
    source: dict[str, str],
    shard_bytes: int,
) -> Manifest:
    """Write classes, indices (only videos of the current lists) and the manifest."""
    atomic_write_text(out / "classes.txt", "\n".join(splits.classes) + "\n")
    counts = {"frames": 0, "shards": 0, "bytes": 0}
    for split, records in (("train", splits.train), ("val", splits.val)):
        label_of = {_source(r): (r.label, r.label_set) for r in records}
        shards = completed_shards(out / split)
        # Labels from the current lists: a corrected annotation needs no re-encoding.
        entries = [
            replace(e, label=label_of[e.path][0], label_set=label_of[e.path][1])
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
    flow: FlowMethod | None
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
    if layout(kind).numbered_splits:
        source["split"] = str(split)
    return prepare_dataset(splits, Path(out), source=source, **settings)


def open_prepared(root: Path, *, modality: Literal["rgb", "flow"] = "rgb") -> PreparedData:
    """Class names and the train/val index of a prepared directory (for training).

    `modality="flow"` reads the optical flow prepared beside the frames (`root/flow`): an
    entry's frames 2k and 2k + 1 are the x and y components of the flow from RGB frame k to
    k + 1, and the entry's id, path and label are those of the video's RGB entry.
    """
    root = Path(root)
    if modality not in ("rgb", "flow"):
        raise ValueError(f"modality must be 'rgb' or 'flow', got {modality!r}")
    if modality == "flow":
        if not (root / FLOW_DIR / "index_train.jsonl").is_file():
            raise FileNotFoundError(
                f"no optical flow was prepared in {root} (no {FLOW_DIR}/index_train.jsonl); "
                "run `vidscale prepare ... --flow dis`"
            )
        root = root / FLOW_DIR
    if not (root / "index_train.jsonl").is_file():
        raise FileNotFoundError(
            f"{root} is not a prepared dataset (no index_train.jsonl); run `vidscale prepare`"
        )
    classes = read_class_names(root / "classes.txt")
    train = read_index(root / "index_train.jsonl", root=root)
    val = read_index(root / "index_val.jsonl", root=root)
    return PreparedData(classes, train, val)
