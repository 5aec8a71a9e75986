"""Atomic checkpoints that load with `weights_only=True`.

A checkpoint is written to a temporary file in the same directory, flushed to disk, then renamed
over the target, so a crash never leaves a truncated `last.pt`. Everything that training state
depends on is in it: model, optimizer, epoch, optimizer step, step inside the epoch, and the
counters that the summary reports. Randomness is a pure function of (seed, rank, step), so no RNG
state needs saving for an exact resume.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

import torch

CHECKPOINT_PATTERN = re.compile(r"epoch_(\d+)\.pt$")


def save_checkpoint(state: dict[str, Any], path: Path) -> None:
    """Write `state` to `path` atomically (same-directory temp file + fsync + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_checkpoint(path: Path, *, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint safely: tensors and plain containers only, never arbitrary objects."""
    state: dict[str, Any] = torch.load(path, map_location=map_location, weights_only=True)
    return state


def epoch_checkpoints(run_dir: Path) -> list[Path]:
    """The run's per-epoch checkpoints, oldest first."""
    found = []
    for p in (run_dir / "checkpoints").glob("epoch_*.pt"):
        m = CHECKPOINT_PATTERN.search(p.name)
        if m:
            found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found)]


def prune_checkpoints(run_dir: Path, *, keep: int) -> None:
    """Keep the newest `keep` epoch checkpoints (the paper reports the mean over the last 5)."""
    for p in epoch_checkpoints(run_dir)[:-keep]:
        p.unlink(missing_ok=True)
