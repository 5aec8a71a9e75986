"""The command line fails early with messages naming the bad field, file and line."""

from pathlib import Path

import pytest

from vidscale.cli import main


def test_bad_set_key_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "train",
            "--recipe",
            "demo_tsm_r18_8f_b32_e20",
            "--data",
            str(tmp_path),
            "--out",
            str(tmp_path / "r"),
            "--set",
            "optim.lrr=1",
        ]
    )
    assert code == 2
    assert "lrr" in capsys.readouterr().err


def test_bad_annotation_row_names_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "classes.txt").write_text("a\nb\n")
    (tmp_path / "train.csv").write_text("path,label\nx.mp4\n")
    (tmp_path / "val.csv").write_text("path,label\n")
    code = main(
        [
            "train",
            "--recipe",
            "demo_tsm_r18_8f_b32_e20",
            "--data",
            str(tmp_path),
            "--out",
            str(tmp_path / "r"),
        ]
    )
    assert code == 2
    assert "train.csv:2" in capsys.readouterr().err


def test_unknown_recipe(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["train", "--recipe", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown recipe" in capsys.readouterr().err
