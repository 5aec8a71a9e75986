"""Atomic checkpoints that load with `weights_only=True`, and finding the one to resume from.

A checkpoint is written to a temporary file in the same directory, fsynced, renamed over the
target and the directory fsynced (`vidscale.atomic`), so a crash never leaves a truncated
`last.pt`. Everything that training state depends on is in it: every part of the run's
`state.StateRegistry` (model, optimizer, progress, the epoch's running totals, the per-rank
counters, ...) and the sizes the run was made with. Randomness is a
pure function of (seed, rank, step), so no RNG state needs saving for an exact resume.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vidscale.atomic import atomic_write, fsync_dir
from vidscale.errors import InputError

CHECKPOINT_PATTERN = re.compile(r"epoch_(\d+)\.pt$")
LAST = "last.pt"


def save_checkpoint(state: dict[str, Any], path: Path) -> None:
    """Write `state` to `path` atomically (same-directory temp file + fsync + rename)."""
    atomic_write(path, lambda f: torch.save(state, f))


def load_checkpoint(
    path: Path, *, map_location: str | torch.device = "cpu", mmap: bool = False
) -> dict[str, Any]:
    """Load a checkpoint safely: tensors and plain containers only, never arbitrary objects.
    `mmap` maps the file instead of reading its tensors (for a caller that reads a record)."""
    state: dict[str, Any] = torch.load(
        path, map_location=map_location, weights_only=True, mmap=mmap
    )
    return state


class UnreadableCheckpoint(InputError):
    """A checkpoint file that does not load (truncated, damaged, not a checkpoint, or a pickle
    `weights_only` refuses); the message names the file. `path` and `reason` for a caller
    that skips it and lists it."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: not a readable checkpoint ({reason})")
        self.path, self.reason = Path(path), reason


def read_checkpoint(
    path: Path, *, map_location: str | torch.device = "cpu", mmap: bool = False
) -> dict[str, Any]:
    """`load_checkpoint` for a file a user names: any failure is an `UnreadableCheckpoint`.

    `torch.load` reports damage as whichever of KeyError, EOFError, UnpicklingError or
    RuntimeError the bytes happen to trigger, so every exception is taken as damage.
    """
    try:
        state = load_checkpoint(path, map_location=map_location, mmap=mmap)
    except Exception as err:
        raise UnreadableCheckpoint(path, first_line(err)) from err
    if not isinstance(state, dict):  # a pickle of a bare tensor or list loads, but is no state
        raise UnreadableCheckpoint(path, f"holds a {type(state).__name__}, not a checkpoint")
    return state


def load_weights(path: Path, model: nn.Module, *, map_location: str | torch.device = "cpu") -> None:
    """Load checkpoint `path`'s weights into `model`.

    A file that is not a checkpoint is an `UnreadableCheckpoint` naming it (`read_checkpoint`),
    one of another model an `InputError` naming it (torch says so in a multi-line RuntimeError).
    """
    state = read_checkpoint(path, map_location=map_location)
    if "model" not in state:
        raise UnreadableCheckpoint(path, "no model weights in it")
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as err:
        raise InputError(
            f"{path}: its weights do not fit this run's model ({first_line(err)})"
        ) from err


def first_line(err: BaseException) -> str:
    """`Type: first line of the message`, at most 160 characters (torch's run to pages)."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0] if lines else ''}"[:160]


def _numbered_epochs(run_dir: Path) -> list[tuple[int, Path]]:
    """(epoch, path) of the run's per-epoch checkpoints, oldest first."""
    found = []
    for p in (run_dir / "checkpoints").glob("epoch_*.pt"):
        m = CHECKPOINT_PATTERN.search(p.name)
        if m:
            found.append((int(m.group(1)), p))
    return sorted(found)


def epoch_checkpoints(run_dir: Path) -> list[Path]:
    """The run's per-epoch checkpoints, oldest first."""
    return [p for _, p in _numbered_epochs(run_dir)]


