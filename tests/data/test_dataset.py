from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from tests.data.videos import textured_frames, write_video, write_with_muxer
from vidscale.data import dataset as dataset_module
from vidscale.data.annotations import VideoRecord
from vidscale.data.clip import ClipSpec
from vidscale.data.dataset import VideoClipDataset, collate
from vidscale.data.media.decode import decode_frames, probe
from vidscale.data.read_health import UnreadableData, UnreadableLimit


def records(tmp_path: Path) -> list[VideoRecord]:
    good = [
        write_with_muxer(tmp_path / f"v{i}.mp4", textured_frames(16, seed=i), gop=8)
        for i in range(3)
    ]
    (tmp_path / "empty.mp4").write_bytes(b"")
    (tmp_path / "text.mp4").write_text("not a video")
    short = write_video(tmp_path / "short.mp4", 2)
    return [
        VideoRecord(p, i % 2)
        for i, p in enumerate([*good, tmp_path / "empty.mp4", tmp_path / "text.mp4", short])
    ]


def test_items_and_deterministic_augmentation(tmp_path: Path) -> None:
    spec = ClipSpec(frames=4, crop_size=24, short_side=32, scales=(1.0, 0.875))
    ds = VideoClipDataset(records(tmp_path)[:3], spec, train=True, seed=1)
    ds.set_epoch(2)
    a, b = ds[1], ds[1]
    assert a["inputs"]["rgb"].shape == (3, 4, 24, 24) and a["inputs"]["rgb"].dtype == torch.uint8
    assert (
        torch.equal(a["inputs"]["rgb"], b["inputs"]["rgb"])
        and a["label"] == 1
        and a["skipped"] == []
    )
    assert a["index"] == 1
    draws = set()
    for epoch in range(6):  # new epochs draw new crops (a few may coincide)
        ds.set_epoch(epoch)
        draws.add(ds[1]["inputs"]["rgb"].numpy().tobytes())
    assert len(draws) > 1
    other_seed = VideoClipDataset(records(tmp_path)[:3], spec, train=True, seed=2)
    other_seed.set_epoch(2)
    assert not torch.equal(other_seed[1]["inputs"]["rgb"], a["inputs"]["rgb"])


def test_eval_clip_matches_direct_decode(tmp_path: Path) -> None:
    recs = records(tmp_path)[:1]
    spec = ClipSpec(frames=4, crop_size=32, short_side=32)
    item = VideoClipDataset(recs, spec, train=False)[0]
    direct = decode_frames(recs[0].path, [2, 6, 10, 14])
    assert torch.equal(item["inputs"]["rgb"], torch.from_numpy(direct).permute(3, 0, 1, 2))


def test_dense_sampling_and_short_videos(tmp_path: Path) -> None:
    recs = records(tmp_path)
    spec = ClipSpec(frames=4, sampling="dense", stride=2, crop_size=32, short_side=32)
    ds = VideoClipDataset([recs[0], recs[5]], spec, train=False)
    item = ds[0]
    direct = decode_frames(recs[0].path, [4, 6, 8, 10])  # centred: room 16 - 7 = 9, start 4
    assert torch.equal(item["inputs"]["rgb"], torch.from_numpy(direct).permute(3, 0, 1, 2))
    short = ds[1]  # 2 frames: the last one repeats
    assert short["skipped"] == [] and short["inputs"]["rgb"].shape == (3, 4, 32, 32)
    assert torch.equal(short["inputs"]["rgb"][:, 1], short["inputs"]["rgb"][:, 3])


def test_each_video_is_probed_once_per_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[Path] = []

    def counting_probe(path: Path) -> object:
        calls.append(path)
        return probe(path)

    monkeypatch.setattr(dataset_module, "probe", counting_probe)
    ds = VideoClipDataset(records(tmp_path)[:2], ClipSpec(frames=4, crop_size=32), train=True)
    for epoch in range(3):
        ds.set_epoch(epoch)
        ds[0], ds[1]
    assert sorted(calls) == sorted(r.path for r in ds.records)


