"""The data-loading benchmarks on tiny generated videos: every method reads the same frames,
the counts of decoded frames follow from the method, and the reports are complete."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from vidscale.bench.data import data_wait, dataload
from vidscale.bench.data.bench_videos import PRESETS, BenchVideoSpec, make_bench_videos
from vidscale.bench.data.data_wait import DataWaitConfig
from vidscale.bench.data.dataload import (
    ClipKind,
    DataConfig,
    Method,
    _run_rounds,
    decode_sequential,
    format_data_table,
    format_gains,
    h264_methods,
)
from vidscale.cli import build_parser
from vidscale.config import TrainConfig
from vidscale.data.clip import ClipSpec
from vidscale.data.media.decode import decode_frames, probe
from vidscale.distributed.env import DistEnv
from vidscale.fastpath.subject import ProbeShape
from vidscale.models.registry import ModelConfig
from vidscale.train.builders import decide_model_fast_path

CLIPS = (
    ClipKind("tsn4", ClipSpec(frames=4, sampling="uniform")),
    ClipKind("dense8", ClipSpec(frames=8, sampling="dense", stride=2)),
)
TINY_VIDEOS = BenchVideoSpec(count=2, seconds=1.5, fps=20, width=64, height=48, gops=(250, 6))


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    out = tmp_path_factory.mktemp("bench_videos")
    return make_bench_videos(out, TINY_VIDEOS)


def test_generated_videos_have_the_requested_shape_and_gop(videos: dict[str, list[Path]]) -> None:
    assert sorted(videos) == ["gop250", "gop6"]
    for source, paths in videos.items():
        for path in paths:
            meta = probe(path)
            assert (meta.num_frames, meta.width, meta.height) == (30, 64, 48)
            gaps = np.diff(np.append(meta.keyframes, meta.num_frames))
            assert gaps.max() <= (6 if source == "gop6" else 250)
        assert len(meta.keyframes) == (1 if source == "gop250" else 5)


def test_sequential_decode_gives_the_seeking_decoder_frames(
    videos: dict[str, list[Path]],
) -> None:
    path = videos["gop6"][0]
    indices = np.array([3, 11, 11, 2, 25])
    frames, decoded = decode_sequential(path, indices)
    assert decoded == 26
    np.testing.assert_array_equal(frames, decode_frames(path, indices))


def test_bench_data_reports_every_method_side_by_side(
    videos: dict[str, list[Path]], tmp_path: Path
) -> None:
    out = tmp_path / "bench.json"
    # In a temporary work directory, removed before the report is built.
    cfg = DataConfig(clips=CLIPS, rounds=2, generate=TINY_VIDEOS, threads=2)
    result = dataload.run(cfg, out_json=out)
    assert json.loads(out.read_text()) == result.to_dict()
    assert result.settings["generated"]["crf"] == TINY_VIDEOS.crf
    rows = result.rows
    keys = {(r.clip, r.method, r.source) for r in rows}
    h264 = ("h264_sequential", "h264_seek", "h264_segments", "h264_segments_t2")
    methods = {(m, s) for m in h264 for s in ("gop250", "gop6")} | {("shards", "jpeg")}
    assert keys == {(c.name, m, s) for c in CLIPS for m, s in methods}
    for r in rows:
        assert r.clips == 2 * 2  # rounds x videos
        assert r.cpu_ms > 0 and r.clips_per_s > 0 and r.wall_ms > 0
        if r.method == "shards":  # exactly the frames used (4 distinct, or 8 distinct)
            assert r.frames_decoded == r.frames
        else:
            assert r.frames_decoded >= r.frames
    by = {(r.clip, r.method, r.source): r for r in rows}
    for clip in ("tsn4", "dense8"):
        base = by[(clip, "h264_sequential", "gop250")]
        assert base.speedup_vs_sequential == pytest.approx(1.0)
        # A single GOP: seeking cannot skip anything, so it decodes what the sequential read does.
        seek = by[(clip, "h264_seek", "gop250")]
        assert seek.frames_decoded == base.frames_decoded
        assert seek.speedup_vs_seek == pytest.approx(1.0)
        # Plans skip the B-frames that are not references, on any number of threads.
        segments = by[(clip, "h264_segments", "gop250")]
        assert segments.frames_decoded < seek.frames_decoded
        assert by[(clip, "h264_segments_t2", "gop250")].frames_decoded == segments.frames_decoded
    # With a 6-frame GOP, sparse TSN frames skip whole GOPs.
    assert (
        by[("tsn4", "h264_seek", "gop6")].frames_decoded
        < by[("tsn4", "h264_sequential", "gop6")].frames_decoded
    )
    table = format_data_table(rows)
    assert len(table.splitlines()) == len(rows) + 1 and "shards" in table
    gains = format_gains(rows).splitlines()
    assert len(gains) == len(CLIPS) * 2 and "h264_segments" in gains[0]


def test_bench_data_stops_on_a_reader_with_wrong_frames(videos: dict[str, list[Path]]) -> None:
    paths = videos["gop250"]
    metas = [probe(p) for p in paths]

    def off_by_one(video: int, indices: np.ndarray) -> tuple[np.ndarray, int]:
        wrong = np.minimum(indices + 1, metas[video].num_frames - 1)
        return decode_frames(paths[video], wrong, meta=metas[video]), 0

    methods = [*h264_methods("gop250", paths, metas), Method("off_by_one", "gop250", off_by_one)]
    with pytest.raises(RuntimeError, match="off_by_one read other frames"):
        _run_rounds(methods, CLIPS[0].spec, metas, rounds=1, seed=0)


def test_k400_preset_is_the_issue_set() -> None:
    assert PRESETS["k400"] == BenchVideoSpec(
        count=4, seconds=10.0, fps=30, width=456, height=256, gops=(250,), crf=21
    )
    for name in PRESETS:  # every preset has its flag value
        args = build_parser().parse_args(["bench", "data", "--preset", name, "--threads", "2"])
        assert args.preset == name and args.threads == 2


def test_bench_data_wait_measures_blocked_time(
    videos: dict[str, list[Path]], tmp_path: Path
) -> None:
    cfg = DataWaitConfig(
        model="tsn_resnet18",
        batch=2,
        frames=(2, 4),
        workers=(0, 1),
        steps=2,
        warmup=1,
        size=32,
        videos=videos["gop6"][0].parent,
        work_dir=tmp_path,
        num_classes=5,
    )
    result = data_wait.run(cfg, out_json=tmp_path / "wait.json")
    rows = result.rows
    assert [(r.frames, r.workers) for r in rows] == [(2, 0), (2, 1), (4, 0), (4, 1)]
    for r in rows:
        assert r.steps == 2 and 0.0 < r.wait_s < r.step_s
        assert r.wait_fraction == pytest.approx(r.wait_s / r.step_s)
        assert r.steps_applied == 3  # warm-up and timed steps all trained
    # Each clip length ran at what training's `auto` decides for it (the same cache key: the
    # trainer's decision is the bench's, read back here).
    env = DistEnv(0, 0, 1, 1, torch.device("cpu"), backend="")
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)  # as the bench measured: the key names the threads
    try:
        decisions = {
            frames: decide_model_fast_path(
                ModelConfig(name="tsn_resnet18", num_classes=5, frames=frames),
                ProbeShape(2, 3, frames, 32, 5),
                TrainConfig(),
                env=env,
            )
            for frames in (2, 4)
        }
    finally:
        torch.set_num_threads(threads)
    for frames, decision in decisions.items():
        assert decision.source == "cache"
        assert {r.fast_path for r in rows if r.frames == frames} == {decision.candidate.label}
    assert json.loads((tmp_path / "wait.json").read_text()) == result.to_json()
    assert len(result.to_json()) == 4


def test_the_earlier_entry_points_map_their_keywords_onto_the_configs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`bench_data` and `bench_data_wait` (the record in docs/benchmarks.md calls them) are
    `run` with their keywords moved into the configs."""
    calls: list[tuple[object, dict[str, object]]] = []

    def wait_run(config: DataWaitConfig, **kwargs: object) -> data_wait.DataWaitResult:
        calls.append((config, kwargs))
        return data_wait.DataWaitResult(())

    def data_run(config: DataConfig, **kwargs: object) -> dataload.DataResult:
        calls.append((config, kwargs))
        return dataload.DataResult({}, ())

    monkeypatch.setattr(data_wait, "run", wait_run)
    monkeypatch.setattr(dataload, "run", data_run)
    out = tmp_path / "out.json"
    data_wait.bench_data_wait(
        "tsm_resnet18", batch=2, steps=2, warmup=1, size=112, frames_list=[8],
        videos_dir=tmp_path, out_json=out, show=False,
    )  # fmt: skip
    dataload.bench_data(out_json=out, work_dir=tmp_path, rounds=1, show=False)
    wait = DataWaitConfig("tsm_resnet18", 2, (8,), steps=2, warmup=1, size=112, videos=tmp_path)
    assert calls == [
        (wait, {"out_json": out, "progress": False, "device": "cpu"}),
        (DataConfig(work_dir=tmp_path, rounds=1), {"out_json": out}),
    ]
