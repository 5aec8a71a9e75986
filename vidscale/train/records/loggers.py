"""Where a run's scalars go besides `metrics.jsonl`: a list of loggers (`train.loggers`).

Each logger takes the run's config once, then scalars named `kind/field` (`train/loss`,
`epoch/val_top1`) at an optimizer step, and is finished at the end of the run. Only rank 0 opens
any. TensorBoard is what a run logs unless told otherwise; Weights & Biases (`wandb_logger`) is
an optional dependency, checked when the run starts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vidscale.config import TrainConfig
from vidscale.errors import InputError
from vidscale.run.metrics import RunLogger
from vidscale.train.records.wandb_logger import WandbLogger, WandbSettings, import_wandb


class TensorBoardLogger:
    """Event files in RUN/tensorboard/. A resumed run hides the events an earlier attempt wrote
    after its checkpoint (they are written again)."""

    def __init__(self, run_dir: Path, *, resumed_at: int | None) -> None:
        from torch.utils.tensorboard import SummaryWriter  # heavy import: rank 0 only

        purge = resumed_at + 1 if resumed_at is not None else None
        self._writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"), purge_step=purge)
        self._config_step = resumed_at or 0  # a resumed run's config shows where it resumed

    def log_config(self, config: Mapping[str, Any]) -> None:
        text = json.dumps(config, indent=2)
        # Indented: TensorBoard renders text as Markdown, and an indented block stays verbatim.
        block = "\n".join("    " + line for line in text.splitlines())
        self._writer.add_text("config", block, global_step=self._config_step)

    def log_scalars(self, scalars: Mapping[str, float], *, step: int) -> None:
        for name, value in scalars.items():
            self._writer.add_scalar(name, value, step)

    def finish(self, *, completed: bool) -> None:
        self._writer.flush()
        self._writer.close()


@dataclass(frozen=True)
class LoggerChoice:
    """The loggers a run asked for (`train.loggers`) and W&B's settings. `checked` makes sure
    the packages they need are installed, so a missing one stops the run before it builds
    anything."""

    names: tuple[str, ...] = ("tensorboard",)
    wandb: WandbSettings = field(default_factory=WandbSettings)

    @classmethod
    def checked(cls, train: TrainConfig) -> LoggerChoice:
        """The choice in `train`; a `ConfigError` naming the extra to install when `wandb` is
        asked for and cannot be imported."""
        if "wandb" in train.loggers:
            import_wandb()
        settings = WandbSettings(
            project=train.wandb_project, mode=train.wandb_mode, dir=train.wandb_dir
        )
        return cls(names=tuple(train.loggers), wandb=settings)

    def open(
        self, run_dir: Path, *, resumed_at: int | None, config: Mapping[str, Any]
    ) -> list[RunLogger]:
        """The loggers for `run_dir` (rank 0), each given `config`; `resumed_at`: the step a
        resumed run continues from (None: a fresh run)."""
        loggers: list[RunLogger] = []
        for name in self.names:
            if name == "tensorboard":
                loggers.append(TensorBoardLogger(run_dir, resumed_at=resumed_at))
            elif name == "wandb":
                loggers.append(WandbLogger(run_dir, self.wandb, resumed=resumed_at is not None))
            else:  # the config's type admits no other name
                raise InputError(f"train.loggers: unknown logger {name!r}")
        for logger in loggers:
            logger.log_config(config)
        return loggers
