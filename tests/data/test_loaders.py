"""The data side from the data config alone: the splits and loaders of each `data.source`
(videos, shards, stream) on a tiny real dataset, and the one-line errors of a bad source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from vidscale.config import ConfigError, DataConfig
from vidscale.data.clip import ClipSpec
from vidscale.data.dataset import VideoClipDataset
from vidscale.data.loaders import Placement, eval_dataset, eval_loader, train_data
from vidscale.data.prepared.prepare import FLOW_DIR, prepare_from_layout
from vidscale.data.prepared.shard_dataset import ShardClipDataset, StreamingShardDataset
from vidscale.data.splits import read_splits, recorded_flow
from vidscale.data.synthetic.videos import write_synthetic_dataset

SPEC = ClipSpec(frames=2, crop_size=16, short_side=16)
SOURCES = ("videos", "shards", "stream")


@pytest.fixture(scope="module")
def raw(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("raw")
    write_synthetic_dataset(root, seed=4, train_per_class=1, val_per_class=1, num_frames=4)
    return root


@pytest.fixture(scope="module")
def prepared(raw: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("prepared")
    prepare_from_layout("generic", raw, out, workers=1, progress=False, short_side=0)
    return out


def data_config(source: Any, raw: Path, prepared: Path) -> DataConfig:
    root = raw if source == "videos" else prepared
    return DataConfig(
        root=str(root), source=source, batch_size=2, workers=0, train_clip=SPEC, eval_clip=SPEC
    )


@pytest.mark.parametrize("source", SOURCES)
def test_each_source_reads_the_same_splits_and_gives_batches(
    source: str, raw: Path, prepared: Path
) -> None:
    data = data_config(source, raw, prepared)
    splits = read_splits(data)
    reference = read_splits(data_config("videos", raw, prepared))
    assert splits.classes == reference.classes
    assert (len(splits.train), len(splits.val)) == (len(reference.train), len(reference.val))
    loaded = train_data(data, splits.train, seed=0, micro_batch=2, place=Placement())
    kind = {"videos": VideoClipDataset, "shards": ShardClipDataset}
    assert type(loaded.dataset) is kind.get(source, StreamingShardDataset)
    batch = next(iter(loaded.base_shape_batches(0, batches=1, size=2)))
    assert batch["inputs"]["rgb"].shape == (2, 3, SPEC.frames, SPEC.crop_size, SPEC.crop_size)
    assert set(batch["label"].tolist()) <= set(range(len(splits.classes)))
    # Evaluation reads by random access, a streamed run's too.
    assert type(eval_dataset(data, splits.val, seed=0)) is kind.get(source, ShardClipDataset)


def test_the_eval_loader_shares_the_items_among_the_ranks(raw: Path, prepared: Path) -> None:
    data = data_config("shards", raw, prepared)
    val = read_splits(data).val
    seen = [
        len(list(eval_loader(data, val, seed=0, place=Placement(rank, 2)).sampler))
        for rank in (0, 1)
    ]
    assert sum(seen) == len(val) and max(seen) - min(seen) <= 1


def test_bad_roots_and_sources_are_one_line_config_errors(raw: Path, tmp_path: Path) -> None:
    cases = [
        (DataConfig(), "data.root is not set (pass --data DIR or --set data.root=DIR)"),
        (DataConfig(root=str(tmp_path / "nope")), f"data.root: {tmp_path / 'nope'} is not"),
        (DataConfig(root=str(raw), source="shards"), "data.source=shards: "),
    ]
    for data, message in cases:
        with pytest.raises(ConfigError) as err:
            read_splits(data)
        assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_prepared_flow_brings_its_settings_and_an_unreadable_record_is_named(
    tmp_path: Path,
) -> None:
    flow_clip = ClipSpec(modality="flow")
    videos = DataConfig(root=str(tmp_path), train_clip=flow_clip)
    assert recorded_flow(videos) == videos.flow  # computed from raw videos as configured
    options = tmp_path / FLOW_DIR / "prepare_options.json"
    options.parent.mkdir()
    options.write_text('{"options": {"method": "dis", "short_side": 64, "bound": 15}}')
    shards = DataConfig(root=str(tmp_path), source="shards", train_clip=flow_clip)
    got = recorded_flow(shards)
    assert (got.method, got.short_side, got.bound) == ("dis", 64, 15.0)
    options.write_text("{}")
    with pytest.raises(ConfigError, match=f"cannot read the flow options in {options}"):
        recorded_flow(shards)
