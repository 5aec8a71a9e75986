"""Datasets over shards give the raw-video dataset's samples: within JPEG loss of the raw path,
exactly the decode + JPEG round trip, and the same items whether read randomly or streamed."""

from __future__ import annotations

import itertools
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from vidscale.data.annotations import VideoRecord
from vidscale.data.clip import ClipSpec, at_shape, frame_indices, make_clip
from vidscale.data.dataset import VideoClipDataset, collate
from vidscale.data.media.decode import decode_frames
from vidscale.data.prepared.prepare import PreparedData, open_prepared, prepare_from_layout
from vidscale.data.prepared.shard_dataset import ShardClipDataset, StreamingShardDataset
from vidscale.data.prepared.shards import ShardEntry, decode_jpeg, encode_jpeg
from vidscale.data.samplers import BatchRequest, RequestCycle
from vidscale.data.synthetic.videos import write_synthetic_dataset

SPEC = ClipSpec(frames=4, crop_size=24, short_side=32)
QUALITY = 95
SEED = 3


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """16 train + 8 val demo videos (12 frames), about three videos per shard."""
    raw = tmp_path_factory.mktemp("raw")
    write_synthetic_dataset(raw, seed=2, train_per_class=2, val_per_class=1, num_frames=12)
    out = tmp_path_factory.mktemp("prepared")
    options: dict[str, Any] = {"short_side": 0, "quality": QUALITY, "shard_bytes": 70_000}
    prepare_from_layout("generic", raw, out, workers=1, progress=False, **options)
    return out


@pytest.fixture(scope="module")
def data(prepared: Path) -> PreparedData:
    return open_prepared(prepared)


def raw_dataset(entries: list[ShardEntry], spec: ClipSpec, *, train: bool) -> VideoClipDataset:
    records = [VideoRecord(Path(e.path), e.label) for e in entries]
    return VideoClipDataset(records, spec, train=train, seed=SEED)


def mean_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().mean().item()


@pytest.mark.slow
def test_map_items_match_raw_videos_within_jpeg_loss(data: PreparedData) -> None:
    assert len({e.shard for e in data.train}) >= 4
    shard_set = ShardClipDataset(data.train, SPEC, train=True, seed=SEED)
    raw_set = raw_dataset(data.train, SPEC, train=True)
    for ds in (shard_set, raw_set):
        ds.set_epoch(2)
    diffs = []
    for i in range(len(shard_set)):
        a, b = shard_set[i], raw_set[i]
        assert (a["label"], a["index"], a["skipped"]) == (b["label"], b["index"], [])
        assert a["inputs"]["rgb"].shape == b["inputs"]["rgb"].shape == (3, 4, 24, 24)
        diffs.append(mean_abs(a["inputs"]["rgb"], b["inputs"]["rgb"]))
    assert max(diffs) < 5.0  # JPEG at quality 95 on noisy 32x32 frames: ~2-3 grey levels
    # The tolerance discriminates: another epoch's crop of the same video is much further.
    raw_set.set_epoch(3)
    assert (
        np.mean(
            [mean_abs(shard_set[i]["inputs"]["rgb"], raw_set[i]["inputs"]["rgb"]) for i in range(8)]
        )
        > 10
    )

    views = ClipSpec(frames=4, crop_size=24, short_side=28, num_clips=2, num_crops=3)
    a, b = (
        ShardClipDataset(data.val, views, train=False)[5],
        raw_dataset(data.val, views, train=False)[5],
    )
    assert a["inputs"]["rgb"].shape == b["inputs"]["rgb"].shape == (6, 3, 4, 24, 24)
    assert mean_abs(a["inputs"]["rgb"], b["inputs"]["rgb"]) < 5.0


def test_map_items_equal_decode_plus_jpeg_round_trip_exactly(data: PreparedData) -> None:
    ds = ShardClipDataset(data.train, SPEC, train=True, seed=SEED)
    ds.set_epoch(4)
    for index in (0, 7, 15):
        entry = data.train[index]
        rng = np.random.default_rng((SEED, 4, index, 0))  # the dataset's random stream
        idx = frame_indices(entry.num_frames, SPEC, rng=rng)
        frames = decode_frames(Path(entry.path), idx)
        round_trip = np.stack([decode_jpeg(encode_jpeg(f, quality=QUALITY)) for f in frames])
        expected = make_clip(round_trip, SPEC, train=True, rng=rng)[0]
        assert torch.equal(ds[index]["inputs"]["rgb"], expected)


