"""Weights & Biases as a run logger (`train.loggers=tensorboard,wandb`), an optional dependency
(`pip install 'vidscale[tracking]'`).

Offline by default (`train.wandb_mode`): the run is written under the run directory and needs
no network nor account; `wandb sync RUN/wandb/offline-run-*` uploads it later. A resumed run
continues the same W&B run: its id is kept in RUN/wandb_run_id, written when the run starts
fresh.
"""

from __future__ import annotations

import secrets
import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from vidscale.atomic import atomic_write_text
from vidscale.errors import ConfigError

RUN_ID_FILE = "wandb_run_id"
_ID_ALPHABET = string.ascii_lowercase + string.digits  # what W&B's own run ids are made of


def import_wandb() -> ModuleType:
    """The `wandb` package, or a one-line `ConfigError` saying how to install it."""
    try:
        import wandb
    except ImportError:
        raise ConfigError(
            "train.loggers: wandb is not installed; install it with "
            "pip install 'vidscale[tracking]' (or pip install wandb)"
        ) from None
    return wandb


@dataclass(frozen=True)
class WandbSettings:
    """`train.wandb_project`, `train.wandb_mode` and `train.wandb_dir` ("": the run
    directory; W&B writes its files in DIR/wandb/)."""

    project: str = "vidscale"
    mode: str = "offline"
    dir: str = ""


def run_id(run_dir: Path, *, resumed: bool) -> str:
    """The W&B run id of `run_dir`: the stored one when the run resumes, else a new one,
    stored (a run started afresh in a directory an earlier attempt used gets a run of its
    own, not the earlier attempt's steps)."""
    path = run_dir / RUN_ID_FILE
    if resumed and path.exists():
        stored = path.read_text().strip()
        if stored:
            return stored
    new = "".join(secrets.choice(_ID_ALPHABET) for _ in range(8))
    atomic_write_text(path, new + "\n")
    return new


class WandbLogger:
    """One W&B run for the run directory, written on rank 0 from `log_scalars` with the
    optimizer step as W&B's step, so its charts and TensorBoard's share an x axis."""

    def __init__(self, run_dir: Path, settings: WandbSettings, *, resumed: bool) -> None:
        wandb = import_wandb()
        root = Path(settings.dir) if settings.dir else run_dir
        root.mkdir(parents=True, exist_ok=True)
        self._run: Any = wandb.init(
            project=settings.project,
            mode=settings.mode,
            dir=str(root),
            id=run_id(run_dir, resumed=resumed),
            name=run_dir.resolve().name,
            job_type="train",
            resume="allow",
            # This logger's own run object, never another one the process left open.
            reinit="create_new",
        )
        # Online, a resumed W&B run continues after its last logged step; the steps a resumed
        # training run repeats up to there keep their first values (W&B history only grows).
        self._next_step: int = self._run.step

    @property
    def run_id(self) -> str:
        return str(self._run.id)

    def log_config(self, config: Mapping[str, Any]) -> None:
        self._run.config.update(dict(config), allow_val_change=True)

    def log_scalars(self, scalars: Mapping[str, float], *, step: int) -> None:
        if step >= self._next_step and scalars:
            self._run.log(dict(scalars), step=step)

    def finish(self, *, completed: bool) -> None:
        # W&B shows a run that stopped before its end (preempted, failed) as failed; resuming
        # it makes it run again.
        self._run.finish(exit_code=0 if completed else 1)
