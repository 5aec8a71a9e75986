from pathlib import Path
from typing import Any

import pytest
import torch

from vidscale.run import checkpoint as ckpt


def test_save_load_round_trip_weights_only(tmp_path: Path) -> None:
    state: dict[str, Any] = {
        "model": {"w": torch.arange(3.0)},
        "epoch": 2,
        "counters": {"skipped": {"a": "b"}},
    }
    path = tmp_path / "c" / "last.pt"
    ckpt.save_checkpoint(state, path)
    loaded = ckpt.load_checkpoint(path)
    assert loaded["epoch"] == 2 and torch.equal(loaded["model"]["w"], state["model"]["w"])
    assert list(path.parent.iterdir()) == [path]  # no temp file left behind


def test_failed_write_leaves_previous_checkpoint_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "last.pt"
    ckpt.save_checkpoint({"epoch": 1}, path)

    def broken_save(obj: object, f: object) -> None:
        f.write(b"partial")  # type: ignore[attr-defined]
        raise OSError("disk full")

    monkeypatch.setattr(ckpt.torch, "save", broken_save)
    with pytest.raises(OSError):
        ckpt.save_checkpoint({"epoch": 2}, path)
    monkeypatch.undo()
    assert ckpt.load_checkpoint(path)["epoch"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]


def test_prune_keeps_newest(tmp_path: Path) -> None:
    for e in range(1, 7):
        ckpt.save_checkpoint({"epoch": e}, tmp_path / "checkpoints" / f"epoch_{e:04d}.pt")
    ckpt.prune_checkpoints(tmp_path, keep=3)
    assert [p.name for p in ckpt.epoch_checkpoints(tmp_path)] == [
        "epoch_0004.pt",
        "epoch_0005.pt",
        "epoch_0006.pt",
    ]


def test_prune_never_deletes_the_newest_and_drops_an_abandoned_future(tmp_path: Path) -> None:
    for e in (1, 2, 3, 7, 8):  # 7 and 8: an attempt that got further, then a fallback to 3
        ckpt.save_checkpoint({"epoch": e}, tmp_path / "checkpoints" / f"epoch_{e:04d}.pt")
    ckpt.prune_checkpoints(tmp_path, keep=1, newest=3)
    assert [p.name for p in ckpt.epoch_checkpoints(tmp_path)] == ["epoch_0003.pt"]


def test_newest_loadable_falls_back_and_names_the_damaged(tmp_path: Path) -> None:
    d = tmp_path / "checkpoints"
    for e in (1, 2):
        state = {"model": {}, "progress": {"epoch": e, "step": 10 * e, "step_in_epoch": 0}}
        ckpt.save_checkpoint(state, d / f"epoch_{e:04d}.pt")
    (d / "epoch_0002.pt").write_bytes(b"\0" * 64)  # zeroed by a crash
    (d / "last.pt").write_bytes(b"")
    found = ckpt.newest_loadable(tmp_path)
    assert found.path == d / "epoch_0001.pt" and found.state is not None
    assert [p.name for p, _ in found.unreadable] == ["last.pt", "epoch_0002.pt"]
    assert ckpt.newest_loadable(tmp_path / "none").path is None


def test_a_checkpoint_of_the_previous_layout_is_upgraded(tmp_path: Path) -> None:
    old = {"model": {}, "optimizer": {}, "epoch": 3, "step": 30, "step_in_epoch": 0}
    ckpt.save_checkpoint({**old, "counters": {"steps": 30}}, tmp_path / "checkpoints" / "last.pt")
    state = ckpt.newest_loadable(tmp_path).state
    assert state is not None
    assert state["progress"] == {"epoch": 3, "step": 30, "step_in_epoch": 0}
    assert state["rank_counters"] == [{"steps": 30}]
