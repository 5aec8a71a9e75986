"""The multi-label data contract: the `multilabel` layout over the demo writer's files, items
with multi-hot targets, prepared shards that keep the label sets, `read_splits` checking
`data.multi_label` against the data, config validation, and single-label data as before."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from vidscale.cli import main
from vidscale.config import ConfigError, RunConfig, apply_overrides, validate
from vidscale.data.annotations import VideoRecord
from vidscale.data.clip import ClipSpec
from vidscale.data.data_config import DataConfig
from vidscale.data.dataset import VideoClipDataset, collate
from vidscale.data.label_sets import ActionSegment, LabelSet
from vidscale.data.layouts import read_layout
from vidscale.data.prepared.prepare import open_prepared, prepare_from_layout
from vidscale.data.prepared.shard_dataset import ShardClipDataset
from vidscale.data.prepared.shards import ShardEntry, entry_from_json
from vidscale.data.splits import read_splits
from vidscale.data.synthetic.multilabel import MULTI_LABEL_CLASSES as CLASSES
from vidscale.data.synthetic.multilabel import write_multilabel_dataset
from vidscale.data.targets import check_label_sets, multi_hot

SPEC = ClipSpec(frames=4, crop_size=16, short_side=16, flip=False)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("multilabel")
    write_multilabel_dataset(
        root, seed=1, train_videos=4, val_videos=2, size=16, num_frames=6, workers=1
    )
    return root


def _labels(record: VideoRecord) -> frozenset[int]:
    """A multi-label record's positive classes."""
    assert record.label_set is not None
    return record.label_set.labels


def test_the_layout_reads_the_demo_as_written(demo: Path) -> None:
    splits = read_layout("multilabel", demo)
    assert splits.multi_label and splits.classes == list(CLASSES)
    for split, records in (("train", splits.train), ("val", splits.val)):
        # The demo's rows as written: `path,labels`, class names joined with ';'.
        rows = [line.split(",") for line in (demo / f"{split}.csv").read_text().splitlines()[1:]]
        written = [
            (demo / path, LabelSet(frozenset(CLASSES.index(n) for n in names.split(";") if n)))
            for path, names in rows
        ]
        assert [(r.path, r.label_set) for r in records] == written
        assert all(r.label == -1 and len(_labels(r)) in (2, 3) for r in records)


def test_a_malformed_row_or_a_missing_video_names_the_file_and_line(
    demo: Path, tmp_path: Path
) -> None:
    (tmp_path / "classes.txt").write_text((demo / "classes.txt").read_text())
    (tmp_path / "val.csv").write_text("path,labels\n")
    (tmp_path / "train.csv").write_text("path,labels\nv.mp4,moving_left;nope\n")
    with pytest.raises(ValueError, match=r"train\.csv:2: unknown label 'nope'"):
        read_layout("multilabel", tmp_path)
    (tmp_path / "train.csv").write_text("path,labels\ngone.mp4,moving_left\n")
    with pytest.raises(ValueError, match=r"train\.csv:2: missing video .*gone\.mp4"):
        read_layout("multilabel", tmp_path)
    assert read_layout("multilabel", tmp_path, skip_missing=True).missing[0][0].endswith("gone.mp4")


def test_items_carry_multi_hot_targets_and_batches_stack_them(demo: Path) -> None:
    splits = read_layout("multilabel", demo)
    dataset = VideoClipDataset(splits.train, SPEC, train=True, seed=0, num_classes=len(CLASSES))
    items = [dataset[i] for i in range(len(dataset))]
    for item, record in zip(items, splits.train, strict=True):
        assert record.label_set is not None and item["label"] == -1
        assert torch.equal(item["targets"], multi_hot(record.label_set.labels, len(CLASSES)))
    batch = collate(items)
    assert batch["targets"].shape == (4, len(CLASSES)) and batch["targets"].dtype == torch.float32
    assert batch["targets"].sum(dim=1).tolist() == [len(_labels(r)) for r in splits.train]