def stream_batches(
    entries: list[ShardEntry],
    *,
    rank: int,
    world_size: int,
    epoch: int,
    workers: int,
    batch_size: int = 2,
    start_batches: int = 0,
) -> list[dict[str, Any]]:
    ds = StreamingShardDataset(
        entries,
        SPEC,
        batch_size=batch_size,
        rank=rank,
        world_size=world_size,
        seed=SEED,
        shuffle_buffer=3,  # smaller than a worker's share, so the buffer really shuffles
    )
    ds.set_epoch(epoch, start_batches=start_batches)
    loader = DataLoader(ds, batch_size=None, num_workers=workers, collate_fn=collate)
    return list(loader)


def one_rank_batches(entries: list[ShardEntry], epoch: int, start: int) -> list[dict[str, Any]]:
    """One rank, two loader workers, batch 3: 16 videos make 5 batches, split 3 + 2."""
    return stream_batches(
        entries, rank=0, world_size=1, epoch=epoch, workers=2, batch_size=3, start_batches=start
    )


def test_streaming_ranks_get_equal_disjoint_shares_of_the_map_items(data: PreparedData) -> None:
    # 16 videos on 3 ranks, batch 2: 5 per rank rounds down to 2 batches each.
    per_rank = [
        stream_batches(data.train, rank=r, world_size=3, epoch=1, workers=2) for r in range(3)
    ]
    assert [len(b) for b in per_rank] == [2, 2, 2]
    indices = [int(i) for batches in per_rank for b in batches for i in b["index"]]
    assert len(indices) == len(set(indices)) == 12
    map_set = ShardClipDataset(data.train, SPEC, train=True, seed=SEED)
    map_set.set_epoch(1)
    for batch in per_rank[0] + per_rank[2]:
        for clip, label, index in zip(
            batch["inputs"]["rgb"], batch["label"], batch["index"], strict=True
        ):
            item = map_set[int(index)]
            assert torch.equal(clip, item["inputs"]["rgb"]) and int(label) == item["label"]


def test_streaming_order_is_a_function_of_seed_and_epoch_and_resumes(data: PreparedData) -> None:
    def order(epoch: int, start: int = 0) -> list[list[int]]:
        return [b["index"].tolist() for b in one_rank_batches(data.train, epoch, start)]

    full = order(5)
    seen = list(itertools.chain.from_iterable(full))
    assert len(full) == 5 and len(set(seen)) == 15
    assert order(5) == full
    assert order(6) != full
    # Resume after b batches: the rest of the epoch, in order, without re-reading the start.
    for start in (1, 2, 4):
        assert order(5, start) == full[start:]


def test_stream_split_covers_the_epoch_without_overlap(data: PreparedData) -> None:
    ranges = []
    for rank in range(2):
        ds = StreamingShardDataset(data.train, SPEC, batch_size=3, rank=rank, world_size=2)
        assert len(ds) == 6  # 16 // 2 = 8 per rank, two whole batches of 3
        ranges += [ds.worker_range(w, 4) for w in range(4)]
    assert sorted(ranges) == ranges and all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    assert (ranges[0][0], ranges[-1][1]) == (0, 12)
    with pytest.raises(ValueError, match="cannot fill a batch"):
        StreamingShardDataset(data.train, SPEC, batch_size=9, world_size=2)


# A multigrid phase's requests: a short cycle of three shapes, two micro-batches per step.
SMALL = replace(SPEC, frames=2, crop_size=16, max_stride=2)
MIDDLE = replace(SPEC, crop_size=20)
CYCLE = RequestCycle((BatchRequest(3, SMALL), BatchRequest(2, MIDDLE), BatchRequest(1)), 6, 2)


def cycle_batches(
    entries: list[ShardEntry],
    requests: RequestCycle,
    *,
    rank: int = 0,
    world_size: int = 1,
    start: int = 0,
) -> list[dict[str, Any]]:
    ds = StreamingShardDataset(
        entries, SPEC, batch_size=2, rank=rank, world_size=world_size, seed=SEED, shuffle_buffer=3
    )
    ds.set_epoch(1, start_batches=start, requests=requests)
    return list(DataLoader(ds, batch_size=None, num_workers=2, collate_fn=collate))


