"""Data-loading benchmarks: what a clip costs from each storage format, and how much of a
training step waits for data (TSM paper Fig. 3b).

`bench_data` reads the same clips (same videos, same frame indices) several ways, on one core:

- `h264_sequential`: decode every frame from the start of the video up to the last frame the
  clip uses, no seeking (what a naive loader does; for a TSN clip that is the whole video);
- `h264_seek`: keyframe-aware seeking from a cached packet index, decoding every frame from a
  GOP's keyframe to the frame wanted (`decode_baseline`, the decoder before decoding segments);
- `h264_segments`: `decode.decode_frames`, decoding by segments: GOPs entered once, pictures that
  are neither wanted nor references skipped, only wanted frames converted (`decode_segments`);
- `h264_segments_tN` (with `threads` = N > 1): the same on N decoder threads (wall time; CPU
  adds up);
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

How much of a training step waits for data is `data_wait`'s.

Benchmark videos are generated when none are given (`bench_videos`): a camera pan over a
textured scene with moving objects and sensor noise, 340x256 (short side 256, as `prepare`
stores), 30 fps; the `k400` preset makes Kinetics-400-like files instead: 456x256, x264 CRF 21,
default GOP.
"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import av
import numpy as np
import torch

from vidscale.bench.data.bench_videos import BenchVideoSpec, find_videos, make_bench_videos
from vidscale.bench.options import option
from vidscale.bench.results import plain, write_result
from vidscale.data.annotations import VideoRecord
from vidscale.data.clip import ClipSpec, frame_indices
from vidscale.data.layouts import LayoutSplits
from vidscale.data.media.decode import (
    DecodeError,
    DecodeStats,
    RGBConverter,
    VideoMeta,
    decode_frames,
    open_video,
    probe,
)
from vidscale.data.media.decode_baseline import decode_frames_seek
from vidscale.data.prepared.prepare import open_prepared, prepare_dataset
from vidscale.data.prepared.shards import ShardEntry, ShardReader


@dataclass(frozen=True)
class ClipKind:
    name: str
    spec: ClipSpec


DEFAULT_CLIPS = (
    ClipKind("tsn8", ClipSpec(frames=8, sampling="uniform")),
    ClipKind("dense16", ClipSpec(frames=16, sampling="dense", stride=2)),
    ClipKind("dense32", ClipSpec(frames=32, sampling="dense", stride=2)),
)


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

    def segments(threads: int) -> Read:
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
        Method("h264_segments", source, segments(1)),
    ]
    if threads > 1:
        methods.append(Method(f"h264_segments_t{threads}", source, segments(threads)))
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


def prepare_shards(paths: list[Path], out: Path, *, quality: int) -> list[ShardEntry]:
    splits = LayoutSplits(["bench"], [VideoRecord(p, 0) for p in paths], [])
    manifest = prepare_dataset(
        splits, out, short_side=256, quality=quality, workers=1, progress=False
    )
    if manifest.skipped:
        listing = "; ".join(f"{p}: {reason}" for p, reason in manifest.skipped)
        raise DecodeError(f"cannot benchmark unreadable videos (remove them): {listing}")
    by_path = {e.path: e for e in open_prepared(out).train}
    return [by_path[str(Path(p).absolute())] for p in paths]


@dataclass(frozen=True)
class DataConfig:
    """What `bench data` reads (`run`): the videos under `videos` (at most `max_videos`), or
    with None those of `generate` (its scenes picked by `seed`), made under `work_dir` (None:
    a temporary directory); `rounds` timed rounds of every clip kind of `clips`; `threads` > 1
    adds `h264_segments` on that many decoder threads; shards store JPEG `quality`. Each field
    but `clips` and `generate` (`--preset`, `--count`, `--seconds`) is a flag of `bench data`
    (`bench.options`)."""

    videos: Path | None = option(None, help="videos to read (default: generated ones)")
    work_dir: Path | None = option(
        None, help="where generated videos go (default: a temporary one)"
    )
    clips: tuple[ClipKind, ...] = DEFAULT_CLIPS
    rounds: int = option(5, help="timed rounds", low=1)
    generate: BenchVideoSpec = field(default_factory=BenchVideoSpec)
    max_videos: int = option(8, help="videos read at most", low=1)
    quality: int = option(90, help="JPEG quality of the shards", low=1)
    seed: int = option(0, help="picks the generated scenes", low=0)
    threads: int = option(1, help="also time h264_segments on N decoder threads", low=1)


@dataclass(frozen=True)
class DataResult:
    """What `bench data` measured: the videos read and the host (`settings`, free-form) and one
    row per (clip kind, method, source). `to_dict()` is what `--out-json` writes."""

    settings: dict[str, Any]
    rows: tuple[DataBenchRow, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"settings": plain(self.settings), "rows": [asdict(r) for r in self.rows]}


def run(config: DataConfig, *, out_json: Path, progress: bool = False) -> DataResult:
    """Clips/s, CPU ms and frames decoded per clip of each reading method (module docstring),
    side by side, written to `out_json` atomically.

    Every round reads, for every video and clip kind, one random training clip with every
    method in rotating order; a lossless method whose frames differ from the sequential
    decode's raises `RuntimeError`. Shards are prepared from the first source (short side
    256). `progress` names each clip kind on stderr as it starts.
    """
    cfg = config
    with ExitStack() as stack:
        work = Path(cfg.work_dir or stack.enter_context(tempfile.TemporaryDirectory()))
        sources = (
            {"given": find_videos(Path(cfg.videos), limit=cfg.max_videos)}
            if cfg.videos is not None
            else make_bench_videos(work / "videos", cfg.generate, seed=cfg.seed)
        )
        first = next(iter(sources))
        # Probed once per video, as each loader worker caches it.
        metas = {s: [probe(p) for p in paths] for s, paths in sources.items()}
        entries = prepare_shards(sources[first], work / "shards", quality=cfg.quality)
        reader = ShardReader()
        stack.callback(reader.close)
        rows: list[DataBenchRow] = []
        for kind in cfg.clips:  # fresh methods per clip kind: each keeps its own samples
            if progress:
                print(f"bench data: {kind.name} clips, {cfg.rounds} rounds", file=sys.stderr)
            methods = _methods(sources, metas, entries, reader, threads=cfg.threads)
            _run_rounds(methods, kind.spec, metas[first], rounds=cfg.rounds, seed=cfg.seed)
            rows.extend(_rows(methods, kind.name, kind.spec.frames, baseline=first))
        videos = _video_settings(sources, metas, first)  # before cleanup: reads file sizes
    settings = videos | {
        "generated": asdict(cfg.generate) if cfg.videos is None else None,
        "rounds": cfg.rounds,
        "decoder_threads": cfg.threads,
        "clips": {k.name: asdict(k.spec) for k in cfg.clips},
        "jpeg_quality": cfg.quality,
    }
    result = DataResult(settings | _host(), tuple(rows))
    write_result(out_json, result.to_dict())
    return result


def bench_data(
    videos_dir: Path | None = None,
    *,
    out_json: Path,
    show: bool = True,
    **settings: Any,
) -> DataResult:
    """`run` under its earlier name and keywords (the record in docs/benchmarks.md was made
    with it): `videos_dir` is `DataConfig.videos`, `settings` its other fields; `show` prints
    the tables."""
    result = run(DataConfig(videos=videos_dir, **settings), out_json=out_json)
    if show:
        print(format_data_table(result.rows))
        print(format_gains(result.rows))
    return result


def _methods(
    sources: dict[str, list[Path]],
    metas: dict[str, list[VideoMeta]],
    entries: list[ShardEntry],
    reader: ShardReader,
    *,
    threads: int,
) -> list[Method]:
    """Every reading method: the H.264 ones on each source, then the shards."""
    methods = [m for s, p in sources.items() for m in h264_methods(s, p, metas[s], threads=threads)]
    return [*methods, shard_method(entries, reader)]


def _video_settings(
    sources: dict[str, list[Path]], metas: dict[str, list[VideoMeta]], first: str
) -> dict[str, Any]:
    """The videos read: paths, frames, bit rates and the first source's frame size."""
    return {
        "videos": {s: [str(p) for p in paths] for s, paths in sources.items()},
        "frames_per_video": [m.num_frames for m in metas[first]],
        "kbps": {s: _kbps(paths, metas[s]) for s, paths in sources.items()},
        "size": [metas[first][0].width, metas[first][0].height],
    }


def _host() -> dict[str, Any]:
    """The machine the clips were read on."""
    return {
        "cpu_count": os.cpu_count(),
        "machine": platform.platform(),
        "torch_threads": torch.get_num_threads(),
    }


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
    """One line per (clip, source): what segment decoding gains over the seeking decoder."""
    by = {(r.clip, r.method, r.source): r for r in rows}
    lines = []
    for r in rows:
        if r.method == "h264_segments":
            seek = by[(r.clip, "h264_seek", r.source)]
            lines.append(
                f"{r.clip} {r.source}: h264_segments reads {r.speedup_vs_seek:.2f}x the clips per "
                f"CPU-second of h264_seek, decoding {r.frames_decoded:.1f} frames per clip "
                f"instead of {seek.frames_decoded:.1f}"
            )
    return "\n".join(lines)
