"""Training on a dataset of damaged real videos: a mostly unreadable one stops with one line
(`vidscale: error: ...`) on every rank, a few damaged files are skipped, counted, and the run
ends. Real `vidscale train` processes with loader workers, on 1 process and under torchrun."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.data.damaged import damaged_copy
from tests.tiny_run import tiny_overrides
from vidscale.data.synthetic.videos import write_synthetic_dataset

RECIPE = "demo_tsm_r18_8f_b32_e12"


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """64 training videos (8 a class) and 8 validation ones, real H.264."""
    root = tmp_path_factory.mktemp("clean") / "data"
    write_synthetic_dataset(root, seed=2, train_per_class=8, val_per_class=1, size=32, num_frames=8)
    return root


@pytest.fixture(scope="module")
def mostly_unreadable(clean: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mostly") / "data"
    damaged_copy(clean, root, count=40)
    return root


@pytest.fixture(scope="module")
def few_damaged(clean: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[str]]:
    """2 of 64 training videos damaged (3%)."""
    root = tmp_path_factory.mktemp("few") / "data"
    return root, {str(p) for p in damaged_copy(clean, root, count=2, seed=1)}


def command(root: Path, run: Path, *, nproc: int, extra: tuple[str, ...] = ()) -> list[str]:
    launch = [sys.executable, "-m", "vidscale"]
    if nproc > 1:
        launch = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        launch += ["--nproc_per_node", str(nproc), *extra, "-m", "vidscale"]
    sets = [*tiny_overrides(root), "data.workers=1", "train.amp=off", "train.channels_last=off"]
    argv = [*launch, "train", "--recipe", RECIPE, "--out", str(run)]
    return argv + [f"--set={s}" for s in sets]


def run(cmd: list[str], *sets: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    argv = [*cmd, *(f"--set={s}" for s in sets)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)


def assert_one_line_error(stderr: str) -> None:
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr[-3000:]
    line = lines[0]
    assert line.startswith("vidscale: error: training data mostly unreadable: "), line
    assert " of the last " in line and "reads failed" in line and ".mp4 (" in line, line
    assert "`vidscale prepare` lists every unreadable file in its manifest" in line


@pytest.mark.slow
def test_mostly_unreadable_stops_with_one_line_on_one_process(
    mostly_unreadable: Path, tmp_path: Path
) -> None:
    done = run(command(mostly_unreadable, tmp_path / "run", nproc=1), "train.epochs=4")
    assert done.returncode == 2, done.stderr[-3000:]
    assert_one_line_error(done.stderr)
    assert not (tmp_path / "run" / "summary.json").exists()


@pytest.mark.slow
def test_mostly_unreadable_stops_with_one_line_on_every_torchrun_rank(
    mostly_unreadable: Path, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    # Each rank's stderr in a file of its own (torchrun's agent adds its own report on exit).
    extra = ("--log-dir", str(logs), "--redirects", "2")
    done = run(command(mostly_unreadable, tmp_path / "run", nproc=2, extra=extra), "train.epochs=4")
    assert done.returncode != 0
    ranks = sorted(logs.rglob("stderr.log"))
    assert len(ranks) == 2, ranks
    for log in ranks:
        text = log.read_text()
        assert "Traceback" not in text, text[-3000:]
        # The rank that stops first says why; the other says that rank's reason and stops
        # (`distributed.peers.failure`), or, stopping on its own, says why too.
        lines = text.strip().splitlines()
        assert 1 <= len(lines) <= 2 and all(line.startswith("vidscale: ") for line in lines)
        assert "training data mostly unreadable: " in lines[-1], text


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [1, 2])
def test_a_few_damaged_videos_are_skipped_counted_and_the_run_ends(
    few_damaged: tuple[Path, set[str]], tmp_path: Path, nproc: int
) -> None:
    root, damaged = few_damaged
    out = tmp_path / "run"
    # 2 epochs of 64 clips: every training video is drawn, the damaged ones included.
    done = run(command(root, out, nproc=nproc), "train.epochs=2", "data.batch_size=8")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == nproc
    assert summary["train_steps"] == 2 * 64 // summary["global_batch"]  # to the end
    assert {s["path"] for s in summary["skipped"]} == damaged
    assert all(s["reason"] for s in summary["skipped"])
