"""Epoch ends of a fault-tolerant run (`train-ft`): the run's standard checkpoints, its
validation and its summary, so that an FT run is on disk like any other run
(docs/design.md, "Fault-tolerant replica groups on TorchFT"; docs/fault_tolerance.md).

At the committed step (or, with `--average-every K`, the committed round) that completes an
epoch, the replicas are equal. Then one group acts for the run: the group with the lowest
participating rank in that step's quorum (participating rank 0), so it does not depend on any
one group being alive. Every process of that group evaluates the model on the validation split
(`scoring.evaluate.evaluate`, the trainer's per-epoch evaluation, sharded over the group's
processes); its rank 0 then writes

- `metrics.jsonl`: the epoch's `"epoch"` line (`run.metrics.MetricsLog`), with the validation
  fields when the epoch is evaluated (`train.eval_every`, and always after the last);
- `checkpoints/epoch_NNNN.pt` (`run.checkpoint.save_checkpoint`, atomic) with `last.pt` a
  second name of it, pruned to `train.keep_checkpoints`, holding the model, optimizer,
  `progress`, the run's record (`run.record.RunRecord`) and what a whole-job restart needs
  (`"ft"`: the data position and the TorchFT manager's step);
- `config.json` and `classes.txt` (before the first checkpoint), and `summary.json` at the end
  (`run.summary.RunSummary`).

The other groups meanwhile reach the next quorum: the lighthouse forms it without the writer
after its join timeout when `--min-groups` allows (the writer then heals from them), or they
wait for it; a writer that dies while evaluating is dropped by the lighthouse's heartbeat
timeout, and a quorum that cannot form ends the survivors' `start_quorum` after `--timeout`.

`train.checkpoint_every_steps` has no meaning here (a checkpoint mid-epoch would have to stop
every group): it is refused (`check_epoch_settings`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from vidscale.atomic import atomic_link, atomic_write_text
from vidscale.config import ConfigError, RunConfig, save_config
from vidscale.data.loaders import Placement, eval_loader
from vidscale.errors import InputError
from vidscale.fastpath.decision import FastPathDecision
from vidscale.run.checkpoint import (
    LAST,
    newest_loadable,
    prune_checkpoints,
    save_checkpoint,
)
from vidscale.run.data import load_data
from vidscale.run.metrics import MetricsLog, read_metrics
from vidscale.run.record import Origin, RunRecord, flat_config
from vidscale.run.summary import RunSummary, summary_path
from vidscale.run.timeline import RunSizes
from vidscale.schedules.lr import scaled_lr
from vidscale.scoring.evaluate import EvalResult, Stream, evaluate
from vidscale.scoring.precision import scoring_arithmetic
from vidscale.train.checkpoints.resume import CHECKED_FIELDS, FIXED_FIELDS, field_changes
from vidscale.train.ft.replica import Replica

#: The checkpoint's key for what only a train-ft restart reads (data position, manager step).
FT_KEY = "ft"


def check_epoch_settings(cfg: RunConfig) -> None:
    """The `train.*` settings that cannot apply to train-ft, refused in one line."""
    if cfg.train.checkpoint_every_steps:
        raise InputError(
            "train.checkpoint_every_steps: train-ft checkpoints at epoch ends only "
            "(a mid-epoch checkpoint would stop every group); set it to 0"
        )


@dataclass
class EpochEnds:
    """What the writer group does at each epoch end (see the module docstring)."""

    replica: Replica
    out: Path
    groups: int
    val_items: list[Any]
    classes: list[str]
    record: RunRecord
    started: float = field(default_factory=time.time)  # this epoch's start on this process
    train: list[tuple[float, float, int]] = field(default_factory=list)  # loss, top1, clips

    @classmethod
    def of(cls, replica: Replica, *, groups: int, out: Path) -> EpochEnds:
        cfg, splits = load_data(replica.cfg)
        return cls(
            replica, out, groups, splits.val, splits.classes, run_record(cfg, replica, groups)
        )

    def note(self, records: list[dict[str, Any]]) -> None:
        """The committed steps' training loss and top-1 (this process's view of them)."""
        for r in records:
            clips = len(r["share"]) if "round" in r else r["stop"] - r["start"]
            self.train.append((r["loss"], r["top1"], clips))

    def after_epoch(self, manager: Any, *, lr: float) -> None:
        """An epoch has just completed at `manager`'s committed step: the writer group
        evaluates and writes (module docstring); every other group goes on."""
        epoch, started = self.replica.position.epoch, self.started
        train, self.train, self.started = self.train, [], time.time()
        if (manager.participating_rank() or 0) != 0:
            return
        cfg = self.replica.cfg
        due = epoch >= cfg.train.epochs or epoch % cfg.train.eval_every == 0
        val = self.evaluate() if due else None
        if self.replica.rank != 0:
            return
        step = int(manager.current_step())
        metrics = MetricsLog(self.out, enabled=True)
        metrics.write("epoch", step=step, **epoch_values(epoch, train, val, started, lr))
        self.save(manager, epoch=epoch, step=step)
        if epoch >= cfg.train.epochs:
            self.write_summary(step=step)

    def evaluate(self) -> EvalResult:
        """Top-1/top-5 and loss on the validation split, sharded over this group's processes
        (`evaluate` sums over the group's process group)."""
        r, cfg = self.replica, self.replica.cfg
        place = Placement(r.rank, r.group_size)
        loader = eval_loader(
            cfg.data,
            self.val_items,
            seed=cfg.train.seed,
            place=place,
            num_classes=cfg.model.num_classes,
        )
        device = torch.device("cpu")
        return evaluate(
            Stream(r.model, r.model_input),
            loader,
            device=device,
            autocast=scoring_arithmetic(cfg.train.eval_precision, device).autocast(),
        )

    def save(self, manager: Any, *, epoch: int, step: int) -> None:
        """`epoch_NNNN.pt` and `last.pt` as the trainer's Checkpointer writes them."""
        if not (self.out / "config.json").exists():
            save_config(self.replica.cfg, self.out / "config.json")
            atomic_write_text(self.out / "classes.txt", "\n".join(self.classes) + "\n")
        r = self.replica
        state = {
            "model": r.model.state_dict(),
            "optimizer": r.optimizer.state_dict(),
            "progress": {"epoch": epoch, "step": step, "step_in_epoch": 0},
            FT_KEY: {"position": r.position.state_dict(), "manager": manager.state_dict()},
            **self.record.state(),
        }
        epoch_file = self.out / "checkpoints" / f"epoch_{epoch:04d}.pt"
        epoch_file.parent.mkdir(parents=True, exist_ok=True)
        save_checkpoint(state, epoch_file)
        atomic_link(epoch_file, epoch_file.parent / LAST)
        prune_checkpoints(self.out, keep=r.cfg.train.keep_checkpoints, newest=epoch)

    def write_summary(self, *, step: int) -> None:
        """summary.json from the run's epoch lines (every writer's, whichever group it was)."""
        cfg, sizes = self.replica.cfg, self.record.origin
        assert sizes is not None
        lines = {int(m["epoch"]): m for m in read_metrics(self.out / "metrics.jsonl")}
        history = [float(m["val_top1"]) for _, m in sorted(lines.items()) if "val_top1" in m]
        seconds = sum(float(m["epoch_seconds"]) for m in lines.values())
        clips = cfg.train.epochs * self.replica.position.size
        RunSummary(
            model=cfg.model.name,
            world_size=sizes.sizes.world_size,
            global_batch=sizes.sizes.global_batch,
            epochs=cfg.train.epochs,
            num_classes=cfg.model.num_classes,
            chance_top1=100.0 / cfg.model.num_classes,
            val_top1=history[-1] if history else None,
            best_val_top1=max(history) if history else None,
            val_top1_history=tuple(history),
            wall_seconds=seconds,
            train_steps=step,
            clips_per_second=clips / seconds if seconds > 0 else 0.0,
            data_wait_fraction=0.0,  # not measured by train-ft (docs/fault_tolerance.md)
            recipe=cfg.recipe,
            base_lr=sizes.sizes.base_lr,
            strategy="train-ft",
            eval_precision=cfg.train.eval_precision,
            extra={"ft_groups": self.groups, "ft_group_size": self.replica.group_size},
        ).write(summary_path(self.out))


def epoch_values(
    epoch: int,
    train: list[tuple[float, float, int]],
    val: EvalResult | None,
    started: float,
    lr: float,
) -> dict[str, Any]:
    """The epoch line's fields, named as the trainer's (`RunLog.epoch_done`)."""
    clips = sum(n for _, _, n in train) or 1
    values: dict[str, Any] = {
        "epoch": epoch,
        "train_loss": sum(loss * n for loss, _, n in train) / clips,
        "train_top1": sum(top1 * n for _, top1, n in train) / clips,
        "epoch_seconds": time.time() - started,
        "lr": lr,
    }
    if val is not None:
        values.update(val_top1=val.top1, val_top5=val.top5, val_loss=val.loss)
        values.update(val_count=val.count, val_unreadable=len(val.unreadable))
    return values


def run_record(cfg: RunConfig, replica: Replica, groups: int) -> RunRecord:
    """The record every checkpoint holds: the sizes of the run with every group live, its
    config, and the fast path train-ft trains with (fp32, contiguous: it applies none)."""
    world = groups * replica.group_size
    global_batch = replica.per_process * world
    per_epoch = math.ceil(replica.position.size / global_batch)
    sizes = RunSizes(
        global_batch=global_batch,
        accumulate=1,
        steps_per_epoch=per_epoch,
        total_steps=per_epoch * cfg.train.epochs,
        warmup_steps=round(cfg.lr.warmup_epochs * per_epoch),
        base_lr=scaled_lr(cfg.optim.lr_per_8_clips, global_batch),
        world_size=world,
        micro_batch=replica.per_process,
        train_size=replica.position.size,
    )
    plain = FastPathDecision(False, False, "explicit", reason="train-ft applies no fast path")
    return RunRecord(
        origin=Origin.of_run(cfg, sizes),
        fast_path=plain,
        model_name=cfg.model.name,
        num_classes=cfg.model.num_classes,
    )


def restore_latest(replica: Replica, manager: Any, out: Path) -> Path | None:
    """A whole-job restart: put the newest loadable checkpoint of `out` (model, optimizer, data
    position, the manager's step) back into this replica before its first quorum; the path,
    or None when the run has none. A group that has a live peer further on heals from it at
    that quorum anyway; when every group restarts, they all load the same file and continue
    with the steps an uninterrupted run takes."""
    found = newest_loadable(out)
    if found.state is None or FT_KEY not in found.state:
        return None
    state = found.state
    check_same_run(replica.cfg, state, found.path)
    replica.load_state_dict(
        {
            "model": state["model"],
            "optimizer": state["optimizer"],
            "position": state[FT_KEY]["position"],
        }
    )
    manager.load_state_dict(state[FT_KEY]["manager"])
    return found.path


#: What a whole-job restart may not change: the model, and what fixes the steps' samples and
#: updates (the batch, the data order's seed, the epochs the schedule spans, the optimizer and
#: the LR schedule). Other fields (paths, logging, threads) may differ.
RUN_FIELDS = (*FIXED_FIELDS, *CHECKED_FIELDS, "data.batch_size", "train.seed")
RUN_PREFIXES = ("optim.", "lr.")


def check_same_run(cfg: RunConfig, state: dict[str, Any], source: Path | None) -> None:
    """Refuse, naming the fields, a restart whose config would not continue the run that wrote
    `state` (see RUN_FIELDS): its replicas would take other samples or other updates from the
    checkpoint on, which is a new run (a new --out), not this one continued."""
    record = RunRecord.of(state, path=str(source))
    if record.origin is None:
        return
    old, new = record.origin.config, flat_config(cfg)
    keys = sorted(k for k in set(old) | set(new) if k in RUN_FIELDS or k.startswith(RUN_PREFIXES))
    changed = field_changes(old, new, keys)
    if changed:
        raise ConfigError(
            f"{source} was written by this run with other settings: {'; '.join(changed)} "
            "(restore them, or start another run in a new --out)"
        )
