"""`vidscale predict`, `vidscale export` and `vidscale bench models`, run in-process on tiny
models: the flags reach the functions, and bad flags fail before any work with their name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_predict import CLASSES, make_run, write_clip
from vidscale.cli import main


@pytest.fixture(scope="module")
def video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_clip(tmp_path_factory.mktemp("video") / "clip.mp4")


def test_predict_prints_the_top_classes_as_json(
    tmp_path: Path, video: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = make_run(tmp_path, favour=1)
    assert main(["predict", str(run), str(video), "--topk", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [p["label"] for p in out["predictions"]][:1] == [CLASSES[1]]
    assert len(out["predictions"]) == 2
    ckpt = run / "checkpoints" / "epoch_0001.pt"
    assert main(["predict", str(ckpt), str(video), "--crops", "3"]) == 0
    assert CLASSES[1] in capsys.readouterr().out.splitlines()[0]


def test_predict_names_the_bad_argument(
    tmp_path: Path, video: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = make_run(tmp_path, favour=0)
    assert main(["predict", str(run), str(tmp_path / "none.mp4")]) == 2
    assert "VIDEO" in capsys.readouterr().err
    assert main(["predict", str(tmp_path / "nowhere"), str(video)]) == 2
    assert "RUN" in capsys.readouterr().err
    assert main(["predict", str(run), str(video), "--checkpoint", "epoch_0099"]) == 2
    assert "epoch_0099" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["predict", str(run), str(video), "--topk", "0"])
    assert "--topk" in capsys.readouterr().err


def test_export_torchscript_and_its_flag_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = make_run(tmp_path, name="tsn_resnet18")
    out = tmp_path / "exported" / "model.pt"
    assert main(["export", str(run), "--format", "torchscript", "--out", str(out)]) == 0
    assert out.is_file() and "max |diff|" in capsys.readouterr().out
    base = ["export", str(run), "--out", str(tmp_path / "m")]
    assert main([*base, "--format", "torchscript", "--opset", "17"]) == 2
    assert "--opset" in capsys.readouterr().err
    assert main([*base, "--format", "onnx", "--opset", "9"]) == 2
    assert "--opset must be >= 11" in capsys.readouterr().err
    assert main([*base, "--format", "onnx", "--checkpoint", "best"]) == 2  # never evaluated
    assert "--checkpoint" in capsys.readouterr().err
    assert main(["export", str(tmp_path), "--format", "onnx", "--out", "m.onnx"]) == 2
    assert "RUN" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*base, "--format", "keras"])
    assert "--format" in capsys.readouterr().err


TINY_BENCH = ["--size", "32", "--frames", "2", "--warmup", "0", "--repeats", "1"]
TINY_BENCH += ["--peak-size", "64", "--num-classes", "5", "--threads", "1"]


@pytest.mark.slow
def test_bench_models_prints_tables_1_and_2_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    args = ["bench", "models", "tsn_resnet18", "tsm_resnet18", "--baseline", "tsm_resnet18"]
    assert main([*args, *TINY_BENCH, "--fast-path", "auto,fp32", "--out-json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "tsm_resnet18 / tsn_resnet18" in text and "Table 2" in text
    report = json.loads(out.read_text())
    assert {(r["model"], r["mode"]) for r in report["rows"]} == {
        (m, mode) for m in ("tsn_resnet18", "tsm_resnet18") for mode in ("fp32", "fast")
    }
    assert report["settings"]["size"] == 32 and report["settings"]["repeats"] == 1


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["tsm_resnet5"], "tsm_resnet5"),
        (["tsm_resnet18", "--baseline", "tsn_resnet18"], "baseline"),
        (["i3d_resnet50_3x1x1"], "i3d_resnet50_3x1x1 cannot train"),
    ],
)
def test_bench_models_refuses_models_it_cannot_measure(
    argv: list[str], named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    assert main(["bench", "models", *argv, *TINY_BENCH, "--out-json", str(out)]) == 2
    assert named in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--batch", "0"], "--batch"),
        (["--size", "16"], "--size"),
        (["--repeats", "x"], "--repeats"),
        (["--fast-path", "bf16"], "--fast-path"),
        (["--passes", "backward"], "--passes"),
    ],
)
def test_bench_models_flags_are_checked_before_any_work(
    flags: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A value that does not parse stops the parser; one out of range stops the config's
    check (`bench.options`): either way one line naming the flag, exit status 2."""
    try:
        code = main(["bench", "models", "tsm_resnet18", *flags])
    except SystemExit as stop:
        code = int(stop.code or 0)
    err = capsys.readouterr().err
    assert code == 2 and named in err and err.count("\n") == 1
