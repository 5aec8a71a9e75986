"""`prepare` on real (tiny) H.264 videos: exact frames, skipped files, resume, determinism."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vidscale.data.annotations import VideoRecord
from vidscale.data.layouts import LayoutSplits, read_layout
from vidscale.data.media.decode import decode_frames
from vidscale.data.prepared.encode import repeat_counts, resize_short_side
from vidscale.data.prepared.prepare import (
    PrepareError,
    open_prepared,
    prepare_dataset,
    prepare_from_layout,
)
from vidscale.data.prepared.shards import ShardReader, decode_jpeg, encode_jpeg
from vidscale.data.synthetic.videos import write_synthetic_dataset
from vidscale.data.synthetic.writer import encode_h264

QUIET: dict[str, Any] = {"workers": 1, "progress": False}


def moving_frames(n: int, height: int, width: int, seed: int) -> np.ndarray:
    """A gradient drifting right: smooth content that changes every frame."""
    y, x = np.mgrid[0:height, 0:width]
    shift = np.random.default_rng(seed).integers(0, 50)
    frames = [
        np.stack([(x * 5 + 9 * t + shift) % 256, y * 6, (x + y + t) * 3 % 256], axis=-1)
        for t in range(n)
    ]
    return np.asarray(frames, dtype=np.uint8)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo dataset (8 train + 8 val videos) plus one corrupt file in train.csv."""
    root = tmp_path_factory.mktemp("demo")
    write_synthetic_dataset(root, seed=0, train_per_class=1, val_per_class=1, num_frames=8)
    (root / "videos" / "broken.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42 garbage")
    with (root / "train.csv").open("a") as f:
        f.write("videos/broken.mp4,moving_left\n")
    return root


def test_frames_equal_a_direct_decode_resize_jpeg_round_trip(demo: Path, tmp_path: Path) -> None:
    out = tmp_path / "prep"
    manifest = prepare_from_layout("generic", demo, out, short_side=24, quality=80, **QUIET)
    assert manifest.counts["train"] == 8 and manifest.counts["val"] == 8
    assert [Path(p).name for p, _ in manifest.skipped] == ["broken.mp4"]
    assert "DecodeError" in manifest.skipped[0][1]
    assert json.loads((out / "manifest.json").read_text())["counts"] == manifest.counts

    data = open_prepared(out)
    assert data.classes == (demo / "classes.txt").read_text().split()
    ids = [e.id for e in data.train]
    assert len(set(ids)) == 8 and ids != sorted(ids)  # packed in a random order
    reader = ShardReader()
    for entry in data.train[:3] + data.val[:1]:
        assert (entry.num_frames, entry.fps, entry.width, entry.height) == (8, 15.0, 24, 24)
        raw = decode_frames(Path(entry.path), list(range(8)))
        expected = [decode_jpeg(encode_jpeg(resize_short_side(f, 24), quality=80)) for f in raw]
        np.testing.assert_array_equal(reader.read_frames(entry, range(8)), np.stack(expected))
    rows = [r.split(",") for r in (demo / "train.csv").read_text().splitlines()[1:]]
    label_of = {str(demo / path): name for path, name in rows}
    assert all(data.classes[e.label] == label_of[e.path] for e in data.train)


def snapshot(directory: Path) -> dict[str, bytes]:
    files = sorted(p for p in directory.rglob("*") if p.is_file())
    return {str(p.relative_to(directory)): p.read_bytes() for p in files}


def test_resume_keeps_completed_shards_and_reruns_are_idempotent(
    demo: Path, tmp_path: Path
) -> None:
    options: dict[str, Any] = {"short_side": 0, "quality": 75, "shard_bytes": 30_000, "seed": 3}
    full = tmp_path / "full"
    prepare_from_layout("generic", demo, full, **options, **QUIET)
    reference = snapshot(full)
    assert len([k for k in reference if k.startswith("train/shard-")]) >= 6  # several shards

    # A second run over a finished directory changes nothing.
    prepare_from_layout("generic", demo, full, **options, **QUIET)
    assert snapshot(full) == reference

    # Interrupt: the last train shard never completed and a half-written one is left over.
    shutil.copytree(full, tmp_path / "cut")
    cut = tmp_path / "cut"
    last = sorted((cut / "train").glob("shard-*.tar"))[-1]
    last.unlink()
    last.with_suffix(".jsonl").unlink()
    (cut / "train" / "shard-00077.tar.tmp").write_bytes(b"half")
    for name in ("index_train.jsonl", "index_val.jsonl", "manifest.json"):
        (cut / name).unlink()
    kept = {p: p.stat().st_mtime_ns for p in (cut / "train").glob("shard-*.tar")}
    prepare_from_layout("generic", demo, cut, **options, **QUIET)
    assert all(p.stat().st_mtime_ns == t for p, t in kept.items())  # not rewritten
    assert not list(cut.rglob("*.tmp"))
    before, after = open_prepared(full), open_prepared(cut)
    assert {(e.path, e.label) for e in after.train} == {(e.path, e.label) for e in before.train}
    reader = ShardReader()
    for a in after.train:
        b = next(e for e in before.train if e.path == a.path)
        assert reader.read_bytes(a, range(a.num_frames)) == reader.read_bytes(
            b, range(b.num_frames)
        )

    with pytest.raises(PrepareError, match="Use a new output directory"):
        prepare_from_layout("generic", demo, full, **{**options, "quality": 90}, **QUIET)

    # A corrected label reaches the index without re-encoding anything.
    splits = read_layout("generic", demo, skip_missing=True)
    moved = [VideoRecord(r.path, (r.label + 1) % 8) for r in splits.train]
    prepare_dataset(replace(splits, train=moved), full, **options, **QUIET)
    relabelled = {e.path: e.label for e in open_prepared(full).train}
    assert relabelled == {e.path: (e.label + 1) % 8 for e in before.train}
    shard_files = {k: v for k, v in snapshot(full).items() if "shard-" in k}
    assert shard_files == {k: v for k, v in reference.items() if "shard-" in k}