def test_training_replaces_corrupt_videos_and_reports_them(tmp_path: Path) -> None:
    recs = records(tmp_path)
    spec = ClipSpec(frames=4, crop_size=24, short_side=32)
    ds = VideoClipDataset(recs, spec, train=True, seed=5)
    ds.set_epoch(1)
    items = [ds[i] for i in range(len(ds))]
    batch = collate(items)
    assert (
        batch["inputs"]["rgb"].shape == (6, 3, 4, 24, 24)
        and batch["inputs"]["rgb"].dtype == torch.uint8
    )
    assert batch["index"].tolist() == list(range(6)) and batch["label"].dtype == torch.long
    assert batch["unreadable"] == [] and all(it["readable"] for it in items)
    reported = {Path(p).name: reason for p, reason in batch["skipped"]}
    assert set(reported) == {"empty.mp4", "text.mp4"}
    assert "zero-byte" in reported["empty.mp4"]
    assert "DecodeError" in reported["text.mp4"]
    for i in (3, 4):  # the substitute's own label comes with its clip
        # The successful read used the stream (seed, epoch, index, attempt), attempt = failures.
        attempt = len(items[i]["skipped"])
        (substitute,) = [
            j
            for j in (0, 1, 2, 5)
            if torch.equal(
                items[i]["inputs"]["rgb"],
                ds.load_views(j, np.random.default_rng((5, 1, i, attempt))),
            )
        ]
        assert items[i]["label"] == recs[substitute].label


def test_evaluation_marks_corrupt_videos_unreadable_and_substitutes_nothing(
    tmp_path: Path,
) -> None:
    recs = records(tmp_path)
    ds = VideoClipDataset(recs, ClipSpec(frames=4, crop_size=32, short_side=32), train=False)
    items = [ds[i] for i in range(len(ds))]
    for i in (3, 4):  # the video's own label and index, no clip, exactly one report: itself
        item = items[i]
        assert item["readable"] is False and item["inputs"] == {}
        assert (item["label"], item["index"]) == (recs[i].label, i)
        assert [p for p, _ in item["skipped"]] == [str(recs[i].path)]
    assert ds[3] == items[3]  # the remembered failure gives the same item
    assert all(items[i]["readable"] and items[i]["skipped"] == [] for i in (0, 1, 2, 5))

    batch = collate(items)  # mixed: rows are the readable items only, in order
    assert (
        batch["inputs"]["rgb"].shape == (4, 3, 4, 32, 32)
        and batch["inputs"]["rgb"].dtype == torch.uint8
    )
    assert batch["index"].tolist() == [0, 1, 2, 5]
    assert batch["label"].tolist() == [recs[i].label for i in (0, 1, 2, 5)]
    for row, i in enumerate((0, 1, 2, 5)):
        assert torch.equal(batch["inputs"]["rgb"][row], items[i]["inputs"]["rgb"])
    reported = {Path(p).name: reason for p, reason in batch["unreadable"]}
    assert set(reported) == {"empty.mp4", "text.mp4"} and len(batch["unreadable"]) == 2
    assert "zero-byte" in reported["empty.mp4"] and "DecodeError" in reported["text.mp4"]
    assert batch["skipped"] == batch["unreadable"]

    none = collate([items[3], items[4]])  # no row at all
    assert none["inputs"] == {}
    assert none["label"].shape == none["index"].shape == (0,)
    assert none["label"].dtype == none["index"].dtype == torch.long
    assert len(none["unreadable"]) == 2


def test_evaluation_loader_workers_carry_unreadable_items(tmp_path: Path) -> None:
    recs = records(tmp_path)
    ds = VideoClipDataset(recs, ClipSpec(frames=4, crop_size=32, short_side=32), train=False)
    loader = DataLoader(ds, batch_size=2, num_workers=2, collate_fn=collate)
    batches = list(loader)  # [0, 1], [2, 3] mixed, [4, 5] mixed
    assert [b["index"].tolist() for b in batches] == [[0, 1], [2], [5]]
    assert [len(b["unreadable"]) for b in batches] == [0, 1, 1]


