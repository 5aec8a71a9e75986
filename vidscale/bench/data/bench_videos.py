"""The videos the data benchmarks read when none are given (`bench data`, `bench data-wait`):
a camera pan over a textured scene with moving objects and sensor noise, encoded with x264 at
each GOP length asked for (`BenchVideoSpec`, named sets in `PRESETS`), and `find_videos` for a
directory of given ones."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import av
import cv2
import numpy as np

from vidscale.bench.options import option
from vidscale.data.layouts import VIDEO_EXTENSIONS


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
    `height`, each scene encoded at x264 `crf` once per GOP length in `gops`. `count` and
    `seconds` are flags of `bench data` (`bench.options`), over a preset's values."""

    count: int = option(4, help="videos to generate", low=1)
    seconds: float = option(10.0, help="length of generated videos in seconds", above=0)
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
