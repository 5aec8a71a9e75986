"""A corpus of bad and unusual inputs, generated here (no committed binaries).

Bad inputs (unreadable files, broken annotations, hostile tar members) must be skipped and
reported with a reason by `prepare_dataset` and by the training-time datasets: never a crash,
never a hang (every run below has a deadline), never a write outside the output directory.
Unusual but valid videos (odd or extreme sizes, variable frame rate, gray or 4:4:4 pixels, one
frame, fewer frames than the clip) must decode correctly and must not be skipped. Per-worker
memory stays bounded over hundreds of reads.
"""

from __future__ import annotations

import io
import os
import tarfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, TypeVar

import av
import numpy as np
import pytest
from torch.utils.data import DataLoader

from vidscale.data.annotations import AnnotationError, VideoRecord
from vidscale.data.clip import ClipSpec
from vidscale.data.dataset import VideoClipDataset, collate
from vidscale.data.layouts import LayoutSplits, read_layout
from vidscale.data.media.decode import DecodeError, decode_frames, probe
from vidscale.data.prepared.encode import encode_video
from vidscale.data.prepared.prepare import open_prepared, prepare_dataset
from vidscale.data.prepared.shard_dataset import ShardClipDataset, StreamingShardDataset
from vidscale.data.prepared.shards import ShardEntry, encode_jpeg, iter_videos
from vidscale.data.synthetic.writer import encode_h264

T = TypeVar("T")
DEADLINE_S = 60.0  # generous on a loaded 2-core machine; a hang never finishes
SPEC = ClipSpec(frames=8, crop_size=16, short_side=16, flip=False)


