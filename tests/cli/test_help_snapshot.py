"""Every command's `--help` matches its committed snapshot, so a flag changes only on purpose.

After changing a flag or its help on purpose, regenerate the snapshots and review the diff:

    VIDSCALE_UPDATE_SNAPSHOTS=1 python -m pytest -q tests/cli/test_help_snapshot.py
    git diff tests/cli/snapshots/

The help is formatted at a fixed width (COLUMNS=100), whatever the terminal.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from vidscale.cli import build_parser

SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE = os.environ.get("VIDSCALE_UPDATE_SNAPSHOTS") == "1"


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """(command words, parser) of `vidscale` and every command below it, in help order."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, (*path, name))


def leaf_commands() -> list[tuple[str, ...]]:
    """The commands that run something (no command of their own below them)."""
    return [
        path
        for path, parser in commands(build_parser())
        if not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)
    ]


def snapshot_path(words: tuple[str, ...]) -> Path:
    return SNAPSHOTS / ("_".join(("vidscale", *words)) + ".txt")


@pytest.fixture
def fixed_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")  # argparse wraps at the terminal's width
    monkeypatch.setenv("NO_COLOR", "1")  # and newer Pythons colour help on a terminal


ALL = [words for words, _ in commands(build_parser())]


@pytest.mark.parametrize("words", ALL, ids=lambda w: " ".join(("vidscale", *w)))
def test_help_matches_its_snapshot(words: tuple[str, ...], fixed_width: None) -> None:
    parser = dict(commands(build_parser()))[words]
    text = parser.format_help()
    path = snapshot_path(words)
    if UPDATE:
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"no snapshot {path.name}: run with VIDSCALE_UPDATE_SNAPSHOTS=1"
    assert text == path.read_text(), (
        f"`vidscale {' '.join(words)} --help` changed; if on purpose, regenerate the snapshots "
        "(VIDSCALE_UPDATE_SNAPSHOTS=1) and review `git diff tests/cli/snapshots/`"
    )


def test_every_snapshot_belongs_to_a_command() -> None:
    """A removed or renamed command takes its snapshot with it."""
    expected = {snapshot_path(words).name for words in ALL}
    stale = sorted({p.name for p in SNAPSHOTS.glob("*.txt")} - expected)
    if UPDATE:
        for name in stale:
            (SNAPSHOTS / name).unlink()
        stale = []
    assert not stale, f"snapshots of no command: {stale}"


def test_every_command_takes_json() -> None:
    """Each command prints for a person by default and one JSON document with --json."""
    parsers = dict(commands(build_parser()))
    lacking = [
        " ".join(words)
        for words in leaf_commands()
        if not any("--json" in a.option_strings for a in parsers[words]._actions)
    ]
    assert not lacking, f"commands without --json: {lacking}"
