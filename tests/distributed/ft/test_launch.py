"""`distributed.ft.launch.lighthouse_binary`: torchft's lighthouse beside the interpreter, else on
PATH (torch and torchft installed for the host's Python), else one line saying so."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from vidscale.distributed.ft.launch import lighthouse_binary
from vidscale.errors import InputError


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_the_lighthouse_beside_the_interpreter_comes_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    beside = _executable(tmp_path / "venv" / "bin" / "torchft_lighthouse")
    on_path = _executable(tmp_path / "host" / "torchft_lighthouse")
    monkeypatch.setattr(sys, "executable", str(tmp_path / "venv" / "bin" / "python"))
    monkeypatch.setenv("PATH", str(on_path.parent))
    assert lighthouse_binary() == str(beside)


def test_else_the_one_on_path_else_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bare" / "python"))
    on_path = _executable(tmp_path / "host" / "torchft_lighthouse")
    monkeypatch.setenv("PATH", str(on_path.parent))
    assert lighthouse_binary() == str(on_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(InputError, match="torchft_lighthouse: not beside .* nor on PATH"):
        lighthouse_binary()
