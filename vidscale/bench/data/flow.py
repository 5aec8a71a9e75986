"""Optical flow extraction speed per CPU core, DIS vs Farnebäck vs TV-L1 (`vidscale bench flow`).

A two-stream model's temporal stream needs one flow field per frame pair of every video (TSN,
Wang et al. 2016, §3.2), so extraction cost decides whether flow is computed on the CPUs that
also decode. The field's anchor is GPU TV-L1 at about 30 flows/s at 320x240 on one GPU; this
bench measures what one CPU core does with each of `vidscale.data.media.flow`'s methods.

All methods run in one process on one OpenCV thread (``cv2.setNumThreads(1)``), on the same
pairs of consecutive frames of a real H.264 video resized to the bench size, interleaved pair by
pair in rotating order so they share the machine's noise. The rate is flows per CPU-second (the
per-core rate, which other processes on a shared machine do not distort); wall-clock rates go to
the JSON beside it. Accuracy is the mean end-point error on a synthetic translation whose
displacement is known exactly (`translated_pair`).
"""

from __future__ import annotations

import math
import os
import platform
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch

from vidscale.bench.options import option
from vidscale.bench.results import plain, write_result
from vidscale.data.media.decode import decode_frames, probe
from vidscale.data.media.flow import FLOW_METHODS, FlowEngine, FlowUnavailable, to_gray
from vidscale.errors import InputError
from vidscale.fastpath.hardware import device_name, load_average

BASELINE = "dis"


@dataclass(frozen=True)
class FlowConfig:
    """`pairs` consecutive frame pairs at `width` x `height` from `video` (None: a generated demo
    video); accuracy on a translation by `shift` (dx, dy) px of a texture with pixel `noise`.
    `pairs`, `methods`, `video`, `noise` and `seed` are flags of `bench flow` (`bench.options`;
    `width` x `height` is `--size WxH`)."""

    pairs: int = option(30, help="consecutive frame pairs", low=1)
    width: int = 340
    height: int = 256
    methods: tuple[str, ...] = option(FLOW_METHODS, help="flow methods", choices=FLOW_METHODS)
    video: Path | None = option(None, help="the video read (default: a generated demo video)")
    shift: tuple[float, float] = (3.3, -2.2)
    noise: float = option(2.0, help="pixel noise of the accuracy texture", low=0)
    seed: int = option(0, help="seeds the accuracy texture", low=0)


@dataclass(frozen=True)
class FlowBenchRow:
    """One method; the measured fields are None when this OpenCV build lacks it (`note` says
    why). `ratio_to_dis` is per-core speed over DIS's in the same run (None without DIS)."""

    method: str
    available: bool
    flows_per_cpu_s: float | None = None
    ms_per_flow: float | None = None  # CPU ms
    flows_per_wall_s: float | None = None
    ratio_to_dis: float | None = None
    epe_px: float | None = None
    note: str = ""


# inputs --------------------------------------------------------------------------------------


