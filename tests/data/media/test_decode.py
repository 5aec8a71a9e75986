import os
import wave
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np
import pytest
import torch

from tests.data.videos import textured_frames, write_video, write_with_muxer
from vidscale.data.media.decode import (
    DecodeError,
    DecodeStats,
    RGBConverter,
    VideoMeta,
    decode_all,
    decode_frames,
    decode_threads,
    probe,
)
from vidscale.data.media.decode_baseline import decode_frames_seek
from vidscale.data.media.decode_segments import Segment, segments_for
from vidscale.data.sampling import dense_indices, uniform_indices


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


# Decoding by segments on the codecs and GOP structures found in datasets --------------------


@dataclass(frozen=True)
class Encoding:
    """How a test video is written: codec, container (by suffix) and encoder settings."""

    suffix: str
    codec: str
    gop: int
    options: dict[str, str]
    max_b_frames: int | None = None


# Small videos with the reference structures that matter: H.264 B-pyramids (B-frames that are
# references), open GOPs (B-frames shown before their GOP's keyframe), no B-frames; VP9 (with
# alt-ref frames where libvpx makes them); MPEG-4 part 2 and MPEG-2 with B-frames, MPEG-4 in AVI
# (keyframes indexed by decode time), also with every I-frame shown after the two B-frames that
# follow it in the stream. The scene-cut thresholds keep the GOPs as asked.
X264 = "scenecut=0:b-adapt=0:rc-lookahead=0"
ENCODINGS = {
    "h264_pyramid_long_gop": Encoding(
        ".mp4", "libx264", 250, {"x264-params": f"{X264}:bframes=3:b-pyramid=normal"}
    ),
    "h264_pyramid_gop12": Encoding(
        ".mp4", "libx264", 12, {"x264-params": f"{X264}:bframes=3:b-pyramid=normal"}
    ),
    "h264_open_gop": Encoding(
        ".mp4", "libx264", 8, {"x264-params": f"{X264}:bframes=2:open-gop=1:min-keyint=8"}
    ),
    "h264_no_b_frames": Encoding(".mkv", "libx264", 250, {"x264-params": f"{X264}:bframes=0"}),
    "vp9_alt_ref": Encoding(
        ".webm", "libvpx-vp9", 250, {"auto-alt-ref": "1", "lag-in-frames": "16", "crf": "30"}
    ),
    "mpeg4_b_frames_avi": Encoding(".avi", "mpeg4", 24, {"sc_threshold": "1000000000"}, 2),
    "mpeg4_gop3_avi": Encoding(".avi", "mpeg4", 3, {"sc_threshold": "1000000000"}, 2),
    "mpeg2_b_frames": Encoding(".mkv", "mpeg2video", 24, {"sc_threshold": "1000000000"}, 2),
}
NUM_FRAMES = 48


def encode(path: Path, frames: np.ndarray, enc: Encoding) -> Path:
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream(enc.codec, rate=15, options={"threads": "1", **enc.options})
        assert isinstance(stream, av.VideoStream)
        stream.width, stream.height = frames.shape[2], frames.shape[1]
        stream.pix_fmt = "yuv420p"
        stream.codec_context.gop_size = enc.gop
        if enc.max_b_frames is not None:
            stream.codec_context.max_b_frames = enc.max_b_frames
        for rgb in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


@dataclass(frozen=True)
class Coded:
    """A test video, its packet index and every frame of a full sequential decode."""

    path: Path
    meta: VideoMeta
    full: np.ndarray


@pytest.fixture(scope="module")
def coded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Coded]:
    out = tmp_path_factory.mktemp("codecs")
    frames = textured_frames(NUM_FRAMES, size=48)
    videos = {}
    for name, enc in ENCODINGS.items():
        path = encode(out / f"{name}{enc.suffix}", frames, enc)
        videos[name] = Coded(path, probe(path), np.stack(list(decode_all(path))))
    return videos


