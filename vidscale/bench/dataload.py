"""Data-loading benchmarks: what a clip costs from each storage format, and how much of a
training step waits for data (TSM paper Fig. 3b).

`bench_data` reads the same clips (same videos, same frame indices) several ways, on one core:

- `h264_sequential`: decode every frame from the start of the video up to the last frame the
  clip uses, no seeking (what a naive loader does; for a TSN clip that is the whole video);
- `h264_seek`: keyframe-aware seeking from a cached packet index, decoding every frame from a
  GOP's keyframe to the frame wanted (`decode_baseline`, the decoder before decoding plans);
- `h264_plan`: `decode.decode_frames`, a decoding plan: GOPs entered once, pictures that are
  neither wanted nor references skipped, only wanted frames converted (`decode_plan`);
- `h264_plan_tN` (with `threads` = N > 1): the same on N decoder threads (wall time; CPU adds up);
- `shards`: JPEG frames from prepared tar shards (`ShardReader`: a few `pread`s, then decode
  exactly the frames used),

for 8-frame TSN clips and 16/32-frame dense clips (stride 2), on videos with x264's default
GOP (250) and with a small GOP. Methods are interleaved clip by clip, so they share the
machine's noise, and every lossless method's frames are checked against the sequential
decode's, so a fast wrong decoder stops the benchmark. Reported: clips/s of wall time (one
worker process), CPU ms per clip (clips per CPU-second is the per-core rate, which other
processes on the machine distort less) and frames decoded per clip. The magnitudes DESIGN §4
expects on one core, and what was measured beside them, are in docs/benchmarks.md ("Data
loading: raw H.264 vs prepared shards").

`bench_data_wait` trains a real model for a few steps with the real `DataLoader` and measures
the fraction of step time blocked waiting for the next batch (data loading not hidden by
compute) for several clip lengths and worker counts.

Benchmark videos are generated when none are given: a camera pan over a textured scene with
moving objects and sensor noise, 340x256 (short side 256, as `prepare` stores), 30 fps; the
`k400` preset makes Kinetics-400-like files instead: 456x256, x264 CRF 21, default GOP.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import av
import cv2
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader

from vidscale.data.annotations import VideoRecord
from vidscale.data.clip import ClipSpec, frame_indices
from vidscale.data.dataset import VideoClipDataset, collate
from vidscale.data.decode import (
    DecodeError,
    DecodeStats,
    RGBConverter,
    VideoMeta,
    decode_frames,
    open_video,
    probe,
)
from vidscale.data.decode_baseline import decode_frames_seek
from vidscale.data.layouts import VIDEO_EXTENSIONS, LayoutSplits
from vidscale.data.prepare import open_prepared, prepare_dataset
from vidscale.data.shard_dataset import ShardClipDataset
from vidscale.data.shards import ShardEntry, ShardReader
from vidscale.data.transforms import normalize
from vidscale.models.registry import ModelConfig, build_model


@dataclass(frozen=True)
class ClipKind:
    name: str
    spec: ClipSpec


DEFAULT_CLIPS = (
    ClipKind("tsn8", ClipSpec(frames=8, sampling="uniform")),
    ClipKind("dense16", ClipSpec(frames=16, sampling="dense", stride=2)),
    ClipKind("dense32", ClipSpec(frames=32, sampling="dense", stride=2)),
)


# benchmark videos ----------------------------------------------------------------------------


def scene_frames(
    rng: np.random.Generator, *, num_frames: int, width: int, height: int
) -> Iterator[np.ndarray]:
    """(H, W, 3) uint8 frames: a pan (2 px/frame) over smooth colour blotches with fine texture,
    two moving rectangles and pixel noise; detail an encoder must actually code."""
    pan = 2
    full_w = width + pan * num_frames
    coarse = rng.uniform(30, 220, size=(max(height // 16, 2), max(full_w // 16, 2), 3))
    scene = cv2.resize(coarse.astype(np.float32), (full_w, height), interpolation=cv2.INTER_CUBIC)
    scene += rng.normal(0, 10, size=(height, full_w, 1)).astype(np.float32)
    boxes = [(rng.uniform(0, width), rng.uniform(0, height), rng.normal(0, 3, 2)) for _ in range(2)]
    colours = rng.uniform(0, 255, size=(2, 3))
    for t in range(num_frames):
        img = scene[:, t * pan : t * pan + width].copy()
        for (x0, y0, v), colour in zip(boxes, colours, strict=True):
            x, y = int(x0 + v[0] * t) % width, int(y0 + v[1] * t) % height
            img[y : y + height // 5, x : x + width // 6] = colour
        img += rng.normal(0, 2.0, size=img.shape).astype(np.float32)
        yield img.clip(0, 255).astype(np.uint8)


def write_bench_video(
    path: Path, frames: Iterator[np.ndarray], *, fps: int, gop: int, crf: int = 23
) -> Path:
    """H.264 (x264 preset medium, B-frames, `crf`) with a keyframe at least every `gop` frames."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("libx264", rate=fps, options={"crf": str(crf)})
        stream.pix_fmt = "yuv420p"
        stream.codec_context.gop_size = gop
        for i, rgb in enumerate(frames):
            if i == 0:
                stream.height, stream.width = rgb.shape[:2]
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


