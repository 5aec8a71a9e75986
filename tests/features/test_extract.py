"""`vidscale extract-features` as users run it: real processes, torchrun over gloo, SIGKILL.

The run is a tsm_resnet18 made directly (`tests.test_predict.make_run`), the videos the tiny
demo dataset (24 real H.264 files). One uninterrupted single-process extraction is the
reference every other way of running must reproduce row for row.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.data.damaged import damage
from tests.test_predict import make_run
from vidscale.cli import main
from vidscale.features.parts import CHUNK_GLOB, PLAN_FILE, parts_dir

ROOT = Path(__file__).resolve().parents[2]
# One thread per process: the comparisons do not depend on it, the machine stays responsive.
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def command(run: Path, data: Path, out: Path, *extra: str) -> list[str]:
    args = ["extract-features", str(run), "--data", str(data), "--out", str(out), *extra]
    return [sys.executable, "-m", "vidscale", *args]


def torchrun(nproc: int, argv: list[str]) -> list[str]:
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    return [sys.executable, *launcher, *argv[1:]]


def extract(argv: list[str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, env=ENV, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("features_run"))


@pytest.fixture(scope="module")
def reference(run: Path, tiny_demo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("features_ref") / "features.npz"
    extract(command(run, tiny_demo, out))
    return out


def assert_same(a: Path, b: Path) -> None:
    with np.load(a) as x, np.load(b) as y:
        assert sorted(x.files) == sorted(y.files)
        for key in ("paths", "labels", "splits", "classes", "unreadable_paths"):
            assert (x[key] == y[key]).all(), key
        np.testing.assert_allclose(x["features"], y["features"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(x["clip_features"], y["clip_features"], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_one_row_per_listed_video(reference: Path, tiny_demo: Path) -> None:
    with np.load(reference) as f:
        listed = [
            line.split(",")
            for name in ("train.csv", "val.csv")
            for line in (tiny_demo / name).read_text().splitlines()[1:]
        ]
        classes = (tiny_demo / "classes.txt").read_text().split()
        assert [Path(p).relative_to(tiny_demo.resolve()).as_posix() for p in f["paths"]] == [
            p for p, _ in listed
        ]
        assert f["labels"].tolist() == [classes.index(label) for _, label in listed]
        assert f["features"].shape == (len(listed), 512)  # ResNet-18's pooled width
        assert f["features"].dtype == np.float32
        assert f["clip_features"].shape == (len(listed), 1, 512)
        assert f["splits"].tolist() == ["train"] * 16 + ["val"] * 8
        meta = json.loads(str(f["meta"]))
        assert meta["classifier"] == "trunk.fc" and meta["model"] == "tsm_resnet18"
        assert meta["precision"] == "fp32"  # the default of every score
    assert not parts_dir(reference).exists()


@pytest.mark.slow
def test_two_processes_give_the_same_features(
    run: Path, tiny_demo: Path, reference: Path, tmp_path: Path
) -> None:
    out = tmp_path / "two.npz"
    done = extract(torchrun(2, command(run, tiny_demo, out, "--chunk", "3")))
    assert done.stdout.count("wrote") == 1  # rank 0 reports for the launch
    assert_same(reference, out)


@pytest.mark.slow
def test_a_killed_run_continues_where_it_stopped(
    run: Path, tiny_demo: Path, reference: Path, tmp_path: Path
) -> None:
    out = tmp_path / "killed.npz"
    argv = command(run, tiny_demo, out, "--chunk", "1")
    proc = subprocess.Popen(argv, env=ENV, cwd=ROOT, stderr=subprocess.DEVNULL)
    parts = parts_dir(out)
    deadline = time.monotonic() + 120
    while len(list(parts.glob(CHUNK_GLOB))) < 3:
        assert proc.poll() is None, "finished before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.005)
    proc.send_signal(signal.SIGSTOP)  # hold it still while counting, then kill it
    written = len(list(parts.glob(CHUNK_GLOB)))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert 3 <= written < 24 and not out.exists()
    done = extract(argv)
    assert f"{written} of 24 videos already done, skipping them; {24 - written} to go" in (
        done.stderr
    )
    assert f"{written} done before this run" in done.stdout
    assert_same(reference, out)


@pytest.mark.slow
def test_unreadable_videos_are_skipped_and_reported(
    run: Path, tiny_demo: Path, tmp_path: Path
) -> None:
    good = sorted((tiny_demo / "videos" / "val").rglob("*.mp4"))[:2]
    garbage, empty = tmp_path / "garbage.mp4", tmp_path / "empty.mp4"
    garbage.write_bytes(good[0].read_bytes())
    damage(garbage, "garbage", np.random.default_rng(0))
    empty.write_bytes(b"")
    out = tmp_path / "some.npz"
    videos = [str(good[0]), str(garbage), str(good[1]), str(empty)]
    argv = [sys.executable, "-m", "vidscale", "extract-features", str(run), *videos]
    done = extract([*argv, "--out", str(out), "--json"])
    summary = json.loads(done.stdout)
    assert summary["videos"] == 2
    assert [u["path"] for u in summary["unreadable"]] == [
        str(garbage.resolve()),
        str(empty.resolve()),
    ]
    assert "zero-byte" in summary["unreadable"][1]["reason"]
    with np.load(out) as f:
        assert f["paths"].tolist() == [str(p.resolve()) for p in good]
        assert (f["labels"] == -1).all() and f["unreadable_paths"].shape == (2,)


@pytest.mark.slow
def test_parts_of_another_extraction_are_not_mixed_in(
    run: Path, tiny_demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "f.npz"
    parts_dir(out).mkdir()
    (parts_dir(out) / PLAN_FILE).write_text('{"items": []}')
    video = sorted((tiny_demo / "videos").rglob("*.mp4"))[0]
    code = main(["extract-features", str(run), str(video), "--out", str(out)])
    assert code == 2
    err = capsys.readouterr().err
    assert "unfinished extraction with other videos or settings" in err
    assert len(err.strip().splitlines()) == 1


def fake_run(root: Path) -> Path:
    """A directory that passes for a run until something reads it (the path checks come first)."""
    run = root / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    (run / "checkpoints" / "last.pt").write_bytes(b"")
    return run


def test_bad_paths_are_one_line_errors(
    tmp_path: Path, tiny_demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = fake_run(tmp_path)
    out = str(tmp_path / "f.npz")
    cases = {
        "RUN": ["extract-features", str(tmp_path / "nope"), "--data", str(tiny_demo), "--out", out],
        "--data": ["extract-features", str(run), "--data", str(tmp_path / "none"), "--out", out],
        "--out": [
            "extract-features", str(run), "--data", str(tiny_demo),
            "--out", str(tmp_path / "no" / "f.npz"),
        ],
        ".npz": ["extract-features", str(run), "--data", str(tiny_demo), "--out", out + ".txt"],
        "not both": ["extract-features", str(run), out, "--data", str(tiny_demo), "--out", out],
        "VIDEO": ["extract-features", str(run), str(tmp_path / "x.mp4"), "--out", out],
    }  # fmt: skip
    for needle, argv in cases.items():
        assert main(argv) == 2, needle
        err = capsys.readouterr().err
        assert err.startswith("vidscale: error: ") and needle in err, (needle, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_finished_output_is_not_overwritten_unasked(
    tmp_path: Path, tiny_demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = fake_run(tmp_path)
    out = tmp_path / "done.npz"
    out.write_bytes(b"x")
    assert main(["extract-features", str(run), "--data", str(tiny_demo), "--out", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err