def index_sets(meta: VideoMeta, rng: np.random.Generator) -> list[np.ndarray]:
    """Random sets (unsorted, with repeats), TSN-sparse clips, dense clips, and the ends."""
    n = meta.num_frames
    sets = [rng.integers(0, n, size=6) for _ in range(6)]
    sets += [uniform_indices(n, t, rng=rng) for t in (3, 4, 8) for _ in range(2)]
    sets += [dense_indices(n, 8, 2, rng=rng), np.arange(n), np.array([n - 1, 0])]
    # Around each keyframe: the open GOP's leading B-frames are shown just before it.
    sets += [np.array([k - 2, k - 1, k]) for k in meta.keyframes[1:3]]
    return sets


@pytest.mark.parametrize("name", list(ENCODINGS))
def test_segment_decode_equals_full_sequential_decode(coded: dict[str, Coded], name: str) -> None:
    video = coded[name]
    assert video.meta.num_frames == len(video.full) == NUM_FRAMES
    rng = np.random.default_rng(0)
    for idx in index_sets(video.meta, rng):
        for threads in (1, 3):  # frame threading delays output: seeks and drains must not lose it
            got = decode_frames(video.path, idx, meta=video.meta, threads=threads)
            np.testing.assert_array_equal(got, video.full[idx], err_msg=f"{idx} {threads}")


def test_encodings_have_the_structures_they_test(coded: dict[str, Coded]) -> None:
    pyramid = coded["h264_pyramid_long_gop"]
    refs = reference_frames(pyramid)
    b_refs = [i for i, t in picture_types(pyramid).items() if t == "B" and i in refs]
    assert pyramid.meta.keyframes.tolist() == [0] and b_refs  # one GOP; B-frames as references
    opened = coded["h264_open_gop"]
    order = decode_order(opened)
    key = int(opened.meta.keyframes[1])
    assert order.index(key - 1) > order.index(key)  # a B-frame shown before the keyframe after it
    assert all(t != "B" for t in picture_types(coded["h264_no_b_frames"]).values())
    mpeg4 = coded["mpeg4_b_frames_avi"]
    assert mpeg4.meta.keyframes[:2].tolist() == [0, 24]
    assert "P" in picture_types(mpeg4).values() and "B" in picture_types(mpeg4).values()


@pytest.mark.parametrize("name", ["h264_pyramid_long_gop", "mpeg4_b_frames_avi", "mpeg2_b_frames"])
def test_only_references_and_targets_are_decoded(coded: dict[str, Coded], name: str) -> None:
    # Per packet, the decoder skips exactly the pictures that are neither targets nor references:
    # inside one GOP, a clip costs the references sent up to its last target, and its targets.
    video = coded[name]
    refs = reference_frames(video)
    order = decode_order(video)
    for targets in ([3], [6, 7], [2, 9, 17], [1, 10, 13, 22]):
        stats = DecodeStats()
        decode_frames(video.path, targets, meta=video.meta, stats=stats, threads=1)
        sent = order[: max(order.index(t) for t in targets) + 1]
        expected = sum(1 for i in sent if i in refs) + sum(1 for t in targets if t not in refs)
        assert stats == DecodeStats(frames_decoded=expected, seeks=1), targets


def test_sparse_clips_decode_fewer_frames_than_the_seeking_decoder(
    coded: dict[str, Coded],
) -> None:
    video = coded["h264_pyramid_long_gop"]
    rng = np.random.default_rng(1)
    for _ in range(5):
        idx = uniform_indices(video.meta.num_frames, 8, rng=rng)
        new, old = DecodeStats(), DecodeStats()
        by_segments = decode_frames(video.path, idx, meta=video.meta, stats=new, threads=1)
        seeking = decode_frames_seek(video.path, idx, meta=video.meta, stats=old)
        np.testing.assert_array_equal(by_segments, seeking)
        assert old.frames_decoded == idx.max() + 1  # every frame up to the last one sampled
        assert new.frames_decoded < 0.75 * old.frames_decoded


