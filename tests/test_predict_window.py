"""`vidscale predict RUN VIDEO --window S --stride S`: the windows, and a 10-minute video in the
memory a 1-minute one takes (the real command, its peak RSS measured by the kernel)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.test_predict import make_run
from vidscale.data.synthetic.writer import encode_h264
from vidscale.errors import InputError
from vidscale.predict_window import Window, plan_windows

ROOT = Path(__file__).resolve().parents[1]
FPS, SIZE = 4, 96
# What the 10-minute video would add if it were decoded whole: 2400 frames of 96x96 RGB uint8
# are 66 MB; one window's views are a few hundred KB. Peak RSS of the 10-minute run may exceed
# the 1-minute run's by at most this much (allocator noise and the longer timeline).
MARGIN_MB = 25


def test_windows_cover_the_video_and_count_as_documented() -> None:
    w = plan_windows(40, 4.0, window=4.0, stride=4.0)  # 10 s
    assert [(x.start, x.end) for x in w] == [(0, 4), (4, 8), (8, 10)]
    assert (w[0].first, w[0].stop, w[-1].first, w[-1].stop) == (0, 16, 32, 40)
    overlapping = plan_windows(2400, 4.0, window=8.0, stride=4.0)  # 600 s
    assert len(overlapping) == 149 and overlapping[-1] == Window(592.0, 600.0, 2368, 2400)
    assert plan_windows(10, 4.0, window=8.0, stride=2.0) == [Window(0.0, 2.5, 0, 10)]
    with pytest.raises(InputError, match="--window"):
        plan_windows(10, 4.0, window=0.0, stride=1.0)


def write_long_video(path: Path, minutes: int) -> Path:
    """`minutes` of a gradient scrolling sideways, 96x96 at 4 fps: a few seconds to encode."""
    base = np.broadcast_to(np.arange(SIZE, dtype=np.uint8)[None, :, None] * 2, (SIZE, SIZE, 3))
    frames = np.stack([np.roll(base, i % SIZE, axis=1) for i in range(minutes * 60 * FPS)])
    encode_h264(frames, path, fps=FPS, gop=4 * FPS)
    return path


# Linux keeps a process's peak RSS across exec, so a child forked from this (large) test
# process would report at least this process's size: a small Python in between starts the
# command and reports the peak of its one child.
_MEASURE = (
    "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, "
    "stdout=subprocess.DEVNULL); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)


def peak_rss_mb(argv: list[str]) -> float:
    """Run `argv` to the end; its peak resident set in MB, as the kernel counted it."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, *argv], env=env, cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return int(done.stdout) / 1024  # KB on Linux


@pytest.mark.slow
def test_a_long_video_is_predicted_in_bounded_memory(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    peaks, timelines = {}, {}
    for minutes in (1, 10):
        video = write_long_video(tmp_path / f"long_{minutes}.mp4", minutes)
        out = tmp_path / f"t{minutes}.json"
        cmd = [sys.executable, "-m", "vidscale", "predict", str(run), str(video)]
        peaks[minutes] = peak_rss_mb([*cmd, "--window", "20", "--stride", "20", "--out", str(out)])
        timelines[minutes] = json.loads(out.read_text())
        png = out.with_suffix(".png").read_bytes()
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000
    print(f"peak RSS: 1 min {peaks[1]:.1f} MB, 10 min {peaks[10]:.1f} MB")
    assert peaks[10] <= peaks[1] + MARGIN_MB, peaks
    long = timelines[10]
    assert long["duration"] == pytest.approx(600.0) and len(long["windows"]) == 30
    assert long["precision"] == "fp32"  # the default of every score
    assert long["windows"][0]["start"] == 0 and long["windows"][-1]["end"] == pytest.approx(600)
    starts = [w["start"] for w in long["windows"]]
    assert starts == [20.0 * k for k in range(30)]
    assert all(len(w["predictions"]) == 3 for w in long["windows"])  # the run's 3 classes
    assert sum(s["windows"] for s in long["segments"]) == 30
    assert len(timelines[1]["windows"]) == 3


def test_window_flags_need_window(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from vidscale.cli import main

    run = make_run(tmp_path)
    video = tmp_path / "v.mp4"
    video.write_bytes(b"x")
    assert main(["predict", str(run), str(video), "--stride", "2"]) == 2
    assert "--stride and --out go with --window" in capsys.readouterr().err
    assert main(["predict", str(run), str(video), "--window", "2", "--out", "t.txt"]) == 2
    assert "must end in .json" in capsys.readouterr().err
