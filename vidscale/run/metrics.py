"""Run observability on rank 0: JSON lines (and the run's loggers), progress bar, end-of-run plots."""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tqdm import tqdm

from vidscale.atomic import atomic_write_text

# tqdm's monitor thread starts and exits with the bars; a thread exiting while a DataLoader forks
# its workers can leave the child deadlocked (CPython 3.11), and the monitor only tunes how
# often slow bars redraw.
tqdm.monitor_interval = 0


class RunLogger(Protocol):
    """One destination of the run's scalars."""

    def log_config(self, config: Mapping[str, Any]) -> None:
        """The resolved run config (`config.json`'s content), once per process that logs."""

    def log_scalars(self, scalars: Mapping[str, float], *, step: int) -> None:
        """Finite numbers named `kind/field`, at optimizer `step` (non-decreasing)."""

    def finish(self, *, completed: bool) -> None:
        """Flush and close; nothing is logged after. `completed`: the run reached its end (not
        stopped by a signal or an error)."""


class MetricsLog:
    """Appends one JSON object per event to `metrics.jsonl` and hands its finite numbers to the
    run's loggers (`RunLogger`: TensorBoard, W&B, `train.loggers`) as `kind/field` scalars.

    Only rank 0 writes; other ranks hold a disabled log so call sites need no rank checks.
    """

    def __init__(self, run_dir: Path, *, enabled: bool, loggers: Sequence[RunLogger] = ()) -> None:
        self.enabled = enabled
        self.path = run_dir / "metrics.jsonl"
        self.loggers = list(loggers) if enabled else []

    def write(self, kind: str, *, step: int, **values: Any) -> None:
        if not self.enabled:
            return
        record = {"kind": kind, "step": step, "time": time.time(), **values}
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        scalars = {f"{kind}/{key}": value for key, value in values.items() if _is_scalar(value)}
        for logger in self.loggers:
            logger.log_scalars(scalars, step=step)

    def close(self, *, completed: bool = True) -> None:
        """Finish the loggers (once; a second call does nothing)."""
        loggers, self.loggers = self.loggers, []
        for logger in loggers:
            logger.finish(completed=completed)


def _is_scalar(value: Any) -> bool:
    """A finite int or float (not a bool): what the loggers plot."""
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return is_number and math.isfinite(value)


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The records of a `metrics.jsonl`; a line a killed write left incomplete is skipped."""
    return read_metrics_checked(path)[0]


def read_metrics_checked(path: Path) -> tuple[list[dict[str, Any]], list[int]]:
    """The records, and the numbers of the lines that do not parse (a killed write truncates
    the last line; nothing else writes this file)."""
    if not path.exists():
        return [], []
    records, bad = [], []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            bad.append(number)
            continue
        if isinstance(record, dict) and "kind" in record and "step" in record:
            records.append(record)
        else:
            bad.append(number)
    return records, bad


@dataclass(frozen=True)
class ValidationCurve:
    """A run's validation top-1 at each evaluated epoch, with the cumulative training seconds
    at that point; `train_seconds` sums every epoch's training time."""

    epochs: list[int]
    top1: list[float]
    seconds: list[float]
    train_seconds: float


def validation_curve(run_dir: Path) -> ValidationCurve:
    """The curve of RUN_DIR/metrics.jsonl's epoch records (the studies' reports)."""
    elapsed, epochs, top1, seconds = 0.0, [], [], []
    for record in read_metrics(Path(run_dir) / "metrics.jsonl"):
        if record["kind"] != "epoch":
            continue
        elapsed += float(record["epoch_seconds"])
        if record.get("val_top1") is not None:
            epochs.append(int(record["epoch"]))
            top1.append(float(record["val_top1"]))
            seconds.append(elapsed)
    return ValidationCurve(epochs, top1, seconds, elapsed)


def truncate_metrics(path: Path, *, step: int, epochs_done: int) -> list[int]:
    """Keep the records a resumed run will not write again; return the unparsable lines dropped.

    A run resumed from a checkpoint at optimizer `step` after `epochs_done` complete epochs
    writes every later record again: train records past `step` and epoch records past
    `epochs_done` (an epoch's record can precede its checkpoint) are removed, so each step is in
    the file once. The file is replaced atomically.
    """
    records, bad = read_metrics_checked(path)
    if not records and not bad:
        return []
    kept = [
        r
        for r in records
        if r["step"] <= step and (r["kind"] != "epoch" or r.get("epoch", 0) <= epochs_done)
    ]
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in kept))
    return bad


def progress(total: int, *, enabled: bool, desc: str, initial: int = 0) -> tqdm:
    """A progress bar on rank 0 (stderr); disabled elsewhere and when not wanted."""
    return tqdm(
        total=total,
        initial=initial,
        desc=desc,
        disable=not enabled,
        file=sys.stderr,
        dynamic_ncols=True,
        leave=False,
        unit="step",
    )


def plot_run(records: Iterable[dict[str, Any]], out: Path) -> list[Path]:
    """PNG plots of loss, accuracy and LR against epoch, from `metrics.jsonl` records."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [r for r in records if r["kind"] == "epoch"]
    if not epochs:
        return []
    x = [r["epoch"] for r in epochs]
    panels = [
        ("loss.png", "loss", [("train_loss", "train"), ("val_loss", "validation")]),
        ("accuracy.png", "top-1 accuracy (%)", [("train_top1", "train"), ("val_top1", "val")]),
        ("lr.png", "learning rate (end of epoch)", [("lr", "lr")]),
    ]
    written = []
    for name, ylabel, series in panels:
        fig, ax = plt.subplots(figsize=(5, 3.5), dpi=110)
        for key, label in series:
            pts = [(xi, r[key]) for xi, r in zip(x, epochs, strict=True) if r.get(key) is not None]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", markersize=3, label=label)
        ax.set_xlabel("epoch")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if len(series) > 1:
            ax.legend()
        fig.tight_layout()
        fig.savefig(out / name)
        plt.close(fig)
        written.append(out / name)
    return written
