"""Decode a video once into what `prepare` stores: resampled, resized JPEG frames and their flow.

`shown_frames` walks one sequential decode (no seeks), resampling to a fixed frame rate by
repeating or dropping source frames and shrinking the short side; `encode_video` JPEG-encodes
those frames and, with a `FlowEngine`, the optical flow between consecutive prepared frames as
the field stores it (x, y grayscale JPEGs, `data.media.flow`). `resize_short_side` is also what
`data.sources.VideoFlows` applies before computing flow from a raw video, so flow computed on
the fly equals prepared flow up to JPEG loss.

`encode_image` is the one-frame counterpart for image files (`layouts.IMAGE_LAYOUTS`): decoded,
shrunk like a video's frames, and re-encoded only when the file cannot serve as the frame as is.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import cv2
import numpy as np

from vidscale.data.media.decode import DecodeError, VideoMeta, decode_all, probe
from vidscale.data.media.flow import FlowEngine, FlowMethod, encode_flow_jpegs, quantized_flows
from vidscale.data.prepared.shards import decode_jpeg, encode_jpeg

# One engine per method and process: OpenCV's flow objects keep work buffers between calls.
_ENGINES: dict[str, FlowEngine] = {}


def flow_engine(method: FlowMethod) -> FlowEngine:
    """This process's engine for `method`."""
    engine = _ENGINES.get(method)
    if engine is None:
        engine = _ENGINES[method] = FlowEngine(method)
    return engine


@dataclass(frozen=True)
class EncodedVideo:
    frames: list[bytes]  # RGB JPEG data in frame order (empty when not asked for)
    fps: float
    width: int
    height: int
    flow: list[bytes] | None = None  # x0, y0, x1, y1, ... grayscale JPEGs, when asked for


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


def shown_frames(
    path: Path, meta: VideoMeta, *, short_side: int, fps: float | None
) -> Iterator[tuple[np.ndarray, int]]:
    """Each source frame the resampled video shows, resized, with how many consecutive prepared
    frames show it (>= 1), in order; one sequential decode. Ends with `DecodeError` when the
    file yields no frame or fewer than `meta` (its packet index) promises."""
    decoded = shown = 0
    for frame, repeat in zip(decode_all(path), repeat_counts(meta.fps, fps), strict=False):
        decoded += 1
        if repeat:
            shown += repeat
            yield resize_short_side(frame, short_side), repeat
    if not shown:
        raise DecodeError("no frames decoded")
    if decoded != meta.num_frames:
        # A truncated file can keep its index while its last packets are gone; the threaded
        # decoder then stops early without an error. Training would sample frames past the end.
        raise DecodeError(
            f"decoded {decoded} of the {meta.num_frames} frames in its index (truncated?)"
        )


def encode_video(
    path: Path,
    *,
    short_side: int,
    fps: float | None,
    quality: int,
    rgb: bool = True,
    flow: FlowEngine | None = None,
) -> EncodedVideo:
    """Decode `path` once; return its (resampled, resized) frames as JPEG bytes (unless `rgb`
    is False) and, with a `flow` engine, the flow between each pair of consecutive prepared
    frames as x, y grayscale JPEGs (an empty list for a video of one frame)."""
    meta = probe(path)  # frame rate, and the frame count its packet index promises
    frames: list[bytes] = []
    shape: list[int] = [0, 0]

    def prepared() -> Iterator[np.ndarray]:  # encodes the RGB frames as the flow walks them
        for small, repeat in shown_frames(path, meta, short_side=short_side, fps=fps):
            shape[:] = small.shape[:2]
            if rgb:
                frames.extend([encode_jpeg(small, quality=quality)] * repeat)
            for _ in range(repeat):
                yield small

    stream = prepared()
    flows: list[bytes] | None = None
    if flow is not None:
        flows = [
            jpeg
            for q in quantized_flows(stream, flow)
            for jpeg in encode_flow_jpegs(q, quality=quality)
        ]
    deque(stream, maxlen=0)  # the rest (all of it without flow): the end checks run there
    return EncodedVideo(frames, float(fps or meta.fps), width=shape[1], height=shape[0], flow=flows)


# Images --------------------------------------------------------------------------------------

