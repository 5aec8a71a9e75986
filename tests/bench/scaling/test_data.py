"""`bench scaling --data`: the measured processes read a real dataset through the trainer's
loader (in-process, batch by batch; and a real 2-process torchrun), and bad data paths are
one-line errors."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Literal

import pytest
import torch

from vidscale.bench.scaling.config import ScalingConfig
from vidscale.bench.scaling.data import real_batches
from vidscale.bench.scaling.measure import resolve
from vidscale.cli import main
from vidscale.data.annotations import read_class_names
from vidscale.data.prepared.prepare import prepare_from_layout
from vidscale.data.synthetic.multilabel import MULTI_LABEL_CLASSES, write_multilabel_dataset
from vidscale.data.synthetic.videos import write_synthetic_dataset
from vidscale.distributed.env import DistEnv

MODEL = "tsm_resnet18"
ONE_PROCESS = DistEnv(0, 0, 1, 1, torch.device("cpu"), "gloo")


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """8 classes x 2 training videos (real H.264), 32 px, 8 frames."""
    root = tmp_path_factory.mktemp("scaling_videos")
    write_synthetic_dataset(root, seed=3, train_per_class=2, val_per_class=1, size=32, num_frames=8)
    return root


@pytest.fixture(scope="module")
def shards(videos: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("scaling_shards")
    prepare_from_layout("generic", videos, out, workers=1, progress=False, short_side=0)
    return out


@pytest.mark.parametrize("source", ["videos", "shards", "stream"])
def test_the_data_set_the_classes_and_every_epoch_reads_the_split_once(
    source: Literal["videos", "shards", "stream"], videos: Path, shards: Path
) -> None:
    root = videos if source == "videos" else shards
    given = ScalingConfig(
        models=(MODEL,), data=str(root), source=source, frames=8, size=32, batch=4, device="cpu"
    )
    cfg = resolve(given)
    assert cfg.num_classes == len(read_class_names(videos / "classes.txt")) == 8
    batches = real_batches(cfg, ONE_PROCESS, MODEL)
    first_epoch = [next(batches) for _ in range(4)]  # 16 training videos, 4 per batch
    for batch in first_epoch:
        clips = batch["inputs"]["rgb"]
        assert clips.shape == (4, 3, 8, 32, 32) and clips.dtype == torch.uint8
        assert clips.float().std() > 0  # decoded frames, not a constant
        assert all(0 <= int(label) < 8 for label in batch["label"])
    seen = sorted(int(i) for b in first_epoch for i in b["index"])
    assert seen == list(range(16))  # each training video once
    second = next(batches)  # and on into the next epoch
    assert second["inputs"]["rgb"].shape == (4, 3, 8, 32, 32)


@pytest.mark.slow
def test_two_processes_measure_steps_on_decoded_videos(videos: Path, tmp_path: Path) -> None:
    argv = [
        "bench", "scaling", "--models", MODEL, "--nproc", "2", "--frames", "8", "--size", "32",
        "--batch", "2", "--steps", "2", "--warmup", "1", "--threads", "1", "--hooks", "none",
        "--strategies", "ddp", "--workers", "1", "--data", str(videos),
        "--fast-path", f"{MODEL}=fp32",
        "--out-json", str(tmp_path / "s.json"), "--plot", str(tmp_path / "s.png"),
    ]  # fmt: skip
    table = io.StringIO()
    with contextlib.redirect_stdout(table):
        assert main(argv) == 0
    report = json.loads((tmp_path / "s.json").read_text())
    settings = report["settings"]
    assert (settings["data"], settings["source"], settings["num_classes"]) == (
        str(videos),
        "videos",
        8,
    )
    (row,) = report["runs"]
    assert (row["procs"], row["variant"]) == (2, "ddp") and len(row["ranks"]) == 2
    assert all(len(r["data_wait_s"]) == 2 for r in row["ranks"])
    assert f"data: {videos} (videos, 1 loader worker(s) per process)" in table.getvalue()


@pytest.mark.parametrize(
    ("data", "batch", "message"),
    [
        ("missing", 2, "--data: "),
        ("videos", 64, "--data: "),  # 16 training videos: fewer than a batch per process
    ],
)
def test_bad_data_is_a_one_line_error_naming_the_option(
    data: str,
    batch: int,
    message: str,
    videos: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = videos if data == "videos" else tmp_path / "missing"
    out = ["--out-json", str(tmp_path / "s.json"), "--plot", str(tmp_path / "s.png")]
    argv = ["bench", "scaling", "--models", MODEL, "--size", "32", "--batch", str(batch)]
    assert main([*argv, "--data", str(root), *out]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"vidscale: error: {message}") and "\n" not in err
    assert ("is not a directory" if data == "missing" else "fewer than one batch") in err
    assert not (tmp_path / "s.json").exists()


@pytest.fixture(scope="module")
def multi_label_videos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("scaling_multilabel")
    write_multilabel_dataset(root, seed=3, train_videos=8, val_videos=2, size=32, num_frames=8)
    return root


def test_a_multi_label_layout_reads_label_sets(multi_label_videos: Path) -> None:
    given = ScalingConfig(
        models=(MODEL,),
        data=str(multi_label_videos),
        layout="multilabel",
        frames=8,
        size=32,
        batch=4,
        device="cpu",
    )
    cfg = resolve(given)
    assert cfg.num_classes == len(MULTI_LABEL_CLASSES)
    batch = next(real_batches(cfg, ONE_PROCESS, MODEL))
    assert batch["targets"].shape == (4, len(MULTI_LABEL_CLASSES))
    assert set(batch["targets"].sum(dim=1).tolist()) <= {2.0, 3.0}  # each clip's label set


@pytest.mark.slow
def test_one_process_measures_steps_on_a_multi_label_layout(
    multi_label_videos: Path, tmp_path: Path
) -> None:
    argv = [
        "bench", "scaling", "--models", MODEL, "--nproc", "1", "--frames", "8", "--size", "32",
        "--batch", "2", "--steps", "2", "--warmup", "1", "--threads", "1", "--workers", "0",
        "--data", str(multi_label_videos), "--layout", "multilabel",
        "--fast-path", f"{MODEL}=fp32",
        "--out-json", str(tmp_path / "s.json"), "--plot", str(tmp_path / "s.png"),
    ]  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(argv) == 0
    (row,) = json.loads((tmp_path / "s.json").read_text())["runs"]
    assert row["procs"] == 1 and len(row["ranks"][0]["step_s"]) == 2