@dataclass(frozen=True)
class BenchVideoSpec:
    """Videos generated for a data benchmark: `count` scenes of `seconds` at `fps`, `width` x
    `height`, each scene encoded at x264 `crf` once per GOP length in `gops`."""

    count: int = 4
    seconds: float = 10.0
    fps: int = 30
    width: int = 340
    height: int = 256
    gops: tuple[int, ...] = (250, 16)
    crf: int = 23


# Named sets of generated videos. k400: Kinetics-400 as commonly stored (short side 256 at 16:9,
# x264 CRF 21, x264's default GOP of 250 frames), the set raw-video decoding is tuned on.
PRESETS = {
    "default": BenchVideoSpec(),
    "k400": BenchVideoSpec(width=456, height=256, gops=(250,), crf=21),
}


def make_bench_videos(
    out: Path, spec: BenchVideoSpec = BenchVideoSpec(), *, seed: int = 0
) -> dict[str, list[Path]]:
    """The scenes of `spec` (picked by `seed`), per GOP length: {"gop250": [...], ...}."""
    sources: dict[str, list[Path]] = {f"gop{g}": [] for g in spec.gops}
    num_frames = round(spec.seconds * spec.fps)
    for k in range(spec.count):
        for gop in spec.gops:
            rng = np.random.default_rng((seed, k))  # the same scene for every GOP length
            frames = scene_frames(rng, num_frames=num_frames, width=spec.width, height=spec.height)
            path = Path(out) / f"gop{gop}" / f"scene_{k:03d}.mp4"
            video = write_bench_video(path, frames, fps=spec.fps, gop=gop, crf=spec.crf)
            sources[f"gop{gop}"].append(video)
    return sources


def find_videos(directory: Path, *, limit: int) -> list[Path]:
    found = sorted(p for p in Path(directory).rglob("*") if p.suffix.lower() in VIDEO_EXTENSIONS)
    if not found:
        raise FileNotFoundError(f"no videos ({', '.join(VIDEO_EXTENSIONS)}) under {directory}")
    return found[:limit]


# readers -------------------------------------------------------------------------------------


def decode_sequential(path: Path, indices: np.ndarray) -> tuple[np.ndarray, int]:
    """Frames at `indices` by decoding every frame from the start up to the last one used;
    also the number of frames decoded. The reference every lossless reader must equal."""
    wanted = {int(i) for i in indices}
    last = max(wanted)
    got: dict[int, np.ndarray] = {}
    decoded = 0
    to_rgb = RGBConverter()
    with open_video(path) as (container, stream):
        try:
            for i, frame in enumerate(container.decode(stream)):
                decoded += 1
                if i in wanted:
                    got[i] = to_rgb(frame)
                if i >= last:
                    break
        except av.error.FFmpegError as err:
            raise DecodeError(f"{path}: decoding failed: {err}") from err
    if len(got) != len(wanted):
        raise DecodeError(f"{path}: only {decoded} frames")
    return np.stack([got[int(i)] for i in indices]), decoded


# One read: (video number, frame indices) -> (the frames, frames decoded from the source).
Read = Callable[[int, np.ndarray], tuple[np.ndarray, int]]


