"""A Charades directory in the published format, made here (CSVs with action segments, real
H.264 videos, a video with no action, a missing and an unreadable video), read by
`read_layout("charades")`, sampled into items with multi-hot targets (per clip in training,
per video in evaluation), prepared into shards and read back with the same items."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.data.videos import write_video
from vidscale.data.annotations import AnnotationError, VideoRecord
from vidscale.data.clip import ClipSpec
from vidscale.data.dataset import VideoClipDataset, collate
from vidscale.data.label_sets import ActionSegment, LabelSet, labels_for_clip
from vidscale.data.layouts import read_layout
from vidscale.data.layouts.charades import COLUMNS
from vidscale.data.prepared.prepare import open_prepared, prepare_from_layout
from vidscale.data.prepared.shard_dataset import ShardClipDataset, StreamingShardDataset

CLASSES = ["c000 Holding some clothes", "c001 Opening a door", "c002 Closing a door"]
FRAMES, FPS = 30, 15  # `write_video` writes 15 fps: two-second videos
# (video id, actions): V1's two actions are apart in time, V3 has none.
TRAIN = [("V1", "c000 0.00 0.90;c001 1.10 2.00"), ("V2", "c002 0.00 2.00"), ("V3", "")]
VAL = [("V4", "c001 0.50 1.00;c002 1.50 1.80")]
TRAIN_CLIP = ClipSpec(
    frames=4, sampling="dense", stride=2, crop_size=32, short_side=32, flip=False, scales=(1.0,)
)
EVAL_CLIP = ClipSpec(frames=4, sampling="dense", stride=2, crop_size=32, short_side=32, flip=False)


def write_split(path: Path, rows: list[tuple[str, str]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        for video_id, actions in rows:
            values = {c: "x, y" for c in COLUMNS}  # free text with commas, quoted
            values.update(id=video_id, actions=actions, length="2.00")
            writer.writerow([values[c] for c in COLUMNS])


@pytest.fixture(scope="module")
def charades(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("charades")
    (root / "Charades_v1_classes.txt").write_text("\n".join(CLASSES) + "\n")
    videos = root / "Charades_v1_480"
    videos.mkdir()
    for video_id, _ in TRAIN + VAL:
        write_video(videos / f"{video_id}.mp4", FRAMES)
    (videos / "BAD.mp4").write_bytes(b"not a video at all")  # listed, on disk, unreadable
    write_split(root / "Charades_v1_train.csv", [*TRAIN, ("BAD", "c000 0.00 1.00")])
    write_split(root / "Charades_v1_test.csv", [*VAL, ("GONE", "c001 0.00 1.00")])
    return root


def frame_numbers(clip: torch.Tensor) -> list[int]:
    """The frame indices of a (C, T, H, W) clip of `write_video`'s frames (brightness i / n)."""
    brightness = clip.float().mean(dim=(0, 2, 3))
    return [round(float(b) * (FRAMES - 1) / 255) for b in brightness]


def test_the_layout_reads_label_sets_segments_and_reports_the_missing_video(
    charades: Path,
) -> None:
    splits = read_layout("charades", charades, skip_missing=True)
    assert splits.multi_label and splits.classes == [c.split(" ", 1)[1] for c in CLASSES]
    by_id = {r.path.stem: r for r in splits.train}
    assert set(by_id) == {"V1", "V2", "V3", "BAD"}
    assert all(r.label == -1 for r in splits.train + splits.val)
    assert by_id["V1"].label_set == LabelSet(
        frozenset({0, 1}), (ActionSegment(0, 0.0, 0.9), ActionSegment(1, 1.1, 2.0))
    )
    assert by_id["V3"].label_set == LabelSet(frozenset(), ())  # no action: kept, all negative
    assert [r.path.stem for r in splits.val] == ["V4"]
    [(path, reason)] = splits.missing
    assert path.endswith("GONE.mp4") and reason.startswith(f"{charades}/Charades_v1_test.csv:3")
    with pytest.raises(AnnotationError, match=r"Charades_v1_test\.csv:3: missing video"):
        read_layout("charades", charades)


def test_a_malformed_line_names_the_file_and_line(charades: Path, tmp_path: Path) -> None:
    root = tmp_path / "bad"
    shutil.copytree(charades, root)
    write_split(root / "Charades_v1_train.csv", [TRAIN[0], ("V2", "c009 0.00 1.00")])
    with pytest.raises(AnnotationError, match=r"Charades_v1_train\.csv:3: unknown class 'c009'"):
        read_layout("charades", root, skip_missing=True)


def check_clip_targets(item: dict, record: VideoRecord) -> frozenset[int]:
    """The item's targets are the actions overlapping its frames' span; returns them."""
    frames = frame_numbers(item["inputs"]["rgb"])
    assert frames == sorted(frames) and frames[-1] - frames[0] == 6  # stride 2, 4 frames
    assert record.label_set is not None
    expected = labels_for_clip(record.label_set.segments, frames[0] / FPS, frames[-1] / FPS)
    assert item["label"] == -1 and item["targets"].dtype == torch.float32
    assert torch.equal(item["targets"], multi_hot(expected))
    return expected


