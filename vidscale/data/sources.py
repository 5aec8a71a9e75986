"""`FrameSource`s for every storage: raw video files, prepared shards, bytes held in memory.

Each gives `data.clip.sample_views` the pixels at the positions it asks for, so the storage
decides only where pixels come from:

- `VideoFrames`: RGB frames decoded from a video file (keyframe-aware seeks).
- `VideoFlows`: optical flow computed from a video file on the fly, exactly as
  `vidscale prepare --flow` computes it (short side resized with the preparation's
  filter, grayscale, `FlowEngine`, quantised), so a model trained on prepared flow sees the
  same input, up to JPEG loss, when `predict` reads the raw video.
- `ShardFrames` / `ShardFlows`: JPEG data from prepared shards by `pread`; a flow entry stores
  flow k as frames 2k (x) and 2k + 1 (y), grayscale.
- `MemoryFrames`: JPEG data already read (streamed shards keep only what a clip uses).
- `ImageFile`: a still image (JPEG, PNG, ...) as a one-frame video, so image datasets train
  through the same loop (an image is a one-frame clip).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vidscale.data.clip import ClipSpec, FrameSource, Modality
from vidscale.data.layouts import IMAGE_EXTENSIONS
from vidscale.data.media.decode import DecodeError, VideoMeta, decode_frames, probe
from vidscale.data.media.flow import (
    FLOW_BOUND,
    FlowMethod,
    decode_flow_jpeg,
    quantize_flow,
    to_gray,
)
from vidscale.data.prepared.encode import decode_image, flow_engine, resize_short_side
from vidscale.data.prepared.shards import ShardEntry, ShardReader, decode_jpegs


@dataclass
class FlowSettings:
    """How optical flow is computed from raw frames (`vidscale prepare --flow` records the
    same in its `prepare_options.json`; training from prepared flow copies them into the run's
    config, so `predict` on a raw video computes the flow the model was trained on)."""

    method: FlowMethod = "dis"
    short_side: int = 256  # frames are shrunk to this short side first (never enlarged; 0: kept)
    bound: float = FLOW_BOUND


def flow_indices(positions: np.ndarray) -> np.ndarray:
    """The shard frames holding flows `positions`: 2k (x) and 2k + 1 (y) for each."""
    return np.stack([2 * positions, 2 * positions + 1], axis=1).reshape(-1)


@dataclass
class VideoFrames:
    """RGB frames of a video file; `meta` from `decode.probe`."""

    path: Path
    meta: VideoMeta

    @property
    def length(self) -> int:
        return self.meta.num_frames

    def read(self, indices: np.ndarray) -> np.ndarray:
        return decode_frames(self.path, indices, meta=self.meta)


@dataclass
class VideoFlows:
    """Optical flow of a video file computed on the fly: flow k goes from frame k to k + 1."""

    path: Path
    meta: VideoMeta
    settings: FlowSettings

    @property
    def length(self) -> int:
        return max(self.meta.num_frames - 1, 0)

    def read(self, indices: np.ndarray) -> np.ndarray:
        if self.length < 1:
            raise ValueError("a video of one frame has no optical flow")
        wanted = sorted({int(i) for i in indices} | {int(i) + 1 for i in indices})
        frames = decode_frames(self.path, wanted, meta=self.meta)
        gray = {
            k: to_gray(resize_short_side(f, self.settings.short_side))
            for k, f in zip(wanted, frames, strict=True)
        }
        engine = flow_engine(self.settings.method)
        flows = {
            i: quantize_flow(engine(gray[i], gray[i + 1]), bound=self.settings.bound)
            for i in {int(i) for i in indices}
        }
        return np.stack([flows[int(i)] for i in indices])


@dataclass
class ShardFrames:
    """RGB frames of one prepared video, by `pread` of their JPEG data."""

    reader: ShardReader
    entry: ShardEntry

    @property
    def length(self) -> int:
        return self.entry.num_frames

    def read(self, indices: np.ndarray) -> np.ndarray:
        return self.reader.read_frames(self.entry, indices)


@dataclass
class ShardFlows:
    """Optical flow of one prepared video (a `prepare --flow` entry: 2 frames per flow)."""

    reader: ShardReader
    entry: ShardEntry

    @property
    def length(self) -> int:
        return self.entry.num_frames // 2

    def read(self, indices: np.ndarray) -> np.ndarray:
        data = self.reader.read_bytes(self.entry, flow_indices(np.asarray(indices)))
        return decode_flows(data, indices)


def is_image(path: str | Path) -> bool:
    """Whether `path` names a still image: a suffix the image layouts list (any case)."""
    return Path(path).suffix.lower() in IMAGE_EXTENSIONS


@dataclass
class ImageFile:
    """A still image as a video of one frame (every position reads it)."""

    path: Path
    length: int = 1

    def read(self, indices: np.ndarray) -> np.ndarray:
        try:
            data = Path(self.path).read_bytes()
        except OSError as err:
            raise DecodeError(f"cannot read the image: {err}") from err
        # The decoder `prepare` uses for images: raw and prepared images train alike.
        frame = decode_image(data)
        return np.stack([frame for _ in indices])


def file_source(
    path: Path,
    spec: ClipSpec,
    flow: FlowSettings,
    *,
    probe_video: Callable[[Path], VideoMeta] = probe,
) -> FrameSource:
    """The source of a file: a still image (one frame), or a video's frames or its optical flow
    computed on the fly with `flow`, per `spec.modality`; `probe_video` reads a video's index
    (a dataset passes its cached one)."""
    if is_image(path):
        if spec.modality == "flow":
            raise DecodeError("a still image has no optical flow")
        return ImageFile(path)
    meta = probe_video(path)
    return VideoFlows(path, meta, flow) if spec.modality == "flow" else VideoFrames(path, meta)


@dataclass
class MemoryFrames:
    """Positions of one video whose JPEG data is in memory (`data`: shard frame -> bytes);
    reading a position whose data was not kept is a `KeyError`."""

    data: dict[int, bytes]
    length: int
    modality: Modality

    def read(self, indices: np.ndarray) -> np.ndarray:
        if self.modality == "flow":
            return decode_flows(self.data, indices)
        return decode_jpegs(self.data, indices)


def decode_flows(data: dict[int, bytes], indices: np.ndarray) -> np.ndarray:
    """(len(indices), H, W, 2) uint8 flows from the x/y JPEGs at shard frames 2k, 2k + 1."""
    decoded = {
        k: np.stack([decode_flow_jpeg(data[2 * k]), decode_flow_jpeg(data[2 * k + 1])], axis=-1)
        for k in {int(i) for i in indices}
    }
    return np.stack([decoded[int(i)] for i in indices])


def shard_positions(modality: Modality, positions: np.ndarray) -> np.ndarray:
    """The shard frames a clip's `positions` are stored in."""
    return flow_indices(positions) if modality == "flow" else positions


def shard_length(modality: Modality, entry_frames: int) -> int:
    """Positions in a prepared entry of `entry_frames` stored frames."""
    return entry_frames // 2 if modality == "flow" else entry_frames
