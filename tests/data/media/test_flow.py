"""Optical flow: known motion recovered, TSN's 8-bit storage mapping, JPEG pair, pickling."""

from __future__ import annotations

import pickle

import cv2
import numpy as np
import pytest

from vidscale.bench.data.flow import end_point_error, translated_pair
from vidscale.data.media import flow as flow_mod
from vidscale.data.media.decode import DecodeError
from vidscale.data.media.flow import (
    FLOW_BOUND,
    FLOW_METHODS,
    FlowEngine,
    FlowUnavailable,
    available_methods,
    decode_flow_jpeg,
    dequantize_flow,
    encode_flow_jpegs,
    quantize_flow,
    quantized_flows,
    to_gray,
)

STEP = 2 * FLOW_BOUND / 255  # one quantisation level, px


@pytest.mark.parametrize("shift", [(3.0, -2.0), (3.3, -2.2), (-1.25, 0.6)])
def test_dis_recovers_a_known_translation(shift: tuple[float, float]) -> None:
    prev, nxt = translated_pair(160, 120, shift=shift, noise=1.0)
    flow = FlowEngine("dis")(prev, nxt)
    assert flow.dtype == np.float32 and flow.shape == (120, 160, 2)
    assert end_point_error(flow, shift, margin=12) < 0.5


@pytest.mark.parametrize("method", ["farneback", "tvl1"])
def test_other_methods_recover_a_translation_roughly(method: str) -> None:
    shift = (3.0, -2.0)
    prev, nxt = translated_pair(96, 72, shift=shift, noise=1.0)
    assert end_point_error(FlowEngine(method)(prev, nxt), shift, margin=12) < 1.0  # type: ignore[arg-type]


@pytest.mark.parametrize("method", FLOW_METHODS)
def test_a_static_scene_has_no_flow(method: str) -> None:
    frame, _ = translated_pair(96, 72, shift=(0.0, 0.0))
    flow = FlowEngine(method)(frame, frame.copy())  # type: ignore[arg-type]
    assert float(np.abs(flow).mean()) < 0.01


def test_engine_pickles_by_method_name_and_computes_the_same_flow() -> None:
    prev, nxt = translated_pair(96, 72, shift=(2.0, 1.0))
    engine = FlowEngine("dis")
    clone = pickle.loads(pickle.dumps(engine))
    assert clone.method == "dis" and clone is not engine
    np.testing.assert_array_equal(clone(prev, nxt), engine(prev, nxt))


def test_unknown_method_is_a_value_error_naming_it() -> None:
    with pytest.raises(ValueError, match="'raft'"):
        FlowEngine("raft")  # type: ignore[arg-type]


def test_engine_rejects_colour_or_mismatched_frames() -> None:
    gray = np.zeros((8, 8), np.uint8)
    with pytest.raises(ValueError, match="uint8"):
        FlowEngine("dis")(np.zeros((8, 8, 3), np.uint8), gray)
    with pytest.raises(ValueError, match="shapes differ"):
        FlowEngine("dis")(gray, np.zeros((8, 9), np.uint8))


def test_tvl1_without_contrib_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "tvl1" in available_methods()  # the project depends on the contrib build
    monkeypatch.delattr(cv2, "optflow")  # what the base opencv-python-headless build looks like
    assert available_methods() == ["dis", "farneback"]
    with pytest.raises(FlowUnavailable, match="opencv-contrib-python-headless"):
        FlowEngine("tvl1")


def test_quantize_round_trip_is_within_half_a_level_inside_the_bound() -> None:
    f = np.random.default_rng(0).uniform(-FLOW_BOUND, FLOW_BOUND, (32, 40, 2))
    q = quantize_flow(f)
    assert q.dtype == np.uint8 and q.shape == f.shape
    assert np.abs(dequantize_flow(q) - f).max() <= STEP / 2 + 1e-5


def test_quantize_clips_outside_the_bound_and_maps_zero_to_128() -> None:
    f = np.array([[[0.0, -0.0], [35.0, -35.0], [np.nan, np.inf]]])
    q = quantize_flow(f)
    np.testing.assert_array_equal(q, [[[128, 128], [255, 0], [128, 255]]])
    np.testing.assert_array_equal(dequantize_flow(q[:, 1]), [[FLOW_BOUND, -FLOW_BOUND]])
    assert abs(float(dequantize_flow(np.array(128, dtype=np.uint8)))) <= STEP / 2 + 1e-6


