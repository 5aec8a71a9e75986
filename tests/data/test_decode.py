import wave
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.data.videos import textured_frames, write_video, write_with_muxer
from vidscale.data.decode import DecodeError, DecodeStats, decode_all, decode_frames, probe


@pytest.mark.parametrize("gop", [4, 250])
def test_sparse_decode_equals_full_decode(tmp_path: Path, gop: int) -> None:
    path = write_with_muxer(tmp_path / "v.mp4", textured_frames(40), gop=gop)
    meta = probe(path)
    assert (meta.num_frames, meta.width, meta.height) == (40, 32, 32)
    assert meta.fps == pytest.approx(15.0) and meta.duration == pytest.approx(40 / 15)
    assert meta.keyframes[0] == 0
    if gop == 4:  # at most 4 apart (x264 may add scene-cut keyframes)
        assert max(np.diff(meta.keyframes)) <= 4 and meta.keyframes[-1] >= 36
    else:
        assert meta.keyframes.tolist() == [0]
    full = np.stack(list(decode_all(path)))
    assert full.shape == (40, 32, 32, 3)
    rng = np.random.default_rng(0)
    cases = [[0, 5, 10, 39], [39, 2, 2, 17], [12], list(range(40)), list(range(39, -1, -3))]
    cases += [rng.integers(0, 40, size=8).tolist() for _ in range(10)]
    for idx in cases:
        np.testing.assert_array_equal(decode_frames(path, idx, meta=meta), full[idx])
    np.testing.assert_array_equal(decode_frames(path, np.array([7, 3])), full[[7, 3]])


def test_seeks_skip_whole_gops_and_dense_clips_decode_forward(tmp_path: Path) -> None:
    path = write_video(tmp_path / "v.mp4", 40, gop=4)
    meta = probe(path)
    keys = meta.keyframes.tolist()

    def work(idx: list[int]) -> DecodeStats:
        stats = DecodeStats()
        decode_frames(path, idx, meta=meta, stats=stats)
        return stats

    sparse = [1, 20, 38]
    expected = sum(i - max(k for k in keys if k <= i) + 1 for i in sparse)  # one GOP prefix each
    assert work(sparse) == DecodeStats(frames_decoded=expected, seeks=3)
    dense = work(list(range(10, 18)))
    assert dense.seeks == 1 and dense.frames_decoded <= 8 + 3
    big_gop = write_video(tmp_path / "g.mp4", 40, gop=250)
    stats = DecodeStats()
    decode_frames(big_gop, [0, 20, 39], stats=stats)
    assert stats == DecodeStats(frames_decoded=40, seeks=1)  # one pass, never a seek back


def test_frames_are_in_order(tmp_path: Path) -> None:
    path = write_video(tmp_path / "v.mp4", 16, gop=4)
    means = decode_frames(path, [0, 5, 10, 15]).mean(axis=(1, 2, 3))
    assert np.all(np.diff(means) > 0)


def test_container_without_frame_count_metadata(tmp_path: Path) -> None:
    # Matroska stores no frame count (stream.frames == 0): the count comes from the packets.
    path = write_with_muxer(tmp_path / "v.mkv", textured_frames(24), gop=6)
    meta = probe(path)
    assert meta.num_frames == 24 and meta.seekable
    full = np.stack(list(decode_all(path)))
    np.testing.assert_array_equal(decode_frames(path, [23, 0, 13], meta=meta), full[[23, 0, 13]])


def test_raw_stream_without_timestamps_decodes_sequentially(tmp_path: Path) -> None:
    path = write_with_muxer(tmp_path / "v.h264", textured_frames(20), gop=6, format="h264")
    meta = probe(path)
    assert meta.num_frames == 20 and not meta.seekable
    full = np.stack(list(decode_all(path)))
    np.testing.assert_array_equal(decode_frames(path, [19, 4, 4]), full[[19, 4, 4]])


def _write_wav(path: Path) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(bytes(1600))


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda p: p.write_bytes(b""), "zero-byte"),
        (lambda p: p.write_text("hello, I am text\n" * 10), "not a readable video"),
        (lambda p: None, "not found"),
        (_write_wav, "no video stream"),
    ],
)
def test_unreadable_files_raise_decode_error(
    tmp_path: Path, make: Callable[[Path], object], reason: str
) -> None:
    path = tmp_path / "bad.mp4"
    make(path)
    with pytest.raises(DecodeError, match=reason):
        probe(path)
    with pytest.raises(DecodeError, match=reason):
        decode_frames(path, [0])


def test_truncated_file_without_index_is_unreadable(tmp_path: Path) -> None:
    # The muxer writes the index (moov) last: half a file has none.
    path = write_video(tmp_path / "v.mp4", 40, gop=4)
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(DecodeError, match="not a readable video"):
        decode_frames(cut, [0, 39])


def test_truncated_file_with_index_first(tmp_path: Path) -> None:
    # With the index first, the frames before the cut still decode; the cut ones cannot.
    path = write_with_muxer(
        tmp_path / "v.mp4", textured_frames(40), gop=4, options={"movflags": "faststart"}
    )
    full = np.stack(list(decode_all(path)))
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(path.read_bytes()[: int(path.stat().st_size * 0.6)])
    meta = probe(cut)
    assert 0 < meta.num_frames < 40
    np.testing.assert_array_equal(decode_frames(cut, [0, 1, 2], meta=meta), full[:3])
    with pytest.raises(DecodeError):
        decode_frames(cut, [39])
    with pytest.raises(DecodeError):
        decode_frames(cut, list(range(meta.num_frames)), meta=meta)  # the last packet is partial


def test_too_few_frames(tmp_path: Path) -> None:
    path = write_video(tmp_path / "v.mp4", 6)
    with pytest.raises(DecodeError, match="frame 7 requested, video has 6 frames"):
        decode_frames(path, [0, 7])


def test_bad_index_arguments_are_caller_errors(tmp_path: Path) -> None:
    path = write_video(tmp_path / "v.mp4", 6)
    with pytest.raises(ValueError, match="no frame indices"):
        decode_frames(path, [])
    with pytest.raises(ValueError, match="negative"):
        decode_frames(path, [-1])