def prune_checkpoints(run_dir: Path, *, keep: int, newest: int | None = None) -> list[Path]:
    """Keep the newest `keep` epoch checkpoints (the paper reports the mean over the last 5).

    `newest` is the epoch just written: it is never deleted, and checkpoints of later epochs
    (left by an abandoned attempt that got further, e.g. before a fallback from a damaged
    `last.pt`) are deleted, so `vidscale eval --last N` scores this run's history only.
    """
    numbered = _numbered_epochs(run_dir)
    stale = [p for e, p in numbered if newest is not None and e > newest]
    current = [p for e, p in numbered if newest is None or e <= newest]
    doomed = stale + current[: max(len(current) - keep, 0)]
    for p in doomed:
        p.unlink(missing_ok=True)
    if doomed:
        fsync_dir(run_dir / "checkpoints")
    return doomed


@dataclass(frozen=True)
class Search:
    """The checkpoint a run resumes from (loaded; `None` if none loads) and the damaged ones."""

    path: Path | None
    state: dict[str, Any] | None
    unreadable: list[tuple[Path, str]]


def newest_loadable(run_dir: Path) -> Search:
    """The newest checkpoint of `run_dir` that loads: `last.pt`, else the latest `epoch_*.pt`.

    Damaged files (truncated, zeroed, not a checkpoint) are passed over and listed with their
    reason, for the caller to report. Loads to the CPU: the caller moves tensors.
    """
    ckpt_dir = run_dir / "checkpoints"
    candidates = [ckpt_dir / LAST, *reversed(epoch_checkpoints(run_dir))]
    unreadable: list[tuple[Path, str]] = []
    for path in candidates:  # newest first: last.pt is written after every epoch file
        if not path.is_file():
            continue
        try:
            state = upgrade(load_checkpoint(path))
            int(state["progress"]["step"])
        except Exception as err:  # any damage, or a file of another format
            unreadable.append((path, first_line(err)))
            continue
        return Search(path, state, unreadable)
    return Search(None, None, unreadable)


def upgrade(state: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint of an earlier layout in today's (`state.StateRegistry` keys):
    - written before run sizes and per-rank counters were recorded: progress from its top-level
      keys, rank 0's counters for every rank, the epoch's running sums unknown (zero); its
      sizes cannot be checked (`resume.resolve_start` says so);
    - written before the divergence guard was a part of its own: its count of bad steps in a
      row, top-level, moves under `divergence_guard`."""
    if "progress" not in state and "step" in state:
        progress = {k: int(state[k]) for k in ("epoch", "step", "step_in_epoch")}
        state = {
            **state,
            "progress": progress,
            "rank_counters": [state.get("counters", {})],
            "epoch_totals": {},
            "bad_steps_in_a_row": 0,
        }
    if "bad_steps_in_a_row" in state and "divergence_guard" not in state:
        state = {**state, "divergence_guard": {"bad_steps_in_a_row": state["bad_steps_in_a_row"]}}
        del state["bad_steps_in_a_row"]
    return state


def comm_state_path(ckpt_dir: Path, rank: int) -> Path:
    return ckpt_dir / f"last.rank{rank:04d}.comm.pt"


def save_comm_state(comm: Any, ckpt_dir: Path, *, rank: int, step: int) -> None:
    """Every rank: the comm hook's per-rank state (PowerSGD's error residuals differ per rank),
    tagged with the step of the `last.pt` it belongs to. A no-op for stateless hooks."""
    if comm.per_rank:
        save_checkpoint({"step": step, "comm": comm.state_dict()}, comm_state_path(ckpt_dir, rank))


def read_comm_state(
    comm: Any, ckpt_dir: Path, *, rank: int, step: int
) -> tuple[dict[str, Any] | None, str | None]:
    """This rank's comm state saved with the checkpoint of `step`, or why it cannot be used
    (missing, damaged, from another step, process count or setting).

    Loading is the caller's collective decision: all ranks load or none does, because ranks at
    different PowerSGD steps would issue different collectives.
    """
    path = comm_state_path(ckpt_dir, rank)
    if not path.is_file():
        return None, f"{path.name} is missing"
    try:
        saved = load_checkpoint(path)
    except Exception as err:  # a damaged file: the hook starts afresh, and says so
        return None, f"{path.name} is unreadable ({first_line(err)})"
    if saved.get("step") != step:
        return None, f"{path.name} is from step {saved.get('step')}, the checkpoint from {step}"
    problem: str | None = comm.incompatibility(saved["comm"])
    return (saved["comm"], None) if problem is None else (None, problem)
