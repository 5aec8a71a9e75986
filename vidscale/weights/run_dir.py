"""An imported model as a run directory, the form every command that uses a run reads.

RUN/config.json (the model and its clips), RUN/classes.txt and RUN/checkpoints/last.pt (a
vidscale checkpoint: the model's state_dict under "model", loadable with `weights_only=True`,
and where it came from under "imported_from"). `checkpoints/epoch_0000.pt` is the same file (a
hard link where the file system has them) because `vidscale eval` scores epoch checkpoints. So
`vidscale predict RUN VIDEO`, `vidscale eval RUN --data DIR`, `vidscale export RUN ...` and
`--set model.init_from=RUN` take it as they take a trained run. It is not a run to resume:
it has no optimizer or progress.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from torch import Tensor

from vidscale.atomic import atomic_write_text
from vidscale.config import RunConfig, save_config, validate
from vidscale.errors import InputError
from vidscale.run.checkpoint import LAST, save_checkpoint
from vidscale.run.record import RunRecord

IMPORTED_EPOCH = "epoch_0000.pt"


def check_out(out: Path) -> None:
    """`out` must be new or an empty directory (an `InputError` naming --out otherwise)."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"--out: {out} exists and is not an empty directory")


def write_run(
    out: Path,
    *,
    cfg: RunConfig,
    classes: list[str],
    weights: dict[str, Tensor],
    source: dict[str, str],
) -> Path:
    """Write the run directory `out` (see the module docstring); returns RUN/checkpoints/last.pt.

    `source` (strings only) is the checkpoint's record of where the weights came from
    (`run.record.RunRecord.imported_from`).
    """
    check_out(out)
    validate(cfg)
    if cfg.model.num_classes != len(classes):
        raise InputError(f"{len(classes)} class names for a {cfg.model.num_classes}-class model")
    checkpoints = out / "checkpoints"
    checkpoints.mkdir(parents=True, exist_ok=True)
    last = checkpoints / LAST
    save_checkpoint({"model": weights, **RunRecord(imported_from=dict(source)).state()}, last)
    epoch = checkpoints / IMPORTED_EPOCH
    try:
        os.link(last, epoch)
    except OSError:  # no hard links here: a copy
        shutil.copyfile(last, epoch)
    atomic_write_text(out / "classes.txt", "\n".join(classes) + "\n")
    save_config(cfg, out / "config.json")  # last: a run directory is one with a config
    return last
