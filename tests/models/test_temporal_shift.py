"""Temporal shift against hand-computed values, its gradient, and the streaming form."""

from collections.abc import Callable

import pytest
import torch

from vidscale.models.temporal_shift import (
    CachedShift,
    Direction,
    ShiftSpec,
    TemporalShift,
    _shift_folds,
    _shift_folds_by_concat,
    causal_temporal_shift,
    temporal_shift,
)


def _clip() -> torch.Tensor:
    """One clip, T=3 frames, C=4 channels, 1x1 pixels: value = 10 * frame + channel."""
    values = [[10.0 * t + c for c in range(4)] for t in range(3)]
    return torch.tensor(values).view(3, 4, 1, 1)


def test_shift_matches_hand_computed_example() -> None:
    # C=4, fold_div=4 -> fold=1: channel 0 takes frame t+1, channel 1 frame t-1, 2-3 unchanged.
    out = temporal_shift(_clip(), num_frames=3, fold_div=4)
    expected = torch.tensor(
        [
            [10.0, 0.0, 2.0, 3.0],  # t=0: ch0 from t=1, ch1 zero (no t=-1)
            [20.0, 1.0, 12.0, 13.0],  # t=1: ch0 from t=2, ch1 from t=0
            [0.0, 11.0, 22.0, 23.0],  # t=2: ch0 zero (no t=3), ch1 from t=1
        ]
    ).view(3, 4, 1, 1)
    assert torch.equal(out, expected)


def test_shift_with_default_fold_on_two_clips() -> None:
    # C=16, fold_div=8 -> fold=2: channels 0-1 from t+1, 2-3 from t-1; clips never mix.
    x = torch.arange(2 * 2 * 16, dtype=torch.float32).view(4, 16, 1, 1)
    out = temporal_shift(x, num_frames=2).view(2, 2, 16)
    x5 = x.view(2, 2, 16)
    for n in range(2):
        assert out[n, 0, :2].tolist() == x5[n, 1, :2].tolist()
        assert out[n, 1, :2].tolist() == [0.0, 0.0]
        assert out[n, 0, 2:4].tolist() == [0.0, 0.0]
        assert out[n, 1, 2:4].tolist() == x5[n, 0, 2:4].tolist()
        assert out[n, :, 4:].tolist() == x5[n, :, 4:].tolist()


def test_causal_shift_matches_hand_computed_example() -> None:
    out = causal_temporal_shift(_clip(), num_frames=3, fold_div=4)
    expected = torch.tensor(
        [
            [0.0, 1.0, 2.0, 3.0],
            [0.0, 11.0, 12.0, 13.0],
            [10.0, 21.0, 22.0, 23.0],
        ]
    ).view(3, 4, 1, 1)
    assert torch.equal(out, expected)


def test_shift_is_out_of_place() -> None:
    x = _clip()
    before = x.clone()
    out = temporal_shift(x, num_frames=3, fold_div=4)
    assert torch.equal(x, before)
    assert out.data_ptr() != x.data_ptr()


def test_shift_keeps_channels_last_layout() -> None:
    x = torch.randn(4, 16, 3, 3).to(memory_format=torch.channels_last)
    out = temporal_shift(x, num_frames=2)
    assert out.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(out, temporal_shift(x.contiguous(), num_frames=2))


@pytest.mark.parametrize("frames", [1, 2, 5])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("directions", [("next", "prev"), ("prev", "next"), ("prev",), ("next",)])
def test_eager_and_graph_capture_forms_agree(
    frames: int, channels_last: bool, directions: tuple[Direction, ...]
) -> None:
    x = torch.randn(2 * frames, 24, 3, 2)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    x_N_T_C_H_W = x.view(2, frames, 24, 3, 2)
    eager = _shift_folds(x_N_T_C_H_W, fold=3, directions=directions)
    captured = _shift_folds_by_concat(x_N_T_C_H_W, fold=3, directions=directions)
    assert torch.equal(eager, captured)
    layout = torch.channels_last if channels_last else torch.contiguous_format
    for out in (eager, captured):
        assert out.view(x.shape).is_contiguous(memory_format=layout)


def test_traced_shift_uses_the_capture_form_and_generalises() -> None:
    # A trace records the concatenation form; it must match eager on an input it did not see.
    module = TemporalShift(4)
    traced = torch.jit.trace(lambda x: module(x, num_frames=3), torch.randn(6, 8, 2, 2))
    x = torch.randn(9, 8, 5, 5)
    assert torch.equal(traced(x), module(x, num_frames=3))


@pytest.mark.parametrize("shift", [temporal_shift, causal_temporal_shift])
def test_backward_is_the_adjoint(shift: Callable[..., torch.Tensor]) -> None:
    x = torch.randn(2 * 3, 16, 2, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: shift(x, num_frames=3), (x,))


def test_rejects_batch_that_is_not_whole_clips() -> None:
    with pytest.raises(ValueError, match="whole number"):
        temporal_shift(torch.zeros(5, 8, 1, 1), num_frames=2)


def test_module_and_spec() -> None:
    x = torch.randn(6, 16, 2, 2)
    assert torch.equal(
        TemporalShift(4)(x, num_frames=3), temporal_shift(x, num_frames=3, fold_div=4)
    )
    causal = TemporalShift(causal=True)(x, num_frames=3)
    assert torch.equal(causal, causal_temporal_shift(x, num_frames=3))
    with pytest.raises(ValueError):
        ShiftSpec(place="middle")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ShiftSpec(every=0)


def test_cached_shift_streams_the_causal_shift() -> None:
    x_N_T_C_H_W = torch.randn(2, 5, 16, 3, 3)
    offline = causal_temporal_shift(x_N_T_C_H_W.reshape(10, 16, 3, 3), num_frames=5)
    stream = CachedShift()
    frames = [stream(x_N_T_C_H_W[:, t]) for t in range(5)]
    assert torch.equal(torch.stack(frames, 1).reshape(10, 16, 3, 3), offline)
    stream.reset()
    assert torch.equal(stream(x_N_T_C_H_W[:, 0]), offline.view(2, 5, 16, 3, 3)[:, 0])
    with pytest.raises(ValueError):
        stream(x_N_T_C_H_W[:, :2].reshape(4, 16, 3, 3), num_frames=2)
