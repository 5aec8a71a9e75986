"""End to end: a real `torchrun --standalone --nproc_per_node 2` run with corrupt inputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tiny_run import is_share_of, tiny_overrides


def plant_corrupt_videos(root: Path) -> Path:
    """A copy of the train list with a zero-byte file and a text file named .mp4 added."""
    (root / "bad").mkdir(exist_ok=True)
    (root / "bad" / "empty.mp4").write_bytes(b"")
    (root / "bad" / "text.mp4").write_text("this is not a video\n")
    lines = (root / "train.csv").read_text().splitlines()
    label = lines[1].rsplit(",", 1)[1]
    lines += [f"bad/empty.mp4,{label}", f"bad/text.mp4,{label}"]
    out = root / "train_with_bad.csv"
    out.write_text("\n".join(lines) + "\n")
    return out


@pytest.mark.slow
def test_torchrun_two_processes_end_to_end(tiny_demo: Path, tmp_path: Path) -> None:
    train_list = plant_corrupt_videos(tiny_demo)
    run = tmp_path / "run"
    sets = [
        *tiny_overrides(tiny_demo),
        "train.epochs=2",
        "data.batch_size=3",  # 18 videos = 2 ranks x 3 steps x 3: every video is drawn
        f"data.train_list={train_list.name}",
        "data.workers=1",  # real loader workers, kept across both epochs and evaluations
        "data.worker_start=forkserver",  # (the resume test covers the default, fork)
    ]
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "vidscale",
        "train",
        "--recipe",
        "demo_tsm_r18_8f_b32_e12",
        "--out",
        str(run),
    ]
    for s in sets:
        cmd += ["--set", s]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["world_size"] == 2
    assert summary["global_batch"] == 6
    # a share of the validation videos, each counted once whichever rank scored it
    assert is_share_of(summary["val_top1"], summary["val_videos"]), summary
    assert 0 <= summary["data_wait_fraction"] <= 1
    skipped = {Path(s["path"]).name for s in summary["skipped"]}
    assert skipped == {"empty.mp4", "text.mp4"}
    assert all(s["reason"] for s in summary["skipped"])
    for name in ("config.json", "metrics.jsonl", "loss.png", "accuracy.png", "lr.png"):
        assert (run / name).exists(), name
    assert list((run / "tensorboard").iterdir())
    assert (run / "checkpoints" / "last.pt").exists()
