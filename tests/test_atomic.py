"""Atomic run files: a second name for a finished checkpoint instead of a second write."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vidscale import atomic
from vidscale.atomic import TMP_SUFFIX, atomic_link, atomic_write_text


def test_a_link_is_the_same_file_and_outlives_its_source(tmp_path: Path) -> None:
    epoch, last = tmp_path / "epoch_0003.pt", tmp_path / "last.pt"
    atomic_write_text(last, "epoch 2")
    atomic_write_text(epoch, "epoch 3")
    atomic_link(epoch, last)
    assert last.read_text() == "epoch 3" and os.path.samefile(epoch, last)
    epoch.unlink()  # pruned later: last.pt stays whole
    assert last.read_text() == "epoch 3"
    assert not list(tmp_path.glob(f"*{TMP_SUFFIX}"))


def test_writing_one_name_later_leaves_the_other(tmp_path: Path) -> None:
    epoch, last = tmp_path / "epoch_0003.pt", tmp_path / "last.pt"
    atomic_write_text(epoch, "epoch 3")
    atomic_link(epoch, last)
    atomic_write_text(last, "mid-epoch 4")  # a stop signal's checkpoint: renamed over the name
    assert epoch.read_text() == "epoch 3" and last.read_text() == "mid-epoch 4"


def test_without_hard_links_the_file_is_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_links(src: object, dst: object) -> None:
        raise PermissionError("hard links not supported")

    monkeypatch.setattr(atomic.os, "link", no_links)
    epoch, last = tmp_path / "epoch_0001.pt", tmp_path / "last.pt"
    atomic_write_text(epoch, "x" * 3_000_000)
    atomic_link(epoch, last)
    assert last.read_text() == epoch.read_text() and not os.path.samefile(epoch, last)
    assert not list(tmp_path.glob(f"*{TMP_SUFFIX}"))