def test_quantize_respects_a_custom_bound() -> None:
    q = quantize_flow(np.array([[[5.0, -10.0]]]), bound=10.0)
    np.testing.assert_array_equal(q, [[[191, 0]]])  # rint(15 * 12.75) = 191
    np.testing.assert_allclose(dequantize_flow(q, bound=10.0), [[[4.980392, -10.0]]], rtol=1e-6)
    with pytest.raises(ValueError, match="positive"):
        quantize_flow(q, bound=0.0)


def test_inverting_levels_negates_the_flow_exactly() -> None:
    q = np.arange(256, dtype=np.uint8)
    np.testing.assert_array_equal(dequantize_flow(255 - q), -dequantize_flow(q))
    np.testing.assert_array_equal(
        dequantize_flow(255 - q, bound=7.5), -dequantize_flow(q, bound=7.5)
    )


@pytest.mark.parametrize("codec", ["simplejpeg", "opencv"])
def test_flow_jpeg_pair_round_trips_within_a_few_levels(
    codec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if codec == "opencv":
        monkeypatch.setattr(flow_mod, "simplejpeg", None)
    prev, nxt = translated_pair(96, 72, shift=(4.0, -1.0))
    q = quantize_flow(FlowEngine("farneback")(prev, nxt) * 3)  # a non-constant field
    x, y = encode_flow_jpegs(q, quality=95)
    assert x[:2] == y[:2] == b"\xff\xd8"
    planes = [decode_flow_jpeg(x), decode_flow_jpeg(y)]
    for c, plane in enumerate(planes):
        assert plane.dtype == np.uint8 and plane.shape == (72, 96)
        assert np.abs(plane.astype(int) - q[:, :, c]).max() <= 3
    assert np.abs(planes[0].astype(int) - q[:, :, 1]).max() > 3  # x first, then y


@pytest.mark.parametrize("codec", ["simplejpeg", "opencv"])
def test_corrupt_flow_jpeg_is_a_decode_error(codec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if codec == "opencv":
        monkeypatch.setattr(flow_mod, "simplejpeg", None)
    x, _ = encode_flow_jpegs(np.full((16, 16, 2), 128, np.uint8), quality=90)
    for bad in (b"not a jpeg", x[:20], x[: len(x) // 2]):
        with pytest.raises(DecodeError, match="corrupt flow JPEG"):
            decode_flow_jpeg(bad)


def test_encode_rejects_a_float_field_and_bad_quality() -> None:
    with pytest.raises(ValueError, match="uint8"):
        encode_flow_jpegs(np.zeros((4, 4, 2), np.float32), quality=90)
    with pytest.raises(ValueError, match="quality"):
        encode_flow_jpegs(np.zeros((4, 4, 2), np.uint8), quality=0)


def test_to_gray_uses_bt601_weights() -> None:
    rgb = np.array([[[255, 0, 0], [0, 255, 0], [0, 0, 255], [10, 10, 10]]], np.uint8)
    np.testing.assert_array_equal(to_gray(rgb), [[76, 150, 29, 10]])
    with pytest.raises(ValueError, match="RGB"):
        to_gray(rgb[:, :, 0])


def test_quantized_flows_yields_one_flow_per_consecutive_pair() -> None:
    shift = (2.0, -1.5)
    a, b = translated_pair(96, 72, shift=shift)
    _, c = translated_pair(96, 72, shift=(2 * shift[0], 2 * shift[1]))
    frames = [np.repeat(g[:, :, None], 3, axis=2) for g in (a, b, c)]
    flows = list(quantized_flows(iter(frames), FlowEngine("dis")))
    assert len(flows) == 2
    for q in flows:
        assert q.dtype == np.uint8 and q.shape == (72, 96, 2)
        assert end_point_error(dequantize_flow(q), shift, margin=12) < 0.5
    np.testing.assert_array_equal(flows[0], quantize_flow(FlowEngine("dis")(a, b)))