@pytest.mark.slow
def test_streamed_batches_follow_the_epochs_requests_and_equal_map_items(
    data: PreparedData,
) -> None:
    batches = cycle_batches(data.train, CYCLE)
    c = 3
    assert [tuple(b["inputs"]["rgb"].shape) for b in batches] == [
        (3, c, 2, 16, 16),
        (3, c, 2, 16, 16),
        (2, c, 4, 20, 20),
        (2, c, 4, 20, 20),
        (1, c, 4, 24, 24),
        (1, c, 4, 24, 24),
    ]
    indices = [int(i) for b in batches for i in b["index"]]
    assert len(set(indices)) == len(indices) == CYCLE.clips() == 12
    # Each clip is the map-style item (index, spec): the same frames, crop and stride draws.
    reference = ShardClipDataset(data.train, SPEC, train=True, seed=SEED)
    reference.set_epoch(1)
    for b, spec in zip(batches, [SMALL, SMALL, MIDDLE, MIDDLE, SPEC, SPEC], strict=True):
        for clip, index in zip(b["inputs"]["rgb"], b["index"], strict=True):
            assert torch.equal(clip, reference[(int(index), spec)]["inputs"]["rgb"])
    for start in (1, 3, 5):  # resumed between and inside steps: the rest, in order
        rest = cycle_batches(data.train, CYCLE, start=start)
        assert [b["index"].tolist() for b in rest] == [b["index"].tolist() for b in batches[start:]]
    # Two ranks: the same shapes, disjoint videos (2 + 1 + 1 clips twice = 8 per rank).
    two = RequestCycle((BatchRequest(2, SMALL), BatchRequest(1, MIDDLE), BatchRequest(1)), 6)
    ranks = [cycle_batches(data.train, two, rank=r, world_size=2) for r in range(2)]
    assert [b["inputs"]["rgb"].shape for b in ranks[0]] == [
        b["inputs"]["rgb"].shape for b in ranks[1]
    ]
    both = [int(i) for batches in ranks for b in batches for i in b["index"]]
    assert sorted(both) == list(range(16))


def test_streamed_requests_that_do_not_fit_fail_at_once(data: PreparedData) -> None:
    one_rank = StreamingShardDataset(data.train, SPEC, batch_size=2)
    with pytest.raises(ValueError, match="need 18 clips per rank; 16 videos on 1 ranks give 16"):
        one_rank.set_epoch(0, requests=replace(CYCLE, total=8))
    flipped = RequestCycle((BatchRequest(2, replace(SPEC, flip=not SPEC.flip)),), 1)
    with pytest.raises(ValueError, match="frames, crop size and stride only"):
        one_rank.set_epoch(0, requests=flipped)
    assert len(one_rank) == 16  # still the plain epoch: 8 batches of 2


def test_streamed_short_side_jitter_scales_its_min_with_the_requests_crop(
    data: PreparedData,
) -> None:
    """A multigrid shape's request carries the jitter scaled to its crop (`at_shape`); the
    stream rebuilds that same spec from (frames, crop, stride) and cuts the map items' clips."""
    spec = replace(SPEC, crop="short_side_jitter", jitter=(24, 30))
    small = at_shape(spec, frames=2, crop_size=16, max_stride=2)
    assert small.jitter == (16, 30)  # round(24 * 16 / 24), the max kept
    ds = StreamingShardDataset(data.train, spec, batch_size=2, seed=SEED, shuffle_buffer=3)
    ds.set_epoch(1, requests=RequestCycle((BatchRequest(2, small), BatchRequest(2)), 4))
    batches = list(DataLoader(ds, batch_size=None, num_workers=0, collate_fn=collate))
    assert [tuple(b["inputs"]["rgb"].shape) for b in batches] == [
        (2, 3, 2, 16, 16),
        (2, 3, 4, 24, 24),
    ] * 2
    reference = ShardClipDataset(data.train, spec, train=True, seed=SEED)
    reference.set_epoch(1)
    for b, want in zip(batches, [small, spec] * 2, strict=True):
        for clip, index in zip(b["inputs"]["rgb"], b["index"], strict=True):
            assert torch.equal(clip, reference[(int(index), want)]["inputs"]["rgb"])
    unscaled = replace(small, jitter=spec.jitter)  # not a shape of the dataset's spec
    with pytest.raises(ValueError, match="frames, crop size and stride only"):
        ds.set_epoch(1, requests=RequestCycle((BatchRequest(2, unscaled),), 1))


def wipe_frames(entry: ShardEntry) -> None:
    """Overwrite every JPEG frame of one prepared video with zeros."""
    with open(entry.shard, "r+b") as f:
        for offset, size in zip(entry.offsets, entry.sizes, strict=True):
            f.seek(int(offset))
            f.write(b"\0" * int(size))


