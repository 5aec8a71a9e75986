from pathlib import Path

import numpy as np
import torch

from tests.data.videos import write_video
from vidscale.data.annotations import VideoRecord
from vidscale.data.dataset import ClipSpec, VideoClipDataset, collate
from vidscale.data.decode import decode_frames


def records(tmp_path: Path) -> list[VideoRecord]:
    good = [write_video(tmp_path / f"v{i}.mp4", 16) for i in range(3)]
    (tmp_path / "empty.mp4").write_bytes(b"")
    (tmp_path / "text.mp4").write_text("not a video")
    short = write_video(tmp_path / "short.mp4", 2)  # dense 8 frames at stride 2 needs... clamps
    return [
        VideoRecord(p, i % 2)
        for i, p in enumerate([*good, tmp_path / "empty.mp4", tmp_path / "text.mp4", short])
    ]


def test_items_and_deterministic_augmentation(tmp_path: Path) -> None:
    spec = ClipSpec(frames=4, crop_size=24, short_side=32, scales=(1.0, 0.875))
    ds = VideoClipDataset(records(tmp_path)[:3], spec, train=True, seed=1)
    ds.set_epoch(2)
    a, b = ds[1], ds[1]
    assert a["clip"].shape == (3, 4, 24, 24) and a["clip"].dtype == torch.uint8
    assert torch.equal(a["clip"], b["clip"]) and a["label"] == 1 and a["skipped"] == []
    draws = set()
    for epoch in range(6):  # new epochs draw new crops (a few may coincide)
        ds.set_epoch(epoch)
        draws.add(ds[1]["clip"].numpy().tobytes())
    assert len(draws) > 1


def test_eval_clip_matches_direct_decode(tmp_path: Path) -> None:
    recs = records(tmp_path)[:1]
    spec = ClipSpec(frames=4, crop_size=32, short_side=32)
    item = VideoClipDataset(recs, spec, train=False)[0]
    direct = decode_frames(recs[0].path, [2, 6, 10, 14])
    assert torch.equal(item["clip"], torch.from_numpy(direct).permute(3, 0, 1, 2))


def test_corrupt_videos_are_replaced_and_reported(tmp_path: Path) -> None:
    recs = records(tmp_path)
    ds = VideoClipDataset(recs, ClipSpec(frames=4, crop_size=32, short_side=32), train=False)
    batch = collate([ds[i] for i in range(len(ds))])
    assert batch["clip"].shape == (6, 3, 4, 32, 32)
    reported = {Path(p).name: reason for p, reason in batch["skipped"]}
    assert set(reported) == {"empty.mp4", "text.mp4"}
    assert "zero-byte" in reported["empty.mp4"]


def test_multi_view_eval(tmp_path: Path) -> None:
    recs = records(tmp_path)[:1]
    spec = ClipSpec(frames=4, crop_size=24, short_side=32, num_clips=2, num_crops=3)
    item = VideoClipDataset(recs, spec, train=False)[0]
    assert item["clip"].shape == (6, 3, 4, 24, 24)
    assert not np.array_equal(item["clip"][0].numpy(), item["clip"][3].numpy())