IMAGE_FPS = 1.0  # the frame rate recorded for an image's one-frame entry
# Frame header markers (SOFn; C4, C8 and CC are other segments); C0 baseline and C1 extended
# sequential Huffman JPEGs decode at full speed, progressive (C2) and arithmetic ones do not.
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_SEQUENTIAL = (0xC0, 0xC1)
# libjpeg's warning for stray bytes where a marker belongs (often before the end marker, as some
# cameras and editors write them): it skips them and the image is whole, but the training
# decoder is strict and would reject those bytes, so such an image is re-encoded.
_TRAILING_BYTES = "extraneous bytes before marker"


@dataclass(frozen=True)
class JpegFrame:
    """A JPEG's frame header: its SOFn marker, sample precision (bits) and component count."""

    marker: int
    precision: int
    components: int


def jpeg_frame(data: bytes) -> JpegFrame | None:
    """The frame header of JPEG `data`; None when it is not a JPEG or ends before one."""
    if data[:2] != b"\xff\xd8":
        return None
    pos = 2
    while pos + 4 <= len(data) and data[pos] == 0xFF:
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
        elif marker == 0x01 or 0xD0 <= marker <= 0xD7:  # markers without a length
            pos += 2
        elif marker in _SOF_MARKERS:
            return (
                JpegFrame(marker, data[pos + 4], data[pos + 9]) if pos + 10 <= len(data) else None
            )
        elif marker == 0xDA:  # a scan before any frame header
            return None
        else:
            pos += 2 + int.from_bytes(data[pos + 2 : pos + 4], "big")
    return None


def _decode(data: bytes) -> tuple[np.ndarray, bool]:
    """RGB uint8 (H, W, 3) and whether `data` decodes as is with the training decoder.

    JPEGs (grayscale, YCbCr, RGB, CMYK/YCCK) go through `shards.decode_jpeg`, which rejects
    truncated or corrupt data; other formats through OpenCV, which returns nothing for them.
    EXIF orientation is ignored, as it is when the stored JPEG is decoded for training.
    """
    if not data:
        raise DecodeError("empty file")
    if data[:2] == b"\xff\xd8":  # JPEG: never OpenCV, which hides truncation behind grey
        try:
            return decode_jpeg(data), True
        except DecodeError as err:
            if _TRAILING_BYTES not in str(err):
                raise
        import simplejpeg  # a dependency; `decode_jpeg` falls back only when it is missing

        return np.asarray(simplejpeg.decode_jpeg(data, colorspace="RGB", strict=False)), False
    try:
        flags = cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION
        bgr = cv2.imdecode(np.frombuffer(data, np.uint8), flags)
    except cv2.error as err:
        raise DecodeError(f"unreadable image: {err}") from err
    if bgr is None:
        raise DecodeError("not an image OpenCV can decode (unknown format or truncated)")
    return np.ascontiguousarray(bgr[:, :, ::-1]), True


def decode_image(data: bytes) -> np.ndarray:
    """Image file bytes (any format OpenCV reads; JPEG with any colour space) -> RGB uint8
    (H, W, 3), EXIF orientation ignored; `DecodeError` for corrupt, truncated or non-image data.
    """
    return _decode(data)[0]


def encode_image(path: Path, *, short_side: int, quality: int) -> EncodedVideo:
    """The image at `path` as a prepared one-frame record (fps `IMAGE_FPS`).

    Decoded to RGB, shrunk to `short_side` like video frames (never enlarged; 0 keeps the
    size). The file's own bytes are the frame when they already are what re-encoding would
    aim at: a sequential (baseline or extended) 8-bit three-component JPEG, not resized, that
    the training decoder reads without complaint. Anything else (another format, grayscale,
    CMYK, progressive, resized) is re-encoded at `quality`. `DecodeError` when unreadable.
    """
    data = Path(path).read_bytes()
    rgb, clean = _decode(data)
    small = resize_short_side(rgb, short_side)
    frame = jpeg_frame(data)
    verbatim = (
        clean
        and small.shape == rgb.shape
        and frame is not None
        and frame.marker in _SEQUENTIAL
        and (frame.precision, frame.components) == (8, 3)
    )
    jpeg = data if verbatim else encode_jpeg(small, quality=quality)
    return EncodedVideo([jpeg], IMAGE_FPS, width=small.shape[1], height=small.shape[0])