def within(seconds: float, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)` on a daemon thread; fail the test if it has not returned in time.

    FFmpeg releases the GIL while it works, so a stuck decoder cannot stop this thread's
    deadline from firing.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as err:
            box["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"{getattr(fn, '__name__', fn)} did not finish within {seconds:.0f} s (hang)")
    if "error" in box:
        raise box["error"]
    return box["value"]


# the corpus ----------------------------------------------------------------------------------


def marked_frames(n: int, *, width: int, height: int) -> np.ndarray:
    """Frames whose bottom-right quadrant is flat gray brightening with the frame index, with a
    red block in the top-left quadrant and a moving texture in the bottom-left one: the index
    and the orientation stay readable after lossy coding, and the texture gives the encoder real
    residuals (packets of realistic size). Frames under 8x8 are flat (no room for marks)."""
    rng = np.random.default_rng(1)
    texture = rng.integers(0, 256, size=(height, 2 * width, 3), dtype=np.uint8)
    h2, w2 = max(height // 2, 1), max(width // 2, 1)
    frames = np.empty((n, height, width, 3), dtype=np.uint8)
    for i in range(n):
        frames[i] = 30 + (200 * i) // max(n - 1, 1)
        if min(width, height) < 8:
            continue
        frames[i, h2:, :w2] = np.roll(texture, i, axis=1)[h2:, :w2]
        frames[i, :h2, :w2] = (255, 0, 0)
    return frames


def write_video(
    path: Path,
    frames: np.ndarray,
    *,
    pix_fmt: str = "yuv420p",
    pts_ms: list[int] | None = None,
    rotation: float | None = None,
    options: dict[str, str] | None = None,
) -> Path:
    """H.264 in MP4 with the given pixel format, explicit timestamps (ms) or display rotation."""
    with av.open(str(path), mode="w", options=options or {}) as container:
        stream = container.add_stream("libx264", rate=15, options={"threads": "1"})
        stream.width, stream.height, stream.pix_fmt = frames.shape[2], frames.shape[1], pix_fmt
        if pts_ms is not None:
            stream.codec_context.time_base = Fraction(1, 1000)
        if rotation is not None:
            stream.set_display_rotation(rotation)  # the display matrix phones write
        for i, rgb in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            if pts_ms is not None:
                frame.pts, frame.time_base = pts_ms[i], Fraction(1, 1000)
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def write_audio_only(path: Path) -> Path:
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("aac", rate=16000)
        for i in range(8):
            frame = av.AudioFrame.from_ndarray(
                np.zeros((1, 1024), np.float32), format="fltp", layout="mono"
            )
            frame.sample_rate, frame.pts = 16000, i * 1024
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


VFR_PTS = [0, 10, 50, 60, 200, 210, 400, 401, 500, 900]  # ms: irregular gaps and near-duplicates


@dataclass(frozen=True)
class Corpus:
    root: Path
    bad: dict[str, Path]  # kind -> file that must be skipped with a reason
    unusual: dict[str, Path]  # kind -> file that must decode
    truncated_indexed: Path  # faststart MP4 cut short: its index promises frames it lacks
    rotated: Path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    root = tmp_path_factory.mktemp("corpus")
    bad: dict[str, Path] = {}

    def put(kind: str, name: str, data: bytes) -> None:
        bad[kind] = root / name
        bad[kind].write_bytes(data)

    encode_h264(marked_frames(24, width=32, height=32), root / "whole.mp4", fps=15, gop=8)
    whole = (root / "whole.mp4").read_bytes()
    put("zero_bytes", "zero_bytes.mp4", b"")
    put("truncated", "truncated.mp4", whole[: len(whole) // 2])  # the index (moov) is lost
    put("text", "notes.mp4", b"these are my holiday notes\n" * 40)
    put("random_bytes", "noise.mp4", np.random.default_rng(0).bytes(4000))
    put("subtitles", "subs.mp4", b"1\n00:00:01,000 --> 00:00:02,000\nhi\n")
    bad["audio_only"] = write_audio_only(root / "speech.m4a")
    faststart = write_video(
        root / "faststart.mp4",
        marked_frames(30, width=32, height=32),
        options={"movflags": "faststart"},
    )
    fs = faststart.read_bytes()
    (truncated_indexed := root / "truncated_indexed.mp4").write_bytes(fs[: len(fs) * 2 // 3])
    faststart.unlink()

    def frames(n: int, w: int, h: int) -> np.ndarray:
        return marked_frames(n, width=w, height=h)

    unusual = {
        "one_frame": write_video(root / "one_frame.mp4", frames(1, 32, 32)),
        "shorter_than_clip": write_video(root / "short.mp4", frames(3, 32, 32)),
        # 4:2:0 needs even sides; 4:4:4 takes any size.
        "odd_size": write_video(root / "odd.mp4", frames(10, 33, 17), pix_fmt="yuv444p"),
        "tiny": write_video(root / "tiny.mp4", frames(10, 2, 2)),
        "huge_wide": write_video(root / "huge.mp4", frames(6, 3000, 16)),
        "vfr": write_video(root / "vfr.mp4", frames(10, 32, 32), pts_ms=VFR_PTS),
        "gray": write_video(root / "gray.mp4", frames(10, 32, 32), pix_fmt="gray"),
        "yuv444": write_video(root / "yuv444.mp4", frames(10, 32, 32), pix_fmt="yuv444p"),
    }
    rotated = write_video(root / "rotated.mp4", frames(10, 48, 32), rotation=-90)
    return Corpus(root, bad, unusual, truncated_indexed, rotated)


def records(paths: list[Path]) -> list[VideoRecord]:
    return [VideoRecord(p, i % 2) for i, p in enumerate(paths)]


# decoding ------------------------------------------------------------------------------------


def test_every_bad_file_is_a_decode_error_with_a_reason(corpus: Corpus) -> None:
    for kind, path in corpus.bad.items():
        with pytest.raises(DecodeError) as info:
            within(DEADLINE_S, lambda p=path: decode_frames(p, [0]))
        assert str(info.value), kind
    missing = corpus.root / "no_such_video.mp4"
    with pytest.raises(DecodeError, match="file not found"):
        probe(missing)
    # The truncated file whose index survives probes fine but cannot deliver its last frames.
    meta = probe(corpus.truncated_indexed)
    with pytest.raises(DecodeError, match="decoding failed|could not be decoded"):
        decode_frames(corpus.truncated_indexed, range(meta.num_frames), meta=meta)


def brightness(frames_THWC: np.ndarray) -> np.ndarray:
    """Mean of the bottom-right quadrant (away from the red block) per frame."""
    h, w = frames_THWC.shape[1:3]
    return frames_THWC[:, h // 2 :, w // 2 :].reshape(len(frames_THWC), -1).mean(axis=1)


@pytest.mark.parametrize(
    ("kind", "shape", "count"),
    [
        ("one_frame", (32, 32), 1),
        ("shorter_than_clip", (32, 32), 3),
        ("odd_size", (17, 33), 10),
        ("tiny", (2, 2), 10),
        ("huge_wide", (16, 3000), 6),
        ("vfr", (32, 32), 10),
        ("gray", (32, 32), 10),
        ("yuv444", (32, 32), 10),
    ],
)
def test_unusual_videos_decode_every_frame_in_order(
    corpus: Corpus, kind: str, shape: tuple[int, int], count: int
) -> None:
    path = corpus.unusual[kind]
    meta = probe(path)
    assert (meta.num_frames, meta.height, meta.width) == (count, *shape)
    frames = decode_frames(path, range(count), meta=meta)
    assert frames.shape == (count, *shape, 3)
    # (2x2 frames are flat; gray has no colour.)
    if kind not in ("tiny", "gray"):
        assert frames[:, 0, 0, 0].min() > 180 and frames[:, 0, 0, 1].max() < 120, "red block"
    level = brightness(frames)
    assert np.all(np.diff(level) > 5), f"frames out of order: {level}"
    picked = [count - 1, 0, count // 2]
    np.testing.assert_array_equal(decode_frames(path, picked, meta=meta), frames[picked])


def test_gray_and_yuv444_keep_their_pixel_format_properties(corpus: Corpus) -> None:
    gray = decode_frames(corpus.unusual["gray"], [0, 5])
    assert np.array_equal(gray[..., 0], gray[..., 1]) and np.array_equal(gray[..., 1], gray[..., 2])
    # 4:4:4 keeps a chroma edge at full resolution: the red block ends at exactly x = 16.
    full = decode_frames(corpus.unusual["yuv444"], [0])[0]
    assert full[8, 15, 0] > 200 and full[8, 15, 1] < 60
    assert abs(int(full[8, 16, 0]) - int(full[8, 16, 1])) < 30  # gray right of the edge


def test_vfr_frames_follow_presentation_time(corpus: Corpus) -> None:
    meta = probe(corpus.unusual["vfr"])
    assert np.all(np.diff(meta.pts) > 0)
    assert meta.fps > 0 and meta.duration > 0.5


def test_rotation_tag_is_applied(corpus: Corpus) -> None:
    """Coded 48x32 with a display rotation of -90 degrees (90 clockwise): shown as 32x48, and
    the top-left red block of the coded frame is shown at the top right, the flat gray
    bottom-right quadrant at the bottom left."""
    frames = decode_frames(corpus.rotated, [0, 9])
    assert frames.shape == (2, 48, 32, 3)
    for y, x in ((2, 30), (20, 18)):
        assert frames[0, y, x, 0] > 180 and frames[0, y, x, 1] < 120, "red block"
    gray = frames[1, 40, 5].astype(int)
    assert abs(gray[0] - gray[1]) < 20 and gray[0] > 150, "bright flat quadrant"
    encoded = encode_video(corpus.rotated, short_side=0, fps=None, quality=90)
    assert (encoded.width, encoded.height) == (32, 48)


def test_rotated_video_is_read_not_skipped(corpus: Corpus) -> None:
    dataset = VideoClipDataset(records([corpus.rotated]), SPEC, train=False)
    item = dataset[0]
    assert item["skipped"] == [] and item["inputs"]["rgb"].shape == (3, 8, 16, 16)


# prepare -------------------------------------------------------------------------------------


def tree(root: Path, *, outside: Path) -> dict[str, int]:
    """Every file under `root` (except under `outside`) with its size."""
    found: dict[str, int] = {}
    for dirpath, _, files in os.walk(root):
        if Path(dirpath).is_relative_to(outside):
            continue
        for name in files:
            found[os.path.relpath(os.path.join(dirpath, name), root)] = os.path.getsize(
                os.path.join(dirpath, name)
            )
    return found


def test_prepare_skips_and_reports_every_bad_video(corpus: Corpus, tmp_path: Path) -> None:
    # Hostile names too: stems "." and "..", spaces and a path reaching out of the corpus.
    sandbox = tmp_path / "sandbox"
    (sandbox / "videos").mkdir(parents=True)
    odd_names = []
    for name in ("..mp4", "...mp4", "we ird name ü.mp4"):
        target = sandbox / "videos" / name
        target.write_bytes(corpus.unusual["gray"].read_bytes())
        odd_names.append(target)
    escaping = sandbox / "videos" / ".." / ".." / "sandbox" / "videos" / "..mp4"
    bad = list(corpus.bad.values())
    good = list(corpus.unusual.values())
    missing = [(str(sandbox / "gone.mp4"), "train.csv:7: missing video")]
    splits = LayoutSplits(
        classes=["a", "b"],
        train=records([*bad, *good, *odd_names]),
        val=records([*good[:2], escaping]),
        missing=missing,
    )
    out = sandbox / "prepared"
    before = tree(tmp_path, outside=out)
    manifest = within(
        DEADLINE_S, prepare_dataset, splits, out, short_side=0, workers=2, progress=False
    )

    assert tree(tmp_path, outside=out) == before, "prepare wrote outside its output directory"
    skipped = {path: reason for path, reason in manifest.skipped}
    for path in bad:
        assert skipped.get(str(path.absolute())), f"{path.name} not reported"
    assert skipped[missing[0][0]] == missing[0][1]
    assert len(manifest.skipped) == len(bad) + 1
    data = open_prepared(out)
    prepared = {Path(e.path).name for e in data.train}
    assert prepared == {p.name for p in good + odd_names}
    assert manifest.counts["val"] == 3
    for shard in sorted(out.glob("*/shard-*.tar")):  # every member is safe to extract into out
        with tarfile.open(shard) as tar:
            for member in tar.getmembers():
                assert member.isfile(), member.name
                inside = Path(member.name)
                assert not inside.is_absolute() and ".." not in inside.parts, member.name
                if hasattr(tarfile, "data_filter"):  # Python 3.11.4 on (PEP 706): its own check
                    tarfile.data_filter(member, str(out))
    by_name = {Path(e.path).name: e for e in data.train}
    assert (by_name["odd.mp4"].width, by_name["odd.mp4"].height) == (33, 17)
    assert by_name["huge.mp4"].num_frames == 6 and by_name["one_frame.mp4"].num_frames == 1

    # Training reads every prepared video, unusual ones included, without a skip.
    shards = ShardClipDataset(data.train, SPEC, train=True)
    items = within(DEADLINE_S, lambda: [shards[i] for i in range(len(shards))])
    assert all(it["skipped"] == [] and it["inputs"]["rgb"].shape == (3, 8, 16, 16) for it in items)


def test_prepare_skips_a_truncated_file_whose_index_survives(
    corpus: Corpus, tmp_path: Path
) -> None:
    splits = LayoutSplits(["a"], records([corpus.truncated_indexed]), [])
    manifest = prepare_dataset(splits, tmp_path / "out", short_side=0, workers=1, progress=False)
    assert [Path(p).name for p, _ in manifest.skipped] == ["truncated_indexed.mp4"]


def test_tampered_index_cannot_point_outside_the_dataset(corpus: Corpus, tmp_path: Path) -> None:
    out = tmp_path / "prepared"
    good = records([corpus.unusual["gray"], corpus.unusual["vfr"]])
    prepare_dataset(LayoutSplits(["a", "b"], good, good), out, workers=1, progress=False)
    index = out / "index_train.jsonl"
    index.write_text(index.read_text().replace('"train/shard-00000.tar"', '"../../x.tar"', 1))
    with pytest.raises(ValueError, match=r"index_train\.jsonl:1: bad index entry: .*escapes"):
        open_prepared(out)
    sidecar = out / "train" / "shard-00000.jsonl"
    sidecar.write_text(sidecar.read_text().replace('"train/shard-00000.tar"', '"/etc/x.tar"', 1))
    with pytest.raises(ValueError, match=r"shard-00000\.jsonl:1: bad index entry"):
        prepare_dataset(LayoutSplits(["a", "b"], good, good), out, workers=1, progress=False)


# annotations ---------------------------------------------------------------------------------


def generic_layout(root: Path, video: Path, train_rows: list[str]) -> Path:
    (root / "videos").mkdir(parents=True, exist_ok=True)
    (root / "videos" / "ok.mp4").write_bytes(video.read_bytes())
    (root / "classes.txt").write_text("a\nb\n")
    (root / "train.csv").write_text("path,label\n" + "".join(r + "\n" for r in train_rows))
    (root / "val.csv").write_text("path,label\nvideos/ok.mp4,b\n")
    return root


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("videos/ok.mp4,no_such_class", r"train\.csv:3: unknown label 'no_such_class'"),
        ("videos/ok.mp4,a,extra", r"train\.csv:3: expected 'path,label'"),
        ("videos/ok.mp4,7", r"train\.csv:3: label index 7 out of range"),
    ],
)
def test_broken_annotation_rows_are_errors_naming_file_and_line(
    corpus: Corpus, tmp_path: Path, row: str, message: str
) -> None:
    root = generic_layout(tmp_path, corpus.unusual["gray"], ["videos/ok.mp4,a", row])
    with pytest.raises(AnnotationError, match=message):
        read_layout("generic", root)


def test_missing_videos_are_reported_in_the_manifest(corpus: Corpus, tmp_path: Path) -> None:
    root = generic_layout(
        tmp_path / "data", corpus.unusual["gray"], ["videos/ok.mp4,a", "videos/gone.mp4,b"]
    )
    with pytest.raises(AnnotationError, match=r"train\.csv:3: missing video"):
        read_layout("generic", root)
    splits = read_layout("generic", root, skip_missing=True)
    manifest = prepare_dataset(splits, tmp_path / "out", workers=1, progress=False)
    assert [(Path(p).name, r.split(": ")[-1]) for p, r in manifest.skipped] == [
        ("gone.mp4", "missing video")
    ]
    assert "train.csv:3" in manifest.skipped[0][1]


# training-time reading -----------------------------------------------------------------------


def read_all(loader: DataLoader) -> list[dict[str, Any]]:
    return list(loader)


def test_training_loader_skips_and_reports_bad_videos(corpus: Corpus) -> None:
    bad = [*corpus.bad.values(), corpus.root / "deleted_after_listing.mp4"]
    good = list(corpus.unusual.values())
    dataset = VideoClipDataset(records([*bad, *good]), SPEC, train=True, seed=3)
    # One worker process and a loader timeout: a stuck worker raises instead of waiting forever.
    loader = DataLoader(dataset, batch_size=4, num_workers=1, collate_fn=collate, timeout=60)
    batches = within(DEADLINE_S, read_all, loader)
    assert sum(len(b["label"]) for b in batches) == len(dataset)
    assert all(b["inputs"]["rgb"].shape[1:] == (3, 8, 16, 16) for b in batches)
    reported = {path: reason for b in batches for path, reason in b["skipped"]}
    assert set(reported) == {str(p) for p in bad}
    assert all(reported.values())
    assert "file not found" in reported[str(bad[-1])]


def test_evaluation_reports_the_truncated_file(corpus: Corpus) -> None:
    paths = [corpus.truncated_indexed, *corpus.unusual.values()]
    dataset = VideoClipDataset(records(paths), SPEC, train=False)
    items = within(DEADLINE_S, lambda: [dataset[i] for i in range(len(dataset))])
    reported = {p for it in items for p, _ in it["skipped"]}
    assert reported == {str(corpus.truncated_indexed)}
    # Evaluation substitutes nothing: the truncated file is marked, the rest are read.
    assert [it["readable"] for it in items] == [False] + [True] * (len(items) - 1)


def jpeg_frames(n: int) -> list[bytes]:
    return [encode_jpeg(f, quality=80) for f in marked_frames(n, width=16, height=16)]


def add(tar: tarfile.TarFile, name: str, data: bytes = b"", **kind: Any) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for key, value in kind.items():
        setattr(info, key, value)
    tar.addfile(info, io.BytesIO(data) if info.isreg() else None)


def test_streaming_reader_rejects_escaping_members_and_writes_nothing(tmp_path: Path) -> None:
    """A foreign shard whose members try to leave the dataset directory, between and inside
    the records of two good videos."""
    root = tmp_path / "prepared"
    (root / "train").mkdir(parents=True)
    shard = root / "train" / "shard-00000.tar"
    frames = jpeg_frames(4)
    escape_names = ["../escape.jpg", "../../escape/000000.jpg", "good_b/../../../up.jpg"]
    with tarfile.open(shard, "w", format=tarfile.GNU_FORMAT) as tar:
        for i, f in enumerate(frames):
            add(tar, f"good_a/{i:06d}.jpg", f)
        for name in escape_names:
            add(tar, name, b"owned")
        add(tar, str(tmp_path / "absolute.jpg"), b"owned")
        add(tar, "good_b/000000.jpg", type=tarfile.SYMTYPE, linkname="/etc/passwd")
        add(tar, "good_b/000001.jpg", type=tarfile.LNKTYPE, linkname="../escape.jpg")
        for i, f in enumerate(frames):
            add(tar, f"good_b/{i:06d}.jpg", f)
    with tarfile.open(shard) as tar:  # where each frame's data landed
        placed = {m.name: m for m in tar.getmembers() if m.isreg()}
    entries = [
        ShardEntry(
            id=vid,
            shard=shard,
            offsets=np.array([placed[f"{vid}/{i:06d}.jpg"].offset_data for i in range(4)]),
            sizes=np.array([len(f) for f in frames], dtype=np.int32),
            label=label,
            fps=15.0,
            path=f"{vid}.mp4",
            width=16,
            height=16,
        )
        for label, vid in enumerate(("good_a", "good_b"))
    ]
    problems: list[tuple[str, str]] = []
    videos = within(DEADLINE_S, lambda: list(iter_videos(shard, problems=problems)))
    assert [(v.id, len(v.frames)) for v in videos] == [("good_a", 4), ("good_b", 4)]
    reasons = " | ".join(r for _, r in problems)
    for name in escape_names:
        assert repr(name) in reasons
    assert reasons.count("not a regular file") == 2

    spec = ClipSpec(frames=4, crop_size=16, short_side=16, flip=False)
    stream = StreamingShardDataset(entries, spec, batch_size=1, shuffle_buffer=4)
    items = within(DEADLINE_S, lambda: [it for batch in stream for it in batch])
    assert sorted(it["index"] for it in items) == [0, 1]
    assert all(it["inputs"]["rgb"].shape == (3, 4, 16, 16) for it in items)
    reported = " | ".join(r for it in items for _, r in it["skipped"])
    assert "'../escape.jpg'" in reported and "not a regular file" in reported
    leftovers = sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
    assert leftovers == ["shard-00000.tar"], "a member was extracted"


# memory --------------------------------------------------------------------------------------


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_memory_stays_bounded_over_hundreds_of_reads(corpus: Corpus) -> None:
    """300 reads (failures included) in one process, after warmup: RSS grows by < 8 MiB."""
    paths = [*corpus.bad.values(), *corpus.unusual.values(), corpus.truncated_indexed]
    dataset = VideoClipDataset(records(paths), SPEC, train=True, seed=0)

    def read(epochs: range) -> None:
        for epoch in epochs:
            dataset.set_epoch(epoch)
            for i in range(len(dataset)):
                dataset[i]

    per_epoch = len(dataset)
    within(DEADLINE_S, read, range(3))  # warmup: caches, allocator pools, codec tables
    start = resident_bytes()
    within(DEADLINE_S, read, range(3, 3 + 300 // per_epoch + 1))
    grown = resident_bytes() - start
    assert grown < 8 << 20, f"RSS grew by {grown / 2**20:.1f} MiB over 300 reads"