def test_substitutes_do_not_depend_on_what_a_worker_saw_before(tmp_path: Path) -> None:
    recs = records(tmp_path)
    spec = ClipSpec(frames=4, crop_size=24, short_side=32)
    fresh = VideoClipDataset(recs, spec, train=True, seed=3)
    warm = VideoClipDataset(recs, spec, train=True, seed=3)
    for i in range(len(recs)):  # `warm` has already failed on the bad videos once
        warm[i]
    for i in (3, 4):
        a, b = fresh[i], warm[i]
        assert torch.equal(a["inputs"]["rgb"], b["inputs"]["rgb"]) and a["skipped"] == b["skipped"]
        assert len(a["skipped"]) >= 1


def test_loader_workers_give_the_same_batches(tmp_path: Path) -> None:
    recs = records(tmp_path)
    ds = VideoClipDataset(recs, ClipSpec(frames=4, crop_size=24, short_side=32), train=True)
    ds.set_epoch(1)
    serial = collate([ds[i] for i in range(len(ds))])
    loader = DataLoader(ds, batch_size=6, num_workers=2, collate_fn=collate)
    (parallel,) = list(loader)
    assert torch.equal(serial["inputs"]["rgb"], parallel["inputs"]["rgb"])
    assert serial["skipped"] == parallel["skipped"]


def test_stops_when_most_recent_reads_fail(tmp_path: Path) -> None:
    recs = records(tmp_path)[3:5]  # both unreadable
    limit = UnreadableLimit(max_share=0.5, window=8, min_reads=4)
    ds = VideoClipDataset(recs, ClipSpec(frames=4, crop_size=32), train=True, unreadable=limit)
    with pytest.raises(UnreadableData, match="4 of the last 4 reads failed") as err:
        ds[0]
    assert len(str(err.value).splitlines()) == 1
    assert "empty.mp4 (" in str(err.value) and "text.mp4" in str(err.value)
    assert "`vidscale prepare` lists every unreadable file in its manifest" in str(err.value)


def test_a_few_failures_among_many_reads_go_on(tmp_path: Path) -> None:
    recs = records(tmp_path)[:5]  # 3 readable, 2 not
    limit = UnreadableLimit(max_share=0.5, window=8, min_reads=4)
    ds = VideoClipDataset(recs, ClipSpec(frames=4, crop_size=32), train=True, unreadable=limit)
    items = [ds[i % 3] for i in range(20)] + [ds[3], ds[4]]
    assert all(it["readable"] for it in items)
    assert {Path(p).name for it in items for p, _ in it["skipped"]} == {"empty.mp4", "text.mp4"}


def test_the_stop_raised_in_a_loader_worker_is_one_line(tmp_path: Path) -> None:
    recs = records(tmp_path)[3:5]
    limit = UnreadableLimit(max_share=0.5, window=8, min_reads=4)
    ds = VideoClipDataset(recs, ClipSpec(frames=4, crop_size=32), train=True, unreadable=limit)
    loader = DataLoader(ds, batch_size=2, num_workers=1, collate_fn=collate)
    with pytest.raises(UnreadableData) as err:
        next(iter(loader))
    assert "Traceback" in err.value.args[0]  # DataLoader's re-raise carries the worker's
    assert str(err.value).startswith("training data mostly unreadable: 4 of the last 4 reads")
    assert len(str(err.value).splitlines()) == 1


@pytest.mark.slow
def test_multi_view_eval(tmp_path: Path) -> None:
    recs = records(tmp_path)
    spec = ClipSpec(frames=4, crop_size=24, short_side=32, num_clips=2, num_crops=3)
    ds = VideoClipDataset(recs, spec, train=False)
    item = ds[0]
    assert item["inputs"]["rgb"].shape == (6, 3, 4, 24, 24)
    assert not np.array_equal(item["inputs"]["rgb"][0].numpy(), item["inputs"]["rgb"][3].numpy())
    batch = collate([ds[i] for i in (0, 3, 1)])  # an unreadable video between two readable
    assert batch["inputs"]["rgb"].shape == (2, 6, 3, 4, 24, 24) and batch["index"].tolist() == [
        0,
        1,
    ]
    assert torch.equal(batch["inputs"]["rgb"][0], item["inputs"]["rgb"])
    assert [Path(p).name for p, _ in batch["unreadable"]] == ["empty.mp4"]