def test_training_clips_are_labelled_by_the_actions_they_overlap(charades: Path) -> None:
    splits = read_layout("charades", charades, skip_missing=True)
    dataset = VideoClipDataset(splits.train, TRAIN_CLIP, train=True, seed=3, num_classes=3)
    for epoch in range(4):
        dataset.set_epoch(epoch)
        for i, record in enumerate(dataset.records):
            item = dataset[i]
            if record.path.stem == "BAD":  # substituted by another video, and reported
                assert item["skipped"][0][0].endswith("BAD.mp4")
                continue
            assert record.label_set is not None
            assert check_clip_targets(item, record) <= record.label_set.labels
            if record.path.stem == "V3":
                assert not item["targets"].any()  # no action: every clip all negative


def test_one_video_gives_clips_with_either_action_or_both(charades: Path) -> None:
    [v1] = [
        r for r in read_layout("charades", charades, skip_missing=True).train if r.path.stem == "V1"
    ]
    dataset = VideoClipDataset([v1], TRAIN_CLIP, train=True, seed=0, num_classes=3)
    seen: set[frozenset[int]] = set()
    for epoch in range(200):  # a 0.4 s clip spans both actions (0-0.9 s, 1.1-2 s) 1 time in 8
        dataset.set_epoch(epoch)
        seen.add(check_clip_targets(dataset[0], v1))
        if len(seen) == 3:
            break
    assert seen == {frozenset({0}), frozenset({1}), frozenset({0, 1})}


def multi_hot(labels: frozenset[int]) -> torch.Tensor:
    return torch.tensor([float(c in labels) for c in range(len(CLASSES))])


def test_evaluation_uses_the_whole_video_and_collates_targets(charades: Path) -> None:
    splits = read_layout("charades", charades, skip_missing=True)
    records = splits.val + [r for r in splits.train if r.path.stem in ("BAD", "V3")]
    dataset = VideoClipDataset(records, EVAL_CLIP, train=False, num_classes=len(CLASSES))
    items = [dataset[i] for i in range(len(dataset))]
    assert torch.equal(items[0]["targets"], multi_hot(frozenset({1, 2})))  # V4: both actions
    bad = items[1] if records[1].path.stem == "BAD" else items[2]
    assert not bad["readable"] and torch.equal(bad["targets"], multi_hot(frozenset({0})))
    batch = collate(items)
    assert batch["targets"].shape == (2, len(CLASSES)) and batch["label"].tolist() == [-1, -1]
    assert len(batch["unreadable"]) == 1
    assert torch.equal(batch["targets"][0], items[0]["targets"])


def test_prepared_shards_keep_label_sets_and_give_the_same_items(
    charades: Path, tmp_path: Path
) -> None:
    out = tmp_path / "prepared"
    manifest = prepare_from_layout(
        "charades", charades, out, skip_missing=True, workers=1, progress=False
    )
    assert {Path(p).name for p, _ in manifest.skipped} == {"BAD.mp4", "GONE.mp4"}
    splits = read_layout("charades", charades, skip_missing=True)
    prepared = open_prepared(out)
    sets = {Path(r.path).name: r.label_set for r in splits.train + splits.val}
    assert {Path(e.path).name: e.label_set for e in prepared.train + prepared.val} == {
        name: s for name, s in sets.items() if name != "BAD.mp4"
    }
    entries = sorted(prepared.train, key=lambda e: e.id)
    by_path = {str(r.path.absolute()): r for r in splits.train}
    raw = VideoClipDataset(
        [by_path[e.path] for e in entries], TRAIN_CLIP, train=True, seed=5, num_classes=3
    )
    shards = ShardClipDataset(entries, TRAIN_CLIP, train=True, seed=5, num_classes=3)
    for epoch in range(3):
        raw.set_epoch(epoch)
        shards.set_epoch(epoch)
        for i in range(len(entries)):
            a, b = raw[i], shards[i]
            assert torch.equal(a["targets"], b["targets"]) and a["label"] == b["label"] == -1
            assert frame_numbers(a["inputs"]["rgb"]) == frame_numbers(b["inputs"]["rgb"])


def test_streamed_items_carry_the_map_style_targets(charades: Path, tmp_path: Path) -> None:
    out = tmp_path / "prepared"
    prepare_from_layout("charades", charades, out, skip_missing=True, workers=1, progress=False)
    entries = open_prepared(out).train
    stream = StreamingShardDataset(
        entries, TRAIN_CLIP, batch_size=1, seed=2, epoch=1, shuffle_initial=1, num_classes=3
    )
    shards = ShardClipDataset(entries, TRAIN_CLIP, train=True, seed=2, num_classes=3)
    shards.set_epoch(1)
    items = [item for batch in stream for item in batch]
    assert len(items) == len(entries)
    for item in items:
        expected = shards[item["index"]]
        assert torch.equal(item["targets"], expected["targets"])
        assert np.array_equal(item["inputs"]["rgb"].numpy(), expected["inputs"]["rgb"].numpy())