def test_prepared_shards_round_trip_and_read_splits_checks_the_label_kind(
    demo: Path, tmp_path: Path
) -> None:
    out = tmp_path / "prepared"
    prepare_from_layout("multilabel", demo, out, workers=1, progress=False)
    prepared = open_prepared(out)
    splits = read_layout("multilabel", demo)
    by_path = {str(r.path.absolute()): r for r in splits.train}
    assert {e.path: e.label_set for e in prepared.train} == {
        p: r.label_set for p, r in by_path.items()
    }
    entries = prepared.train
    raw = VideoClipDataset([by_path[e.path] for e in entries], SPEC, train=True, num_classes=8)
    shards = ShardClipDataset(entries, SPEC, train=True, num_classes=8)
    for i in range(len(entries)):
        assert torch.equal(raw[i]["targets"], shards[i]["targets"])

    data = DataConfig(root=str(out), source="shards", multi_label=True)
    assert read_splits(data).multi_label
    with pytest.raises(ConfigError) as err:
        read_splits(dataclasses.replace(data, multi_label=False))
    assert str(err.value) == (
        f"data.root={out} has label sets but data.multi_label=false: set data.multi_label=true"
    )
    videos = DataConfig(root=str(demo), layout="multilabel", multi_label=True)
    assert len(read_splits(videos).train) == 4


def test_an_index_line_without_label_sets_reads_as_single_label(tmp_path: Path) -> None:
    entry = ShardEntry(
        "v", tmp_path / "s.tar", np.array([512]), np.array([9], np.int32), 3, 15.0, "v.mp4", 8, 8
    )
    line = entry.to_json(tmp_path)
    assert "labels" not in line and "segments" not in line  # single-label lines as before
    assert (
        entry_from_json(json.loads(json.dumps(line)), root=tmp_path, where="i:1").label_set is None
    )
    timed = LabelSet(frozenset({1, 2}), (ActionSegment(1, 0.0, 1.5), ActionSegment(2, 1.0, 2.0)))
    stored = dataclasses.replace(entry, label=-1, label_set=timed).to_json(tmp_path)
    assert stored["labels"] == [1, 2]
    assert (
        entry_from_json(json.loads(json.dumps(stored)), root=tmp_path, where="i:1").label_set
        == timed
    )
    with pytest.raises(ValueError, match=r"i:1: bad index entry"):
        entry_from_json({**stored, "segments": [[1, 0.0]]}, root=tmp_path, where="i:1")


def test_single_label_items_have_no_targets(demo: Path) -> None:
    record = VideoRecord(read_layout("multilabel", demo).train[0].path, 5)
    item = VideoClipDataset([record], SPEC, train=True)[0]
    assert item["label"] == 5 and "targets" not in item
    assert "targets" not in collate([item])


def test_label_sets_are_all_or_none_and_need_the_class_count() -> None:
    one = LabelSet(frozenset({1}))
    assert not check_label_sets([None, None], 0)
    assert check_label_sets([one, LabelSet(frozenset())], 2)
    with pytest.raises(ValueError, match="1 of 2 records have label sets"):
        check_label_sets([one, None], 2)
    with pytest.raises(ValueError, match="need num_classes"):
        check_label_sets([one], 0)
    with pytest.raises(ValueError, match="label 1 is not a class index below 1"):
        check_label_sets([one], 1)


def with_data(**fields: Any) -> RunConfig:
    cfg = RunConfig()
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, **fields))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"layout": "charades"},
            "data.multi_label=false but data.layout=charades has label sets: "
            "set data.multi_label=true",
        ),
        (
            {"layout": "kinetics", "multi_label": True},
            "data.multi_label=true but data.layout=kinetics has one label a video: "
            "set data.multi_label=false",
        ),
        (
            {"eval_aggregate": "median"},
            "data.eval_aggregate must be one of ['mean', 'max'], got 'median'",
        ),
    ],
)
def test_config_validation_is_one_line(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate(with_data(**fields))
    assert str(err.value) == message


def test_prepared_sources_leave_the_check_to_the_index_and_overrides_are_typed() -> None:
    validate(with_data(layout="generic", multi_label=True, source="shards"))
    validate(with_data(layout="charades", multi_label=True, eval_aggregate="max"))
    with pytest.raises(ConfigError, match="data.eval_aggregate: 'median' is not one of"):
        apply_overrides(RunConfig(), ["data.eval_aggregate=median"])


def test_synth_multi_label_writes_the_layout_with_counts_per_class(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    args = ["synth", "--multi-label", "--out", str(out), "--train-per-class", "1"]
    assert main([*args, "--val-per-class", "1", "--size", "16", "--frames", "4"]) == 0
    splits = read_layout("multilabel", out)
    assert (len(splits.train), len(splits.val)) == (len(CLASSES), len(CLASSES))
    assert all(r.label_set is not None for r in splits.train + splits.val)
