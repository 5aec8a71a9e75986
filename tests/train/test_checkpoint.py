from pathlib import Path

import pytest
import torch

from vidscale.train import checkpoint as ckpt


def test_save_load_round_trip_weights_only(tmp_path: Path) -> None:
    state = {"model": {"w": torch.arange(3.0)}, "epoch": 2, "counters": {"skipped": {"a": "b"}}}
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