@dataclass
class Method:
    """A way to read clip frames: its name, which source it reads, the read function and
    whether it is lossless (its frames must equal the sequential decode's)."""

    name: str
    source: str
    read: Read
    lossless: bool = True
    wall_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    decoded: list[int] = field(default_factory=list)

    def measure(self, video: int, indices: np.ndarray) -> np.ndarray:
        wall, cpu = time.perf_counter(), time.process_time()
        frames, decoded = self.read(video, indices)
        self.cpu_s.append(time.process_time() - cpu)
        self.wall_s.append(time.perf_counter() - wall)
        self.decoded.append(decoded)
        return frames


def h264_methods(
    source: str, paths: list[Path], metas: list[VideoMeta], *, threads: int = 1
) -> list[Method]:
    """The raw-video readers of one source (module docstring), `h264_sequential` first."""

    def sequential(video: int, indices: np.ndarray) -> tuple[np.ndarray, int]:
        return decode_sequential(paths[video], indices)

    def seek(video: int, indices: np.ndarray) -> tuple[np.ndarray, int]:
        stats = DecodeStats()
        frames = decode_frames_seek(paths[video], indices, meta=metas[video], stats=stats)
        return frames, stats.frames_decoded

    def plan(threads: int) -> Read:
        def read(video: int, indices: np.ndarray) -> tuple[np.ndarray, int]:
            stats = DecodeStats()
            frames = decode_frames(
                paths[video], indices, meta=metas[video], stats=stats, threads=threads
            )
            return frames, stats.frames_decoded

        return read

    methods = [
        Method("h264_sequential", source, sequential),
        Method("h264_seek", source, seek),
        Method("h264_plan", source, plan(1)),
    ]
    if threads > 1:
        methods.append(Method(f"h264_plan_t{threads}", source, plan(threads)))
    return methods


def shard_method(entries: list[ShardEntry], reader: ShardReader) -> Method:
    def read(video: int, indices: np.ndarray) -> tuple[np.ndarray, int]:
        return reader.read_frames(entries[video], indices), len(set(indices.tolist()))

    return Method("shards", "jpeg", read, lossless=False)


# the clip benchmark --------------------------------------------------------------------------


@dataclass(frozen=True)
class DataBenchRow:
    method: str
    source: str
    clip: str
    frames: int
    clips: int
    clips_per_s: float  # wall time, one worker process
    clips_per_cpu_s: float  # per core
    wall_ms: float  # median
    cpu_ms: float  # mean
    frames_decoded: float  # mean per clip
    speedup_vs_sequential: float  # CPU time of h264_sequential on the default GOP / this
    speedup_vs_seek: float  # CPU time of h264_seek on this source (shards: the first) / this


def _rows(methods: list[Method], clip: str, frames: int, baseline: str) -> list[DataBenchRow]:
    base = next(m for m in methods if m.name == "h264_sequential" and m.source == baseline)
    base_cpu = float(np.mean(base.cpu_s))
    seek_cpu = {m.source: float(np.mean(m.cpu_s)) for m in methods if m.name == "h264_seek"}
    rows = []
    for m in methods:
        cpu = float(np.mean(m.cpu_s))
        seek = seek_cpu.get(m.source, seek_cpu[baseline])
        rows.append(
            DataBenchRow(
                method=m.name,
                source=m.source,
                clip=clip,
                frames=frames,
                clips=len(m.wall_s),
                clips_per_s=len(m.wall_s) / sum(m.wall_s),
                clips_per_cpu_s=1.0 / cpu if cpu > 0 else float("inf"),
                wall_ms=1e3 * float(np.median(m.wall_s)),
                cpu_ms=1e3 * cpu,
                frames_decoded=float(np.mean(m.decoded)),
                speedup_vs_sequential=base_cpu / cpu if cpu > 0 else float("inf"),
                speedup_vs_seek=seek / cpu if cpu > 0 else float("inf"),
            )
        )
    return rows