def test_corrupt_frames_are_reported_and_replaced(prepared: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(prepared, copy)
    data = open_prepared(copy)
    bad = data.train[6]
    wipe_frames(bad)
    item = ShardClipDataset(data.train, SPEC, train=True, seed=SEED)[6]
    assert item["index"] == 6 and item["skipped"][0][0] == bad.path
    assert "corrupt JPEG" in item["skipped"][0][1]

    batches = stream_batches(data.train, rank=0, world_size=1, epoch=0, workers=0)
    assert len(batches) == 8  # still the full count: the range is topped up
    reports = [s for b in batches for s in b["skipped"]]
    assert reports and all(path == bad.path for path, _ in reports)
    assert 6 not in [int(i) for b in batches for i in b["index"]]
    assert all(b["unreadable"] == [] for b in batches)  # training replaces, never leaves out


def test_corrupt_frames_are_not_replaced_in_evaluation(prepared: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(prepared, copy)
    data = open_prepared(copy)
    bad = data.val[2]
    wipe_frames(bad)
    views = ClipSpec(frames=4, crop_size=24, short_side=28, num_clips=2, num_crops=3)
    ds = ShardClipDataset(data.val, views, train=False, seed=SEED)
    item = ds[2]
    assert item["readable"] is False and item["inputs"] == {}
    assert (item["label"], item["index"]) == (bad.label, 2)
    assert [p for p, _ in item["skipped"]] == [bad.path]
    assert "corrupt JPEG" in item["skipped"][0][1]
    batch = collate([ds[i] for i in range(4)])
    assert batch["index"].tolist() == [0, 1, 3]
    assert batch["label"].tolist() == [data.val[i].label for i in (0, 1, 3)]
    assert batch["inputs"]["rgb"].shape == (3, 6, 3, 4, 24, 24)
    assert batch["unreadable"] == item["skipped"]


class _CountingStream(StreamingShardDataset):
    """Records, for every clip yielded, how many videos had been read by then."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.read = 0
        self.read_at_yield: list[int] = []

    def _read(self, *args: Any, **kwargs: Any) -> Any:
        for pending in super()._read(*args, **kwargs):
            self.read += 1
            yield pending

    def _shuffled(self, *args: Any, **kwargs: Any) -> Any:
        for pending in super()._shuffled(*args, **kwargs):
            self.read_at_yield.append(self.read)
            yield pending


@pytest.mark.parametrize(("buffer", "initial"), [(8, 2), (8, 8), (4, 32)])
def test_shuffle_buffer_starts_at_initial_and_grows_to_its_size(
    data: PreparedData, buffer: int, initial: int
) -> None:
    ds = _CountingStream(
        data.train, SPEC, batch_size=1, shuffle_buffer=buffer, shuffle_initial=initial
    )
    indices = [int(item["index"]) for batch in ds for item in batch]
    assert sorted(indices) == list(range(16))  # every video once
    start = min(initial, buffer)
    # held[k]: clips in the buffer when clip k is drawn. The first is drawn once `start` are
    # held (plus the extra read of a growing buffer); each draw then adds one until the buffer
    # is full, and it stays full until the range is read to its end.
    held = [reads - k for k, reads in enumerate(ds.read_at_yield)]
    assert held[0] == (start + 1 if start < buffer else start)
    still_reading = [h for h, reads in zip(held, ds.read_at_yield, strict=True) if reads < 16]
    assert still_reading == [min(held[0] + k, buffer) for k in range(len(still_reading))]
    assert indices != sorted(indices) or buffer == 1


def test_shuffle_settings_are_checked(data: PreparedData) -> None:
    with pytest.raises(ValueError, match="shuffle_initial"):
        StreamingShardDataset(data.train, SPEC, batch_size=1, shuffle_initial=0)


# forkserver: the datasets reach the workers pickled, their shared epoch as a memory handle.
@pytest.mark.slow
@pytest.mark.parametrize("worker_start", [None, "forkserver"])
def test_persistent_workers_follow_set_epoch(data: PreparedData, worker_start: str | None) -> None:
    # Workers started once must see each new epoch and resume position, as fresh workers do.
    stream = StreamingShardDataset(data.train, SPEC, batch_size=3, seed=SEED, shuffle_buffer=3)
    map_style = ShardClipDataset(data.train, SPEC, train=True, seed=SEED)
    options: dict[str, Any] = {
        "collate_fn": collate,
        "persistent_workers": True,
        "multiprocessing_context": worker_start,
    }
    loaders = {
        "stream": DataLoader(stream, batch_size=None, num_workers=2, **options),
        "map": DataLoader(map_style, batch_size=4, num_workers=1, **options),
    }
    for epoch, start in ((0, 0), (1, 0), (1, 2), (2, 0)):
        stream.set_epoch(epoch, start_batches=start)
        fresh = one_rank_batches(data.train, epoch, start)
        persistent = list(loaders["stream"])
        assert [b["index"].tolist() for b in persistent] == [b["index"].tolist() for b in fresh]
        assert all(
            torch.equal(p["inputs"]["rgb"], f["inputs"]["rgb"])
            for p, f in zip(persistent, fresh, strict=True)
        )
        map_style.set_epoch(epoch)
        clips = torch.cat([b["inputs"]["rgb"] for b in loaders["map"]])
        reference = ShardClipDataset(data.train, SPEC, train=True, seed=SEED)
        reference.set_epoch(epoch)
        assert torch.equal(clips, torch.stack([reference[i]["inputs"]["rgb"] for i in range(16)]))