def test_keyframes_indexed_by_decode_time_are_reached_by_one_seek(
    coded: dict[str, Coded],
) -> None:
    # AVI indexes keyframes by decode time: with I-frames 3 apart and shown 3 frames after they
    # are sent, a seek to the keyframe's pts lands on the next keyframe, so the decoder seeks
    # again by dts instead of decoding from the start.
    video = coded["mpeg4_gop3_avi"]
    assert video.meta.keyframes[:4].tolist() == [0, 3, 6, 9]
    stats = DecodeStats()
    got = decode_frames(video.path, [31], meta=video.meta, stats=stats, threads=1)
    np.testing.assert_array_equal(got, video.full[[31]])
    assert stats.seeks == 2 and stats.frames_decoded <= 3


def test_segments_enter_each_gop_once_and_run_on_over_adjacent_gops() -> None:
    keys = np.array([0, 10, 20, 30])
    assert segments_for(keys, [25, 3, 3, 7]) == (Segment(0, (3, 7)), Segment(20, (25,)))
    # The keyframe right after a target: decoding on is as cheap as seeking.
    assert segments_for(keys, [9, 10, 12]) == (Segment(0, (9, 10, 12)),)
    assert segments_for(keys, [8, 10]) == (Segment(0, (8,)), Segment(10, (10,)))
    assert segments_for(keys, range(18, 33)) == (Segment(10, tuple(range(18, 33))),)


def test_one_converter_gives_pyav_rgb_for_every_pixel_format() -> None:
    to_rgb = RGBConverter()  # one swscale context, reconfigured as the input changes
    rgb = textured_frames(2, size=32)
    for pix_fmt in ("yuv420p", "yuvj420p", "yuv444p", "gray", "yuv420p10le", "yuv420p"):
        for image in rgb:
            frame = av.VideoFrame.from_ndarray(image, format="rgb24").reformat(format=pix_fmt)
            np.testing.assert_array_equal(to_rgb(frame), frame.to_ndarray(format="rgb24"))


class _ThreadsInWorker(torch.utils.data.Dataset[int]):
    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int) -> int:
        return decode_threads()


def test_decoder_threads_only_outside_loader_workers() -> None:
    loader = torch.utils.data.DataLoader(_ThreadsInWorker(), num_workers=1, batch_size=None)
    assert list(loader) == [1]  # a worker is one core already
    cores = len(os.sched_getaffinity(0))
    assert decode_threads() == min(4, cores)


def frame_index(video: Coded, pts: int | None) -> int:
    """The display index of a coded frame or packet, which must carry a pts."""
    assert pts is not None
    return video.meta.index_of_pts[pts]


def reference_frames(video: Coded) -> set[int]:
    """Frames later pictures may reference, read from the bitstream itself: H.264's
    nal_ref_idc, or for MPEG-1/2/4 every picture but B-pictures."""
    if video.path.suffix == ".mp4":  # H.264 in MP4: 4-byte NAL lengths (x264's avcC)
        refs = set()
        with av.open(str(video.path)) as container:
            for packet in container.demux(video=0):
                data, at = bytes(packet), 0
                while at + 4 < len(data):
                    size, header = int.from_bytes(data[at : at + 4], "big"), data[at + 4]
                    if header & 0x1F in (1, 5) and header >> 5 & 3:
                        refs.add(frame_index(video, packet.pts))
                    at += 4 + size
        return refs
    return {i for i, t in picture_types(video).items() if t != "B"}


def picture_types(video: Coded) -> dict[int, str]:
    with av.open(str(video.path)) as container:
        return {
            frame_index(video, f.pts): "?IPB"[int(f.pict_type)] for f in container.decode(video=0)
        }


def decode_order(video: Coded) -> list[int]:
    with av.open(str(video.path)) as container:
        return [frame_index(video, p.pts) for p in container.demux(video=0) if p.size]