def _prepare_shards(paths: list[Path], out: Path, *, quality: int) -> list[ShardEntry]:
    splits = LayoutSplits(["bench"], [VideoRecord(p, 0) for p in paths], [])
    manifest = prepare_dataset(
        splits, out, short_side=256, quality=quality, workers=1, progress=False
    )
    if manifest.skipped:
        listing = "; ".join(f"{p}: {reason}" for p, reason in manifest.skipped)
        raise DecodeError(f"cannot benchmark unreadable videos (remove them): {listing}")
    by_path = {e.path: e for e in open_prepared(out).train}
    return [by_path[str(Path(p).absolute())] for p in paths]


def bench_data(
    videos_dir: Path | None = None,
    *,
    out_json: Path | None = None,
    work_dir: Path | None = None,
    clips: Sequence[ClipKind] = DEFAULT_CLIPS,
    rounds: int = 5,
    generate: BenchVideoSpec = BenchVideoSpec(),
    max_videos: int = 8,
    quality: int = 90,
    seed: int = 0,
    threads: int = 1,
    show: bool = True,
) -> dict[str, Any]:
    """Clips/s, CPU ms and frames decoded per clip of each reading method (module docstring),
    side by side.

    `videos_dir`: benchmark these videos (as they are encoded); otherwise the videos of
    `generate` are made, their scenes picked by `seed`. Every round reads, for every video and
    clip kind, one random training clip with every method in rotating order; a lossless method
    whose frames differ from the sequential decode's raises `RuntimeError`. `threads` > 1 adds
    `h264_plan` on that many decoder threads. Shards are prepared from the first source (short
    side 256, JPEG `quality`). Returns (and writes to `out_json`) the settings and one row per
    (clip kind, method, source).
    """
    with ExitStack() as stack:
        work = Path(work_dir or stack.enter_context(tempfile.TemporaryDirectory()))
        if videos_dir is not None:
            sources = {"given": find_videos(Path(videos_dir), limit=max_videos)}
        else:
            sources = make_bench_videos(work / "videos", generate, seed=seed)
        first = next(iter(sources))
        # Probed once per video, as each loader worker caches it.
        metas = {s: [probe(p) for p in paths] for s, paths in sources.items()}
        entries = _prepare_shards(sources[first], work / "shards", quality=quality)
        reader = ShardReader()
        stack.callback(reader.close)
        rows: list[DataBenchRow] = []
        for kind in clips:
            methods = [
                m for s, p in sources.items() for m in h264_methods(s, p, metas[s], threads=threads)
            ]
            methods.append(shard_method(entries, reader))
            _run_rounds(methods, kind.spec, metas[first], rounds=rounds, seed=seed)
            rows.extend(_rows(methods, kind.name, kind.spec.frames, baseline=first))
        kbps = {s: _kbps(paths, metas[s]) for s, paths in sources.items()}  # before cleanup
    result = {
        "settings": {
            "videos": {s: [str(p) for p in paths] for s, paths in sources.items()},
            "frames_per_video": [m.num_frames for m in metas[first]],
            "kbps": kbps,
            "size": [metas[first][0].width, metas[first][0].height],
            "generated": asdict(generate) if videos_dir is None else None,
            "rounds": rounds,
            "decoder_threads": threads,
            "clips": {k.name: asdict(k.spec) for k in clips},
            "jpeg_quality": quality,
            "cpu_count": os.cpu_count(),
            "machine": platform.platform(),
            "torch_threads": torch.get_num_threads(),
        },
        "rows": [asdict(r) for r in rows],
    }
    if out_json is not None:
        Path(out_json).write_text(json.dumps(result, indent=2) + "\n")
    if show:
        print(format_data_table(rows))
        print(format_gains(rows))
    return result


def _kbps(paths: list[Path], metas: list[VideoMeta]) -> list[int]:
    """Average bit rate of each video (decoding cost grows with it)."""
    return [
        round(p.stat().st_size * 8e-3 / max(m.duration, 1e-9))
        for p, m in zip(paths, metas, strict=True)
    ]


