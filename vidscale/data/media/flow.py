"""Dense optical flow for the temporal stream of two-stream networks, stored as TSN stores it.

Simonyan & Zisserman (2014, §3) feed a stack of L consecutive flow fields to the temporal stream;
TSN (Wang et al., 2016) fixed how the field stores them (DESIGN §9): each flow is two 8-bit
grayscale JPEGs, x then y, with the displacement clipped to ±`FLOW_BOUND` px and mapped linearly
onto 0..255, so 128 is (about) no motion. `quantize_flow` / `dequantize_flow` are that mapping,
`encode_flow_jpegs` / `decode_flow_jpeg` the JPEG pair, and `FlowEngine` computes the flow.

Three OpenCV estimators, all with OpenCV's sign convention: flow (dx, dy) at (x, y), x to the
right and y down, such that ``next[y + dy, x + dx] ≈ prev[y, x]``.

- ``dis``: DIS (Kroeger et al., ECCV 2016), the fast default for extracting on CPUs;
- ``farneback``: polynomial expansion (Farnebäck, SCIA 2003), in OpenCV's base build;
- ``tvl1``: TV-L1 (Zach et al., 2007), what the two-stream papers extract, from OpenCV's contrib
  modules (`cv2.optflow`, package ``opencv-contrib-python-headless``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal, get_args

import cv2
import numpy as np

from vidscale.data.media.decode import DecodeError

try:  # the fastest codec measured (DESIGN §4); OpenCV is the fallback
    import simplejpeg
except ImportError:  # pragma: no cover - depends on the installation
    simplejpeg = None

FlowMethod = Literal["dis", "farneback", "tvl1"]
FLOW_METHODS: tuple[str, ...] = get_args(FlowMethod)
FLOW_BOUND = 20.0  # px: displacement clipped to ±20 and mapped linearly to 0..255 (128 ≈ 0)

# MEDIUM is the most accurate of DIS's presets and the one that still clears 30 flows/s per core
# at 340x256 (each preset's rate and error: docs/benchmarks.md, "Optical flow speed").
DIS_PRESET = cv2.DISOpticalFlow_PRESET_MEDIUM

# Farnebäck's parameters as OpenCV's sample uses them: pyramid scale 0.5, 3 levels, 15 px window,
# 3 iterations, polynomial neighbourhood 5 with sigma 1.2, no flags.
_FARNEBACK_ARGS = (0.5, 3, 15, 3, 5, 1.2, 0)

_Calc = Callable[[np.ndarray, np.ndarray], np.ndarray]


class FlowUnavailable(RuntimeError):
    """A flow method this OpenCV build lacks; the message names the package that provides it."""


def _has_tvl1() -> bool:
    return hasattr(getattr(cv2, "optflow", None), "DualTVL1OpticalFlow")


def available_methods() -> list[str]:
    """The methods of `FLOW_METHODS` that this installation can compute, in that order."""
    return [m for m in FLOW_METHODS if m != "tvl1" or _has_tvl1()]


# OpenCV allocates the output flow when it is passed None; its type stubs leave that case out.
def _farneback(prev: np.ndarray, nxt: np.ndarray) -> np.ndarray:
    return cv2.calcOpticalFlowFarneback(prev, nxt, None, *_FARNEBACK_ARGS)  # type: ignore[call-overload]


def _dense(estimator: cv2.DenseOpticalFlow) -> _Calc:
    return lambda prev, nxt: estimator.calc(prev, nxt, None)  # type: ignore[call-overload]


def _make_calc(method: str) -> _Calc:
    """The estimator for `method`; DIS and TV-L1 are stateful OpenCV objects with work buffers."""
    if method == "dis":
        return _dense(cv2.DISOpticalFlow.create(DIS_PRESET))
    if method == "farneback":
        return _farneback
    if method == "tvl1":
        if not _has_tvl1():
            raise FlowUnavailable(
                "optical flow method 'tvl1' needs cv2.optflow, which this OpenCV lacks: "
                "install opencv-contrib-python-headless instead of opencv-python-headless"
            )
        return _dense(cv2.optflow.DualTVL1OpticalFlow.create())
    raise ValueError(
        f"unknown optical flow method {method!r}; choose from {', '.join(FLOW_METHODS)}"
    )


class FlowEngine:
    """One per process (OpenCV flow objects keep buffers); picklable by method name (re-create the
    cv2 object in __setstate__), so a loader worker receives the name and builds its own.

    Calling it on two grayscale uint8 (H, W) frames returns float32 (H, W, 2): (dx, dy) in pixels,
    x right, y down, such that ``next[y + dy, x + dx] ≈ prev[y, x]``. Not thread-safe: one engine
    per thread. Raises `ValueError` naming an unknown method, `FlowUnavailable` for one this OpenCV
    build lacks.
    """

    def __init__(self, method: FlowMethod) -> None:
        self.method: str = method
        self._calc = _make_calc(method)

    def __call__(self, prev_gray: np.ndarray, next_gray: np.ndarray) -> np.ndarray:
        for name, frame in (("prev_gray", prev_gray), ("next_gray", next_gray)):
            if frame.ndim != 2 or frame.dtype != np.uint8:
                raise ValueError(f"{name} must be uint8 (H, W), got {frame.dtype} {frame.shape}")
        if prev_gray.shape != next_gray.shape:
            raise ValueError(f"frame shapes differ: {prev_gray.shape} vs {next_gray.shape}")
        flow = self._calc(np.ascontiguousarray(prev_gray), np.ascontiguousarray(next_gray))
        return np.asarray(flow, dtype=np.float32)

    def __getstate__(self) -> dict[str, Any]:
        return {"method": self.method}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.method = state["method"]
        self._calc = _make_calc(self.method)

    def __repr__(self) -> str:
        return f"FlowEngine({self.method!r})"


def to_gray(frame_rgb: np.ndarray) -> np.ndarray:
    """RGB uint8 (H, W, 3) -> luma uint8 (H, W) (``cv2.COLOR_RGB2GRAY``: BT.601 weights)."""
    if frame_rgb.ndim != 3 or frame_rgb.shape[2] != 3 or frame_rgb.dtype != np.uint8:
        raise ValueError(f"expected RGB uint8 (H, W, 3), got {frame_rgb.dtype} {frame_rgb.shape}")
    return cv2.cvtColor(np.ascontiguousarray(frame_rgb), cv2.COLOR_RGB2GRAY)


def _check_bound(bound: float) -> None:
    if not bound > 0:
        raise ValueError(f"flow bound must be positive, got {bound}")


def quantize_flow(flow: np.ndarray, *, bound: float = FLOW_BOUND) -> np.ndarray:
    """Float flow (H, W, 2) -> uint8 (H, W, 2): ``round((clip(f, -b, b) + b) * 255 / (2b))``.

    Zero maps to 128 (127.5 rounds half to even); in-bound values come back from
    `dequantize_flow` within half a step, ``b / 255``. NaN is stored as no motion and ±inf as
    ±bound, because casting a non-finite float to uint8 is undefined.
    """
    _check_bound(bound)
    f = np.nan_to_num(np.asarray(flow, dtype=np.float32), nan=0.0, posinf=bound, neginf=-bound)
    scaled = (np.clip(f, -bound, bound) + np.float32(bound)) * np.float32(255.0 / (2.0 * bound))
    return np.clip(np.rint(scaled), 0, 255).astype(np.uint8)


def dequantize_flow(q: np.ndarray, *, bound: float = FLOW_BOUND) -> np.ndarray:
    """uint8 levels -> float32 px: ``q * 2b / 255 - b``, computed as ``(q - 127.5) * 2b / 255``.

    That form is exactly antisymmetric about 127.5, so ``dequantize_flow(255 - q) ==
    -dequantize_flow(q)`` holds bit for bit: a horizontal flip negates x by inverting the levels.
    """
    _check_bound(bound)
    centred = np.asarray(q, dtype=np.float32) - np.float32(127.5)
    return centred * np.float32(2.0 * bound / 255.0)


def encode_flow_jpegs(q: np.ndarray, *, quality: int) -> tuple[bytes, bytes]:
    """Quantised flow uint8 (H, W, 2) -> two 8-bit grayscale JPEGs, x first, then y."""
    if q.ndim != 3 or q.shape[2] != 2 or q.dtype != np.uint8:
        raise ValueError(f"expected quantised flow uint8 (H, W, 2), got {q.dtype} {q.shape}")
    if not 1 <= quality <= 100:
        raise ValueError(f"JPEG quality must be in 1..100, got {quality}")
    x, y = (_encode_gray(np.ascontiguousarray(q[:, :, c]), quality) for c in range(2))
    return x, y


def _encode_gray(plane: np.ndarray, quality: int) -> bytes:
    if simplejpeg is not None:
        return bytes(simplejpeg.encode_jpeg(plane[:, :, None], quality=quality, colorspace="GRAY"))
    ok, buf = cv2.imencode(".jpg", plane, [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise ValueError("OpenCV could not encode the flow plane")
    return buf.tobytes()


def decode_flow_jpeg(data: bytes) -> np.ndarray:
    """One flow JPEG -> uint8 (H, W). Corrupt data raises `DecodeError` (the datasets then
    substitute another sample, as for RGB frames)."""
    try:
        if simplejpeg is not None:
            return np.asarray(simplejpeg.decode_jpeg(data, colorspace="GRAY"))[:, :, 0]
        plane = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_GRAYSCALE)
        if plane is None:
            raise ValueError("OpenCV could not decode the data")
        return plane
    except (ValueError, OSError) as err:
        raise DecodeError(f"corrupt flow JPEG: {err}") from err


def quantized_flows(
    frames_rgb: Iterable[np.ndarray], engine: FlowEngine, *, bound: float = FLOW_BOUND
) -> Iterator[np.ndarray]:
    """Yield flow k, between frames k and k + 1, quantised to uint8 (H, W, 2): n frames give
    n - 1 flows. Each frame is converted to gray once and reused as the next pair's first."""
    prev: np.ndarray | None = None
    for frame in frames_rgb:
        gray = to_gray(frame)
        if prev is not None:
            yield quantize_flow(engine(prev, gray), bound=bound)
        prev = gray
