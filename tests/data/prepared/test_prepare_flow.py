"""`prepare --flow`: optical flow shards beside the RGB ones, aligned frame by frame with them,
resumable on their own, on real (tiny) H.264 videos."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from tests.data.videos import write_video
from vidscale.cli import main
from vidscale.data.annotations import VideoRecord
from vidscale.data.layouts import LayoutSplits
from vidscale.data.media.flow import FLOW_BOUND, decode_flow_jpeg, dequantize_flow
from vidscale.data.prepared.prepare import (
    TOO_SHORT,
    PrepareError,
    open_prepared,
    prepare_dataset,
    prepare_from_layout,
)
from vidscale.data.prepared.shards import ShardEntry, ShardReader, iter_videos
from vidscale.data.synthetic.videos import write_synthetic_dataset
from vidscale.data.synthetic.writer import encode_h264

QUIET: dict[str, Any] = {
    "short_side": 24,
    "quality": 90,
    "seed": 0,
    "workers": 1,
    "progress": False,
}
SIZE = 48


def sliding_texture(n: int, *, step: int, seed: int = 0) -> np.ndarray:
    """A smooth random texture sliding `step` px to the right per frame (left when negative)."""
    noise = np.random.default_rng(seed).integers(0, 256, (SIZE, 3 * SIZE, 3)).astype(np.float32)
    smooth = cv2.GaussianBlur(noise, (0, 0), 2)
    base = ((smooth - smooth.min()) * (255 / np.ptp(smooth))).astype(np.uint8)  # full contrast
    return np.stack([np.roll(base, step * i, axis=1)[:, SIZE : 2 * SIZE] for i in range(n)])


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("videos")
    paths = {name: root / f"{name}.mp4" for name in ("right", "left", "right2")}
    for name, step, seed in (("right", 2, 0), ("left", -2, 0), ("right2", 2, 1)):
        encode_h264(sliding_texture(8, step=step, seed=seed), paths[name], fps=15, gop=8)
    for name, n in (("fade", 6), ("fade2", 5), ("one_frame", 1)):
        paths[name] = write_video(root / f"{name}.mp4", n)
    paths["broken"] = root / "broken.mp4"
    paths["broken"].write_bytes(b"\x00\x00\x00\x18ftypmp42 garbage")
    return paths


def splits_of(videos: dict[str, Path]) -> LayoutSplits:
    train = [("right", 0), ("left", 1), ("fade", 0), ("one_frame", 1), ("broken", 0)]
    val = [("right2", 0), ("fade2", 1)]
    return LayoutSplits(
        classes=["right", "left"],
        train=[VideoRecord(videos[name], label) for name, label in train],
        val=[VideoRecord(videos[name], label) for name, label in val],
    )


def described(entries: list[ShardEntry]) -> list[tuple[Any, ...]]:
    return [(e.id, e.path, e.label, e.fps, e.width, e.height) for e in entries]


def shard_files(directory: Path, *, flow: bool) -> dict[str, tuple[bytes, int]]:
    """Bytes and modification time of the RGB (or the flow) shards and sidecars."""
    files = sorted((directory / "flow" if flow else directory).glob("*/shard-*"))
    return {str(p.relative_to(directory)): (p.read_bytes(), p.stat().st_mtime_ns) for p in files}


def flow_planes(entry: ShardEntry) -> np.ndarray:
    """The entry's flows in px as (flows, 2, H, W): frames 2k, 2k + 1 are x, y of flow k."""
    data = ShardReader().read_bytes(entry, range(entry.num_frames))
    planes = [dequantize_flow(decode_flow_jpeg(data[i])) for i in range(entry.num_frames)]
    return np.stack(planes).reshape(entry.num_frames // 2, 2, entry.height, entry.width)


def test_flow_is_a_prepared_directory_aligned_with_the_rgb_one(
    videos: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "prep"
    manifest = prepare_dataset(splits_of(videos), out, flow="dis", **QUIET)
    for name in ("classes.txt", "index_train.jsonl", "index_val.jsonl", "manifest.json"):
        assert (out / "flow" / name).is_file(), name
    assert sorted(p.name for p in (out / "flow" / "train").iterdir()) == [
        "shard-00000.jsonl",
        "shard-00000.tar",
    ]
    saved = json.loads((out / "flow" / "prepare_options.json").read_text())
    assert saved["options"] == {
        "method": "dis",
        "bound": FLOW_BOUND,
        "short_side": 24,
        "fps": None,
        "quality": 90,
    }

    rgb, flow = open_prepared(out), open_prepared(out, modality="flow")
    assert flow.classes == rgb.classes == ["right", "left"]
    for rgb_entries, flow_entries in ((rgb.train, flow.train), (rgb.val, flow.val)):
        with_flow = [e for e in rgb_entries if e.num_frames >= 2]
        assert described(flow_entries) == described(with_flow)
        assert [f.num_frames for f in flow_entries] == [2 * (e.num_frames - 1) for e in with_flow]
    assert len(flow.train) == 3 and len(flow.val) == 2

    # Unchanged readers: streaming a flow shard gives what random access gives.
    problems: list[tuple[str, str]] = []
    streamed = {
        v.id: v.frames for v in iter_videos(out / "flow/train/shard-00000.tar", problems=problems)
    }
    reader = ShardReader()
    assert problems == [] and set(streamed) == {e.id for e in flow.train}
    for e in flow.train:
        assert streamed[e.id] == [reader.read_bytes(e, [i])[i] for i in range(e.num_frames)]

    skipped_rgb = {Path(p).name: why for p, why in manifest.skipped}
    assert manifest.flow is not None
    skipped_flow = {Path(p).name: why for p, why in manifest.flow.skipped}
    assert set(skipped_rgb) == {"broken.mp4"} and "DecodeError" in skipped_rgb["broken.mp4"]
    assert skipped_flow == {"broken.mp4": skipped_rgb["broken.mp4"], "one_frame.mp4": TOO_SHORT}
    assert str(manifest).endswith("; optical flow (dis): 3 train + 2 val videos, skipped 2")
    assert json.loads((out / "flow/manifest.json").read_text())["counts"] == manifest.flow.counts
    assert "flow" not in json.loads((out / "manifest.json").read_text())

    # The RGB shards are those of a preparation without flow.
    plain = tmp_path / "plain"
    prepare_dataset(splits_of(videos), plain, **QUIET)
    rgb_bytes = {k: v[0] for k, v in shard_files(out, flow=False).items()}
    assert rgb_bytes == {k: v[0] for k, v in shard_files(plain, flow=False).items()}


def test_flow_measures_the_motion_between_resampled_resized_frames(
    videos: dict[str, Path], tmp_path: Path
) -> None:
    # 15 -> 30 fps shows every frame twice; 48 -> 24 px halves the 2 px per frame motion.
    splits = LayoutSplits(
        ["right", "left"], [VideoRecord(videos["right"], 0), VideoRecord(videos["left"], 1)], []
    )
    out = tmp_path / "prep"
    prepare_dataset(splits, out, flow="dis", **{**QUIET, "fps": 30})
    rgb = {e.id: e for e in open_prepared(out).train}
    for entry in open_prepared(out, modality="flow").train:
        assert rgb[entry.id].num_frames == 16 and entry.num_frames == 2 * 15
        assert (entry.width, entry.height) == (24, 24)
        flows = flow_planes(entry)
        repeated, moving = flows[0::2], flows[1::2]  # flow k: prepared frame k -> k + 1
        assert np.abs(repeated).mean() < 0.1
        expected = 1.0 if entry.id == "right" else -1.0
        assert abs(moving[:, 0].mean() - expected) < 0.2, (entry.id, moving[:, 0].mean())
        assert abs(moving[:, 1].mean()) < 0.1


def test_resume_recomputes_only_a_missing_flow_shard(
    videos: dict[str, Path], tmp_path: Path
) -> None:
    options = {**QUIET, "shard_bytes": 20_000}  # about one video per shard
    full, cut = tmp_path / "full", tmp_path / "cut"
    prepare_dataset(splits_of(videos), full, flow="dis", **options)
    flow_shards = sorted((full / "flow/train").glob("shard-*.tar"))
    assert len(flow_shards) >= 2
    reference = shard_files(full, flow=True)
    prepare_dataset(splits_of(videos), full, flow="dis", **options)  # finished: left as is
    assert shard_files(full, flow=True) == reference

    shutil.copytree(full, cut)
    last = sorted((cut / "flow/train").glob("shard-*.tar"))[-1]
    last.unlink()
    last.with_suffix(".jsonl").unlink()
    (cut / "flow/index_train.jsonl").unlink()
    rgb_before = shard_files(cut, flow=False)
    kept = shard_files(cut, flow=True)
    prepare_dataset(splits_of(videos), cut, flow="dis", **options)

    assert shard_files(cut, flow=False) == rgb_before  # RGB neither rewritten nor touched
    after = shard_files(cut, flow=True)
    assert {k: after[k] for k in kept} == kept
    reader = ShardReader()
    before = {e.id: e for e in open_prepared(full, modality="flow").train}
    restored = open_prepared(cut, modality="flow").train
    assert sorted(described(restored)) == sorted(described(list(before.values())))
    for e in restored:
        frames = range(e.num_frames)
        assert reader.read_bytes(e, frames) == reader.read_bytes(before[e.id], frames)


def test_flow_added_to_a_finished_rgb_preparation_leaves_its_shards_alone(
    videos: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "prep"
    prepare_dataset(splits_of(videos), out, **QUIET)
    with pytest.raises(FileNotFoundError, match=r"no optical flow was prepared.*--flow dis"):
        open_prepared(out, modality="flow")
    rgb_before = shard_files(out, flow=False)

    manifest = prepare_dataset(splits_of(videos), out, flow="dis", **QUIET)
    assert shard_files(out, flow=False) == rgb_before
    assert manifest.flow is not None and manifest.flow.counts["train"] == 3
    rgb_ids = {e.path: e.id for e in open_prepared(out).train}
    flow_ids = {e.path: e.id for e in open_prepared(out, modality="flow").train}
    assert flow_ids == {p: i for p, i in rgb_ids.items() if Path(p).name != "one_frame.mp4"}

    with pytest.raises(PrepareError, match=r"flow was prepared with .*'dis'.*Use a new"):
        prepare_dataset(splits_of(videos), out, flow="farneback", **QUIET)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("demo")
    write_synthetic_dataset(root, seed=0, train_per_class=1, val_per_class=1, num_frames=6)
    return root


def test_cli_prepares_flow_in_worker_processes(
    demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cli"
    argv = ["prepare", "--root", str(demo), "--out", str(out), "--short-side", "24"]
    assert main([*argv, "--flow", "dis", "--workers", "2", "--no-progress"]) == 0
    assert "; optical flow (dis): 8 train + 8 val videos, skipped 0" in capsys.readouterr().out

    # Worker processes with their own engines write what one process writes.
    api = tmp_path / "api"
    prepare_from_layout("generic", demo, api, flow="dis", **QUIET)
    assert {k: v[0] for k, v in shard_files(out, flow=True).items()} == {
        k: v[0] for k, v in shard_files(api, flow=True).items()
    }


def test_cli_refuses_a_flow_method_this_opencv_lacks(
    demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(cv2, "optflow", raising=False)  # an OpenCV build without contrib
    out = tmp_path / "prep"
    argv = ["prepare", "--root", str(demo), "--out", str(out), "--flow", "tvl1", "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("vidscale: error: --flow tvl1: ") and "opencv-contrib" in err
    assert err.count("\n") == 1 and not out.exists()