def _run_rounds(
    methods: list[Method], spec: ClipSpec, metas: list[VideoMeta], *, rounds: int, seed: int
) -> None:
    """Warm every method on every video once (page cache, codec tables), then time `rounds`,
    checking every clip's frames."""
    for video, meta in enumerate(metas):
        indices = frame_indices(meta.num_frames, spec, rng=None)
        _check_lossless(methods, [m.read(video, indices)[0] for m in methods], video, indices)
    for r in range(rounds):
        for video, meta in enumerate(metas):
            rng = np.random.default_rng((seed, r, video, spec.frames))
            indices = frame_indices(meta.num_frames, spec, rng=rng)
            shift = (r * len(metas) + video) % len(methods)
            order = list(range(shift, len(methods))) + list(range(shift))  # who goes first
            frames: list[np.ndarray] = [np.empty(0)] * len(methods)
            for i in order:
                frames[i] = methods[i].measure(video, indices)
            _check_lossless(methods, frames, video, indices)


def _check_lossless(
    methods: list[Method], frames: list[np.ndarray], video: int, indices: np.ndarray
) -> None:
    """Every lossless method read what the full sequential decode of its source reads."""
    reference = {
        m.source: f for m, f in zip(methods, frames, strict=True) if m.name == "h264_sequential"
    }
    for m, f in zip(methods, frames, strict=True):
        if m.lossless and not np.array_equal(f, reference[m.source]):
            raise RuntimeError(
                f"{m.name} read other frames than a full sequential decode "
                f"({m.source} video {video}, frames {indices.tolist()})"
            )


def format_data_table(rows: Sequence[DataBenchRow]) -> str:
    head = (
        f"{'clip':8s} {'method':16s} {'source':8s} {'clips/s':>8s} {'clips/cpu-s':>11s} "
        f"{'wall ms':>8s} {'cpu ms':>8s} {'decoded':>8s} {'x seq':>6s} {'x seek':>6s}"
    )
    lines = [head]
    for r in rows:
        lines.append(
            f"{r.clip:8s} {r.method:16s} {r.source:8s} {r.clips_per_s:8.1f} "
            f"{r.clips_per_cpu_s:11.1f} {r.wall_ms:8.1f} {r.cpu_ms:8.1f} "
            f"{r.frames_decoded:8.1f} {r.speedup_vs_sequential:6.1f} {r.speedup_vs_seek:6.2f}"
        )
    return "\n".join(lines)


def format_gains(rows: Sequence[DataBenchRow]) -> str:
    """One line per (clip, source): what decoding plans gain over the seeking decoder."""
    by = {(r.clip, r.method, r.source): r for r in rows}
    lines = []
    for r in rows:
        if r.method == "h264_plan":
            seek = by[(r.clip, "h264_seek", r.source)]
            lines.append(
                f"{r.clip} {r.source}: h264_plan reads {r.speedup_vs_seek:.2f}x the clips per "
                f"CPU-second of h264_seek, decoding {r.frames_decoded:.1f} frames per clip "
                f"instead of {seek.frames_decoded:.1f}"
            )
    return "\n".join(lines)


# data wait (Fig. 3b) -------------------------------------------------------------------------


@dataclass(frozen=True)
class WaitRow:
    model: str
    frames: int
    workers: int
    batch: int
    steps: int
    step_s: float  # mean over the timed steps
    wait_s: float  # mean time blocked on the next batch
    wait_fraction: float


