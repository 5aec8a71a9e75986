from pathlib import Path

import numpy as np
import pytest

from tests.data.videos import write_video
from vidscale.data.decode import DecodeError, decode_all, decode_frames, probe


@pytest.mark.parametrize("gop", [4, 250])
def test_sparse_decode_equals_full_decode(tmp_path: Path, gop: int) -> None:
    path = write_video(tmp_path / "v.mp4", 40, gop=gop)
    meta = probe(path)
    assert meta.num_frames == 40 and meta.width == 32
    assert meta.keyframes[0] == 0
    if gop == 4:  # at most 4 apart (x264 may add scene-cut keyframes)
        assert max(np.diff(meta.keyframes)) <= 4 and meta.keyframes[-1] >= 36
    full = np.stack(list(decode_all(path)))
    assert full.shape == (40, 32, 32, 3)
    for idx in ([0, 5, 10, 39], [39, 2, 2, 17], [12], list(range(40))):
        np.testing.assert_array_equal(decode_frames(path, idx), full[idx])


def test_frames_are_in_order(tmp_path: Path) -> None:
    path = write_video(tmp_path / "v.mp4", 16, gop=4)
    means = decode_frames(path, [0, 5, 10, 15]).mean(axis=(1, 2, 3))
    assert np.all(np.diff(means) > 0)


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda p: p.write_bytes(b""), "zero-byte"),
        (lambda p: p.write_text("hello, I am text\n" * 10), "not a readable video"),
        (lambda p: None, "not found"),
    ],
)
def test_unreadable_files_raise_decode_error(tmp_path: Path, make, reason: str) -> None:
    path = tmp_path / "bad.mp4"
    make(path)
    with pytest.raises(DecodeError, match=reason):
        decode_frames(path, [0])


def test_truncated_file_raises_or_decodes_what_exists(tmp_path: Path) -> None:
    path = write_video(tmp_path / "v.mp4", 40, gop=4)
    data = path.read_bytes()
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(DecodeError):
        decode_frames(cut, [0, 39])


def test_too_few_frames(tmp_path: Path) -> None:
    path = write_video(tmp_path / "v.mp4", 6)
    with pytest.raises(DecodeError, match="video has 6 frames"):
        decode_frames(path, [0, 7])
