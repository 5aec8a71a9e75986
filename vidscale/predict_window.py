"""`vidscale predict RUN VIDEO --window S --stride S`: a timeline of top-k classes over a long
video, in memory that does not grow with its length.

The video is cut into windows of `window` seconds every `stride` seconds, from 0 until one
reaches the end: `1 + ceil(max(duration - window, 0) / stride)` windows, the last one cut at the
end of the video (a video shorter than a window is one window). Each window is predicted as
`predict` predicts a whole video, with the run's evaluation views sampled from the window's
frames alone (`WindowSource`: the window seen as a video of its own by the evaluator's
`data.clip.sample_views`). Only the sampled frames of one window are decoded at a time, by
keyframe-aware seeks (`data.media.decode.decode_frames`), so memory holds one window's views,
the video's packet index (a few bytes per frame) and the timeline's top-k entries, whatever
the video's length. Times come from the frame index and the stream's frame rate.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vidscale.config import Precision
from vidscale.data.clip import ClipSpec, FrameSource
from vidscale.data.clip import sample_views as clip_views
from vidscale.data.inputs import ModelInput
from vidscale.data.media.decode import DecodeError
from vidscale.data.sources import file_source
from vidscale.errors import InputError
from vidscale.predict import LoadedRun, view_probabilities
from vidscale.scoring.precision import FP32, Arithmetic


@dataclass(frozen=True)
class Window:
    """Seconds [start, end) of the video, and the frames [first, stop) they hold."""

    start: float
    end: float
    first: int
    stop: int


def plan_windows(num_frames: int, fps: float, *, window: float, stride: float) -> list[Window]:
    """The windows of a video of `num_frames` frames at `fps` (module docstring)."""
    if window <= 0 or stride <= 0:
        raise InputError(f"--window and --stride must be > 0, got {window:g} and {stride:g}")
    if fps <= 0 or num_frames < 1:
        raise DecodeError("the video has no frame rate or no frames: it has no timeline")
    duration = num_frames / fps
    count = 1 + math.ceil(max(duration - window, 0.0) / stride - 1e-9)
    out = []
    for k in range(count):
        start = k * stride
        end = min(start + window, duration)
        first = min(round(start * fps), num_frames - 1)
        stop = max(min(round(end * fps), num_frames), first + 1)
        out.append(Window(round(start, 6), round(end, 6), first, stop))
    return out


@dataclass(frozen=True)
class WindowSource:
    """Positions [offset, offset + size) of `inner`, seen as a video of `size` positions."""

    inner: FrameSource
    offset: int
    size: int

    @property
    def length(self) -> int:
        return self.size

    def read(self, indices: np.ndarray) -> np.ndarray:
        return self.inner.read(np.asarray(indices, dtype=np.int64) + self.offset)


def window_source(source: FrameSource, w: Window) -> WindowSource:
    """`w`'s positions of `source` (flow has one position fewer than frames: clamped)."""
    first = min(w.first, source.length - 1)
    return WindowSource(source, first, max(min(w.stop, source.length) - first, 1))


@dataclass(frozen=True)
class Timeline:
    """Per-window top-k (name, probability), best first, and what they were predicted from."""

    video: str
    duration: float
    fps: float
    frames: int
    window: float
    stride: float
    spec: ClipSpec
    multi_label: bool
    windows: list[tuple[Window, list[tuple[str, float]]]]
    precision: Precision = "fp32"  # the arithmetic of every window's probabilities