def bench_data_wait(
    model_name: str,
    *,
    batch: int,
    frames_list: Sequence[int] = (8, 16, 32),
    workers_list: Sequence[int] = (0, 1, 2),
    steps: int = 3,
    warmup: int = 1,
    size: int = 112,
    source: Literal["videos", "shards"] = "videos",
    videos_dir: Path | None = None,
    work_dir: Path | None = None,
    count: int = 4,
    seconds: float = 10.0,
    num_classes: int = 400,
    threads: int = 1,
    device: str = "cpu",
    out_json: Path | None = None,
    show: bool = True,
) -> list[WaitRow]:
    """Fraction of training-step time spent waiting for data (TSM paper Fig. 3b).

    For each clip length in `frames_list` (TSN sampling for 8 frames or fewer, dense stride 2
    above) and each loader worker count, runs `warmup` + `steps` real SGD steps of `model_name`
    on `batch` clips of `size` x `size` read by the real `DataLoader` (`source`: raw videos or
    prepared shards) on `device`, with `threads` intra-op threads on the CPU (loader workers
    get one each), and reports the share of the timed steps' time blocked on the next batch.
    """
    rows: list[WaitRow] = []
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with ExitStack() as stack:
            work = Path(work_dir or stack.enter_context(tempfile.TemporaryDirectory()))
            if videos_dir is not None:
                paths = find_videos(Path(videos_dir), limit=64)
            else:
                generate = BenchVideoSpec(count=count, seconds=seconds, gops=(250,))
                made = make_bench_videos(work / "videos", generate)
                paths = made["gop250"]
            records = [VideoRecord(p, k % num_classes) for k, p in enumerate(paths)]
            entries = (
                _prepare_shards(paths, work / "shards", quality=90) if source == "shards" else []
            )
            for frames in frames_list:
                spec = ClipSpec(
                    frames=frames,
                    sampling="uniform" if frames <= 8 else "dense",
                    stride=2,
                    crop_size=size,
                    flip=True,
                )
                for workers in workers_list:
                    dataset = (
                        ShardClipDataset(entries, spec, train=True)
                        if source == "shards"
                        else VideoClipDataset(records, spec, train=True)
                    )
                    run = _WaitRun(model_name, batch, steps, warmup, num_classes, device)
                    rows.append(run.measure(dataset, frames=frames, workers=workers))
    finally:
        torch.set_num_threads(previous_threads)
    if out_json is not None:
        Path(out_json).write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    if show:
        print(format_wait_table(rows))
    return rows


@dataclass(frozen=True)
class _WaitRun:
    model_name: str
    batch: int
    steps: int
    warmup: int
    num_classes: int = 400
    device: str = "cpu"

    def measure(self, dataset: VideoClipDataset, *, frames: int, workers: int) -> WaitRow:
        """`warmup` + `steps` SGD steps; the timed steps' mean step time and time blocked."""
        torch.manual_seed(0)
        cfg = ModelConfig(name=self.model_name, num_classes=self.num_classes, frames=frames)
        device = torch.device(self.device)
        model = build_model(cfg).to(device).train()
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
        total = self.warmup + self.steps
        loader = DataLoader(
            dataset,
            batch_size=self.batch,
            sampler=_shuffled_passes(len(dataset), total * self.batch),
            num_workers=workers,
            collate_fn=collate,
            drop_last=True,
            pin_memory=device.type == "cuda",
            prefetch_factor=2 if workers else None,
        )
        step_s: list[float] = []
        wait_s: list[float] = []
        batches = iter(loader)
        for _ in range(total):
            start = time.perf_counter()
            item = next(batches)  # blocked here: loading not hidden by the previous step
            wait_s.append(time.perf_counter() - start)
            clips = normalize(item["inputs"]["rgb"].to(device, non_blocking=True))
            labels = item["label"].to(device, non_blocking=True)
            loss = nn.functional.cross_entropy(model(clips), labels)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if device.type == "cuda":  # the step ends when its kernels do
                torch.cuda.synchronize(device)
            step_s.append(time.perf_counter() - start)
        del batches  # stops the workers
        timed_step, timed_wait = step_s[self.warmup :], wait_s[self.warmup :]
        return WaitRow(
            model=self.model_name,
            frames=frames,
            workers=workers,
            batch=self.batch,
            steps=len(timed_step),
            step_s=float(np.mean(timed_step)),
            wait_s=float(np.mean(timed_wait)),
            wait_fraction=sum(timed_wait) / sum(timed_step),
        )


def _shuffled_passes(size: int, length: int) -> list[int]:
    """`length` indices from shuffled passes over `size` items (a few steps may need more clips
    than a small benchmark set has videos)."""
    g = torch.Generator().manual_seed(0)
    order: list[int] = []
    while len(order) < length:
        order.extend(torch.randperm(size, generator=g).tolist())
    return order[:length]


def format_wait_table(rows: Sequence[WaitRow]) -> str:
    head = f"{'model':22s} {'frames':>6s} {'workers':>7s} {'batch':>5s} {'step s':>7s} "
    lines = [head + f"{'wait s':>7s} {'wait %':>7s}"]
    for r in rows:
        lines.append(
            f"{r.model:22s} {r.frames:6d} {r.workers:7d} {r.batch:5d} {r.step_s:7.2f} "
            f"{r.wait_s:7.2f} {100 * r.wait_fraction:7.1f}"
        )
    return "\n".join(lines)
