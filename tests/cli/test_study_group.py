"""`vidscale study NAME` holds every study; each one's earlier top-level name still runs it, says
its new name on stderr, and is left out of `vidscale --help`."""

from __future__ import annotations

from pathlib import Path

import pytest

from vidscale.cli import build_parser, main
from vidscale.cli.study_cmds import STUDIES


def test_every_study_is_under_study_and_old_names_are_hidden() -> None:
    text = build_parser().format_help()
    assert "study" in text
    for _, old in STUDIES:
        assert f" {old} " not in text and f"\n    {old}\n" not in text
    for name, _ in STUDIES:
        args = build_parser().parse_args(["study", name, "--out", "x", "--data", "d"])
        assert callable(args.fn)


@pytest.mark.parametrize(("name", "old"), STUDIES)
def test_an_old_name_runs_the_same_study_and_names_the_new_one(
    name: str, old: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--out", str(tmp_path / "none"), "--data", str(tmp_path), "--plot-only"]
    new_code = main(["study", name, *argv])
    new_err = capsys.readouterr().err
    old_code = main([old, *argv])
    old_err = capsys.readouterr().err
    assert old_code == new_code
    assert f"`vidscale {old}` is now `vidscale study {name}`" in old_err
    assert old_err.endswith(new_err)