def predict_timeline(
    video: Path,
    loaded: LoadedRun,
    *,
    window: float,
    stride: float,
    topk: int = 5,
    num_clips: int | None = None,
    num_crops: int | None = None,
    on_window: Callable[[int, int], None] | None = None,
    arithmetic: Arithmetic = FP32,
) -> Timeline:
    """The timeline of `video` under `loaded` (module docstring); `on_window(done, total)` is
    called after each window; every window is scored in `arithmetic` (fp32 unless asked:
    `scoring.precision`). Raises `DecodeError` naming `video` when it cannot be read."""
    data = loaded.cfg.data
    spec = dataclasses.replace(
        data.eval_clip,
        num_clips=num_clips or data.eval_clip.num_clips,
        num_crops=num_crops or data.eval_clip.num_crops,
    )
    try:
        source = file_source(video, spec, data.flow)
        meta = getattr(source, "meta", None)
        if meta is None:
            raise DecodeError("not a video (a still image has no timeline)")
        plan = plan_windows(meta.num_frames, meta.fps, window=window, stride=stride)
        rows = []
        for k, w in enumerate(plan):
            views = clip_views(
                window_source(source, w), spec, train=False, rng=np.random.default_rng(0)
            )
            probs = view_probabilities(
                loaded.model,
                views if views.ndim == 5 else views[None],
                model_input=ModelInput.of(spec, data),
                multi_label=data.eval_aggregate if data.multi_label else None,
                arithmetic=arithmetic,
            )
            order = probs.argsort(descending=True, stable=True)[:topk].tolist()
            rows.append((w, [(loaded.classes[i], float(probs[i])) for i in order]))
            if on_window is not None:
                on_window(k + 1, len(plan))
    except DecodeError as err:
        raise DecodeError(f"{video}: {err}") from err
    duration = meta.num_frames / meta.fps
    return Timeline(
        str(video),
        duration,
        meta.fps,
        meta.num_frames,
        window,
        stride,
        spec,
        data.multi_label,
        rows,
        arithmetic.precision,
    )


def segments(timeline: Timeline) -> list[dict[str, Any]]:
    """Runs of consecutive windows with the same top class: start, end, label, windows and
    the mean of its probability over them."""
    out: list[dict[str, Any]] = []
    for w, top in timeline.windows:
        label, p = top[0]
        if out and out[-1]["label"] == label:
            run = out[-1]
            run["end"] = w.end
            run["mean_probability"] += (p - run["mean_probability"]) / (run["windows"] + 1)
            run["windows"] += 1
        else:
            out.append(
                {
                    "start": w.start,
                    "end": w.end,
                    "label": label,
                    "windows": 1,
                    "mean_probability": p,
                }
            )
    return out


def timeline_as_dict(timeline: Timeline, *, run: Path, checkpoint: Path) -> dict[str, Any]:
    """JSON-ready: the video, run, timing, views, the precision of the probabilities, every
    window's top-k and the segments."""
    return {
        "video": timeline.video,
        "run": str(run),
        "checkpoint": str(checkpoint),
        "duration": timeline.duration,
        "fps": timeline.fps,
        "frames": timeline.frames,
        "window": timeline.window,
        "stride": timeline.stride,
        "views": {"clips": timeline.spec.num_clips, "crops": timeline.spec.num_crops},
        "multi_label": timeline.multi_label,
        "precision": timeline.precision,
        "windows": [
            {
                "start": w.start,
                "end": w.end,
                "predictions": [{"label": n, "probability": p} for n, p in top],
            }
            for w, top in timeline.windows
        ],
        "segments": segments(timeline),
    }


def plot_timeline(timeline: Timeline, out: Path, *, classes: int = 6) -> Path:
    """A PNG of the probabilities over time of the `classes` classes that are most often the
    top class; a class is drawn where it is among a window's top-k (a gap elsewhere)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts: dict[str, int] = {}
    for _, top in timeline.windows:
        counts[top[0][0]] = counts.get(top[0][0], 0) + 1
    shown = sorted(counts, key=lambda n: (-counts[n], n))[:classes]
    centres = [(w.start + w.end) / 2 for w, _ in timeline.windows]
    fig, ax = plt.subplots(figsize=(8, 3.5), dpi=110)
    for name in shown:
        ys = [dict(top).get(name, math.nan) for _, top in timeline.windows]
        ax.plot(centres, ys, marker="o", markersize=2, label=name)
    ax.set_xlim(0, timeline.duration)
    ax.set_ylim(0, 1)
    ax.set_xlabel("time (s), window centres")
    ax.set_ylabel("probability")
    ax.set_title(
        f"{Path(timeline.video).name}: {timeline.window:g} s windows every {timeline.stride:g} s"
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="upper right")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out