def translated_pair(
    width: int, height: int, *, shift: tuple[float, float], noise: float = 0.0, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Two gray uint8 (H, W) frames, the second the first moved by `shift` = (dx, dy) px, so the
    true flow is `shift` everywhere: ``next[y + dy, x + dx] == prev[y, x]``.

    The texture is a sum of 24 plane waves (wavelengths 6-40 px, random directions) evaluated at
    the shifted coordinates, so a sub-pixel shift is exact rather than interpolated; `noise` adds
    independent Gaussian pixel noise (levels) to each frame, as a camera would.
    """
    rng = np.random.default_rng(seed)
    waves = 24
    angle = rng.uniform(0, math.pi, waves)
    wavelength = rng.uniform(6, 40, waves)
    phase = rng.uniform(0, 2 * math.pi, waves)
    fx, fy = np.cos(angle) / wavelength, np.sin(angle) / wavelength
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float64)

    def texture(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        arg = 2 * math.pi * (x[..., None] * fx + y[..., None] * fy) + phase
        level = 128 + 40 * np.cos(arg).sum(-1) / math.sqrt(waves / 2)  # about ±3 sigma in range
        level += rng.normal(0, noise, level.shape) if noise > 0 else 0
        return np.clip(np.rint(level), 0, 255).astype(np.uint8)

    return texture(xs, ys), texture(xs - shift[0], ys - shift[1])


def end_point_error(flow: np.ndarray, shift: tuple[float, float], *, margin: int) -> float:
    """Mean Euclidean distance (px) of `flow` (H, W, 2) from the constant `shift`, over pixels at
    least `margin` px from the border (where content enters the frame, no flow is defined)."""
    inner = flow[margin : flow.shape[0] - margin, margin : flow.shape[1] - margin]
    if inner.size == 0:
        raise ValueError(f"margin {margin} leaves no pixels of a {flow.shape[:2]} flow")
    return float(np.hypot(inner[..., 0] - shift[0], inner[..., 1] - shift[1]).mean())


def demo_video(path: Path, *, frames: int, size: int, seed: int = 0) -> Path:
    """An H.264 video of the built-in demo (`vidscale.data.synthetic.videos`): a textured object moving
    and turning over a textured background with distractors, `size` px square, 30 fps."""
    from vidscale.data.synthetic.videos import render_video
    from vidscale.data.synthetic.writer import encode_h264

    rng = np.random.default_rng(seed)
    # Rendered over at least two seconds: the demo's motion spans its whole clip, so a short clip
    # would move far more per frame than a 30 fps camera does.
    rgb = render_video(0, rng=rng, size=size, num_frames=max(frames, 60), noise=2.0, distractors=2)
    encode_h264(rgb[:frames], path, fps=30, gop=30)
    return path


def video_gray_frames(path: Path, *, count: int, width: int, height: int) -> list[np.ndarray]:
    """The first `count` frames of `path`, resized to `width` x `height` and made gray."""
    meta = probe(path)
    if meta.num_frames < count:
        raise InputError(f"{path} has {meta.num_frames} frames; {count - 1} pairs need {count}")
    rgb = decode_frames(path, np.arange(count), meta=meta)
    shrink = width * height < meta.width * meta.height
    interp = cv2.INTER_AREA if shrink else cv2.INTER_LINEAR
    return [to_gray(cv2.resize(f, (width, height), interpolation=interp)) for f in rgb]


# measurement ---------------------------------------------------------------------------------


@contextmanager
def one_opencv_thread() -> Iterator[None]:
    """OpenCV on one thread (its parallel loops run inline) for the block, then as before."""
    before = cv2.getNumThreads()
    cv2.setNumThreads(1)
    try:
        yield
    finally:
        cv2.setNumThreads(before)


def _engines(methods: tuple[str, ...]) -> tuple[dict[str, FlowEngine], dict[str, str]]:
    """The engines that can be built, and the reason for each that cannot."""
    engines: dict[str, FlowEngine] = {}
    missing: dict[str, str] = {}
    for m in methods:
        try:
            engines[m] = FlowEngine(m)  # type: ignore[arg-type]  # names checked by `run`
        except FlowUnavailable as err:
            missing[m] = str(err)
    return engines, missing


def _time_interleaved(
    engines: dict[str, FlowEngine], grays: list[np.ndarray]
) -> dict[str, tuple[float, float]]:
    """(CPU s, wall s) each engine spends on all pairs, the first pair's warm-up call excluded
    (it allocates the engine's buffers). Pair k runs the engines starting from the k-th."""
    names = list(engines)
    for name in names:
        engines[name](grays[0], grays[1])
    spent = {name: (0.0, 0.0) for name in names}
    for k in range(len(grays) - 1):
        for name in names[k % len(names) :] + names[: k % len(names)]:
            cpu0, wall0 = time.process_time(), time.perf_counter()
            engines[name](grays[k], grays[k + 1])
            cpu, wall = spent[name]
            spent[name] = (cpu + time.process_time() - cpu0, wall + time.perf_counter() - wall0)
    return spent


def _rows(
    cfg: FlowConfig,
    spent: dict[str, tuple[float, float]],
    epe: dict[str, float],
    missing: dict[str, str],
) -> list[FlowBenchRow]:
    rate = {m: cfg.pairs / max(cpu, 1e-9) for m, (cpu, _) in spent.items()}
    rows = []
    for m in cfg.methods:
        if m in missing:
            rows.append(FlowBenchRow(m, available=False, note=missing[m]))
            continue
        cpu, wall = spent[m]
        rows.append(
            FlowBenchRow(
                m,
                available=True,
                flows_per_cpu_s=rate[m],
                ms_per_flow=1e3 * cpu / cfg.pairs,
                flows_per_wall_s=cfg.pairs / max(wall, 1e-9),
                ratio_to_dis=rate[m] / rate[BASELINE] if BASELINE in rate else None,
                epe_px=epe[m],
            )
        )
    return rows


@dataclass(frozen=True)
class FlowResult:
    """What `bench flow` measured: the settings and the host (`settings`, free-form), and one
    row per method in the config's order. `to_dict()` is what `--out-json` writes."""

    settings: dict[str, Any]
    rows: tuple[FlowBenchRow, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"settings": plain(self.settings), "rows": [asdict(r) for r in self.rows]}


def run(config: FlowConfig, *, out_json: Path, progress: bool = False) -> FlowResult:
    """Per-core speed and accuracy of each of `config.methods` (module docstring), written to
    `out_json` atomically: the settings and one row per method, in `config.methods`'s order; a
    method this OpenCV build lacks is a row marked unavailable. Unknown methods raise
    `ValueError` before anything runs, a video too short for the pairs `InputError`.
    `progress` names the methods timed on stderr."""
    cfg = config
    unknown = [m for m in cfg.methods if m not in FLOW_METHODS]
    if unknown or not cfg.methods:
        raise ValueError(f"flow methods must be some of {', '.join(FLOW_METHODS)}, got {unknown}")
    with tempfile.TemporaryDirectory() as tmp:
        video = cfg.video or demo_video(
            Path(tmp) / "demo.mp4", frames=cfg.pairs + 1, size=cfg.height, seed=cfg.seed
        )
        grays = video_gray_frames(video, count=cfg.pairs + 1, width=cfg.width, height=cfg.height)
    prev, nxt = translated_pair(
        cfg.width, cfg.height, shift=cfg.shift, noise=cfg.noise, seed=cfg.seed
    )
    margin = math.ceil(max(abs(s) for s in cfg.shift)) + 8  # + DIS's 8 px patches
    with one_opencv_thread():
        engines, missing = _engines(cfg.methods)
        if progress:
            print(f"bench flow: timing {', '.join(engines)} on {cfg.pairs} pairs", file=sys.stderr)
        epe = {
            m: end_point_error(e(prev, nxt), cfg.shift, margin=margin) for m, e in engines.items()
        }
        spent = _time_interleaved(engines, grays)
    result = FlowResult(_settings(cfg), tuple(_rows(cfg, spent, epe, missing)))
    write_result(out_json, result.to_dict())
    return result


def _settings(cfg: FlowConfig) -> dict[str, Any]:
    return {
        "video": str(cfg.video)
        if cfg.video
        else "generated demo video (vidscale.data.synthetic.videos)",
        "size": [cfg.width, cfg.height],
        "pairs": cfg.pairs,
        "opencv_threads": 1,
        "processes": 1,
        "epe_shift_px": list(cfg.shift),
        "epe_noise": cfg.noise,
        "opencv": cv2.__version__,
        "cpu": device_name(torch.device("cpu")),
        "cpu_count": os.cpu_count(),
        "load_average_1min": load_average(),
        "machine": platform.platform(),
    }


def format_flow_table(result: FlowResult) -> str:
    """The rows of a `bench flow` result as a text table, under a line naming the settings."""
    s = result.settings
    lines = [
        f"{s['size'][0]}x{s['size'][1]}, {s['pairs']} frame pairs of {s['video']}; "
        f"1 process, 1 OpenCV thread; {s['cpu']}",
        f"{'method':10s} {'flows/s/core':>12s} {'ms/flow':>8s} {'x DIS':>6s} {'EPE px':>7s}",
    ]
    for r in result.rows:
        if not r.available:
            lines.append(f"{r.method:10s} unavailable: {r.note}")
            continue
        ratio = "-" if r.ratio_to_dis is None else f"{r.ratio_to_dis:.3f}"
        lines.append(
            f"{r.method:10s} {r.flows_per_cpu_s or 0.0:12.1f} {r.ms_per_flow or 0.0:8.1f} "
            f"{ratio:>6s} {r.epe_px or 0.0:7.3f}"
        )
    return "\n".join(lines)
