"""What a command prints: lines for a person by default, one JSON document with `--json`.

With `--json`, stdout holds that document alone: whatever the work prints on its way (progress,
tables, the lines of a training run) goes to stderr instead.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any


def add_json_flag(
    p: argparse.ArgumentParser, help: str = "print one JSON document on stdout (for machines)"
) -> None:
    p.add_argument("--json", action="store_true", help=help)


@contextlib.contextmanager
def progress_to_stderr(enabled: bool) -> Iterator[None]:
    """While `enabled`, what the command's work prints goes to stderr, keeping stdout for the
    JSON document: Python's `print` and, through file descriptor 1, the processes it starts
    (torchrun and its ranks)."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 1)
        os.close(saved)


def print_json(document: Any) -> None:
    """`document` as indented JSON on stdout; paths as strings, dataclasses as objects."""
    print(json.dumps(_plain(document), indent=2))


def print_result(result: Any, *, as_json: bool, text: str | None = None) -> None:
    """`result` as JSON (`--json`), or for a person `text` (default: `str(result)`)."""
    if as_json:
        print_json(result)
    else:
        print(str(result) if text is None else text)


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return _plain(asdict(value))
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def print_json_file(path: Path) -> None:
    """A JSON file the command wrote, as its stdout document."""
    print_json(json.loads(path.read_text()))