def test_worker_processes_give_byte_identical_shards(demo: Path, tmp_path: Path) -> None:
    options: dict[str, Any] = {"short_side": 0, "quality": 75, "shard_bytes": 30_000, "seed": 5}
    prepare_from_layout("generic", demo, tmp_path / "one", workers=1, progress=False, **options)
    prepare_from_layout("generic", demo, tmp_path / "two", workers=2, progress=False, **options)
    assert snapshot(tmp_path / "one") == snapshot(tmp_path / "two")


def test_repeat_counts_resample_frame_rates() -> None:
    take = lambda src, fps, n: [next(it) for it in [repeat_counts(src, fps)] for _ in range(n)]  # noqa: E731
    assert take(30, 15, 6) == [1, 0, 1, 0, 1, 0]
    assert take(10, 15, 4) == [2, 1, 2, 1]
    assert take(29.97, None, 3) == [1, 1, 1]
    assert sum(take(30000 / 1001, 25, 3000)) == 2503  # 3000 frames at 29.97 -> 100.1 s at 25


def test_fps_resampling_and_short_side(tmp_path: Path) -> None:
    video = tmp_path / "v.mp4"
    encode_h264(moving_frames(10, 24, 40, seed=0), video, fps=10, gop=4)
    splits = LayoutSplits(classes=["a"], train=[VideoRecord(video, 0)], val=[])
    half = prepare_dataset(splits, tmp_path / "half", fps=5, short_side=12, **QUIET)
    double = prepare_dataset(splits, tmp_path / "double", fps=20, short_side=12, **QUIET)
    assert half.counts["frames"] == 5 and double.counts["frames"] == 20
    (h,), (d,) = open_prepared(tmp_path / "half").train, open_prepared(tmp_path / "double").train
    assert (h.fps, h.width, h.height) == (5.0, 20, 12)
    reader = ShardReader()
    assert reader.read_frames(h, [0]).shape == (1, 12, 20, 3)
    hb, db = reader.read_bytes(h, range(5)), reader.read_bytes(d, range(20))
    assert [hb[k] for k in range(5)] == [db[4 * k] for k in range(5)]  # source frames 0, 2, ...
    assert all(db[2 * k] == db[2 * k + 1] for k in range(10))  # each source frame twice


def test_prepare_ucf101_and_kinetics_layouts(tmp_path: Path) -> None:
    ucf = tmp_path / "ucf"
    classes = ["Biking", "Archery"]  # classInd order, not alphabetical
    (ucf / "ucfTrainTestlist").mkdir(parents=True)
    (ucf / "ucfTrainTestlist" / "classInd.txt").write_text("1 Biking\n2 Archery\n")
    train: list[str] = []
    test: list[str] = []
    for i, c in enumerate(classes):
        for g, lst in (("g08", train), ("g01", test)):
            rel = f"{c}/v_{c}_{g}_c01.avi"
            encode_h264(moving_frames(6, 32, 32, seed=i), ucf / "UCF-101" / rel, fps=25, gop=6)
            lst.append(f"{rel} {i + 1}" if lst is train else rel)
    (ucf / "ucfTrainTestlist" / "trainlist01.txt").write_text("\n".join(train) + "\n")
    (ucf / "ucfTrainTestlist" / "testlist01.txt").write_text("\n".join(test) + "\n")
    prepare_from_layout("ucf101", ucf, tmp_path / "ucf_prep", split=1, short_side=0, **QUIET)
    data = open_prepared(tmp_path / "ucf_prep")
    assert data.classes == classes
    assert sorted((Path(e.path).name, e.label) for e in data.val) == [
        ("v_Archery_g01_c01.avi", 1),
        ("v_Biking_g01_c01.avi", 0),
    ]

    kin = tmp_path / "kinetics"
    header = "label,youtube_id,time_start,time_end,split\n"
    (kin / "train").mkdir(parents=True)
    (kin / "train.csv").write_text(header + "yoga,AAAAAAAAAAA,0,10,train\nyoga,gone,5,9,train\n")
    (kin / "validate.csv").write_text(header + "yoga,BBBBBBBBBBB,3,13,val\n")
    clip = kin / "train" / "yoga" / "AAAAAAAAAAA_000000_000010.mp4"
    encode_h264(moving_frames(6, 32, 32, 1), clip, fps=25, gop=6)
    encode_h264(moving_frames(6, 32, 32, 2), kin / "val" / "BBBBBBBBBBB.mp4", fps=25, gop=6)
    manifest = prepare_from_layout(
        "kinetics", kin, tmp_path / "kin_prep", skip_missing=True, short_side=0, **QUIET
    )
    assert (manifest.counts["train"], manifest.counts["val"]) == (1, 1)
    assert len(manifest.skipped) == 1 and "train.csv:3: missing video" in manifest.skipped[0][1]
    assert open_prepared(tmp_path / "kin_prep").classes == ["yoga"]
